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

from elmscale.core import compile_cache as _compile_cache
from elmscale.core.errors import DataError as DataError
from elmscale.core.errors import ModelFileError as ModelFileError

# numba's cache of the compiled kernels: ELMSCALE_CACHE_DIR, a NUMBA_CACHE_DIR, the
# package's __pycache__, or a user cache folder where the package is read-only, each
# checked to be this user's alone (elmscale/core/compile_cache.py).  Before any elmscale
# module imports numba; core/jit.py, which does, then puts there the kernels a wheel
# carries compiled for this CPU (elmscale/core/carried_kernels.py).
_compile_cache.configure()

# The estimators (and scikit-learn, which they import: 1.6 s here) load on first use,
# so that a Ray or Dask worker running elmscale's numerics starts without them.
_LAZY = {
    "ELMClassifier": "elmscale.models.elm",
    "ELMRegressor": "elmscale.models.elm",
    "ConcatenatedLayers": "elmscale.features.layers",
    "HiddenLayer": "elmscale.features.layers",
    "Kernel": "elmscale.features.kernels",
    "ParquetDataset": "elmscale.data.parquet",
    "open_parquet": "elmscale.data.parquet",
    "load": "elmscale.io.model_files",
    "save": "elmscale.io.model_files",
    "to_onnx": "elmscale.io.onnx_export",
    "SparseELMClassifier": "elmscale.models.sparse_elm",
    "FLSASVMClassifier": "elmscale.models.flsa_svm",
    "FLSASVMRegressor": "elmscale.models.flsa_svm",
    "FELMClassifier": "elmscale.models.felm",
    "FKELMClassifier": "elmscale.models.felm",
    **{
        f"{ensemble}{task}": "elmscale.models.boosting_ridge"
        for ensemble in ("BRELM", "GBRELM", "GGBRELM", "KBRELM")
        for task in ("Classifier", "Regressor")
    },
}
# Modules reached as attributes (``from elmscale import dataplane``).
_LAZY_MODULES = {"dataplane": "elmscale.dataplane"}


def __getattr__(name):
    from importlib import import_module

    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
    elif name in _LAZY_MODULES:
        value = import_module(_LAZY_MODULES[name])
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | set(_LAZY_MODULES))


# Every lazily loaded name, the errors and the version: derived, so that a name added to
# _LAZY is public (``from elmscale import *``, ``help(elmscale)``, documentation tools) and
# the registry's estimators cannot be left out (tests/test_public_api.py).
__all__ = sorted([*_LAZY, *_LAZY_MODULES, "DataError", "ModelFileError", "__version__"])
