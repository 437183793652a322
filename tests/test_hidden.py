"""Random hidden layers and kernels against plain numpy / scipy references."""

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from elmscale.core import jit as _jit
from elmscale.features.base import iter_row_blocks
from elmscale.features.kernels import Kernel
from elmscale.features.layers import HIDDEN_KINDS, HiddenLayer


def _reference_nodes(layer: HiddenLayer, X: np.ndarray) -> np.ndarray:
    x = X.astype(np.float32).astype(np.float64)
    a = layer.weights.astype(np.float64)
    b = layer.biases.astype(np.float64)
    if layer.kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-(x @ a + b)))
    if layer.kind == "sinusoid":
        return np.sin(x @ a + b)
    d2 = cdist(x, a.T, "sqeuclidean")
    if layer.kind == "multiquadric":
        return np.sqrt(d2 + b**2)
    return np.exp(-d2 / b)


@pytest.mark.parametrize("kind", HIDDEN_KINDS)
def test_hidden_nodes_match_the_papers_formulas(kind):
    X = np.random.default_rng(1).uniform(-1, 1, size=(300, 7))
    layer = HiddenLayer(kind, 7, 64, seed=5)
    H = layer.transform(X)
    assert H.dtype == np.float32 and H.shape == (300, 64)
    ref = _reference_nodes(layer, X)
    np.testing.assert_allclose(H, ref, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("kind", HIDDEN_KINDS)
def test_layer_is_rebuilt_from_its_four_values(kind):
    a = HiddenLayer(kind, 5, 20, seed=123)
    b = HiddenLayer.from_dict(a.to_dict())
    np.testing.assert_array_equal(a.weights, b.weights)
    np.testing.assert_array_equal(a.biases, b.biases)
    c = HiddenLayer(kind, 5, 20, seed=124)
    assert not np.array_equal(a.weights, c.weights)


def test_documented_weight_distributions():
    sig = HiddenLayer("sigmoid", 10, 5000, seed=0)
    assert -1 <= sig.weights.min() < -0.99 and 0.99 < sig.weights.max() <= 1
    assert 0 <= sig.biases.min() < 0.01 and 0.99 < sig.biases.max() <= 1
    gau = HiddenLayer("gaussian", 10, 5000, seed=0)
    assert 5.0 <= gau.biases.min() < 5.1 and 14.9 < gau.biases.max() <= 15.0


def test_rows_do_not_depend_on_their_batch():
    X = np.random.default_rng(2).uniform(-1, 1, size=(257, 9))
    layer = HiddenLayer("sigmoid", 9, 33, seed=1)
    whole = layer.transform(X)
    parts = np.vstack([layer.transform(X[s]) for s in iter_row_blocks(257, 50)])
    np.testing.assert_array_equal(whole, parts)
    coef = np.random.default_rng(3).standard_normal((33, 3))
    np.testing.assert_allclose(layer.scores(X, coef), whole.astype(np.float64) @ coef, rtol=1e-12)
    np.testing.assert_array_equal(layer.scores(X[:10], coef), layer.scores(X, coef)[:10])


def test_bad_layer_parameters_are_named():
    with pytest.raises(ValueError, match="n_hidden"):
        HiddenLayer("sigmoid", 3, 0, seed=1)
    with pytest.raises(ValueError, match="hidden kind"):
        HiddenLayer("relu", 3, 5, seed=1)
    with pytest.raises(ValueError, match="expects 3"):
        HiddenLayer("sigmoid", 3, 5, seed=1).transform(np.zeros((2, 4)))


@pytest.mark.parametrize("kind", ["gaussian", "laplacian", "polynomial"])
def test_kernel_blocks_match_scipy(kind):
    rng = np.random.default_rng(4)
    A = rng.uniform(-1, 1, size=(40, 6)).astype(np.float32).astype(np.float64)
    B = rng.uniform(-1, 1, size=(70, 6)).astype(np.float32).astype(np.float64)
    k = Kernel(kind, sigma=0.7, degree=3)
    if kind == "gaussian":
        ref = np.exp(-cdist(A, B, "sqeuclidean") / (2 * 0.7**2))
    elif kind == "laplacian":
        ref = np.exp(-cdist(A, B) / 0.7)
    else:
        ref = (1 + A @ B.T) ** 3
    np.testing.assert_allclose(k.block(A, B), ref, rtol=1e-13, atol=1e-15)
    assert k.block(A, B, dtype=np.float32).dtype == np.float32
    coef = rng.standard_normal((70, 2))
    np.testing.assert_allclose(k.block_matvec(A, B, coef), ref @ coef, rtol=1e-12, atol=1e-12)


def test_kernel_blocks_on_threads_equal_one_thread_to_the_bit():
    """The kernel blocks run rows side by side in chunks (``core.threads.parallel_rows``):
    every chunking gives the one-thread result to the bit, and an error in a chunk is
    raised."""
    from elmscale.core.threads import ROWS_PER_CHUNK, parallel_rows, thread_budget

    rng = np.random.default_rng(5)
    A = rng.uniform(-1, 1, size=(8 * ROWS_PER_CHUNK + 13, 5))
    B = rng.uniform(-1, 1, size=(300, 5))
    coef = rng.standard_normal((300, 3))
    k = Kernel("gaussian", sigma=0.6)
    with thread_budget(1):
        block1, scores1 = k.block(A, B), k.block_matvec(A, B, coef)
    with thread_budget(2):
        block2, scores2 = k.block(A, B), k.block_matvec(A, B, coef)
    np.testing.assert_array_equal(block1, block2)
    np.testing.assert_array_equal(scores1, scores2)
    seen = []

    def chunk(start, stop):
        seen.append((start, stop))
        if start > 0:
            raise RuntimeError("a failing chunk")

    with pytest.raises(RuntimeError, match="a failing chunk"):
        parallel_rows(chunk, 4 * ROWS_PER_CHUNK, n_threads=2)
    covered = sorted(seen)
    assert covered[0][0] == 0 and all(a[1] == b[0] for a, b in zip(covered, covered[1:]))


def test_bad_kernel_parameters_are_named():
    with pytest.raises(ValueError, match="sigma"):
        Kernel("gaussian", sigma=0.0)
    with pytest.raises(ValueError, match="degree"):
        Kernel("polynomial", degree=0)
    with pytest.raises(ValueError, match="kernel"):
        Kernel("rbf")


def test_vectorised_exp_is_as_accurate_as_libm():
    x64 = np.linspace(-700, 700, 200_001).reshape(1, -1)
    out64 = x64.copy()
    _jit.exp_inplace_f64(out64)
    np.testing.assert_allclose(out64, np.exp(x64), rtol=4e-16)
    x32 = np.linspace(-80, 80, 100_001, dtype=np.float32).reshape(1, -1)
    out32 = x32.copy()
    _jit.exp_inplace_f32(out32)
    np.testing.assert_allclose(out32, np.exp(x32.astype(np.float64)), rtol=2e-7)
    tiny = np.array([[-750.0, -1e300]])
    _jit.exp_inplace_f64(tiny)
    assert np.all(tiny == 0.0)


def test_weight_scale_widens_additive_weights_only():
    base = HiddenLayer("sigmoid", 6, 50, seed=3)
    wide = HiddenLayer("sigmoid", 6, 50, seed=3, weight_scale=4.0)
    np.testing.assert_allclose(wide.weights, 4.0 * base.weights, rtol=1e-6)
    np.testing.assert_array_equal(wide.biases, base.biases)
    assert HiddenLayer.from_dict(wide.to_dict()) == wide
    rbf = HiddenLayer("gaussian", 6, 50, seed=3, weight_scale=4.0)
    np.testing.assert_array_equal(rbf.weights, HiddenLayer("gaussian", 6, 50, seed=3).weights)
    with pytest.raises(ValueError, match="weight_scale"):
        HiddenLayer("sigmoid", 6, 50, seed=3, weight_scale=0.0)
