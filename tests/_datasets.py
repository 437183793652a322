"""Where the shared benchmark data live, for tests that read them.

The sets sit outside the project (``../shared/data`` from the project root) and are never
copied into it.  Tests that need them call :func:`shared_data`, which skips the test only
when that folder does not exist at all: a missing file inside it is a failure.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_data(*parts: str) -> Path:
    """Path of a file under the shared data folder; skips the test if the folder is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent")
    return SHARED_DATA.joinpath(*parts)
