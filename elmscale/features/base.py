"""What every feature map shares: the interface, row blocks, and rebuilding from a dict.

A *feature map* turns rows ``X`` ``(n, n_features)`` into features ``h(X)``
``(n, n_outputs)``, one row of ``h(X)`` from the same row of ``X`` only, so it can be
evaluated on row blocks anywhere (``iter_row_blocks``).  The maps of the package:

* :class:`~elmscale.features.layers.HiddenLayer` (random nodes) and
  :class:`~elmscale.features.layers.ConcatenatedLayers` (layers side by side);
* :class:`~elmscale.features.kernels.KernelFeatures`: a kernel against basis rows,
  ``K(X, basis)``;
* :class:`~elmscale.features.masks.FeatureMask`: a subset of the input columns, and
  :class:`~elmscale.features.masks.MaskedFeatureMap`: a mask then another map.

Each describes itself as JSON with ``to_dict()`` (``"type"`` names the class), and
:func:`feature_map_from_dict` rebuilds any of them from that description, in any process
(a Dask or Ray worker receives the dict, not the object).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol, runtime_checkable

import numpy as np

from elmscale.core.sparse_kernels import float32_rows, is_sparse

#: Default number of rows per block: 16,384 rows x 1,000 float64 units = 128 MB.
DEFAULT_BLOCK_ROWS = 16_384


def iter_row_blocks(n_rows: int, block_rows: int) -> Iterator[slice]:
    """Slices covering ``range(n_rows)`` in blocks of at most ``block_rows`` rows."""
    block_rows = max(1, int(block_rows))
    for start in range(0, n_rows, block_rows):
        yield slice(start, min(start + block_rows, n_rows))


def _as_float32_rows(X: np.ndarray) -> np.ndarray:
    """``X`` as float32 rows: C-contiguous, or a canonical float32 CSR matrix when ``X`` is
    scipy sparse (CSR or CSC; ``core.sparse_kernels.as_csr32``), never densified."""
    return float32_rows(X)


@runtime_checkable
class FeatureMap(Protocol):
    """The interface of a feature map (structural: no base class to inherit).

    ``n_features``: input columns it expects; ``n_outputs``: columns of ``h(X)`` (a
    hidden layer's ``n_hidden``, a kernel map's number of basis rows).
    """

    @property
    def n_features(self) -> int: ...

    @property
    def n_outputs(self) -> int: ...

    def transform(
        self, X: np.ndarray, dtype=np.float32, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``h(X)`` ``(len(X), n_outputs)`` in ``dtype``, or written into ``out`` (C-contiguous,
        that shape).  Call it on row blocks: rows are independent."""
        ...

    def scores(self, X: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """``h(X) @ coef`` in float64 (fused where the map can: ``h(X)`` is not stored)."""
        ...

    def to_dict(self) -> dict:
        """A JSON description with ``"type"``; :func:`feature_map_from_dict` rebuilds it."""
        ...


def check_width(X: np.ndarray, n_features: int, expected: str) -> np.ndarray:
    """``X`` if it is 2-D with ``n_features`` columns; else a ValueError saying how many it
    has and ``expected`` (what the map expects, e.g. "this mask expects 6")."""
    shape = X.shape if is_sparse(X) else np.shape(X)  # np.shape reads a sparse matrix as ()
    if len(shape) != 2 or shape[1] != n_features:
        have = shape[-1] if len(shape) == 2 else shape
        raise ValueError(f"X has {have} features; {expected}")
    return X


def _check_out(out: np.ndarray | None, shape: tuple[int, int], dtype) -> np.ndarray:
    """``out`` checked against ``shape``, or a new array of that shape."""
    if out is None:
        return np.empty(shape, dtype=dtype)
    if out.shape != shape or not out.flags.c_contiguous:
        raise ValueError(f"out must be C-contiguous of shape {shape}")
    return out


#: ``"type"`` of a feature map's dict -> its ``from_dict``.
_FROM_DICT: dict[str, Callable[[dict], FeatureMap]] = {}


def register_feature_map(name: str):
    """Class decorator: ``to_dict()["type"] == name`` is rebuilt by ``cls.from_dict``."""

    def register(cls):
        _FROM_DICT[name] = cls.from_dict
        cls.feature_map_type = name
        return cls

    return register


def feature_map_from_dict(d: dict) -> FeatureMap:
    """Rebuild any feature map from its ``to_dict()``.

    Dicts without ``"type"`` (written before feature maps had one: a hidden layer's
    ``{"kind", "n_features", "n_hidden", "seed", ...}`` or concatenated layers'
    ``{"layers": [...]}``) are still read.
    """
    # every map's module registered its type when ``elmscale.features`` was imported
    kind = d.get("type")
    if kind is None:
        kind = "concatenated_layers" if "layers" in d else "hidden_layer"
    if kind not in _FROM_DICT:
        raise ValueError(f"unknown feature map type {kind!r}; known: {sorted(_FROM_DICT)}")
    return _FROM_DICT[kind](d)
