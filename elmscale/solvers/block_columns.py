"""Kernel columns in blocks: Q's columns of a set of rows against every active row as one
BLAS call (issue 52 item 2), for the working-set solvers.

``core.jit.q_segment_of`` computes a column alone, a pass over every row's features per
column: memory-bound, and at 123 features (a9a) 20x the cost of the column's exp.  Here a
block of ``m`` columns is one float64 GEMM of the block's rows against the rows (``B A'``),
then per entry the squared distance ``|b|^2 + |a|^2 - 2 b.a`` and the kernel's value
(``core.block_kernels``).  The product is float64, not float32: a float32 GEMM's distance
is off by about ``d 2^-24 (|a|^2 + |b|^2)``, absolute, which near-duplicate rows (the
distance near 0, the value near 1) carry into the value at 1e-6 and more, past the
per-column kernel's bound (``features.kernels.float32_error_bound``, relative to the
value); a float64 product's error is about ``d 2^-53 (|a|^2 + |b|^2)``, below that bound's
``EXP32_RELATIVE`` term for any ``|a|^2 + |b|^2`` under 1e7.  The exp's argument is then
rounded to float32 and exponentiated by the per-column kernel's float32 exp, so a block's
value is within ``EXP32_RELATIVE K + 2^-24 z K + FLOAT32_EXP_FLOOR`` of the exact one
(``z`` the exp's argument), inside ``float32_error_bound``'s ``(1.25 d + 6) 2^-24 z``
(tested: ``tests/test_thunder_working_set.py``).

For the solver's columns (not an exact check's values) a gaussian kernel's products are
float32 GEMMs where that is safe, twice as fast as float64 ones: ``|fl32(a.b) - a.b| <=
gamma_d |a| |b|`` (``gamma_d = d 2^-24 / (1 - d 2^-24)``, any order of summation), so the
exp's argument ``|a - b|^2 / (2 sigma^2)`` moves by at most ``gamma_d max|x|^2 / sigma^2``
and the value by ``exp`` of that minus 1 (``core.block_kernels.float32_products_error``);
the rows' norms and sigma decide, and float64 products are kept where that passes
``FLOAT32_PRODUCTS_MAX_ERROR`` (unscaled features).  The working set's certificate adds it
to its column error.

Measured (``benchmarks/working_set_block_columns.py``, the crossover's table in
``benchmarks/results/working_set_block_columns.txt``): the block is slower than the per-
column kernel at few features (its GEMM and its second pass over the block cost more than
a vectorised 8-feature distance) and faster from ``BLOCK_MIN_FEATURES`` on.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from elmscale.core.block_kernels import (
    gemm_kernel_matvec,
    gemm_kernel_matvec32,
    signed_columns32,
    symmetric_kernel_matvec,
    usable_float32_products_error,
)
from elmscale.core.threads import parallel_rows
from elmscale.features.kernels import Kernel

__all__ = ["BLOCK_KINDS", "BLOCK_MIN_FEATURES", "BlockRows", "blocks_pay"]

#: The kernels computed from distances, which a block's products give (not polynomial).
BLOCK_KINDS = ("gaussian", "laplacian", "mg")
#: Features from which a block of columns is faster than the per-column kernel (measured:
#: ``benchmarks/results/working_set_block_columns.txt``).
BLOCK_MIN_FEATURES = 48
#: Columns per GEMM: the float64 products of 128 columns over 30,000 rows are 30 MB.
COLUMNS_PER_PRODUCT = 128


def blocks_pay(kernel: Kernel, n_features: int) -> bool:
    """Whether kernel columns in blocks are faster than one by one: a kernel of the
    distance and at least ``BLOCK_MIN_FEATURES`` features."""
    return kernel.kind in BLOCK_KINDS and int(n_features) >= BLOCK_MIN_FEATURES


def _rows64(X):
    """``X`` as float64 rows: a C-contiguous array, or CSR for a scipy sparse matrix."""
    if sp.issparse(X):
        return sp.csr_matrix(X, dtype=np.float64)
    return np.ascontiguousarray(X, dtype=np.float64)


def _squared_norms(X64) -> np.ndarray:
    if sp.issparse(X64):
        return np.asarray(X64.multiply(X64).sum(axis=1), dtype=np.float64).ravel()
    return np.einsum("ij,ij->i", X64, X64)


class BlockRows:
    """The rows kernel columns run over, kept for products: float64 rows (dense, or CSR)
    and their squared norms, labels ``t`` (float32 +-1; ones when None) for Q's signs.
    ``permute`` follows a solver's reordering of its rows (the active ones first).

    Dense rows of a gaussian kernel whose ``float32_products_error`` is at most
    ``FLOAT32_PRODUCTS_MAX_ERROR`` also keep float32 rows, from which ``columns`` and the
    float32 ``matvec`` take their products; ``products_error`` is then that bound (0 with
    float64 products), which a solver adds to its columns' error."""

    def __init__(self, kernel: Kernel, X, t=None):
        if kernel.kind not in BLOCK_KINDS:
            raise ValueError(
                f"kernel columns in blocks need a kernel of the distance {BLOCK_KINDS}; "
                f"got {kernel.kind!r}"
            )
        self.kernel = kernel
        self.X = _rows64(X)
        self.sq = _squared_norms(self.X)
        n = self.X.shape[0]
        self.t = np.ones(n, np.float32) if t is None else np.asarray(t, np.float32).copy()
        code, sigma, _, sigma_star, tau = kernel._params()
        self._params = (code, sigma, sigma_star, tau)
        self.X32 = None
        self.products_error = 0.0
        if not sp.issparse(self.X) and n:
            bound = usable_float32_products_error(
                code, sigma, self.X.shape[1], float(self.sq.max())
            )
            if bound is not None:
                self.X32 = np.ascontiguousarray(X, dtype=np.float32)
                self.products_error = bound

    @property
    def n_rows(self) -> int:
        return int(self.X.shape[0])

    def rows32(self, at) -> np.ndarray:
        """The rows at positions ``at`` as float32, (len(at), d) C-contiguous (the rows are
        float32 values: exact)."""
        if self.X32 is not None:
            return self.X32[at]
        rows = self.X[at]
        rows = rows.toarray() if sp.issparse(rows) else rows
        return np.ascontiguousarray(rows, dtype=np.float32)

    def permute(self, order) -> None:
        self.X = self.X[order]
        if not sp.issparse(self.X):
            self.X = np.ascontiguousarray(self.X)
        self.sq = self.sq[order]
        self.t = self.t[order]
        if self.X32 is not None:
            self.X32 = np.ascontiguousarray(self.X32[order])

    def _products(self, B64, n) -> np.ndarray:
        """``B A[:n]'`` (m, n) float64: one GEMM (a sparse-dense product for CSR rows)."""
        if sp.issparse(self.X):
            return np.ascontiguousarray((self.X[:n] @ B64.T).T)
        return B64 @ self.X[:n].T

    def _column_products(self, B64, n) -> np.ndarray:
        """The products the columns take: float32 ones where the rows keep ``X32``."""
        if self.X32 is None:
            return self._products(B64, n)
        return B64.astype(np.float32) @ self.X32[:n].T

    def columns(self, XB, tB, n, out, slots=None, n_threads=None) -> None:
        """``out[slots[k], :n] = tB[k] t_j K(XB[k], x_j)`` (float32) over the first ``n``
        rows: Q's columns of the rows ``XB`` (dense (m, d)), ``COLUMNS_PER_PRODUCT`` to a
        GEMM.  ``slots`` None: ``out[k]``."""
        B64 = np.ascontiguousarray(XB, dtype=np.float64)
        m = B64.shape[0]
        tB = np.ascontiguousarray(tB, dtype=np.float32)
        slots = np.arange(m, dtype=np.int64) if slots is None else np.asarray(slots, np.int64)
        sq_b = np.einsum("ij,ij->i", B64, B64)
        sq_a, t_a = self.sq[:n], self.t[:n]
        for lo in range(0, m, COLUMNS_PER_PRODUCT):
            hi = min(lo + COLUMNS_PER_PRODUCT, m)
            dots = self._column_products(B64[lo:hi], n)
            sb, tb, sl = sq_b[lo:hi], tB[lo:hi], slots[lo:hi]
            parallel_rows(
                lambda s, e, dots=dots, sb=sb, tb=tb, sl=sl: signed_columns32(
                    dots, sb, sq_a, tb, t_a, *self._params, out, sl, s, e
                ),
                hi - lo,
                n_threads,
                min_rows=1,
            )

    def matvec_own(self, positions, coef, n_threads=None) -> np.ndarray:
        """``K(A, A[positions]) @ coef`` (unsigned) in float64 over every row, as ``matvec``'s
        precise product, where the support rows are some of the rows themselves: their own
        part ``K(S, S) coef`` by symmetry (``symmetric_kernel_matvec``: half its products),
        the other rows' against them by ``gemm_kernel_matvec``.  CSR rows: ``matvec``."""
        positions = np.asarray(positions, dtype=np.int64)
        coef = np.asarray(coef, dtype=np.float64)
        if sp.issparse(self.X):
            return self.matvec(self.X[positions].toarray(), coef, n_threads=n_threads)
        n = self.n_rows
        S64, sq_s = self.X[positions], self.sq[positions]
        out = np.empty(n)
        out[positions] = symmetric_kernel_matvec(
            S64, sq_s, self._params, coef[:, None], n_threads=n_threads
        )[:, 0]
        rest = np.ones(n, bool)
        rest[positions] = False
        rest = np.flatnonzero(rest)
        if rest.size:
            out[rest] = gemm_kernel_matvec(
                self.X[rest],
                self.sq[rest],
                S64,
                sq_s,
                self._params,
                coef[:, None],
                n_threads=n_threads,
            )[:, 0]
        return out

    def matvec(self, XB, coef, n=None, precise=True, n_threads=None) -> np.ndarray:
        """``K(A[:n], XB) @ coef`` (unsigned), the sums in float64; the values in float64
        (``precise``: an exact check's) or float32 (the columns' own)."""
        n = self.n_rows if n is None else int(n)
        B64 = np.ascontiguousarray(XB, dtype=np.float64)
        coef = np.asarray(coef, dtype=np.float64)
        sq_b = np.einsum("ij,ij->i", B64, B64)
        if precise:  # the exact check's float64 values: core.block_kernels' product
            kernel_matvec, products = gemm_kernel_matvec, self._products
        else:  # the columns' float32 values (from their products), summed in float64
            kernel_matvec, products = gemm_kernel_matvec32, self._column_products
        return kernel_matvec(
            None,
            self.sq[:n],
            B64,
            sq_b,
            self._params,
            coef[:, None],
            products=lambda B: products(B, n),
            n_threads=n_threads,
        )[:, 0]
