"""FLSA-SVM (forward least-squares selection of kernel columns) against a literal reference:
the paper's steps written out in numpy on the whole kernel matrix (every candidate
orthogonalised afresh at every step, the error reduction of each, pruning, back
substitution), and the algebra's consequences (interpolation at full rank, nested
selections, pruning of dependent columns)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator

from elmscale.features.kernels import Kernel
from elmscale.io import model_files
from elmscale.models.flsa_svm import FLSASVMClassifier, FLSASVMRegressor
from elmscale.solvers.forward_selection import gram_bytes


def literal_fols(K, Y, m, tol, intercept):
    """Forward orthogonal least squares as the paper's steps: W holds the chosen columns
    orthogonalised (not normalised), A the unit upper-triangular factor, g the weights of
    the orthogonal columns; the coefficients by back substitution on A."""
    n = K.shape[0]
    Y = Y.reshape(n, -1)
    W, A_cols, g, chosen = [], [], [], []
    pruned = set()

    def orthogonalise(col):
        w = col.copy()
        a = []
        for wi in W:
            ai = (wi @ col) / (wi @ wi)
            a.append(ai)
            w = w - ai * wi
        return w, a

    if intercept:
        one = np.ones(n)
        W.append(one)
        A_cols.append([1.0])
        g.append((one @ Y) / (one @ one))
    while len(chosen) < m:
        best, best_err = None, -np.inf
        for j in range(n):
            if j in chosen or j in pruned:
                continue
            w, _ = orthogonalise(K[:, j])
            if not (w @ w) > tol * (K[:, j] @ K[:, j]):
                pruned.add(j)
                continue
            err = np.sum((w @ Y) ** 2) / (w @ w)
            if err > best_err:
                best, best_err = j, err
        if best is None:
            break
        w, a = orthogonalise(K[:, best])
        W.append(w)
        A_cols.append([*a, 1.0])
        g.append((w @ Y) / (w @ w))
        chosen.append(best)
    k = len(W)
    A = np.zeros((k, k))
    for col, entries in enumerate(A_cols):
        A[: len(entries), col] = entries
    G = np.array(g).reshape(k, -1)
    coef = np.linalg.solve(A, G)  # back substitution on a unit upper-triangular A
    if intercept:
        return chosen, coef[1:], coef[0]
    return chosen, coef, np.zeros(G.shape[1])


def _data(n=60, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    return X


def _kernel_matrix(kernel, X):
    return kernel.block(X, X)


#: the candidates' space (their Gram in the cache) and the rows' (every step's products)
BOTH_PATHS = pytest.mark.parametrize("cache_mb", [1024.0, 0.0], ids=["gram", "rows"])


@BOTH_PATHS
@pytest.mark.parametrize("intercept", [True, False])
@pytest.mark.parametrize("kind", ["gaussian", "laplacian", "polynomial"])
def test_regressor_selects_and_weighs_as_the_literal_steps(kind, intercept, cache_mb):
    X = _data()
    y = np.sin(X[:, 0]) + 0.3 * X[:, 1] ** 2
    # degree 3 on 3 features: a kernel of rank 20, above the 12 columns chosen (past the
    # rank the candidates' leftover norms are rounding noise, and so is their order)
    kw = {"sigma": 1.5, "degree": 3, "cache_mb": cache_mb}
    est = FLSASVMRegressor(kernel=kind, n_support=12, fit_intercept=intercept, **kw).fit(X, y)
    K = _kernel_matrix(Kernel(kind, sigma=1.5, degree=3), X)
    chosen, coef, b = literal_fols(K, y, 12, est.tol, intercept)
    assert est.support_.tolist() == chosen
    np.testing.assert_allclose(est.dual_coef_, coef[:, 0], rtol=1e-8, atol=1e-10)
    assert est.intercept_ == pytest.approx(float(b[0]), rel=1e-8, abs=1e-10)
    # the residuals are those of the least-squares fit on the chosen columns
    fitted = K[:, chosen] @ coef[:, 0] + b[0]
    assert est.residuals_[-1] == pytest.approx(np.linalg.norm(y - fitted), rel=1e-8)
    assert np.all(np.diff(est.residuals_) <= 1e-12)


@BOTH_PATHS
def test_multiclass_selects_one_set_for_every_class_as_the_literal_steps(cache_mb):
    rng = np.random.default_rng(3)
    X = _data(n=75, d=2, seed=3)
    y = rng.integers(0, 3, size=75)
    y[:3] = [0, 1, 2]
    est = FLSASVMClassifier(sigma=0.8, n_support=12, cache_mb=cache_mb).fit(X, y)
    T = np.where(y[:, None] == np.arange(3), 1.0, -1.0)
    chosen, coef, b = literal_fols(_kernel_matrix(Kernel("gaussian", 0.8), X), T, 12, est.tol, True)
    assert est.support_.tolist() == chosen
    np.testing.assert_allclose(est.dual_coef_, coef, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(est.intercept_, b, rtol=1e-8, atol=1e-10)
    assert est.decision_function(X).shape == (75, 3)
    np.testing.assert_array_equal(est.predict(X), np.argmax(est.decision_function(X), axis=1))


@BOTH_PATHS
def test_at_full_rank_it_interpolates_as_the_unregularised_ls_svm(cache_mb):
    """Interpolation to what the arithmetic gives, and the reported last residual the
    model's own.  The tolerances follow from the kernel matrix's condition number kappa
    (3.9e4 here: 30 gaussian rows, sigma 2), not from one machine's BLAS: the rows' steps
    are Gram-Schmidt on the columns (backward stable: coefficients to about n u kappa, a
    residual of n u |K| |alpha|); the candidates' space works on K'K, whose condition
    number is kappa^2 (coefficients to n u kappa^2, a residual kappa times the rows').
    Its tracked residual, from |Y|^2 - sum |z|^2, drifted to 1.2e-4 under OpenBLAS's
    SkylakeX kernels against a true 1.5e-8 (issue 49): the last one is now computed from
    the rows."""
    X = _data(n=30, d=4, seed=1)
    y = np.where(X[:, 0] + X[:, 1] > 0, 1, -1)
    K = _kernel_matrix(Kernel("gaussian", 2.0), X)
    assert np.linalg.matrix_rank(K) == 30
    est = FLSASVMClassifier(
        sigma=2.0, n_support=30, fit_intercept=False, tol=1e-12, cache_mb=cache_mb
    ).fit(X, y)
    assert est.n_support_ == 30
    order = np.argsort(est.support_)
    alpha = np.linalg.solve(K, y.astype(float))  # least-squares interpolation, no C
    n, u, kappa = len(y), 2.0**-53, np.linalg.cond(K)
    squared = 2 if cache_mb == 1024.0 else 1  # the candidates' space squares kappa
    coef_tol = n * u * kappa**squared
    residual_tol = n * u * np.linalg.norm(K, 2) * np.linalg.norm(alpha) * kappa ** (squared - 1)
    assert np.linalg.norm(est.dual_coef_[order] - alpha) <= coef_tol * np.linalg.norm(alpha)
    true_residual = np.linalg.norm(y - est.decision_function(X))
    assert true_residual <= residual_tol
    # the reported residual is the model's: the same sum, to its own rounding
    assert est.residuals_[-1] == pytest.approx(true_residual, rel=1e-6, abs=n * u)


@pytest.mark.parametrize("cache_mb", [0.0, 0.005, 1.0], ids=["none", "part", "all"])
def test_cached_float32_columns_make_the_same_selection(cache_mb):
    """The rows' steps with some or all candidates' kernel columns kept in float32: the
    literal reference's indices, and weights from the exact columns."""
    from elmscale.solvers.forward_selection import CandidateColumns, coefficients, forward_select

    X = _data(n=120, d=3, seed=6)
    y = np.sin(2 * X[:, 0]) + X[:, 1] * X[:, 2]
    Y = y[:, None].astype(np.float64)
    kernel = Kernel("gaussian", 0.9)
    columns = CandidateColumns(kernel, X, X, Y, cache_mb=cache_mb)
    assert columns.n_cached == {0.0: 0, 0.005: 10, 1.0: 120}[cache_mb]
    path = forward_select(columns, Y, 20, tol=1e-8, intercept=True)
    chosen, coef, b = literal_fols(_kernel_matrix(kernel, X), y, 20, 1e-8, True)
    assert path.selected.tolist() == chosen
    alpha, b_here = coefficients(path, 20)
    np.testing.assert_allclose(alpha[:, 0], coef[:, 0], rtol=1e-8, atol=1e-10)
    assert b_here[0] == pytest.approx(float(b[0]), rel=1e-8, abs=1e-10)


@BOTH_PATHS
def test_dependent_columns_are_pruned_so_the_rank_bounds_the_support(cache_mb):
    base = _data(n=10, d=2, seed=4)
    X = np.repeat(base, 3, axis=0)  # 30 rows, 10 distinct: K has rank 10
    y = np.arange(30) % 2
    est = FLSASVMClassifier(
        sigma=1.0, n_support=25, fit_intercept=False, tol=1e-8, cache_mb=cache_mb
    ).fit(X, y)
    assert est.n_support_ == 10
    assert len(np.unique(X[est.support_], axis=0)) == 10


def test_every_m_of_one_run_equals_its_own_fit():
    X = _data(n=80, seed=5)
    y = (X[:, 0] * X[:, 1] > 0).astype(int)
    base = FLSASVMClassifier(sigma=1.0, n_support=5)
    models = base.fit_path(X, y, [3, 8, 20])
    for model, m in zip(models, [3, 8, 20]):
        alone = FLSASVMClassifier(sigma=1.0, n_support=m).fit(X, y)
        assert model.n_support == m
        np.testing.assert_array_equal(model.support_, alone.support_)
        np.testing.assert_allclose(model.dual_coef_, alone.dual_coef_, rtol=1e-10)
        np.testing.assert_allclose(model.decision_function(X), alone.decision_function(X))
    # nested: the first 8 of the 20-column model are the 8-column model's
    np.testing.assert_array_equal(models[2].support_[:8], models[1].support_)


def test_a_regressors_path_models_are_fitted_regressors():
    X = _data(n=70, seed=10)
    Y = np.column_stack([np.sin(X[:, 0]), X[:, 1] ** 2])
    models = FLSASVMRegressor(sigma=1.5).fit_path(X, Y, [4, 12])
    for model, m in zip(models, [4, 12]):
        alone = FLSASVMRegressor(sigma=1.5, n_support=m).fit(X, Y)
        assert model.n_outputs_ == 2 and model.n_features_in_ == 3
        np.testing.assert_allclose(model.predict(X), alone.predict(X), rtol=1e-10)


def test_the_reduced_variant_draws_its_candidates_from_a_seeded_pool():
    X = _data(n=200, seed=6)
    y = (X[:, 0] > 0).astype(int)
    a = FLSASVMClassifier(n_support=10, candidates=40, random_state=0).fit(X, y)
    b = FLSASVMClassifier(n_support=10, candidates=0.2, random_state=0).fit(X, y)
    np.testing.assert_array_equal(a.support_, b.support_)  # 40 rows = 20 % of 200
    pool = np.sort(np.random.RandomState(0).choice(200, size=40, replace=False))
    assert set(a.support_) <= set(pool.tolist())
    full = FLSASVMClassifier(n_support=10).fit(X, y)
    assert full.score(X, y) >= 0.9 and a.score(X, y) >= 0.9


def test_a_saved_model_predicts_the_same(tmp_path):
    X = _data(n=90, seed=7)
    y = np.where(X[:, 2] > 0.2, "yes", "no")
    est = FLSASVMClassifier(kernel="laplacian", sigma=2.0, n_support=12).fit(X, y)
    path = model_files.save(est, tmp_path / "flsa.elm")
    loaded = model_files.load(path)
    np.testing.assert_array_equal(loaded.decision_function(X), est.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), est.predict(X))


