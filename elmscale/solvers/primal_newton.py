"""The random-node sparse ELM by primal Newton passes, finished on the exact dual (pure
numerics: no Dask, no Ray; ``distributed.newton`` runs these functions on work units).

The problem is eq. 17 with an explicit mapping, in its primal form

    P(beta) = 1/2 |beta|^2 + C sum_i max(0, 1 - m_i),   m_i = t_i h_i . beta,

whose dual is the single-process solver's ``D(a) = 1/2 |sum a_i t_i h_i|^2 - sum a``,
``0 <= a_i <= C``.

**Phase 1** minimises the Huber-smoothed hinge (Chapelle, "Training a support vector
machine in the primal", 2007): the loss is ``1 - m`` below ``1 - h``, ``(1 + h - m)^2 /
(4h)`` within ``h`` of the margin (the *zone*), 0 above ``1 + h``.  Its gradient is
``beta + C sum l'(m_i) t_i h_i`` and its Hessian ``I + C / (2h) sum_zone h_i h_i'``: each
pass over the rows returns, per unit, the L numbers of the sum and the L x L zone Gram
(``unit_newton_terms``), and the coordinator solves the L x L system.  The same pass
evaluates the loss along the step just taken at a few step sizes (``STEPS``), so a full
Newton step is accepted or cut back without another pass.  ``h`` shrinks from ``H_START``
by ``H_FACTOR`` each time the Newton decrement is small (``H_LEVEL_DECREMENT``) until
``H_FINAL`` and a zone of at most ``ZONE_ROWS`` rows: the smoothed optimum then lies
within about ``h`` of the hinge's, and phase 2 gathers a few thousand rows however many
there are.

**Phase 2** solves the hinge itself.  From phase 1's ``beta``, a row whose margin is below
``1 - delta`` keeps ``a_i = C``, one above ``1 + delta`` keeps 0 (``delta = DELTA_FACTOR h``),
and the rows between (a few thousand at most on the sets measured) are gathered with
their hidden outputs and solved, the others fixed, by the single-process dual solver
(``explicit_dual.run_explicit_dual``, with its exact tail).  A verification pass then
checks every other row's optimality condition at the new ``beta`` and sums the hinge
for the exact duality gap (``unit_split_terms``); rows that break it join the gathered
set and the solve repeats.  The stop is the single-process solver's: every row's KKT
violation at most ``tol`` (its exact check); the relative duality gap is reported beside it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from elmscale.core.jit import huber_step_losses
from elmscale.solvers.explicit_dual import run_explicit_dual

__all__ = [
    "DELTA_FACTOR",
    "H_FINAL",
    "STEPS",
    "NewtonTerms",
    "SplitTerms",
    "accept_step",
    "exact_margins",
    "newton_direction",
    "solve_gathered",
    "unit_newton_terms",
    "unit_split_terms",
]

#: Step sizes along the last direction whose loss each pass returns (0: the point it
#: started from, under the pass's smoothing)
STEPS = (0.0, 1.0, 0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625)
H_START = 1.0  # from beta = 0 every margin is 0: the whole set in the zone, a ridge step
H_FACTOR = 4.0
H_FINAL = 1.0 / 256
#: Past H_FINAL the smoothing keeps shrinking while its zone holds more than ZONE_ROWS
#: rows (the rows near the margin grow with the set: at h = 1/256, 2,254 of 1M rows and
#: about 45,000 of 20M), down to H_MIN (rows repeated on the margin never thin out)
ZONE_ROWS = 2_048
H_MIN = 1e-6
#: A level is done when the Newton decrement -g'd is at most this share of the objective
H_LEVEL_DECREMENT = 1e-4
#: Phase 2 gathers the rows within DELTA_FACTOR * h of the margin (h: phase 1's last)
DELTA_FACTOR = 2.0
ARMIJO = 1e-4
#: Rows per float32 product before its sums are widened to float64 (the Gram's blocks)
CHUNK_ROWS = 65_536
EXACT_CHUNK_ROWS = 8_192  # (float64 copies of 8,192 rows x 200 nodes: 13 MB)


class NewtonTerms(NamedTuple):
    """One unit's (or the units' summed) phase-1 terms of one pair, at the pass's point:
    ``grad`` = sum l'(m_i) t_i h_i (L), ``gram`` = sum over the zone of h_i h_i' (L x L),
    ``loss`` = sum of the Huber loss along the last direction at each of ``STEPS``,
    ``n_zone`` the zone's rows."""

    grad: np.ndarray
    gram: np.ndarray
    loss: np.ndarray
    n_zone: int

    def __add__(self, other):  # (a NamedTuple's + would concatenate)
        return NewtonTerms(
            self.grad + other.grad,
            self.gram + other.gram,
            self.loss + other.loss,
            self.n_zone + other.n_zone,
        )


