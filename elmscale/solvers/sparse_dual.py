"""The sparse-ELM dual solver (paper Section V, Algorithm 1), in numba.

Problem (eq. 17): minimise ``1/2 a'Qa - 1'a`` subject to ``0 <= a_i <= C``,
``Q_ij = t_i t_j K(x_i, x_j)``.  There is no equality constraint, so one
variable can move alone: ``a_i <- clip(a_i - g_i / Q_ii, 0, C)`` (Algorithm 1).

Two solvers, both pure functions of arrays (no Dask, no Ray), so that a
one-vs-one pair or a cross-validation fold can run anywhere:

``solve_kernel_dual``
    LIBSVM-style: kernel columns (float32, see ``_jit.q_segment`` for their
    accuracy; float64 when Q's scale needs it, ``column_dtype``) in an LRU cache
    with a budget in MB and O(1) lookup (prev/next arrays of slots).  The active
    variables are kept first, in every per-variable array and in every cached
    column (LIBSVM's swap_index, done as one stable partition per shrinking
    round), so that the step's pass over them is contiguous and vectorises, and
    a column of a shrunk problem is computed only for the active part.  Each step
    takes i with the largest ``v_i^2 / Q_ii`` (``v_i`` its KKT violation; for the
    gaussian kernel ``Q_ii = 1`` and this is the paper's rule, eqs. 41-42), then by
    default a
    partner j with the largest gain of the joint exact step along Q's column i
    (second-order selection as in LIBSVM; without the equality constraint both
    move freely inside the box): at large C single steps need ten times more
    of them.  Shrinking of bounded variables every ``SHRINK_EVERY`` steps,
    with ``G_bar = sum_{a_j = C} C Q[:, j]`` kept so that the gradient of
    shrunk variables is rebuilt from the free ones only.  On exit the
    gradient is recomputed exactly in float64 from the support vectors and the
    solver continues if the largest violation exceeds ``tol``.  A small
    problem solved many times (a C path) may pass its float64 Gram matrix.
``solve_explicit_dual``
    For random hidden nodes (``Q = (t h)(t h)'``): dual coordinate descent of
    LIBLINEAR (Hsieh et al. 2008) on ``beta = sum_i a_i t_i h(x_i)``: O(L) per
    step, no kernel columns, random order per pass (rows prefetched ahead of
    it), shrinking.

Both accept a warm start ``alpha0`` (a path of increasing C reuses the last
solution).  Both end the same way when the steps stall on a small active set
(ill-conditioned Q: wide kernels, large C, or random nodes, where Q has rank at
most L): that reduced problem, the others fixed, is solved exactly by
``box_qp``, a dense primal active-set method, and the steps resume from its
solution; the exact final check is unchanged.  On a C path with K kept whole, a
warm start with few free variables (wide kernels) goes to ``box_qp``'s method over
every row before any step (``face_qp_max_free``).  With two cores a helper thread
takes the far half of each long pass of a step (``helper``), to the same result.

Inside, the numba phases take their state in named groups, never by slot number: named
tuples of arrays and scalars (the kernel solver's ``_Settings``, ``QMatrix``, Q as a
column source with a ``SOURCE_*`` code, ``_Solution``, ``ColumnCache``, ``_Helper``; the
explicit solver's ``_ExplicitSettings``, ``_ExplicitProblem``, ``_ExplicitSolution``,
``_PassOrder``), one record of integer state each (``KERNEL_STATE``,
``EXPLICIT_STATE``), and the bound flags ``LOWER_BOUND``, ``FREE``, ``UPPER_BOUND``.
"""

from __future__ import annotations

import threading
from collections import namedtuple

import numba
import numpy as np

# numba loads scipy's BLAS, an OpenBLAS of its own, on its first compiled call (to serve
# matrix products in njit code, which this module no longer makes): loaded here, so that
# it exists before a Ray task sets its thread limits, which would otherwise miss it
import scipy.linalg  # noqa: F401
from numba import njit

from elmscale.core.jit import (
    KERNEL_CODES,
    SEGMENT_BLOCK,
    atomic_load_acquire,
    atomic_store_release,
    dot,
    prefetch,
    prefetch_row,
    q_segment,
    shuffle_prefix,
    signed_block,
    weighted_row_sum,
)
from elmscale.core.memory import empty_huge
from elmscale.features.kernels import Kernel

SHRINK_EVERY = 1000
_TAU = 1e-12  # guard for a non-positive diagonal
# The tail: once shrinking has left at most TAIL_SIZE variables active and the steps
# have gone on for TAIL_STEPS_PER_VARIABLE times that many without another shrink, the
# reduced problem over them is solved exactly (``box_qp``).  Single and pair steps
# crawl there when Q is ill-conditioned (wide kernels, large C): on 2,400 COD-RNA rows
# at sigma = 1000, C = 500, 3.8 M steps were spent on the last 117 active variables.
DEFAULT_STEP_CAP = 10_000_000  # steps when max_iter < 0 (LIBSVM's max(1e7, 100 n))
TAIL_SIZE = 1024
TAIL_STEPS_PER_VARIABLE = 10
# The explicit solver's: passes with at most EXPLICIT_TAIL_SIZE variables active.  Its
# tail is larger (1M generated rows: 2,388 rows active for 15,000+ passes); Q_AA = M M'
# has rank at most L, so the box QP's factorisations stay small.
TAIL_PASSES = 20
EXPLICIT_TAIL_SIZE = 4096
# the explicit solver's pass cap when max_iter is -1 (LIBLINEAR's dual CD stops at 1,000
# passes; ours shrink the active set, so most passes are short: 1M rows x 200 nodes at
# C = 1 took 6,786).  Without one, a problem the passes cannot finish ran for ever: noise
# features at a large C (LIBSVM's one-hot mushrooms, 200 sinusoid nodes, C = 100: the
# objective still falling after 200,000 passes, 9 s)
EXPLICIT_MAX_PASSES = 100_000
SHRINK_DIVISOR = 4.0  # the explicit solver's shrinking thresholds, divided (_explicit_phase)
# A warm start with a kept K (a C path) and at most FACE_QP_MAX_FREE free variables is
# solved as one dense box QP over every row, given up after FACE_QP_STEPS_PER_ROW
# active-set steps per row or at twice as many free.  Wide kernels keep few variables
# free and ill-conditioned, where coordinate steps crawl: on a 2,400-row COD-RNA fold's
# 14 x 14 paths the steps took 2.3-2.8 s, 1.18-1.27 s with this (32: 1.22-1.30 s, 128:
# 1.22-1.30 s).  Hundreds free (narrow kernels, large C) keep the coordinate steps: each
# active-set step there costs a product with every free row of Q, and hundreds are taken.
FACE_QP_MAX_FREE = 64
FACE_QP_STEPS_PER_ROW = 1
PREFETCH_AHEAD = 8  # rows of H asked for ahead of the explicit solver's random order
# The kernel solver's int8 ``bound`` flag of each variable (LIBSVM's alpha_status).  numba
# reads module-level ints as compile-time constants: the same code as literals.
LOWER_BOUND = 0  # a_i = 0
FREE = 1  # 0 < a_i < C
UPPER_BOUND = 2  # a_i = C
# What a phase returns (the kernel solver's all four, the explicit solver's 0, 1 and 3)
PHASE_OPTIMAL = 0  # every variable within tol (the kernel's: a candidate, checked exactly)
PHASE_MAX_ITER = 1  # the step (pass) cap reached
PHASE_UNSHRINK = 2  # the caller rebuilds the shrunk variables' gradient, then calls again
PHASE_TAIL = 3  # the caller solves the small active set exactly, then calls again
# The kernel solver's integer state between phases, one record whose fields numba reads
# and writes in place (a record is a pointer to its bytes: no copy)
KERNEL_STATE = np.dtype(
    [
        ("head", np.int64),  # the LRU list's head: the most recently used slot
        ("n_active", np.int64),  # active variables: the solver's positions [0, n_active)
        ("unshrunk", np.bool_),  # every variable brought back once near the end (LIBSVM's)
        ("to_shrink", np.int64),  # steps to the next shrinking round
        ("steps", np.int64),  # steps so far
        ("last_change", np.int64),  # the step count at the active set's last change or tail solve
        # counters for diagnosis (``info``)
        ("column_entries", np.int64),  # column entries computed
        ("shrinks", np.int64),  # shrinking rounds
        ("shrunk_active_sum", np.int64),  # the active sizes they left, summed
        ("g_bar_updates", np.int64),
        ("g_bar_entries", np.int64),  # column entries added for G_bar's updates
    ],
    align=True,
)
# The explicit solver's (``_explicit_phase``)
EXPLICIT_STATE = np.dtype(
    [
        ("active_size", np.int64),  # the first active_size of ``active`` are active
        ("passes", np.int64),  # passes so far
        ("tail_passes", np.int64),  # passes in a row with at most tail_size active
        # the shrinking thresholds from the previous pass: LIBLINEAR's, the largest gradient
        # of a variable that may decrease and the smallest of one that may increase, over
        # SHRINK_DIVISOR
        ("up_bound", np.float64),
        ("down_bound", np.float64),
    ],
    align=True,
)


def _new_record(dtype, **fields):
    """One record of ``dtype`` (a view of a one-element array: numba writes through it),
    its fields zero but those given."""
    record = np.zeros(1, dtype)[0]
    for name, value in fields.items():
        record[name] = value
    return record