@pytest.mark.parametrize(
    "params, message",
    [
        ({"n_support": 0}, "n_support"),
        ({"candidates": 0}, "candidates"),
        ({"candidates": 1.5}, "candidates"),
        ({"kernel": "sigmoid"}, "kernel"),
        ({"tol": -1.0}, "tol"),
    ],
)
def test_bad_parameters_are_refused_naming_them(params, message):
    X = _data(n=20)
    with pytest.raises(ValueError, match=message):
        FLSASVMClassifier(**params).fit(X, np.arange(20) % 2)


@pytest.mark.parametrize("estimator", [FLSASVMClassifier(), FLSASVMRegressor()])
def test_scikit_learn_estimator_checks(estimator):
    check_estimator(estimator)


def _search_data():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(150, 4)).astype(np.float32)
    y = (X[:, 0] ** 2 + X[:, 1] > 0.8).astype(int)
    return X, y


def test_the_grid_search_runs_n_support_as_one_path_and_matches_scikit_learns():
    from sklearn.model_selection import GridSearchCV as SkGridSearchCV
    from sklearn.model_selection import StratifiedKFold

    from elmscale.model_selection import GridSearchCV

    X, y = _search_data()
    grid = {"sigma": [0.7, 2.0], "n_support": [4, 12, 30]}
    ours = GridSearchCV(FLSASVMClassifier(), grid, cv=4, random_state=2).fit(X, y)
    theirs = SkGridSearchCV(
        FLSASVMClassifier(), grid, cv=StratifiedKFold(4, shuffle=True, random_state=2)
    ).fit(X, y)
    assert ours.n_pieces_ == 4 * 2  # (fold x sigma): each piece one run to m = 30
    np.testing.assert_allclose(
        ours.cv_results_["mean_test_score"], theirs.cv_results_["mean_test_score"]
    )
    assert ours.best_params_ == theirs.best_params_
    assert ours.best_estimator_.n_support == ours.best_params_["n_support"]


