"""The paper's [-1, 1] min-max scaling (:class:`Scaler`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp
from sklearn.preprocessing import MinMaxScaler

from elmscale.core.errors import DataError


def _densify(X: Any) -> Any:
    return X.toarray() if sp.issparse(X) else X


class Scaler(MinMaxScaler):
    """The paper's scaling: each attribute mapped linearly to ``feature_range`` ([-1, 1]).

    Fit it on the training part only, then transform training and test data with the same
    factors (test values may fall outside the range unless ``clip=True``).  Sparse input is
    converted to a dense array first (min-max scaling with a nonzero offset does not keep
    zeros), so transform large sparse sets in row blocks.

    Use :meth:`from_stats` to build a fitted scaler from column minima and maxima computed
    elsewhere (on distributed workers).
    """

    def __init__(
        self, feature_range: tuple[float, float] = (-1, 1), *, copy: bool = True, clip: bool = False
    ) -> None:
        self.feature_range = feature_range
        self.copy = copy
        self.clip = clip

    def partial_fit(self, X: Any, y: Any = None) -> Scaler:
        """Update the column minima and maxima with ``X`` (dense or sparse)."""
        return super().partial_fit(_densify(X), y)

    def transform(self, X: Any) -> np.ndarray:
        """Scale ``X`` (dense or sparse; the result is dense)."""
        return super().transform(_densify(X))

    def inverse_transform(self, X: Any) -> np.ndarray:
        """Undo :meth:`transform`."""
        return super().inverse_transform(_densify(X))

    @classmethod
    def from_stats(
        cls,
        data_min: np.ndarray | Sequence[float],
        data_max: np.ndarray | Sequence[float],
        feature_range: tuple[float, float] = (-1, 1),
        *,
        n_samples_seen: int = 0,
        clip: bool = False,
    ) -> Scaler:
        """A fitted scaler from per-column minima and maxima (as ``fit`` would compute)."""
        lo_hi = np.asarray(feature_range, dtype=np.float64)
        if lo_hi.shape != (2,) or not lo_hi[0] < lo_hi[1]:
            raise DataError(
                f"scaler: parameter feature_range={feature_range!r}; "
                "expected (low, high) with low < high"
            )
        dmin = np.asarray(data_min, dtype=np.float64)
        dmax = np.asarray(data_max, dtype=np.float64)
        if dmin.ndim != 1 or dmin.shape != dmax.shape:
            raise DataError(
                f"scaler: parameters data_min {dmin.shape} and data_max {dmax.shape}; "
                "expected two 1-D arrays of the same length"
            )
        if not (np.isfinite(dmin).all() and np.isfinite(dmax).all()):
            raise DataError(
                "scaler: parameters data_min / data_max hold non-finite values; "
                "expected finite numbers"
            )
        below = np.flatnonzero(dmax < dmin)
        if below.size:
            raise DataError(
                f"scaler: data_max < data_min in column {int(below[0])}; "
                "expected data_max >= data_min"
            )
        scaler = cls(feature_range=feature_range, clip=clip)
        data_range = dmax - dmin
        safe = np.where(data_range < 10 * np.finfo(np.float64).eps, 1.0, data_range)
        scaler.scale_ = (lo_hi[1] - lo_hi[0]) / safe
        scaler.min_ = lo_hi[0] - dmin * scaler.scale_
        scaler.data_min_ = dmin
        scaler.data_max_ = dmax
        scaler.data_range_ = data_range
        scaler.n_features_in_ = dmin.shape[0]
        scaler.n_samples_seen_ = int(n_samples_seen)
        return scaler
