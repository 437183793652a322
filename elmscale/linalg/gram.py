"""The Gram of a feature map and targets, ``H'H`` and ``H'Y``, per fold, block by block.

:class:`Gram` holds, for each of k folds (k = 1 without cross-validation), ``H'H``
``(k, L, L)``, ``H'Y`` ``(k, L, c)``, ``Y'Y`` ``(k, c)`` (sums of squared targets per
column), ``counts`` ``(k, c)`` (rows per class for class indicators, else rows) and
``n_rows`` ``(k,)``; with ``classes`` when the columns of ``Y`` are the indicators of those
classes.  :func:`accumulate_gram` computes it from rows in blocks (a float32 or float64
buffer of ``block_rows`` rows of ``H``); Grams computed anywhere add up
(:meth:`Gram.combine`, classes merged by value), and a cross-validation fold's training
part is :meth:`Gram.total` ``(exclude=k)``, its validation part :meth:`Gram.fold` ``(k)``.
:meth:`Gram.ridge_terms` gives ``H'H``, ``H'T`` and ``T'T`` of a one-fold Gram with the
targets encoded by a :class:`~elmscale.linalg.targets.TargetEncoder`, ready for
``solve_ridge`` / ``ridge_path``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elmscale.features.base import DEFAULT_BLOCK_ROWS, FeatureMap, iter_row_blocks
from elmscale.linalg.ridge import PRECISIONS
from elmscale.linalg.targets import TargetEncoder, merge_classes


@dataclass
class Gram:
    """``H'H``, ``H'Y``, ``Y'Y``, counts and rows per fold (leading axis: the folds).

    For classes, column j of ``Y`` is the indicator of ``classes[j]``; ``classes`` is None
    when ``Y`` holds values (or targets already encoded).
    """

    HtH: np.ndarray
    HtY: np.ndarray
    YtY: np.ndarray
    counts: np.ndarray
    n_rows: np.ndarray
    classes: np.ndarray | None = None

    @classmethod
    def zeros(
        cls, n_outputs: int, n_targets: int, *, n_folds: int = 1, classes: np.ndarray | None = None
    ) -> Gram:
        """An empty Gram of ``n_outputs`` features (L) and ``n_targets`` target columns."""
        k, L, c = int(n_folds), int(n_outputs), int(n_targets)
        return cls(
            np.zeros((k, L, L)),
            np.zeros((k, L, c)),
            np.zeros((k, c)),
            np.zeros((k, c), dtype=np.int64),
            np.zeros(k, dtype=np.int64),
            classes,
        )

    @property
    def n_folds(self) -> int:
        return self.HtH.shape[0]

    def __sizeof__(self) -> int:
        # the arrays' bytes: a cluster's memory accounting and transfer logs (Dask's sizeof)
        # call sys.getsizeof, which would count the object's own few bytes only
        arrays = (self.HtH, self.HtY, self.YtY, self.counts, self.n_rows, self.classes)
        return object.__sizeof__(self) + sum(a.nbytes for a in arrays if a is not None)

    @property
    def n_samples(self) -> int:
        """Rows summed over every fold."""
        return int(self.n_rows.sum())

    @classmethod
    def combine(cls, *parts: Gram) -> Gram:
        """The Gram of all the parts' rows (classes merged by value)."""
        first = parts[0]
        HtH = first.HtH.copy()
        for p in parts[1:]:
            HtH += p.HtH
        if first.classes is None:
            HtY, YtY, counts = (
                sum(getattr(p, name) for p in parts) for name in ("HtY", "YtY", "counts")
            )
            classes = None
        else:
            classes, where = merge_classes(*(p.classes for p in parts))
            k, L = first.HtH.shape[:2]
            HtY = np.zeros((k, L, classes.size))
            YtY = np.zeros((k, classes.size))
            counts = np.zeros((k, classes.size), dtype=np.int64)
            for p, pos in zip(parts, where):
                HtY[:, :, pos] += p.HtY
                YtY[:, pos] += p.YtY
                counts[:, pos] += p.counts
        return cls(HtH, HtY, YtY, counts, sum(p.n_rows for p in parts), classes)

    def __add__(self, other: Gram) -> Gram:
        return Gram.combine(self, other)

    def _part(self, folds) -> Gram:
        """One fold: fold ``folds`` (an int), or the sum over a boolean mask of folds."""
        if isinstance(folds, (int, np.integer)):
            arrays = (a[folds] for a in (self.HtH, self.HtY, self.YtY, self.counts, self.n_rows))
        else:
            arrays = (
                a[folds].sum(axis=0)
                for a in (self.HtH, self.HtY, self.YtY, self.counts, self.n_rows)
            )
        return Gram(*(a[None] for a in arrays), classes=self.classes)

    def total(self, exclude: int | None = None) -> Gram:
        """One-fold Gram of every fold but ``exclude`` (all rows when None): a fold's
        training part."""
        keep = np.ones(self.n_folds, dtype=bool)
        if exclude is not None:
            keep[exclude] = False
        return self._part(keep)

    def fold(self, k: int) -> Gram:
        """One-fold Gram of fold ``k``'s rows only: its validation part."""
        return self._part(int(k))

    def ridge_terms(
        self, encoder: TargetEncoder | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(H'H, H'T, T'T)`` of a one-fold Gram: ``T`` is ``Y`` encoded by ``encoder``
        (None: ``Y`` as summed).  ``(I/C + H'H) beta = H'T`` is the ridge ELM."""
        if self.n_folds != 1:
            raise ValueError(
                f"ridge_terms needs a one-fold Gram (total() or fold(k)); this "
                f"one has {self.n_folds} folds"
            )
        if encoder is None or not encoder.for_classes:
            return self.HtH[0], self.HtY[0], self.YtY[0]
        if self.classes is None or not np.array_equal(encoder.classes, self.classes):
            raise ValueError(
                f"the encoder's classes {encoder.classes} are not the Gram's {self.classes}"
            )
        HtT, TtT = encoder.gram_targets(self.HtY[0], self.YtY[0], self.counts[0])
        return self.HtH[0], HtT, TtT


def accumulate_gram(
    feature_map: FeatureMap,
    X: np.ndarray,
    Y: np.ndarray,
    *,
    classes: np.ndarray | None = None,
    folds: np.ndarray | None = None,
    n_folds: int = 1,
    precision: str = "double",
    block_rows: int = DEFAULT_BLOCK_ROWS,
) -> Gram:
    """The :class:`Gram` of ``H = feature_map(X)`` and targets ``Y`` (``(n, c)``; 1-D: one
    column), in blocks of ``block_rows`` rows.

    ``classes``: the classes whose indicators ``Y`` holds (then ``counts`` are rows per
    class).  ``folds``: the fold (0 .. ``n_folds`` - 1) of each row, for a per-fold Gram.
    ``precision``: products in float64 ("double", exact) or float32 ("single"); the sums
    over blocks are float64 either way.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
    dtype = np.float32 if precision == "single" else np.float64
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    if folds is None and n_folds != 1:
        raise ValueError(f"n_folds = {n_folds} needs the fold of each row (folds)")
    gram = Gram.zeros(feature_map.n_outputs, Y.shape[1], n_folds=n_folds, classes=classes)
    for k in range(n_folds):
        rows = slice(None) if folds is None else folds == k
        Xk, Yk = X[rows], Y[rows]
        n = Xk.shape[0]
        if n:
            # One reused buffer: a fresh 100 MB array per block costs its page faults again.
            buffer = np.empty((min(block_rows, n), feature_map.n_outputs), dtype=dtype)
            for block in iter_row_blocks(n, block_rows):
                H = feature_map.transform(Xk[block], out=buffer[: block.stop - block.start])
                gram.HtH[k] += H.T @ H  # numpy calls SYRK; blocks are summed in float64
                gram.HtY[k] += H.T @ Yk[block].astype(dtype)
        gram.YtY[k] = np.square(Yk).sum(axis=0)
        gram.counts[k] = Yk.sum(axis=0) if classes is not None else n
        gram.n_rows[k] = n
    return gram