@pytest.mark.timeout(600)
def test_the_grid_search_on_ray_equals_the_one_here(ray_session):
    from elmscale.model_selection import GridSearchCV

    X, y = _search_data()
    grid = {"sigma": [0.7, 2.0], "n_support": [4, 12, 30]}
    here = GridSearchCV(FLSASVMClassifier(), grid, cv=3, random_state=1).fit(X, y)
    on_ray = GridSearchCV(FLSASVMClassifier(), grid, cv=3, random_state=1, ray_address="auto").fit(
        X, y
    )
    np.testing.assert_array_equal(
        here.cv_results_["mean_test_score"], on_ray.cv_results_["mean_test_score"]
    )
    assert here.best_params_ == on_ray.best_params_


def test_the_command_line_trains_and_predicts_as_the_estimator_here(tmp_path, capsys):
    import pandas as pd

    from elmscale.app.cli import main

    X, y = _search_data()
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(4)]).assign(target=y)
    frame.iloc[:100].to_csv(tmp_path / "train.csv", index=False)
    frame.iloc[100:].to_csv(tmp_path / "test.csv", index=False)
    model = tmp_path / "flsa.elm"
    argv = ["train", str(tmp_path / "train.csv"), str(model), "--label", "target"]
    argv += ["--estimator", "FLSASVMClassifier", "-p", "n_support=15", "-p", "sigma=2"]
    assert main([*argv, "--no-scale"]) == 0, capsys.readouterr().err
    assert "trained FLSASVMClassifier" in capsys.readouterr().out
    out = tmp_path / "pred.csv"
    argv = ["predict", str(model), str(tmp_path / "test.csv"), str(out), "--label", "target"]
    assert main(argv) == 0, capsys.readouterr().err
    here = FLSASVMClassifier(n_support=15, sigma=2.0).fit(X[:100], y[:100])
    np.testing.assert_array_equal(pd.read_csv(out)["prediction"], here.predict(X[100:]))


