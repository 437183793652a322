"""The kernel dual's column source (issue 52): dense rows that are mostly zeros get their
columns from a CSR copy ("auto" below ``column_cache.CSR_SOURCE_MAX_DENSITY``), and the
solve from either source reaches the same optimum."""

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
from elmscale.solvers.kernel_columns import SOURCE_CSR, SOURCE_ROWS
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


@pytest.mark.needs_shared
@pytest.mark.parametrize(
    "name, load_rows, chosen",
    [
        ("a9a", _a9a, SOURCE_CSR),
        ("mushrooms", _mushrooms, SOURCE_ROWS),
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


def test_the_density_rule_at_both_sides_of_the_crossover():
    rng = np.random.default_rng(0)
    below = (rng.random((400, 50)) < 0.5 * CSR_SOURCE_MAX_DENSITY).astype(np.float32)
    above = (rng.random((400, 50)) < 2.0 * CSR_SOURCE_MAX_DENSITY).astype(np.float32)
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
        q_columns_pass(Xt, t32, positions, 5, 700, code, sigma, block, slots)
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
