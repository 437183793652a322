"""The one-process working set in the Thunder style (``solvers.thunder``) and kernel columns
in blocks (``solvers.block_columns``), issue 52 items 2 and 3."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from _datasets import shared_data
from sklearn.exceptions import ConvergenceWarning

from elmscale import SparseELMClassifier
from elmscale.core.block_kernels import FLOAT32_PRODUCTS_MAX_ERROR, float32_products_error
from elmscale.core.jit import q_columns
from elmscale.data import Scaler, load, load_csv
from elmscale.features.kernels import Kernel, float32_error_bound
from elmscale.solvers.block_columns import BLOCK_MIN_FEATURES, BlockRows, blocks_pay
from elmscale.solvers.thunder import THUNDER_MIN_ROWS, _OneBlock, solve_thunder, thunder_wins
from elmscale.solvers.working_set import RowBlock, solve_working_set

TOL = 1e-3


def _entry_bounds(kernel, X, XB):
    """``float32_error_bound`` of each entry K(XB[k], X[j]), (m, n): the bound of a
    product with a unit coefficient vector per column."""
    return float32_error_bound(kernel, X, XB, np.eye(XB.shape[0])).T


@pytest.mark.parametrize("kind", ["gaussian", "laplacian"])
@pytest.mark.parametrize("d", [8, 123])
def test_block_columns_are_the_per_column_ones_within_the_float32_bound(kind, d):
    rng = np.random.default_rng(d)
    n, m = 1_500, 48
    X = rng.uniform(-1.0, 1.0, (n, d)).astype(np.float32)
    t = np.where(rng.random(n) < 0.5, 1.0, -1.0).astype(np.float32)
    kernel = Kernel(kind, sigma=float(np.sqrt(d / 8)))
    XB, tB = np.ascontiguousarray(X[:m]), np.ascontiguousarray(t[:m])
    block = np.empty((m, n), np.float32)
    rows = BlockRows(kernel, X, t)
    # gaussian rows of these norms take float32 products, which add their own bound
    assert (rows.X32 is not None) == (kind == "gaussian")
    assert rows.products_error == (
        float32_products_error(
            0, kernel.sigma, d, float(np.max(np.sum(X.astype(np.float64) ** 2, 1)))
        )
        if kind == "gaussian"
        else 0.0
    )
    rows.columns(XB, tB, n, block)
    one = np.empty((m, n), np.float32)
    q_columns(np.ascontiguousarray(X.T), t, n, XB, tB, np.arange(m), 0, m, *kernel._params(), one)
    signs = tB[:, None] * t[None, :]
    exact = kernel.block(XB, X) * signs
    bound = _entry_bounds(kernel, X, XB)
    assert np.all(np.abs(block - exact) <= bound + rows.products_error)
    assert np.all(np.abs(one - exact) <= bound)
    # each within its bound of the exact value: the two within the sum of each other
    assert np.all(np.abs(block - one) <= 2.0 * bound + rows.products_error)
    # rows given as CSR (sparse products in float64, not densified) give the block's values
    sparse = np.empty((m, n), np.float32)
    BlockRows(kernel, sp.csr_matrix(X), t).columns(XB, tB, n, sparse)
    assert np.all(np.abs(sparse - exact) <= bound)


def test_float32_products_hold_their_bound_on_near_duplicates_and_leave_large_norms():
    """Near-duplicate rows (the distance near 0, where a float32 product's error is largest
    against the value) stay within ``products_error``; rows of large norms, whose float32
    products would pass ``FLOAT32_PRODUCTS_MAX_ERROR``, keep float64 products."""
    rng = np.random.default_rng(11)
    d = 300
    base = rng.uniform(0.0, 1.0, (200, d))
    X = np.concatenate([base, base + rng.normal(0.0, 1e-4, base.shape)]).astype(np.float32)
    kernel = Kernel("gaussian", sigma=10.0)
    rows = BlockRows(kernel, X)
    assert rows.X32 is not None and 0.0 < rows.products_error <= FLOAT32_PRODUCTS_MAX_ERROR
    out = np.empty((200, X.shape[0]), np.float32)
    rows.columns(X[:200], np.ones(200, np.float32), X.shape[0], out)
    exact = kernel.block(X[:200], X)
    bound = _entry_bounds(kernel, X, X[:200])
    assert np.all(np.abs(out - exact) <= bound + rows.products_error)
    unscaled = BlockRows(kernel, X * np.float32(50.0))
    assert unscaled.X32 is None and unscaled.products_error == 0.0


def test_block_products_are_float64_kernel_sums():
    """The exact check's products from blocks: float64 values, summed in float64."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-1.0, 1.0, (700, 60)).astype(np.float32)
    kernel = Kernel("gaussian", sigma=2.0)
    coef = rng.normal(size=130)
    rows = BlockRows(kernel, X)
    reference = kernel.block_matvec(X, X[:130], coef)
    np.testing.assert_allclose(rows.matvec(X[:130], coef), reference, rtol=0, atol=1e-11)
    single = rows.matvec(X[:130], coef, precise=False)
    bound = float32_error_bound(kernel, X, X[:130], coef)
    assert np.all(np.abs(single - reference) <= bound)
    # support rows among the rows themselves (scattered, 3 blocks of GEMM_ROWS and a part):
    # the product by symmetry is the same float64 product
    own = rng.permutation(700)[:300]
    own_coef = rng.normal(size=300)
    by_symmetry = rows.matvec_own(own, own_coef)
    direct = kernel.block_matvec(X, X[own], own_coef)
    np.testing.assert_allclose(by_symmetry, direct, rtol=0, atol=1e-11)


