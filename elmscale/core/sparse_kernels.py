"""Kernel values of sparse rows (``scipy.sparse`` CSR), without densifying them.

A kernel of the distance needs ``|x - z|^2``; from sparse rows it is ``|x|^2 + |z|^2 - 2 x.z``,
the squared norms computed once per row and ``x.z`` as a sparse dot product: row ``x`` is
scattered into a dense d-vector once (``_scatter``), and every row ``z`` it meets reads that
vector at its own nonzeros only (``_csr_dot``), so a value costs ``nnz(z)`` and nothing is
ever ``n x d``.  The polynomial kernel reads ``x.z`` itself.  Products and sums are float64
from the float32 inputs (exact products), clipped at zero where rounding leaves a tiny
negative distance; the value then goes through the dense path's own float64 kernel
(``core.jit._distance_kernel``), so a sparse row's kernel values equal the dense row's to
float64 rounding of the sums.

The arrays a kernel reads (``CsrRows``): ``indptr`` (n + 1, int64), ``indices`` (int32,
sorted within a row), ``data`` (float32) and ``sq_norms`` (float64), with the width
``n_features``; :func:`csr_rows` makes them from any scipy sparse matrix.  The kernels run
on a range of rows, serial, side by side on threads (``core.threads.parallel_rows``), as
``core.jit``'s kernel blocks do.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import scipy.sparse as sp
from numba import njit

from elmscale.core.jit import _distance_kernel

#: sparse formats the kernels take (others are refused with the formats named)
SPARSE_FORMATS = ("csr", "csc")

# The rows of a CSR matrix as the kernels read them (see the module's docstring), and, when
# the inverted index pays (``inverted_pays``), the same nonzeros by feature: ``colptr``
# (d + 1, int64; empty without), ``col_rows`` (int32) and ``col_data`` (float32), a CSC copy
CsrRows = namedtuple(
    "CsrRows",
    ["indptr", "indices", "data", "sq_norms", "n_features", "colptr", "col_rows", "col_data"],
)

# The inverted index (a row's dot products with every row at once, through the rows holding
# each of its features: work sum_k c_k over its features k, c_k the rows holding k) is taken
# when it costs at most this share of the direct dot products (work nnz per row met): word
# counts are Zipf-like, so the common words' long lists dominate, and the direct products
# read a d-vector at random where the index adds into an n-vector (an rcv1-like set, 3,000 x
# 47,236, 0.16 % dense: the index's work 0.13 of the direct one's)
INVERTED_SHARE = 0.5


def is_sparse(X) -> bool:
    """Whether ``X`` is a scipy sparse matrix or array."""
    return sp.issparse(X)


def as_csr32(X, name: str = "X") -> sp.csr_matrix:
    """``X`` (scipy sparse, CSR or CSC) as a canonical float32 CSR matrix (sorted indices, no
    duplicates, int32 or int64 indices), copied only where the format, dtype or order differ.
    Another sparse format, or a value that is not finite, is a ValueError naming ``name``."""
    if X.format not in SPARSE_FORMATS:
        raise ValueError(
            f"{name} is a sparse matrix in the {X.format!r} format; expected one of "
            f"{SPARSE_FORMATS} (convert with {name}.tocsr())"
        )
    X = sp.csr_matrix(X, dtype=np.float32)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()  # sorts the indices too
    if not np.isfinite(X.data).all():
        raise ValueError(f"{name} holds NaN or infinite values; expected finite numbers")
    return X


def float32_rows(X):
    """``X`` as the kernels and layers read rows: a canonical float32 CSR matrix when it is
    scipy sparse (:func:`as_csr32`, never densified), else a C-contiguous float32 array."""
    if is_sparse(X):
        return as_csr32(X)
    return np.ascontiguousarray(X, dtype=np.float32)


def inverted_pays(X, Y=None) -> bool:
    """Whether every row of ``X`` meeting every row of ``Y`` (default ``X``; CSR) costs less
    through ``Y``'s inverted index than by direct dot products (``INVERTED_SHARE``):
    ``sum_k cX_k cY_k`` against ``n_X nnz(Y)``, ``c_k`` the rows holding feature k."""
    Y = X if Y is None else Y
    if X.nnz == 0 or Y.nnz == 0:
        return False
    cx = np.bincount(X.indices, minlength=X.shape[1]).astype(np.float64)
    cy = cx if Y is X else np.bincount(Y.indices, minlength=Y.shape[1]).astype(np.float64)
    return float(cx @ cy) <= INVERTED_SHARE * X.shape[0] * float(Y.nnz)


def csr_rows(X, by_column: bool | str = "auto") -> CsrRows:
    """A sparse matrix's rows as the kernels read them (``CsrRows``; see :func:`as_csr32`);
    ``by_column``: with the inverted index (a CSC copy) or not, "auto": where it pays for
    every row meeting every row (:func:`inverted_pays`)."""
    X = as_csr32(X)
    data = X.data
    sq_norms = np.empty(X.shape[0])
    indptr = X.indptr.astype(np.int64)
    csr_sq_norms(indptr, data, sq_norms)
    # column numbers fit int32 (one compiled type for every matrix); row offsets may not
    indices = X.indices.astype(np.int32, copy=False)
    if by_column == "auto":
        by_column = inverted_pays(X)
    if by_column:
        C = X.tocsc()  # sorted: each feature's rows in increasing order
        colptr = C.indptr.astype(np.int64)
        col_rows, col_data = C.indices.astype(np.int32, copy=False), C.data
    else:
        colptr, col_rows, col_data = np.empty(0, np.int64), np.empty(0, np.int32), data[:0]
    return CsrRows(indptr, indices, data, sq_norms, int(X.shape[1]), colptr, col_rows, col_data)


#: a ``CsrRows`` of no rows: the source arrays of a Q whose rows are dense
EMPTY_CSR = CsrRows(
    np.zeros(1, np.int64),
    np.empty(0, np.int32),
    np.empty(0, np.float32),
    np.empty(0, np.float64),
    0,
    np.empty(0, np.int64),
    np.empty(0, np.int32),
    np.empty(0, np.float32),
)


@njit(cache=True, nogil=True, error_model="numpy")
def csr_sq_norms(indptr, data, out):
    """``out[i] = |row i|^2`` in float64 from float32 values."""
    for i in range(out.shape[0]):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            v = np.float64(data[k])
            s += v * v
        out[i] = s


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _scatter(indptr, indices, data, i, dense):
    """Row ``i``'s values into ``dense`` (zero elsewhere, as the caller keeps it)."""
    for k in range(indptr[i], indptr[i + 1]):
        dense[indices[k]] = data[k]


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _clear(indptr, indices, i, dense):
    """``dense`` back to zeros after row ``i``'s scatter: its nonzeros only."""
    for k in range(indptr[i], indptr[i + 1]):
        dense[indices[k]] = 0.0


@njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath={"contract"})
def _csr_dot(dense, indptr, indices, data, r):
    """``x.z`` in float64: ``dense`` holds ``x``, ``z`` is row ``r``."""
    s = 0.0
    for k in range(indptr[r], indptr[r + 1]):
        s += np.float64(data[k]) * np.float64(dense[indices[k]])
    return s


@njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath={"contract"})
def _inverted_dots(x, i, rows, acc):
    """``acc[r] = x_i . z_r`` for every row r of ``rows`` (``CsrRows`` with its inverted
    index), in float64: through the rows holding each of ``x_i``'s features."""
    acc[:] = 0.0
    for k in range(x.indptr[i], x.indptr[i + 1]):
        f = x.indices[k]
        v = np.float64(x.data[k])
        for q in range(rows.colptr[f], rows.colptr[f + 1]):
            acc[rows.col_rows[q]] += v * np.float64(rows.col_data[q])


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _inverted_work(x, i, rows):
    """The inverted index's work for row ``i`` of ``x``: the entries of its features' lists."""
    total = 0
    for k in range(x.indptr[i], x.indptr[i + 1]):
        f = x.indices[k]
        total += rows.colptr[f + 1] - rows.colptr[f]
    return total


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _values_from_dots(acc, m, sq_x, sq_rows, kind, sigma, degree, sigma_star, tau, kbuf):
    """In place ``acc[j] = K`` from ``acc[j] = x.z_j`` (its first ``m`` entries): the
    polynomial kernel from the products, the others from ``|x|^2 + |z_j|^2 - 2 x.z_j``
    (``sq_rows[j] = |z_j|^2``), clipped at 0."""
    if kind == 2:
        for j in range(m):
            base = 1.0 + acc[j]
            v = 1.0
            for _ in range(degree):
                v *= base
            acc[j] = v
        return
    for j in range(m):
        acc[j] = max(sq_x + sq_rows[j] - 2.0 * acc[j], 0.0)
    _distance_kernel(acc[:m], m, kind, sigma, sigma_star, tau, kbuf[:m])


_COLUMNS = 1024  # columns at a time: the float64 scratch stays in L1


