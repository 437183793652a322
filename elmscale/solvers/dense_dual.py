"""The sparse ELM's dual for small problems, with K kept whole: ``solve_dense_dual``.

Below about a thousand rows a fit's fixed costs (a column cache to allocate, a phase per
shrinking round, exact products in Python between them) cost more than its steps: on
LIBSVM's small sets its whole fit took 1.4-4 ms, ours 6-10 ms, most of it around the
steps.  Here every step of a solve runs in one compiled call on the float64 ``K``: the
same steps as the kernel solver's (i by the largest violation, its partner by the gain of
the exact joint step, ``kernel_passes``), with exact float64 columns read from ``K``, so
the gradient stays exact to rounding; no cache, no shrinking, no helper thread.  The end is
checked as the kernel solver's: the gradient recomputed from ``K`` over the nonzero
variables, and the steps go on while the largest violation exceeds ``tol``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from elmscale.core.jit import weighted_row_sum
from elmscale.solvers.dual_common import TAU, kernel_step_cap
from elmscale.solvers.kernel_columns import gram_segment
from elmscale.solvers.kernel_passes import (
    BLOCK,
    bound_flag,
    select_partner_range,
    single_step,
    solve_pair,
    update_select,
)


@njit(cache=True, nogil=True, error_model="numpy")
def _exact_gradient(K, rows, t, alpha, g):
    """``g = Q alpha - 1`` exactly (``Q = t t' K[rows][:, rows]``), over the nonzero alpha."""
    nz = np.flatnonzero(alpha)
    weighted_row_sum(K, rows[nz], alpha[nz] * t[nz], rows, g)
    for p in range(t.size):
        g[p] = t[p] * g[p] - 1.0


@njit(cache=True, nogil=True, error_model="numpy")
def _dense_solve(K, rows, t, C, tol, max_steps, pair_steps, alpha, g):
    """Steps on ``Q = t t' K[rows][:, rows]`` from ``alpha`` until every violation of the
    exact gradient (recomputed from ``K`` whenever the steps' own says done) is within
    ``tol``, or ``max_steps`` are taken; ``g`` is left exact.  Returns
    ``(steps, largest violation)``."""
    n = t.size
    diag = np.empty(n)
    dinv = np.empty(n)
    bound = np.empty(n, np.int8)
    not_unit = 0
    for p in range(n):
        diag[p] = max(K[rows[p], rows[p]], TAU)
        dinv[p] = 1.0 / diag[p]
        not_unit += diag[p] != 1.0
        bound[p] = bound_flag(alpha[p], C)
    unit_diag = not_unit == 0  # (a computed bool: a literal True would be a signature)
    col_i = np.zeros(n)
    col_j = np.zeros(n)
    score = np.empty(BLOCK)
    viol = np.empty(BLOCK)
    zero = 0.0
    steps = 0
    while True:
        # the exact gradient: the check, and the start of the next steps
        _exact_gradient(K, rows, t, alpha, g)
        # (no literal arguments: numba compiles a literal's value as a signature of its own)
        i, max_v = update_select(
            n, g, bound, dinv, col_i, zero, col_j, zero, np.bool_(False), unit_diag, score, viol
        )
        if max_v <= tol or steps >= max_steps:
            return steps, max_v
        while max_v > tol and steps < max_steps:
            steps += 1
            gram_segment(K, rows, t, i, np.int64(0), n, col_i)
            j = -1
            if pair_steps:
                j = select_partner_range(
                    g[i], diag[i], np.int64(0), n, g, bound, diag, col_i, score
                )[0]
            if j < 0:
                di = single_step(alpha[i], g[i], diag[i], C)
                dj = 0.0
            else:
                gram_segment(K, rows, t, j, np.int64(0), n, col_j)
                di, dj = solve_pair(alpha[i], alpha[j], g[i], g[j], diag[i], diag[j], col_i[j], C)
            for v, dv in ((i, di), (j, dj)):
                if v < 0:
                    continue
                new = min(max(alpha[v] + dv, 0.0), C)
                alpha[v] = new
                bound[v] = bound_flag(new, C)
            i, max_v = update_select(
                n, g, bound, dinv, col_i, di, col_j, dj, j >= 0, unit_diag, score, viol
            )


def solve_dense_dual(K, t, *, C, rows=None, tol=1e-3, max_iter=-1, alpha0=None, pair_steps=True):
    """Solve eq. 17 on a kept float64 ``K``; returns ``(alpha, n_iter, converged,
    gradient)`` as ``solve_kernel_dual`` does, the gradient exact.

    ``rows``: the problem's rows of ``K`` (default all), read in place, not copied (a
    one-vs-one pair of a small multiclass fit reads its block of the fit's K).  ``t`` the
    +-1 targets of those rows; ``max_iter`` in steps, < 0 for LIBSVM's cap, max(1e7, 100 n).
    """
    K = np.ascontiguousarray(K, dtype=np.float64)
    t = np.ascontiguousarray(t, dtype=np.float64)
    n = t.size
    rows = np.arange(n) if rows is None else np.ascontiguousarray(rows, dtype=np.int64)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or rows.size != n or K.shape[0] < n:
        raise ValueError(
            f"K must be a square kernel matrix and rows ({rows.size}) one index per target "
            f"({n}); got K of shape {K.shape}"
        )
    C = float(C)
    cap = kernel_step_cap(max_iter, n)
    alpha = np.zeros(n) if alpha0 is None else np.clip(np.array(alpha0, dtype=np.float64), 0, C)
    g = np.empty(n)
    steps, violation = _dense_solve(K, rows, t, C, float(tol), cap, bool(pair_steps), alpha, g)
    return alpha, int(steps), bool(violation <= tol), g


@njit(cache=True, nogil=True, error_model="numpy")
def _dense_solve_each(K, rows, t, bounds, C, tol, caps, pair_steps, alpha, g, steps, violation):
    """``_dense_solve`` for each problem ``p``: the entries ``[bounds[p], bounds[p + 1])`` of
    ``rows``, ``t``, ``alpha`` and ``g``."""
    for p in range(bounds.size - 1):
        s, e = bounds[p], bounds[p + 1]
        steps[p], violation[p] = _dense_solve(
            K, rows[s:e], t[s:e], C, tol, caps[p], pair_steps, alpha[s:e], g[s:e]
        )


def solve_dense_duals(K, problems, *, C, tol=1e-3, max_iter=-1, pair_steps=True):
    """``solve_dense_dual`` from zero for each ``(rows, t)`` of ``problems`` on one ``K``
    (the one-vs-one pairs of a small fit), all in one compiled call: a list of ``(alpha,
    n_iter, converged, gradient)``, the same values as one call per problem (15 pairs of
    250 rows: Python between calls cost as much as the steps)."""
    K = np.ascontiguousarray(K, dtype=np.float64)
    sizes = [t.size for _, t in problems]
    bounds = np.zeros(len(problems) + 1, np.int64)
    np.cumsum(sizes, out=bounds[1:])
    rows = np.concatenate([np.asarray(r, np.int64) for r, _ in problems])
    t = np.concatenate([np.asarray(t, np.float64) for _, t in problems])
    if K.ndim != 2 or K.shape[0] != K.shape[1] or rows.size != t.size:
        raise ValueError(f"K must be a square kernel matrix; got shape {K.shape}")
    if rows.size and not 0 <= rows.min() <= rows.max() < K.shape[0]:
        raise ValueError(f"the problems' rows must be rows of K (0 to {K.shape[0] - 1})")
    caps = np.array([kernel_step_cap(max_iter, n) for n in sizes], np.int64)
    alpha, g = np.zeros(t.size), np.empty(t.size)
    steps, violation = np.zeros(len(problems), np.int64), np.zeros(len(problems))
    _dense_solve_each(
        K, rows, t, bounds, float(C), float(tol), caps, bool(pair_steps), alpha, g, steps, violation
    )
    return [
        (alpha[s:e], int(n), bool(v <= tol), g[s:e])
        for s, e, n, v in zip(bounds[:-1], bounds[1:], steps, violation)
    ]


__all__ = ["solve_dense_dual", "solve_dense_duals"]