def test_block_rows_refuse_the_polynomial_kernel():
    with pytest.raises(ValueError, match="kernel of the distance"):
        BlockRows(Kernel("polynomial", degree=2), np.zeros((3, 2)))


def _codrna(rows):
    data = load_csv(shared_data("cod-rna", "codrna.csv"))
    order = np.random.default_rng(0).permutation(data.X.shape[0])[:rows]
    X = Scaler().fit_transform(data.X[order])
    return np.ascontiguousarray(X, np.float32), data.y[order]


def _a9a(rows):
    data = load(shared_data("a9a", "a9a"))
    X = data.X[:rows]
    X = X.toarray() if sp.issparse(X) else np.asarray(X)
    return np.ascontiguousarray(X, np.float32), data.y[:rows]


@pytest.mark.needs_shared
@pytest.mark.parametrize(
    "name, sigma, C, blocks",
    [
        ("cod-rna", 0.5, 1.0, False),
        ("cod-rna", 0.5, 100.0, True),
        ("a9a", 4.0, 1.0, True),
        ("a9a", 4.0, 10.0, True),
    ],
)
def test_thunder_reaches_the_dual_optimum_on_real_data(name, sigma, C, blocks):
    X, y = _codrna(2_500) if name == "cod-rna" else _a9a(2_000)
    dual = SparseELMClassifier(sigma=sigma, C=C, solver="dual", tol=TOL).fit(X, y)
    y_idx = np.unique(y, return_inverse=True)[1]
    kernel = Kernel("gaussian", sigma=sigma)
    result = solve_thunder(X, y_idx, 2, kernel, C=C, tol=TOL, q=128, block_columns=blocks)
    assert result.converged.all() and np.all(result.kkt <= TOL)
    # both optima within tol's KKT violation: their objectives within tol relatively
    rel = np.abs(result.objective - dual.objective_) / np.abs(dual.objective_)
    assert np.all(rel <= TOL), rel
    # its alpha is the working set's, every variable within [0, C]
    assert np.all((result.seen.alpha >= 0.0) & (result.seen.alpha <= C))


def test_auto_takes_the_working_set_past_the_measured_crossover():
    gaussian = Kernel("gaussian", sigma=1.0)
    wide, narrow = BLOCK_MIN_FEATURES, BLOCK_MIN_FEATURES - 1
    assert blocks_pay(gaussian, wide) and not blocks_pay(gaussian, narrow)
    # the thresholds' sides (a9a-like 123 features; COD-RNA-like 8 at large C)
    rows = THUNDER_MIN_ROWS
    assert thunder_wins(gaussian, 123, 1.0, rows, min_features=wide)
    assert not thunder_wins(gaussian, narrow, 1.0, rows, min_features=wide)
    assert not thunder_wins(gaussian, 123, 1.0, rows - 1, min_features=wide)
    assert thunder_wins(gaussian, 8, 1000.0, rows, min_C=100.0)
    assert not thunder_wins(gaussian, 8, 10.0, rows, min_C=100.0)
    poly = Kernel("polynomial", degree=2)
    assert not thunder_wins(poly, 300, 1e3, 10 * rows, min_features=wide, min_C=1.0)
    # laplacian measured (float64 block products) as gaussian; mg: columns in blocks, but a
    # crossover not measured: the dual
    assert thunder_wins(Kernel("laplacian", sigma=1.0), 64, 1.0, 20_000)
    mg = Kernel("mg", sigma=1.0, sigma_star=3.0, tau=0.2)
    assert blocks_pay(mg, 300) and not thunder_wins(mg, 300, 1.0, 20_000)
    # as measured on two cores: the working set from 64 features, the dual below and at C =
    # 1000 on narrow rows
    assert thunder_wins(gaussian, 64, 1.0, 20_000) and thunder_wins(gaussian, 300, 1.0, 20_000)
    assert not thunder_wins(gaussian, 32, 1.0, 20_000)
    assert not thunder_wins(gaussian, 8, 1000.0, 29_768)


