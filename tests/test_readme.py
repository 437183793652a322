"""The Python snippets of the README and of the documentation's pages run as written,
with a few explicit stand-ins.

Each ```python block of README.md and of docs/**/*.md (but the pages that
tests/test_docs_blocks.py runs as written) runs in a fresh interpreter
(working directory a temporary folder, this checkout's elmscale first on the path) after
the replacements its entry in STAND_INS lists (``../shared`` becomes the tests' shared
folder; the pages that needed a cluster or a store run as written, against the session's
local ones, in tests/test_docs_blocks.py).  Every replacement
must find its text exactly as often as listed, and every block must have an entry (and
every entry a block): a page that changes fails here until this file follows it, so
that a snippet that stops working cannot pass unnoticed.  A block that only includes a
file (``--8<-- "docs/examples/x.py"``, the family pages' worked examples) is that file,
run by tests/test_docs_examples.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the guide pages and getting-started run as written, with no stand-ins, in
# tests/test_docs_blocks.py; the README and the other pages' blocks run here
RUN_AS_WRITTEN = {ROOT / "docs" / "getting-started.md", *(ROOT / "docs" / "guide").glob("*.md")}
PAGES = [
    README,
    *(p for p in sorted((ROOT / "docs").rglob("*.md")) if p not in RUN_AS_WRITTEN),
]
SNIPPET = re.compile(r'^--8<-- "[^"]+"$')


def _blocks(pages) -> list[str]:
    """The ```python blocks of the pages, but those that only include a file."""
    found = []
    for page in pages:
        for block in re.findall(r"^```python\n(.*?)^```$", page.read_text(), flags=re.M | re.S):
            lines = [line for line in block.splitlines() if line.strip()]
            if not all(SNIPPET.match(line) for line in lines):
                found.append(block)
    return found


BLOCKS = _blocks(PAGES)


@dataclass
class StandIn:
    """What one python block needs to run here."""

    needle: str  # text that identifies the block
    # old text -> (new text, occurrences); "{name}" in the new text is filled in by the test
    replace: dict = field(default_factory=dict)
    expects: tuple = ()  # text the test's set-up relies on (the data it writes, names)
    prelude: str = ""  # names the page leaves to the reader
    creates: tuple = ()  # files the block must write
    shared: bool = False  # reads ../shared


STAND_INS = {
    "readme-families": StandIn(
        needle="GGBRELMRegressor(n_estimators=10",
        expects=('elmscale.save(sparse, "model.elm")',),
        creates=("model.elm",),
    ),
    "registry": StandIn(needle="from elmscale.registry import"),
}


def _entry(block: str) -> str:
    found = [name for name, spec in STAND_INS.items() if spec.needle in block]
    assert len(found) == 1, (
        f"python block matches stand-ins {found} (expected one; blocks of "
        f"README.md and docs/**/*.md): give it an entry in tests/test_readme.py\n{block}"
    )
    return found[0]


def _params():
    params = []
    for i, block in enumerate(BLOCKS):
        names = [n for n, spec in STAND_INS.items() if spec.needle in block]
        marks = [pytest.mark.needs_shared] if any(STAND_INS[n].shared for n in names) else []
        params.append(
            pytest.param(block, id=f"block{i + 1}-{'-'.join(names) or 'unknown'}", marks=marks)
        )
    return params


def test_every_stand_in_has_its_readme_block():
    assert _blocks([README]), f"no ```python block found in {README}"
    used = {_entry(block) for block in BLOCKS}
    assert used == set(STAND_INS), f"no python block for {sorted(set(STAND_INS) - used)}"


@pytest.mark.timeout(600)
@pytest.mark.parametrize("block", _params())
def test_readme_python_block_runs(block, tmp_path, request):
    spec = STAND_INS[_entry(block)]
    values = {}
    if spec.shared:
        from _datasets import shared_path

        values["shared"] = shared_path().as_posix()
    for text in spec.expects:
        assert text in block, f"the python block no longer has {text!r}:\n{block}"
    source = block
    for old, (new, count) in spec.replace.items():
        found = source.count(old)
        assert found == count, (
            f"{old!r} found {found} times in the python block, expected "
            f"{count}: update tests/test_readme.py\n{block}"
        )
        source = source.replace(old, new.format(**values))
    (tmp_path / "snippet.py").write_text(spec.prelude + source)
    env = {
        k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "DASK_SCHEDULER_ADDRESS")
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env["MPLBACKEND"] = "Agg"
    run = subprocess.run(
        [sys.executable, "snippet.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"{source}\n-- stdout:\n{run.stdout}\n-- stderr:\n{run.stderr}"
    for name in spec.creates:
        assert (tmp_path / name).is_file(), f"the snippet did not write {name}"