@njit(cache=True, nogil=True, inline="always", error_model="numpy", fastmath={"contract"})
def _block_values(dense, sq_x, b, s, e, kind, sigma, degree, sigma_star, tau, acc, kbuf):
    """``acc[j - s] = K(x, b_j)`` for b's rows ``j`` in ``[s, e)``, ``x`` scattered in
    ``dense`` with squared norm ``sq_x``: the direct path's block of kernel values."""
    for j in range(s, e):
        acc[j - s] = _csr_dot(dense, b.indptr, b.indices, b.data, j)
    _values_from_dots(acc, e - s, sq_x, b.sq_norms[s:e], kind, sigma, degree, sigma_star, tau, kbuf)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def sparse_kernel_rows(a, b, kind, sigma, degree, sigma_star, tau, out, start, stop):
    """``out[i, j] = K(a_i, b_j)`` for the rows ``i`` in ``[start, stop)`` of ``a`` and every
    row of ``b`` (both ``CsrRows``): the sparse twin of ``core.jit.kernel_rows``; ``out``
    float32 or float64, the values computed in float64."""
    m = b.sq_norms.shape[0]
    dense = np.zeros(a.n_features, np.float32)
    acc = np.empty(min(m, _COLUMNS))
    kbuf = np.empty(acc.shape[0], np.int64)
    for i in range(start, stop):
        _scatter(a.indptr, a.indices, a.data, i, dense)
        for s in range(0, m, _COLUMNS):
            e = min(s + _COLUMNS, m)
            _block_values(
                dense, a.sq_norms[i], b, s, e, kind, sigma, degree, sigma_star, tau, acc, kbuf
            )
            for j in range(s, e):
                out[i, j] = acc[j - s]
        _clear(a.indptr, a.indices, i, dense)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def sparse_kernel_rows_matvec(a, b, kind, sigma, degree, sigma_star, tau, coef_t, out, start, stop):
    """``out[i, :] = sum_j K(a_i, b_j) coef_t[:, j]`` for the rows ``i`` in ``[start, stop)``
    without storing the block (``core.jit.kernel_rows_matvec``'s sparse twin; float64 values
    and sums)."""
    m = b.sq_norms.shape[0]
    n_out = coef_t.shape[0]
    if b.colptr.shape[0] > 0:  # b's inverted index: each row's products with all of b at once
        acc = np.empty(m)
        kbuf = np.empty(m, np.int64)
        for i in range(start, stop):
            _inverted_dots(a, i, b, acc)
            _values_from_dots(
                acc, m, a.sq_norms[i], b.sq_norms, kind, sigma, degree, sigma_star, tau, kbuf
            )
            for o in range(n_out):
                total = 0.0
                for j in range(m):
                    total += acc[j] * coef_t[o, j]
                out[i, o] = total
        return
    dense = np.zeros(a.n_features, np.float32)
    acc = np.empty(min(m, _COLUMNS))
    kbuf = np.empty(acc.shape[0], np.int64)
    for i in range(start, stop):
        _scatter(a.indptr, a.indices, a.data, i, dense)
        for o in range(n_out):
            out[i, o] = 0.0
        for s in range(0, m, _COLUMNS):
            e = min(s + _COLUMNS, m)
            _block_values(
                dense, a.sq_norms[i], b, s, e, kind, sigma, degree, sigma_star, tau, acc, kbuf
            )
            for o in range(n_out):
                total = 0.0
                for j in range(s, e):
                    total += acc[j - s] * coef_t[o, j]
                out[i, o] += total
        _clear(a.indptr, a.indices, i, dense)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def csr_q_segment(rows, perm, t32, i, start, end, kind, sigma, degree, sigma_star, tau, out):
    """``out[p] = t_i t_p K(x_perm[i], x_perm[p])`` (float32) for the solver's positions ``p``
    in ``[start, end)``: the kernel solver's column from sparse rows (``rows``, ``CsrRows``,
    in row order; ``perm`` maps the solver's positions to rows, as shrinking permutes them,
    and ``t32`` is in the solver's order).  Row ``perm[i]`` is scattered once per call."""
    ri = perm[i]
    sq_x = rows.sq_norms[ri]
    ti = t32[i]
    n = rows.sq_norms.shape[0]
    # the inverted index computes the products with every row; it pays where its lists are
    # shorter than the direct products' reads of the positions asked for
    if (
        rows.colptr.shape[0] > 0
        and _inverted_work(rows, ri, rows) * n <= (end - start) * (rows.indptr[n])
    ):
        dots = np.empty(n)
        _inverted_dots(rows, ri, rows, dots)
        m = end - start
        acc = np.empty(max(m, 1))
        sq = np.empty(acc.shape[0])
        kbuf = np.empty(acc.shape[0], np.int64)
        for p in range(start, end):
            r = perm[p]
            acc[p - start] = dots[r]
            sq[p - start] = rows.sq_norms[r]
        _values_from_dots(acc, m, sq_x, sq, kind, sigma, degree, sigma_star, tau, kbuf)
        for p in range(start, end):
            out[p] = ti * t32[p] * acc[p - start]
        return
    dense = np.zeros(rows.n_features, np.float32)
    _scatter(rows.indptr, rows.indices, rows.data, ri, dense)
    width = min(end - start, _COLUMNS)
    acc = np.empty(max(width, 1))
    sq = np.empty(acc.shape[0])
    kbuf = np.empty(acc.shape[0], np.int64)
    for s in range(start, end, _COLUMNS):
        e = min(s + _COLUMNS, end)
        for p in range(s, e):
            r = perm[p]
            acc[p - s] = _csr_dot(dense, rows.indptr, rows.indices, rows.data, r)
            sq[p - s] = rows.sq_norms[r]
        _values_from_dots(acc, e - s, sq_x, sq, kind, sigma, degree, sigma_star, tau, kbuf)
        for p in range(s, e):
            out[p] = ti * t32[p] * acc[p - s]


