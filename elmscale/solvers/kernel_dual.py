"""The sparse ELM's kernel dual solver (LIBSVM's shape): ``solve_kernel_dual``.

See ``sparse_dual`` for the method; here are its phases of steps in numba, the shrinking,
the exact float64 products for the checks (``ExactQ``) and the driver that runs the phases,
the exact tails and the final check.
"""

from __future__ import annotations

from collections import namedtuple

import numba
import numpy as np
from numba import njit

from elmscale.core.bit_kernels import value_table
from elmscale.core.jit import KERNEL_CODES, signed_block, weighted_row_sum
from elmscale.core.sparse_kernels import as_csr32, is_sparse
from elmscale.core.threads import available_cores
from elmscale.features.kernels import Kernel
from elmscale.solvers.block_columns import BLOCK_MIN_FEATURES
from elmscale.solvers.column_cache import KernelSolverState, fetch_column, kernel_key
from elmscale.solvers.dual_common import (
    PHASE_MAX_ITER,
    PHASE_OPTIMAL,
    PHASE_TAIL,
    PHASE_UNSHRINK,
    kernel_step_cap,
    kkt_violation,
    kkt_violations,
    new_record,
)
from elmscale.solvers.exact_tail import box_qp_signed, tail_solution
from elmscale.solvers.kernel_columns import (
    NO_FETCH,
    SOURCE_BITS,
    SOURCE_CSR,
    SOURCE_GRAM,
    SOURCE_ROWS,
    QMatrix,
    fetch_scratch,
    step_scratch,
)
from elmscale.solvers.kernel_passes import (
    FREE,
    LOWER_BOUND,
    UPPER_BOUND,
    bound_flag,
    single_step,
    solve_pair,
    update_select,
)
from elmscale.solvers.solver_helper import (
    HELPER_MIN_ROWS,
    NO_HELPER,
    block_fill,
    column_fill,
    helper_counts,
    select_partner,
    start_helper,
    stop_helper,
    update_g_bar,
    update_select_split,
)

SHRINK_EVERY = 1000
# Block fetches: a step whose column is not cached computes it together with up to
# FETCH_BLOCK - 1 other uncached columns of the largest violations, in one pass over the
# dense rows (``core.block_kernels.q_columns_pass``), for gaussian and laplacian kernels
# from ``block_columns.BLOCK_MIN_FEATURES`` features on; at most a quarter of the cache's
# slots.  Measured on the generated wide set (20,000 x 300, sigma 10, C = 1, two threads,
# heavily loaded, one run): 1 column 125.9 s and 108.2 s, 8 columns 93.4 s (1.16-1.35x;
# 23,035 columns' entries computed against 17,103: some computed ahead are evicted
# unused), 16 columns 113.5 s (28,077); at 6,000 rows (the rows in cache) no difference.
# The same steps and solution to the bit: the columns are the per-column kernel's.
FETCH_BLOCK = 8
FETCH_KINDS = (0, 1)  # KERNEL_CODES of gaussian and laplacian
# Sparse rows (the CSR source, without the inverted index): every kernel, the block's
# columns from ``core.sparse_kernels.csr_q_block``, which reads each row's nonzeros once
# for the block where the column alone is a chain of dependent adds (a9a, one thread,
# under load: 28-34 ns an entry alone, 9.3 ns in blocks of 16, 12.3 of 8).  The block's
# rows are scattered dense: at most FETCH_ROWS_BYTES of them.
FETCH_BLOCK_SPARSE = 16
FETCH_ROWS_BYTES = 8 * 2**20
# The tail: once shrinking has left at most TAIL_SIZE variables active and the steps
# have gone on for TAIL_STEPS_PER_VARIABLE times that many without another shrink, the
# reduced problem over them is solved exactly (``box_qp``).  Single and pair steps
# crawl there when Q is ill-conditioned (wide kernels, large C): on 2,400 COD-RNA rows
# at sigma = 1000, C = 500, 3.8 M steps were spent on the last 117 active variables.
TAIL_SIZE = 1024
TAIL_STEPS_PER_VARIABLE = 10
# A warm start with a kept K (a C path) and at most FACE_QP_MAX_FREE free variables is
# solved as one dense box QP over every row, given up after FACE_QP_STEPS_PER_ROW
# active-set steps per row or at twice as many free.  Wide kernels keep few variables
# free and ill-conditioned, where coordinate steps crawl: on a 2,400-row COD-RNA fold's
# 14 x 14 paths the steps took 2.3-2.8 s, 1.18-1.27 s with this (32: 1.22-1.30 s, 128:
# 1.22-1.30 s).  Hundreds free (narrow kernels, large C) keep the coordinate steps: each
# active-set step there costs a product with every free row of Q, and hundreds are taken.
FACE_QP_MAX_FREE = 64
FACE_QP_STEPS_PER_ROW = 1
# A final check from float32 values (``check_precision="single"``) gives up for the exact
# product when more than this share of the rows need their exact gradient
SINGLE_CHECK_UNSURE = 0.25
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
        ("block_fetches", np.int64),  # columns computed ahead in block fetches
    ],
    align=True,
)


