"""Every Python and shell block on the guide pages (``docs/guide/*.md``,
``docs/getting-started.md``) and ``cluster/README.md`` runs as written, as a reader would
run it: the page's blocks in page order, in a fresh empty folder.

The conventions the pages follow:

* **What runs.** Fenced blocks whose info string is ``python``, ``bash``, ``sh``,
  ``shell`` or ``console`` (in a ``console`` block only the ``$ `` lines run, the others
  are output).  Other fences (``toml``, ``text``) are shown, not run; a ``python`` block
  that only includes a file (``--8<-- "docs/examples/x.py"``) is run by
  ``tests/test_docs_examples.py``, not here.
* **Commands are fenced.**  A shell command a reader should run goes in a fenced
  ``bash`` block; 4-space-indented blocks are formulas and synopses, never run.  A usage
  synopsis with placeholders (``elmscale score MODEL INPUT OUTPUT``) goes in a ``text``
  fence.  The test fails on an indented line that starts with a command
  (``elmscale``, ``python``, ``pip``, ``dask``, ``ray``, ...), so no command escapes it.
* **How it runs.**  Consecutive ``python`` blocks are concatenated into one script, written
  to a file and run with this interpreter (``python page.py``: a script that starts a
  ``LocalCluster`` keeps its ``if __name__ == "__main__":`` guard); each shell block runs
  with ``bash -e`` with this virtual environment's ``bin`` first on ``PATH``.  The folder
  is a fresh empty one, so each page makes the data its blocks read (``elmscale demo``,
  ``generate_classification`` + ``write_parquet``), except: a page that names
  ``pipelines/`` or ``docs/examples/`` ("from a clone of the repository") finds copies of
  those folders there.
* **Object stores.**  A page that names ``s3://`` runs against the tests' local S3 server
  (``s3_server``, moto): ``AWS_ENDPOINT_URL`` and dummy credentials are in the blocks'
  environment and an empty bucket ``my-bucket`` exists; the page writes what it reads.
* **Public data.**  A page whose blocks call ``fetch_public`` (the example pipelines'
  public files) runs with ``ELMSCALE_DATA_MIRROR`` set to the shared data folder
  (``_datasets``; ``needs_shared``, skipped without it): no network.
* **Blocks that cannot run here** carry, on the line just before their fence, an HTML
  comment (invisible on the site)::

      <!-- docs-test: skip: needs a remote TLS scheduler (tests/test_tls.py runs this) -->

  Only blocks that need a remote machine (or run a paper's whole protocol for hours)
  carry one, and a block that repeats at full size the command the page's block before it
  runs smaller (``boosting-ridge.md``: its 2M-row pipeline, 211 s on a loaded 2-core host,
  runs on 100,000 rows with ``--set data.generate=...``); the test reports each as skipped
  with its reason, after running the rest.

One test per page, so a failure names the page; every process has a timeout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [
    ROOT / "docs" / "getting-started.md",
    *sorted((ROOT / "docs" / "guide").glob("*.md")),
    ROOT / "cluster" / "README.md",
]
RUN = {"python": "python", "bash": "bash", "sh": "bash", "shell": "bash", "console": "console"}
SKIP = re.compile(r"^<!--\s*docs-test:\s*skip:\s*(?P<reason>.+?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<fence>```+|~~~+)\s*(?P<info>[\w+-]*)")
#: an indented line that starts with one of these is a command outside a fence
COMMAND = re.compile(r"^ {4}(\$ )?(elmscale|python3?|pip|\.venv/|dask|ray|export|bash|cd) ")
#: the seconds one script or shell block may take
TIMEOUT = 480  # a loaded 2-core host stretches a page's Dask or Ray start-up several times


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, 1-based
    kind: str  # "python" or "bash"
    text: str
    skip: str | None  # the reason, or None: it runs

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The page's runnable blocks, in order (skipped ones included, with their reason)."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, info, start = match["fence"], match["info"].lower(), i
        body = []
        i += 1
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        kind = RUN.get(info)
        if kind is None or any(line.lstrip().startswith("--8<--") for line in body):
            continue
        if kind == "console":
            kind = "bash"
            body = [line[2:] for line in body if line.startswith("$ ")]
        previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        skip = SKIP.match(previous.strip())
        found.append(Block(page, start + 1, kind, "\n".join(body) + "\n", skip and skip["reason"]))
    return found


def indented_commands(page: Path) -> list[str]:
    """Lines outside fences, indented 4 spaces, that start with a command."""
    bad, fence = [], None
    for number, line in enumerate(page.read_text().splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match["fence"]
        elif fence is not None and line.startswith(fence):
            fence = None
        elif fence is None and COMMAND.match(line):
            bad.append(f"{page.relative_to(ROOT)}:{number}: {line.strip()}")
    return bad


def _env(tmp: Path) -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join((str(Path(sys.executable).parent), env.get("PATH", "")))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    env["MPLBACKEND"] = "Agg"
    env["HOME"] = str(tmp / "home")  # nothing of the reader's or the runner's own
    (tmp / "home").mkdir()
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    return env


def _run(argv: list[str], where: str, cwd: Path, env: dict) -> None:
    try:
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT
        )
    except subprocess.TimeoutExpired as error:
        out = (error.stdout or b"")[-3000:], (error.stderr or b"")[-3000:]
        pytest.fail(f"{where}: still running after {TIMEOUT} s\n{out[0]!r}\n{out[1]!r}")
    assert done.returncode == 0, (
        f"{where}: exit {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-6000:]}"
    )


def test_the_pages_have_blocks():
    assert sum(len(blocks(page)) for page in PAGES) >= 15


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_commands_are_in_fenced_blocks(page):
    assert not indented_commands(page), (
        "shell commands go in fenced ```bash blocks (indented blocks are never run):\n"
        + "\n".join(indented_commands(page))
    )


def _reads_public_files(page: Path) -> bool:
    """Whether the page's blocks read the registered public files (``fetch_public``)."""
    return "fetch_public(" in page.read_text()


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    "page",
    [
        pytest.param(p, marks=pytest.mark.needs_shared) if _reads_public_files(p) else p
        for p in PAGES
    ],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_page_blocks_run(page, tmp_path, request):
    found = blocks(page)
    if not found:
        pytest.skip(f"{page.relative_to(ROOT)} has no Python or shell block")
    cwd = tmp_path / "work"
    cwd.mkdir()
    env = _env(tmp_path)
    text = page.read_text()
    for folder in ("pipelines", "docs/examples"):
        if f"{folder}/" in text:
            shutil.copytree(ROOT / folder, cwd / folder)
    if _reads_public_files(page):
        # no network: the shared data folder is the mirror of the public files, and the
        # cache is the fresh HOME's ~/elmscale_data
        from _datasets import shared_data

        env["ELMSCALE_DATA_MIRROR"] = str(shared_data())
        env.pop("ELMSCALE_DATA", None)
    if "s3://" in text:
        server = request.getfixturevalue("s3_server")
        fs = server.filesystem()
        if not fs.exists("my-bucket"):
            fs.call_s3("create_bucket", Bucket="my-bucket")
        env.update(
            AWS_ENDPOINT_URL=server.endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
        )
        env.pop("AWS_SESSION_TOKEN", None)
        env.pop("AWS_PROFILE", None)

    skipped = [f"{b.where}: {b.skip}" for b in found if b.skip]
    runnable = [b for b in found if not b.skip]
    i = 0
    while i < len(runnable):
        block = runnable[i]
        if block.kind == "bash":
            script = tmp_path / f"block{block.line}.sh"
            script.write_text(block.text)
            _run(["bash", "-e", str(script)], block.where, cwd, env)
            i += 1
            continue
        group = [block]
        while i + len(group) < len(runnable) and runnable[i + len(group)].kind == "python":
            group.append(runnable[i + len(group)])
        script = tmp_path / f"{page.stem}_{block.line}.py"
        script.write_text("\n\n".join(f"# {b.where}\n{b.text}" for b in group))
        where = ", ".join(b.where for b in group)
        _run([sys.executable, str(script)], where, cwd, env)
        i += len(group)
    if skipped:
        pytest.skip(f"ran {len(runnable)} block(s); skipped " + "; ".join(skipped))