def test_two_spirals_are_seeded_balanced_and_checked():
    from elmscale.data import generate_two_spirals

    a = generate_two_spirals(300, random_state=4)
    b = generate_two_spirals(300, random_state=4)
    np.testing.assert_array_equal(a.X, b.X)
    assert a.X.shape == (300, 2) and np.bincount(a.y).tolist() == [150, 150]
    assert np.abs(a.X).max() < 1.5
    with pytest.raises(ValueError, match="n_samples"):
        generate_two_spirals(1)


def test_path_grid_search_runs_n_support_as_the_path_as_scikit_learns_search_chooses():
    from sklearn.model_selection import GridSearchCV as SkGridSearchCV
    from sklearn.model_selection import KFold

    from elmscale.model_selection import path_grid_search

    X, y = _search_data()
    cv = KFold(3, shuffle=True, random_state=0)
    ours = path_grid_search(
        FLSASVMClassifier(),
        X,
        y,
        Cs=[4, 12, 30],
        param_grid={"sigma": [0.7, 2.0]},
        cv=cv,
        path_param="n_support",
    )
    theirs = SkGridSearchCV(
        FLSASVMClassifier(), {"sigma": [0.7, 2.0], "n_support": [4, 12, 30]}, cv=cv
    ).fit(X, y)
    assert ours.best_params_ == theirs.best_params_
    assert ours.best_score_ == pytest.approx(theirs.best_score_)
    assert ours.best_estimator_.n_support == theirs.best_params_["n_support"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize("candidates", ["all", 70])
def test_candidates_on_dask_workers_give_the_local_selection(dask_client, candidates):
    rng = np.random.default_rng(9)
    X = rng.normal(size=(240, 3)).astype(np.float32)
    y = rng.integers(0, 3, size=240)
    y[:3] = [0, 1, 2]
    params = dict(sigma=1.2, n_support=25, candidates=candidates, random_state=3)
    n_pool = 240 if candidates == "all" else candidates
    # a cache too small for the candidates' Gram: the workers' actors run the rows' steps,
    # each caching what it can of its share's columns in float32, the same arithmetic as
    # the rows' steps here
    rows_mb = 0.9 * gram_bytes(n_pool, 25) / 2**20
    local = FLSASVMClassifier(**params, cache_mb=0).fit(X, y)
    on_dask = FLSASVMClassifier(**params, cache_mb=rows_mb).fit(X, y, client=dask_client)
    np.testing.assert_array_equal(on_dask.support_, local.support_)
    np.testing.assert_allclose(on_dask.dual_coef_, local.dual_coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(on_dask.residuals_, local.residuals_, rtol=1e-10)
    np.testing.assert_array_equal(on_dask.predict(X), local.predict(X))
    # the candidates' space (the default: their Gram fits), here and summed over the
    # workers' shares of the rows: the same selection, to rounding
    gram = FLSASVMClassifier(**params).fit(X, y)
    gram_on_dask = FLSASVMClassifier(**params).fit(X, y, client=dask_client)
    for model in (gram, gram_on_dask):
        np.testing.assert_array_equal(model.support_, on_dask.support_)
        np.testing.assert_allclose(model.dual_coef_, on_dask.dual_coef_, rtol=1e-7, atol=1e-9)
        np.testing.assert_array_equal(model.predict(X), on_dask.predict(X))
    np.testing.assert_allclose(gram_on_dask.dual_coef_, gram.dual_coef_, rtol=1e-9, atol=1e-12)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("n_classes", [2, 3])
def test_a_parquet_data_set_gives_the_selection_of_its_rows_in_memory(
    tmp_path, dask_client, n_classes
):
    from elmscale import open_parquet
    from elmscale.data import write_generated_parquet

    write_generated_parquet(tmp_path, 1_200, 4, n_classes, random_state=2, rows_per_file=300)
    data = open_parquet(tmp_path, label="label")
    X, y = data.read()
    params = dict(sigma=1.0, n_support=30, candidates=200, random_state=4)
    here = FLSASVMClassifier(**params).fit(X, y)
    # the Gram reduced over the units (here, on the workers), the Gram too large for the
    # cache (the rows gathered, their steps)
    for client, cache_mb in ((None, 1024.0), (dask_client, 1024.0), (dask_client, 0.01)):
        model = FLSASVMClassifier(**params, cache_mb=cache_mb).fit(data, client=client)
        np.testing.assert_array_equal(model.classes_, here.classes_)
        np.testing.assert_array_equal(model.support_, here.support_)
        np.testing.assert_array_equal(model.support_vectors_, here.support_vectors_)
        np.testing.assert_allclose(model.dual_coef_, here.dual_coef_, rtol=1e-7, atol=1e-9)
        np.testing.assert_array_equal(model.predict(X), here.predict(X))
        # the last residual is the model's own, summed over the units where they live
        coded = model.decision_function(X)
        coded = coded[:, None] if coded.ndim == 1 else coded
        targets = np.where(y[:, None] == model.classes_[None, :], 1.0, -1.0)
        targets = targets[:, 1:] if n_classes == 2 else targets
        assert model.residuals_[-1] == pytest.approx(np.linalg.norm(targets - coded), rel=1e-9)
    with pytest.raises(ValueError, match="y must be None"):
        FLSASVMClassifier(**params).fit(data, y)
    regressor = FLSASVMRegressor(**params).fit(data)
    in_memory = FLSASVMRegressor(**params).fit(X, y.astype(float))
    np.testing.assert_array_equal(regressor.support_, in_memory.support_)
    np.testing.assert_allclose(regressor.dual_coef_, in_memory.dual_coef_, rtol=1e-7, atol=1e-9)


@BOTH_PATHS
def test_a_support_set_per_class_is_each_columns_literal_selection(cache_mb):
    rng = np.random.default_rng(3)
    X = _data(n=75, d=2, seed=3)
    y = rng.integers(0, 3, size=75)
    y[:3] = [0, 1, 2]
    est = FLSASVMClassifier(
        sigma=0.8, n_support=13, support_sets="per_class", cache_mb=cache_mb
    ).fit(X, y)
    K = _kernel_matrix(Kernel("gaussian", 0.8), X)
    decision = np.zeros((75, 3))
    union = []
    for c, m_c in enumerate([5, 4, 4]):  # 13 shared among 3 classes, the first one more
        t = np.where(y == c, 1.0, -1.0)
        chosen, coef, b = literal_fols(K, t, m_c, est.tol, True)
        union += [j for j in chosen if j not in union]
        decision[:, c] = K[:, chosen] @ coef[:, 0] + b[0]
        rows = [est.support_.tolist().index(j) for j in chosen]
        np.testing.assert_allclose(est.dual_coef_[rows, c], coef[:, 0], rtol=1e-8, atol=1e-10)
        outside = np.setdiff1d(np.arange(est.n_support_), rows)
        assert np.all(est.dual_coef_[outside, c] == 0.0)
    assert est.support_.tolist() == union and est.n_iter_ == 13
    np.testing.assert_allclose(est.decision_function(X), decision, rtol=1e-7, atol=1e-8)


def test_two_classes_give_the_same_model_with_either_support_sets():
    X = _data(n=80, d=3, seed=8)
    y = (X[:, 0] * X[:, 1] > 0).astype(int)
    shared = FLSASVMClassifier(sigma=1.0, n_support=15).fit(X, y)
    per_class = FLSASVMClassifier(sigma=1.0, n_support=15, support_sets="per_class").fit(X, y)
    np.testing.assert_array_equal(per_class.support_, shared.support_)
    np.testing.assert_array_equal(per_class.dual_coef_, shared.dual_coef_)
    np.testing.assert_array_equal(per_class.residuals_, shared.residuals_)