def _bound_flags(alpha, C):
    """The phase's int8 bound flags of ``alpha`` (``LOWER_BOUND``, ``FREE``, ``UPPER_BOUND``)."""
    return np.where(alpha <= 0.0, LOWER_BOUND, np.where(alpha >= C, UPPER_BOUND, FREE)).astype(
        np.int8
    )


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

    def gradient_single(self, alpha):
        """``(Q alpha - 1, bound)``: the gradient from float32 kernel values with float64
        sums and, per row, a bound on its distance from the exact one
        (``Kernel.block_matvec_bounded``), at about half the exact product's cost; None
        with a kept K or a kernel computed in float64 anyway (the exact product then)."""
        if self.gram is not None:
            return None
        nz = np.flatnonzero(alpha)
        if nz.size == 0:
            return None
        bounded = self.kernel.block_matvec_bounded(self.X32, self.X32[nz], alpha[nz] * self.t[nz])
        if bounded is None:
            return None
        f, bound = bounded
        return self.t * f - 1.0, bound

    def block(self, rows):
        """``Q[rows][:, rows]``, dense."""
        t_rows = self.t[rows]
        if self.gram is not None:
            out = np.empty((t_rows.size, t_rows.size))
            signed_block(self.gram, np.asarray(rows, np.int64), t_rows, out)
            return out
        X_rows = self.X32[rows]
        K = self.kernel.block(X_rows, X_rows)
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


