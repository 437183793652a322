"""Boosting-ridge ELM ensembles: each one-pass solve against the paper's algorithm written out
literally (explicit residuals, explicit ridge solves), the scikit-learn contract, Dask
against local, model files, the registry's commands and bad input."""

import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification, make_regression
from sklearn.utils.estimator_checks import parametrize_with_checks

import elmscale
from elmscale import registry
from elmscale.data import write_parquet
from elmscale.data.parquet import open_parquet
from elmscale.features.kernels import Kernel
from elmscale.linalg.boosting import boosting_filter, global_path
from elmscale.model_selection import cross_validate_path
from elmscale.models.boosting_ridge import (
    BRELMClassifier,
    BRELMRegressor,
    GBRELMClassifier,
    GBRELMRegressor,
    GGBRELMClassifier,
    GGBRELMRegressor,
    KBRELMClassifier,
    KBRELMRegressor,
)
from elmscale.models.elm import ELMRegressor


@parametrize_with_checks(
    [
        BRELMClassifier(n_hidden=20, n_estimators=3),
        GBRELMClassifier(n_hidden=20, n_estimators=3),
        GGBRELMClassifier(n_hidden=20, n_estimators=3),
        KBRELMClassifier(n_estimators=3),
        BRELMRegressor(n_hidden=20, n_estimators=3),
        GBRELMRegressor(n_hidden=20, n_estimators=3),
        GGBRELMRegressor(n_hidden=20, n_estimators=3),
        KBRELMRegressor(n_estimators=3),
    ]
)
def test_sklearn_contract(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        check(estimator)


def _regression(n=300, d=6, outputs=1, seed=0):
    X, y = make_regression(n, d, n_targets=outputs, noise=5.0, random_state=seed)
    y = (y - y.min(axis=0)) / (y.max(axis=0) - y.min(axis=0))  # the paper's [0, 1]
    return X / np.abs(X).max(), y


def _one_of_j(y):
    classes = np.unique(y)
    return (y[:, None] == classes[None, :]).astype(float)


def _ridge(H, R, C):
    return np.linalg.solve(H.T @ H + np.eye(H.shape[1]) / C, H.T @ R)


def _rel(a, b):
    return np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max()


def _layers(model):
    return model.hidden_layer_.layers


@pytest.mark.parametrize("C", [0.1, 10.0, 1e4])
def test_ggbrelm_equals_a_ridge_elm_on_the_concatenated_layers(C):
    X, y = _regression(outputs=2)
    model = GGBRELMRegressor(n_estimators=4, n_hidden=15, C=C, precision="double", random_state=0)
    model.fit(X, y)
    H = np.hstack([layer.transform(X, dtype=np.float64) for layer in _layers(model)])
    assert H.shape == (300, 60)
    assert _rel(model.coef_, _ridge(H, y, C)) <= 1e-8
    # the same as the unified ELM given that map
    assert _rel(model.predict(X), H @ _ridge(H, y, C)) <= 1e-8


@pytest.mark.parametrize("task", ["regressor", "classifier"])
def test_gbrelm_from_the_one_pass_gram_equals_explicit_residual_fits(task):
    C = 5.0
    if task == "regressor":
        X, y = _regression(outputs=2)
        model = GBRELMRegressor(n_estimators=5, n_hidden=12, C=C, precision="double")
        Y = y
    else:
        X, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=1)
        model = GBRELMClassifier(n_estimators=5, n_hidden=12, C=C, precision="double")
        Y = _one_of_j(y)
    model.set_params(random_state=3).fit(X, y)
    residual, betas = Y.copy(), []
    for layer in _layers(model):  # the paper's loop: each learner on the current residual
        H = layer.transform(X, dtype=np.float64)
        beta = _ridge(H, residual, C)
        residual -= H @ beta
        betas.append(beta)
    assert _rel(model.coef_, np.vstack(betas)) <= 1e-8
    # the first learner alone is the single ELM of the first layer
    assert _rel(model.coef_[:12], _ridge(_layers(model)[0].transform(X, np.float64), Y, C)) <= 1e-8