def test_the_estimator_runs_the_working_set_in_process_and_auto_follows_thunder_wins():
    rng = np.random.default_rng(5)
    X = rng.uniform(-1.0, 1.0, (THUNDER_MIN_ROWS, 60))
    y = (np.sin(3 * X[:, 0]) + X[:, 1] > 0).astype(int)
    model = SparseELMClassifier(sigma=3.0, C=1.0, tol=TOL)
    auto = model.fit(X, y)
    wins = thunder_wins(model._kernel_obj(), 60, 1.0, X.shape[0])
    assert auto.solver_ == ("working_set" if wins else "dual")
    # 0/1 rows, however wide, go to the dual solver (its packed columns); others past the
    # crossover to the working set
    binary = (X > 0.5).astype(np.float64)
    wide = np.concatenate([X, X], axis=1)
    model.set_params(max_iter=1)  # (the choice is what is checked here, not the fit)
    with pytest.warns(ConvergenceWarning):
        assert model.fit(np.concatenate([binary, binary], axis=1), y).solver_ == "dual"
    with pytest.warns(ConvergenceWarning):
        assert model.fit(wide, y).solver_ == "working_set"
    X, y = X[:1_500], y[:1_500]  # (the in-process working set on fewer rows: its speed)
    thunder = SparseELMClassifier(sigma=3.0, C=1.0, tol=TOL, solver="working_set")
    thunder.set_params(working_set_size=128).fit(X, y)
    dual = SparseELMClassifier(sigma=3.0, C=1.0, tol=TOL, solver="dual").fit(X, y)
    assert thunder.solver_ == "working_set" and thunder.converged_.all()
    rel = np.abs(thunder.objective_ - dual.objective_) / np.abs(dual.objective_)
    assert np.all(rel <= TOL), rel


class _CountingChecks(_OneBlock):
    """The one-process block, every exact check's precision recorded."""

    def __init__(self, block, n_threads):
        super().__init__(block, n_threads)
        self.checks: list = []

    def exact(self, support, which, q, precise=True):
        self.checks.append(bool(precise))
        return super().exact(support, which, q, precise)


@pytest.mark.parametrize("shrink_every", [None, 1])
def test_a_pair_never_shrunk_needs_no_unshrinking_check(shrink_every):
    """With no shrinking every row's gradient is kept by the steps, so the first check is
    the exact float64 one; rows shrunk come back first at 10 tol from float32 values."""
    rng = np.random.default_rng(2)
    X = rng.uniform(-1.0, 1.0, (3_000, 8)).astype(np.float32)
    y_idx = (np.sin(3.0 * X[:, 0]) + X[:, 1] + 0.3 * rng.normal(size=3_000) > 0).astype(np.int64)
    kernel = Kernel("gaussian", sigma=0.5)
    ids = np.arange(X.shape[0], dtype=np.int64)
    block = RowBlock(X, ids, y_idx, [(0, 1)], kernel.to_dict(), 10.0, 200.0, 1)
    blocks = _CountingChecks(block, 1)
    result = solve_working_set(
        blocks,
        [(0, 1)],
        X.shape[1],
        kernel=kernel,
        C=10.0,
        tol=TOL,
        q=128,
        shrink_every=shrink_every,
    )
    assert result.converged.all() and result.kkt[0] <= TOL
    assert blocks.checks[-1] is True
    if shrink_every is None:
        assert all(blocks.checks)
    else:
        assert block.pairs[0].n_active == X.shape[0]  # every row back at the end
        assert blocks.checks[0] is False
