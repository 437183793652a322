"""What a worker computes on one work unit: pure functions, no cluster inside.

Each function takes a :class:`~elmscale.parquet_units.WorkUnit` and small descriptions
(a hidden layer's ``to_dict()``, a kernel's parameters), reads the unit's rows itself,
caps BLAS and numba threads for the task (``n_threads``, default 1: one task per worker
thread), and returns a small result.  The same functions run in the calling process
(no client), on Dask workers and in Ray tasks (``elmscale.executors``).

* :func:`unit_gram`: ``H'H`` and ``H'Y`` of the unit, optionally per cross-validation
  fold, with row counts per class and the column minima and maxima.  ``Y`` holds one
  indicator column per class present in the unit (classification) or the target values
  (regression); :class:`UnitGram` results add up whatever classes each unit saw, and
  :meth:`UnitGram.gram_stats` turns the sum into the ``GramStats`` of the ELM's +1 / -1
  targets.
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
from elmscale.core.threads import thread_budget
from elmscale.data.parquet import WorkUnit
from elmscale.features.base import DEFAULT_BLOCK_ROWS, iter_row_blocks
from elmscale.features.kernels import Kernel
from elmscale.features.layers import layer_from_dict
from elmscale.linalg.gram import GramStats, accumulate_gram

__all__ = ["ColumnStats", "UnitGram", "add_arrays", "fold_of_rows", "unit_column_stats", "unit_method",
           "metric_sums", "metrics_from_sums", "unit_fold_scores", "unit_gram", "unit_metric_sums", "unit_kernel_matvec", "unit_kernel_rows", "unit_rows"]

TARGET_KINDS = ("classes", "values")


def fold_of_rows(start: int, n_rows: int, n_folds: int, seed: int = 0) -> np.ndarray:
    """Fold (0 .. n_folds - 1) of global rows ``start .. start + n_rows``: splitmix64 of
    (row, seed), so any cut of the rows into units gives every row the same fold."""
    z = np.arange(start, start + n_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(n_folds)).astype(np.int64)


def add_arrays(*parts: np.ndarray) -> np.ndarray:
    """The sum of the parts (a ``combine`` for :func:`elmscale.executors.reduce_units`)."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


def _merge_classes(parts, attr: str) -> tuple[np.ndarray, list[np.ndarray]]:
    """The union of the parts' classes, and for each part its columns' positions in it."""
    classes = np.unique(np.concatenate([getattr(p, attr) for p in parts]))
    return classes, [np.searchsorted(classes, getattr(p, attr)) for p in parts]


@dataclass
class ColumnStats:
    """Rows, per-column minima and maxima, and the classes with their row counts."""

    n_rows: int
    col_min: np.ndarray
    col_max: np.ndarray
    classes: np.ndarray
    class_counts: np.ndarray

    @classmethod
    def combine(cls, *parts: ColumnStats) -> ColumnStats:
        classes, where = _merge_classes(parts, "classes")
        counts = np.zeros(classes.size, dtype=np.int64)
        for p, pos in zip(parts, where):
            np.add.at(counts, pos, p.class_counts)
        return cls(sum(p.n_rows for p in parts),
                   np.minimum.reduce([p.col_min for p in parts]),
                   np.maximum.reduce([p.col_max for p in parts]), classes, counts)

    def scaler(self, feature_range=(-1, 1)):
        """The paper's [-1, 1] scaler fitted on these statistics."""
        from elmscale.data.scaling import Scaler

        return Scaler.from_stats(self.col_min, self.col_max, feature_range,
                                 n_samples_seen=self.n_rows)


def _labels_of(y, unit: WorkUnit) -> np.ndarray:
    if y is None:
        raise ValueError(f"{unit.pieces[0][0]}: the data set has no label column; expected "
                         "labels for fitting")
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
        return ColumnStats(unit.n_rows, X.min(axis=0).astype(np.float64),
                           X.max(axis=0).astype(np.float64), classes, counts)


