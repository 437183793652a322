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

Fewer rows than columns.  With N rows and S D > N columns (the paper's D = 1000, S = 10 on
a set of a few thousand rows) the same solutions come from the N x N row space:
``beta = H' alpha`` with ``alpha`` from ``H H'`` (Woodbury); :class:`RowSpace` carries
``H`` instead of ``H'H`` and every ``*_path`` function takes it, so an ``N^3``
eigendecomposition replaces an ``(S D)^3`` one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import scipy.linalg

from elmscale.linalg.ridge import ridge_path, solve_ridge

__all__ = [
    "CHOLESKY_MAX_CS",
    "RowSpace",
    "boosting_filter",
    "boosting_filter_path",
    "global_path",
    "sequential_path",
]

#: Up to this many C values :func:`global_path` factors ``G + lambda I`` once per C
#: (Cholesky, n^3 / 3); beyond, one eigendecomposition (about 10x a Cholesky with its
#: vectors, measured in ``../shared/notes/methods-wave2.md``) serves them all.
CHOLESKY_MAX_CS = 8


@dataclass(frozen=True)
class RowSpace:
    """The rows' hidden outputs ``H`` (N x S D, float64), in place of ``G = H'H`` when N is
    the smaller side; the right-hand side is then ``T`` itself (N x c), not ``H'T``."""

    H: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        """``G``'s shape, as if it were ``H'H``."""
        return (self.H.shape[1], self.H.shape[1])


def _eigh_psd(K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    w, V = scipy.linalg.eigh(K, check_finite=False, driver="evd")
    return np.clip(w, 0.0, None), V


def _filtered(V: np.ndarray, gain: np.ndarray, VtB: np.ndarray) -> np.ndarray:
    return V @ (gain.reshape((-1,) + (1,) * (VtB.ndim - 1)) * VtB)


def _check_Cs(Cs: Sequence[float]) -> np.ndarray:
    Cs = np.asarray(Cs, dtype=np.float64)
    if Cs.ndim != 1 or Cs.size == 0:
        raise ValueError("Cs must be a non-empty 1-D list of positive values")
    if not np.all(Cs > 0):
        raise ValueError(f"every C must be > 0; got {Cs.tolist()}")
    return Cs


def _check_blocks(G, widths: Sequence[int]) -> list[slice]:
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
    rows = isinstance(G, RowSpace)
    # in the row space the same filter of H H' gives the dual weights; beta = H' alpha
    w, V = _eigh_psd(G.H @ G.H.T if rows else G)
    VtB = V.T @ B
    out = []
    for C in Cs:
        solution = _filtered(V, boosting_filter(w, 1.0 / C, int(n_steps)), VtB)
        out.append(G.H.T @ solution if rows else solution)
    return np.stack(out)


def _ridge_solver(K: np.ndarray, Cs: np.ndarray):
    """``solve(i, rhs)`` = ``(K + I / Cs[i])^-1 rhs``: a Cholesky per C for up to
    :data:`CHOLESKY_MAX_CS` values, else one eigendecomposition for all."""
    if Cs.size > CHOLESKY_MAX_CS:
        w, V = _eigh_psd(K)
        return lambda i, rhs: _filtered(V, 1.0 / (w + 1.0 / Cs[i]), V.T @ rhs)
    factors = {}

    def solve(i, rhs):
        if i not in factors:
            A = K.copy()
            A.flat[:: A.shape[0] + 1] += 1.0 / Cs[i]
            try:
                factors[i] = scipy.linalg.cho_factor(A, overwrite_a=True, check_finite=False)
            except np.linalg.LinAlgError:  # not numerically PD: the clipped spectrum
                return ridge_path(K, rhs, [Cs[i]])[0]
        return scipy.linalg.cho_solve(factors[i], rhs, check_finite=False)

    return solve


def sequential_path(
    G: np.ndarray, B: np.ndarray, widths: Sequence[int], Cs: Sequence[float]
) -> np.ndarray:
    """GBRELM: learner s (columns ``widths[s]`` of ``G``) fits the residual of learners
    ``0 .. s-1``: ``(G_ss + lambda I) beta(s) = B_s - sum_{t<s} G_st beta(t)``.

    Returns the stacked ``[beta(1); ..; beta(S)]`` per C, ``(len(Cs),) + B.shape``: the
    ensemble's output is ``[H(1) .. H(S)] @ beta``.  Each diagonal block is factored once
    per C (a short grid) or eigendecomposed once for every C; ``beta(1)`` alone is the
    single ELM of the first layer.
    """
    Cs = _check_Cs(Cs)
    blocks = _check_blocks(G, widths)
    if isinstance(G, RowSpace):
        return _sequential_rows(G.H, B, blocks, Cs)
    out = np.zeros((Cs.size,) + np.shape(B))
    for cols in blocks:
        solve = _ridge_solver(G[cols, cols], Cs)
        for i in range(Cs.size):
            # the residual's correlation with this learner's layer: B_s - G_s,<s beta(<s)
            rhs = B[cols] - G[cols, : cols.start] @ out[i, : cols.start]
            out[i, cols] = solve(i, rhs)
    return out


def _sequential_rows(H, T, blocks, Cs) -> np.ndarray:
    """:func:`sequential_path` in the row space: learner s's dual weights from
    ``H_s H_s'`` (N x N) against the explicit residual, ``beta(s) = H_s' alpha(s)``."""
    out = np.zeros((Cs.size, H.shape[1]) + np.shape(T)[1:])
    residual = np.repeat(np.asarray(T, dtype=np.float64)[None], Cs.size, axis=0)
    for cols in blocks:
        Hs = H[:, cols]
        K = Hs @ Hs.T
        solve = _ridge_solver(K, Cs)
        for i in range(Cs.size):
            alpha = solve(i, residual[i])
            out[i, cols] = Hs.T @ alpha
            residual[i] -= K @ alpha
    return out


def global_path(G: np.ndarray, B: np.ndarray, Cs: Sequence[float]) -> np.ndarray:
    """GGBRELM: ridge on the concatenated layers, ``(G + lambda I) beta = B`` per C,
    ``(len(Cs),) + B.shape``: a Cholesky per C for up to :data:`CHOLESKY_MAX_CS` values,
    else one eigendecomposition for all."""
    Cs = _check_Cs(Cs)
    if isinstance(G, RowSpace):  # alpha = (H H' + I / C)^-1 T, beta = H' alpha
        return np.stack([G.H.T @ alpha for alpha in global_path(G.H @ G.H.T, B, Cs)])
    if Cs.size > CHOLESKY_MAX_CS:
        return ridge_path(G, B, Cs)
    return np.stack([solve_ridge(G, B, float(C)) for C in Cs])
