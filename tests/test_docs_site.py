"""The documentation site's hand-written parts that must follow the code.

The API reference (docs/reference/api.md) has one mkdocstrings entry (``::: module.name``)
for every name of ``elmscale.__all__``, and each entry is the object the package exports
under that name; the README stays a front page.  ``mkdocs build --strict`` (in .ci/run)
checks the links and that every entry resolves; this checks that none is missing.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import elmscale

ROOT = Path(__file__).resolve().parents[1]
API_PAGE = ROOT / "docs" / "reference" / "api.md"
README_MAX_LINES = 150


def _api_entries() -> dict[str, str]:
    """name -> the dotted path of its ``:::`` entry."""
    paths = re.findall(r"^::: ([\w.]+)$", API_PAGE.read_text(), flags=re.M)
    return {path.rsplit(".", 1)[-1]: path for path in paths}


def _resolve(path: str):
    try:
        return importlib.import_module(path)
    except ImportError:
        module, name = path.rsplit(".", 1)
        return getattr(importlib.import_module(module), name)


def test_every_public_name_has_an_api_entry():
    entries = _api_entries()
    # __version__ is a string, said in words on the page
    missing = sorted(set(elmscale.__all__) - set(entries) - {"__version__"})
    assert not missing, f"{API_PAGE} has no '::: module.name' entry for {missing}"
    assert "__version__" in API_PAGE.read_text()
    unknown = sorted(set(entries) - set(elmscale.__all__))
    assert not unknown, f"{API_PAGE} documents names outside elmscale.__all__: {unknown}"


def test_every_api_entry_is_the_exported_object():
    for name, path in _api_entries().items():
        assert _resolve(path) is getattr(elmscale, name), f"{path} is not elmscale.{name}"


def test_the_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines"
    # its first lines are the two commands: the main job and the tests
    head = "\n".join(lines[:12])
    assert "elmscale run pipelines/quickstart.toml" in head
    assert '.venv/bin/pip install -e ".[test]" && .venv/bin/python -m pytest' in head
