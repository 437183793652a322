"""elmscale: Extreme Learning Machines and sparse kernel classifiers at scale.

Estimators follow scikit-learn's conventions; model files are loaded without
pickle (``elmscale.load``).  Importing elmscale starts no cluster.
"""

import os as _os

# numba's OpenMP threads spin after each parallel region by default and then
# starve BLAS threads on a small machine (measured: a 1,000 x 1,000 Cholesky
# 10x slower).  Must be set before the OpenMP runtime loads.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("elmscale")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0+unknown"

from ._errors import DataError, ModelFileError

# The estimators (and scikit-learn, which they import: 1.6 s here) load on first use,
# so that a Ray or Dask worker running elmscale's numerics starts without them.
_LAZY = {
    "ELMClassifier": "elm",
    "ELMRegressor": "elm",
    "ConcatenatedLayers": "hidden",
    "HiddenLayer": "hidden",
    "Kernel": "hidden",
    "ParquetDataset": "parquet_units",
    "open_parquet": "parquet_units",
    "load": "persistence",
    "save": "persistence",
    "SparseELMClassifier": "sparse_elm",
}


def __getattr__(name):
    if name in _LAZY:
        from importlib import import_module

        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "ConcatenatedLayers",
    "DataError",
    "ELMClassifier",
    "ELMRegressor",
    "HiddenLayer",
    "Kernel",
    "ModelFileError",
    "ParquetDataset",
    "SparseELMClassifier",
    "__version__",
    "load",
    "open_parquet",
    "save",
]