@pytest.mark.parametrize("n_estimators", [1, 3, 10])
def test_brelm_equals_explicit_boosting_on_its_shared_layer(n_estimators):
    C = 2.0
    X, y = _regression()
    model = BRELMRegressor(n_estimators=n_estimators, n_hidden=25, C=C, precision="double")
    model.set_params(random_state=5).fit(X, y)
    H = model.hidden_layer_.transform(X, dtype=np.float64)
    residual, total = y.astype(float).copy(), np.zeros(25)
    for _ in range(n_estimators):
        beta = _ridge(H, residual, C)
        residual -= H @ beta
        total += beta
    assert _rel(model.coef_, total) <= 1e-8


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_kbrelm_spectral_solution_equals_explicit_kernel_ridge_fits(kernel):
    C, S = 3.0, 6
    X, y = make_classification(200, 5, n_informative=3, n_classes=3, random_state=2)
    model = KBRELMClassifier(n_estimators=S, kernel=kernel, C=C, sigma=1.5).fit(X, y)
    K = Kernel(kernel, sigma=1.5).block(X.astype(np.float32), X.astype(np.float32), np.float64)
    residual, alpha = _one_of_j(y), 0.0
    for _ in range(S):
        step = np.linalg.solve(K + np.eye(len(X)) / C, residual)
        residual = residual - K @ step
        alpha = alpha + step
    assert _rel(model.dual_coef_, alpha) <= 1e-8
    assert np.array_equal(model.predict(X), np.unique(y)[np.argmax(K @ alpha, axis=1)])


def test_the_boosting_filter_is_the_sum_of_its_steps_and_s_over_lambda_at_zero():
    w, lam = np.array([0.0, 1e-300, 1e-12, 0.5, 3.0, 1e9]), 0.25
    for S in (1, 2, 7):
        explicit = sum(lam**s / (lam + w) ** (s + 1) for s in range(S))
        assert np.allclose(boosting_filter(w, lam, S), explicit, rtol=1e-12, atol=0)
    assert boosting_filter(np.zeros(1), lam, 4)[0] == 4 / lam


def test_the_global_solve_gives_the_same_by_cholesky_and_by_eigendecomposition():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(80, 30))
    G, B = A.T @ A, rng.normal(size=(30, 2))
    Cs = np.geomspace(0.01, 100, 12)
    by_eigen = global_path(G, B, Cs)  # 12 values: one eigendecomposition
    by_cholesky = np.concatenate([global_path(G, B, Cs[i : i + 4]) for i in range(0, 12, 4)])
    assert _rel(by_eigen, by_cholesky) <= 1e-9


@pytest.mark.parametrize("cls", [GBRELMClassifier, GGBRELMClassifier, BRELMClassifier])
def test_fit_path_equals_separate_fits(cls):
    X, y = make_classification(250, 6, n_informative=4, random_state=4)
    model = cls(n_estimators=4, n_hidden=10, precision="double", random_state=1)
    Cs = [0.1, 1.0, 100.0]
    for C, fitted in zip(Cs, clone(model).fit_path(X, y, Cs)):
        alone = clone(model).set_params(C=C).fit(X, y)
        assert _rel(fitted.coef_, alone.coef_) <= 1e-8
        assert np.array_equal(fitted.predict(X), alone.predict(X))


def test_kbrelm_fit_path_equals_separate_fits():
    X, y = _regression(150)
    model = KBRELMRegressor(n_estimators=4, sigma=2.0)
    for C, fitted in zip([0.5, 50.0], model.fit_path(X, y, [0.5, 50.0])):
        alone = clone(model).set_params(C=C).fit(X, y)
        assert _rel(fitted.dual_coef_, alone.dual_coef_) <= 1e-8


def test_one_learner_is_the_unified_elm_of_the_same_layer():
    X, y = _regression()
    ensemble = GGBRELMRegressor(n_estimators=1, n_hidden=30, C=7.0, precision="double")
    ensemble.set_params(random_state=0).fit(X, y)
    for cls in (GBRELMRegressor, BRELMRegressor):
        other = cls(n_estimators=1, n_hidden=30, C=7.0, precision="double", random_state=0)
        assert _rel(other.fit(X, y).predict(X), ensemble.predict(X)) <= 1e-8
    layer = _layers(ensemble)[0]
    elm = ELMRegressor(n_hidden=30, C=7.0, precision="double").set_solution(layer, ensemble.coef_)
    elm.n_features_in_, elm.n_outputs_ = X.shape[1], 1
    assert np.array_equal(elm.predict(X), ensemble.predict(X))


def test_classifiers_take_the_argmax_of_one_of_j_outputs():
    X, y = make_classification(300, 6, n_informative=4, n_classes=2, random_state=0)
    labels = np.where(y == 1, "yes", "no")
    model = GGBRELMClassifier(n_estimators=3, n_hidden=20, C=10.0, random_state=0)
    model.fit(X, labels)
    out = model._raw_output(X)
    assert out.shape == (300, 2)  # a column per class, also for two classes
    assert np.array_equal(model.predict(X), model.classes_[np.argmax(out, axis=1)])
    assert np.array_equal(model.decision_function(X) > 0, model.predict(X) == "yes")
    assert model.score(X, labels) > 0.85


