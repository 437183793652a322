"""Accumulate-then-solve: block sums, folds, class merging, Cholesky and eigen paths."""

import numpy as np
import pytest
import scipy.linalg

from elmscale.features.kernels import Kernel, KernelFeatures
from elmscale.features.layers import HiddenLayer
from elmscale.features.masks import FeatureMask
from elmscale.linalg.gram import Gram, accumulate_gram
from elmscale.linalg.ridge import ridge_path, solve_ridge
from elmscale.linalg.targets import TargetEncoder


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
    assert whole.n_samples == blocks.n_samples == 500 and whole.n_folds == 1
    np.testing.assert_allclose(blocks.HtH, whole.HtH, rtol=1e-5)
    np.testing.assert_allclose(blocks.HtY, whole.HtY, rtol=1e-5, atol=1e-4)
    H = layer.transform(X).astype(np.float64)
    HtH, HtT, TtT = whole.ridge_terms()
    np.testing.assert_allclose(HtH, H.T @ H, rtol=1e-12 if precision == "double" else 1e-5)
    np.testing.assert_allclose(TtT, np.square(T).sum(axis=0))
    np.testing.assert_array_equal(whole.counts, [[500, 500, 500]])


def test_grams_add_by_rows():
    layer, X, T = _problem()
    total = accumulate_gram(layer, X, T, precision="double")
    first = accumulate_gram(layer, X[:200], T[:200], precision="double")
    rest = accumulate_gram(layer, X[200:], T[200:], precision="double")
    both = first + rest
    np.testing.assert_allclose(both.HtH, total.HtH, rtol=1e-12)
    np.testing.assert_allclose(both.HtY, total.HtY, rtol=1e-12, atol=1e-12)
    assert both.n_samples == 500
    acc = Gram.zeros(40, 3)
    for part in (first, rest):
        acc = Gram.combine(acc, part)
    np.testing.assert_allclose(acc.HtY, total.HtY, rtol=1e-12, atol=1e-12)


def test_folds_total_and_fold_parts():
    layer, X, T = _problem()
    folds = np.arange(500) % 3
    gram = accumulate_gram(layer, X, T, folds=folds, n_folds=3, precision="double", block_rows=50)
    assert gram.n_folds == 3 and gram.n_rows.tolist() == [167, 167, 166]
    for k in range(3):
        alone = accumulate_gram(layer, X[folds == k], T[folds == k], precision="double")
        others = accumulate_gram(layer, X[folds != k], T[folds != k], precision="double")
        part, rest = gram.fold(k), gram.total(exclude=k)
        assert part.n_folds == rest.n_folds == 1
        np.testing.assert_allclose(part.HtH, alone.HtH, rtol=1e-12)
        np.testing.assert_allclose(rest.HtH, others.HtH, rtol=1e-12)
        np.testing.assert_allclose(
            rest.ridge_terms()[1], others.ridge_terms()[1], rtol=1e-12, atol=1e-12
        )
        assert rest.n_samples == 500 - part.n_samples
    np.testing.assert_allclose(gram.total().HtH[0], gram.HtH.sum(axis=0))
    with pytest.raises(ValueError, match="one-fold"):
        gram.ridge_terms()
    with pytest.raises(ValueError, match="needs the fold of each row"):
        accumulate_gram(layer, X, T, n_folds=3)


