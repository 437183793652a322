"""Test-session settings.  Data helpers: ``_datasets.py`` (../shared/data), ``_problems.py``."""

import os

# scikit-learn's estimator checks include an array-API check that runs only
# when SciPy's array API support is on; it must be set before SciPy loads.
os.environ.setdefault("SCIPY_ARRAY_API", "1")