@pytest.mark.parametrize(
    "model",
    [
        GGBRELMClassifier(n_estimators=3, n_hidden=10, random_state=0),
        GBRELMRegressor(n_estimators=3, n_hidden=10, random_state=0),
        BRELMClassifier(n_estimators=3, n_hidden=10, random_state=0),
        KBRELMRegressor(n_estimators=3, sigma=2.0),
    ],
    ids=lambda m: type(m).__name__,
)
def test_a_saved_and_loaded_ensemble_predicts_the_same_to_the_bit(model, tmp_path):
    X, y = make_classification(200, 5, n_informative=3, n_classes=3, random_state=0)
    target = y if elmscale.registry.entry_for(model).capabilities.task == "classifier" else X[:, 0]
    model.fit(X, target)
    elmscale.save(model, tmp_path / "m.elm")
    again = elmscale.load(tmp_path / "m.elm")
    assert type(again) is type(model)
    assert again.get_params() == model.get_params()
    np.testing.assert_array_equal(again.predict(X), model.predict(X))


def _parquet(tmp_path, X, y, n_files=3):
    bounds = np.linspace(0, len(X), n_files + 1).astype(int)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        write_parquet(X[a:b], tmp_path / f"part-{i}.parquet", y=y[a:b])
    return open_parquet(tmp_path)


@pytest.mark.parametrize("cls", [GGBRELMClassifier, GBRELMClassifier, KBRELMClassifier])
def test_the_dask_path_equals_the_local_path(cls, tmp_path, dask_client):
    kernel = cls is KBRELMClassifier
    n = 600 if kernel else 3000  # KBRELM: an n x n eigendecomposition
    X, y = make_classification(n, 8, n_informative=5, n_classes=3, random_state=0)
    ds = _parquet(tmp_path, X.astype(np.float32), y)
    Xr, yr = ds.read()
    params = {"C": 10.0, "n_estimators": 4}
    if kernel:
        params.update(sigma=2.0)
    else:
        params.update(n_hidden=30, precision="double", random_state=7)
    model = cls(**params)
    on_cluster = clone(model).fit(ds.with_units(6), client=dask_client)
    local = clone(model).fit(Xr, yr)
    weights = "dual_coef_" if kernel else "coef_"
    assert _rel(getattr(on_cluster, weights), getattr(local, weights)) <= 1e-9
    np.testing.assert_array_equal(on_cluster.predict(Xr), local.predict(Xr))


def test_cross_validate_path_on_parquet_solves_the_ensemble_not_plain_ridge(tmp_path, dask_client):
    X, y = make_classification(2000, 6, n_informative=4, random_state=1)
    ds = _parquet(tmp_path, X.astype(np.float32), y).with_units(4)
    model = GBRELMClassifier(n_estimators=3, n_hidden=20, precision="double", random_state=2)
    result = cross_validate_path(model, ds, [0.1, 1.0, 10.0], n_folds=3, client=dask_client)
    Xr, yr = ds.read()
    refit = clone(model).set_params(C=result.best_C).fit(Xr, yr)
    assert _rel(result.best_estimator.coef_, refit.coef_) <= 1e-9


def test_every_ensemble_is_registered_with_the_papers_grid():
    for ensemble in ("BRELM", "GBRELM", "GGBRELM", "KBRELM"):
        for task in ("Classifier", "Regressor"):
            entry = registry.entry(f"{ensemble}{task}")
            assert entry.capabilities.task == task.lower()
            assert entry.capabilities.c_path
    grid = registry.entry("KBRELMClassifier").paper_grid({"kernel": "gaussian"})
    assert grid["C"] == [0.01, 0.1, 1.0, 10.0, 100.0]  # 1 / the paper's C: the same values
    # the paper's gamma divides the squared distance: gamma = 2 sigma^2
    assert np.allclose([2 * s**2 for s in grid["sigma"]], [0.01, 0.1, 1.0, 10.0, 100.0])
    assert "sigma" not in registry.entry("GGBRELMRegressor").paper_grid({})


@pytest.mark.parametrize(
    "model, message",
    [
        (GGBRELMClassifier(n_estimators=0), "n_estimators"),
        (GBRELMRegressor(n_hidden=0), "n_hidden"),
        (BRELMClassifier(C=-1.0), "'C'"),
        (KBRELMClassifier(kernel=None), "kernel"),
        (KBRELMRegressor(kernel="rbf"), "kernel"),
    ],
)
def test_bad_parameters_are_refused_naming_them(model, message):
    X, y = make_classification(60, 4, random_state=0)
    with pytest.raises(ValueError, match=message):
        model.fit(X, y)


def test_a_classifier_needs_two_classes():
    X = np.random.default_rng(0).normal(size=(30, 3))
    with pytest.raises(ValueError, match="at least 2 classes"):
        GGBRELMClassifier(n_hidden=5).fit(X, np.zeros(30))


