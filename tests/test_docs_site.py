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


def _documented_parameters(cls) -> set[str]:
    """The names a class's docstring documents as parameters: the ``name : type`` lines
    of its numpydoc Parameters section, or the ``name`` each written in double backquotes
    in a prose "Parameters: ..." paragraph; "Same parameters as ``Other``" adds Other's."""
    import inspect

    doc = inspect.getdoc(cls) or ""
    names = set()
    section = re.search(r"^Parameters\n-+\n(.*?)(?=^\w[\w ]*\n-+\n|\Z)", doc, flags=re.M | re.S)
    if section:
        for line in section.group(1).splitlines():
            head = re.match(r"^(\w+(?:, \w+)*) :", line)
            if head:
                names.update(part.strip() for part in head.group(1).split(","))
    prose = re.search(r"^Parameters: (.*?)(?:\n\n|\Z)", doc, flags=re.M | re.S)
    if prose:
        names.update(re.findall(r"``(\w+)``", prose.group(1)))
    same = re.search(r"Same parameters as ``(\w+)``", doc)
    if same:
        names |= _documented_parameters(getattr(elmscale, same.group(1)))
    return names


def test_every_estimator_documents_every_parameter():
    """The API reference renders the docstrings: a parameter added to an estimator and
    not to its docstring fails here."""
    import inspect

    from sklearn.base import BaseEstimator

    estimators = [
        getattr(elmscale, name)
        for name in elmscale.__all__
        if inspect.isclass(getattr(elmscale, name))
        and issubclass(getattr(elmscale, name), BaseEstimator)
    ]
    assert len(estimators) >= 15
    # the three forms are read: a numpydoc section, a prose list, "Same parameters as"
    assert {"hidden", "C", "probability"} <= _documented_parameters(elmscale.ELMClassifier)
    assert {"psi", "tau"} <= _documented_parameters(elmscale.FKELMClassifier)
    assert {"hidden", "C"} <= _documented_parameters(elmscale.ELMRegressor)
    problems = {}
    for cls in estimators:
        params = set(cls().get_params(deep=False))
        documented = _documented_parameters(cls)
        if params - documented:
            problems[cls.__name__] = f"undocumented {sorted(params - documented)}"
    assert not problems, problems
