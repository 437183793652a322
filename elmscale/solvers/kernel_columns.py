"""Q's columns as the kernel solver sees them: where they come from (``QMatrix``: the rows
through ``core.jit.q_segment``, or a kept Gram matrix), their dtype, and a step's scratch."""

from __future__ import annotations

from collections import namedtuple

import numpy as np
from numba import njit

from elmscale.core.bit_kernels import EMPTY_BITS, bits_q_segment
from elmscale.core.block_kernels import q_columns_pass
from elmscale.core.jit import SEGMENT_BLOCK, q_segment
from elmscale.core.sparse_kernels import EMPTY_CSR, csr_q_block, csr_q_segment
from elmscale.solvers.kernel_passes import BLOCK


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
# branch in ``column_segment``; the cache and the steps stay as they are.
SOURCE_ROWS = 0  # K computed from the rows: ``Xt`` (d x n, float32), kind / sigma / degree
SOURCE_GRAM = 1  # read from ``gram``, a kept float64 K(X, X) (n x n, rows in X's order)
# K computed from sparse rows: ``csr`` (a ``core.sparse_kernels.CsrRows``, in row order, read
# through ``perm``; ``Xt`` is then (0, n): nothing dense to permute), kind / sigma / degree
SOURCE_CSR = 2
# K computed from rows of 0s and 1s packed: ``bits`` (a ``core.bit_kernels.BitRows``, in row
# order, read through ``perm``; ``Xt`` (0, n)) and ``table``, the kernel's float32 values by the
# pair's squared distance (its product for the polynomial kernel)
SOURCE_BITS = 3
# A block fetch's scratch (``kernel_dual._fetch_block``): the block's solver positions and
# cache slots, the violations that chose them, and for sparse rows the block's rows
# scattered dense (d x block, float64, zero between blocks: ``csr_scatter_block``); both
# threads of a split block read it.  ``fetch_scratch(0, 0)``: none.
FetchScratch = namedtuple("FetchScratch", ["positions", "slots", "viols", "rows"])


def fetch_scratch(block: int, n_features: int) -> FetchScratch:
    """A ``FetchScratch`` for blocks of up to ``block`` columns (``n_features``: the sparse
    rows' features, 0 for dense rows, whose block is read from ``Xt``)."""
    return FetchScratch(
        np.empty(block, np.int64),
        np.empty(block, np.int64),
        np.empty(block),
        np.zeros((n_features, block)),
    )


NO_FETCH = fetch_scratch(0, 0)
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
        "csr",
        "fetch",
        "bits",
        "table",
    ],
    # a Q of dense rows or a kept K reads no sparse rows; a Q without block fetches; a Q
    # of rows not packed
    defaults=(EMPTY_CSR, NO_FETCH, EMPTY_BITS, np.empty(0)),
)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def gram_segment(gram, perm, t32, i, start, end, out):
    """``out[p] = t_i t_p K[row i, row p]`` for positions ``[start, end)`` from a
    precomputed Gram matrix (``perm`` maps the solver's positions to rows): a cached column
    (float32), or the dense solver's (float64, ``dense_dual``)."""
    row = gram[perm[i]]
    ti = t32[i]
    for p in range(start, end):
        out[p] = ti * t32[p] * row[perm[p]]


# A step's scratch (``step_scratch``; the solver's thread and the helper each have
# their own): ``xi`` (d floats) for a column's row, ``q_segment``'s block buffers, and
# the passes' ``score`` and ``viol`` blocks
Scratch = namedtuple("Scratch", ["xi", "acc32", "kbuf32", "acc64", "kbuf64", "score", "viol"])


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def step_scratch(d):
    """A step's buffers (``Scratch``) for rows of ``d`` features."""
    return Scratch(
        np.empty(d, np.float32),
        np.empty(SEGMENT_BLOCK, np.float32),
        np.empty(SEGMENT_BLOCK, np.int32),
        np.empty(SEGMENT_BLOCK),
        np.empty(SEGMENT_BLOCK, np.int64),
        np.empty(BLOCK),
        np.empty(BLOCK),
    )


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def column_segment(q, i, start, end, scratch, out):
    """Q's column i over positions ``[start, end)`` (``q`` a ``QMatrix``), from its
    source: read from the kept Gram matrix, computed from packed rows of 0s and 1s
    (``bits_q_segment``), from sparse rows (``csr_q_segment``), or from the dense rows
    (``q_segment``)."""
    if q.source == SOURCE_GRAM:
        gram_segment(q.gram, q.perm, q.t32, i, start, end, out)
    elif q.source == SOURCE_BITS:
        bits_q_segment(q.bits, q.perm, q.t32, i, start, end, q.table, q.kind == 2, out)
    elif q.source == SOURCE_CSR:
        csr_q_segment(
            q.csr,
            q.perm,
            q.t32,
            i,
            start,
            end,
            q.kind,
            q.sigma,
            q.degree,
            q.sigma_star,
            q.tau,
            out,
        )
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


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def block_segment(q, m, start, end, cols):
    """The ``m`` columns of a block fetch (``q.fetch``'s positions, into its slots) over
    positions ``[start, end)``: from sparse rows (``csr_q_block``, the block's rows
    scattered in ``q.fetch.rows``) or from the dense rows (``q_columns_pass``); each
    column equal to the bit to ``column_segment``'s."""
    f = q.fetch
    if q.source == SOURCE_CSR:
        csr_q_block(
            q.csr,
            q.perm,
            q.t32,
            f.positions,
            m,
            start,
            end,
            q.kind,
            q.sigma,
            q.degree,
            q.sigma_star,
            q.tau,
            f.rows,
            cols,
            f.slots,
        )
    else:
        q_columns_pass(q.Xt, q.t32, f.positions, m, start, end, q.kind, q.sigma, cols, f.slots)
