"""Feature maps behind one interface: dict round trips (old dicts too), masks, kernel
features."""

import json

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from elmscale.features.base import FeatureMap, feature_map_from_dict
from elmscale.features.kernels import Kernel, KernelFeatures
from elmscale.features.layers import ConcatenatedLayers, HiddenLayer
from elmscale.features.masks import FeatureMask, MaskedFeatureMap

X = np.random.default_rng(0).uniform(-1, 1, (120, 6))


def _maps():
    layer = HiddenLayer("sigmoid", 6, 20, seed=1)
    both = ConcatenatedLayers((layer, HiddenLayer("gaussian", 6, 10, seed=2)))
    mask = FeatureMask(6, [4, 0, 2])
    return [
        layer,
        both,
        mask,
        mask.then(HiddenLayer("sinusoid", 3, 15, seed=3)),
        KernelFeatures(Kernel("gaussian", sigma=0.8), X[:25]),
        FeatureMask(6, [1, 5]).then(KernelFeatures(Kernel("polynomial", degree=2), X[:9, [1, 5]])),
    ]


@pytest.mark.parametrize("feature_map", _maps(), ids=lambda m: type(m).__name__)
def test_every_map_has_the_interface_and_round_trips_through_json(feature_map):
    assert isinstance(feature_map, FeatureMap)
    H = feature_map.transform(X)
    assert H.shape == (120, feature_map.n_outputs) and H.dtype == np.float32
    d = json.loads(json.dumps(feature_map.to_dict()))
    assert d["type"] == type(feature_map).feature_map_type
    again = feature_map_from_dict(d)
    assert type(again) is type(feature_map)
    np.testing.assert_array_equal(again.transform(X), H)
    out = np.empty((50, feature_map.n_outputs))
    assert feature_map.transform(X[:50], dtype=np.float64, out=out) is out
    np.testing.assert_array_equal(out, feature_map.transform(X[:50], dtype=np.float64))
    np.testing.assert_allclose(out, H[:50], rtol=1e-6, atol=1e-6)
    coef = np.random.default_rng(1).normal(size=(feature_map.n_outputs, 2))
    np.testing.assert_allclose(
        feature_map.scores(X, coef), H.astype(np.float64) @ coef, rtol=1e-5, atol=1e-5
    )
    with pytest.raises(ValueError, match="out must be"):
        feature_map.transform(X[:5], out=np.empty((4, feature_map.n_outputs)))


def test_dicts_written_before_feature_maps_had_a_type_are_read():
    layer = HiddenLayer("sigmoid", 6, 20, seed=1, weight_scale=2.0)
    old = {"kind": "sigmoid", "n_features": 6, "n_hidden": 20, "seed": 1, "weight_scale": 2.0}
    assert feature_map_from_dict(old) == layer
    both = ConcatenatedLayers((layer, HiddenLayer("gaussian", 6, 10, seed=2)))
    old_both = {"layers": [old, {"kind": "gaussian", "n_features": 6, "n_hidden": 10, "seed": 2}]}
    assert feature_map_from_dict(old_both) == both
    assert layer.n_outputs == 20 and both.n_outputs == 30
    with pytest.raises(ValueError, match="unknown feature map type"):
        feature_map_from_dict({"type": "nope"})


def test_a_mask_before_a_layer_is_the_layer_on_the_kept_columns():
    layer = HiddenLayer("sigmoid", 3, 15, seed=3)
    masked = FeatureMask(6, [5, 1, 1, 3]).then(layer)
    assert isinstance(masked, MaskedFeatureMap) and masked.mask.keep == (1, 3, 5)
    assert masked.n_features == 6 and masked.n_outputs == 15
    np.testing.assert_array_equal(masked.transform(X), layer.transform(X[:, [1, 3, 5]]))
    boolean = FeatureMask(6, np.array([0, 1, 0, 1, 0, 1], dtype=bool))
    assert boolean == masked.mask
    with pytest.raises(ValueError, match="expects 2"):
        FeatureMask(6, [0, 1, 2]).then(HiddenLayer("sigmoid", 2, 4, seed=0))
    with pytest.raises(ValueError, match=r"indices in \[0, 6\)"):
        FeatureMask(6, [6])
    with pytest.raises(ValueError, match="at least one column"):
        FeatureMask(6, [])
    with pytest.raises(ValueError, match="expects 6"):
        masked.transform(X[:, :5])


