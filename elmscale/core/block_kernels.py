"""Kernel values from inner products computed elsewhere (a BLAS GEMM): the second half of
a block of kernel columns (``elmscale.solvers.block_columns``).  The first half, the
products ``B A'`` of the block's rows ``B`` against the rows ``A``, is one float64 GEMM;
here, row by row of the block, the squared distance ``|b|^2 + |a|^2 - 2 b.a`` and the
kernel's value, as ``core.jit``'s per-column kernels compute them from the distance."""

from __future__ import annotations

import numpy as np
from numba import njit

from elmscale.core.jit import _distance_kernel, _kernel_row32, _vexp32
from elmscale.core.threads import parallel_rows

#: Rows of ``B`` to a GEMM in ``gemm_kernel_matvec``: the float64 products of 128 rows with
#: 30,000 are 30 MB.
GEMM_ROWS = 128
#: Features from which ``gemm_kernel_matvec`` is faster than the fused per-row kernel
#: (``core.jit.kernel_rows_matvec``, double): below, its two passes over the products cost
#: more than the distance of a few features.
GEMM_MATVEC_MIN_FEATURES = 48


@njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath={"contract"})
def _values32(row, sb, sq_a, start, kind, sigma, sigma_star, tau, acc64, acc32, kbuf32, kbuf64):
    """``acc32[j] = K(b, a_{start + j})`` (float32) for ``j`` below the buffers' length, from
    ``row[start + j] = b . a_{start + j}`` and the squared norms ``sb`` (b's), ``sq_a``
    (float64): the distance in float64 (clipped at 0), the exp's argument rounded to float32
    and the float32 exp (``core.jit._vexp32``, the per-column kernel's) for gaussian
    (``kind`` 0) and laplacian (1); mg (3) in float64, rounded."""
    w = acc32.shape[0]
    for j in range(w):
        acc64[j] = max(sb + sq_a[start + j] - 2.0 * row[start + j], 0.0)
    if kind == 0:
        scale = -1.0 / (2.0 * sigma * sigma)
        for j in range(w):
            acc32[j] = np.float32(acc64[j] * scale)
        _vexp32(acc32, kbuf32)
    elif kind == 1:
        scale = -1.0 / sigma
        for j in range(w):
            acc32[j] = np.float32(np.sqrt(acc64[j]) * scale)
        _vexp32(acc32, kbuf32)
    else:
        _distance_kernel(acc64, w, kind, sigma, sigma_star, tau, kbuf64)
        for j in range(w):
            acc32[j] = np.float32(acc64[j])


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def signed_columns32(
    dots, sq_b, sq_a, t_b, t_a, kind, sigma, sigma_star, tau, out, slots, start, stop
):
    """``out[slots[k], j] = t_b[k] t_a[j] K(b_k, a_j)`` (float32) for the block's rows ``k`` in
    ``[start, stop)``, from ``dots[k, j] = b_k . a_j`` ((m, n), float64 or float32) and the squared
    norms ``sq_b``, ``sq_a`` (float64), each value ``_values32``'s."""
    n = dots.shape[1]
    acc32 = np.empty(n, np.float32)
    kbuf32 = np.empty(n, np.int32)
    acc64 = np.empty(n, np.float64)
    kbuf64 = np.empty(n, np.int64)
    for k in range(start, stop):
        _values32(
            dots[k], sq_b[k], sq_a, 0, kind, sigma, sigma_star, tau, acc64, acc32, kbuf32, kbuf64
        )
        tk = t_b[k]
        o = out[slots[k]]
        for j in range(n):
            o[j] = tk * t_a[j] * acc32[j]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def distance_values64(dots, sq_b, sq_a, kind, sigma, sigma_star, tau, out, start, stop):
    """``out[k, j] = K(b_k, a_j)`` in float64 for the block's rows ``k`` in ``[start,
    stop)``, from the products and squared norms as ``signed_columns32`` (the exact
    checks' values: ``core.jit._distance_kernel``, the float64 exp)."""
    n = dots.shape[1]
    acc = np.empty(n, np.float64)
    kbuf = np.empty(n, np.int64)
    for k in range(start, stop):
        sb = sq_b[k]
        row = dots[k]
        for j in range(n):
            acc[j] = max(sb + sq_a[j] - 2.0 * row[j], 0.0)
        _distance_kernel(acc, n, kind, sigma, sigma_star, tau, kbuf)
        o = out[k]
        for j in range(n):
            o[j] = acc[j]


#: The largest error of a kernel value that float32 products may add
#: (``float32_products_error``) for kernel values to be computed from them (a solver's
#: columns, single-precision scores): a tenth of the default tol.
FLOAT32_PRODUCTS_MAX_ERROR = 1e-4


