"""What a worker computes on one work unit: pure functions, no cluster inside.

Each function takes a :class:`~elmscale.data.parquet.WorkUnit` and small descriptions
(a feature map's ``to_dict()``, a kernel's parameters), reads the unit's rows itself,
caps BLAS and numba threads for the task (``n_threads``, default 1: one task per worker
thread), and returns a small result.  The same functions run in the calling process
(no client), on Dask workers and in Ray tasks (``elmscale.distributed.executors``).
Nothing here imports scikit-learn, Dask or Ray: a fresh worker starts fast.

* :func:`unit_gram`: the :class:`~elmscale.linalg.gram.Gram` (``H'H``, ``H'Y``) of the
  unit, optionally per cross-validation fold.  ``Y`` holds one indicator column per class
  present in the unit (classification: the ``one_of_j`` coding) or the target values
  (regression); the Grams of units add up whatever classes each unit saw
  (``Gram.combine``), and ``Gram.ridge_terms(encoder)`` turns the sum into the ``H'T`` of
  the estimator's targets (+1 / -1 for the unified ELM).
* :func:`unit_column_stats`: rows, classes and per-column minima and maxima (a scaler).
* :func:`unit_kernel_rows` and :func:`unit_kernel_matvec`: ``K(unit rows, points)`` or
  ``K(unit rows, points) @ coef``.
* :func:`unit_method`: a fitted model's ``predict`` or ``decision_function`` on the unit's
  rows; :func:`unit_fold_scores`: validation results of a C path per fold.

Cross-validation folds are a function of the global row number (a hash with a seed), so
they do not depend on how the rows are cut into units.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from elmscale.core.pipelines import final_estimator
from elmscale.core.seeding import GAMMA, mix64
from elmscale.core.threads import thread_budget
from elmscale.data.parquet import WorkUnit, column_extremes
from elmscale.features.base import DEFAULT_BLOCK_ROWS, feature_map_from_dict, iter_row_blocks
from elmscale.features.kernels import Kernel
from elmscale.linalg.gram import Gram, accumulate_gram
from elmscale.linalg.targets import TargetEncoder, merge_classes
from elmscale.solvers.forward_selection import CandidateGram, candidate_gram, residual_sums

__all__ = [
    "ColumnStats",
    "add_arrays",
    "fold_of_rows",
    "metric_sums",
    "metrics_from_sums",
    "unit_column_stats",
    "unit_fold_scores",
    "unit_gram",
    "unit_kernel_matvec",
    "unit_kernel_rows",
    "unit_method",
    "unit_metric_sums",
    "unit_residual_sums",
    "unit_rows",
]

TARGET_KINDS = ("classes", "values")


def fold_of_rows(start: int, n_rows: int, n_folds: int, seed: int = 0) -> np.ndarray:
    """Fold (0 .. n_folds - 1) of global rows ``start .. start + n_rows``: splitmix64 of
    (row, seed), so any cut of the rows into units gives every row the same fold."""
    z = np.arange(start, start + n_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(seed) * np.uint64(GAMMA) + np.uint64(GAMMA)
    return (mix64(z) % np.uint64(n_folds)).astype(np.int64)


def add_arrays(*parts: np.ndarray) -> np.ndarray:
    """The sum of the parts (a ``combine`` for
    :func:`elmscale.distributed.executors.reduce_units`)."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


@dataclass
class ColumnStats:
    """Rows, per-column minima and maxima, and the classes with their row counts."""

    n_rows: int
    col_min: np.ndarray
    col_max: np.ndarray
    classes: np.ndarray
    class_counts: np.ndarray

    def __sizeof__(self) -> int:  # the arrays' bytes, as Gram's (Dask's sizeof)
        arrays = (self.col_min, self.col_max, self.classes, self.class_counts)
        return object.__sizeof__(self) + sum(a.nbytes for a in arrays)

    @classmethod
    def combine(cls, *parts: ColumnStats) -> ColumnStats:
        classes, where = merge_classes(*(p.classes for p in parts))
        counts = np.zeros(classes.size, dtype=np.int64)
        for p, pos in zip(parts, where):
            np.add.at(counts, pos, p.class_counts)
        return cls(
            sum(p.n_rows for p in parts),
            np.minimum.reduce([p.col_min for p in parts]),
            np.maximum.reduce([p.col_max for p in parts]),
            classes,
            counts,
        )


def _labels_of(y, unit: WorkUnit) -> np.ndarray:
    if y is None:
        raise ValueError(
            f"{unit.pieces[0][0]}: the data set has no label column; expected labels for fitting"
        )
    return y