@pytest.mark.parametrize("kind", ["gaussian", "laplacian", "polynomial"])
def test_kernel_features_are_the_kernel_against_the_basis(kind):
    basis = X[:30]
    features = KernelFeatures(Kernel(kind, sigma=0.7, degree=2), basis)
    assert features.n_features == 6 and features.n_outputs == 30
    x = X.astype(np.float32).astype(np.float64)
    b = x[:30]
    ref = {
        "gaussian": lambda: np.exp(-cdist(x, b, "sqeuclidean") / (2 * 0.7**2)),
        "laplacian": lambda: np.exp(-cdist(x, b) / 0.7),
        "polynomial": lambda: (1 + x @ b.T) ** 2,
    }[kind]()
    np.testing.assert_allclose(features.transform(X, dtype=np.float64), ref, rtol=1e-12, atol=1e-14)
    coef = np.random.default_rng(2).normal(size=30)
    np.testing.assert_allclose(features.scores(X, coef), ref @ coef, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="basis rows have 6"):
        features.transform(X[:, :4])


@pytest.mark.parametrize(
    "kernel",
    [
        Kernel("gaussian", sigma=0.7),
        Kernel("laplacian", sigma=0.7),
        Kernel("polynomial", degree=3),
        Kernel("mg", sigma=0.7, sigma_star=0.1, tau=0.3),
    ],
    ids=lambda k: k.kind,
)
def test_a_kernel_of_rows_with_themselves_is_the_full_block_to_the_bit(kernel):
    # K(A, A) computes half and mirrors it; rows over 256 a chunk run on two threads
    A = np.random.default_rng(3).uniform(-1, 1, (700, 11))
    half = kernel.block(A, A)
    np.testing.assert_array_equal(half, kernel.block(A, A.copy()))
    np.testing.assert_array_equal(half, half.T)
    out = np.full((700, 700), np.nan, np.float32)
    assert kernel.block(A, A, dtype=np.float32, out=out) is out
    np.testing.assert_array_equal(out, half.astype(np.float32))


@pytest.mark.parametrize("kind", ["sigmoid", "sinusoid", "multiquadric", "gaussian"])
def test_activations_from_pre_activations_are_the_layers_nodes(kind):
    """Feature selection keeps pre-activations and asks the layer for its nodes: they are
    the values ``transform`` computes (additive nodes: to float32 rounding of ``a.x + b``)."""
    layer = HiddenLayer(kind, 6, 20, seed=4)
    X32 = X.astype(np.float32).astype(np.float64)
    W, b = layer.weights.astype(np.float64), layer.biases.astype(np.float64)
    if kind in ("sigmoid", "sinusoid"):
        pre = X32 @ W + b
    else:
        pre = ((X32[:, :, None] - W[None, :, :]) ** 2).sum(1)
    H = layer.activate(pre)
    assert H.dtype == np.float64 and H.shape == (120, 20)
    # transform forms the pre-activations (a.x + b, or squared distances) in float32: each
    # of its d + 2 roundings errs by at most 2^-24 of the sum of the terms' sizes, and the
    # error reaches the node through the activation's slope there, whichever kernels (FMA
    # or not, vector widths) did the sums (issue 49: a fixed 2e-7 failed for a sinusoid
    # node of pre-activation 40 under x86-64-v2's)
    if kind in ("sigmoid", "sinusoid"):
        sizes = np.abs(X32) @ np.abs(W) + np.abs(b)
    else:
        sizes = ((np.abs(X32[:, :, None]) + np.abs(W[None, :, :])) ** 2).sum(1)
    step = 1e-4 * np.maximum(np.abs(pre), 1.0)
    slope = np.abs(layer.activate(pre + step) - layer.activate(pre - step)) / (2 * step)
    # plus the activation's own float32 evaluation, a few units of its result's last place
    atol = (X.shape[1] + 2) * 2.0**-24 * (sizes * (2 * slope + 1e-3) + 4 * np.maximum(np.abs(H), 1))
    np.testing.assert_array_less(np.abs(H - layer.transform(X, dtype=np.float64)), atol)
    with pytest.raises(ValueError, match=r"pre-activations must be \(n_rows, 20\)"):
        layer.activate(pre[:, :5])


@pytest.mark.parametrize(
    "kernel",
    [
        Kernel("gaussian", sigma=0.8),
        Kernel("laplacian", sigma=1.5),
        Kernel("mg", sigma=0.7, sigma_star=3.0, tau=0.3),
    ],
    ids=lambda k: k.kind,
)
def test_a_kernel_from_squared_distances_is_its_block(kernel):
    A, B = X[:30].astype(np.float32), X[40:75].astype(np.float32)
    d2 = cdist(A.astype(np.float64), B.astype(np.float64), "sqeuclidean")
    np.testing.assert_allclose(kernel.from_sq_distances(d2), kernel.block(A, B), rtol=1e-12)


def test_the_polynomial_kernel_has_no_distance_form():
    with pytest.raises(ValueError, match="not a function of distances"):
        Kernel("polynomial", degree=2).from_sq_distances(np.zeros((2, 2)))
