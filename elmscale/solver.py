"""The sparse-ELM dual solver (paper Section V, Algorithm 1), in numba.

Problem (eq. 17): minimise ``1/2 a'Qa - 1'a`` subject to ``0 <= a_i <= C``,
``Q_ij = t_i t_j K(x_i, x_j)``.  There is no equality constraint, so one
variable moves at a time: ``a_i <- clip(a_i - g_i / Q_ii, 0, C)``.

Two solvers, both pure functions of arrays (no Dask, no Ray), so that a
one-vs-one pair or a cross-validation fold can run anywhere:

``solve_kernel_dual``
    LIBSVM-style: kernel columns (float32, computed in float64 from float32
    inputs) in an LRU cache with a budget in MB and O(1) lookup (int32
    prev/next arrays); the variable with the largest ``v_i^2 / Q_ii`` is
    chosen (``v_i`` its KKT violation; for the gaussian kernel ``Q_ii = 1`` and
    this is the paper's rule, eqs. 41-42); shrinking of bounded variables every
    ``SHRINK_EVERY`` steps with ``G_bar = sum_{a_j = C} C Q[:, j]`` kept so that
    the gradient of shrunk variables is rebuilt from the free ones only.  On
    exit the gradient is recomputed exactly in float64 from the support vectors
    and the solver continues if the largest violation exceeds ``tol``.
``solve_explicit_dual``
    For random hidden nodes (``Q = (t h)(t h)'``): dual coordinate descent of
    LIBLINEAR (Hsieh et al. 2008) on ``beta = sum_i a_i t_i h(x_i)``: O(L) per
    step, no kernel columns, random order per pass, shrinking.

Both accept a warm start ``alpha0`` (a path of increasing C reuses the last
solution).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit import KERNEL_CODES, _kernel_row
from .hidden import Kernel

SHRINK_EVERY = 1000
_TAU = 1e-12  # guard for a non-positive diagonal


@njit(cache=True, error_model="numpy", inline="always")
def _violation(a, g, C):
    """KKT violation of one variable (0 when optimal)."""
    if a <= 0.0:
        return -g if g < 0.0 else 0.0
    if a >= C:
        return g if g > 0.0 else 0.0
    return abs(g)


@njit(cache=True, error_model="numpy")
def _kernel_diag(X, kind, sigma, degree):
    n, d = X.shape
    diag = np.empty(n)
    for i in range(n):
        if kind == 2:
            s = 1.0
            for k in range(d):
                s += np.float64(X[i, k]) * np.float64(X[i, k])
            v = 1.0
            for _ in range(degree):
                v *= s
            diag[i] = v
        else:
            diag[i] = 1.0
    return diag


def exact_gradient(X32, t, weights, kernel: Kernel):
    """``g = Q w - 1`` in float64, from the rows with nonzero weight only (not from a cache).

    Parallel over rows (``Kernel.block_matvec``): the one O(n * n_SV) step of the
    solver, run from Python because a cached numba function that calls a parallel
    one crashes when loaded from numba's cache.
    """
    sv = np.flatnonzero(weights != 0.0)
    if sv.size == 0:
        return np.full(X32.shape[0], -1.0)
    return t * kernel.block_matvec(X32, X32[sv], weights[sv] * t[sv]) - 1.0


@njit(cache=True, error_model="numpy")
def _select(active, active_size, alpha, g, diag, C):
    """The active variable with the largest violation^2 / Q_ii, and its violation."""
    best = -1.0
    i_sel = -1
    max_v = 0.0  # the stopping test needs the largest violation, not the chosen one's
    for p in range(active_size):
        i = active[p]
        v = _violation(alpha[i], g[i], C)
        if v > 0.0:
            max_v = max(max_v, v)
            score = v * v / max(diag[i], _TAU)
            if score > best:
                best = score
                i_sel = i
    return i_sel, max_v


@njit(cache=True, error_model="numpy")
def _kernel_phase(X, Xt, t, kind, sigma, degree, C, tol, shrinking, max_iter, alpha, diag, g,
                  g_bar, cols, slot_of, owner, prev, nxt, active, istate):
    """Steps until every variable is within ``tol`` by the cached gradient (returns 0) or
    ``max_iter`` steps in all (returns 1).  The solver's state lives in the arrays passed
    in (``istate`` = head slot, active size, unshrunk flag, shrink counter, steps so far),
    so that the caller can check the gradient exactly and call again."""
    n = X.shape[0]
    acc = np.empty(n)
    kbuf = np.empty(n, np.int64)
    head = istate[0]
    active_size = istate[1]
    unshrunk = istate[2] != 0
    counter = istate[3]
    n_iter = istate[4]
    status = 0
    need_select = True
    i_sel = -1
    max_v = 0.0
    while True:
        if need_select:
            i_sel, max_v = _select(active, active_size, alpha, g, diag, C)
            need_select = False
        if max_v <= tol:
            if active_size < n:
                # rebuild the gradient of shrunk variables and look again at all
                _reconstruct(X, Xt, t, alpha, g, g_bar, active, active_size, C, kind, sigma,
                             degree, acc, kbuf, cols, slot_of)
                active_size = n
                need_select = True
                continue
            break  # candidate optimum: the caller checks it exactly
        if max_iter >= 0 and n_iter >= max_iter:
            status = 1
            break
        n_iter += 1
        # ---- shrinking
        if shrinking and not need_select:
            counter -= 1
            if counter == 0:
                counter = min(n, SHRINK_EVERY)
                if not unshrunk and max_v <= 10.0 * tol:
                    unshrunk = True
                    _reconstruct(X, Xt, t, alpha, g, g_bar, active, active_size, C, kind,
                                 sigma, degree, acc, kbuf, cols, slot_of)
                    active_size = n
                p = 0
                while p < active_size:
                    i = active[p]
                    if (alpha[i] <= 0.0 and g[i] > max_v) or (alpha[i] >= C and g[i] < -max_v):
                        active_size -= 1
                        active[p] = active[active_size]
                        active[active_size] = i
                    else:
                        p += 1
                need_select = True
        # ---- Q column of i_sel, through the cache
        i = i_sel
        s = slot_of[i]
        if s < 0:
            s = prev[head]  # least recently used slot
            if owner[s] >= 0:
                slot_of[owner[s]] = -1
            owner[s] = i
            slot_of[i] = s
            _kernel_row(X[i], Xt, kind, sigma, degree, acc, kbuf)
            col = cols[s]
            ti = t[i]
            for j in range(n):
                col[j] = ti * t[j] * acc[j]
        if s != head:  # move s to the front
            nxt[prev[s]] = nxt[s]
            prev[nxt[s]] = prev[s]
            tail = prev[head]
            nxt[tail] = s
            prev[s] = tail
            nxt[s] = head
            prev[head] = s
        head = s
        col = cols[s]
        # ---- one-variable step
        old = alpha[i]
        new = old - g[i] / max(diag[i], _TAU)
        new = min(max(new, 0.0), C)
        delta = new - old
        alpha[i] = new
        # one fused pass: update the gradient and pick the next variable
        best = -1.0
        i_sel = -1
        max_v = 0.0
        for p in range(active_size):
            j = active[p]
            gj = g[j] + delta * col[j]
            g[j] = gj
            v = _violation(alpha[j], gj, C)
            if v > 0.0:
                max_v = max(max_v, v)
                score = v * v / max(diag[j], _TAU)
                if score > best:
                    best = score
                    i_sel = j
        # keep G_bar = sum over a_j = C of C Q[:, j]
        was_upper = old >= C
        is_upper = new >= C
        if was_upper != is_upper:
            sign = 1.0 if is_upper else -1.0
            for j in range(n):
                g_bar[j] += sign * C * col[j]
    istate[0] = head
    istate[1] = active_size
    istate[2] = 1 if unshrunk else 0
    istate[3] = counter
    istate[4] = n_iter
    return status


@njit(cache=True, error_model="numpy")
def _reconstruct(X, Xt, t, alpha, g, g_bar, active, active_size, C, kind, sigma, degree, acc,
                 kbuf, cols, slot_of):
    """Gradient of shrunk variables: G_bar - 1 + contributions of the free variables.

    A free variable's Q column comes from the cache when it is there (most are):
    recomputing them all made shrinking cost more than it saved on small sets.
    """
    n = X.shape[0]
    if active_size == n:
        return
    for p in range(active_size, n):
        j = active[p]
        g[j] = g_bar[j] - 1.0
    for i in range(n):
        if 0.0 < alpha[i] < C:
            s = slot_of[i]
            if s >= 0:
                col = cols[s]
                a = alpha[i]
                for p in range(active_size, n):
                    j = active[p]
                    g[j] += a * col[j]
            else:
                _kernel_row(X[i], Xt, kind, sigma, degree, acc, kbuf)
                w = alpha[i] * t[i]
                for p in range(active_size, n):
                    j = active[p]
                    g[j] += w * t[j] * acc[j]


def solve_kernel_dual(X, t, *, kernel: Kernel, C, tol=1e-3, cache_size=200.0, shrinking=True,
                      max_iter=-1, alpha0=None):
    """Solve eq. 17 with a kernel; returns ``(alpha, n_iter, converged, gradient)``.

    ``X`` (n, d) rows, ``t`` labels in {-1, +1}; ``cache_size`` in MB of float32
    Q columns; ``max_iter`` < 0 means no limit (steps, one variable each).  The
    gradient ``Q alpha - 1`` returned is the exact float64 one, so that callers
    need not compute it again.
    """
    X32 = np.ascontiguousarray(X, dtype=np.float32)
    Xt = np.ascontiguousarray(X32.T)
    t64 = np.ascontiguousarray(t, dtype=np.float64)
    n = X32.shape[0]
    kind_code, sigma, degree = KERNEL_CODES[kernel.kind], float(kernel.sigma), int(kernel.degree)
    C = float(C)
    n_slots = int(max(2, min(n, cache_size * 2**20 // (4 * max(n, 1)))))
    alpha = np.zeros(n) if alpha0 is None else np.clip(np.array(alpha0, dtype=np.float64), 0, C)
    diag = _kernel_diag(X32, kind_code, sigma, degree)
    g = exact_gradient(X32, t64, alpha, kernel)
    g_bar = exact_gradient(X32, t64, np.where(alpha >= C, C, 0.0), kernel) + 1.0
    # LRU cache of Q columns: storage, owner of each slot, circular doubly linked
    # list of slots (head = most recently used, prev[head] = least).
    cols = np.empty((n_slots, n), np.float32)
    slot_of = np.full(n, -1, np.int32)
    owner = np.full(n_slots, -1, np.int32)
    prev = ((np.arange(n_slots) - 1) % n_slots).astype(np.int32)
    nxt = ((np.arange(n_slots) + 1) % n_slots).astype(np.int32)
    active = np.arange(n)
    istate = np.array([0, n, 0, min(n, SHRINK_EVERY), 0], dtype=np.int64)
    converged = False
    while True:
        status = _kernel_phase(X32, Xt, t64, kind_code, sigma, degree, C, float(tol),
                               bool(shrinking), int(max_iter), alpha, diag, g, g_bar, cols,
                               slot_of, owner, prev, nxt, active, istate)
        # the cached columns are float32: the gradient returned, and the optimum,
        # are checked with an exact one
        g[:] = exact_gradient(X32, t64, alpha, kernel)
        if status == 1:
            break
        if kkt_violation(alpha, g, C) <= tol:
            converged = True
            break
        # go on from exact state: every variable active, G_bar recomputed (a
        # reconstruction from the float32-accumulated G_bar could hide the violation)
        g_bar[:] = exact_gradient(X32, t64, np.where(alpha >= C, C, 0.0), kernel) + 1.0
        istate[1] = n
    return alpha, int(istate[4]), converged, g


def kkt_violation(alpha, g, C):
    """Largest KKT violation (0 at the optimum), vectorised."""
    v = np.where(alpha <= 0.0, np.maximum(-g, 0.0),
                 np.where(alpha >= C, np.maximum(g, 0.0), np.abs(g)))
    return float(v.max(initial=0.0))


@njit(cache=True, error_model="numpy")
def _solve_explicit(H, t, C, tol, shrinking, max_iter, alpha, seed):
    """Dual coordinate descent on beta = sum a_i t_i h_i (H float32, n x L)."""
    n, L = H.shape
    beta = np.zeros(L)
    diag = np.empty(n)
    for i in range(n):
        hi = H[i]
        s = 0.0
        for k in range(L):
            s += np.float64(hi[k]) * np.float64(hi[k])
        diag[i] = s
        if alpha[i] > 0.0:
            w = alpha[i] * t[i]
            for k in range(L):
                beta[k] += w * hi[k]
    np.random.seed(seed)
    active = np.arange(n)
    active_size = n
    bound = np.inf  # shrinking threshold from the previous pass (LIBLINEAR)
    n_iter = 0
    converged = False
    while True:
        if max_iter >= 0 and n_iter >= max_iter:
            break
        n_iter += 1
        # random order of the active variables for this pass
        for p in range(active_size - 1, 0, -1):
            q = np.random.randint(0, p + 1)
            active[p], active[q] = active[q], active[p]
        max_v = 0.0
        p = 0
        while p < active_size:
            i = active[p]
            hi = H[i]
            s = 0.0
            for k in range(L):
                s += np.float64(hi[k]) * beta[k]
            g = t[i] * s - 1.0
            a = alpha[i]
            if shrinking and ((a <= 0.0 and g > bound) or (a >= C and g < -bound)):
                active_size -= 1
                active[p] = active[active_size]
                active[active_size] = i
                continue
            v = _violation(a, g, C)
            if v > max_v:
                max_v = v
            if v > 0.0 and diag[i] > _TAU:
                new = min(max(a - g / diag[i], 0.0), C)
                w = (new - a) * t[i]
                if w != 0.0:
                    alpha[i] = new
                    for k in range(L):
                        beta[k] += w * hi[k]
            p += 1
        bound = max_v if max_v > 0.0 else np.inf
        if max_v <= tol:
            if active_size < n:
                active_size = n
                bound = np.inf
                continue
            # exact check over every row
            worst = 0.0
            for i in range(n):
                hi = H[i]
                s = 0.0
                for k in range(L):
                    s += np.float64(hi[k]) * beta[k]
                worst = max(worst, _violation(alpha[i], t[i] * s - 1.0, C))
            if worst <= tol:
                converged = True
                break
    return beta, n_iter, converged


def solve_explicit_dual(H, t, *, C, tol=1e-3, shrinking=True, max_iter=-1, alpha0=None,
                        random_state=0):
    """Solve eq. 17 with an explicit mapping ``H`` (rows h(x_i)); returns ``(alpha, beta, n_iter, converged)``.

    ``n_iter`` counts passes over the data (LIBLINEAR's convention).
    """
    H32 = np.ascontiguousarray(H, dtype=np.float32)
    t64 = np.asarray(t, dtype=np.float64)
    n = H32.shape[0]
    alpha = np.zeros(n) if alpha0 is None else np.clip(np.array(alpha0, dtype=np.float64), 0, C)
    beta, n_iter, converged = _solve_explicit(H32, t64, float(C), float(tol), bool(shrinking),
                                              int(max_iter), alpha, int(random_state))
    return alpha, beta, int(n_iter), bool(converged)


def dual_objective(Q, alpha):
    """``1/2 a'Qa - 1'a`` (for tests and reports)."""
    return 0.5 * alpha @ Q @ alpha - alpha.sum()


__all__ = ["SHRINK_EVERY", "dual_objective", "solve_explicit_dual", "solve_kernel_dual"]