def float32_products_error(code, sigma, n_features, max_sq_norm) -> float:
    """A bound on what float32 products ``fl32(a.b)`` add to the error of a gaussian
    kernel value (``code`` 0, ``core.jit.KERNEL_CODES``) of rows of ``n_features``
    features and squared norms at most ``max_sq_norm``: ``|fl32(a.b) - a.b| <= gamma_d |a|
    |b|`` in any order of summation (``gamma_d = d 2^-24 / (1 - d 2^-24)``), so the exp's
    argument ``|a - b|^2 / (2 sigma^2)`` moves by at most ``gamma_d max|x|^2 / sigma^2``
    and the value ``K`` by ``K (exp(that) - 1)``, returned (``K <= 1``).  inf for the
    other kernels (laplacian's square root makes a distance's error near 0 far larger;
    mg is not one exp of the distance)."""
    if int(code) != 0:
        return float("inf")
    unit = int(n_features) * 2.0**-24
    if unit >= 0.5:
        return float("inf")
    gamma = unit / (1.0 - unit)
    return float(np.expm1(gamma * float(max_sq_norm) / float(sigma) ** 2))


def usable_float32_products_error(code, sigma, n_features, max_sq_norm) -> float | None:
    """``float32_products_error`` where it is at most ``FLOAT32_PRODUCTS_MAX_ERROR`` (kernel
    values may then be computed from float32 products: a solver's columns, single-precision
    scores), else None (float64 products)."""
    bound = float32_products_error(code, sigma, n_features, max_sq_norm)
    return bound if bound <= FLOAT32_PRODUCTS_MAX_ERROR else None


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def weighted_values32(dots, sq_b, sq_a, kind, sigma, sigma_star, tau, coef, out, start, stop):
    """``out[j] += sum_k coef[k] K32(b_k, a_j)`` (float64 sums) for ``j`` in ``[start,
    stop)``, from ``dots[k, j] = b_k . a_j`` ((m, n)): each value ``_values32``'s (the
    solver columns' float32 arithmetic), weighted as it is made, so the block's values are
    never written out (a range of ``j``: the threads write apart)."""
    w = stop - start
    n_out = coef.shape[1]
    acc32 = np.empty(w, np.float32)
    kbuf32 = np.empty(w, np.int32)
    acc64 = np.empty(w, np.float64)
    kbuf64 = np.empty(w, np.int64)
    sums = np.zeros((n_out, w))
    for k in range(dots.shape[0]):
        _values32(
            dots[k],
            sq_b[k],
            sq_a,
            start,
            kind,
            sigma,
            sigma_star,
            tau,
            acc64,
            acc32,
            kbuf32,
            kbuf64,
        )
        for o in range(n_out):
            c = coef[k, o]
            s = sums[o]
            for j in range(w):
                s[j] += c * np.float64(acc32[j])
    for o in range(n_out):
        for j in range(w):
            out[start + j, o] += sums[o, j]


def gemm_kernel_matvec32(A32, sq_a, B32, sq_b, params, coef, products=None, n_threads=None):
    """``K(A, B) @ coef`` (n, outputs) with float32 values, n = ``sq_a``'s length: ``B A'``
    by float32 GEMMs of ``GEMM_ROWS`` rows of ``B`` (or ``products(B_rows)``, (rows, n),
    float32 or float64, for rows kept otherwise: ``A32`` is then unused), float32 values as
    ``signed_columns32`` computes a solver's columns, weighted by ``coef`` (m, outputs)
    and summed in float64 as they are made (``weighted_values32``).  From float32
    products each value is within ``float32_products_error`` (for the rows' largest
    squared norm) of the value from exact products, plus the float32 exp's error: the
    single-precision scores of wide rows (``features.kernels.Kernel.block_matvec``) and a
    solver's float32 checks (``solvers.block_columns.BlockRows.matvec``)."""
    n = sq_a.shape[0]
    out = np.zeros((n, coef.shape[1]))
    coef = np.ascontiguousarray(coef, dtype=np.float64)
    for lo in range(0, B32.shape[0], GEMM_ROWS):
        hi = min(lo + GEMM_ROWS, B32.shape[0])
        dots = B32[lo:hi] @ A32.T if products is None else products(B32[lo:hi])
        sb, c = sq_b[lo:hi], coef[lo:hi]
        # the values weighted as they are made (``weighted_values32``), the threads on
        # ranges of A's rows: no (rows, n) block of values written, cast and read again
        parallel_rows(
            lambda s, e, dots=dots, sb=sb, c=c: weighted_values32(
                dots, sb, sq_a, *params, c, out, s, e
            ),
            n,
            n_threads,
        )
    return out


