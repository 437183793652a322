"""The sparse ELM's solver for random hidden nodes: dual coordinate descent on the primal
vector (LIBLINEAR's, Hsieh et al. 2008), ``solve_explicit_dual``, and its passes, which
the Newton solver's phase 2 runs on the rows it gathers (``primal_newton``)."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from elmscale.core.jit import dot, prefetch, prefetch_row, shuffle_prefix
from elmscale.core.seeding import xorshift_state
from elmscale.solvers.dual_common import PHASE_MAX_ITER, PHASE_OPTIMAL, PHASE_TAIL, TAU, new_record
from elmscale.solvers.exact_tail import tail_solution

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
PREFETCH_AHEAD = 8  # rows of H asked for ahead of the explicit solver's random order
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


@njit(cache=True, error_model="numpy", inline="always")
def _violation(a, g, C):
    """KKT violation of one variable (0 when optimal)."""
    if a <= 0.0:
        return -g if g < 0.0 else 0.0
    if a >= C:
        return g if g > 0.0 else 0.0
    return abs(g)


@njit(cache=True, nogil=True, error_model="numpy")
def _row_sq_norms(H, diag):
    """``diag_i = h_i.h_i`` (H float32, n x L)."""
    for i in range(H.shape[0]):
        hi = H[i]
        diag[i] = dot(hi, hi)


@njit(cache=True, nogil=True, error_model="numpy")
def _add_rows(H, t, alpha, beta):
    """``beta += sum_i a_i t_i h_i`` over the nonzero ``a_i`` (H float32, n x L)."""
    n, L = H.shape
    for i in range(n):
        if alpha[i] > 0.0:
            hi = H[i]
            w = alpha[i] * t[i]
            for k in range(L):
                beta[k] += w * hi[k]


# The explicit solver's arguments, grouped as the kernel solver's: its settings; the
# problem (``H`` float32 n x L, the targets ``t``, ``diag`` = h_i.h_i); the solution
# (alpha, beta = sum a_i t_i h_i); the order of the rows (``active``, the active ones
# first) and the shuffle's state (``rng``, see ``shuffle_prefix``)
ExplicitSettings = namedtuple(
    "ExplicitSettings", ["C", "tol", "shrinking", "max_iter", "tail_size"]
)
ExplicitProblem = namedtuple("ExplicitProblem", ["H", "t", "diag"])
ExplicitSolution = namedtuple("ExplicitSolution", ["alpha", "beta"])
PassOrder = namedtuple("PassOrder", ["active", "rng"])


@njit(cache=True, nogil=True, error_model="numpy")
def _explicit_phase(settings, problem, sol, order, state):
    """Dual coordinate descent passes on beta = sum a_i t_i h_i (H float32, n x L).

    Returns ``PHASE_OPTIMAL`` when converged (checked exactly over every row),
    ``PHASE_MAX_ITER`` at ``max_iter`` passes, ``PHASE_TAIL`` when the active set has
    stayed at most ``tail_size`` variables for ``TAIL_PASSES`` passes (the caller
    solves it exactly, then calls again).  ``settings`` (``ExplicitSettings``),
    ``problem`` (``ExplicitProblem``), ``sol`` (``ExplicitSolution``), ``order``
    (``PassOrder``: the first ``state.active_size`` of ``order.active`` are active),
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
            if v > 0.0 and diag[i] > TAU:
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
    new = tail_solution(M @ M.T, M @ beta - 1.0, old, C, tol)
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


def run_explicit_dual(
    H32,
    t,
    alpha,
    beta,
    *,
    C,
    tol,
    max_passes,
    rng_state,
    shrinking=True,
    tail_size=EXPLICIT_TAIL_SIZE,
):
    """The explicit solver from ``(alpha, beta)``, both updated in place: at most
    ``max_passes`` passes of dual coordinate descent over every row of ``H32`` (float32,
    n x L) with targets ``t`` (float64 +-1), the stalled small active sets solved exactly
    (``explicit_passes``).  ``beta`` is the vector the steps move, ``sum_i a_i t_i h_i``
    for the single-process problem, or that sum plus the fixed rows' part for the Newton
    solver's gathered rows (``primal_newton.solve_gathered``).  ``rng_state``: the
    row shuffle's xorshift state (nonzero).  Returns ``(converged, passes, tails taken,
    tails failed)``.  The one entry ``solve_explicit_dual`` and the Newton solver's phase 2
    share.
    """
    n = H32.shape[0]
    diag = np.empty(n)
    _row_sq_norms(H32, diag)
    progress = new_record(EXPLICIT_STATE, active_size=n, up_bound=np.inf, down_bound=-np.inf)
    settings = ExplicitSettings(
        float(C), float(tol), bool(shrinking), int(max_passes), int(tail_size)
    )
    order = PassOrder(np.arange(n), np.array([rng_state], dtype=np.uint64))
    status, tails, failed = explicit_passes(
        settings, ExplicitProblem(H32, t, diag), ExplicitSolution(alpha, beta), order, progress
    )
    return status == PHASE_OPTIMAL, int(progress["passes"]), tails, failed


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
    _add_rows(H32, t64, alpha, beta)
    converged, passes, tails, failed = run_explicit_dual(
        H32,
        t64,
        alpha,
        beta,
        C=C,
        tol=tol,
        max_passes=EXPLICIT_MAX_PASSES if max_iter < 0 else int(max_iter),
        rng_state=xorshift_state(random_state),
        shrinking=shrinking,
        tail_size=tail_size,
    )
    if info is not None:
        info.update(passes=passes, tails=tails, failed_tails=failed)
    return alpha, beta, passes, converged