@dataclass
class UnitGram:
    """``H'H`` and ``H'Y`` per fold, summed over any number of units.

    ``HtH`` ``(k, L, L)``, ``HtY`` ``(k, L, c)``, ``YtY`` ``(k, c)`` (sums of squared
    targets), ``counts`` ``(k, c)`` (rows per class; for values, rows) and ``n_rows``
    ``(k,)``, with k the number of folds (1 without cross-validation).  For classes,
    column j of ``Y`` is the indicator of ``classes[j]``.
    """

    HtH: np.ndarray
    HtY: np.ndarray
    YtY: np.ndarray
    counts: np.ndarray
    n_rows: np.ndarray
    classes: np.ndarray | None
    col_min: np.ndarray
    col_max: np.ndarray

    @classmethod
    def combine(cls, *parts: UnitGram) -> UnitGram:
        """The statistics of all the parts' rows (classes merged by value)."""
        first = parts[0]
        HtH = first.HtH.copy()
        for p in parts[1:]:
            HtH += p.HtH
        if first.classes is None:
            HtY, YtY, counts = (sum(getattr(p, name) for p in parts)
                                for name in ("HtY", "YtY", "counts"))
            classes = None
        else:
            classes, where = _merge_classes(parts, "classes")
            k, L = first.HtH.shape[:2]
            HtY = np.zeros((k, L, classes.size))
            YtY = np.zeros((k, classes.size))
            counts = np.zeros((k, classes.size), dtype=np.int64)
            for p, pos in zip(parts, where):
                HtY[:, :, pos] += p.HtY
                YtY[:, pos] += p.YtY
                counts[:, pos] += p.counts
        return cls(HtH, HtY, YtY, counts, sum(p.n_rows for p in parts), classes,
                   np.minimum.reduce([p.col_min for p in parts]),
                   np.maximum.reduce([p.col_max for p in parts]))

    @property
    def n_folds(self) -> int:
        return self.HtH.shape[0]

    def _encode(self, HtY: np.ndarray, counts: np.ndarray, YtY: np.ndarray):
        """``H'T`` and ``T'T`` for the ELM's targets (classes: +1 / -1 columns)."""
        if self.classes is None:
            return HtY, YtY
        n = counts.sum()
        if self.classes.size == 2:  # one output: +1 for classes[1], -1 for classes[0]
            return (HtY[:, 1] - HtY[:, 0])[:, None], np.array([float(n)])
        return 2.0 * HtY - HtY.sum(axis=1, keepdims=True), np.full(self.classes.size, float(n))

    def gram_stats(self, exclude_fold: int | None = None) -> tuple[GramStats, np.ndarray]:
        """``GramStats`` (``H'H``, ``H'T``, rows) of every fold but ``exclude_fold`` (all
        rows when None), and the targets' ``T'T`` per output column."""
        keep = np.ones(self.n_folds, dtype=bool)
        if exclude_fold is not None:
            keep[exclude_fold] = False
        HtT, TtT = self._encode(self.HtY[keep].sum(axis=0), self.counts[keep].sum(axis=0),
                                self.YtY[keep].sum(axis=0))
        return GramStats(self.HtH[keep].sum(axis=0), HtT, int(self.n_rows[keep].sum())), TtT

    def fold_stats(self, fold: int) -> tuple[GramStats, np.ndarray]:
        """``GramStats`` and ``T'T`` of one fold's rows only (its validation part)."""
        HtT, TtT = self._encode(self.HtY[fold], self.counts[fold], self.YtY[fold])
        return GramStats(self.HtH[fold], HtT, int(self.n_rows[fold])), TtT


def _targets(y: np.ndarray, targets: str):
    """``(Y, classes, counts-per-column)`` of one unit."""
    if targets == "classes":
        classes, index = np.unique(y, return_inverse=True)
        Y = np.zeros((y.size, classes.size))
        Y[np.arange(y.size), index] = 1.0
        return Y, classes
    try:
        values = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"regression targets must be numbers; got {y.dtype} labels") from exc
    if not np.isfinite(values).all():
        raise ValueError("regression targets hold NaN or infinity; expected finite numbers")
    return values.reshape(len(values), -1), None


def unit_gram(unit: WorkUnit, layer: dict, *, targets: str = "classes", n_folds: int = 1,
              fold_seed: int = 0, precision: str = "double",
              block_rows: int = DEFAULT_BLOCK_ROWS, n_threads: int = 1) -> UnitGram:
    """``H'H``, ``H'Y`` (per fold when ``n_folds`` > 1) of one unit's rows.

    ``layer`` is a ``HiddenLayer.to_dict()`` (or a ``ConcatenatedLayers`` one), rebuilt
    here from its seed.  ``targets``: "classes" (indicator columns) or "values".
    """
    if targets not in TARGET_KINDS:
        raise ValueError(f"targets must be one of {TARGET_KINDS}; got {targets!r}")
    with thread_budget(n_threads):
        X, y = unit.read()
        Y, classes = _targets(_labels_of(y, unit), targets)
        hidden = layer_from_dict(layer)
        folds = (np.zeros(unit.n_rows, dtype=np.int64) if n_folds == 1
                 else fold_of_rows(unit.start, unit.n_rows, n_folds, fold_seed))
        L, c = hidden.n_hidden, Y.shape[1]
        HtH, HtY = np.zeros((n_folds, L, L)), np.zeros((n_folds, L, c))
        YtY, counts = np.zeros((n_folds, c)), np.zeros((n_folds, c), dtype=np.int64)
        n_rows = np.zeros(n_folds, dtype=np.int64)
        for k in range(n_folds):
            rows = slice(None) if n_folds == 1 else folds == k
            Xk, Yk = X[rows], Y[rows]
            if len(Xk):
                stats = accumulate_gram(hidden, Xk, Yk, precision=precision,
                                        block_rows=block_rows)
                HtH[k], HtY[k] = stats.HtH, stats.HtT
            YtY[k] = np.square(Yk).sum(axis=0)
            counts[k] = Yk.sum(axis=0) if classes is not None else len(Yk)
            n_rows[k] = len(Xk)
        return UnitGram(HtH, HtY, YtY, counts, n_rows, classes,
                        X.min(axis=0).astype(np.float64), X.max(axis=0).astype(np.float64))