def test_class_indicator_grams_merge_by_value_and_encode():
    layer, X, _ = _problem(n=600)
    y = np.array(["a", "b", "c"])[np.arange(600) % 3]
    # three parts of 200 rows, each without one of the classes
    pieces = [
        np.flatnonzero(y[a : a + 200] != missing) + a
        for a, missing in ((0, "c"), (200, "a"), (400, "b"))
    ]
    parts = []
    for rows in pieces:
        enc, Y = TargetEncoder("one_of_j").fit_transform(y[rows])
        assert enc.classes.size == 2
        parts.append(accumulate_gram(layer, X[rows], Y, classes=enc.classes))
    merged = Gram.combine(*parts)
    assert merged.classes.tolist() == ["a", "b", "c"]
    kept = np.concatenate(pieces)
    H = layer.transform(X[kept]).astype(np.float64)
    encoder = TargetEncoder("plus_minus", merged.classes)
    T = encoder.transform(y[kept])
    HtH, HtT, TtT = merged.ridge_terms(encoder)
    np.testing.assert_allclose(HtH, H.T @ H, rtol=1e-12)
    np.testing.assert_allclose(HtT, H.T @ T, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(TtT, np.square(T).sum(axis=0))
    np.testing.assert_array_equal(merged.counts[0], [np.sum(y[kept] == c) for c in "abc"])
    one_of_j = merged.ridge_terms(TargetEncoder("one_of_j", merged.classes))
    np.testing.assert_allclose(
        one_of_j[1],
        H.T @ TargetEncoder("one_of_j", merged.classes).transform(y[kept]),
        rtol=1e-10,
        atol=1e-10,
    )
    with pytest.raises(ValueError, match="not the Gram's"):
        merged.ridge_terms(TargetEncoder("plus_minus", ["a", "b"]))


def test_any_feature_map_accumulates():
    _, X, T = _problem()
    layer = HiddenLayer("sigmoid", 3, 15, seed=3)
    masked = FeatureMask(5, [1, 3, 4]).then(layer)
    kernel = KernelFeatures(Kernel("laplacian"), X[:20])
    for feature_map, H in (
        (masked, layer.transform(X[:, [1, 3, 4]]).astype(np.float64)),
        (kernel, kernel.transform(X, dtype=np.float64)),
    ):
        HtH, HtT, _ = accumulate_gram(feature_map, X, T, block_rows=32).ridge_terms()
        np.testing.assert_allclose(HtH, H.T @ H, rtol=1e-12)
        np.testing.assert_allclose(HtT, H.T @ T, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("C", [0.01, 1.0, 1000.0])
def test_solve_and_path_equal_a_dense_solve(C):
    layer, X, T = _problem()
    HtH, HtT, _ = accumulate_gram(layer, X, T, precision="double").ridge_terms()
    A = np.eye(40) / C + HtH
    ref = scipy.linalg.solve(A, HtT, assume_a="pos")
    np.testing.assert_allclose(solve_ridge(HtH, HtT, C), ref, rtol=1e-8)
    path = ridge_path(HtH, HtT, [C, 2 * C])
    np.testing.assert_allclose(path[0], ref, rtol=1e-8, atol=1e-10 * np.abs(ref).max())


def test_bad_C_is_rejected():
    with pytest.raises(ValueError, match="C must be > 0"):
        solve_ridge(np.eye(2), np.ones(2), 0.0)
    with pytest.raises(ValueError, match="every C"):
        ridge_path(np.eye(2), np.ones(2), [1.0, -1.0])


def _gaussian_gram(n, seed=0):
    X = np.random.default_rng(seed).standard_normal((n, 4))
    return np.exp(-((X[:, None, :] - X[None, :, :]) ** 2).sum(-1) / 2)


@pytest.mark.parametrize("n", [1, 2, 300])
def test_the_tridiagonal_path_equals_the_eigendecomposition(n):
    """ridge_path's tridiagonal reduction against the eigendecomposition it replaced, within
    the backward-stable bound n eps cond(G + I/C); a 1-D right-hand side keeps its shape."""
    from elmscale.linalg.ridge import _eigen_path

    G = _gaussian_gram(n)
    B = np.random.default_rng(1).standard_normal((n, 2))
    Cs = np.array([0.01, 1.0, 100.0, 1e4])
    path, reference = ridge_path(G, B, Cs), _eigen_path(G, B, Cs)
    norm = np.linalg.norm(G, 2)
    for C, x, ref in zip(Cs, path, reference, strict=True):
        bound = 10 * n * np.finfo(float).eps * (1 + C * norm)
        assert np.abs(x - ref).max() <= bound * np.abs(ref).max()
    assert ridge_path(G, B[:, 0], Cs).shape == (Cs.size, n)


def test_a_rank_deficient_gram_at_a_huge_C_falls_back_to_clipped_eigenvalues():
    """T + I/C not positive definite (rank 5 of 100, 1/C far below the rounding): the
    eigendecomposition with its eigenvalues clipped at 0 answers, finite, as before."""
    from elmscale.linalg.ridge import _eigen_path

    H = np.random.default_rng(2).standard_normal((100, 5))
    G, B = H @ H.T, np.ones((100, 1))
    path = ridge_path(G, B, [1e18])
    assert np.isfinite(path).all()
    np.testing.assert_array_equal(path, _eigen_path(G, B, np.array([1e18])))
