"""One block's share of a CoCoA+ round for the random-node sparse ELM (pure numerics).

The problem is eq. 17 with an explicit mapping: minimise ``D(a) = 1/2 |beta|^2 - sum a``
with ``beta = sum_i a_i t_i h_i`` and ``0 <= a_i <= C``.  CoCoA+ (Smith et al., JMLR 2018)
splits the rows into K blocks; in a round every block improves its own dual variables
against the shared ``beta`` on the local subproblem

    G_k(d) = -sum d + beta' A_k d + (sigma' / 2) |A_k d|^2,   A_k d = sum_{i in k} d_i t_i h_i,

with ``sigma' = K`` (the safe bound for "adding" the blocks' changes, gamma = 1), and the
coordinator adds the blocks' ``A_k d`` to ``beta``.  With ``h' = sqrt(sigma') h`` the
subproblem is the single-process problem itself, started from ``v = beta / sqrt(sigma')``:
its coordinate step has gradient ``t_i h'_i . v - 1`` and curvature ``|h'_i|^2``.  So the
local work is the existing dual coordinate descent (``explicit_dual.run_explicit_dual``), run
for a few passes on the scaled rows, and a block's change to beta is
``(v_end - v_start) / sqrt(sigma')``.

The duality gap needs no rows moved: ``P(beta) = 1/2 |beta|^2 + C sum max(0, 1 - t_i h_i .
beta)`` and ``-D(a) = sum a - 1/2 |beta|^2``; a block returns its hinge sum and its sum of
a at the round's starting ``beta``, and the coordinator adds them (``gap_terms``).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from elmscale.core.seeding import GAMMA, mix64
from elmscale.solvers.explicit_dual import run_explicit_dual

__all__ = [
    "BlockTerms",
    "block_vector",
    "duality_gap",
    "implied_duals",
    "local_passes",
    "pass_seed",
    "sample_beta",
    "scale_rows",
    "start_terms",
]


class BlockTerms(NamedTuple):
    """A block's part of the gap at the round's starting beta: ``hinge`` = sum of
    ``max(0, 1 - t_i h_i . beta)``, ``alpha_sum`` = sum of its ``a_i``."""

    hinge: float
    alpha_sum: float


def pass_seed(seed: int, round_index: int, unit_index: int) -> int:
    """The shuffle's seed of one unit in one round (splitmix64 of the three), so that a
    rerun of a round (a worker lost and its task run again) takes the same steps."""
    z = (int(seed) * GAMMA + round_index * 0xBF58476D1CE4E5B9 + unit_index + 1) % 2**64
    return mix64(z) or 1


def scale_rows(H: np.ndarray, sigma_prime: float) -> np.ndarray:
    """``H *= sqrt(sigma')`` in place (float32 rows of the local subproblem); returns H."""
    H *= np.float32(np.sqrt(sigma_prime))
    return H


def start_terms(
    H_scaled: np.ndarray, t: np.ndarray, alpha: np.ndarray, beta: np.ndarray, sigma_prime: float
) -> BlockTerms:
    """The block's gap terms at ``beta`` (rows scaled by ``scale_rows``)."""
    margins = H_scaled @ (beta / np.sqrt(sigma_prime)).astype(np.float32)
    margins = margins.astype(np.float64)
    margins *= t
    hinge = float(np.maximum(0.0, 1.0 - margins).sum())
    return BlockTerms(hinge, float(alpha.sum()))


def local_passes(
    H_scaled: np.ndarray,
    t: np.ndarray,
    alpha: np.ndarray,
    v: np.ndarray,
    *,
    C: float,
    passes: int,
    tol: float,
    seed: int,
    shrinking: bool = True,
) -> int:
    """Up to ``passes`` passes of dual coordinate descent on the local subproblem.

    ``H_scaled`` (n x L float32, ``scale_rows``), ``t`` (+1 / -1), ``alpha`` (updated in
    place), ``v`` (float64, L: ``beta / sqrt(sigma')`` plus the block's change so far,
    updated in place; a block of several units passes the same ``v`` from one unit to
    the next).  Stops early when the subproblem is solved to ``tol``.  Returns the passes.
    """
    # as solve_explicit_dual: passes, and the small active set the passes stall on solved
    # exactly (measured on 5,000 rows x 100 nodes: 123 passes with it; 5,000 passes of plain
    # coordinate descent stop 1e-3 short of the optimum: the free variables' Q = M M' has
    # rank <= L)
    _, done, _, _ = run_explicit_dual(
        H_scaled,
        t,
        alpha,
        v,
        C=C,
        tol=tol,
        max_passes=passes,
        rng_state=seed,
        shrinking=shrinking,
    )
    return done


def duality_gap(
    beta: np.ndarray, C: float, hinge: float, alpha_sum: float
) -> tuple[float, float, float]:
    """``(primal, dual, relative gap)`` of one binary problem from its blocks' summed
    terms (``BlockTerms.hinge``, ``.alpha_sum``): ``P = 1/2 |beta|^2 + C hinge``,
    ``-D = alpha_sum - 1/2 |beta|^2`` (``dual`` is ``D = 1/2 |beta|^2 - sum a``, the
    single-process solver's ``objective_``), and ``(P + D) / max(P, 1e-12)``."""
    half = 0.5 * float(beta @ beta)
    primal = half + float(C) * float(hinge)
    dual = half - float(alpha_sum)
    return primal, dual, (primal + dual) / max(primal, 1e-12)


# -- the warm start: the duals a sample's solution implies -----------------------------------


def sample_beta(H: np.ndarray, t: np.ndarray, *, C: float, tol: float, seed: int) -> np.ndarray:
    """The primal vector of the problem on a sample of the rows (H float32, m x L, not
    scaled), solved to ``tol`` by the single-process dual coordinate descent.  Give it
    ``C * n / m`` for a uniform sample of m of n rows: the primal ``1/2 |beta|^2 + C sum
    hinge`` over n rows is then estimated by the sample's, so its beta estimates the
    whole problem's."""
    alpha = np.zeros(H.shape[0])
    beta = np.zeros(H.shape[1])
    run_explicit_dual(H, t, alpha, beta, C=C, tol=tol, max_passes=10_000, rng_state=seed or 1)
    return beta


def implied_duals(
    H_scaled: np.ndarray, t: np.ndarray, beta: np.ndarray, sigma_prime: float, C: float
) -> np.ndarray:
    """``a_i = C`` where a row's margin ``t_i h_i . beta`` is below 1, else 0: the dual the
    optimality conditions pair with ``beta`` (rows exactly on the margin, whose ``a_i`` lie
    between, taken as bound), a start for the rounds that is feasible whatever ``beta``."""
    margins = H_scaled @ (beta / np.sqrt(sigma_prime)).astype(np.float32)
    margins = margins.astype(np.float64)
    margins *= t
    return np.where(margins < 1.0, float(C), 0.0)


def block_vector(
    H_scaled: np.ndarray, t: np.ndarray, alpha: np.ndarray, sigma_prime: float
) -> np.ndarray:
    """``A_k a = sum_i a_i t_i h_i`` of a block's rows (H scaled by ``scale_rows``)."""
    weights = (alpha * t).astype(np.float32)
    return (H_scaled.T @ weights).astype(np.float64) / np.sqrt(sigma_prime)