# The kernel solver's arguments, grouped (numba passes a tuple of arrays as its arrays:
# no cost).  The settings of a solve; the solution in the solver's order (alpha, its
# ``bound`` flags, the gradient, G_bar); Q (``QMatrix``) and its ``ColumnCache``; the
# integer state (a ``KERNEL_STATE`` record); the helper's control (``Helper``).
_Settings = namedtuple(
    "_Settings",
    ["C", "tol", "shrinking", "pair_steps", "max_iter", "tail_size", "fetch_block"],
)
_Solution = namedtuple("_Solution", ["alpha", "bound", "g", "g_bar"])
# ``_shrink``'s buffers: the new order, and one of each dtype it permutes
_ShrinkScratch = namedtuple("_ShrinkScratch", ["order", "tmp64", "tmp32", "tmpi", "tmp8"])


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
def _fetch_block(i, n_active, head, q, sol, cache, state, block, scratch, helper):
    """Column i (not cached) and up to ``block - 1`` other uncached columns of the active
    variables with the largest KKT violations computed together (``block_fill``: one pass
    over the rows) into the least recently used slots, i's the LRU head; returns the new
    head.  The block's positions and slots are ``q.fetch``'s."""
    g, bound = sol.g, sol.bound
    slot_of, owner, col_len, prev = cache.slot_of, cache.owner, cache.col_len, cache.prev
    positions, slots, viols = q.fetch.positions, q.fetch.slots, q.fetch.viols
    positions[0] = i
    m = 1
    # the largest violations, kept sorted in positions[1:m] (a block is a few columns)
    for p in range(n_active):
        if p == i or slot_of[p] >= 0:
            continue
        v = 0.0
        if bound[p] != UPPER_BOUND and g[p] < 0.0:
            v = -g[p]
        elif bound[p] != LOWER_BOUND and g[p] > 0.0:
            v = g[p]
        if v <= 0.0 or (m == block and v <= viols[m - 1]):
            continue
        k = m if m < block else block - 1
        while k > 1 and viols[k - 1] < v:
            positions[k] = positions[k - 1]
            viols[k] = viols[k - 1]
            k -= 1
        positions[k] = p
        viols[k] = v
        if m < block:
            m += 1
    # the LRU slot (the circular list's tail) becomes the head: i's slot taken last
    for k in range(m - 1, -1, -1):
        s = prev[head]
        if owner[s] >= 0:
            slot_of[owner[s]] = -1
        owner[s] = positions[k]
        slot_of[positions[k]] = s
        col_len[s] = n_active
        slots[k] = s
        head = s
    block_fill(m, n_active, q, sol, cache.cols, scratch, helper)
    state.column_entries += m * n_active
    state.block_fetches += m - 1
    return head


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
    diagnosis, ...), ``helper`` (``Helper``, empty arrays when there is none).
    All per-variable arrays, Q's and the cached columns are in the solver's order
    (``q.perm`` maps it to rows), active variables first.
    """
    C, tol, shrinking, pair_steps, max_iter, tail_size, fetch_block = settings
    alpha, bound, g, g_bar = sol
    diag, dinv, unit_diag = q.diag, q.dinv, q.unit_diag
    cols, col_len = cache.cols, cache.col_len
    n = q.Xt.shape[1]
    scratch = step_scratch(q.Xt.shape[0])
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
    i_sel, max_v = update_select(
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
                    i_sel, max_v = update_select(
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
        if fetch_block > 1 and cache.slot_of[i] < 0:
            head = _fetch_block(
                i, n_active, head, q, sol, cache, state, fetch_block, scratch, helper
            )
        s = fetch_column(i, n_active, head, q, sol, cache, scratch, state, helper)
        head = s
        j = -1
        if pair_steps:
            j = select_partner(i, n_active, sol, q, cols, s, scratch, helper)
        if j < 0:
            di = single_step(alpha[i], g[i], diag[i], C)
            dj = 0.0
            s2 = s
        else:
            s2 = fetch_column(j, n_active, head, q, sol, cache, scratch, state, helper)
            head = s2
            di, dj = solve_pair(
                alpha[i], alpha[j], g[i], g[j], diag[i], diag[j], np.float64(cols[s][j]), C
            )
        for v, sv, dv in ((i, s, di), (j, s2, dj)):
            if v < 0:
                continue
            old = alpha[v]
            new = min(max(old + dv, 0.0), C)
            alpha[v] = new
            bound[v] = bound_flag(new, C)
            if (old >= C) != (new >= C):
                # G_bar = sum over a_j = C of C Q[:, j], over every variable
                state.g_bar_updates += 1
                if col_len[sv] < n:
                    state.g_bar_entries += n - col_len[sv]
                    column_fill(v, col_len[sv], n, sv, q, sol, cols, scratch, helper)
                    col_len[sv] = n
                update_g_bar(C if new >= C else -C, sv, n, q, sol, cols, scratch, helper)
        i_sel, max_v = update_select_split(
            n_active, sol, q, cols, s, di, s2, dj, j >= 0, scratch, helper
        )
    state.head = head
    state.n_active = n_active
    state.unshrunk = unshrunk
    state.to_shrink = to_shrink
    state.steps = n_iter
    return status


def _run_phase(settings, q, sol, cache, state, helper, counts):
    """``_kernel_phase``, with a helper thread for the far halves of its passes when
    ``helper``: started here, and stopped however the phase ends; what it did is added to
    ``counts``."""
    if not helper:
        return _kernel_phase(settings, q, sol, cache, state, NO_HELPER)
    control, thread = start_helper(q, sol, cache)
    try:
        return _kernel_phase(settings, q, sol, cache, state, control)
    finally:
        stop_helper(control, thread)
        for name, value in helper_counts(control).items():
            counts[name] = counts.get(name, 0) + value


# The driver's groups (plain Python, built once per call, never per step).  The arguments
# as the solver takes them (``_arguments``); an exact point: alpha in row order, its
# gradient ``Q alpha - 1`` and ``G_bar`` exactly in float64 (``g_bar`` None until
# needed: ``_exact_g_bar``), with ``upper``, the alpha at the bound that G_bar is Q times.
_Arguments = namedtuple(
    "_Arguments",
    ["X32", "t64", "gram", "C", "tol", "max_iter", "tail_size", "face_qp_max_free", "helper"],
)
_ExactPoint = namedtuple("_ExactPoint", ["alpha", "g", "upper", "g_bar"])
# the phase's counters that ``info`` receives beside the driver's
_INFO_COUNTERS = (
    "steps",
    "column_entries",
    "shrinks",
    "shrunk_active_sum",
    "g_bar_updates",
    "g_bar_entries",
    "block_fetches",
)


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
    g_bar0=None,
    tail_size=None,
    gram=None,
    state=None,
    face_qp_max_free=None,
    helper=None,
    check_precision="double",
    info=None,
    column_source="auto",
    fetch_block=None,
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
    ``g_bar0``: with ``gradient0``, G_bar of the alpha it belongs to (``Q`` times its
    variables at C, the others 0), exactly, when the caller has it (a divide-and-conquer
    start computes both in one pass elsewhere): the start then computes no product.

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
    entries computed for them), ``helper`` (1 if a helper thread ran) and, with one,
    ``helper_jobs`` (far halves posted), ``helper_taken_back`` (done by the solver's
    thread because the helper had not claimed them), ``helper_late`` (waited for past
    ``solver_helper.LATE_SPINS``) and ``helper_solo_passes`` (run whole while the helper
    did not pay);
    ``single_checks`` (final checks certified from float32 kernel values),
    ``column_source`` (the ``kernel_columns.SOURCE_*`` code the columns came from).
    ``block_fetches`` (columns computed ahead in block fetches).
    ``fetch_block``: a step whose column is not cached computes it with up to this many
    minus one other uncached columns of the largest violations in one pass over the rows
    (default ``FETCH_BLOCK`` for gaussian and laplacian columns of dense rows from
    ``BLOCK_MIN_FEATURES`` features, else 1: none).
    ``column_source``: dense rows' columns from the rows ("rows"), from a float32 CSR copy
    ("csr"), or "auto": the copy below ``column_cache.CSR_SOURCE_MAX_DENSITY`` nonzeros
    (sparse ``X`` is always read as CSR; a kept ``state`` keeps its own source).  The exact
    checks read ``X`` as given either way.

    ``check_precision="single"``: the final KKT check first from float32 kernel values
    with float64 sums and a per-row bound on their error (``ExactQ.gradient_single``):
    when every violation stays within ``tol`` for any gradient within the bound, the
    solve ends there, and the gradient returned is that one (within about 1e-6 of the
    exact one relative to the sum of the |alpha_i t_i|: for a caller that starts no
    other solve from it, as the last C of a path); else the exact float64 check, as with
    "double".  Not with ``gram`` (the exact product is a read of it then).
    """
    args = _arguments(X, t, gram, C, tol, max_iter, tail_size, face_qp_max_free, helper)
    exact_q = ExactQ(args.X32, args.t64, kernel, args.gram)
    counts = {"tails": 0, "exact_checks": 0, "face_qp": 0, "helper": int(args.helper)}
    kept = state is not None
    state = _solver_state(state, args.X32, args.t64, kernel, cache_size, args.tol, column_source)
    known_bar = state.known_bar
    if g_bar0 is not None and gradient0 is not None and alpha0 is not None:
        reference = np.asarray(alpha0 if gradient0_alpha is None else gradient0_alpha, np.float64)
        known_bar = (
            np.where(reference >= args.C, reference, 0.0),
            np.asarray(g_bar0, dtype=np.float64),
        )
    start = _warm_start(exact_q, args, alpha0, gradient0, gradient0_alpha, known_bar, counts)
    sol = _solver_solution(start, state.perm, args.C)
    q = _q_matrix(state, kernel, args.gram)
    block = _fetch_block_size(fetch_block, q, state.cache)
    q = _with_fetch(q, block)
    settings = _Settings(
        args.C,
        args.tol,
        bool(shrinking),
        bool(pair_steps),
        int(args.max_iter),
        int(args.tail_size),
        block,
    )
    n = args.X32.shape[0]
    progress = new_record(KERNEL_STATE, n_active=n, to_shrink=min(n, SHRINK_EVERY))
    single_check = check_precision == "single" and args.gram is None
    counts["single_checks"] = 0
    counts["column_source"] = int(q.source)
    status, end, start = _run_phases(
        settings, q, sol, state.cache, progress, exact_q, start, args.helper, counts, single_check
    )
    return _result(status, end, start, exact_q, state if kept else None, progress, counts, info)


