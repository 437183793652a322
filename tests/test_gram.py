"""Accumulate-then-solve: block sums, fold differences, Cholesky and eigen paths."""

import numpy as np
import pytest
import scipy.linalg

from elmscale.features.layers import HiddenLayer
from elmscale.linalg.gram import GramStats, accumulate_gram
from elmscale.linalg.ridge import ridge_path, solve_ridge


def _problem(n=500, d=5, L=40, k=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, d))
    T = rng.choice([-1.0, 1.0], size=(n, k))
    return HiddenLayer("sigmoid", d, L, seed=seed), X, T


@pytest.mark.parametrize("precision", ["single", "double"])
def test_block_sums_equal_one_block(precision):
    layer, X, T = _problem()
    whole = accumulate_gram(layer, X, T, precision=precision, block_rows=10_000)
    blocks = accumulate_gram(layer, X, T, precision=precision, block_rows=64)
    assert whole.n_samples == blocks.n_samples == 500
    np.testing.assert_allclose(blocks.HtH, whole.HtH, rtol=1e-5)
    np.testing.assert_allclose(blocks.HtT, whole.HtT, rtol=1e-5, atol=1e-4)
    H = layer.transform(X).astype(np.float64)
    np.testing.assert_allclose(whole.HtH, H.T @ H, rtol=1e-12 if precision == "double" else 1e-5)


def test_stats_add_and_subtract_by_rows():
    layer, X, T = _problem()
    total = accumulate_gram(layer, X, T, precision="double")
    first = accumulate_gram(layer, X[:200], T[:200], precision="double")
    rest = accumulate_gram(layer, X[200:], T[200:], precision="double")
    both = first + rest
    np.testing.assert_allclose(both.HtH, total.HtH, rtol=1e-12)
    fold = total - first
    np.testing.assert_allclose(fold.HtH, rest.HtH, rtol=1e-9, atol=1e-9)
    assert fold.n_samples == 300
    acc = GramStats.zeros(40, 3)
    acc += first
    acc += rest
    np.testing.assert_allclose(acc.HtT, total.HtT, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("C", [0.01, 1.0, 1000.0])
def test_solve_and_path_equal_a_dense_solve(C):
    layer, X, T = _problem()
    stats = accumulate_gram(layer, X, T, precision="double")
    A = np.eye(40) / C + stats.HtH
    ref = scipy.linalg.solve(A, stats.HtT, assume_a="pos")
    np.testing.assert_allclose(solve_ridge(stats.HtH, stats.HtT, C), ref, rtol=1e-8)
    path = ridge_path(stats.HtH, stats.HtT, [C, 2 * C])
    np.testing.assert_allclose(path[0], ref, rtol=1e-8, atol=1e-10 * np.abs(ref).max())


def test_bad_C_is_rejected():
    with pytest.raises(ValueError, match="C must be > 0"):
        solve_ridge(np.eye(2), np.ones(2), 0.0)
    with pytest.raises(ValueError, match="every C"):
        ridge_path(np.eye(2), np.ones(2), [1.0, -1.0])
