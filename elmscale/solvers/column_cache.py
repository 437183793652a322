"""The kernel solver's LRU cache of Q's columns (LIBSVM's Cache: a budget in MB, O(1) lookup,
float32 columns) and the state a C path keeps between solves on the same rows."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
import scipy.sparse as sp
from numba import njit

from elmscale.core.bit_kernels import EMPTY_BITS, bit_rows, bits_pay, is_binary
from elmscale.core.memory import empty_huge
from elmscale.core.sparse_kernels import EMPTY_CSR, csr_rows, is_sparse
from elmscale.features.kernels import Kernel
from elmscale.solvers.dual_common import TAU
from elmscale.solvers.kernel_columns import column_dtype
from elmscale.solvers.solver_helper import column_fill

# The LRU cache of Q's columns (float32 or float64 by ``column_dtype``): ``cols`` (slots x
# n, in the solver's order) with ``col_len[s]`` entries of slot s valid; ``slot_of[p]``
# position p's slot (-1: none) and ``owner[s]`` slot s's position; ``prev`` / ``nxt`` a
# circular doubly linked list of the slots, the head the most recently used.
ColumnCache = namedtuple("ColumnCache", ["cols", "col_len", "slot_of", "owner", "prev", "nxt"])


# Dense rows below this share of nonzeros get their kernel columns from a CSR copy
# (``SOURCE_CSR``: the products over each row's nonzeros, summed in float64) instead of the
# dense pass over every feature (``core.jit.q_segment``, float32).  Measured
# (``benchmarks/dual_column_source.py``, 8,000 rows, one thread, gaussian, C = 1, under
# load, dense / CSR time of the whole solve): binary rows of 123 features at 5 % 2.69x,
# a9a (11.3 %) 1.11x, 20 % 1.13x, mushrooms (18.8 %, 112 features) 0.86x, 35 % 0.80x,
# 50 % 0.13x, COD-RNA (100 %, 8 features) 0.23x; all of a9a (32,561 rows, two threads,
# the exact checks dense either way) 2.1x and 2.0x (77.6 s / 36.9 s, 117.6 s / 58.6 s,
# heavily loaded).
CSR_SOURCE_MAX_DENSITY = 0.15
# Rows of 0s and 1s up to ``core.bit_kernels.BITS_MAX_WORDS`` words get their columns from
# the rows packed (``SOURCE_BITS``: a popcount a word, the value from a table), equal to the
# bit to the CSR source's.  Measured (a9a, one thread, CPU time, under load): 4.6 ns an
# entry against the CSR source's 27.1.
COLUMN_SOURCES = ("auto", "rows", "csr", "bits")


def csr_source_pays(X) -> bool:
    """Whether dense rows ``X`` are sparse enough that Q's columns cost less from their CSR
    copy (``CSR_SOURCE_MAX_DENSITY``)."""
    X = np.asarray(X)
    return X.size > 0 and np.count_nonzero(X) <= CSR_SOURCE_MAX_DENSITY * X.size


def takes_bits(X, column_source="auto") -> bool:
    """Whether Q's columns come from ``X``'s rows packed (``SOURCE_BITS``): where
    ``column_source`` is "bits" (``X`` must be 0s and 1s), or "auto" and ``bits_pay``."""
    if column_source not in COLUMN_SOURCES:
        raise ValueError(f"column_source must be one of {COLUMN_SOURCES}; got {column_source!r}")
    if column_source == "bits":
        if not is_binary(X):
            raise ValueError("column_source='bits' needs rows whose every value is 0 or 1")
        return True
    return column_source == "auto" and bits_pay(X)


def column_rows(X, column_source="auto"):
    """The rows Q's columns are computed from (other than packed ones: ``takes_bits``):
    ``X`` itself, or dense ``X`` as float32 CSR where ``column_source`` is "csr", or "auto"
    and ``csr_source_pays``; "rows" keeps dense rows dense (sparse rows stay sparse
    whatever it says)."""
    if column_source not in COLUMN_SOURCES:
        raise ValueError(f"column_source must be one of {COLUMN_SOURCES}; got {column_source!r}")
    if is_sparse(X) or column_source == "rows":
        return X
    if column_source == "csr" or csr_source_pays(X):
        return sp.csr_matrix(np.asarray(X, dtype=np.float32))
    return X


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
    (``column_dtype``): then float64.  ``column_source`` (``column_rows``): where dense
    rows' columns come from, "auto" the CSR copy below ``CSR_SOURCE_MAX_DENSITY``.
    """

    def __init__(self, X, t, kernel: Kernel, cache_size, tol=1e-3, column_source="auto"):
        # rows of 0s and 1s packed (SOURCE_BITS), read through perm; Xt is then (0, n)
        self.bits = bit_rows(X) if takes_bits(X, column_source) else EMPTY_BITS
        packed = self.bits.counts.shape[0] > 0
        X = X if packed else column_rows(X, column_source)
        # sparse rows stay CSR (read through perm by Q's SOURCE_CSR); Xt is then (0, n)
        self.csr = csr_rows(X) if is_sparse(X) and not packed else EMPTY_CSR
        # their inverted index (a CSC copy, where it pays) is charged to the cache's budget
        index_bytes = self.csr.colptr.nbytes + self.csr.col_rows.nbytes + self.csr.col_data.nbytes
        cache_size = max(0.0, cache_size - index_bytes / 2**20)
        X32 = np.empty((X.shape[0], 0), np.float32) if is_sparse(X) or packed else X
        X32 = np.ascontiguousarray(X32, dtype=np.float32)
        n = X32.shape[0]
        self.key = kernel_key(n, kernel)
        self.perm = np.arange(n)  # perm[p]: the row at the solver's position p
        self.Xt = np.ascontiguousarray(X32.T)
        self.tp = np.ascontiguousarray(t, dtype=np.float32)  # +-1, exact in float32
        if kernel.kind == "polynomial":
            X64 = X32.astype(np.float64)
            if packed:
                sq = self.bits.counts.astype(np.float64)
            else:
                sq = self.csr.sq_norms if is_sparse(X) else np.einsum("ij,ij->i", X64, X64)
            diag = (1.0 + sq) ** int(kernel.degree)
        else:
            diag = np.ones(n)
        self.dinv = 1.0 / np.maximum(diag, TAU)
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


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def fetch_column(i, length, head, q, sol, cache, scratch, state, helper):
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
        column_fill(i, col_len[s], length, s, q, sol, cols, scratch, helper)
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
