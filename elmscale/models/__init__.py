"""The estimators, one module per family, the registry that describes them (``registry``),
and the worker-side functions they fan out (no scikit-learn in those)."""