@njit(cache=True, nogil=True, error_model="numpy")
def csr_scatter_block(rows, perm, positions, m, block_rows, value):
    """``block_rows[f, k]`` = row ``perm[positions[k]]``'s feature f for ``k < m`` (``value``
    None) or back to 0 (``value`` 0.0): the block of rows ``csr_q_block`` reads, (d, m)
    float64, kept zero between blocks so that only their nonzeros are written."""
    for k in range(m):
        r = perm[positions[k]]
        for jj in range(rows.indptr[r], rows.indptr[r + 1]):
            block_rows[rows.indices[jj], k] = rows.data[jj] if value is None else value


_BLOCK_SEGMENT = 256  # positions per segment: (m, 256) float64 products stay in L1 / L2


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def csr_q_block(
    rows,
    perm,
    t32,
    positions,
    m,
    start,
    end,
    kind,
    sigma,
    degree,
    sigma_star,
    tau,
    block_rows,
    cols,
    slots,
):
    """``cols[slots[k], p] = t_i t_p K(x_perm[i], x_perm[p])``, ``i = positions[k]``, for the
    ``m`` columns of a block and the solver's positions ``p`` in ``[start, end)``: the kernel
    solver's columns from sparse rows (``rows``, ``CsrRows``) as ``csr_q_segment``'s direct
    path computes them, several at once.  ``block_rows`` (d, m) holds the block's rows
    (``csr_scatter_block``).

    The direct path's product of one column is a chain of dependent float64 adds over each
    row's nonzeros (their latency, not the arithmetic, bounds it: a9a's 14 nonzeros a row,
    26 ns an entry); here each row's nonzeros are read once for the ``m`` columns, whose
    ``m`` sums run side by side.  Each sum adds the same products in the same order as
    ``_csr_dot`` and the values come from ``_values_from_dots`` as there, so a column is
    ``csr_q_segment``'s to the bit."""
    indptr, indices, data, sq_norms = rows.indptr, rows.indices, rows.data, rows.sq_norms
    dots = np.empty((_BLOCK_SEGMENT, m))  # a position's m sums side by side
    vals = np.empty(_BLOCK_SEGMENT)
    sq = np.empty(_BLOCK_SEGMENT)
    kbuf = np.empty(_BLOCK_SEGMENT, np.int64)
    for s in range(start, end, _BLOCK_SEGMENT):
        e = min(s + _BLOCK_SEGMENT, end)
        for p in range(s, e):
            r = perm[p]
            acc = dots[p - s]
            for k in range(m):
                acc[k] = 0.0
            for jj in range(indptr[r], indptr[r + 1]):
                v = np.float64(data[jj])
                b = block_rows[indices[jj]]
                for k in range(m):
                    acc[k] += v * b[k]
            sq[p - s] = sq_norms[r]
        w = e - s
        for k in range(m):
            i = positions[k]
            for j in range(w):
                vals[j] = dots[j, k]
            _values_from_dots(
                vals, w, sq_norms[perm[i]], sq, kind, sigma, degree, sigma_star, tau, kbuf
            )
            ti = t32[i]
            o = cols[slots[k]]
            for p in range(s, e):
                o[p] = ti * t32[p] * vals[p - s]
