"""Target encodings of the ridge ELMs: labels or values to the target matrix ``T``.

Codings (:data:`CODINGS`):

* ``"plus_minus"``: the unified ELM's.  One column per class, +1 for the row's class and -1
  elsewhere; two classes take one column, +1 for ``classes[1]`` and -1 for ``classes[0]``.
  Decoded by the sign (one column) or the largest output.
* ``"one_of_j"``: 0 / 1 class indicators, one column per class even for two classes (the
  boosting-ridge ELM's; also what a work unit's Gram sums, see below).  Decoded by the
  largest output.
* ``"values"``: real targets as given (regression), one column per target.

A Parquet data set's Gram is summed from work units that may each see only some of the
classes: a unit encodes its rows ``"one_of_j"`` over its own classes, the sums merge
classes by value (:func:`merge_classes`), and :meth:`TargetEncoder.gram_targets` turns the
merged indicator sums into the ``H'T`` and ``T'T`` of any class coding (every coding is
linear in the indicators: ``T = 2 Y - 1`` for plus_minus, ``Y`` for one_of_j).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CODINGS = ("plus_minus", "one_of_j", "values")


def one_vs_one_pairs(n_classes: int) -> list[tuple[int, int]]:
    """The one-vs-one class pairs ``(a, b)``, ``a < b``, in LIBSVM's order (0-1, 0-2, ...,
    1-2, ...): the order of every one-vs-one model's pairs, their coefficients and votes."""
    return [(a, b) for a in range(n_classes) for b in range(a + 1, n_classes)]


def merge_classes(*class_arrays: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The sorted union of the class arrays, and for each its classes' positions in it."""
    classes = np.unique(np.concatenate(class_arrays))
    return classes, [np.searchsorted(classes, c) for c in class_arrays]


@dataclass(frozen=True, eq=False)
class TargetEncoder:
    """One target coding (``coding``) and, for the class codings, the classes (sorted).

    ``TargetEncoder("plus_minus").fit(y)`` takes its classes from ``y``;
    ``TargetEncoder("plus_minus", classes)`` uses given classes.
    """

    coding: str
    classes: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.coding not in CODINGS:
            raise ValueError(f"coding must be one of {CODINGS}; got {self.coding!r}")
        if self.classes is not None:
            if self.coding == "values":
                raise ValueError("the values coding has no classes")
            object.__setattr__(self, "classes", np.asarray(self.classes))

    @property
    def for_classes(self) -> bool:
        """True for the class codings (``plus_minus``, ``one_of_j``)."""
        return self.coding != "values"

    def _classes(self) -> np.ndarray:
        if self.classes is None:
            raise ValueError(f"the {self.coding} coding has no classes yet: fit it first")
        return self.classes

    @property
    def n_columns(self) -> int:
        """Columns of ``T`` (class codings only; values have as many as ``y``)."""
        n = self._classes().size
        return 1 if self.coding == "plus_minus" and n == 2 else n

    def fit(self, y) -> TargetEncoder:
        """The encoder with the classes of ``y`` (class codings); values: itself."""
        if not self.for_classes:
            return self
        return TargetEncoder(self.coding, np.unique(np.asarray(y)))

    def index(self, y) -> np.ndarray:
        """Position of each label of ``y`` in ``classes``, -1 for labels not among them."""
        classes = self._classes()
        y = np.asarray(y)
        at = np.searchsorted(classes, y)
        found = at < classes.size
        found[found] = classes[at[found]] == y[found]
        return np.where(found, at, -1)

    def transform(self, y) -> np.ndarray:
        """``T`` ``(n, n_columns)`` float64 of labels (class codings) or values ``y``."""
        if not self.for_classes:
            try:
                values = np.asarray(y, dtype=np.float64)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"regression targets must be numbers; got {np.asarray(y).dtype} labels ({exc})"
                ) from exc
            if not np.all(np.isfinite(values)):
                raise ValueError("y contains NaN or infinity; expected finite targets")
            return values.reshape(len(values), -1)
        index = self.index(y)
        if np.any(index < 0):
            unknown = np.unique(np.asarray(y)[index < 0])
            raise ValueError(
                f"y holds labels not among the classes {self.classes.tolist()}: "
                f"{unknown[:5].tolist()}"
            )
        n, n_classes = index.size, self.classes.size
        if self.coding == "plus_minus" and n_classes == 2:
            return np.where(index == 1, 1.0, -1.0)[:, None]
        off = -1.0 if self.coding == "plus_minus" else 0.0
        T = np.full((n, n_classes), off)
        T[np.arange(n), index] = 1.0
        return T

    def fit_transform(self, y) -> tuple[TargetEncoder, np.ndarray]:
        """``(fitted encoder, T)``."""
        fitted = self.fit(y)
        return fitted, fitted.transform(y)

    def gram_targets(
        self, HtY: np.ndarray, YtY: np.ndarray, counts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``H'T`` and ``T'T`` (per output column) from sums over rows of ``H'Y``, ``Y'Y``
        and rows per column, ``Y`` the one_of_j indicators of ``classes`` (class codings) or
        the values (values coding: returned as they are)."""
        if not self.for_classes:
            return HtY, YtY
        if HtY.shape[-1] != self._classes().size:
            raise ValueError(
                f"the sums have {HtY.shape[-1]} class columns; the encoder has "
                f"{self.classes.size} classes"
            )
        if self.coding == "one_of_j":
            return HtY, counts.astype(np.float64)
        n = counts.sum()
        if self.classes.size == 2:  # one output: +1 for classes[1], -1 for classes[0]
            return (HtY[:, 1] - HtY[:, 0])[:, None], np.array([float(n)])
        return 2.0 * HtY - HtY.sum(axis=1, keepdims=True), np.full(self.classes.size, float(n))

    def decode(self, scores: np.ndarray) -> np.ndarray:
        """Class positions (in ``classes``) of outputs ``scores`` ``(..., n_columns)``."""
        if not self.for_classes:
            raise ValueError("the values coding has no classes to decode to")
        scores = np.asarray(scores)
        if scores.shape[-1] == 1:
            cut = 0.0 if self.coding == "plus_minus" else 0.5
            return (scores[..., 0] > cut).astype(np.intp)
        return scores.argmax(axis=-1)
