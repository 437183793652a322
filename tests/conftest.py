"""Shared fixtures: the benchmark data in ../shared/data, small generated problems."""

from __future__ import annotations

import os

# scikit-learn's estimator checks include an array-API check that runs only
# when SciPy's array API support is on; it must be set before SciPy loads.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = PROJECT_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data``; tests that need it skip, saying why, only when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"{SHARED_DATA} is absent: the benchmark data sets live beside the "
                    "project in ../shared/data (CI always has them)")
    return SHARED_DATA
