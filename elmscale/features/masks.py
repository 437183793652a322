"""Feature masks: keep a subset of the input columns, alone or before another feature map.

``FeatureMask(n_features, keep)`` maps rows of ``n_features`` columns to the columns
``keep`` (in increasing order).  ``mask.then(layer)`` is the map ``layer(X[:, keep])``
(:class:`MaskedFeatureMap`): a hidden layer on a subset of the inputs, as a feature-selecting
ELM builds one layer per candidate subset.  Both are feature maps
(``elmscale.features.base.FeatureMap``) rebuilt from ``to_dict()`` by
``feature_map_from_dict``.

    >>> mask = FeatureMask(8, [0, 3, 5])
    >>> masked = mask.then(HiddenLayer("sigmoid", 3, 100, seed=1))   # 8 columns in, 100 out
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elmscale.features.base import (
    FeatureMap,
    _check_out,
    check_width,
    feature_map_from_dict,
    register_feature_map,
)


@register_feature_map("mask")
@dataclass(frozen=True)
class FeatureMask:
    """The columns ``keep`` of rows with ``n_features`` columns (``n_outputs = len(keep)``).

    ``keep``: column indices, or a boolean array of ``n_features`` values; stored as a
    sorted tuple of distinct indices.
    """

    n_features: int
    keep: tuple[int, ...]

    def __post_init__(self) -> None:
        n = int(self.n_features)
        if n < 1:
            raise ValueError(f"n_features must be >= 1; got {self.n_features}")
        keep = np.asarray(self.keep)
        if keep.dtype == bool:
            if keep.shape != (n,):
                raise ValueError(
                    f"a boolean keep must have n_features = {n} values; got shape {keep.shape}"
                )
            keep = np.flatnonzero(keep)
        keep = np.unique(keep.astype(np.int64).ravel())
        if keep.size == 0:
            raise ValueError("keep must name at least one column")
        if keep[0] < 0 or keep[-1] >= n:
            raise ValueError(f"keep must hold column indices in [0, {n}); got {keep.tolist()}")
        object.__setattr__(self, "n_features", n)
        object.__setattr__(self, "keep", tuple(int(k) for k in keep))

    @property
    def n_outputs(self) -> int:
        return len(self.keep)

    def _check_X(self, X: np.ndarray) -> np.ndarray:
        return check_width(np.asarray(X), self.n_features, f"this mask expects {self.n_features}")

    def transform(
        self, X: np.ndarray, dtype=np.float32, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``X[:, keep]`` in ``dtype`` (or written into ``out``)."""
        X = self._check_X(X)
        H = _check_out(out, (X.shape[0], self.n_outputs), dtype)
        H[:] = X[:, list(self.keep)]
        return H

    def scores(self, X: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """``X[:, keep] @ coef`` in float64."""
        X = self._check_X(X)
        return X[:, list(self.keep)].astype(np.float64) @ np.asarray(coef, dtype=np.float64)

    def then(self, feature_map: FeatureMap) -> MaskedFeatureMap:
        """The map ``feature_map(X[:, keep])`` (``feature_map`` expects ``n_outputs`` columns)."""
        return MaskedFeatureMap(self, feature_map)

    def to_dict(self) -> dict:
        return {"type": "mask", "n_features": self.n_features, "keep": list(self.keep)}

    @classmethod
    def from_dict(cls, d: dict) -> FeatureMask:
        return cls(int(d["n_features"]), tuple(d["keep"]))


@register_feature_map("masked")
@dataclass(frozen=True)
class MaskedFeatureMap:
    """``inner(X[:, mask.keep])``: a mask, then any feature map on the kept columns."""

    mask: FeatureMask
    inner: FeatureMap

    def __post_init__(self) -> None:
        if self.inner.n_features != self.mask.n_outputs:
            raise ValueError(
                f"the mask keeps {self.mask.n_outputs} columns; the map after it "
                f"expects {self.inner.n_features}"
            )

    @property
    def n_features(self) -> int:
        return self.mask.n_features

    @property
    def n_outputs(self) -> int:
        return self.inner.n_outputs

    def transform(
        self, X: np.ndarray, dtype=np.float32, out: np.ndarray | None = None
    ) -> np.ndarray:
        # float32 kept columns: what the inner maps read their inputs as.
        return self.inner.transform(self.mask.transform(X), dtype=dtype, out=out)

    def scores(self, X: np.ndarray, coef: np.ndarray) -> np.ndarray:
        return self.inner.scores(self.mask.transform(X), coef)

    def to_dict(self) -> dict:
        return {"type": "masked", "mask": self.mask.to_dict(), "inner": self.inner.to_dict()}

    @classmethod
    def from_dict(cls, d: dict) -> MaskedFeatureMap:
        return cls(FeatureMask.from_dict(d["mask"]), feature_map_from_dict(d["inner"]))