def unit_column_stats(unit: WorkUnit, *, n_threads: int = 1) -> ColumnStats:
    """Row count, raw column minima / maxima and class counts of one unit (before scaling)."""
    with thread_budget(n_threads):
        raw = replace(unit, scale=None, shift=None)
        X, y = raw.read()
        if y is None:
            classes, counts = np.empty(0), np.empty(0, dtype=np.int64)
        else:
            classes, counts = np.unique(y, return_counts=True)
        return ColumnStats(unit.n_rows, *column_extremes(X), classes, counts)


def unit_gram(
    unit: WorkUnit,
    layer: dict,
    *,
    targets: str = "classes",
    n_folds: int = 1,
    fold_seed: int = 0,
    precision: str = "double",
    block_rows: int = DEFAULT_BLOCK_ROWS,
    n_threads: int = 1,
) -> Gram:
    """The :class:`~elmscale.linalg.gram.Gram` (``H'H``, ``H'Y``; per fold when ``n_folds``
    > 1) of one unit's rows.

    ``layer`` is a feature map's ``to_dict()`` (a ``HiddenLayer``, ``ConcatenatedLayers``,
    ...), rebuilt here from its seed.  ``targets``: "classes" (the indicators of the unit's
    classes) or "values".
    """
    if targets not in TARGET_KINDS:
        raise ValueError(f"targets must be one of {TARGET_KINDS}; got {targets!r}")
    with thread_budget(n_threads):
        X, y = unit.read()
        encoder, Y = TargetEncoder("one_of_j" if targets == "classes" else "values").fit_transform(
            _labels_of(y, unit)
        )
        folds = None if n_folds == 1 else fold_of_rows(unit.start, unit.n_rows, n_folds, fold_seed)
        return accumulate_gram(
            feature_map_from_dict(layer),
            X,
            Y,
            classes=encoder.classes,
            folds=folds,
            n_folds=n_folds,
            precision=precision,
            block_rows=block_rows,
        )


def unit_rows(unit: WorkUnit, *, n_threads: int = 1) -> tuple[np.ndarray, np.ndarray | None]:
    """The unit's rows ``(X float32, y)`` (to gather a small data set on the coordinator)."""
    with thread_budget(n_threads):
        return unit.read()


def unit_rows_at(unit: WorkUnit, rows: np.ndarray, *, n_threads: int = 1) -> np.ndarray:
    """The unit's rows among the data set's row numbers ``rows`` (sorted), float32, in
    order (a candidate pool read from where the rows live)."""
    with thread_budget(n_threads):
        lo, hi = np.searchsorted(rows, [unit.start, unit.start + unit.n_rows])
        if lo == hi:
            return np.empty((0, unit.n_features), dtype=np.float32)
        X, _ = unit.read(with_labels=False)
        return X[rows[lo:hi] - unit.start]


def unit_candidate_gram(
    unit: WorkUnit,
    points: np.ndarray,
    kernel: dict,
    encoder: TargetEncoder,
    *,
    n_threads: int = 1,
) -> CandidateGram:
    """The :class:`~elmscale.solvers.forward_selection.CandidateGram` of the unit's rows
    against the candidate rows ``points``, its labels coded by ``encoder`` (forward
    selection in the candidates' space: the sums over every unit are the data set's)."""
    with thread_budget(n_threads):
        X, y = unit.read()
        T = encoder.transform(_labels_of(y, unit))
        T = np.asarray(T, dtype=np.float64).reshape(len(X), -1)
        return candidate_gram(Kernel.from_dict(kernel), X, points, T)


def unit_residual_sums(
    unit: WorkUnit,
    points: np.ndarray,
    coef: np.ndarray,
    intercept: np.ndarray,
    kernel: dict,
    encoder: TargetEncoder,
    *,
    n_threads: int = 1,
) -> np.ndarray:
    """:func:`~elmscale.solvers.forward_selection.residual_sums` of the unit's rows, its
    labels coded by ``encoder``: a kernel model's squared training residual, per column."""
    with thread_budget(n_threads):
        X, y = unit.read()
        T = encoder.transform(_labels_of(y, unit))
        return residual_sums(Kernel.from_dict(kernel), X, T, points, coef, intercept)


def unit_kernel_rows(
    unit: WorkUnit, points: np.ndarray, kernel: dict, *, n_threads: int = 1
) -> np.ndarray:
    """``K(unit rows, points)``, float64 ``(unit.n_rows, len(points))``."""
    with thread_budget(n_threads):
        X, _ = unit.read(with_labels=False)
        return Kernel.from_dict(kernel).block(X, points, dtype=np.float64)


def unit_kernel_matvec(
    unit: WorkUnit, points: np.ndarray, coef: np.ndarray, kernel: dict, *, n_threads: int = 1
) -> np.ndarray:
    """``K(unit rows, points) @ coef`` without storing the kernel block."""
    with thread_budget(n_threads):
        X, _ = unit.read(with_labels=False)
        return Kernel.from_dict(kernel).block_matvec(X, points, coef)


