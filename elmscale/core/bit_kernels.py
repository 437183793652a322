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
    ``core.sparse_kernels.csr_q_segment``'s of the same rows: ``table`` is
    ``value_table``'s in float32 (``t_i t_p`` is +-1, so rounding the value first or the
    product gives the same float32; float32 arithmetic a column, not float64)."""
    ri = perm[i]
    wa = rows.words[ri]
    ca = rows.counts[ri]
    ti = t32[i]
    words = rows.words
    if words.shape[1] <= 2 and not poly:
        # at most 2 words (128 features: a9a, mushrooms), a distance's index: written out,
        # no loop over the words (with the float32 table: a9a's columns 1.1x faster, one thread)
        w0 = wa[0]
        w1 = wa[1] if words.shape[1] == 2 else np.uint64(0)  # (0 alone: a float)
        last = words.shape[1] - 1
        for p in range(start, end):
            r = perm[p]
            dot = _popcount(w0 & words[r, 0]) + _popcount(w1 & words[r, last])
            out[p] = ti * t32[p] * table[ca + rows.counts[r] - 2 * dot]
        return
    for p in range(start, end):
        idx = _table_index(wa, ca, words, rows.counts, perm[p], poly)
        out[p] = ti * t32[p] * table[idx]


#: Rows of ``a`` that ``bits_kernel_rows_matvec`` takes together against each row of ``b``:
#: one read of ``b``'s words serves them, and their adds go to separate buckets, so they do
#: not wait on each other (one row's adds would: a9a's distances fall in a few buckets).
_ROWS_TOGETHER = 8


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def bits_kernel_rows_matvec(a, b, table, poly, coef_t, out, start, stop):
    """``out[i, :] = sum_j K(a_i, b_j) coef_t[:, j]`` for the rows ``i`` in ``[start, stop)``
    of the packed rows ``a`` against every packed row of ``b``.

    A pair's value is ``table[idx]`` for a small integer ``idx``, so the sum is
    ``sum_idx table[idx] h[idx]`` with ``h[idx]`` the sum of the coefficients of the rows
    ``j`` at that index: a pair costs its popcounts and one add into ``h``, no value read
    and no dependent chain of products (a9a's scores 2.7x faster than summing
    ``K_ij coef_j`` in ``j``'s order, one thread).  Float64 sums, in an order fixed by
    ``b``'s rows alone: a row's result does not depend on the rows beside it or on the
    threads."""
    cb_max = 0
    for j in range(b.counts.shape[0]):
        cb_max = max(cb_max, b.counts[j])
    if a.words.shape[1] <= 2 and not poly and coef_t.shape[0] == 1:
        _two_word_distance_sums(a, b, table, coef_t[0], cb_max, out[:, 0], start, stop)
    else:
        _index_sums(a, b, table, poly, coef_t, cb_max, out, start, stop)


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _two_word_distance_sums(a, b, table, coef, cb_max, out, start, stop):
    """``bits_kernel_rows_matvec`` for rows of at most 2 words (128 features: a9a,
    mushrooms), a kernel of the distance and one output: its arithmetic, written out
    (1.5x the general loop's speed on a9a, one thread)."""
    R = _ROWS_TOGETHER
    size = table.shape[0]
    hist = np.zeros((size, R))
    w0 = np.zeros(R, np.uint64)
    w1 = np.zeros(R, np.uint64)
    ca = np.zeros(R, np.int64)
    two = a.words.shape[1] == 2
    for i0 in range(start, stop, R):
        r = min(R, stop - i0)
        w0[:] = 0  # (a short last block: rows of no ones, their sums not written)
        w1[:] = 0
        ca[:] = 0
        for s in range(r):
            w0[s] = a.words[i0 + s, 0]
            w1[s] = a.words[i0 + s, 1] if two else np.uint64(0)  # (0 alone: a float)
            ca[s] = a.counts[i0 + s]
        top = min(size, ca.max() + cb_max + 1)
        hist[:top] = 0.0
        for j in range(b.counts.shape[0]):
            x0 = b.words[j, 0]
            x1 = b.words[j, 1] if two else np.uint64(0)
            cb = b.counts[j]
            c = coef[j]
            for s in range(R):
                dot = _popcount(w0[s] & x0) + _popcount(w1[s] & x1)
                hist[ca[s] + cb - 2 * dot, s] += c
        for s in range(r):
            total = 0.0
            for v in range(top):
                total += table[v] * hist[v, s]
            out[i0 + s] = total


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _index_sums(a, b, table, poly, coef_t, cb_max, out, start, stop):
    """``bits_kernel_rows_matvec``, any words, kernel and outputs."""
    R = _ROWS_TOGETHER
    m = b.counts.shape[0]
    n_out = coef_t.shape[0]
    n_words = a.words.shape[1]
    size = table.shape[0]
    hist = np.zeros((size, R * n_out))  # (index, row of the block and output)
    wa = np.zeros((n_words, R), np.uint64)  # the block's words, row by row within a word
    ca = np.zeros(R, np.int64)
    idx = np.zeros(R, np.int64)
    # the index, branch-free: the product (polynomial) or |a| + |b| - 2 a.b
    with_norms = 0 if poly else 1
    per_dot = 1 if poly else -2
    for i0 in range(start, stop, R):
        r = min(R, stop - i0)
        wa[:] = 0  # (a short last block: rows of no ones, their sums not written)
        ca[:] = 0
        for s in range(r):
            for k in range(n_words):
                wa[k, s] = a.words[i0 + s, k]
            ca[s] = a.counts[i0 + s]
        ca_max = ca.max()
        top = min(size, (min(ca_max, cb_max) if poly else ca_max + cb_max) + 1)
        hist[:top] = 0.0
        for j in range(m):
            for s in range(R):
                idx[s] = 0
            for k in range(n_words):
                x = b.words[j, k]
                for s in range(R):
                    idx[s] += _popcount(wa[k, s] & x)
            cb = with_norms * b.counts[j]
            for s in range(R):
                row = s * n_out
                at = with_norms * ca[s] + cb + per_dot * idx[s]
                for o in range(n_out):
                    hist[at, row + o] += coef_t[o, j]
        for s in range(r):
            for o in range(n_out):
                total = 0.0
                for v in range(top):
                    total += table[v] * hist[v, s * n_out + o]
                out[i0 + s, o] = total