def _fetch_block_size(fetch_block, q, cache):
    """Columns a block fetch computes together: ``fetch_block`` (1: none), by default
    ``FETCH_BLOCK`` for gaussian and laplacian columns of dense rows of at least
    ``BLOCK_MIN_FEATURES`` features, ``FETCH_BLOCK_SPARSE`` for sparse rows without the
    inverted index, else 1; at most a quarter of the cache's slots, and for sparse rows
    as many as ``FETCH_ROWS_BYTES`` of scattered rows hold."""
    sparse_ok = q.source == SOURCE_CSR
    dense_ok = q.source == SOURCE_ROWS and q.kind in FETCH_KINDS
    if fetch_block is None:
        wide = q.Xt.shape[0] >= BLOCK_MIN_FEATURES
        if dense_ok and wide:
            fetch_block = FETCH_BLOCK
        elif sparse_ok and q.csr.colptr.shape[0] == 0:
            fetch_block = FETCH_BLOCK_SPARSE
        else:
            fetch_block = 1
    fetch_block = int(fetch_block)
    if fetch_block < 1:
        raise ValueError(f"fetch_block must be a positive number of columns; got {fetch_block}")
    if fetch_block > 1 and not (sparse_ok or dense_ok):
        raise ValueError(
            "fetch_block > 1 needs columns from sparse rows, or gaussian or laplacian "
            "columns from dense rows (not a kept Gram matrix)"
        )
    if sparse_ok:
        fetch_block = min(fetch_block, FETCH_ROWS_BYTES // (8 * max(q.csr.n_features, 1)))
    return max(1, min(fetch_block, cache.cols.shape[0] // 4))


def _with_fetch(q, block):
    """``q`` with the scratch of block fetches of ``block`` columns (none for 1)."""
    if block <= 1:
        return q
    return q._replace(fetch=fetch_scratch(block, q.csr.n_features if q.source == SOURCE_CSR else 0))


def _arguments(X, t, gram, C, tol, max_iter, tail_size, face_qp_max_free, helper):
    """The arguments as the solver takes them (``_Arguments``): the rows float32, the labels
    and ``gram`` float64 (its shape checked), the defaults of ``tail_size``,
    ``face_qp_max_free`` and ``helper`` chosen, ``max_iter`` capped (``kernel_step_cap``)."""
    X32 = as_csr32(X) if is_sparse(X) else np.ascontiguousarray(X, dtype=np.float32)
    t64 = np.ascontiguousarray(t, dtype=np.float64)
    n = X32.shape[0]
    if gram is not None:
        gram = np.ascontiguousarray(gram, dtype=np.float64)
        if gram.shape != (n, n):
            raise ValueError(
                f"gram must be the ({n}, {n}) kernel matrix of X; got shape {gram.shape}"
            )
    if tail_size is None:
        tail_size = TAIL_SIZE if gram is None else max(TAIL_SIZE, n)
    if face_qp_max_free is None:
        face_qp_max_free = FACE_QP_MAX_FREE
    if helper is None:
        # a second thread pays only with a second core this process may use (its
        # affinity) inside its thread budget; whether that core is free is measured
        # while it runs (``solver_helper``)
        helper = n >= HELPER_MIN_ROWS and numba.get_num_threads() >= 2 and available_cores() >= 2
    helper = bool(helper)
    C = float(C)
    tol = float(tol)
    max_iter = kernel_step_cap(max_iter, n)
    return _Arguments(X32, t64, gram, C, tol, max_iter, tail_size, face_qp_max_free, helper)


def _solver_state(state, X32, t64, kernel: Kernel, cache_size, tol, column_source="auto"):
    """``state``, a ``KernelSolverState`` kept from a call on the same rows and kernel
    (checked), or a new one: Q's diagonal, the rows in the solver's order and an empty
    column cache of ``cache_size`` MB."""
    if state is None:
        return KernelSolverState(X32, t64, kernel, cache_size, tol, column_source)
    if state.key != kernel_key(X32.shape[0], kernel):
        raise ValueError("state was made for other rows or another kernel")
    return state


def _warm_start(exact_q: ExactQ, args, alpha0, gradient0, gradient0_alpha, known_bar, counts):
    """The exact start (``_ExactPoint``): ``alpha0`` clipped to the box (zeros without it)
    with its gradient and G_bar exactly, from ``gradient0`` and ``known_bar`` when given;
    then, on a kept K, the face QP's solution when it applies (``_face_qp``)."""
    C = args.C
    alpha_rows = (
        np.zeros(args.X32.shape[0])
        if alpha0 is None
        else np.clip(np.array(alpha0, dtype=np.float64), 0, C)
    )
    if gradient0 is not None and alpha0 is not None:
        reference = alpha0 if gradient0_alpha is None else gradient0_alpha
        g_rows, g_bar_rows = _gradient_from(
            exact_q,
            alpha_rows,
            C,
            np.asarray(reference, dtype=np.float64),
            np.asarray(gradient0, dtype=np.float64),
            known_bar,
        )
    else:
        g_rows, g_bar_rows = exact_gradient(exact_q, alpha_rows, C)
    if args.gram is not None and alpha0 is not None and args.face_qp_max_free > 0:
        solved = _face_qp(exact_q, args, alpha_rows, g_rows, g_bar_rows)
        if solved is not None:
            counts["face_qp"] = 1
            alpha_rows, g_rows, g_bar_rows = solved
    # an exact pair, for the final check; G_bar exact too
    return _point(alpha_rows, g_rows, C, g_bar_rows)


def _face_qp(exact_q: ExactQ, args, alpha_rows, g_rows, g_bar_rows):
    """A warm start with few free variables (a C path, wide kernels): the whole problem as a
    dense box QP from it, on the kept K; its ``(alpha, gradient, G_bar)`` exactly, or None
    when the start has more than ``face_qp_max_free`` free variables or the QP gives up."""
    C = args.C
    if np.count_nonzero((alpha_rows > 0.0) & (alpha_rows < C)) > args.face_qp_max_free:
        return None
    new = box_qp_signed(
        args.gram,
        args.t64,
        C,
        alpha_rows,
        g_rows,
        0.1 * args.tol,
        FACE_QP_STEPS_PER_ROW * args.X32.shape[0],
        2 * args.face_qp_max_free,
    )
    if new is None:
        return None
    g_new, g_bar_new = _gradient_from(
        exact_q,
        new,
        C,
        alpha_rows,
        g_rows,
        (np.where(alpha_rows >= C, alpha_rows, 0.0), g_bar_rows),
    )
    return new, g_new, g_bar_new


def _solver_solution(start, perm, C):
    """The phases' ``_Solution``: the start's arrays in the solver's own order (active
    variables first, ``perm``), copies that the phases update in place, and their bound
    flags."""
    alpha, g, g_bar = start.alpha[perm], start.g[perm], start.g_bar[perm]
    return _Solution(alpha, _bound_flags(alpha, C), g, g_bar)


def _q_matrix(state, kernel: Kernel, gram):
    """Q as the phases' column source (``QMatrix``): the kept K when given, else the rows
    (``state``'s, in the solver's order) and the kernel's parameters."""
    packed = gram is None and state.bits.counts.shape[0] > 0
    sparse = gram is None and state.csr.n_features > 0
    if gram is not None:
        source = SOURCE_GRAM
    else:
        source = SOURCE_BITS if packed else (SOURCE_CSR if sparse else SOURCE_ROWS)
    code = KERNEL_CODES[kernel.kind]
    params = (float(kernel.sigma), int(kernel.degree), float(kernel.sigma_star), float(kernel.tau))
    max_count = int(state.bits.counts.max(initial=0))
    return QMatrix(
        source,
        state.Xt,
        state.tp,
        state.perm,
        gram if gram is not None else np.empty((0, 0)),
        code,
        *params,
        state.diag,
        state.dinv,
        state.unit_diag,
        state.csr,
        NO_FETCH,
        state.bits,
        # float32: the column's own type (t_i t_p is +-1, so the stored values are the same)
        value_table(max_count, code, *params).astype(np.float32)
        if packed
        else np.empty(0, np.float32),
    )


def _run_phases(
    settings, q, sol, cache, progress, exact_q: ExactQ, start, helper, counts, single_check
):
    """Phases of steps (``_run_phase``) until the exact check passes or the step cap is
    reached; between them the exact tails (``_solve_tail``), the shrunk variables'
    gradients (``_unshrink``) and the restarts from exact state (``_restart``).
    ``single_check``: a phase's optimum is first checked from float32 kernel values with
    their error bound (``_certified_single``), and ends the solve when that certifies it.

    Returns ``(status, end, start)``: the last phase's status, the exact point at the end
    and the exact start it was checked from (``_exact_g_bar`` may need it)."""
    perm = q.perm
    while True:
        status = _run_phase(settings, q, sol, cache, progress, helper, counts)
        if status == PHASE_TAIL:
            counts["tails"] += _solve_tail(
                exact_q, settings.C, settings.tol, sol, perm, int(progress["n_active"])
            )
            # the next tail solve only after as many steps again
            progress["last_change"] = progress["steps"]
            continue
        if status == PHASE_UNSHRINK:
            _unshrink(exact_q, sol, perm, progress)
            continue
        if single_check and status == PHASE_OPTIMAL:
            end = _certified_single(exact_q, sol.alpha, perm, settings.C, settings.tol)
            if end is not None:
                counts["exact_checks"] += 1
                counts["single_checks"] += 1
                return status, end, start
        end = _exact_point(exact_q, sol.alpha, perm, settings.C, start)
        counts["exact_checks"] += 1
        if status == PHASE_MAX_ITER or kkt_violation(end.alpha, end.g, settings.C) <= settings.tol:
            return status, end, start
        start = _restart(exact_q, end, start, sol, perm, progress)


def _unshrink(exact_q: ExactQ, sol, perm, progress):
    """Every variable active again, the shrunk ones' gradients rebuilt: G_bar - 1 plus the
    free variables' part, exactly."""
    m = int(progress["n_active"])
    n = sol.alpha.size
    free_rows = np.zeros(n)  # free variables are never shrunk
    free_rows[perm] = np.where(sol.bound == FREE, sol.alpha, 0.0)
    sol.g[m:] = sol.g_bar[m:] - 1.0 + exact_q.matvec(perm[m:], free_rows)
    progress["n_active"] = n


def _exact_point(exact_q: ExactQ, alpha, perm, C, start):
    """The phases' ``alpha`` (the solver's order) in row order with its exact gradient
    (``_ExactPoint``; G_bar too when the gradient is computed whole, else None).

    The cached columns are float32: the gradient returned, and the optimum, are checked
    with an exact one: ``start``'s plus Q times the change when fewer variables changed
    than there are support vectors."""
    alpha_rows = _in_row_order(alpha, perm)
    change = alpha_rows - start.alpha
    if np.count_nonzero(change) < np.count_nonzero(alpha_rows):
        g_rows, g_bar_rows = start.g + exact_q.matvec(None, change), None
    else:
        g_rows, g_bar_rows = exact_gradient(exact_q, alpha_rows, C)
    return _point(alpha_rows, g_rows, C, g_bar_rows)


def _in_row_order(alpha, perm):
    """The phases' ``alpha`` (the solver's order, ``perm``) in row order, a new array."""
    alpha_rows = np.empty(alpha.size)
    alpha_rows[perm] = alpha
    return alpha_rows


def _point(alpha_rows, g_rows, C, g_bar_rows):
    """An ``_ExactPoint`` of row-ordered ``alpha`` and its gradient (G_bar or None), its
    variables at the bound (``upper``) derived."""
    return _ExactPoint(alpha_rows, g_rows, np.where(alpha_rows >= C, alpha_rows, 0.0), g_bar_rows)


def _certified_single(exact_q: ExactQ, alpha, perm, C, tol):
    """The phases' ``alpha`` in row order with its gradient (``_ExactPoint``, no G_bar)
    when it is certified optimal within ``tol``; else None (the exact check decides).

    The gradient comes from float32 kernel values with a bound on its error per row
    (``ExactQ.gradient_single``); the rows whose violation could pass ``tol`` within that
    bound (few: on COD-RNA's 29,768 rows 3 at C = 0.1, 130 at C = 1, 1,323 at C = 100) get
    their exact float64 gradient.  Certified when no row's violation can pass ``tol``;
    given up, for the whole exact product, when more than ``SINGLE_CHECK_UNSURE`` of the
    rows are unsure."""
    alpha_rows = _in_row_order(alpha, perm)
    approx = exact_q.gradient_single(alpha_rows)
    if approx is None:
        return None
    g_rows, bound = approx
    unsure = np.flatnonzero(kkt_violations(alpha_rows, g_rows, C, slack=bound) > tol)
    if unsure.size > SINGLE_CHECK_UNSURE * alpha.size:
        return None
    if unsure.size:
        g_rows[unsure] = exact_q.matvec(unsure, alpha_rows) - 1.0
        bound[unsure] = 0.0
    if kkt_violation(alpha_rows, g_rows, C, slack=bound) > tol:
        return None
    return _point(alpha_rows, g_rows, C, None)


def _exact_g_bar(exact_q: ExactQ, point, start):
    """``point``'s G_bar exactly: its own, or from ``start``'s (see ``product_from``)."""
    if point.g_bar is not None:
        return point.g_bar
    return product_from(exact_q, point.upper, (start.upper, start.g_bar))


def _restart(exact_q: ExactQ, end, start, sol, perm, progress):
    """Go on from exact state: every variable active, G_bar exact too (a reconstruction
    from the float32-accumulated G_bar could hide the violation); returns the new exact
    start, ``end`` with its G_bar."""
    g_bar_rows = _exact_g_bar(exact_q, end, start)
    sol.g[:] = end.g[perm]
    sol.g_bar[:] = g_bar_rows[perm]
    progress["n_active"] = sol.alpha.size
    return end._replace(g_bar=g_bar_rows)


def _result(status, end, start, exact_q: ExactQ, kept_state, progress, counts, info):
    """``solve_kernel_dual``'s return value ``(alpha, n_iter, converged, gradient)``; the
    exact G_bar at the end kept in ``kept_state`` (a C path's next call starts from it),
    the counters put in ``info``."""
    if kept_state is not None:
        # after a check certified in single precision no exact G_bar is at hand (and no
        # solve starts from this one): the next call computes its own
        certified_single = counts["single_checks"] > 0
        kept_state.known_bar = (
            None if certified_single else (end.upper, _exact_g_bar(exact_q, end, start))
        )
    if info is not None:
        info.update(counts, **{name: int(progress[name]) for name in _INFO_COUNTERS})
    return end.alpha, int(progress["steps"]), status == PHASE_OPTIMAL, end.g


def _solve_tail(exact_q: ExactQ, C, tol, sol, perm, m):
    """Solve the problem over the active positions ``[0, m)`` exactly, the others fixed.

    Their gradient is recomputed exactly first (the phase's comes from float32
    columns), then ``box_qp`` on ``Q_AA``; the move is taken only if it lowers the
    objective.  Updates ``sol``'s alpha, bound, g (active part, exactly) and G_bar in
    place (the solver's order).  Returns 1 if a move was taken, else 0.
    """
    alpha, bound, g, g_bar = sol
    rows = perm[:m]
    n = alpha.size
    alpha_rows = _in_row_order(alpha, perm)
    g_A = exact_q.matvec(rows, alpha_rows) - 1.0
    Q_AA = exact_q.block(rows)
    old = alpha[:m].copy()
    new = tail_solution(Q_AA, g_A, old, C, tol)
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
