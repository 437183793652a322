"""The exact tail: a small dense box QP (``box_qp``, a primal active-set method), which both
solvers use to finish the small active sets their steps stall on."""

from __future__ import annotations

import numpy as np
from numba import njit

from elmscale.core.jit import dot


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
    return box_qp_signed(Q, np.ones(m), C, x0, Q @ x0 + c, tol, 4 * m + 20)


def box_qp_signed(K, t, C, x0, grad0, tol, max_steps, max_free=-1):
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


def tail_solution(Q_AA, g_A, old, C, tol):
    """The exact minimiser over a tail's variables (``Q_AA``, their exact gradient ``g_A``
    at ``old``, the others fixed), or None if ``box_qp`` fails or it does not lower the
    objective.  Shared by both solvers' tail solves."""
    c = g_A - Q_AA @ old
    new = box_qp(Q_AA, c, C, old, 0.1 * tol)
    if new is None:
        return None
    gain = 0.5 * (new @ Q_AA @ new - old @ Q_AA @ old) + c @ (new - old)
    return new if gain < 0.0 else None


@njit(cache=True, nogil=True, error_model="numpy")
def box_greedy_steps(K, t, C, x, grad, tol, max_steps):
    """Exact one-variable steps on ``1/2 x'Qx + c'x`` over ``0 <= x <= C``, ``Q = t t' K``,
    each on the variable of largest KKT violation (the one-process solver's choice), from
    ``x`` with ``grad = Q x + c`` (both updated in place), until every violation is at most
    ``tol`` or ``max_steps`` steps.  Returns the steps taken.  Each step costs two passes
    over the m variables: a working set's subproblem of m = 1,024 in microseconds a step."""
    m = x.size
    for step in range(max_steps):
        best = tol
        i = -1
        for k in range(m):
            g = grad[k]
            xk = x[k]
            v = -g if xk <= 0.0 else (g if xk >= C else abs(g))
            if v > best:
                best = v
                i = k
        if i < 0:
            return step
        qii = K[i, i]
        if qii <= 0.0:
            return step
        new = min(max(x[i] - grad[i] / qii, 0.0), C)
        delta = new - x[i]
        x[i] = new
        row = K[i]
        w = delta * t[i]
        for j in range(m):
            grad[j] += w * t[j] * row[j]
    return max_steps