def unit_method(
    unit: WorkUnit, model, *, method: str = "predict", n_threads: int = 1
) -> np.ndarray:
    """``getattr(model, method)(rows)`` on the unit's rows ("predict", "decision_function").

    The model's own ``n_threads`` applies inside its methods: the caller sets it (see
    ``elmscale.distributed.dataset_ops``).
    """
    with thread_budget(n_threads):
        X, _ = unit.read(with_labels=False)
        return getattr(model, method)(X)


def _is_classifier(model) -> bool:
    """Whether the fitted ``model`` (or a Pipeline's last step) classifies: it has
    ``classes_`` (checked without importing scikit-learn, which workers do not load)."""
    return hasattr(final_estimator(model), "classes_")


def metric_sums(model, X, y) -> np.ndarray:
    """Sums that add up over row blocks: ``[correct, rows]`` for classifiers, ``[squared
    error, sum y, sum y^2, rows]`` for regressors, with k outputs ``[k squared errors, k
    sums, k sums of squares, rows]`` (see :func:`metrics_from_sums`)."""
    pred = model.predict(X)
    if _is_classifier(model):
        return np.array([float(np.sum(pred == y)), float(len(y))])
    y = np.asarray(y, dtype=np.float64)
    pred = np.asarray(pred, dtype=np.float64).reshape(y.shape)
    sums = [np.sum((pred - y) ** 2, axis=0), y.sum(axis=0), np.square(y).sum(axis=0)]
    return np.concatenate([*(np.atleast_1d(v) for v in sums), [float(len(y))]])


def metrics_from_sums(sums: np.ndarray) -> dict:
    """Accuracy (classifiers) or R^2 (regressors) from :func:`metric_sums`."""
    if sums.size == 2:
        return {"accuracy": round(float(sums[0] / sums[1]), 6), "rows": int(sums[1])}
    sse, total, squares = sums[:-1].reshape(3, -1)
    n = sums[-1]
    spread = squares - total**2 / n
    r2 = float(np.mean(1 - sse / spread)) if np.all(spread > 0) else None  # outputs' mean
    return {"r2": None if r2 is None else round(r2, 6), "rows": int(n)}


def unit_metric_sums(unit: WorkUnit, model, *, n_threads: int = 1) -> np.ndarray:
    """:func:`metric_sums` of a fitted model on one unit's labelled rows."""
    with thread_budget(n_threads):
        X, y = unit.read()
        return metric_sums(model, X, _labels_of(y, unit))


def unit_fold_scores(
    unit: WorkUnit,
    layer: dict,
    coefs: np.ndarray,
    encoder: TargetEncoder,
    *,
    n_folds: int,
    fold_seed: int = 0,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    n_threads: int = 1,
) -> np.ndarray:
    """Validation results of a C path for every fold, on one unit's rows.

    ``layer``: a feature map's ``to_dict()``; ``coefs`` ``(n_folds, n_C, L, n_outputs)``: the
    output weights trained without fold k; ``encoder``: the targets' coding (a class coding
    with its classes, or values).  Each row is scored by its own fold's weights.  Returns
    ``(n_folds, n_C)``: the number of correct predictions (class codings) or the sum of
    squared errors (values).
    """
    with thread_budget(n_threads):
        X, y = unit.read()
        y = _labels_of(y, unit)
        feature_map = feature_map_from_dict(layer)
        folds = fold_of_rows(unit.start, unit.n_rows, n_folds, fold_seed)
        k, n_C, L, n_out = coefs.shape
        result = np.zeros((k, n_C))
        if encoder.for_classes:
            truth = encoder.index(y)  # -1: a label the training rows never had (never right)
        else:
            truth = encoder.transform(y)
        wide = np.ascontiguousarray(coefs.transpose(0, 2, 1, 3).reshape(k, L, n_C * n_out))
        buffer = np.empty((min(block_rows, unit.n_rows), L))
        for fold in range(k):
            mine = np.flatnonzero(folds == fold)
            for rows in iter_row_blocks(mine.size, block_rows):
                picked = mine[rows]
                # float64 nodes written straight into one buffer: no widened copies of H
                H = feature_map.transform(X[picked], dtype=np.float64, out=buffer[: picked.size])
                out = (H @ wide[fold]).reshape(picked.size, n_C, n_out)
                if not encoder.for_classes:
                    result[fold] += np.square(out - truth[picked][:, None, :]).sum(axis=(0, 2))
                    continue
                right = encoder.decode(out) == truth[picked][:, None]
                result[fold] += right.sum(axis=0)
        return result
