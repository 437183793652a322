"""Random hidden layers and kernels: the ELM feature mappings, defined once.

Random hidden nodes (paper eqs. 25-28)
--------------------------------------
A layer is fully determined by ``(kind, n_features, n_hidden, seed)`` and, for
additive nodes, ``weight_scale`` (default 1): any process (a Dask or Ray worker)
rebuilds the same weights from these values.  Draws use
``numpy.random.Generator(PCG64(seed))``, in this order:

* ``sigmoid`` ``1 / (1 + exp(-(a.x + b)))`` and ``sinusoid`` ``sin(a.x + b)``:
  input weights ``a ~ U(-1, 1)`` drawn as an ``(n_hidden, n_features)`` array and
  multiplied by ``weight_scale``, then biases ``b ~ U(0, 1)`` (with
  ``weight_scale=1``, the original ELM's draws).  Wider weights make the nodes
  less linear: on Ionosphere (34 features) 200 sigmoid nodes reach 87.5 % test
  accuracy with scale 1 and 91-92 % with scale 2-4 (the paper's protocol, 5
  splits), so the scale is worth cross-validating with C.
* ``multiquadric`` ``sqrt(|x - a|^2 + b^2)``: centres ``a ~ U(-1, 1)``, then
  ``b ~ U(0, 1)``.
* ``gaussian`` ``exp(-|x - a|^2 / b)``: centres ``a ~ U(-1, 1)``, then widths
  ``b ~ n_features * U(0.5, 1.5)``; with inputs in [-1, 1] the mean squared
  distance to a centre is ``2 n_features / 3``, so the nodes are neither flat nor
  spikes.

The weights are stored in float32.  Inputs are expected on the paper's scale
([-1, 1], see ``elmscale.data.Scaler``).

Kernels (eqs. 29-31)
--------------------
``gaussian`` ``exp(-|u - v|^2 / (2 sigma^2))``, ``laplacian``
``exp(-|u - v| / sigma)``, ``polynomial`` ``(1 + u.v)^degree``.  Distances and dot
products are accumulated in float64 from float32 inputs; blocks are returned in
float32 or float64.

Both kinds of mapping work on row blocks so that memory stays bounded
(``iter_row_blocks``).  Layers are feature maps (``elmscale.features.base.FeatureMap``):
``n_outputs`` is ``n_hidden``, and ``to_dict()`` is rebuilt by ``feature_map_from_dict``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from elmscale.core import jit as _jit
from elmscale.core.sparse_kernels import is_sparse
from elmscale.features.base import (
    _as_float32_rows,
    _check_out,
    check_width,
    iter_row_blocks,
    register_feature_map,
)

HIDDEN_KINDS = ("sigmoid", "sinusoid", "multiquadric", "gaussian")
#: rows of sparse input mapped at a time: their float64 pre-activations, 4,096 x 1,000 nodes,
#: are 32 MB
SPARSE_BLOCK_ROWS = 4096


@register_feature_map("hidden_layer")
@dataclass(frozen=True)
class HiddenLayer:
    """A random hidden layer, rebuilt identically from its four defining values."""

    kind: str
    n_features: int
    n_hidden: int
    seed: int
    weight_scale: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in HIDDEN_KINDS:
            raise ValueError(f"hidden kind must be one of {HIDDEN_KINDS}; got {self.kind!r}")
        if int(self.n_features) < 1:
            raise ValueError(f"n_features must be >= 1; got {self.n_features}")
        if int(self.n_hidden) < 1:
            raise ValueError(f"n_hidden must be >= 1; got {self.n_hidden}")
        if not 0 <= int(self.seed) < 2**63:
            raise ValueError(f"seed must be in [0, 2**63); got {self.seed}")
        if not (np.isfinite(self.weight_scale) and self.weight_scale > 0):
            raise ValueError(f"weight_scale must be > 0; got {self.weight_scale}")

    @property
    def n_outputs(self) -> int:
        """Columns of ``h(X)``: ``n_hidden`` (the feature-map interface's name)."""
        return int(self.n_hidden)

    # -- weights ---------------------------------------------------------
    @functools.cached_property
    def _weights(self) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.Generator(np.random.PCG64(int(self.seed)))
        a = rng.uniform(-1.0, 1.0, size=(self.n_hidden, self.n_features))
        if self.kind == "gaussian":
            b = self.n_features * rng.uniform(0.5, 1.5, size=self.n_hidden)
        else:
            b = rng.uniform(0.0, 1.0, size=self.n_hidden)
        if self.kind in ("sigmoid", "sinusoid"):
            a = a * float(self.weight_scale)
        # (n_features, n_hidden) so that X @ weights is one GEMM.
        weights = np.ascontiguousarray(a.T, dtype=np.float32)
        return weights, b.astype(np.float32)

    @property
    def weights(self) -> np.ndarray:
        """Input weights or centres, ``(n_features, n_hidden)`` float32."""
        return self._weights[0]

    @property
    def biases(self) -> np.ndarray:
        """Biases (additive nodes) or widths (RBF nodes), ``(n_hidden,)`` float32."""
        return self._weights[1]

    # -- mapping ---------------------------------------------------------
    def _check_X(self, X: np.ndarray) -> np.ndarray:
        return check_width(
            _as_float32_rows(X), self.n_features, f"this hidden layer expects {self.n_features}"
        )

    def transform(
        self, X: np.ndarray, dtype=np.float32, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``H = h(X)``, ``(n_rows, n_hidden)``, nodes evaluated in float32.

        ``dtype=np.float64`` stores the same float32 values widened; ``out`` (a
        C-contiguous buffer of the right shape) is filled instead of allocating.
        Call it on row blocks (``iter_row_blocks``).  Each row of H depends only
        on the same row of X.  ``X`` scipy sparse (CSR or CSC): :meth:`_sparse_transform`.
        """
        X32 = self._check_X(X)
        H = _check_out(out, (X32.shape[0], self.n_hidden), dtype)
        if is_sparse(X32):
            self._sparse_transform(X32, H)
            return H
        _jit.hidden_block(X32, self.weights, self.biases, _jit.NODE_CODES[self.kind], H)
        return H

    def _sparse_transform(self, X32, H) -> None:
        """``H = h(X)`` for CSR rows, never densified: the pre-activations from the sparse
        rows times the dense weights (scipy's sparse-dense product), then the dense path's
        node values (``core.jit.activate_block``).  Additive nodes: ``a.x + b`` summed in
        float32 as the dense path sums it (another order: within float32 rounding of it);
        RBF nodes: ``|x - a|^2 = |x|^2 + |a|^2 - 2 x.a`` in float64, clipped at 0.  In
        blocks of ``SPARSE_BLOCK_ROWS`` rows, so that the float64 scratch stays small."""
        W, b, kind = self.weights, self.biases, _jit.NODE_CODES[self.kind]
        additive = self.kind in ("sigmoid", "sinusoid")
        if not additive:
            W64 = W.astype(np.float64)
            sq_w = np.einsum("ij,ij->j", W64, W64)
        for rows in iter_row_blocks(X32.shape[0], SPARSE_BLOCK_ROWS):
            block = X32[rows]
            if additive:
                pre = np.asarray(block @ W, dtype=np.float64) + b.astype(np.float64)
            else:
                block64 = block.astype(np.float64)
                sq_x = np.asarray(block64.multiply(block64).sum(axis=1)).ravel()
                pre = np.maximum(sq_x[:, None] + sq_w[None, :] - 2.0 * (block64 @ W64), 0.0)
            node = np.empty(pre.shape, dtype=np.float64)
            _jit.activate_block(np.ascontiguousarray(pre), b, kind, node)
            H[rows] = node

    def activate(self, pre: np.ndarray) -> np.ndarray:
        """The node values from pre-activations computed elsewhere, ``(n_rows, n_hidden)``
        float64 (the float32 values :meth:`transform` gives): ``pre`` holds ``a.x + b``
        for additive nodes, ``|x - a|^2`` for RBF nodes (feature selection keeps these
        for masked inputs and moves them by rank-1 terms)."""
        pre = np.ascontiguousarray(pre, dtype=np.float64)
        if pre.ndim != 2 or pre.shape[1] != self.n_hidden:
            raise ValueError(
                f"pre-activations must be (n_rows, {self.n_hidden}); got shape {pre.shape}"
            )
        out = np.empty(pre.shape, dtype=np.float64)
        _jit.activate_block(pre, self.biases, _jit.NODE_CODES[self.kind], out)
        return out

    def scores(self, X: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """``h(X) @ coef`` (float64) computed row by row without storing ``h(X)``."""
        X32 = self._check_X(X)
        coef2 = np.ascontiguousarray(coef, dtype=np.float64)
        squeeze = coef2.ndim == 1
        if squeeze:
            coef2 = coef2[:, None]
        out = np.empty((X32.shape[0], coef2.shape[1]), dtype=np.float64)
        if is_sparse(X32):  # h(X) of a block of rows at a time, then its product
            for rows in iter_row_blocks(X32.shape[0], SPARSE_BLOCK_ROWS):
                out[rows] = self.transform(X32[rows], dtype=np.float64) @ coef2
        elif self.kind == "sigmoid":  # the same node values, in one SIMD loop (1.5x)
            _jit.sigmoid_block_scores(X32, self.weights, self.biases, coef2, out)
        else:
            _jit.hidden_block_scores(
                X32, self.weights, self.biases, _jit.NODE_CODES[self.kind], coef2, out
            )
        return out[:, 0] if squeeze else out

    def to_dict(self) -> dict:
        return {
            "type": "hidden_layer",
            "kind": self.kind,
            "n_features": int(self.n_features),
            "n_hidden": int(self.n_hidden),
            "seed": int(self.seed),
            "weight_scale": float(self.weight_scale),
        }

    @classmethod
    def from_dict(cls, d: dict) -> HiddenLayer:
        return cls(
            kind=str(d["kind"]),
            n_features=int(d["n_features"]),
            n_hidden=int(d["n_hidden"]),
            seed=int(d["seed"]),
            weight_scale=float(d.get("weight_scale", 1.0)),
        )


@register_feature_map("concatenated_layers")
@dataclass(frozen=True)
class ConcatenatedLayers:
    """Random layers side by side: ``h(x) = [h_1(x), ..., h_S(x)]`` (S x L columns).

    Same interface as :class:`HiddenLayer` (``n_features``, ``n_hidden`` = ``n_outputs``,
    ``transform``, ``scores``, ``to_dict``), so the Gram of an ensemble of S layers is
    accumulated by the same functions as one layer's.
    """

    layers: tuple[HiddenLayer, ...]

    def __post_init__(self) -> None:
        if not self.layers:
            raise ValueError("ConcatenatedLayers needs at least one layer")
        widths = {layer.n_features for layer in self.layers}
        if len(widths) != 1:
            raise ValueError(
                f"the layers expect different feature counts {sorted(widths)}; "
                "expected one input width"
            )

    @property
    def n_features(self) -> int:
        return self.layers[0].n_features

    @property
    def n_hidden(self) -> int:
        return sum(layer.n_hidden for layer in self.layers)

    @property
    def n_outputs(self) -> int:
        return self.n_hidden

    def _slices(self) -> Iterator[tuple[HiddenLayer, slice]]:
        start = 0
        for layer in self.layers:
            yield layer, slice(start, start + layer.n_hidden)
            start += layer.n_hidden

    def transform(
        self, X: np.ndarray, dtype=np.float32, out: np.ndarray | None = None
    ) -> np.ndarray:
        H = _check_out(out, (X.shape[0] if is_sparse(X) else np.shape(X)[0], self.n_hidden), dtype)
        for layer, cols in self._slices():
            H[:, cols] = layer.transform(X, dtype=dtype)
        return H

    def scores(self, X: np.ndarray, coef: np.ndarray) -> np.ndarray:
        coef = np.asarray(coef, dtype=np.float64)
        return sum(layer.scores(X, coef[cols]) for layer, cols in self._slices())

    def to_dict(self) -> dict:
        return {"type": "concatenated_layers", "layers": [layer.to_dict() for layer in self.layers]}

    @classmethod
    def from_dict(cls, d: dict) -> ConcatenatedLayers:
        return cls(tuple(HiddenLayer.from_dict(layer) for layer in d["layers"]))