@njit(cache=True, error_model="numpy", inline="always")
def _violation(a, g, C):
    """KKT violation of one variable (0 when optimal)."""
    if a <= 0.0:
        return -g if g < 0.0 else 0.0
    if a >= C:
        return g if g > 0.0 else 0.0
    return abs(g)


def _bound_flags(alpha, C):
    """The phase's int8 bound flags of ``alpha`` (``LOWER_BOUND``, ``FREE``, ``UPPER_BOUND``)."""
    return np.where(alpha <= 0.0, LOWER_BOUND, np.where(alpha >= C, UPPER_BOUND, FREE)).astype(
        np.int8
    )


def column_dtype(largest_diagonal, tol):
    """float32 for Q's cached columns, as LIBSVM's, unless their rounding (2^-24 of Q's
    largest entry, its diagonal's) would pass ``tol / 10``: then float64.

    Without a bias, Q keeps the kernel's constant part, which scaling does not remove
    for a polynomial kernel: on features near 100, (1 + u.v)^2 reaches 4e8, float32
    columns are off by 24, and the steps never come within tol (measured: 1,000,000
    steps, a violation of 38, on 80 rows; LIBSVM's equality constraint cancels the
    constant part).  Gaussian and laplacian columns (diagonal 1) stay float32.
    """
    return np.dtype(np.float64 if largest_diagonal * 2.0**-24 > 0.1 * tol else np.float32)


# Q as the kernel solver sees it (LIBSVM's QMatrix): where its columns come from
# (``source``, a SOURCE_* code, and the arrays that source reads), its signs ``t32`` and
# diagonal (``diag``, ``dinv`` = 1 / diag, ``unit_diag`` when all ones), all in the
# solver's order (``perm[p]``: the row at position p), which shrinking permutes (LIBSVM's
# swap_index).  Another source (another model's Q) is another code, its arrays, and a
# branch in ``_column_segment``; the cache and the steps stay as they are.
SOURCE_ROWS = 0  # K computed from the rows: ``Xt`` (d x n, float32), kind / sigma / degree
SOURCE_GRAM = 1  # read from ``gram``, a kept float64 K(X, X) (n x n, rows in X's order)
QMatrix = namedtuple(
    "QMatrix",
    [
        "source",
        "Xt",
        "t32",
        "perm",
        "gram",
        "kind",
        "sigma",
        "degree",
        "sigma_star",
        "tau",
        "diag",
        "dinv",
        "unit_diag",
    ],
)
# The LRU cache of Q's columns (float32 or float64 by ``column_dtype``): ``cols`` (slots x
# n, in the solver's order) with ``col_len[s]`` entries of slot s valid; ``slot_of[p]``
# position p's slot (-1: none) and ``owner[s]`` slot s's position; ``prev`` / ``nxt`` a
# circular doubly linked list of the slots, the head the most recently used.
ColumnCache = namedtuple("ColumnCache", ["cols", "col_len", "slot_of", "owner", "prev", "nxt"])


def kernel_key(n_rows: int, kernel: Kernel) -> tuple:
    """What a ``KernelSolverState`` was made for: the row count and every kernel parameter."""
    return (n_rows, kernel.kind, float(kernel.sigma), int(kernel.degree)) + (
        (float(kernel.sigma_star), float(kernel.tau)) if kernel.kind == "mg" else ()
    )


