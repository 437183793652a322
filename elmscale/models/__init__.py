"""The estimators, one module per family (described to the commands by ``elmscale.registry``),
and the worker-side functions they fan out (no scikit-learn in those)."""
