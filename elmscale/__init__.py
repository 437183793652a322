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
from .elm import ELMClassifier, ELMRegressor
from .hidden import ConcatenatedLayers, HiddenLayer, Kernel
from .parquet_units import ParquetDataset, open_parquet
from .persistence import load, save
from .sparse_elm import SparseELMClassifier

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
