"""The kernel solver's passes over its active variables, in numba: the fused update of the
gradient and selection of the next variable, the partner's selection (second order, as
LIBSVM's), the exact two-variable step and G_bar's update.  Each works on a range
``[start, end)``, so that the helper thread (``solver_helper``) can take the far half."""

from __future__ import annotations

import numpy as np
from numba import njit

from elmscale.core.jit import SEGMENT_BLOCK

# The kernel solver's int8 ``bound`` flag of each variable (LIBSVM's alpha_status).  numba
# reads module-level ints as compile-time constants: the same code as literals.
LOWER_BOUND = 0  # a_i = 0
FREE = 1  # 0 < a_i < C
UPPER_BOUND = 2  # a_i = C

BLOCK = SEGMENT_BLOCK  # entries per block of the vectorised passes, as for kernel columns


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _block_max(x, m):
    """max(0, x[:m]) with four accumulators (a plain running max does not vectorise)."""
    b0 = 0.0
    b1 = 0.0
    b2 = 0.0
    b3 = 0.0
    m4 = m - m % 4
    for j in range(0, m4, 4):
        v = x[j]
        b0 = v if v > b0 else b0
        v = x[j + 1]
        b1 = v if v > b1 else b1
        v = x[j + 2]
        b2 = v if v > b2 else b2
        v = x[j + 3]
        b3 = v if v > b3 else b3
    for j in range(m4, m):
        v = x[j]
        b0 = v if v > b0 else b0
    return max(max(b0, b1), max(b2, b3))


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _first_index(x, m, value):
    """First k < m with ``x[k] == value`` (a block's maximum, found only when it matters)."""
    for k in range(m):
        if x[k] == value:
            return k
    return -1


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _flag_violation(g, flag):
    """KKT violation from the bound flag (``bound``'s codes): branch-free, vectorises."""
    up = g if flag != LOWER_BOUND else 0.0  # may decrease: violation when g > 0
    dn = -g if flag != UPPER_BOUND else 0.0  # may increase: violation when g < 0
    return up if up > dn else dn


@njit(cache=True, nogil=True, error_model="numpy")
def update_select_range(
    start, end, g, bound, dinv, col, delta, col2, delta2, two, unit_diag, score, viol
):
    """``g[start:end] += delta * col (+ delta2 * col2 if two)``, then the variable with the
    largest ``v^2 / Q_ii`` among them.

    One pass in blocks over contiguous arrays (the solver keeps the active
    variables first), so that the update and the violations vectorise; the
    arg-max is looked for only in a block whose maximum beats the best so far.
    The pass is memory-bound, so it reads few bytes per variable: ``bound``
    (int8: ``LOWER_BOUND``, ``FREE``, ``UPPER_BOUND``) rather than alpha, and no diagonal when it
    is all ones.  Returns ``(index, its score, largest squared violation)``; index
    -1 when nothing violates.  ``start`` is a multiple of ``BLOCK`` or the blocks
    shift (the result does not depend on them).
    """
    best = 0.0
    i_sel = -1
    max_v = 0.0
    for s in range(start, end, BLOCK):
        e = min(s + BLOCK, end)
        m = e - s
        gs = g[s:e]
        b_s = bound[s:e]
        c_s = col[s:e]
        if two:
            c2 = col2[s:e]
            for k in range(m):
                gs[k] += delta * c_s[k] + delta2 * c2[k]
        else:
            for k in range(m):
                gs[k] += delta * c_s[k]
        for k in range(m):
            v = _flag_violation(gs[k], b_s[k])
            score[k] = v * v
        if not unit_diag:
            d_s = dinv[s:e]
            for k in range(m):
                viol[k] = score[k]
                score[k] *= d_s[k]
            max_v = max(max_v, _block_max(viol, m))
        bm = _block_max(score, m)
        if bm > best:
            best = bm
            i_sel = s + _first_index(score, m, bm)
    if unit_diag:
        max_v = best
    return i_sel, best, max_v


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def update_select(n_active, g, bound, dinv, col, delta, col2, delta2, two, unit_diag, score, viol):
    """``update_select_range`` over the active variables; returns ``(index, largest
    violation)``."""
    i_sel, _, max_v = update_select_range(
        np.int64(0), n_active, g, bound, dinv, col, delta, col2, delta2, two, unit_diag, score, viol
    )
    return i_sel, np.sqrt(max_v)


