"""Unified ELM estimators: scikit-learn contract, exactness, C paths, bad input."""

import warnings

import numpy as np
import pytest
import scipy.linalg
from _problems import nonlinear_problem
from scipy.spatial.distance import cdist
from sklearn.base import clone
from sklearn.utils.estimator_checks import parametrize_with_checks

from elmscale import ELMClassifier, ELMRegressor
from elmscale.features.kernels import Kernel, KernelFeatures
from elmscale.features.layers import HiddenLayer


@parametrize_with_checks(
    [
        ELMClassifier(n_hidden=60),
        ELMClassifier(hidden="multiquadric", n_hidden=40),
        ELMClassifier(kernel="gaussian"),
        ELMClassifier(kernel="laplacian"),
        ELMRegressor(n_hidden=60),
        ELMRegressor(kernel="polynomial", degree=2),
    ]
)
def test_sklearn_contract(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        check(estimator)


def _targets(y, classes):
    if len(classes) == 2:
        return np.where(y == classes[1], 1.0, -1.0)
    return np.where(y[:, None] == classes[None, :], 1.0, -1.0)


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("hidden", ["sigmoid", "sinusoid", "multiquadric", "gaussian"])
def test_primal_solution_equals_dense_solve(hidden, n_classes):
    X, y = nonlinear_problem(300, d=5, n_classes=n_classes, seed=1)
    C = 7.0
    model = ELMClassifier(
        hidden=hidden, n_hidden=50, C=C, precision="double", random_state=3, block_rows=64
    ).fit(X, y)
    H = model.hidden_layer_.transform(X).astype(np.float64)
    T = _targets(y, model.classes_)
    ref = scipy.linalg.solve(np.eye(50) / C + H.T @ H, H.T @ T, assume_a="pos")
    np.testing.assert_allclose(model.coef_, ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())
    np.testing.assert_allclose(model.decision_function(X), H @ ref, rtol=1e-8, atol=1e-8)
    # Single-precision products: H'H carries float32 rounding, which an
    # ill-conditioned H'H amplifies in beta, much less in the outputs.
    single = ELMClassifier(hidden=hidden, n_hidden=50, C=C, random_state=3, precision="single").fit(
        X, y
    )
    np.testing.assert_allclose(single.decision_function(X), H @ ref, atol=2e-2)
    assert np.mean(single.predict(X) == model.predict(X)) > 0.98


def test_single_precision_warns_when_C_is_too_large():
    X, y = nonlinear_problem(400, d=3, seed=4)
    with pytest.warns(UserWarning, match="precision='double'"):
        ELMClassifier(n_hidden=100, C=1e6, precision="single", random_state=0).fit(X, y)


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian", "polynomial"])
def test_dual_solution_equals_dense_solve(kernel):
    X, y = nonlinear_problem(200, d=4, n_classes=3, seed=2)
    C, sigma, degree = 20.0, 0.8, 3
    model = ELMClassifier(kernel=kernel, C=C, sigma=sigma, degree=degree).fit(X, y)
    x = X.astype(np.float32).astype(np.float64)
    if kernel == "gaussian":
        omega = np.exp(-cdist(x, x, "sqeuclidean") / (2 * sigma**2))
    elif kernel == "laplacian":
        omega = np.exp(-cdist(x, x) / sigma)
    else:
        omega = (1 + x @ x.T) ** degree
    T = _targets(y, model.classes_)
    ref = scipy.linalg.solve(np.eye(200) / C + omega, T, assume_a="pos")
    np.testing.assert_allclose(model.dual_coef_, ref, rtol=1e-8, atol=1e-8 * np.abs(ref).max())
    np.testing.assert_allclose(model.decision_function(X), omega @ ref, rtol=1e-8, atol=1e-8)


def test_regressor_dual_and_primal_fit_a_smooth_function():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (600, 3))
    y = np.sin(3 * X[:, 0]) * X[:, 1] + 0.5 * X[:, 2] ** 2
    for model in (
        ELMRegressor(n_hidden=200, C=1e6, random_state=0),
        ELMRegressor(kernel="gaussian", sigma=0.7, C=1e3),
    ):
        model.fit(X[:400], y[:400])
        assert model.score(X[400:], y[400:]) > 0.97, model
    Y = np.column_stack([y, -2 * y])
    two = ELMRegressor(n_hidden=100, random_state=0).fit(X, Y)
    assert two.predict(X).shape == (600, 2) and two.n_outputs_ == 2


@pytest.mark.parametrize(
    "params", [dict(n_hidden=80, random_state=4), dict(kernel="gaussian", sigma=0.5)]
)
def test_fit_path_equals_separate_fits(params):
    X, y = nonlinear_problem(250, d=4, n_classes=3, seed=5)
    Cs = [0.01, 1.0, 50.0, 1000.0]
    base = ELMClassifier(precision="double", **params)
    path = base.fit_path(X, y, Cs)
    assert [m.C for m in path] == Cs
    for C, model in zip(Cs, path):
        single = clone(base).set_params(C=C).fit(X, y)
        coef = model.coef_ if model.kernel is None else model.dual_coef_
        ref = single.coef_ if single.kernel is None else single.dual_coef_
        np.testing.assert_allclose(coef, ref, rtol=1e-6, atol=1e-8 * np.abs(ref).max())
        np.testing.assert_array_equal(model.predict(X), single.predict(X))
    assert base.C == 1000.0


