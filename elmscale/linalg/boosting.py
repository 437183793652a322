"""Boosting-ridge ELM ensembles solved from one Gram (``../shared/notes/methods-wave2.md``).

With ``H = [H(1) .. H(S)]`` the S learners' hidden outputs side by side (``D`` columns
each), ``G = H'H`` and ``B = H'T`` hold everything every ensemble needs; no second pass
over the rows.  The library's C convention throughout: ``lambda = 1 / C`` is the ridge
weight (the boosting-ridge paper's own "C" multiplies I, so paper C = 1 / our C).

* ELM: ridge on the first block, ``(G_11 + lambda I) beta = B_1``.
* GBRELM (a layer per learner, sequential): learner s fits the residual of the ones before
  it, ``(G_ss + lambda I) beta(s) = B_s - sum_{t<s} G_st beta(t)``: one eigendecomposition
  per diagonal block serves every C (:func:`sequential_path`).
* GGBRELM (a layer per learner, global): ridge on the concatenated layers,
  ``(G + lambda I) beta = B`` (:func:`global_path`: one Cholesky per C for a short grid,
  one eigendecomposition for a long one).
* BRELM (one shared layer) and KBRELM (kernel ridge learners, ``G = K``): S boosting steps
  of the same ridge learner on the residuals are one spectral filter,
  ``beta = V diag((1 - (lambda / (lambda + w))^S) / w) V' B`` with ``G = V diag(w) V'``
  (the limit ``S / lambda`` at ``w = 0``): one eigendecomposition serves every S and C
  (:func:`boosting_filter_path`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.linalg

from elmscale.linalg.ridge import ridge_path, solve_ridge

__all__ = [
    "CHOLESKY_MAX_CS",
    "boosting_filter",
    "boosting_filter_path",
    "global_path",
    "sequential_path",
]

#: Up to this many C values :func:`global_path` factors ``G + lambda I`` once per C
#: (Cholesky, n^3 / 3); beyond, one eigendecomposition (about 10x a Cholesky with its
#: vectors, measured in ``../shared/notes/methods-wave2.md``) serves them all.
CHOLESKY_MAX_CS = 8


def _check_Cs(Cs: Sequence[float]) -> np.ndarray:
    Cs = np.asarray(Cs, dtype=np.float64)
    if Cs.ndim != 1 or Cs.size == 0:
        raise ValueError("Cs must be a non-empty 1-D list of positive values")
    if not np.all(Cs > 0):
        raise ValueError(f"every C must be > 0; got {Cs.tolist()}")
    return Cs


def _check_blocks(G: np.ndarray, widths: Sequence[int]) -> list[slice]:
    widths = [int(w) for w in widths]
    if any(w < 1 for w in widths) or sum(widths) != G.shape[0]:
        raise ValueError(
            f"the learners' widths {widths} must be positive and sum to G's size {G.shape[0]}"
        )
    edges = np.cumsum([0, *widths])
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def boosting_filter(w: np.ndarray, lam: float, n_steps: int) -> np.ndarray:
    """``(1 - (lam / (lam + w))^S) / w`` per eigenvalue ``w >= 0`` (``S / lam`` at 0): the
    gain of S boosting steps of ridge learners with weight ``lam`` on that eigenvector."""
    w = np.clip(np.asarray(w, dtype=np.float64), 0.0, None)
    x = w / lam
    ratio = np.full_like(x, float(n_steps))  # (1 - (1 + x)^-S) / x -> S as x -> 0
    positive = x > 0
    ratio[positive] = -np.expm1(-n_steps * np.log1p(x[positive])) / x[positive]
    return ratio / lam


def boosting_filter_path(
    G: np.ndarray, B: np.ndarray, Cs: Sequence[float], n_steps: int
) -> np.ndarray:
    """The summed weights of ``n_steps`` boosting steps of ridge learners sharing ``G``
    (BRELM's ``H'H``, or KBRELM's kernel matrix with ``B = T``), for every C in ``Cs``:
    ``(len(Cs),) + B.shape``, from one eigendecomposition.

    Step s solves ``(G + lambda I) beta(s) = B - G sum_{t<s} beta(t)``; the sum over the
    steps is the spectral filter :func:`boosting_filter` of ``G``.
    """
    Cs = _check_Cs(Cs)
    if int(n_steps) < 1:
        raise ValueError(f"n_steps must be >= 1; got {n_steps}")
    w, V = scipy.linalg.eigh(G, check_finite=False, driver="evd")
    VtB = V.T @ B
    out = np.empty((Cs.size,) + np.shape(B))
    for i, C in enumerate(Cs):
        gain = boosting_filter(w, 1.0 / C, int(n_steps))
        out[i] = V @ (gain.reshape((-1,) + (1,) * (VtB.ndim - 1)) * VtB)
    return out


def sequential_path(
    G: np.ndarray, B: np.ndarray, widths: Sequence[int], Cs: Sequence[float]
) -> np.ndarray:
    """GBRELM: learner s (columns ``widths[s]`` of ``G``) fits the residual of learners
    ``0 .. s-1``: ``(G_ss + lambda I) beta(s) = B_s - sum_{t<s} G_st beta(t)``.

    Returns the stacked ``[beta(1); ..; beta(S)]`` per C, ``(len(Cs),) + B.shape``: the
    ensemble's output is ``[H(1) .. H(S)] @ beta``.  One eigendecomposition per diagonal
    block serves every C; ``beta(1)`` alone is the single ELM of the first layer.
    """
    Cs = _check_Cs(Cs)
    blocks = _check_blocks(G, widths)
    out = np.zeros((Cs.size,) + np.shape(B))
    for rows in blocks:
        w, V = scipy.linalg.eigh(G[rows, rows], check_finite=False, driver="evd")
        w = np.clip(w, 0.0, None)
        for i, C in enumerate(Cs):
            # the residual's correlation with this learner's layer: B_s - G_s,<s beta(<s)
            rhs = B[rows] - G[rows, : rows.start] @ out[i, : rows.start]
            scale = 1.0 / (w + 1.0 / C)
            out[i, rows] = V @ (scale.reshape((-1,) + (1,) * (rhs.ndim - 1)) * (V.T @ rhs))
    return out


def global_path(G: np.ndarray, B: np.ndarray, Cs: Sequence[float]) -> np.ndarray:
    """GGBRELM: ridge on the concatenated layers, ``(G + lambda I) beta = B`` per C,
    ``(len(Cs),) + B.shape``: a Cholesky per C for up to :data:`CHOLESKY_MAX_CS` values,
    else one eigendecomposition for all."""
    Cs = _check_Cs(Cs)
    if Cs.size > CHOLESKY_MAX_CS:
        return ridge_path(G, B, Cs)
    return np.stack([solve_ridge(G, B, float(C)) for C in Cs])