def unit_rows(unit: WorkUnit, *, n_threads: int = 1) -> tuple[np.ndarray, np.ndarray | None]:
    """The unit's rows ``(X float32, y)`` (to gather a small data set on the coordinator)."""
    with thread_budget(n_threads):
        return unit.read()


def unit_kernel_rows(unit: WorkUnit, points: np.ndarray, kernel: dict, *,
                     n_threads: int = 1) -> np.ndarray:
    """``K(unit rows, points)``, float64 ``(unit.n_rows, len(points))``."""
    with thread_budget(n_threads):
        X, _ = unit.read(with_labels=False)
        return Kernel.from_dict(kernel).block(X, points, dtype=np.float64)


def unit_kernel_matvec(unit: WorkUnit, points: np.ndarray, coef: np.ndarray, kernel: dict, *,
                       n_threads: int = 1) -> np.ndarray:
    """``K(unit rows, points) @ coef`` without storing the kernel block."""
    with thread_budget(n_threads):
        X, _ = unit.read(with_labels=False)
        return Kernel.from_dict(kernel).block_matvec(X, points, coef)


def unit_method(unit: WorkUnit, model, *, method: str = "predict",
                n_threads: int = 1) -> np.ndarray:
    """``getattr(model, method)(rows)`` on the unit's rows ("predict", "decision_function").

    The model's own ``n_threads`` applies inside its methods: the caller sets it (see
    ``elmscale.dataplane``).
    """
    with thread_budget(n_threads):
        X, _ = unit.read(with_labels=False)
        return getattr(model, method)(X)


def metric_sums(model, X, y) -> np.ndarray:
    """Sums that add up over row blocks: ``[correct, rows]`` for classifiers, ``[squared
    error, sum y, sum y^2, rows]`` for regressors (see :func:`metrics_from_sums`)."""
    from sklearn.base import is_classifier

    pred = model.predict(X)
    if is_classifier(final_estimator(model)):
        return np.array([float(np.sum(pred == y)), float(len(y))])
    y = np.asarray(y, dtype=np.float64)
    return np.array([float(np.sum((pred - y) ** 2)), y.sum(), np.square(y).sum(), len(y)])


def metrics_from_sums(sums: np.ndarray) -> dict:
    """Accuracy (classifiers) or R^2 (regressors) from :func:`metric_sums`."""
    if sums.size == 2:
        return {"accuracy": round(float(sums[0] / sums[1]), 6), "rows": int(sums[1])}
    sse, total, squares, n = sums
    spread = squares - total**2 / n
    return {"r2": round(float(1 - sse / spread), 6) if spread > 0 else None, "rows": int(n)}


def unit_metric_sums(unit: WorkUnit, model, *, n_threads: int = 1) -> np.ndarray:
    """:func:`metric_sums` of a fitted model on one unit's labelled rows."""
    with thread_budget(n_threads):
        X, y = unit.read()
        return metric_sums(model, X, _labels_of(y, unit))


def unit_fold_scores(unit: WorkUnit, layer: dict, coefs: np.ndarray, classes: np.ndarray | None,
                     *, n_folds: int, fold_seed: int = 0, block_rows: int = DEFAULT_BLOCK_ROWS,
                     n_threads: int = 1) -> np.ndarray:
    """Validation results of a C path for every fold, on one unit's rows.

    ``coefs`` ``(n_folds, n_C, L, n_outputs)``: the output weights trained without fold k.
    Each row is scored by its own fold's weights.  Returns ``(n_folds, n_C)``: the number of
    correct predictions (``classes`` given) or the sum of squared errors (regression).
    """
    with thread_budget(n_threads):
        X, y = unit.read()
        y = _labels_of(y, unit)
        hidden = layer_from_dict(layer)
        folds = fold_of_rows(unit.start, unit.n_rows, n_folds, fold_seed)
        k, n_C, L, n_out = coefs.shape
        result = np.zeros((k, n_C))
        if classes is not None:
            truth = np.searchsorted(classes, y)
            known = (truth < classes.size) & (classes[np.minimum(truth, classes.size - 1)] == y)
        else:
            truth = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
        wide = np.ascontiguousarray(coefs.transpose(0, 2, 1, 3).reshape(k, L, n_C * n_out))
        buffer = np.empty((min(block_rows, unit.n_rows), L))
        for fold in range(k):
            mine = np.flatnonzero(folds == fold)
            for rows in iter_row_blocks(mine.size, block_rows):
                picked = mine[rows]
                # float64 nodes written straight into one buffer: no widened copies of H
                H = hidden.transform(X[picked], dtype=np.float64,
                                     out=buffer[: picked.size])
                out = (H @ wide[fold]).reshape(picked.size, n_C, n_out)
                if classes is None:
                    result[fold] += np.square(out - truth[picked][:, None, :]).sum(axis=(0, 2))
                    continue
                guess = (out[:, :, 0] > 0).astype(np.int64) if n_out == 1 else out.argmax(axis=2)
                right = (guess == truth[picked][:, None]) & known[picked][:, None]
                result[fold] += right.sum(axis=0)
        return result
