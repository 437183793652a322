"""The kernel dual's column source (issue 52): rows of 0s and 1s get their columns from the
rows packed ("auto": ``core.bit_kernels.bits_pay``), other dense rows that are mostly zeros
from a CSR copy ("auto" below ``column_cache.CSR_SOURCE_MAX_DENSITY``), and the solve from
any source reaches the same optimum; the packed and CSR sources' columns, and the CSR
source's block fetches, are equal to the bit."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from _datasets import shared_data

from elmscale.data import Scaler, load, load_csv
from elmscale.features.kernels import Kernel
from elmscale.solvers.column_cache import (
    CSR_SOURCE_MAX_DENSITY,
    KernelSolverState,
    csr_source_pays,
)
from elmscale.solvers.kernel_columns import SOURCE_BITS, SOURCE_CSR, SOURCE_ROWS
from elmscale.solvers.kernel_dual import solve_kernel_dual

TOL = 1e-3


def _dense(X):
    return np.ascontiguousarray(X.toarray() if sp.issparse(X) else X, np.float32)


def _a9a(rows):
    data = load(shared_data("a9a", "a9a"))
    return _dense(data.X[:rows]), np.where(data.y[:rows] > 0, 1.0, -1.0)


def _mushrooms(rows):
    data = load(shared_data("mushrooms", "mushrooms"))
    return _dense(data.X[:rows]), np.where(data.y[:rows] == data.y.max(), 1.0, -1.0)


def _codrna(rows):
    data = load_csv(shared_data("cod-rna", "codrna.csv"))
    order = np.random.default_rng(0).permutation(data.X.shape[0])[:rows]
    return _dense(Scaler().fit_transform(data.X[order])), np.where(data.y[order] > 0, 1.0, -1.0)


def _objective(alpha, g):
    """``1/2 a'Qa - 1'a`` from the gradient ``Qa - 1``."""
    return 0.5 * float(alpha @ (g + 1.0)) - float(alpha.sum())


def _solve(X, t, sigma, C, **kw):
    info = {}
    alpha, _, converged, g = solve_kernel_dual(
        X, t, kernel=Kernel("gaussian", sigma=sigma), C=C, tol=TOL, info=info, **kw
    )
    assert converged
    return alpha, g, info


def _halved(load_rows):
    """The same rows with their ones at 0.5: the same zeros, not 0 / 1 values."""

    def load_halved(rows):
        X, t = load_rows(rows)
        return 0.5 * X, t

    return load_halved


@pytest.mark.needs_shared
@pytest.mark.parametrize(
    "name, load_rows, chosen",
    [
        ("a9a halved", _halved(_a9a), SOURCE_CSR),
        ("mushrooms halved", _halved(_mushrooms), SOURCE_ROWS),
        ("cod-rna", _codrna, SOURCE_ROWS),
    ],
)
def test_auto_takes_the_csr_source_below_the_measured_density(name, load_rows, chosen):
    X, t = load_rows(600)
    density = np.count_nonzero(X) / X.size
    # the sets lie on either side of the crossover: a9a 11 %, mushrooms 19 %, COD-RNA 100 %
    assert (density <= CSR_SOURCE_MAX_DENSITY) == (chosen == SOURCE_CSR)
    assert csr_source_pays(X) == (chosen == SOURCE_CSR)
    _, _, info = _solve(X, t, 4.0, 1.0)
    assert info["column_source"] == chosen
    _, _, forced = _solve(X, t, 4.0, 1.0, column_source="csr")
    assert forced["column_source"] == SOURCE_CSR
    _, _, kept = _solve(X, t, 4.0, 1.0, column_source="rows")
    assert kept["column_source"] == SOURCE_ROWS


@pytest.mark.needs_shared
@pytest.mark.parametrize("name, load_rows", [("a9a", _a9a), ("mushrooms", _mushrooms)])
def test_auto_packs_rows_of_zeros_and_ones(name, load_rows):
    X, t = load_rows(600)
    _, _, info = _solve(X, t, 4.0, 1.0)
    assert info["column_source"] == SOURCE_BITS
    _, _, sparse_info = _solve(sp.csr_matrix(X), t, 4.0, 1.0)
    assert sparse_info["column_source"] == SOURCE_BITS
    _, _, forced = _solve(X, t, 4.0, 1.0, column_source="csr")
    assert forced["column_source"] == SOURCE_CSR
    with pytest.raises(ValueError, match="every value is 0 or 1"):
        _solve(0.5 * X, t, 4.0, 1.0, column_source="bits")


@pytest.mark.needs_shared
@pytest.mark.parametrize(
    "kind, sigma", [("gaussian", 4.0), ("laplacian", 2.0), ("polynomial", 1.0)]
)
def test_the_packed_source_solves_as_the_csr_source_to_the_bit(kind, sigma):
    # the packed columns are the CSR source's to the bit (the products and distances of
    # 0s and 1s are exact in float64, and the values come from the same arithmetic): the
    # same steps and solution; a cache of a few columns makes columns be computed again
    X, t = _a9a(1_200)
    kernel = Kernel(kind, sigma=sigma, degree=2)
    kw = dict(kernel=kernel, C=1.0, tol=TOL, cache_size=1.0, fetch_block=1)
    info_bits, info_csr = {}, {}
    a_bits, n_bits, ok_bits, g_bits = solve_kernel_dual(
        X, t, column_source="bits", info=info_bits, **kw
    )
    a_csr, n_csr, ok_csr, g_csr = solve_kernel_dual(X, t, column_source="csr", info=info_csr, **kw)
    assert ok_bits and ok_csr
    assert info_bits["column_source"] == SOURCE_BITS and info_csr["column_source"] == SOURCE_CSR
    assert n_bits == n_csr
    np.testing.assert_array_equal(a_bits, a_csr)


# 64 and 128: features in the words' top bits (a word above 2^53 is no float64)
@pytest.mark.parametrize("n_features, n_words", [(64, 1), (128, 2), (150, 3)])
@pytest.mark.parametrize("n_out", [1, 3])
def test_packed_kernel_products_equal_the_sparse_ones(n_features, n_words, n_out):
    from elmscale.core.bit_kernels import bit_rows, bits_pay, is_binary

    rng = np.random.default_rng(3)
    # 301 rows: blocks of 8 rows and a short last one (the packed sums take 8 rows at once)
    A = (rng.random((301, n_features)) < 0.1).astype(np.float32)
    B = (rng.random((80, n_features)) < 0.1).astype(np.float32)
    coef = rng.standard_normal((80, n_out)) if n_out > 1 else rng.standard_normal(80)
    assert is_binary(A) and bits_pay(A) and not bits_pay(0.5 * A)
    # packing dense and CSR rows gives the same words
    packed, packed_csr = bit_rows(A), bit_rows(sp.csr_matrix(A))
    assert packed.words.shape == (301, n_words)
    np.testing.assert_array_equal(packed.words, packed_csr.words)
    np.testing.assert_array_equal(packed.counts, A.sum(axis=1))
    for kind in ("gaussian", "laplacian", "polynomial", "mg"):
        kernel = Kernel(kind, sigma=1.5, degree=3, sigma_star=4.0, tau=0.3)
        bits = kernel.block_matvec(A, B, coef)  # packed: both sides 0 / 1
        sparse = kernel.block_matvec(sp.csr_matrix(A), sp.csr_matrix(B), coef)
        values = kernel.block(A.astype(np.float64), B.astype(np.float64))
        exact = values @ coef
        # the same float64 values (exact products of 0s and 1s), summed in another order:
        # apart by the sums' rounding, at most (terms) eps sum |K_ij coef_j| each
        rounding = 2 * B.shape[0] * np.finfo(np.float64).eps * (np.abs(values) @ np.abs(coef))
        assert np.all(np.abs(bits - sparse) <= rounding), kind
        assert np.all(np.abs(bits - exact) <= rounding + 1e-12 * np.abs(exact)), kind
        assert bits.shape == exact.shape
        # a row's sum does not depend on the rows beside it (the threads' blocks)
        np.testing.assert_array_equal(kernel.block_matvec(A[5:6], B, coef), bits[5:6])
    # the dual's single-precision final check leaves packed rows to the exact product
    # (cheaper than its bounded float32 pass), and bounds the same rows scaled
    gaussian = Kernel("gaussian", sigma=1.5)
    coef1 = coef if n_out == 1 else coef[:, 0]
    assert gaussian.block_matvec_bounded(A, B, coef1) is None
    assert gaussian.block_matvec_bounded(0.5 * A, B, coef1) is not None


def test_block_fetched_sparse_columns_are_the_per_column_ones():
    from elmscale.core.sparse_kernels import csr_q_block, csr_q_segment, csr_rows, csr_scatter_block

    rng = np.random.default_rng(5)
    X = sp.random(900, 400, density=0.03, random_state=6, dtype=np.float32, format="csr")
    rows = csr_rows(X, by_column=False)
    perm = rng.permutation(900).astype(np.int64)
    t32 = np.where(rng.random(900) < 0.5, -1.0, 1.0).astype(np.float32)
    positions = np.array([7, 0, 899, 450, 12, 301], np.int64)
    slots = np.array([5, 2, 0, 1, 4, 3], np.int64)
    for kind, degree in ((0, 0), (1, 0), (2, 3), (3, 0)):
        block = np.zeros((6, 900), np.float32)
        block_rows = np.zeros((400, 6))
        csr_scatter_block(rows, perm, positions, 6, block_rows, None)
        # two ranges, as the solver's thread and its helper split a block
        for start, end in ((0, 333), (333, 900)):
            args = (kind, 0.8, degree, 2.0, 0.25, block_rows, block, slots)
            csr_q_block(rows, perm, t32, positions, 6, start, end, *args)
        csr_scatter_block(rows, perm, positions, 6, block_rows, 0.0)
        assert not block_rows.any()  # cleared for the next block
        one = np.zeros((6, 900), np.float32)
        for k in range(6):
            csr_q_segment(
                rows, perm, t32, positions[k], 0, 900, kind, 0.8, degree, 2.0, 0.25, one[slots[k]]
            )
        np.testing.assert_array_equal(block, one)


def test_sparse_block_fetches_reach_the_plain_duals_solution():
    X = sp.random(1_500, 300, density=0.05, random_state=2, dtype=np.float32, format="csr")
    X.data = np.abs(X.data) + 0.25  # not 0 / 1: the CSR source
    row_sums = np.asarray(X.sum(axis=1)).ravel()
    t = np.where(row_sums > np.median(row_sums), 1.0, -1.0)
    kw = dict(cache_size=2.0)
    a_one, g_one, one = _solve(X, t, 1.0, 1.0, fetch_block=1, **kw)
    a_blk, g_blk, blk = _solve(X, t, 1.0, 1.0, fetch_block=8, **kw)
    assert one["column_source"] == SOURCE_CSR == blk["column_source"]
    assert one["block_fetches"] == 0 and blk["block_fetches"] > 0
    assert one["steps"] == blk["steps"]
    np.testing.assert_array_equal(a_one, a_blk)


def test_the_density_rule_at_both_sides_of_the_crossover():
    rng = np.random.default_rng(0)
    # values of 2: the density rule, not the packed rows of 0s and 1s
    below = 2 * (rng.random((400, 50)) < 0.5 * CSR_SOURCE_MAX_DENSITY).astype(np.float32)
    above = 2 * (rng.random((400, 50)) < 2.0 * CSR_SOURCE_MAX_DENSITY).astype(np.float32)
    assert csr_source_pays(below) and not csr_source_pays(above)
    kernel = Kernel("gaussian", sigma=2.0)
    assert KernelSolverState(below, np.ones(400), kernel, 10.0).csr.n_features == 50
    assert KernelSolverState(above, np.ones(400), kernel, 10.0).csr.n_features == 0
    # the choice forced either way; sparse rows stay sparse
    assert (
        KernelSolverState(below, np.ones(400), kernel, 10.0, column_source="rows").csr.n_features
        == 0
    )
    assert (
        KernelSolverState(above, np.ones(400), kernel, 10.0, column_source="csr").csr.n_features
        == 50
    )
    assert (
        KernelSolverState(
            sp.csr_matrix(above), np.ones(400), kernel, 10.0, column_source="rows"
        ).csr.n_features
        == 50
    )


def test_a_column_source_that_is_not_one_is_refused_by_name():
    with pytest.raises(ValueError, match="column_source must be one of"):
        solve_kernel_dual(
            np.eye(3),
            np.array([1.0, -1.0, 1.0]),
            kernel=Kernel("gaussian"),
            C=1.0,
            column_source="dense",
        )


@pytest.mark.needs_shared
def test_the_csr_source_reaches_the_dense_sources_optimum_on_a9a():
    X, t = _a9a(2_000)
    X_test, _ = _a9a(2_600)
    X_test = X_test[2_000:]
    kernel = Kernel("gaussian", sigma=4.0)
    a_rows, g_rows, _ = _solve(X, t, 4.0, 1.0, column_source="rows")
    a_csr, g_csr, info = _solve(X, t, 4.0, 1.0, column_source="csr")
    assert info["column_source"] == SOURCE_CSR
    # both within tol of the KKT conditions: by convexity each objective is within
    # tol |a_rows - a_csr|_1 of the other's
    gap = TOL * np.abs(a_rows - a_csr).sum()
    assert abs(_objective(a_rows, g_rows) - _objective(a_csr, g_csr)) <= gap + 1e-12
    # the same predictions where the decision is not within the two solutions' distance of 0
    K = kernel.block(X_test, X)
    f_rows, f_csr = K @ (a_rows * t), K @ (a_csr * t)
    near = np.abs(f_rows) <= np.abs(f_rows - f_csr).max()
    assert np.array_equal(np.sign(f_rows)[~near], np.sign(f_csr)[~near])
    assert near.mean() < 0.01


def _wide(rows):
    from elmscale.data import generate_classification

    data = generate_classification(rows, 300, 2, random_state=0)
    return np.asarray(data.X, np.float32), np.where(np.asarray(data.y) == 1, 1.0, -1.0)


def test_block_fetched_columns_are_the_per_column_ones():
    from elmscale.core.block_kernels import q_columns_pass
    from elmscale.core.jit import q_columns
    from elmscale.features.kernels import float32_error_bound

    X, t = _wide(700)
    t32 = t.astype(np.float32)
    Xt = np.ascontiguousarray(X.T)
    for kind in ("gaussian", "laplacian"):
        kernel = Kernel(kind, sigma=10.0)
        code, sigma = kernel._params()[:2]
        positions = np.array([5, 0, 699, 312, 77], np.int64)
        slots = np.array([3, 0, 4, 1, 2], np.int64)
        block = np.zeros((5, 700), np.float32)
        q_columns_pass(Xt, t32, positions, 5, 0, 700, code, sigma, block, slots)
        one = np.zeros((5, 700), np.float32)
        q_columns(Xt, t32, 700, X[positions], t32[positions], slots, 0, 5, *kernel._params(), one)
        # the per-column kernel's arithmetic: equal to the bit, so within its bound too
        assert np.array_equal(block, one)
        exact = kernel.block(X[positions], X) * (t[positions][:, None] * t[None, :])
        bound = float32_error_bound(kernel, X, X[positions], np.eye(5)).T
        assert np.all(np.abs(block[slots] - exact) <= bound)


@pytest.mark.parametrize("data", ["wide", pytest.param("a9a", marks=pytest.mark.needs_shared)])
def test_block_fetches_reach_the_plain_duals_optimum(data):
    X, t = _wide(1_500) if data == "wide" else _a9a(1_500)
    sigma = 10.0 if data == "wide" else 4.0
    # a small cache, so that columns are evicted and fetched again in blocks
    kw = dict(column_source="rows", cache_size=2.0)
    a_one, g_one, one = _solve(X, t, sigma, 1.0, fetch_block=1, **kw)
    a_blk, g_blk, blk = _solve(X, t, sigma, 1.0, fetch_block=8, **kw)
    assert one["block_fetches"] == 0 and blk["block_fetches"] > 0
    # the columns are the per-column ones to the bit: the same steps and solution
    assert one["steps"] == blk["steps"]
    np.testing.assert_array_equal(a_one, a_blk)
    gap = TOL * np.abs(a_one - a_blk).sum()
    assert abs(_objective(a_one, g_one) - _objective(a_blk, g_blk)) <= gap
    # by default the wide dense rows (300 and 123 features) take block fetches
    default = _solve(X, t, sigma, 1.0, column_source="rows", cache_size=2.0)[2]
    assert default["block_fetches"] > 0


@pytest.mark.needs_shared
def test_narrow_rows_take_no_block_fetches():
    X, t = _codrna(1_500)
    _, _, info = _solve(X, t, 0.5, 1.0, cache_size=1.0)
    assert info["block_fetches"] == 0
    with pytest.raises(ValueError, match="fetch_block must be a positive"):
        _solve(X, t, 0.5, 1.0, fetch_block=0)