@njit(cache=True, nogil=True, error_model="numpy")
def select_partner_range(gi, qii, start, end, g, bound, diag, col_i, score):
    """The violating variable j in ``[start, end)`` that, moved together with i (gradient
    ``gi``, diagonal ``qii``), lowers the objective most; ``(j, its gain)``.

    The gain of the exact two-variable Newton step (bounds ignored; the step
    itself respects them), computed along the column of i in one vectorised
    pass, as LIBSVM's second-order selection does; j = -1 when there is none.
    """
    best = 0.0
    j_sel = -1
    for s in range(start, end, BLOCK):
        e = min(s + BLOCK, end)
        m = e - s
        gs = g[s:e]
        b_s = bound[s:e]
        d_s = diag[s:e]
        c_s = col_i[s:e]
        for k in range(m):
            gk = gs[k]
            v = _flag_violation(gk, b_s[k])
            q = np.float64(c_s[k])
            qjj = d_s[k]
            det = qii * qjj - q * q
            num = qjj * gi * gi - 2.0 * q * gi * gk + qii * gk * gk
            # a (nearly) singular pair, i itself included, gains nothing over one step
            ok = v > 0.0 and det > 1e-10 * qii * qjj
            score[k] = num / (2.0 * det) if ok else 0.0
        bm = _block_max(score, m)
        if bm > best:
            best = bm
            j_sel = s + _first_index(score, m, bm)
    return j_sel, best


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _pair_objective(di, dj, gi, gj, qii, qjj, q):
    return gi * di + gj * dj + 0.5 * (qii * di * di + 2.0 * q * di * dj + qjj * dj * dj)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def bound_flag(a, C):
    """The bound flag of a variable's value (``LOWER_BOUND``, ``FREE``, ``UPPER_BOUND``)."""
    return LOWER_BOUND if a <= 0.0 else (UPPER_BOUND if a >= C else FREE)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def single_step(a, g, qii, C):
    """The exact step of one variable (Algorithm 1's): ``clip(a - g / Q_ii, 0, C) - a``."""
    return min(max(a - g / qii, 0.0), C) - a


@njit(cache=True, nogil=True, error_model="numpy")
def solve_pair(ai, aj, gi, gj, qii, qjj, q, C):
    """Exact minimiser ``(d_i, d_j)`` of the objective over the box for two variables.

    No equality constraint, so both move freely: the unconstrained minimiser
    when it is inside the box, else the best of the four edges (on each, the
    other variable's clipped one-dimensional minimiser): the problem is convex.
    """
    lo_i, hi_i, lo_j, hi_j = -ai, C - ai, -aj, C - aj
    det = qii * qjj - q * q
    if det > 1e-12 * qii * qjj:
        di = (q * gj - qjj * gi) / det
        dj = (q * gi - qii * gj) / det
        if lo_i <= di <= hi_i and lo_j <= dj <= hi_j:
            return di, dj
    best_i, best_j, best = 0.0, 0.0, 0.0
    for side in range(4):
        if side < 2:
            di = lo_i if side == 0 else hi_i
            dj = min(max(-(gj + q * di) / qjj, lo_j), hi_j)
        else:
            dj = lo_j if side == 2 else hi_j
            di = min(max(-(gi + q * dj) / qii, lo_i), hi_i)
        f = _pair_objective(di, dj, gi, gj, qii, qjj, q)
        if f < best:
            best_i, best_j, best = di, dj, f
    return best_i, best_j


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def add_column(g_bar, w, col, start, end):
    """``g_bar[start:end] += w * col[start:end]``, through slices: a loop over
    ``range(start, end)`` indexes with a sign check that stops it vectorising (4x)."""
    gs = g_bar[start:end]
    cs = col[start:end]
    for k in range(end - start):
        gs[k] += w * cs[k]