class KernelSolverState:
    """What ``solve_kernel_dual`` keeps between calls on the same rows (a C path): the
    solver's order of the rows (shrinking permutes them), the rows' data, targets and
    diagonal in that order, and the LRU cache of Q's columns.  The columns do not
    depend on C, so each C of a path starts with the last one's columns cached.

    Made by ``solve_kernel_dual`` (``state=None``); pass ``KernelSolverState(...)`` from
    the caller to keep it, only with the same ``X``, ``t`` and kernel (the solver checks
    the row count and the kernel).  Its cache is ``cache_size`` MB of columns, float32
    unless float32's rounding of Q's largest entries would pass a tenth of ``tol``
    (``column_dtype``): then float64.
    """

    def __init__(self, X, t, kernel: Kernel, cache_size, tol=1e-3):
        X32 = np.ascontiguousarray(X, dtype=np.float32)
        n = X32.shape[0]
        self.key = kernel_key(n, kernel)
        self.perm = np.arange(n)  # perm[p]: the row at the solver's position p
        self.Xt = np.ascontiguousarray(X32.T)
        self.tp = np.ascontiguousarray(t, dtype=np.float32)  # +-1, exact in float32
        if kernel.kind == "polynomial":
            X64 = X32.astype(np.float64)
            diag = (1.0 + np.einsum("ij,ij->i", X64, X64)) ** int(kernel.degree)
        else:
            diag = np.ones(n)
        self.dinv = 1.0 / np.maximum(diag, _TAU)
        self.unit_diag = bool(np.all(diag == 1.0))
        self.diag = 1.0 / self.dinv
        dtype = column_dtype(float(self.diag.max(initial=1.0)), tol)
        n_slots = int(max(2, min(n, cache_size * 2**20 // (dtype.itemsize * max(n, 1)))))
        self.cache = ColumnCache(
            cols=empty_huge((n_slots, n), dtype),
            col_len=np.zeros(n_slots, np.int64),
            slot_of=np.full(n, -1, np.int64),
            owner=np.full(n_slots, -1, np.int64),
            prev=(np.arange(n_slots) - 1) % n_slots,
            nxt=(np.arange(n_slots) + 1) % n_slots,
        )
        # (u, Q u) exactly: the last solution's variables at the bound and their G_bar,
        # from which the next C's G_bar is a scaling (see ``product_from``)
        self.known_bar = None

    @property
    def cols(self):
        """The cached columns (slots x n)."""
        return self.cache.cols


_ALL_COLUMNS = np.empty(0, np.int64)  # weighted_row_sum's cols: every column


class ExactQ:
    """Products with ``Q = t t' K`` exactly in float64, for the solver's checks.

    The kernel values come from the rows (``Kernel.block_matvec``, parallel over
    rows, run from Python because a cached numba function that calls a parallel one
    crashes when loaded from numba's cache), or from ``gram``, a precomputed float64
    ``K(X, X)`` for small problems solved many times (a C path): then a product is
    a BLAS matrix-vector product and no kernel value is computed twice.
    """

    def __init__(self, X32, t, kernel: Kernel, gram=None):
        self.X32, self.t, self.kernel, self.gram = X32, t, kernel, gram

    def matvec(self, rows, weights):
        """``Q[rows, :] @ weights`` (``rows`` an index array, or None for all), over the
        nonzero weights only."""
        nz = np.flatnonzero(weights != 0.0)
        t_rows = self.t if rows is None else self.t[rows]
        if nz.size == 0:
            return np.zeros(t_rows.size)
        coef = weights[nz] * self.t[nz]
        if self.gram is not None:
            # K is symmetric: K[rows, nz] @ coef = coef @ K[nz, rows], read row by row
            # in place (numpy's fancy indexing would copy the block first: 2-5x slower)
            out = np.empty(t_rows.size)
            weighted_row_sum(
                self.gram,
                nz,
                coef,
                _ALL_COLUMNS if rows is None else np.asarray(rows, np.int64),
                out,
            )
            return t_rows * out
        A = self.X32 if rows is None else self.X32[rows]
        return t_rows * self.kernel.block_matvec(A, self.X32[nz], coef)

    def block(self, rows):
        """``Q[rows][:, rows]``, dense."""
        t_rows = self.t[rows]
        if self.gram is not None:
            out = np.empty((t_rows.size, t_rows.size))
            signed_block(self.gram, np.asarray(rows, np.int64), t_rows, out)
            return out
        K = self.kernel.block(self.X32[rows], self.X32[rows])
        return (t_rows[:, None] * t_rows[None, :]) * K


def exact_gradient(Q: ExactQ, alpha, C):
    """``(Q alpha - 1, G_bar)`` exactly in float64, ``G_bar = Q (C at the upper bound, else 0)``.

    The two share one pass over the support vectors: the bounded ones give
    G_bar, the free ones the rest.
    """
    at_upper = alpha >= C
    g_bar = Q.matvec(None, np.where(at_upper, alpha, 0.0))
    g = g_bar + Q.matvec(None, np.where(at_upper, 0.0, alpha)) - 1.0
    return g, g_bar


def product_from(Q: ExactQ, u, known):
    """``Q u`` exactly, from ``known = (w, Q w)``, an exact product kept from before, when
    ``u`` is ``w`` scaled (a path's predictor moves every variable at the bound by the
    same factor) or differs from it in fewer entries than it has; else computed."""
    if known is not None:
        w, Qw = known
        support = u != 0.0
        if np.array_equal(support, w != 0.0):
            if not support.any():
                return np.zeros(u.size)
            ratio = u[support] / w[support]
            if np.all(ratio == ratio[0]):
                return Qw * ratio[0]
        diff = u - w
        if np.count_nonzero(diff) < np.count_nonzero(u):
            return Qw + Q.matvec(None, diff)
    return Q.matvec(None, u)


def _gradient_from(Q: ExactQ, alpha, C, alpha_ref, g_ref, known_bar=None):
    """``(Q alpha - 1, G_bar)`` exactly from ``g_ref``, the exact gradient at ``alpha_ref``.

    ``g_ref + Q (alpha - alpha_ref)``, a product over the changed variables only.
    When they are exactly the variables at the bound, all moved by the same amount
    (a path's predictor), that product is a multiple of G_bar, so one product
    gives both.  ``G_bar`` itself comes from ``known_bar`` (see ``product_from``).
    """
    delta = alpha - alpha_ref
    changed = np.flatnonzero(delta)
    at_upper = alpha >= C
    g_bar = product_from(Q, np.where(at_upper, alpha, 0.0), known_bar)
    if changed.size == 0:
        return g_ref.copy(), g_bar
    if (
        at_upper.any()
        and changed.size == np.count_nonzero(at_upper)
        and np.all(at_upper[changed])
        and np.all(delta[changed] == delta[changed[0]])
    ):
        return g_ref + g_bar * (delta[changed[0]] / C), g_bar
    return g_ref + Q.matvec(None, delta), g_bar


_BLOCK = SEGMENT_BLOCK  # entries per block of the vectorised passes, as for kernel columns


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
def _update_select_range(
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
    -1 when nothing violates.  ``start`` is a multiple of ``_BLOCK`` or the blocks
    shift (the result does not depend on them).
    """
    best = 0.0
    i_sel = -1
    max_v = 0.0
    for s in range(start, end, _BLOCK):
        e = min(s + _BLOCK, end)
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
def _update_select(n_active, g, bound, dinv, col, delta, col2, delta2, two, unit_diag, score, viol):
    """``_update_select_range`` over the active variables; returns ``(index, largest
    violation)``."""
    i_sel, _, max_v = _update_select_range(
        np.int64(0), n_active, g, bound, dinv, col, delta, col2, delta2, two, unit_diag, score, viol
    )
    return i_sel, np.sqrt(max_v)


@njit(cache=True, nogil=True, error_model="numpy")
def _select_partner_range(gi, qii, start, end, g, bound, diag, col_i, score):
    """The violating variable j in ``[start, end)`` that, moved together with i (gradient
    ``gi``, diagonal ``qii``), lowers the objective most; ``(j, its gain)``.

    The gain of the exact two-variable Newton step (bounds ignored; the step
    itself respects them), computed along the column of i in one vectorised
    pass, as LIBSVM's second-order selection does; j = -1 when there is none.
    """
    best = 0.0
    j_sel = -1
    for s in range(start, end, _BLOCK):
        e = min(s + _BLOCK, end)
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


@njit(cache=True, nogil=True, error_model="numpy")
def _solve_pair(ai, aj, gi, gj, qii, qjj, q, C):
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
def _gram_segment(gram, perm, t32, i, start, end, out):
    """``out[p] = t_i t_p K[row i, row p]`` (float32) for positions ``[start, end)`` from a
    precomputed Gram matrix (``perm`` maps the solver's positions to rows)."""
    row = gram[perm[i]]
    ti = t32[i]
    for p in range(start, end):
        out[p] = ti * t32[p] * row[perm[p]]


# A step's scratch (``_step_scratch``; the solver's thread and the helper each have
# their own): ``xi`` (d floats) for a column's row, ``q_segment``'s block buffers, and
# the passes' ``score`` and ``viol`` blocks
_Scratch = namedtuple("_Scratch", ["xi", "acc32", "kbuf32", "acc64", "kbuf64", "score", "viol"])


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _step_scratch(d):
    """A step's buffers (``_Scratch``) for rows of ``d`` features."""
    return _Scratch(
        np.empty(d, np.float32),
        np.empty(SEGMENT_BLOCK, np.float32),
        np.empty(SEGMENT_BLOCK, np.int32),
        np.empty(SEGMENT_BLOCK),
        np.empty(SEGMENT_BLOCK, np.int64),
        np.empty(_BLOCK),
        np.empty(_BLOCK),
    )


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _column_segment(q, i, start, end, scratch, out):
    """Q's column i over positions ``[start, end)`` (``q`` a ``QMatrix``), from its
    source: read from the kept Gram matrix, or computed from the rows (``q_segment``)."""
    if q.source == SOURCE_GRAM:
        _gram_segment(q.gram, q.perm, q.t32, i, start, end, out)
    else:
        q_segment(
            q.Xt,
            q.t32,
            i,
            start,
            end,
            q.kind,
            q.sigma,
            q.degree,
            q.sigma_star,
            q.tau,
            scratch.xi,
            scratch.acc32,
            scratch.kbuf32,
            scratch.acc64,
            scratch.kbuf64,
            out,
        )


# The helper thread.  With two cores, a second thread takes the far half of each long
# pass of a step (the kernel columns, the partner's selection, the gradient's update,
# G_bar's update) while the solver's thread does the near half: the halves touch
# disjoint entries, and every decision stays on the solver's thread, so the result is
# the same to the bit as on one thread (a helper's best counts only when strictly
# better, as the first maximum would in one pass).  The two meet through ``_Helper``'s
# ``ctrl`` (int64, slots _CTRL_*) and ``fargs`` (float64, slots _F_*); no helper: both
# empty.  A hand-over measured 0.2-0.85 us (a bare round trip between two threads 0.06
# us), so passes shorter than ``SPLIT_MIN`` stay whole.
_Helper = namedtuple("_Helper", ["ctrl", "fargs"])
_CTRL_POSTED = 0  # the number of the job posted (the solver's thread writes it)
_CTRL_DONE = 1  # of the job done (the helper's)
_CTRL_JOB = 2  # its kind (_JOB_*)
_CTRL_VAR = 3  # the variable whose column is computed; for an update, 1 if two columns
_CTRL_START = 4  # the helper's part of the pass: [start, end)
_CTRL_END = 5
_CTRL_SLOT = 6  # the cache slot of the (first) column
_CTRL_SLOT2 = 7  # of the second column (an update's)
_CTRL_RESULT = 8  # an index found (partner, selected variable)
_CTRL_SIZE = 9
_F_ARG = 0  # the float arguments: gi (partner), the step's di (update), w (G_bar)
_F_ARG2 = 1  # qii (partner), dj (update)
_F_BEST = 2  # the best score found in the helper's part
_F_MAX_V = 3  # the largest squared violation there (update)
_FARGS_SIZE = 4
_JOB_STOP = 0
_JOB_COLUMN = 1
_JOB_PARTNER = 2
_JOB_UPDATE = 3
_JOB_G_BAR = 4
SPLIT_MIN = 4096
HELPER_MIN_ROWS = 2 * SPLIT_MIN  # problems smaller than this never start a helper
_NO_HELPER = _Helper(np.zeros(0, np.int64), np.zeros(0))


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _post(ctrl, job, var, start, end, slot, slot2):
    """Hand the helper a job (arguments first, then the job number, with release)."""
    ctrl[_CTRL_JOB] = job
    ctrl[_CTRL_VAR] = var
    ctrl[_CTRL_START] = start
    ctrl[_CTRL_END] = end
    ctrl[_CTRL_SLOT] = slot
    ctrl[_CTRL_SLOT2] = slot2
    atomic_store_release(ctrl, _CTRL_POSTED, ctrl[_CTRL_POSTED] + 1)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _wait(ctrl):
    """Spin until the helper has done the last job posted."""
    posted = ctrl[_CTRL_POSTED]
    while atomic_load_acquire(ctrl, _CTRL_DONE) != posted:
        pass


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _split_point(helper, start, end):
    """Where a pass over ``[start, end)`` is cut (a multiple of ``_BLOCK`` from ``start``);
    ``start`` when there is no helper or the pass is short."""
    if helper.ctrl.shape[0] == 0 or end - start < SPLIT_MIN:
        return start
    return start + (end - start) // 2 // _BLOCK * _BLOCK


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _add_column(g_bar, w, col, start, end):
    """``g_bar[start:end] += w * col[start:end]``, through slices: a loop over
    ``range(start, end)`` indexes with a sign check that stops it vectorising (4x)."""
    gs = g_bar[start:end]
    cs = col[start:end]
    for k in range(end - start):
        gs[k] += w * cs[k]


# The kernel solver's arguments, grouped (numba passes a tuple of arrays as its arrays:
# no cost).  The settings of a solve; the solution in the solver's order (alpha, its
# ``bound`` flags, the gradient, G_bar); Q (``QMatrix``) and its ``ColumnCache``; the
# integer state (a ``KERNEL_STATE`` record); the helper's control (``_Helper``).
_Settings = namedtuple(
    "_Settings", ["C", "tol", "shrinking", "pair_steps", "max_iter", "tail_size"]
)
_Solution = namedtuple("_Solution", ["alpha", "bound", "g", "g_bar"])
# ``_shrink``'s buffers: the new order, and one of each dtype it permutes
_ShrinkScratch = namedtuple("_ShrinkScratch", ["order", "tmp64", "tmp32", "tmpi", "tmp8"])


@njit(cache=True, nogil=True, error_model="numpy")
def _helper_loop(helper, q, sol, cache):
    """The helper thread's body: do the jobs posted in ``helper.ctrl`` until ``_JOB_STOP``.
    It spins between jobs; it runs only while a phase of steps runs (see ``_run_phase``)."""
    ctrl, fargs = helper.ctrl, helper.fargs
    cols = cache.cols
    scratch = _step_scratch(q.Xt.shape[0])
    done = atomic_load_acquire(ctrl, _CTRL_DONE)
    while True:
        posted = atomic_load_acquire(ctrl, _CTRL_POSTED)
        if posted == done:
            continue
        job = ctrl[_CTRL_JOB]
        if job == _JOB_STOP:
            atomic_store_release(ctrl, _CTRL_DONE, posted)
            return
        var, start, end = ctrl[_CTRL_VAR], ctrl[_CTRL_START], ctrl[_CTRL_END]
        s, s2 = ctrl[_CTRL_SLOT], ctrl[_CTRL_SLOT2]
        if job == _JOB_COLUMN:
            _column_segment(q, var, start, end, scratch, cols[s])
        elif job == _JOB_PARTNER:
            j, best = _select_partner_range(
                fargs[_F_ARG],
                fargs[_F_ARG2],
                start,
                end,
                sol.g,
                sol.bound,
                q.diag,
                cols[s],
                scratch.score,
            )
            ctrl[_CTRL_RESULT] = j
            fargs[_F_BEST] = best
        elif job == _JOB_UPDATE:
            i_sel, best, max_v = _update_select_range(
                start,
                end,
                sol.g,
                sol.bound,
                q.dinv,
                cols[s],
                fargs[_F_ARG],
                cols[s2],
                fargs[_F_ARG2],
                var != 0,
                q.unit_diag,
                scratch.score,
                scratch.viol,
            )
            ctrl[_CTRL_RESULT] = i_sel
            fargs[_F_BEST] = best
            fargs[_F_MAX_V] = max_v
        elif job == _JOB_G_BAR:
            _add_column(sol.g_bar, fargs[_F_ARG], cols[s], start, end)
        done = posted
        atomic_store_release(ctrl, _CTRL_DONE, posted)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _column_fill(i, start, end, s, q, cols, scratch, helper):
    """``cols[s][start:end]`` = Q's column i there, the far half on the helper if any."""
    mid = _split_point(helper, start, end)
    if mid > start:
        _post(helper.ctrl, _JOB_COLUMN, i, mid, end, s, 0)
        _column_segment(q, i, start, mid, scratch, cols[s])
        _wait(helper.ctrl)
    else:
        _column_segment(q, i, start, end, scratch, cols[s])


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _select_partner(i, n_active, sol, q, cols, s, scratch, helper):
    """``_select_partner_range`` over the active variables (column i in slot ``s``)."""
    g, bound, diag = sol.g, sol.bound, q.diag
    gi = g[i]
    qii = diag[i]
    mid = _split_point(helper, 0, n_active)
    if mid == 0:
        return _select_partner_range(
            gi, qii, np.int64(0), n_active, g, bound, diag, cols[s], scratch.score
        )[0]
    ctrl, fargs = helper.ctrl, helper.fargs
    fargs[_F_ARG] = gi
    fargs[_F_ARG2] = qii
    _post(ctrl, _JOB_PARTNER, 0, mid, n_active, s, 0)
    j, best = _select_partner_range(
        gi, qii, np.int64(0), mid, g, bound, diag, cols[s], scratch.score
    )
    _wait(ctrl)
    return ctrl[_CTRL_RESULT] if fargs[_F_BEST] > best else j


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _update_select_split(n_active, sol, q, cols, s, di, s2, dj, two, scratch, helper):
    """``_update_select`` with Q's columns in slots ``s`` and ``s2``, the far half of the
    active variables on the helper if any."""
    g, bound, dinv, unit_diag = sol.g, sol.bound, q.dinv, q.unit_diag
    mid = _split_point(helper, 0, n_active)
    if mid == 0:
        return _update_select(
            n_active,
            g,
            bound,
            dinv,
            cols[s],
            di,
            cols[s2],
            dj,
            two,
            unit_diag,
            scratch.score,
            scratch.viol,
        )
    ctrl, fargs = helper.ctrl, helper.fargs
    fargs[_F_ARG] = di
    fargs[_F_ARG2] = dj
    _post(ctrl, _JOB_UPDATE, 1 if two else 0, mid, n_active, s, s2)
    i_sel, best, max_v = _update_select_range(
        np.int64(0),
        mid,
        g,
        bound,
        dinv,
        cols[s],
        di,
        cols[s2],
        dj,
        two,
        unit_diag,
        scratch.score,
        scratch.viol,
    )
    _wait(ctrl)
    if fargs[_F_BEST] > best:
        i_sel = ctrl[_CTRL_RESULT]
    return i_sel, np.sqrt(max(max_v, fargs[_F_MAX_V]))


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _update_g_bar(g_bar, w, cols, s, n, helper):
    """``g_bar[:n] += w * cols[s][:n]``, the far half on the helper if any."""
    mid = _split_point(helper, 0, n)
    if mid == 0:
        _add_column(g_bar, w, cols[s], 0, n)
        return
    helper.fargs[_F_ARG] = w
    _post(helper.ctrl, _JOB_G_BAR, 0, mid, n, s, 0)
    _add_column(g_bar, w, cols[s], 0, mid)
    _wait(helper.ctrl)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _fetch_column(i, length, head, q, cache, scratch, state, helper):
    """Slot holding Q[:length, i] (computed or extended as needed), moved to the LRU front
    (``head`` the list's head before).

    Returns the slot, which is the new head; counts the entries computed in ``state``
    (a ``KERNEL_STATE`` record)."""
    cols, col_len, slot_of, owner = cache.cols, cache.col_len, cache.slot_of, cache.owner
    prev, nxt = cache.prev, cache.nxt
    s = slot_of[i]
    if s < 0:
        s = prev[head]  # least recently used slot
        if owner[s] >= 0:
            slot_of[owner[s]] = -1
        owner[s] = i
        slot_of[i] = s
        col_len[s] = 0
    if col_len[s] < length:
        state.column_entries += length - col_len[s]
        _column_fill(i, col_len[s], length, s, q, cols, scratch, helper)
        col_len[s] = length
    if s != head:
        nxt[prev[s]] = nxt[s]
        prev[nxt[s]] = prev[s]
        tail = prev[head]
        nxt[tail] = s
        prev[s] = tail
        nxt[s] = head
        prev[head] = s
    return s


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _permute_prefix(x, order, m, tmp):
    for p in range(m):
        tmp[p] = x[order[p]]
    for p in range(m):
        x[p] = tmp[p]


@njit(cache=True, nogil=True, error_model="numpy")
def _shrink(n_active, min_drop, sol, q, cache, tmp):
    """Move the bounded variables that cannot move behind the active ones; returns the new
    active size.

    Done only when at least ``min_drop`` variables go, because every cached
    column is compacted with them: a stable partition, so that a column keeps
    its entries for the variables still active (the others are recomputed when
    needed, rarely) at a cost of one pass over the kept part.  The solution's arrays,
    Q's per-position ones (LIBSVM's swap_index) and the cache's are permuted alike."""
    bound, g = sol.bound, sol.g
    order = tmp.order
    # LIBLINEAR's thresholds: a variable at 0 goes if its gradient exceeds the
    # largest violation of the variables that may decrease, one at C if minus its
    # gradient exceeds the largest of those that may increase
    up_max = 0.0
    dn_max = 0.0
    for p in range(n_active):
        if bound[p] != LOWER_BOUND and g[p] > up_max:
            up_max = g[p]
        if bound[p] != UPPER_BOUND and -g[p] > dn_max:
            dn_max = -g[p]
    low_thr = up_max if up_max > 0.0 else np.inf
    up_thr = dn_max if dn_max > 0.0 else np.inf
    n_keep = 0
    for p in range(n_active):
        if not (
            (bound[p] == LOWER_BOUND and g[p] > low_thr)
            or (bound[p] == UPPER_BOUND and -g[p] > up_thr)
        ):
            order[n_keep] = p
            n_keep += 1
    if n_active - n_keep < min_drop:
        return n_active
    k_out = n_keep
    for p in range(n_active):
        if (bound[p] == LOWER_BOUND and g[p] > low_thr) or (
            bound[p] == UPPER_BOUND and -g[p] > up_thr
        ):
            order[k_out] = p
            k_out += 1
    for x in (sol.alpha, g, sol.g_bar, q.diag, q.dinv):
        _permute_prefix(x, order, n_active, tmp.tmp64)
    perm, tmpi = q.perm, tmp.tmpi
    for p in range(n_active):
        tmpi[p] = perm[order[p]]
    for p in range(n_active):
        perm[p] = tmpi[p]
    _permute_prefix(q.t32, order, n_active, tmp.tmp32)
    _permute_prefix(bound, order, n_active, tmp.tmp8)
    Xt = q.Xt
    for k in range(Xt.shape[0]):
        _permute_prefix(Xt[k], order, n_active, tmp.tmp32)
    cols, col_len, slot_of, owner = cache.cols, cache.col_len, cache.slot_of, cache.owner
    for p in range(n_active):
        tmpi[p] = slot_of[order[p]]
    for p in range(n_active):
        slot_of[p] = tmpi[p]
    for p in range(n_active):
        if slot_of[p] >= 0:
            owner[slot_of[p]] = p
    for s in range(cols.shape[0]):
        if owner[s] < 0:
            continue
        col = cols[s]
        length = col_len[s]
        k = 0
        while k < n_keep and order[k] < length:
            col[k] = col[order[k]]  # order[k] >= k: safe in place
            k += 1
        col_len[s] = k
    return n_keep


@njit(cache=True, nogil=True, error_model="numpy")
def _kernel_phase(settings, q, sol, cache, state, helper):
    """Steps (two variables each with ``settings.pair_steps``) on the active variables,
    positions ``[0, state.n_active)``.

    Returns ``PHASE_OPTIMAL`` when every variable is within ``tol`` by the cached
    gradient (a candidate optimum, which the caller checks exactly), ``PHASE_MAX_ITER``
    at ``max_iter`` steps, ``PHASE_UNSHRINK`` when the caller must rebuild the gradient
    of the shrunk variables (then call again), ``PHASE_TAIL`` when the active set is a
    tail (at most ``tail_size`` variables, ``TAIL_STEPS_PER_VARIABLE`` steps each since
    the last change) for the caller to solve exactly.  ``settings`` (``_Settings``),
    ``q`` (``QMatrix``), ``sol`` (``_Solution``), ``cache`` (``ColumnCache``), ``state``
    (a ``KERNEL_STATE`` record: the LRU head, the active size, the steps, counters for
    diagnosis, ...), ``helper`` (``_Helper``, empty arrays when there is none).
    All per-variable arrays, Q's and the cached columns are in the solver's order
    (``q.perm`` maps it to rows), active variables first.
    """
    C, tol, shrinking, pair_steps, max_iter, tail_size = settings
    alpha, bound, g, g_bar = sol
    diag, dinv, unit_diag = q.diag, q.dinv, q.unit_diag
    cols, col_len = cache.cols, cache.col_len
    n = q.Xt.shape[1]
    scratch = _step_scratch(q.Xt.shape[0])
    score, viol = scratch.score, scratch.viol
    zero = np.zeros(n, np.float32)  # the column of a step of size 0
    tmp = _ShrinkScratch(
        np.empty(n, np.int64),
        np.empty(n),
        np.empty(n, np.float32),
        np.empty(n, np.int64),
        np.empty(n, np.int8),
    )
    head = state.head
    n_active = state.n_active
    unshrunk = state.unshrunk
    to_shrink = state.to_shrink
    n_iter = state.steps
    i_sel, max_v = _update_select(
        n_active, g, bound, dinv, zero, 0.0, zero, 0.0, np.bool_(False), unit_diag, score, viol
    )
    status = PHASE_OPTIMAL
    while True:
        if max_v <= tol:
            status = PHASE_UNSHRINK if n_active < n else PHASE_OPTIMAL
            break
        if max_iter >= 0 and n_iter >= max_iter:
            status = PHASE_MAX_ITER
            break
        if (
            n_active <= tail_size
            and n_iter - state.last_change >= TAIL_STEPS_PER_VARIABLE * n_active
        ):
            status = PHASE_TAIL
            break
        if shrinking:
            to_shrink -= 1
            if to_shrink <= 0:
                to_shrink = min(n, SHRINK_EVERY)
                if not unshrunk and max_v <= 10.0 * tol:
                    unshrunk = True
                    if n_active < n:
                        status = PHASE_UNSHRINK
                        break
                new_active = _shrink(n_active, max(1, n_active // 8), sol, q, cache, tmp)
                if new_active != n_active:
                    state.shrinks += 1
                    state.shrunk_active_sum += new_active
                    state.last_change = n_iter
                    n_active = new_active
                    i_sel, max_v = _update_select(
                        n_active,
                        g,
                        bound,
                        dinv,
                        zero,
                        0.0,
                        zero,
                        0.0,
                        np.bool_(False),
                        unit_diag,
                        score,
                        viol,
                    )
                    continue
        n_iter += 1
        i = i_sel
        s = _fetch_column(i, n_active, head, q, cache, scratch, state, helper)
        head = s
        j = -1
        if pair_steps:
            j = _select_partner(i, n_active, sol, q, cols, s, scratch, helper)
        if j < 0:
            di = min(max(alpha[i] - g[i] / diag[i], 0.0), C) - alpha[i]
            dj = 0.0
            s2 = s
        else:
            s2 = _fetch_column(j, n_active, head, q, cache, scratch, state, helper)
            head = s2
            di, dj = _solve_pair(
                alpha[i], alpha[j], g[i], g[j], diag[i], diag[j], np.float64(cols[s][j]), C
            )
        for v, sv, dv in ((i, s, di), (j, s2, dj)):
            if v < 0:
                continue
            old = alpha[v]
            new = min(max(old + dv, 0.0), C)
            alpha[v] = new
            bound[v] = LOWER_BOUND if new <= 0.0 else (UPPER_BOUND if new >= C else FREE)
            if (old >= C) != (new >= C):
                # G_bar = sum over a_j = C of C Q[:, j], over every variable
                state.g_bar_updates += 1
                if col_len[sv] < n:
                    state.g_bar_entries += n - col_len[sv]
                    _column_fill(v, col_len[sv], n, sv, q, cols, scratch, helper)
                    col_len[sv] = n
                _update_g_bar(g_bar, C if new >= C else -C, cols, sv, n, helper)
        i_sel, max_v = _update_select_split(
            n_active, sol, q, cols, s, di, s2, dj, j >= 0, scratch, helper
        )
    state.head = head
    state.n_active = n_active
    state.unshrunk = unshrunk
    state.to_shrink = to_shrink
    state.steps = n_iter
    return status


def _run_phase(settings, q, sol, cache, state, helper):
    """``_kernel_phase``, with a helper thread for the far halves of its passes when
    ``helper``: started here, and stopped however the phase ends."""
    if not helper:
        return _kernel_phase(settings, q, sol, cache, state, _NO_HELPER)
    control = _Helper(np.zeros(_CTRL_SIZE, np.int64), np.zeros(_FARGS_SIZE))
    thread = threading.Thread(
        target=_helper_loop,
        daemon=True,
        name="elmscale-solver-helper",
        args=(control, q, sol, cache),
    )
    thread.start()
    try:
        return _kernel_phase(settings, q, sol, cache, state, control)
    finally:
        _post(control.ctrl, _JOB_STOP, 0, 0, 0, 0, 0)
        thread.join()


def solve_kernel_dual(
    X,
    t,
    *,
    kernel: Kernel,
    C,
    tol=1e-3,
    cache_size=200.0,
    shrinking=True,
    max_iter=-1,
    alpha0=None,
    pair_steps=True,
    gradient0=None,
    gradient0_alpha=None,
    tail_size=None,
    gram=None,
    state=None,
    face_qp_max_free=None,
    helper=None,
    info=None,
):
    """Solve eq. 17 with a kernel; returns ``(alpha, n_iter, converged, gradient)``.

    ``X`` (n, d) rows, ``t`` labels in {-1, +1}; ``cache_size`` in MB of Q columns
    (float32, or float64 as ``column_dtype`` decides); ``max_iter`` in steps, < 0 for
    LIBSVM's cap, max(1e7, 100 n).
    ``pair_steps`` (default) moves two variables per step: i, the largest violation,
    and the j whose joint exact step gains most; ``False`` gives the paper's
    one-variable steps.
    Measured on COD-RNA (29,768 rows, sigma 0.5): 3x fewer steps at C = 1 and
    10x at C = 1000, 1.4x and 2.5x less time.  The
    gradient ``Q alpha - 1`` returned is the exact float64 one, so that callers
    need not compute it again.  Passed back as ``gradient0`` (with
    ``gradient0_alpha``, the alpha it belongs to, when that is not ``alpha0``: a
    path's predictor moves alpha0), the starting gradient is it plus Q times the
    change, and the final exact gradient the starting one plus Q times the change
    of alpha, when fewer variables changed than there are support vectors.

    ``gram``: a precomputed float64 ``K(X, X)`` (n x n), for a small problem solved
    many times (``pair_path`` passes one along a C path): columns and exact
    products are read from it instead of computed from ``X``.
    ``state``: a ``KernelSolverState`` kept from the previous call on the same rows (a C
    path): its cached columns are reused (its cache size, not ``cache_size``, holds).
    ``tail_size``: the largest shrunk active set that is solved exactly as a
    dense box QP (``box_qp``) once the steps stall on it (0: never; default
    ``TAIL_SIZE``, or the whole problem when ``gram`` is given: it is small then).
    ``face_qp_max_free``: with ``gram`` and ``alpha0``, a start with at most this many
    free variables is first solved as one dense box QP over every row (``box_qp``'s
    method on the kept K; 0: never; default ``FACE_QP_MAX_FREE``); the steps and the
    exact check follow as usual.  ``helper``: run a second thread beside the steps,
    which takes the far half of every long pass (columns, selection, updates) and
    gives the same result to the bit (default: when numba's thread count for this
    thread is at least 2 and there are ``HELPER_MIN_ROWS`` rows or more; inside
    ``thread_budget(1)`` or ``map_in_threads``, never).  ``info``, a dict if given,
    receives counters: ``steps``, ``tails`` (exact tail solves taken), ``face_qp`` (1
    if that QP solved the start), ``exact_checks``, ``column_entries`` (kernel column
    entries computed), ``shrinks`` (shrinking rounds), ``shrunk_active_sum`` (the
    active sizes they left, summed), ``g_bar_updates`` and ``g_bar_entries`` (column
    entries computed for them) and ``helper`` (1 if a helper thread ran).
    """
    X32 = np.ascontiguousarray(X, dtype=np.float32)
    t64 = np.ascontiguousarray(t, dtype=np.float64)
    n = X32.shape[0]
    kind_code, sigma, degree = KERNEL_CODES[kernel.kind], float(kernel.sigma), int(kernel.degree)
    if gram is not None:
        gram = np.ascontiguousarray(gram, dtype=np.float64)
        if gram.shape != (n, n):
            raise ValueError(
                f"gram must be the ({n}, {n}) kernel matrix of X; got shape {gram.shape}"
            )
    exact_q = ExactQ(X32, t64, kernel, gram)
    if tail_size is None:
        tail_size = TAIL_SIZE if gram is None else max(TAIL_SIZE, n)
    if face_qp_max_free is None:
        face_qp_max_free = FACE_QP_MAX_FREE
    if helper is None:
        helper = numba.get_num_threads() >= 2 and n >= HELPER_MIN_ROWS
    helper = bool(helper)
    C = float(C)
    tol = float(tol)
    if max_iter < 0:
        # LIBSVM's own cap: a problem whose scale puts tol below the float32 columns'
        # resolution (say, a polynomial kernel on unscaled features, Q near 1e13) would
        # otherwise step for ever; the caller reports it as not converged
        max_iter = max(DEFAULT_STEP_CAP, 100 * n)
    counts = {"tails": 0, "exact_checks": 0, "face_qp": 0, "helper": int(helper)}
    kept = state is not None
    if not kept:
        state = KernelSolverState(X32, t64, kernel, cache_size, tol)
    elif state.key != kernel_key(n, kernel):
        raise ValueError("state was made for other rows or another kernel")
    perm, Xt, tp, diag, dinv = state.perm, state.Xt, state.tp, state.diag, state.dinv
    alpha_rows = (
        np.zeros(n) if alpha0 is None else np.clip(np.array(alpha0, dtype=np.float64), 0, C)
    )
    if gradient0 is not None and alpha0 is not None:
        reference = alpha0 if gradient0_alpha is None else gradient0_alpha
        g_rows, g_bar_rows = _gradient_from(
            exact_q,
            alpha_rows,
            C,
            np.asarray(reference, dtype=np.float64),
            np.asarray(gradient0, dtype=np.float64),
            state.known_bar,
        )
    else:
        g_rows, g_bar_rows = exact_gradient(exact_q, alpha_rows, C)
    if (
        gram is not None
        and alpha0 is not None
        and face_qp_max_free > 0
        and np.count_nonzero((alpha_rows > 0.0) & (alpha_rows < C)) <= face_qp_max_free
    ):
        # a warm start with few free variables (a C path, wide kernels): the whole problem
        # as a dense box QP from it, on the kept K
        new = _box_qp_signed(
            gram,
            t64,
            C,
            alpha_rows,
            g_rows,
            0.1 * tol,
            FACE_QP_STEPS_PER_ROW * n,
            2 * face_qp_max_free,
        )
        if new is not None:
            counts["face_qp"] = 1
            g_rows, g_bar_rows = _gradient_from(
                exact_q,
                new,
                C,
                alpha_rows,
                g_rows,
                (np.where(alpha_rows >= C, alpha_rows, 0.0), g_bar_rows),
            )
            alpha_rows = new
    alpha_start, g_start = alpha_rows, g_rows  # an exact pair, for the final check
    bar_start = (np.where(alpha_rows >= C, alpha_rows, 0.0), g_bar_rows)  # exact too
    # the solver works in its own order (active variables first)
    alpha, g, g_bar = alpha_rows[perm], g_rows[perm], g_bar_rows[perm]
    bound = _bound_flags(alpha, C)
    q = QMatrix(
        SOURCE_ROWS if gram is None else SOURCE_GRAM,
        Xt,
        tp,
        perm,
        gram if gram is not None else np.empty((0, 0)),
        kind_code,
        sigma,
        degree,
        float(kernel.sigma_star),
        float(kernel.tau),
        diag,
        dinv,
        state.unit_diag,
    )
    sol = _Solution(alpha, bound, g, g_bar)
    settings = _Settings(C, tol, bool(shrinking), bool(pair_steps), int(max_iter), int(tail_size))
    progress = _new_record(KERNEL_STATE, n_active=n, to_shrink=min(n, SHRINK_EVERY))
    while True:
        status = _run_phase(settings, q, sol, state.cache, progress, helper)
        if status == PHASE_TAIL:
            counts["tails"] += _solve_tail(
                exact_q, C, tol, alpha, bound, g, g_bar, perm, int(progress["n_active"])
            )
            # the next tail solve only after as many steps again
            progress["last_change"] = progress["steps"]
            continue
        if status == PHASE_UNSHRINK:
            # shrunk gradients: G_bar - 1 plus the free variables' part, exactly
            m = int(progress["n_active"])
            free_rows = np.zeros(n)  # free variables are never shrunk
            free_rows[perm] = np.where(bound == FREE, alpha, 0.0)
            g[m:] = g_bar[m:] - 1.0 + exact_q.matvec(perm[m:], free_rows)
            progress["n_active"] = n
            continue
        # the cached columns are float32: the gradient returned, and the optimum,
        # are checked with an exact one
        alpha_rows = np.empty(n)
        alpha_rows[perm] = alpha
        change = alpha_rows - alpha_start
        if np.count_nonzero(change) < np.count_nonzero(alpha_rows):
            g_rows, g_bar_rows = g_start + exact_q.matvec(None, change), None
        else:
            g_rows, g_bar_rows = exact_gradient(exact_q, alpha_rows, C)
        counts["exact_checks"] += 1
        upper = np.where(alpha_rows >= C, alpha_rows, 0.0)
        if status == PHASE_MAX_ITER or kkt_violation(alpha_rows, g_rows, C) <= tol:
            if kept:
                state.known_bar = (
                    upper,
                    g_bar_rows
                    if g_bar_rows is not None
                    else product_from(exact_q, upper, bar_start),
                )
            if info is not None:
                info.update(
                    counts,
                    **{
                        name: int(progress[name])
                        for name in (
                            "steps",
                            "column_entries",
                            "shrinks",
                            "shrunk_active_sum",
                            "g_bar_updates",
                            "g_bar_entries",
                        )
                    },
                )
            return alpha_rows, int(progress["steps"]), status == PHASE_OPTIMAL, g_rows
        # go on from exact state: every variable active, G_bar exact too (a
        # reconstruction from the float32-accumulated G_bar could hide the violation)
        if g_bar_rows is None:
            g_bar_rows = product_from(exact_q, upper, bar_start)
        alpha_start, g_start, bar_start = alpha_rows, g_rows, (upper, g_bar_rows)
        g[:] = g_rows[perm]
        g_bar[:] = g_bar_rows[perm]
        progress["n_active"] = n


def box_qp(Q, c, C, x0, tol):
    """``argmin 1/2 x'Qx + c'x`` over ``0 <= x <= C`` for a small dense PSD ``Q``.

    A primal active-set method.  It starts from ``x0`` if the Newton point of
    ``x0``'s face is nearly inside the box, else with every variable at the bound
    nearer to ``x0`` (``_box_qp_start``), then repeats (``_box_qp_steps``): minimise
    over the free variables with the others fixed; if that point leaves the box,
    step to the first bound and fix the variable there; else free the bounded
    variable whose gradient points into the box most, if by more than ``tol``, or
    stop.  Freeing one variable at a time extends the Cholesky factor of ``Q_FF`` by
    a row (O(k^2)); a variable fixed again costs a new factorisation.  Measured on
    the tails met here (hundreds of variables; from tens to hundreds free at the
    optimum), that is 10-20x faster than freeing every violator at once or than
    starting from ``x0``'s free set.  Each step lowers the objective, so it ends.
    ``lam I`` (1e-12 of the mean diagonal, more if a factorisation fails) makes a
    singular ``Q`` definite; it moves the gradient by ``lam x``, far below any KKT
    tolerance.  Returns None if it does not finish in ``4 m + 20`` steps.
    """
    m = c.size
    Q = np.ascontiguousarray(Q, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    x0 = np.clip(np.asarray(x0, dtype=np.float64), 0.0, C)
    return _box_qp_signed(Q, np.ones(m), C, x0, Q @ x0 + c, tol, 4 * m + 20)


def _box_qp_signed(K, t, C, x0, grad0, tol, max_steps, max_free=-1):
    """``box_qp`` on ``Q = t t' K`` (``K`` symmetric PSD, ``t`` +-1), from ``x0`` inside the
    box with ``grad0 = Q x0 + c`` given: ``Q`` is never formed, so a whole C-path
    problem (``K`` kept) costs no copy of it, and a caller that has the gradient
    skips its product.  Returns the minimiser, or None if ``max_steps`` run out or more than
    ``max_free`` (> 0) variables would be free at once."""
    m = x0.size
    scale = max(float(np.trace(K)) / max(m, 1), 1e-300)
    for lam in (1e-12, 1e-10, 1e-8):
        lam_scaled = lam * scale
        try:
            x, free, L = _box_qp_start(K, t, lam_scaled, C, x0, grad0)
        except np.linalg.LinAlgError:
            continue
        grad = grad0 + lam_scaled * x0
        _move_gradient(K, t, lam_scaled, grad, x0, x)
        status = _box_qp_steps(
            K,
            t,
            lam_scaled,
            C,
            x,
            grad,
            np.asarray(free, dtype=np.int64),
            np.ascontiguousarray(L, dtype=np.float64),
            float(tol),
            int(max_steps),
            int(max_free) if max_free > 0 else m,
        )
        if status == 1:
            return np.clip(x, 0.0, C)
        if status == 0:
            return None
    return None


@njit(cache=True, nogil=True, error_model="numpy")
def _move_gradient(K, t, lam, grad, x_old, x_new):
    """``grad += (t t' K + lam I)(x_new - x_old)``, over the entries that changed (``K``
    symmetric: its rows are read, never a column)."""
    m = grad.size
    for k in range(m):
        delta = x_new[k] - x_old[k]
        if delta == 0.0:
            continue
        row = K[k]
        w = delta * t[k]
        for j in range(m):
            grad[j] += w * t[j] * row[j]
        grad[k] += lam * delta


@njit(cache=True, nogil=True, error_model="numpy")
def _extend_factor(K, t, lam, F, size, L):
    """Row ``size`` of the lower Cholesky factor ``L`` of ``Q[F][:, F]``, ``Q = t t' K +
    lam I``, the rows above it done (forward substitution, O(size^2)); False if not
    positive definite."""
    v = F[size]
    q = K[v]
    pivot = q[v] + lam
    row = L[size]
    for i in range(size):
        # (a vectorised dot: the factorisations of 300-variable faces dominated a scalar one)
        row[i] = (t[v] * t[F[i]] * q[F[i]] - dot(L[i, :i], row[:i])) / L[i, i]
        pivot -= row[i] * row[i]
    if not pivot > 0.0:
        return False
    L[size, size] = np.sqrt(pivot)
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def _cholesky_into(K, t, lam, F, size, L):
    """``L[:size, :size]`` = the lower Cholesky factor of ``Q[F][:, F]`` (as
    ``_extend_factor``), row by row; False if not positive definite."""
    for i in range(size):
        if not _extend_factor(K, t, lam, F, i, L):
            return False
    return True


@njit(cache=True, nogil=True, error_model="numpy")
def _signed_row(K, t, lam, v, out):
    """``out`` = row ``v`` of ``Q = t t' K + lam I``."""
    row = K[v]
    for j in range(out.size):
        out[j] = t[v] * t[j] * row[j]
    out[v] += lam


@njit(cache=True, nogil=True, error_model="numpy")
def _box_qp_steps(K, t, lam, C, x, grad, free0, L0, tol, max_steps, max_free):
    """``box_qp``'s active-set steps on ``Q = t t' K + lam I`` from ``x`` (``grad`` its
    gradient ``Q x + c``) with the free variables ``free0`` and their factor ``L0``.
    Updates ``x`` and ``grad``; returns 1 at the optimum, 0 when the steps run out or
    a variable would be freed beyond ``max_free``, -1 when a factorisation fails (the
    caller regularises more)."""
    m = x.size
    size = free0.size
    cap = min(m, max(16, 2 * size))  # grown by doubling: tails reach 4,096 variables
    L = np.zeros((cap, cap))
    F = np.empty(m, np.int64)
    is_free = np.zeros(m, np.bool_)
    # Q's rows of the free variables, in the factor's order: contiguous, so that the
    # gradient update reads rows, never gathers a column
    rows_F = np.empty((cap, m))
    for k in range(size):
        F[k] = free0[k]
        is_free[free0[k]] = True
        _signed_row(K, t, lam, free0[k], rows_F[k])
        for j in range(k + 1):
            L[k, j] = L0[k, j]
    y = np.empty(m)
    d = np.empty(m)
    limit = np.empty(m)
    for _ in range(max_steps):
        if size > 0:
            # Newton point on the face: L L' d = -grad_F
            for i in range(size):
                y[i] = (-grad[F[i]] - dot(L[i, :i], y[:i])) / L[i, i]
            for i in range(size - 1, -1, -1):
                acc = y[i]
                for k in range(i + 1, size):
                    acc -= L[k, i] * d[k]
                d[i] = acc / L[i, i]
            step = 1.0
            for k in range(size):
                xk = x[F[k]]
                if d[k] > 0.0:
                    limit[k] = (C - xk) / d[k]
                elif d[k] < 0.0:
                    limit[k] = -xk / d[k]
                else:
                    limit[k] = np.inf
                step = min(step, limit[k])
            for k in range(size):
                x[F[k]] += step * d[k]
                coef = step * d[k]
                row = rows_F[k]
                for j in range(m):
                    grad[j] += coef * row[j]
            if step < 1.0:
                kept = 0
                for k in range(size):
                    v = F[k]
                    if limit[k] <= step:
                        snapped = C if d[k] > 0.0 else 0.0
                        coef = snapped - x[v]
                        row = rows_F[k]
                        for j in range(m):
                            grad[j] += coef * row[j]
                        x[v] = snapped
                        is_free[v] = False
                    else:
                        if kept != k:
                            F[kept] = v
                            rows_F[kept] = rows_F[k]
                        kept += 1
                size = kept
                if not _cholesky_into(K, t, lam, F, size, L):
                    return -1
                continue
        k_best = -1
        v_best = tol
        for i in range(m):
            if is_free[i]:
                continue
            v = -grad[i] if x[i] <= 0.0 else grad[i]
            if v > v_best:
                v_best = v
                k_best = i
        if k_best < 0:
            return 1
        if size >= max_free:
            return 0
        if size == cap:
            cap = min(m, 2 * cap)
            grown = np.zeros((cap, cap))
            grown[:size, :size] = L[:size, :size]
            L = grown
            rows = np.empty((cap, m))
            rows[:size] = rows_F[:size]
            rows_F = rows
        F[size] = k_best
        if not _extend_factor(K, t, lam, F, size, L):
            return -1
        is_free[k_best] = True
        _signed_row(K, t, lam, k_best, rows_F[size])
        size += 1
    return 0


def _box_qp_start(K, t, lam, C, x0, grad0):
    """``(x, free, L)`` to start ``box_qp`` from: ``x0`` with its free variables and their
    Cholesky factor when the Newton point of that face leaves the box in at most a
    tenth of them (the face is nearly right: small kernels), else every variable at
    its nearer bound and none free (ill-conditioned tails, where most of ``x0``'s free
    variables end at a bound and dropping them one by one costs a factorisation each).
    ``grad0``: the gradient at ``x0`` (``lam`` not included).
    """
    x = x0.copy()
    F = np.flatnonzero((x > 0.0) & (x < C))
    if 0 < F.size <= 1024:  # (larger free sets did not occur at optima here)
        Q_FF = K[np.ix_(F, F)] * np.outer(t[F], t[F])
        Q_FF.flat[:: F.size + 1] += lam
        L = np.linalg.cholesky(Q_FF)
        grad_F = grad0[F] + lam * x[F]
        newton = x[F] - np.linalg.solve(L.T, np.linalg.solve(L, grad_F))
        outside = np.count_nonzero((newton < 0.0) | (newton > C))
        if outside <= max(2, F.size // 10):
            return x, list(F), L
    return np.where(x > 0.5 * C, C, 0.0), [], np.zeros((0, 0))


def _tail_solution(Q_AA, g_A, old, C, tol):
    """The exact minimiser over a tail's variables (``Q_AA``, their exact gradient ``g_A``
    at ``old``, the others fixed), or None if ``box_qp`` fails or it does not lower the
    objective.  Shared by both solvers' tail solves."""
    c = g_A - Q_AA @ old
    new = box_qp(Q_AA, c, C, old, 0.1 * tol)
    if new is None:
        return None
    gain = 0.5 * (new @ Q_AA @ new - old @ Q_AA @ old) + c @ (new - old)
    return new if gain < 0.0 else None


def _solve_tail(exact_q: ExactQ, C, tol, alpha, bound, g, g_bar, perm, m):
    """Solve the problem over the active positions ``[0, m)`` exactly, the others fixed.

    Their gradient is recomputed exactly first (the phase's comes from float32
    columns), then ``box_qp`` on ``Q_AA``; the move is taken only if it lowers the
    objective.  Updates alpha, bound, g (active part, exactly) and G_bar in place (the
    solver's order).  Returns 1 if a move was taken, else 0.
    """
    rows = perm[:m]
    n = alpha.size
    alpha_rows = np.empty(n)
    alpha_rows[perm] = alpha
    g_A = exact_q.matvec(rows, alpha_rows) - 1.0
    Q_AA = exact_q.block(rows)
    old = alpha[:m].copy()
    new = _tail_solution(Q_AA, g_A, old, C, tol)
    if new is None:
        return 0
    delta = new - old
    alpha[:m] = new
    bound[:m] = _bound_flags(new, C)
    g[:m] = g_A + Q_AA @ delta
    moved_upper = np.zeros(n)
    moved_upper[rows] = np.where(new >= C, C, 0.0) - np.where(old >= C, C, 0.0)
    if np.any(moved_upper != 0.0):
        g_bar += exact_q.matvec(perm, moved_upper)
    return 1


def kkt_violation(alpha, g, C):
    """Largest KKT violation (0 at the optimum), vectorised."""
    v = np.where(
        alpha <= 0.0, np.maximum(-g, 0.0), np.where(alpha >= C, np.maximum(g, 0.0), np.abs(g))
    )
    return float(v.max(initial=0.0))


@njit(cache=True, nogil=True, error_model="numpy")
def _explicit_init(H, t, alpha, beta, diag):
    """``diag_i = h_i.h_i`` and ``beta = sum_i a_i t_i h_i`` (H float32, n x L)."""
    n, L = H.shape
    for i in range(n):
        hi = H[i]
        diag[i] = dot(hi, hi)
        if alpha[i] > 0.0:
            w = alpha[i] * t[i]
            for k in range(L):
                beta[k] += w * hi[k]


# The explicit solver's arguments, grouped as the kernel solver's: its settings; the
# problem (``H`` float32 n x L, the targets ``t``, ``diag`` = h_i.h_i); the solution
# (alpha, beta = sum a_i t_i h_i); the order of the rows (``active``, the active ones
# first) and the shuffle's state (``rng``, see ``shuffle_prefix``)
_ExplicitSettings = namedtuple(
    "_ExplicitSettings", ["C", "tol", "shrinking", "max_iter", "tail_size"]
)
_ExplicitProblem = namedtuple("_ExplicitProblem", ["H", "t", "diag"])
_ExplicitSolution = namedtuple("_ExplicitSolution", ["alpha", "beta"])
_PassOrder = namedtuple("_PassOrder", ["active", "rng"])


@njit(cache=True, nogil=True, error_model="numpy")
def _explicit_phase(settings, problem, sol, order, state):
    """Dual coordinate descent passes on beta = sum a_i t_i h_i (H float32, n x L).

    Returns ``PHASE_OPTIMAL`` when converged (checked exactly over every row),
    ``PHASE_MAX_ITER`` at ``max_iter`` passes, ``PHASE_TAIL`` when the active set has
    stayed at most ``tail_size`` variables for ``TAIL_PASSES`` passes (the caller
    solves it exactly, then calls again).  ``settings`` (``_ExplicitSettings``),
    ``problem`` (``_ExplicitProblem``), ``sol`` (``_ExplicitSolution``), ``order``
    (``_PassOrder``: the first ``state.active_size`` of ``order.active`` are active),
    ``state`` an ``EXPLICIT_STATE`` record (the active size, the passes, the shrinking
    thresholds).
    """
    C, tol, shrinking, max_iter, tail_size = settings
    H, t, diag = problem
    alpha, beta = sol
    active, rng = order
    n, L = H.shape
    active_size = state.active_size
    n_iter = state.passes
    up_bound = state.up_bound
    down_bound = state.down_bound
    status = PHASE_MAX_ITER
    while True:
        if max_iter >= 0 and n_iter >= max_iter:
            status = PHASE_MAX_ITER
            break
        if active_size <= tail_size and state.tail_passes >= TAIL_PASSES:
            status = PHASE_TAIL
            break
        n_iter += 1
        # random order of the active variables for this pass (memory order, or
        # blocks of rows in a random order, measured 10x more passes)
        shuffle_prefix(active, active_size, rng)
        up_max = 0.0  # largest g > 0 of a variable that may decrease
        down_min = 0.0  # smallest g < 0 of one that may increase
        p = 0
        while p < active_size:
            if p + PREFETCH_AHEAD < active_size:
                ahead = active[p + PREFETCH_AHEAD]
                prefetch_row(H, ahead)
                prefetch(alpha, ahead)
                prefetch(diag, ahead)
                prefetch(t, ahead)
            i = active[p]
            hi = H[i]
            g = t[i] * dot(hi, beta) - 1.0
            a = alpha[i]
            if shrinking and ((a <= 0.0 and g > up_bound) or (a >= C and g < down_bound)):
                active_size -= 1
                active[p] = active[active_size]
                active[active_size] = i
                continue
            if a > 0.0 and g > up_max:
                up_max = g
            if a < C and g < down_min:
                down_min = g
            v = _violation(a, g, C)
            if v > 0.0 and diag[i] > _TAU:
                new = min(max(a - g / diag[i], 0.0), C)
                w = (new - a) * t[i]
                if w != 0.0:
                    alpha[i] = new
                    for k in range(L):
                        beta[k] += w * hi[k]
            p += 1
        state.tail_passes = state.tail_passes + 1 if active_size <= tail_size else 0
        # LIBLINEAR's two thresholds, a quarter as far from 0: a variable at 0 goes when
        # its gradient passes a quarter of the largest one of those that may decrease,
        # one at C when below a quarter of the smallest of those that may increase.
        # Shrinking is a guess that the end checks (every variable comes back, and the
        # exact check covers every row), and LIBLINEAR's own bounds, the last pass's
        # largest violations, kept 615,000 of 1M rows active at pass 100 and 33,000 at
        # pass 1,000.  Measured on 1M rows, 200 nodes, C = 1 (the solve): one
        # symmetric bound max(up_max, -down_min) 260 M steps,
        # 64-70 s; LIBLINEAR's two 246 M, 64 s; a half 202 M, 50 s; a quarter 185 M,
        # 43 s (8 returns to the full set); an eighth 186 M, 46 s (28 returns).
        # Neither nearer to 0 than 10 tol: near the end a tighter bound shrinks the
        # variables about to violate, and each return to the full set finds a few of
        # them (hundreds of full passes measured on 200k rows).
        up_bound = max(up_max / SHRINK_DIVISOR, 10.0 * tol) if up_max > 0.0 else np.inf
        down_bound = min(down_min / SHRINK_DIVISOR, -10.0 * tol) if down_min < 0.0 else -np.inf
        max_v = max(up_max, -down_min)
        if max_v <= tol:
            if active_size < n:
                active_size = n
                up_bound = np.inf
                down_bound = -np.inf
                state.tail_passes = 0
                continue
            # exact check over every row
            worst = 0.0
            for i in range(n):
                worst = max(worst, _violation(alpha[i], t[i] * dot(H[i], beta) - 1.0, C))
            if worst <= tol:
                status = PHASE_OPTIMAL
                break
    state.active_size = active_size
    state.passes = n_iter
    state.up_bound = up_bound
    state.down_bound = down_bound
    return status


def _solve_explicit_tail(H32, t, C, tol, alpha, beta, rows):
    """Solve the problem over ``rows`` exactly (``box_qp`` on ``Q_AA = M M'``, ``M = t h``),
    the others fixed; updates alpha and beta.  Returns 1 if a move was taken."""
    M = H32[rows].astype(np.float64) * t[rows, None]
    old = alpha[rows]
    new = _tail_solution(M @ M.T, M @ beta - 1.0, old, C, tol)
    if new is None:
        return 0
    alpha[rows] = new
    beta += M.T @ (new - old)
    return 1


def explicit_passes(settings, problem, sol, order, state):
    """``_explicit_phase`` until it stops for good, the small active sets its passes stall
    on solved exactly in between (``_solve_explicit_tail``); a tail that fails (changes
    nothing: its face is singular when it has more free variables than H has columns, as
    on noise features) is tried again only once the active set has halved, since each
    retry cost seconds.  Returns ``(status, tails taken, tails failed)``."""
    H, t, _ = problem
    tails = failed = 0
    while True:
        status = _explicit_phase(settings, problem, sol, order, state)
        if status != PHASE_TAIL:
            return status, tails, failed
        size = int(state["active_size"])
        rows = np.sort(order.active[:size])
        moved = _solve_explicit_tail(H, t, settings.C, settings.tol, sol.alpha, sol.beta, rows)
        tails += moved
        if not moved:
            failed += 1
            settings = settings._replace(tail_size=size // 2)
        state["tail_passes"] = 0


def solve_explicit_dual(
    H,
    t,
    *,
    C,
    tol=1e-3,
    shrinking=True,
    max_iter=-1,
    alpha0=None,
    random_state=0,
    tail_size=EXPLICIT_TAIL_SIZE,
    info=None,
):
    """Solve eq. 17 with an explicit mapping ``H`` (rows h(x_i)); returns ``(alpha, beta,
    n_iter, converged)``.

    ``n_iter`` counts passes over the data (LIBLINEAR's convention).  As in the
    kernel solver, an active set of at most ``tail_size`` variables on which the
    passes stall is solved exactly (``box_qp``; 0: never; a failing tail as in
    ``explicit_passes``).  ``max_iter`` -1: at most
    ``EXPLICIT_MAX_PASSES`` passes.  ``info``, a dict if given, receives ``passes``,
    ``tails`` and ``failed_tails``.
    """
    H32 = np.ascontiguousarray(H, dtype=np.float32)
    t64 = np.asarray(t, dtype=np.float64)
    n = H32.shape[0]
    C = float(C)
    alpha = np.zeros(n) if alpha0 is None else np.clip(np.array(alpha0, dtype=np.float64), 0, C)
    beta = np.zeros(H32.shape[1])
    diag = np.empty(n)
    _explicit_init(H32, t64, alpha, beta, diag)
    active = np.arange(n)
    progress = _new_record(EXPLICIT_STATE, active_size=n, up_bound=np.inf, down_bound=-np.inf)
    # xorshift state from the seed (splitmix64's odd constant keeps it nonzero)
    rng = np.array([(int(random_state) * 0x9E3779B97F4A7C15 + 1) % 2**64 or 1], dtype=np.uint64)
    max_iter = EXPLICIT_MAX_PASSES if max_iter < 0 else int(max_iter)
    settings = _ExplicitSettings(C, float(tol), bool(shrinking), max_iter, int(tail_size))
    problem = _ExplicitProblem(H32, t64, diag)
    sol = _ExplicitSolution(alpha, beta)
    order = _PassOrder(active, rng)
    status, tails, failed = explicit_passes(settings, problem, sol, order, progress)
    if info is not None:
        info.update(passes=int(progress["passes"]), tails=tails, failed_tails=failed)
    return alpha, beta, int(progress["passes"]), status == PHASE_OPTIMAL


def dual_objective(Q, alpha):
    """``1/2 a'Qa - 1'a`` (for tests and reports)."""
    return 0.5 * alpha @ Q @ alpha - alpha.sum()


__all__ = ["SHRINK_EVERY", "box_qp", "dual_objective", "solve_explicit_dual", "solve_kernel_dual"]
