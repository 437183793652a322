"""The one-process working set in the Thunder style (``solvers.thunder``) and kernel columns
in blocks (``solvers.block_columns``), issue 52 items 2 and 3."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from _datasets import shared_data

from elmscale import SparseELMClassifier
from elmscale.core.jit import q_columns
from elmscale.data import Scaler, load, load_csv
from elmscale.features.kernels import Kernel, float32_error_bound
from elmscale.solvers.block_columns import BLOCK_MIN_FEATURES, BlockRows, blocks_pay
from elmscale.solvers.thunder import THUNDER_MIN_ROWS, solve_thunder, thunder_wins

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
    BlockRows(kernel, X, t).columns(XB, tB, n, block)
    one = np.empty((m, n), np.float32)
    q_columns(np.ascontiguousarray(X.T), t, n, XB, tB, np.arange(m), 0, m, *kernel._params(), one)
    signs = tB[:, None] * t[None, :]
    exact = kernel.block(XB, X) * signs
    bound = _entry_bounds(kernel, X, XB)
    assert np.all(np.abs(block - exact) <= bound)
    assert np.all(np.abs(one - exact) <= bound)
    # each within the bound of the exact value: the two within twice it of each other
    assert np.all(np.abs(block - one) <= 2.0 * bound)
    # rows given as CSR (sparse products, not densified) give the block's values
    sparse = np.empty((m, n), np.float32)
    BlockRows(kernel, sp.csr_matrix(X), t).columns(XB, tB, n, sparse)
    assert np.all(np.abs(sparse - exact) <= bound)


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
    # as measured on two cores: the dual solver at 123 features and at C = 1000
    assert not thunder_wins(gaussian, 123, 1.0, 32_561)
    assert not thunder_wins(gaussian, 8, 1000.0, 29_768)


def test_the_estimator_runs_the_working_set_in_process_and_auto_follows_thunder_wins():
    rng = np.random.default_rng(5)
    X = rng.uniform(-1.0, 1.0, (THUNDER_MIN_ROWS, 60))
    y = (np.sin(3 * X[:, 0]) + X[:, 1] > 0).astype(int)
    model = SparseELMClassifier(sigma=3.0, C=1.0, tol=TOL)
    auto = model.fit(X, y)
    wins = thunder_wins(model._kernel_obj(), 60, 1.0, X.shape[0])
    assert auto.solver_ == ("working_set" if wins else "dual")
    X, y = X[:1_500], y[:1_500]  # (the in-process working set on fewer rows: its speed)
    thunder = SparseELMClassifier(sigma=3.0, C=1.0, tol=TOL, solver="working_set")
    thunder.set_params(working_set_size=128).fit(X, y)
    dual = SparseELMClassifier(sigma=3.0, C=1.0, tol=TOL, solver="dual").fit(X, y)
    assert thunder.solver_ == "working_set" and thunder.converged_.all()
    rel = np.abs(thunder.objective_ - dual.objective_) / np.abs(dual.objective_)
    assert np.all(rel <= TOL), rel
