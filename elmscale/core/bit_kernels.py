"""Kernels of rows whose every value is 0 or 1 (indicator features: a9a, w8a, mushrooms and
most one-hot encoded data), packed 64 features to a machine word.

For such rows ``x.z`` is the number of features both hold, ``popcount(x & z)`` over a
row's words, and ``|x - z|^2 = |x| + |z| - 2 x.z`` an integer: the kernel's value depends
on one small integer, so it is read from a table (``value_table``) made by the float64
arithmetic the sparse rows' kernels use (``core.sparse_kernels._values_from_dots``) on
that integer.  A value is then equal to the bit to the sparse path's, where every product
and sum of 0s and 1s is exact in float64; a column costs a few word operations a row
(a9a: 123 features, 2 words, where the sparse path adds 14 products in a dependent chain
and the dense one reads 123 floats).

Where the words outnumber what the sparse or dense paths read (``BITS_MAX_WORDS``: wide
rows, tens of thousands of features), those paths stay.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import scipy.sparse as sp
from numba import njit, types
from numba.extending import intrinsic

from elmscale.core.sparse_kernels import _values_from_dots

__all__ = [
    "BITS_MAX_WORDS",
    "EMPTY_BITS",
    "BitRows",
    "bit_rows",
    "bits_kernel_rows_matvec",
    "bits_pay",
    "bits_q_segment",
    "is_binary",
    "value_table",
]

#: Words a row (64 features each) up to which the packed rows are the kernels' source:
#: 1,024 features.  A row's product reads every word, where the sparse path reads its
#: nonzeros and the dense path its features, each several times the cost of a word's
#: and + popcount.
BITS_MAX_WORDS = 16

# Rows packed: ``words`` (n, w) uint64, feature f in word f // 64, bit f % 64; ``counts``
# (n,) int64, each row's ones (its squared norm).
BitRows = namedtuple("BitRows", ["words", "counts"])
#: a ``BitRows`` of no rows: the source arrays of a Q whose rows are not packed
EMPTY_BITS = BitRows(np.zeros((0, 1), np.uint64), np.zeros(0, np.int64))


@intrinsic
def _popcount(typingctx, word):
    """The number of ones in a uint64 (LLVM's ``ctpop``: one ``popcnt`` on x86-64-v2)."""
    sig = types.int64(types.uint64)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen


def is_binary(X) -> bool:
    """Whether every value of ``X`` (dense or scipy sparse) is 0 or 1."""
    values = X.data if sp.issparse(X) else np.asarray(X)
    return bool(values.size == 0 or np.all((values == 0) | (values == 1)))


def _n_words(n_features: int) -> int:
    return max(1, (int(n_features) + 63) // 64)


def bits_pay(X) -> bool:
    """Whether ``X``'s rows are taken packed: 0 / 1 values, at most ``BITS_MAX_WORDS``
    words a row, and at least one row."""
    return X.shape[0] > 0 and _n_words(X.shape[1]) <= BITS_MAX_WORDS and is_binary(X)


@njit(cache=True, nogil=True, error_model="numpy")
def _pack_csr(indptr, indices, data, words, counts):
    for i in range(words.shape[0]):
        c = 0
        for k in range(indptr[i], indptr[i + 1]):
            if data[k] != 0:
                f = indices[k]
                words[i, f >> 6] |= np.uint64(1) << np.uint64(f & 63)
                c += 1
        counts[i] = c


@njit(cache=True, nogil=True, error_model="numpy")
def _pack_dense(X, words, counts):
    for i in range(X.shape[0]):
        c = 0
        for f in range(X.shape[1]):
            if X[i, f] != 0:
                words[i, f >> 6] |= np.uint64(1) << np.uint64(f & 63)
                c += 1
        counts[i] = c


def bit_rows(X) -> BitRows:
    """``X``'s rows packed (``BitRows``); ``X`` dense or scipy sparse, every value 0 or 1
    (see ``is_binary``: not checked here)."""
    n = X.shape[0]
    words = np.zeros((n, _n_words(X.shape[1])), np.uint64)
    counts = np.empty(n, np.int64)
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        _pack_csr(X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data, words, counts)
    else:
        _pack_dense(np.ascontiguousarray(X), words, counts)
    return BitRows(words, counts)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def value_table(max_count, kind, sigma, degree, sigma_star, tau):
    """The kernel's values for rows of at most ``max_count`` ones: indexed by the product
    ``x.z`` (polynomial, ``kind`` 2: ``max_count + 1`` entries) or by the squared distance
    (the others: ``2 max_count + 1``), by ``_values_from_dots``'s arithmetic on those
    integers (the sparse path's, which computes them exactly)."""
    if kind == 2:
        size = max_count + 1
        acc = np.arange(size).astype(np.float64)  # the products
        zeros = np.zeros(size)
        kbuf = np.empty(size, np.int64)
        _values_from_dots(acc, size, 0.0, zeros, kind, sigma, degree, sigma_star, tau, kbuf)
        return acc
    size = 2 * max_count + 1
    acc = np.zeros(size)  # products 0 and squared norms j: the distance j
    sq = np.arange(size).astype(np.float64)
    kbuf = np.empty(size, np.int64)
    _values_from_dots(acc, size, 0.0, sq, kind, sigma, degree, sigma_star, tau, kbuf)
    return acc


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _table_index(wa, ca, words, counts, r, poly):
    """The table's index for row ``r`` of ``words`` against the packed row ``wa`` (``ca``
    ones): their product, or their squared distance."""
    dot = 0
    for k in range(wa.shape[0]):
        dot += _popcount(wa[k] & words[r, k])
    return dot if poly else ca + counts[r] - 2 * dot


@njit(cache=True, nogil=True, error_model="numpy")
def bits_q_segment(rows, perm, t32, i, start, end, table, poly, out):
    """``out[p] = t_i t_p K(x_perm[i], x_perm[p])`` (float32) for the solver's positions
    ``p`` in ``[start, end)``: the kernel solver's column from packed rows (``rows``,
    ``BitRows``, in row order, read through ``perm``), equal to the bit to
    ``core.sparse_kernels.csr_q_segment``'s of the same rows."""
    ri = perm[i]
    wa = rows.words[ri]
    ca = rows.counts[ri]
    ti = t32[i]
    for p in range(start, end):
        idx = _table_index(wa, ca, rows.words, rows.counts, perm[p], poly)
        out[p] = ti * t32[p] * table[idx]


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def bits_kernel_rows_matvec(a, b, table, poly, coef_t, out, start, stop):
    """``out[i, :] = sum_j K(a_i, b_j) coef_t[:, j]`` for the rows ``i`` in ``[start, stop)``
    of the packed rows ``a`` against every packed row of ``b`` (float64 values from
    ``table``, float64 sums in ``j``'s order)."""
    m = b.counts.shape[0]
    n_out = coef_t.shape[0]
    vals = np.empty(m)
    for i in range(start, stop):
        wa = a.words[i]
        ca = a.counts[i]
        for j in range(m):
            vals[j] = table[_table_index(wa, ca, b.words, b.counts, j, poly)]
        for o in range(n_out):
            total = 0.0
            for j in range(m):
                total += vals[j] * coef_t[o, j]
            out[i, o] = total