def test_multiclass_uses_one_output_per_class_and_learns():
    X, y = nonlinear_problem(1200, d=4, n_classes=4, seed=6)
    labels = np.array(["w", "x", "y", "z"])[y]
    model = ELMClassifier(n_hidden=300, C=100, random_state=0).fit(X[:800], labels[:800])
    assert list(model.classes_) == ["w", "x", "y", "z"]
    assert model.coef_.shape == (300, 4)
    assert model.decision_function(X[:5]).shape == (5, 4)
    assert model.score(X[800:], labels[800:]) > 0.75  # chance: 0.25; gaussian kernel: 0.85


def test_binary_labels_of_any_kind():
    X, y = nonlinear_problem(400, seed=7)
    for labels in (np.where(y == 1, 1, -1), np.where(y == 1, "spam", "ham"), y + 3):
        model = ELMClassifier(n_hidden=150, C=100, random_state=1).fit(X, labels)
        assert set(model.predict(X)) <= set(labels)
        assert model.score(X, labels) > 0.9


def test_labels_that_are_not_one_class_per_row_are_refused():
    from elmscale.models.elm import encode_class_labels

    model = ELMClassifier()
    with pytest.raises(ValueError, match=r"one class label per row; got shape \(4, 2\)"):
        encode_class_labels(model, np.array([[0, 1], [1, 0], [0, 1], [1, 1]]), "one_of_j")
    with pytest.raises(ValueError, match="Unknown label type"):
        encode_class_labels(model, np.array([0.5, 1.5, 0.25, 2.0]), "one_of_j")
    T = encode_class_labels(model, np.array([[3], [5], [3]]), "one_of_j")  # a column: labels
    assert model.classes_.tolist() == [3, 5] and T.shape[0] == 3


def test_random_state_fixes_the_layer():
    X, y = nonlinear_problem(100, seed=8)
    a = ELMClassifier(n_hidden=20, random_state=11).fit(X, y)
    b = ELMClassifier(n_hidden=20, random_state=11).fit(X, y)
    np.testing.assert_array_equal(a.coef_, b.coef_)
    assert a.hidden_layer_ == b.hidden_layer_


def test_the_fitted_feature_map_decides_the_mode():
    X, y = nonlinear_problem(200, d=4, n_classes=3, seed=12)
    primal = ELMClassifier(n_hidden=30, random_state=0).fit(X, y)
    assert primal.feature_map_ is primal.hidden_layer_
    dual = ELMClassifier(kernel="gaussian", sigma=0.5).fit(X, y)
    features = dual.feature_map_
    assert isinstance(features, KernelFeatures) and features.basis is dual.X_fit_
    assert features.kernel == Kernel("gaussian", sigma=0.5)
    np.testing.assert_allclose(
        dual.decision_function(X), features.scores(X, dual.dual_coef_), rtol=1e-12
    )
    # a refit in the other mode leaves no weights of the first
    dual.set_params(kernel=None, n_hidden=30, random_state=0).fit(X, y)
    assert "X_fit_" not in vars(dual) and "dual_coef_" not in vars(dual)
    np.testing.assert_array_equal(dual.predict(X), primal.predict(X))
    with pytest.raises(ValueError, match="expected a KernelFeatures map"):
        ELMClassifier(kernel="gaussian").set_solution(primal.hidden_layer_, primal.coef_)
    with pytest.raises(ValueError, match="not this estimator's kernel"):
        ELMClassifier(kernel="laplacian").set_solution(features, np.zeros((200, 3)))
    # a random-node family (no kernel parameter) refuses a kernel map by name
    from elmscale import GGBRELMClassifier

    with pytest.raises(ValueError, match="GGBRELMClassifier here fits random hidden nodes"):
        GGBRELMClassifier().set_solution(features, np.zeros((200, 3)))
    with pytest.raises(AttributeError):
        _ = ELMClassifier().feature_map_


def test_set_solution_installs_weights_solved_elsewhere():
    X, y = nonlinear_problem(300, d=4, seed=13)
    model = ELMRegressor(n_hidden=40, C=10.0, precision="double", random_state=2).fit(X, y)
    layer = HiddenLayer("sinusoid", 4, 25, seed=9)
    H = layer.transform(X).astype(np.float64)
    beta = scipy.linalg.solve(np.eye(25) / 10.0 + H.T @ H, H.T @ y[:, None], assume_a="pos")
    assert model.set_solution(layer, beta) is model
    assert model.hidden_layer_ is layer and model.coef_.shape == (25,)
    np.testing.assert_allclose(model.predict(X), H @ beta[:, 0], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    "param, value, message",
    [
        ("C", 0.0, "C"),
        ("C", -1.0, "C"),
        ("sigma", 0.0, "sigma"),
        ("n_hidden", 0, "n_hidden"),
        ("hidden", "relu", "hidden"),
        ("kernel", "rbf", "kernel"),
        ("degree", 0, "degree"),
    ],
)
def test_bad_parameters_are_named(param, value, message):
    X, y = nonlinear_problem(50, seed=9)
    with pytest.raises(ValueError, match=f"'{message}' parameter"):
        ELMClassifier(**{param: value}).fit(X, y)


def test_bad_data_is_named():
    X, y = nonlinear_problem(50, seed=10)
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        ELMClassifier().fit(bad, y)
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="Input X contains infinity"):
        ELMClassifier().fit(bad, y)
    with pytest.raises(ValueError, match="at least 2 classes"):
        ELMClassifier().fit(X, np.zeros(50))
    model = ELMClassifier(n_hidden=10).fit(X, y)
    with pytest.raises(ValueError, match="X has 3 features, but ELMClassifier is expecting 4"):
        model.predict(X[:, :3])
    with pytest.raises(ValueError, match="could not convert|numeric"):
        ELMRegressor().fit(X, np.array(["a"] * 50))
    with pytest.raises(ValueError, match="every C"):
        ELMClassifier().fit_path(X, y, [1.0, 0.0])