# positions per segment of a block of solver columns: the segment's features (d x 256
# float32, 300 KB at d = 300) stay in L2 while every column of the block reads them
_FETCH_SEGMENT = 256


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def q_columns_pass(Xt, t32, positions, m, start, end, kind, sigma, cols, slots):
    """``cols[slots[k], p] = t_k t_p K(x_k, x_p)`` (float32) for the positions ``p`` in
    ``[start, end)`` of ``Xt`` (d, n) and the ``m`` columns ``positions[:m]``: the dual's cached
    columns for gaussian (``kind`` 0) or laplacian (1), several in one pass over the rows.

    Each segment of positions is read from memory once and then from cache by every column
    of the block, where the per-column kernel (``core.jit.q_segment``) reads all of ``Xt``
    once per column; each value is ``core.jit._kernel_row32``'s, the per-column kernel's
    own arithmetic, so the columns are equal to the bit."""
    d = Xt.shape[0]
    xb = np.empty((m, d), np.float32)
    for k in range(m):
        for f in range(d):
            xb[k, f] = Xt[f, positions[k]]
    acc = np.empty(_FETCH_SEGMENT, np.float32)
    kbuf = np.empty(_FETCH_SEGMENT, np.int32)
    for s in range(start, end, _FETCH_SEGMENT):
        e = min(s + _FETCH_SEGMENT, end)
        w = e - s
        for k in range(m):
            a = acc[:w]
            _kernel_row32(xb[k], Xt, s, e, kind, sigma, a, kbuf[:w])
            tk = t32[positions[k]]
            o = cols[slots[k]]
            for j in range(w):
                o[s + j] = tk * t32[s + j] * a[j]


def gemm_kernel_matvec(A64, sq_a, B64, sq_b, params, coef, products=None, n_threads=None):
    """``K(A, B) @ coef`` (n, outputs) in float64 for a kernel of the distance, n =
    ``sq_a``'s length: ``B A'`` by float64 GEMMs of ``GEMM_ROWS`` rows of ``B`` (or
    ``products(B_rows)``, (rows, n), for rows kept otherwise: ``A64`` is then unused), then
    ``distance_values64``'s float64 values from the squared norms ``sq_a``, ``sq_b``, then
    a GEMM with ``coef`` (m, outputs).  ``params``: ``(kind, sigma, sigma_star, tau)``.

    The distance ``|a|^2 + |b|^2 - 2 a.b`` is off by about ``d 2^-53 (|a|^2 + |b|^2)``,
    where the fused kernel's sum of squared differences is off by ``d 2^-53 |a - b|^2``:
    for an exact check's values, which are compared with ``tol``, both are exact."""
    out = np.zeros((sq_a.shape[0], coef.shape[1]))
    for lo in range(0, B64.shape[0], GEMM_ROWS):
        hi = min(lo + GEMM_ROWS, B64.shape[0])
        dots = B64[lo:hi] @ A64.T if products is None else products(B64[lo:hi])
        vals = np.empty(dots.shape)
        sb = sq_b[lo:hi]
        parallel_rows(
            lambda s, e, dots=dots, sb=sb, vals=vals: distance_values64(
                dots, sb, sq_a, *params, vals, s, e
            ),
            hi - lo,
            n_threads,
            min_rows=1,
        )
        out += vals.T @ coef[lo:hi]
    return out


def symmetric_kernel_matvec(S64, sq_s, params, coef, n_threads=None):
    """``K(S, S) @ coef`` (m, outputs) in float64, ``gemm_kernel_matvec``'s arithmetic over
    the upper block triangle only: each ``GEMM_ROWS`` rows of ``S`` against the rows from
    their own on, the block's values then used twice (their rows' sums, and mirrored, the
    later rows').  Half the products and values of ``gemm_kernel_matvec(S, S)`` where a
    solver's rows are checked against support rows that are among them."""
    m = S64.shape[0]
    out = np.zeros((m, coef.shape[1]))
    for lo in range(0, m, GEMM_ROWS):
        hi = min(lo + GEMM_ROWS, m)
        dots = S64[lo:hi] @ S64[lo:].T
        vals = np.empty(dots.shape)
        sb, sa = sq_s[lo:hi], sq_s[lo:]
        parallel_rows(
            lambda s, e, dots=dots, sb=sb, sa=sa, vals=vals: distance_values64(
                dots, sb, sa, *params, vals, s, e
            ),
            hi - lo,
            n_threads,
            min_rows=1,
        )
        # rows lo:hi against every row from lo (the diagonal block's both halves once) ...
        out[lo:hi] += vals @ coef[lo:]
        # ... and, mirrored, the rows after hi against lo:hi (the earlier rows' blocks did
        # the rows here against the rows before lo)
        out[hi:] += vals[:, hi - lo :].T @ coef[lo:hi]
    return out
