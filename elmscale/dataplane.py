"""Whole-data-set operations on Parquet data sets, as one public module.

``from elmscale import dataplane`` gives the data plane's operations
(:mod:`elmscale.distributed.dataset_ops`: the scaler's pass, Grams, kernel blocks,
prediction and evaluation of every row, on a Dask cluster or in this process) and the
one-pass cross-validation of a C path (:mod:`elmscale.model_selection.parquet_path`).
"""

from elmscale.distributed.dataset_ops import (
    column_stats,
    decision_function,
    evaluate,
    fit_scaler,
    fold_scores,
    gather_rows,
    gram,
    kernel_matrix,
    predict,
)
from elmscale.model_selection.parquet_path import PathCVResult, cross_validate_path

__all__ = [
    "PathCVResult",
    "column_stats",
    "cross_validate_path",
    "decision_function",
    "evaluate",
    "fit_scaler",
    "fold_scores",
    "gather_rows",
    "gram",
    "kernel_matrix",
    "predict",
]