@pytest.mark.parametrize("cls", [GGBRELMRegressor, GBRELMRegressor, BRELMRegressor])
@pytest.mark.parametrize("C", [0.5, 50.0])
def test_fewer_rows_than_columns_solves_in_the_row_space_to_the_same_weights(cls, C):
    X, y = _regression(n=60, outputs=2)
    model = cls(n_estimators=4, n_hidden=80, C=C, precision="double", random_state=1).fit(X, y)
    layers = model.hidden_layer_.layers if cls is not BRELMRegressor else [model.hidden_layer_] * 4
    assert model.n_hidden > 60  # more columns per solve than rows: the row space
    if cls is GGBRELMRegressor:
        H = np.hstack([layer.transform(X, dtype=np.float64) for layer in layers])
        expected = _ridge(H, y, C)
    else:  # the explicit residual loop in the primal (D x D systems)
        residual, betas = y.copy(), []
        for layer in layers:
            H = layer.transform(X, dtype=np.float64)
            betas.append(_ridge(H, residual, C))
            residual -= H @ betas[-1]
        expected = np.vstack(betas) if cls is GBRELMRegressor else sum(betas)
    assert _rel(model.coef_, expected) <= 1e-8
    assert model.precision_ == "double"


@pytest.mark.parametrize("n_rows", [300, 50])  # the Gram's D x D blocks; the N x N row space
def test_sequential_fits_by_eigendecomposition_equal_those_by_cholesky(n_rows):
    X, y = _regression(n=n_rows, outputs=2)
    model = GBRELMRegressor(n_estimators=3, n_hidden=60, precision="double", random_state=4)
    Cs = np.geomspace(0.01, 1000, 12)  # more than CHOLESKY_MAX_CS: one eigendecomposition
    for C, fitted in zip(Cs[::4], clone(model).fit_path(X, y, Cs)[::4]):
        alone = clone(model).set_params(C=C).fit(X, y)  # one C: Cholesky
        assert _rel(fitted.coef_, alone.coef_) <= 1e-7


def _weights(model):
    return model.coef_


@pytest.mark.parametrize("task", ["classifier", "regressor"])
def test_one_pass_gives_every_ensemble_and_every_C_as_separate_fits(task):
    from elmscale.models.boosting_ridge import fit_ensembles

    if task == "classifier":
        X, y = make_classification(400, 6, n_informative=4, n_classes=3, random_state=3)
        kinds = {"ELM": GGBRELMClassifier, "BRELM": BRELMClassifier}
        kinds.update(GBRELM=GBRELMClassifier, GGBRELM=GGBRELMClassifier)
    else:
        X, y = _regression(400)
        kinds = {"ELM": GGBRELMRegressor, "BRELM": BRELMRegressor}
        kinds.update(GBRELM=GBRELMRegressor, GGBRELM=GGBRELMRegressor)
    params = dict(n_estimators=4, n_hidden=15, precision="double", random_state=9)
    Cs = [0.1, 10.0]
    every = fit_ensembles(kinds["GGBRELM"](**params), X, y, Cs=Cs)
    assert set(every) == {"ELM", "BRELM", "GBRELM", "GGBRELM"}
    for name, fitted in every.items():
        for C, model in zip(Cs, fitted):
            alone_params = {**params, "C": C, "n_estimators": 1 if name == "ELM" else 4}
            alone = kinds[name](**alone_params).fit(X, y)
            assert type(model) is type(alone)
            assert _rel(_weights(model), _weights(alone)) <= 1e-9, (name, C)
            if task == "classifier":
                np.testing.assert_array_equal(model.predict(X), alone.predict(X))
            else:
                assert _rel(model.predict(X), alone.predict(X)) <= 1e-9


def test_one_pass_on_parquet_through_dask_equals_in_memory(tmp_path, dask_client):
    from elmscale.models.boosting_ridge import fit_ensembles

    X, y = make_classification(2000, 6, n_informative=4, random_state=5)
    ds = _parquet(tmp_path, X.astype(np.float32), y).with_units(4)
    Xr, yr = ds.read()
    template = GBRELMClassifier(n_estimators=3, n_hidden=20, precision="double", random_state=1)
    on_cluster = fit_ensembles(template, ds, Cs=[1.0, 100.0], client=dask_client)
    local = fit_ensembles(template, Xr, yr, Cs=[1.0, 100.0])
    for name in on_cluster:
        for a, b in zip(on_cluster[name], local[name]):
            assert _rel(a.coef_, b.coef_) <= 1e-9
    with pytest.raises(TypeError, match="GGBRELM or GBRELM"):
        fit_ensembles(KBRELMClassifier(), Xr, yr, Cs=[1.0])
