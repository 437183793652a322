"""Where the shared benchmark files live, for tests that read them.

The shared folder sits beside the project (``../shared`` from the project root: data sets
in ``data/``, the papers' tables in ``reference/``) and nothing in it is copied into the
project.  ``ELMSCALE_SHARED`` points the tests at another folder (CI sets it to a path that
does not exist to check that these tests skip cleanly without it).

Every read goes through :func:`shared_path` (or :func:`shared_data` for ``data/``), which
skips the test, saying why, only when the shared folder itself is absent: a missing file
inside it is a failure.  A test that reads it must be marked ``needs_shared``
(``@pytest.mark.needs_shared``); the helper fails a test that is not, so that the
``-m needs_shared`` selection stays complete.  Nothing here reads the folder at import.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ENV = "ELMSCALE_SHARED"
DEFAULT_SHARED = Path(__file__).resolve().parents[2] / "shared"
MARK = "needs_shared"
SKIP_REASON = "shared folder absent"

# The test being run, set by conftest.py (None outside pytest, e.g. in benchmarks/).
current_test = None


def shared_root() -> Path:
    """The shared folder: ``$ELMSCALE_SHARED`` when set, else ``../shared``."""
    value = os.environ.get(ENV)
    return Path(value) if value else DEFAULT_SHARED


def shared_path(*parts: str) -> Path:
    """Path of a file under the shared folder; skips the test if the folder is absent."""
    root = shared_root()
    item = current_test
    if item is not None and item.get_closest_marker(MARK) is None:
        pytest.fail(
            f"{item.nodeid} reads {root.joinpath(*parts)} but is not marked "
            f"{MARK}: add @pytest.mark.{MARK} to it",
            pytrace=False,
        )
    if not root.is_dir():
        pytest.skip(f"{SKIP_REASON}: {root} does not exist (set {ENV} to use another)")
    return root.joinpath(*parts)


def shared_data(*parts: str) -> Path:
    """Path of a file under the shared folder's ``data/``; skips as :func:`shared_path`."""
    return shared_path("data", *parts)