def _huber_slope(margins: np.ndarray, h: float) -> np.ndarray:
    """``-l'(m)``: 1 below the zone, (1 + h - m) / 2h in it, 0 above (the Huber dual / C)."""
    return np.clip((1.0 + h - margins) / (2.0 * h), 0.0, 1.0)


def _margins(H: np.ndarray, t: np.ndarray, *vectors) -> list[np.ndarray]:
    """``t_i h_i . v`` (float64) of each vector: one float32 product for all of them."""
    V = np.empty((H.shape[1], len(vectors)), dtype=np.float32)
    for j, v in enumerate(vectors):
        V[:, j] = v
    M = H @ V
    return [M[:, j].astype(np.float64) * t for j in range(len(vectors))]


def exact_margins(H: np.ndarray, t: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``t_i h_i . v`` in float64 (``EXACT_CHUNK_ROWS`` rows widened at a time): the
    verification's margins, so that its gap and KKT check see no float32 rounding."""
    out = np.empty(H.shape[0])
    for at in range(0, H.shape[0], EXACT_CHUNK_ROWS):
        out[at : at + EXACT_CHUNK_ROWS] = H[at : at + EXACT_CHUNK_ROWS].astype(np.float64) @ v
    return out * t


def _exact_weighted_rows(H: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``sum_i w_i h_i`` in float64 (as ``exact_margins``): phase 2's part of beta, which
    must be the sum of its duals' rows for the gap to be exact."""
    out = np.zeros(H.shape[1])
    for at in range(0, H.shape[0], EXACT_CHUNK_ROWS):
        out += w[at : at + EXACT_CHUNK_ROWS] @ H[at : at + EXACT_CHUNK_ROWS].astype(np.float64)
    return out


def _weighted_rows(H: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``sum_i w_i h_i`` (float64; ``w`` of shape (n,) or (n, k), giving (L,) or (k, L)):
    float32 products over ``CHUNK_ROWS`` rows at a time, widened and added."""
    w32 = w.astype(np.float32)
    out = np.zeros(w.shape[1:][::-1] + (H.shape[1],))
    for at in range(0, H.shape[0], CHUNK_ROWS):
        out += (w32[at : at + CHUNK_ROWS].T @ H[at : at + CHUNK_ROWS]).astype(np.float64)
    return out


def _gram_of_rows(H: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``sum_{i in rows} h_i h_i'`` (float64), as ``_weighted_rows``."""
    L = H.shape[1]
    out = np.zeros((L, L))
    for at in range(0, rows.size, CHUNK_ROWS):
        block = H[rows[at : at + CHUNK_ROWS]]
        out += (block.T @ block).astype(np.float64)
    return out


def unit_newton_terms(
    H: np.ndarray, t: np.ndarray, point: np.ndarray, direction: np.ndarray, hs: tuple
) -> tuple[NewtonTerms, ...]:
    """One unit's phase-1 terms of one pair (``H`` float32 n x L, ``t`` +-1) at ``point +
    direction`` (the step the coordinator proposes), with the loss at ``point + s
    direction`` for each ``s`` of ``STEPS``: one ``NewtonTerms`` per smoothing of ``hs``
    (the current one and the next, so that a level ends without a pass of its own)."""
    ahead, along = _margins(H, t, point + direction, direction)
    distance = np.abs(1.0 - ahead)
    out = []
    hs_sorted = sorted(hs)
    losses = np.empty((len(hs_sorted), len(STEPS)))
    huber_step_losses(ahead, along, np.asarray(STEPS), np.asarray(hs_sorted, float), losses)
    gram = np.zeros((H.shape[1], H.shape[1]))
    below = -np.inf
    # the zones nest: the narrower one's Gram is summed once and the wider one's adds the
    # ring between them, so two smoothings cost one Gram's products
    slopes = np.column_stack([_huber_slope(ahead, h) * t for h in hs_sorted])
    grads = -_weighted_rows(H, slopes)  # (one product for every smoothing)
    for j, h in enumerate(hs_sorted):
        gram = gram + _gram_of_rows(H, np.flatnonzero((distance <= h) & (distance > below)))
        below = h
        out.append(
            NewtonTerms(
                grad=grads[j],
                gram=gram,
                loss=losses[j],
                n_zone=int(np.count_nonzero(distance <= h)),
            )
        )
    by_h = dict(zip(hs_sorted, out))
    return tuple(by_h[h] for h in hs)


def newton_direction(
    beta: np.ndarray, terms: NewtonTerms, C: float, h: float
) -> tuple[np.ndarray, float]:
    """The Newton step of the smoothed primal at ``beta`` from the summed terms there, and
    its decrement ``-g'd`` (twice the model's predicted decrease)."""
    grad = beta + C * terms.grad
    hessian = (C / (2.0 * h)) * terms.gram
    hessian[np.diag_indices_from(hessian)] += 1.0
    try:
        factor = np.linalg.cholesky(hessian)
        d = -np.linalg.solve(factor.T, np.linalg.solve(factor, grad))
    except np.linalg.LinAlgError:  # (I + PSD is definite; rounding can only break it)
        d = -np.linalg.lstsq(hessian, grad, rcond=None)[0]
    return d, float(-grad @ d)


def smoothed_objective(point: np.ndarray, direction: np.ndarray, loss: np.ndarray, C: float):
    """The smoothed primal at ``point + s direction`` for each of ``STEPS``."""
    half_norms = [0.5 * float(np.sum((point + s * direction) ** 2)) for s in STEPS]
    return np.array(half_norms) + C * loss


def accept_step(objectives: np.ndarray, decrement: float) -> float:
    """The step along the last direction: 1 (the pass's terms are then at the new point)
    when it decreases the objective as Armijo's rule asks, else the best of ``STEPS`` (the
    next pass computes the terms there)."""
    if objectives[1] <= objectives[0] - ARMIJO * max(decrement, 0.0):
        return 1.0
    return STEPS[int(np.argmin(objectives))]


# -- phase 2: the exact hinge on the rows near the margin -----------------------------------


class SplitTerms(NamedTuple):
    """One unit's (or the summed) phase-2 terms of one pair.

    ``n_upper`` = the rows kept at ``a_i = C`` at the checked ``beta``, ``upper_sum`` = sum
    of t_i h_i over those that stay kept (the joining rows leave: L, float64), ``hinge`` =
    sum of max(0, 1 - m_i) over every row at the checked ``beta``, ``worst`` the largest
    KKT violation among the kept rows, and the rows joining the gathered set: their global
    numbers ``rows``, hidden outputs ``H_rows`` (float32), targets ``t_rows`` and starting
    duals ``a_rows``.
    """

    upper_sum: np.ndarray
    n_upper: int
    hinge: float
    worst: float
    rows: np.ndarray
    H_rows: np.ndarray
    t_rows: np.ndarray
    a_rows: np.ndarray


def join_split_terms(parts: list[SplitTerms]) -> SplitTerms:
    """The units' terms summed (the joining rows concatenated, in unit order)."""
    return SplitTerms(
        upper_sum=np.sum([p.upper_sum for p in parts], axis=0),
        n_upper=int(sum(p.n_upper for p in parts)),
        hinge=float(sum(p.hinge for p in parts)),
        worst=float(max(p.worst for p in parts)),
        rows=np.concatenate([p.rows for p in parts]),
        H_rows=np.concatenate([p.H_rows for p in parts]),
        t_rows=np.concatenate([p.t_rows for p in parts]),
        a_rows=np.concatenate([p.a_rows for p in parts]),
    )


def unit_split_terms(
    H: np.ndarray,
    t: np.ndarray,
    row_numbers: np.ndarray,
    beta_fix: np.ndarray,
    beta_check: np.ndarray,
    *,
    C: float,
    h: float,
    delta: float,
    gathered: np.ndarray,
    send_near: bool,
    tol: float,
) -> SplitTerms:
    """One unit's phase-2 terms of one pair.

    The rows within ``delta`` of the margin at ``beta_fix`` (phase 1's) and those in
    ``gathered`` (sorted global row numbers, the rows added since) form the gathered set;
    every other row keeps ``a_i = C`` below the margin, 0 above.  At ``beta_check`` (the
    coordinator's current solution) the unit returns its gap terms and its kept rows that
    break their condition by more than ``tol``, which join; ``send_near`` also sends the
    near rows (the first split: their starting duals are the smoothed problem's, ``C``
    times the Huber slope at ``beta_fix``).  ``row_numbers``: the rows' global numbers.
    """
    (fixed,) = _margins(H, t, beta_fix)
    checked = exact_margins(H, t, beta_check)
    near = np.abs(fixed - 1.0) <= delta
    kept = ~near
    if gathered.size:
        kept[np.isin(row_numbers, gathered, assume_unique=True)] = False
    upper = kept & (fixed < 1.0)
    lower = kept & ~upper
    # the kept rows' KKT violation: at C a margin above 1 breaks it, at 0 one below
    violation = np.where(upper, checked - 1.0, np.where(lower, 1.0 - checked, 0.0))
    breaking = violation > tol
    joining = np.flatnonzero(breaking | near) if send_near else np.flatnonzero(breaking)
    start = np.where(
        near[joining], C * _huber_slope(fixed[joining], h), np.where(upper[joining], C, 0.0)
    )
    return SplitTerms(
        upper_sum=_exact_weighted_rows(H, np.where(upper & ~breaking, t, 0.0)),
        n_upper=int(np.count_nonzero(upper)),
        hinge=float(np.maximum(0.0, 1.0 - checked).sum()),
        worst=float(violation.max(initial=0.0)),
        rows=row_numbers[joining],
        H_rows=H[joining],
        t_rows=t[joining],
        a_rows=start,
    )


def solve_gathered(
    H_rows: np.ndarray,
    t_rows: np.ndarray,
    alpha: np.ndarray,
    fixed_part: np.ndarray,
    *,
    C: float,
    tol: float,
    max_passes: int,
    rng_state: int,
) -> tuple[np.ndarray, bool, int]:
    """The gathered rows' duals (``alpha``, updated in place) solved to ``tol`` with the
    other rows fixed (their part of beta: ``fixed_part``) by the single-process dual
    solver; returns ``(beta, converged, passes)``."""
    beta = fixed_part + _exact_weighted_rows(H_rows, alpha * t_rows)
    converged, passes, _, _ = run_explicit_dual(
        H_rows, t_rows, alpha, beta, C=C, tol=tol, max_passes=max_passes, rng_state=rng_state
    )
    return beta, converged, passes


def relative_gap(beta: np.ndarray, C: float, hinge: float, alpha_sum: float):
    """``(primal, dual, relative gap)``: ``P = 1/2 |beta|^2 + C hinge``, ``D = 1/2 |beta|^2 -
    sum a`` (the single-process solver's ``objective_``), ``(P + D) / P``."""
    half = 0.5 * float(beta @ beta)
    primal = half + C * hinge
    dual = half - alpha_sum
    return primal, dual, (primal + dual) / max(primal, 1e-12)


def unit_duals(
    H: np.ndarray,
    t: np.ndarray,
    row_numbers: np.ndarray,
    beta_fix: np.ndarray,
    *,
    C: float,
    gathered: np.ndarray,
    gathered_alpha: np.ndarray,
) -> np.ndarray:
    """The dual variables of these rows at the end: a gathered row's (``gathered``: sorted
    global row numbers, ``gathered_alpha`` their solved duals) from the solve, every other
    row's kept as phase 2 fixed it (C below the margin at ``beta_fix``, 0 above)."""
    (fixed,) = _margins(H, t, beta_fix)
    alpha = np.where(fixed < 1.0, float(C), 0.0)
    if gathered.size:
        at = np.minimum(np.searchsorted(gathered, row_numbers), gathered.size - 1)
        found = gathered[at] == row_numbers
        alpha[found] = gathered_alpha[at[found]]
    return alpha
