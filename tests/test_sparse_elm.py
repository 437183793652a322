"""Sparse ELM: the dual solvers against a general QP solver, and the estimator's contract."""

import threading

import numpy as np
import pytest
import scipy.optimize
from _datasets import shared_data
from _problems import nonlinear_problem
from scipy.spatial.distance import cdist
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

from elmscale import SparseELMClassifier
from elmscale.core.threads import thread_budget
from elmscale.data import Scaler, load
from elmscale.features.kernels import Kernel, float32_error_bound
from elmscale.features.layers import HiddenLayer
from elmscale.models.sparse_elm_pairs import pair_path
from elmscale.solvers.sparse_dual import (
    HELPER_MIN_ROWS,
    TAIL_SIZE,
    KernelSolverState,
    box_qp,
    column_dtype,
    dual_objective,
    kkt_violation,
    solve_explicit_dual,
    solve_kernel_dual,
)


# The polynomial kernel runs the contract checks at degree 2: on their unscaled data
# (features around 100) the default degree 3 gives Q entries of 1e13, whose float64
# sums resolve a gradient to about 1e-2, not tol=1e-3, so each fit runs to the step
# cap (not converged, with a warning to scale the features).  Degree 2 (4e8) is solved
# with float64 columns (``column_dtype``).
@parametrize_with_checks(
    [
        SparseELMClassifier(),
        SparseELMClassifier(kernel="polynomial", degree=2),
        SparseELMClassifier(hidden="sigmoid", n_hidden=50),
        SparseELMClassifier(hidden="sigmoid", n_hidden=50, solver="newton"),
    ]
)
def test_sklearn_contract(estimator, check):
    check(estimator)


GAUSSIAN = Kernel("gaussian", sigma=0.5)


def _reference_qp(Q, C):
    n = Q.shape[0]
    res = scipy.optimize.minimize(
        lambda a: 0.5 * a @ Q @ a - a.sum(),
        np.zeros(n),
        jac=lambda a: Q @ a - 1.0,
        bounds=[(0.0, C)] * n,
        method="L-BFGS-B",
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 100_000},
    )
    return res.fun


def _gaussian_problem(seed, n=80):
    X, y = nonlinear_problem(n, d=3, seed=seed)
    X = X.astype(np.float32).astype(np.float64)
    t = np.where(y == 1, 1.0, -1.0)
    Q = np.exp(-cdist(X, X, "sqeuclidean") / (2 * 0.5**2)) * np.outer(t, t)
    return X, t, Q


@pytest.mark.parametrize("C", [0.1, 1.0, 10.0, 1000.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("shrinking", [True, False])
@pytest.mark.parametrize("pair_steps", [True, False])
@pytest.mark.parametrize("tail_size", [0, TAIL_SIZE])
def test_kernel_solver_reaches_the_qp_optimum(C, seed, shrinking, pair_steps, tail_size):
    X, t, Q = _gaussian_problem(seed)
    alpha, n_iter, converged, g = solve_kernel_dual(
        X,
        t,
        kernel=GAUSSIAN,
        C=C,
        shrinking=shrinking,
        cache_size=0.001,
        pair_steps=pair_steps,
        tail_size=tail_size,
    )
    assert converged and n_iter > 0
    assert np.all((alpha >= 0) & (alpha <= C))
    ref = _reference_qp(Q, C)
    assert abs(dual_objective(Q, alpha) - ref) <= 1e-4 * abs(ref)
    assert kkt_violation(alpha, Q @ alpha - 1.0, C) <= 1e-3  # exact float64 check
    np.testing.assert_allclose(g, Q @ alpha - 1.0, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("sigma, C", [(20.0, 100.0), (100.0, 1000.0)])
def test_ill_conditioned_tail_is_solved_exactly(sigma, C):
    """Wide kernels at large C: the steps stall on a small active set, which is then
    solved as a dense box QP; the result is the QP optimum, with fewer steps."""
    X, y = nonlinear_problem(300, d=4, seed=11)
    X = X.astype(np.float32).astype(np.float64)
    t = np.where(y == 1, 1.0, -1.0)
    kernel = Kernel("gaussian", sigma=sigma)
    Q = np.exp(-cdist(X, X, "sqeuclidean") / (2 * sigma**2)) * np.outer(t, t)
    info = {}
    alpha, n_iter, converged, g = solve_kernel_dual(X, t, kernel=kernel, C=C, info=info)
    without, n_iter_without, ok, _ = solve_kernel_dual(X, t, kernel=kernel, C=C, tail_size=0)
    assert converged and ok and info["tails"] >= 1
    assert n_iter < n_iter_without
    assert kkt_violation(alpha, Q @ alpha - 1.0, C) <= 1e-3
    np.testing.assert_allclose(g, Q @ alpha - 1.0, rtol=1e-9, atol=1e-9)
    ref = min(_reference_qp(Q, C), dual_objective(Q, without))
    assert dual_objective(Q, alpha) <= ref + 1e-4 * abs(ref)


@pytest.mark.parametrize("C", [1.0, 100.0])
def test_a_precomputed_gram_gives_the_same_optimum(C):
    X, t, Q = _gaussian_problem(8, n=300)
    K = GAUSSIAN.block(X, X)
    info = {}
    alpha, _, ok, g = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=C, gram=K, info=info)
    plain, _, ok_plain, _ = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=C)
    assert ok and ok_plain
    np.testing.assert_allclose(g, Q @ alpha - 1.0, rtol=0, atol=1e-9)
    assert kkt_violation(alpha, Q @ alpha - 1.0, C) <= 1e-3
    assert dual_objective(Q, alpha) == pytest.approx(dual_objective(Q, plain), rel=1e-4)
    with pytest.raises(ValueError, match=r"gram must be the \(300, 300\) kernel matrix"):
        solve_kernel_dual(X, t, kernel=GAUSSIAN, C=C, gram=K[:10])


@pytest.mark.parametrize("use_gram", [False, True])
def test_a_kept_solver_state_reuses_columns_and_gives_the_same_optimum(use_gram):
    """A C path's solves sharing one KernelSolverState (its cache, in the order the
    last solve's shrinking left) reach the same optimum as fresh solves, computing
    fewer column entries; a state made for other rows is refused."""
    X, t, Q = _gaussian_problem(9, n=800)
    gram = GAUSSIAN.block(X, X) if use_gram else None
    state = KernelSolverState(X, t, GAUSSIAN, 200.0)
    alpha, started_reordered = None, []
    for C in (0.5, 5.0, 50.0, 500.0):
        kept, fresh = {}, {}
        # (the face QP, which computes no columns, is tested on its own)
        plain, _, _, _ = solve_kernel_dual(
            X, t, kernel=GAUSSIAN, C=C, alpha0=alpha, gram=gram, face_qp_max_free=0, info=fresh
        )
        started_reordered.append(not np.array_equal(state.perm, np.arange(800)))
        alpha, _, ok, g = solve_kernel_dual(
            X,
            t,
            kernel=GAUSSIAN,
            C=C,
            alpha0=alpha,
            gram=gram,
            state=state,
            face_qp_max_free=0,
            info=kept,
        )
        assert ok
        np.testing.assert_allclose(g, Q @ alpha - 1.0, rtol=0, atol=1e-9)
        assert kkt_violation(alpha, Q @ alpha - 1.0, C) <= 1e-3
        assert dual_objective(Q, alpha) == pytest.approx(dual_objective(Q, plain), rel=1e-4)
        upper, bar = state.known_bar  # kept for the next C's G_bar: exact
        np.testing.assert_array_equal(upper, np.where(alpha >= C, alpha, 0.0))
        np.testing.assert_allclose(bar, Q @ upper, rtol=0, atol=1e-9)
        if C > 0.5:
            assert kept["column_entries"] < fresh["column_entries"]
    assert started_reordered[-1]  # the last solve began in the order shrinking had left
    with pytest.raises(ValueError, match="state was made for other rows or another kernel"):
        solve_kernel_dual(X[:300], t[:300], kernel=GAUSSIAN, C=1.0, state=state)


def test_a_warm_start_with_few_free_variables_is_solved_as_one_box_qp():
    """Along a C path of a wide kernel (few free variables, ill-conditioned), warm starts
    are solved as one dense box QP on the kept K: the same optimum as coordinate steps
    alone (exact gradient, KKT within tol, objective no worse), in fewer steps."""
    X, y = nonlinear_problem(600, d=3, seed=4)
    X = X.astype(np.float32).astype(np.float64)
    t = np.where(y == 1, 1.0, -1.0)
    wide = Kernel("gaussian", sigma=5.0)
    gram = wide.block(X, X)
    Q = gram * np.outer(t, t)
    start, taken, steps = None, 0, {True: 0, False: 0}
    for C in (1.0, 10.0, 100.0, 1000.0):
        results = {}
        for face in (True, False):
            info = {}
            a, _, ok, g = solve_kernel_dual(
                X,
                t,
                kernel=wide,
                C=C,
                alpha0=start,
                gram=gram,
                face_qp_max_free=None if face else 0,
                info=info,
            )
            assert ok
            np.testing.assert_allclose(g, Q @ a - 1.0, rtol=0, atol=1e-9)
            assert kkt_violation(a, Q @ a - 1.0, C) <= 1e-3
            results[face] = a
            steps[face] += info["steps"]
            taken += info["face_qp"]
        objective = dual_objective(Q, results[True])
        assert objective <= dual_objective(Q, results[False]) + 1e-6 * abs(objective)
        # pair_path's predictor: the variables at the old bound start at the new one
        start = np.where(results[True] >= C, 10.0 * C, results[True])
    assert taken >= 2
    assert steps[True] < steps[False]


def test_a_path_from_a_small_C_starts_every_variable_at_the_bound():
    """At a path's first, small C most variables end at the bound: started there (and
    solved by the face QP), it reaches a fresh solve's optimum in fewer steps."""
    X, t, Q = _gaussian_problem(3, n=600)
    Cs = [0.01, 0.1]
    path = pair_path(
        (np.arange(600), t),
        X=X,
        feature_map=GAUSSIAN,
        Cs=Cs,
        seed=0,
        tol=1e-3,
        cache_size=200.0,
        shrinking=True,
        max_iter=-1,
    )
    for result, C in zip(path, Cs):
        fresh, n_fresh, _, _ = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=C)
        assert result.converged
        assert kkt_violation(result.alpha, Q @ result.alpha - 1.0, C) <= 1e-3
        assert result.objective == pytest.approx(dual_objective(Q, fresh), rel=1e-6)
        if C == Cs[0]:
            assert result.n_iter < n_fresh / 10


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("rank", [5, 40])
def test_box_qp_is_exact(seed, rank):
    """The dense tail solver against L-BFGS-B, on full-rank and singular PSD problems,
    from a start near the optimum and from a poor one."""
    rng = np.random.default_rng(seed)
    m, C = 40, 3.0
    A = rng.normal(size=(m, rank))
    Q = A @ A.T
    c = rng.normal(size=m) * 5
    ref = scipy.optimize.minimize(
        lambda x: 0.5 * x @ Q @ x + c @ x,
        np.zeros(m),
        jac=lambda x: Q @ x + c,
        bounds=[(0.0, C)] * m,
        method="L-BFGS-B",
        options={"ftol": 1e-15, "gtol": 1e-12},
    )
    for x0 in (ref.x, rng.uniform(0, C, m)):
        x = box_qp(Q, c, C, x0, 1e-8)
        assert x is not None and np.all((x >= 0) & (x <= C))
        assert 0.5 * x @ Q @ x + c @ x <= ref.fun + 1e-9 * abs(ref.fun)
        grad = Q @ x + c
        assert kkt_violation(x, grad, C) <= 1e-6


@pytest.mark.parametrize("pair_steps", [True, False])
def test_polynomial_kernel_with_varying_diagonal(pair_steps):
    X, y = nonlinear_problem(70, d=3, seed=5)
    X = X.astype(np.float32).astype(np.float64)
    t = np.where(y == 1, 1.0, -1.0)
    Q = (1 + X @ X.T) ** 3 * np.outer(t, t)
    alpha, _, converged, _ = solve_kernel_dual(
        X, t, kernel=Kernel("polynomial", degree=3), C=5.0, pair_steps=pair_steps
    )
    assert converged
    ref = _reference_qp(Q, 5.0)
    assert abs(dual_objective(Q, alpha) - ref) <= 1e-4 * abs(ref)
    assert kkt_violation(alpha, Q @ alpha - 1.0, 5.0) <= 1e-3


@pytest.mark.parametrize("C", [0.5, 50.0])
@pytest.mark.parametrize("tail_size", [0, TAIL_SIZE])
def test_explicit_solver_reaches_the_qp_optimum(C, tail_size):
    X, y = nonlinear_problem(120, d=3, seed=6)
    t = np.where(y == 1, 1.0, -1.0)
    H = HiddenLayer("sigmoid", 3, 30, seed=1).transform(X)
    info = {}
    alpha, beta, _, converged = solve_explicit_dual(H, t, C=C, tail_size=tail_size, info=info)
    assert converged
    if C == 50.0:  # the passes stall there: the exact tail solve is taken when allowed
        assert (info["tails"] >= 1) == (tail_size > 0)
    Ht = H.astype(np.float64) * t[:, None]
    Q = Ht @ Ht.T
    np.testing.assert_allclose(beta, Ht.T @ alpha, rtol=1e-8, atol=1e-10)
    ref = _reference_qp(Q, C)
    assert abs(dual_objective(Q, alpha) - ref) <= 1e-4 * abs(ref)
    assert kkt_violation(alpha, Q @ alpha - 1.0, C) <= 1e-3


def test_warm_start_along_C_reaches_the_same_optimum_in_fewer_steps():
    X, t, Q = _gaussian_problem(3, n=150)
    a1, _, _, _ = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=10.0)
    cold, n_cold, _, _ = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=20.0)
    warm, n_warm, ok, _ = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=20.0, alpha0=a1)
    assert ok and n_warm < n_cold
    assert dual_objective(Q, warm) == pytest.approx(dual_objective(Q, cold), rel=1e-4)


def test_max_iter_is_reported_with_a_warning():
    X, y = nonlinear_problem(200, d=3, seed=7)
    with pytest.warns(ConvergenceWarning, match="max_iter=5"):
        model = SparseELMClassifier(sigma=0.5, C=10, max_iter=5).fit(X, y)
    assert model.n_iter_.tolist() == [5] and model.kkt_violation_[0] > 1e-3


@pytest.mark.needs_shared
@pytest.mark.timeout(120)
def test_a_failing_exact_tail_is_not_retried_at_the_same_size():
    # LIBSVM's one-hot mushrooms (112 columns of +-1) through 200 sinusoid nodes are close
    # to noise; at C = 100 the active set the passes stall on (about 1,450 rows) has more
    # free variables than H has columns, so box_qp's face is singular and the tail fails.
    # Retried every 20 passes at the same size it failed for ever (the fit never ended);
    # now it waits until the active set halves, and the fit ends in about 12,000 passes.
    data = load(shared_data("mushrooms", "mushrooms"))
    rows = np.random.default_rng(0).permutation(data.n_samples)[:1600]
    X = Scaler().fit(data.X[rows]).transform(data.X[rows])
    t = np.where(data.y[rows] == data.y.max(), 1.0, -1.0)
    H = HiddenLayer("sinusoid", X.shape[1], 200, 0).transform(X)
    info = {}
    alpha, beta, passes, converged = solve_explicit_dual(H, t, C=100.0, info=info)
    assert info["failed_tails"] >= 1 and info["tails"] >= 1
    assert converged
    g = t * (H.astype(np.float64) @ beta) - 1.0
    assert kkt_violation(alpha, g, 100.0) <= 1e-3


def test_random_nodes_stop_at_the_default_pass_cap_with_a_warning(monkeypatch):
    import elmscale.solvers.explicit_dual as explicit_dual

    monkeypatch.setattr(explicit_dual, "EXPLICIT_MAX_PASSES", 7)
    X, y = nonlinear_problem(300, d=3, seed=7)
    with pytest.warns(ConvergenceWarning, match="100,000 passes"):
        model = SparseELMClassifier(hidden="sigmoid", n_hidden=50, C=1000.0).fit(X, y)
    assert model.n_iter_.tolist() == [7] and not model.converged_[0]


def test_model_keeps_only_support_vectors_and_scores_with_them():
    X, y = nonlinear_problem(400, d=3, seed=8)
    model = SparseELMClassifier(sigma=0.5, C=1.0).fit(X[:300], y[:300])
    assert 0 < model.support_.size < 300
    np.testing.assert_array_equal(
        model.support_vectors_, X[:300][model.support_].astype(np.float32)
    )
    assert model.dual_coef_.shape == (1, model.support_.size)
    assert model.kkt_violation_[0] <= 1e-3
    K = np.exp(
        -cdist(
            X[300:].astype(np.float32).astype(np.float64),
            model.support_vectors_.astype(np.float64),
            "sqeuclidean",
        )
        / 0.5
    )
    # the default scores on float32 kernel values, within their documented bound
    bound = float32_error_bound(
        model._kernel_obj(), X[300:], model.support_vectors_, model.dual_coef_[0]
    )
    assert np.all(np.abs(-model.decision_function(X[300:]) - K @ model.dual_coef_[0]) <= bound)
    assert model.score(X[300:], y[300:]) > 0.9
    model.set_params(precision="double")
    np.testing.assert_allclose(
        -model.decision_function(X[300:]), K @ model.dual_coef_[0], rtol=1e-10, atol=1e-10
    )


def test_one_vs_one_votes_over_all_pairs():
    X, y = nonlinear_problem(600, d=3, n_classes=4, seed=9)
    labels = np.array(["a", "b", "c", "d"])[y]
    model = SparseELMClassifier(sigma=0.5, C=10).fit(X[:450], labels[:450])
    assert model.pairs_.tolist() == [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3]]
    assert model.dual_coef_.shape == (6, model.support_.size)
    assert model.n_support_.sum() == model.support_.size
    assert model.decision_function(X[:5]).shape == (5, 4)
    assert model.score(X[450:], labels[450:]) > 0.75


def test_random_nodes_keep_the_primal_vector():
    X, y = nonlinear_problem(400, d=3, seed=10)
    model = SparseELMClassifier(hidden="sigmoid", n_hidden=100, C=10, random_state=0)
    model.fit(X[:300], y[:300])
    assert model.coef_.shape == (100, 1)
    H = model.hidden_layer_.transform(X[300:]).astype(np.float64)
    np.testing.assert_allclose(
        -model.decision_function(X[300:]), H @ model.coef_[:, 0], rtol=1e-9, atol=1e-9
    )
    assert model.score(X[300:], y[300:]) > 0.85


@pytest.mark.parametrize(
    "param, value",
    [
        ("C", 0.0),
        ("sigma", -1.0),
        ("n_hidden", 0),
        ("tol", 0.0),
        ("cache_size", 0),
        ("kernel", "rbf"),
    ],
)
def test_bad_parameters_are_named(param, value):
    X, y = nonlinear_problem(50, seed=11)
    with pytest.raises(ValueError, match=f"'{param}' parameter"):
        SparseELMClassifier(**{param: value}).fit(X, y)


def test_one_class_is_an_error_and_any_two_labels_work():
    X, y = nonlinear_problem(100, seed=12)
    with pytest.raises(ValueError, match="at least 2 classes"):
        SparseELMClassifier().fit(X, np.ones(100))
    for labels in (np.where(y == 1, "yes", "no"), np.where(y == 1, 7, -3)):
        model = SparseELMClassifier(sigma=0.5, C=10).fit(X, labels)
        assert set(model.predict(X)) <= set(labels) and model.score(X, labels) > 0.9


@pytest.mark.parametrize("C", [10.0, 100.0])
def test_shrinking_and_a_small_cache_change_nothing_but_speed(C):
    # 2,000 rows and a 1 MB cache (131 columns): evictions, compaction of cached
    # columns on shrinking, extension of partial columns and rebuilds all happen
    X, y = nonlinear_problem(2000, d=4, seed=13)
    t = np.where(y == 1, 1.0, -1.0)
    full, _, ok_full, g_full = solve_kernel_dual(
        X, t, kernel=GAUSSIAN, C=C, shrinking=False, cache_size=1000, pair_steps=False
    )
    shrunk, n_iter, ok, g = solve_kernel_dual(
        X, t, kernel=GAUSSIAN, C=C, shrinking=True, cache_size=1
    )
    assert ok and ok_full and n_iter > 1000  # at least one shrinking round
    # two-variable steps (the default, above) against one-variable steps: same optimum
    exact = GAUSSIAN.block_matvec(X, X, shrunk * t) * t - 1.0
    np.testing.assert_allclose(g, exact, rtol=1e-9, atol=1e-9)
    assert kkt_violation(shrunk, exact, C) <= 1e-3
    obj = 0.5 * shrunk @ (exact + 1.0) - shrunk.sum()
    obj_full = 0.5 * full @ (g_full + 1.0) - full.sum()
    assert obj == pytest.approx(obj_full, rel=1e-5)


@pytest.mark.parametrize("hidden", [None, "sigmoid"])
def test_fit_path_warm_starts_and_matches_separate_fits(hidden):
    # pairs of about 1,300 rows: more than TAIL_SIZE, so that the steps are not all
    # spent on one exact tail solve (which would make warm and cold starts alike)
    X, y = nonlinear_problem(2300, d=3, n_classes=3, seed=14)
    Cs = [10.0, 0.5, 2.0]
    base = SparseELMClassifier(hidden=hidden, n_hidden=60, sigma=0.5, random_state=0)
    path = base.fit_path(X[:2000], y[:2000], Cs)
    assert [m.C for m in path] == Cs
    steps_path = steps_separate = 0
    for model, C in zip(path, Cs):
        single = clone(base).set_params(C=C).fit(X[:2000], y[:2000])
        assert np.all(model.kkt_violation_ <= 1e-3)
        np.testing.assert_allclose(model.objective_, single.objective_, rtol=1e-4)
        agree = np.mean(model.predict(X[2000:]) == single.predict(X[2000:]))
        assert agree >= 0.99
        steps_path += model.n_iter_.sum()
        steps_separate += single.n_iter_.sum()
    if hidden is None:
        assert steps_path < steps_separate
    # (random nodes: pairs this small end in one exact tail solve after TAIL_PASSES
    # passes, warm or cold; the solver's warm start is checked on its own below)


def test_explicit_solver_warm_start_takes_fewer_passes():
    X, y = nonlinear_problem(3000, d=3, seed=16)
    t = np.where(y == 1, 1.0, -1.0)
    H = HiddenLayer("sigmoid", 3, 60, seed=2).transform(X)
    previous, _, _, _ = solve_explicit_dual(H, t, C=5.0, tail_size=0)
    _, _, cold, ok_cold = solve_explicit_dual(H, t, C=10.0, tail_size=0)
    _, _, warm, ok_warm = solve_explicit_dual(H, t, C=10.0, tail_size=0, alpha0=previous)
    assert ok_cold and ok_warm and warm < cold


def test_fit_path_rejects_bad_Cs():
    X, y = nonlinear_problem(60, seed=15)
    with pytest.raises(ValueError, match="Cs must be"):
        SparseELMClassifier().fit_path(X, y, [1.0, 0.0])


def test_pairs_on_threads_give_the_same_model():
    X, y = nonlinear_problem(700, d=3, n_classes=4, seed=16)
    one = SparseELMClassifier(sigma=0.5, C=5, n_threads=1).fit(X, y)
    two = SparseELMClassifier(sigma=0.5, C=5, n_threads=2).fit(X, y)
    np.testing.assert_array_equal(one.support_, two.support_)
    np.testing.assert_array_equal(one.dual_coef_, two.dual_coef_)
    np.testing.assert_array_equal(one.n_iter_, two.n_iter_)


def test_a_passed_gradient_is_the_exact_one_and_reaches_the_same_optimum():
    X, t, Q = _gaussian_problem(5, n=300)
    alpha, _, _, g = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=1.0)
    np.testing.assert_allclose(g, Q @ alpha - 1.0, rtol=0, atol=1e-10)
    recomputed, _, ok1, g1 = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=10.0, alpha0=alpha)
    passed, _, ok2, g2 = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=10.0, alpha0=alpha, gradient0=g)
    assert ok1 and ok2 and kkt_violation(passed, Q @ passed - 1.0, 10.0) <= 1e-3
    assert dual_objective(Q, passed) == pytest.approx(dual_objective(Q, recomputed), rel=1e-4)
    np.testing.assert_allclose(g2, Q @ passed - 1.0, rtol=0, atol=1e-9)
    # a smaller C clips alpha0: the gradient is carried to the clipped alpha exactly
    clipped, _, ok3, g3 = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=0.5, alpha0=alpha, gradient0=g)
    fresh, _, ok4, _ = solve_kernel_dual(X, t, kernel=GAUSSIAN, C=0.5, alpha0=alpha)
    assert ok3 and ok4
    np.testing.assert_allclose(g3, Q @ clipped - 1.0, rtol=0, atol=1e-9)
    assert dual_objective(Q, clipped) == pytest.approx(dual_objective(Q, fresh), rel=1e-4)
    # and from another alpha than alpha0 (a path's predictor moves alpha0)
    moved = np.where(alpha >= 1.0, 10.0, alpha)
    predicted, _, ok5, g5 = solve_kernel_dual(
        X, t, kernel=GAUSSIAN, C=10.0, alpha0=moved, gradient0=g, gradient0_alpha=alpha
    )
    assert ok5 and kkt_violation(predicted, Q @ predicted - 1.0, 10.0) <= 1e-3
    np.testing.assert_allclose(g5, Q @ predicted - 1.0, rtol=0, atol=1e-9)


@pytest.mark.parametrize("C, sigma", [(1.0, 0.5), (10.0, 1.0)])
def test_the_helper_thread_changes_nothing_but_speed(C, sigma):
    # more rows than HELPER_MIN_ROWS, 6 features (a remainder after the four-feature
    # passes), a 5 MB cache (evictions, extended columns), shrinking, and variables
    # reaching C (G_bar's updates, used by the rebuilds): every pass the helper splits,
    # and every decision, must come out the same to the bit
    X, y = nonlinear_problem(HELPER_MIN_ROWS + 500, d=6, seed=21)
    t = np.where(y == 1, 1.0, -1.0)
    runs = {}
    for helper in (False, True):
        info = {}
        runs[helper] = solve_kernel_dual(
            X,
            t,
            kernel=Kernel("gaussian", sigma=sigma),
            C=C,
            cache_size=5,
            helper=helper,
            info=info,
        )
        assert info["helper"] == int(helper)
        assert info["shrinks"] > 0 and info["g_bar_updates"] > 0
    (alone, n_alone, ok_alone, g_alone), (helped, n_helped, ok_helped, g_helped) = (
        runs[False],
        runs[True],
    )
    assert ok_alone and ok_helped and n_alone == n_helped
    np.testing.assert_array_equal(helped, alone)
    np.testing.assert_array_equal(g_helped, g_alone)
    assert not [th for th in threading.enumerate() if th.name == "elmscale-solver-helper"]


def test_the_helper_thread_follows_the_thread_budget():
    X, y = nonlinear_problem(HELPER_MIN_ROWS, d=3, seed=22)
    t = np.where(y == 1, 1.0, -1.0)
    for n_threads in (1, 2):
        info = {}
        with thread_budget(n_threads) as granted:
            solve_kernel_dual(X, t, kernel=GAUSSIAN, C=1.0, info=info)
        assert info["helper"] == int(granted >= 2)
    info = {}
    with thread_budget(2):
        solve_kernel_dual(
            X[: HELPER_MIN_ROWS - 1], t[: HELPER_MIN_ROWS - 1], kernel=GAUSSIAN, C=1.0, info=info
        )
    assert info["helper"] == 0  # too small to gain from one


def test_a_polynomial_kernel_on_unscaled_features_gets_float64_columns_and_converges():
    # features near 100: (1 + u.v)^2 near 4e8, which float32 columns round by about 24
    rng = np.random.default_rng(0)
    X = 100 + rng.normal(size=(80, 2))
    t = np.where(rng.integers(0, 2, 80) == 1, 1.0, -1.0)
    kernel = Kernel("polynomial", degree=2)
    assert KernelSolverState(X, t, kernel, 1.0).cols.dtype == np.float64
    assert KernelSolverState(X / 100, t, kernel, 1.0).cols.dtype == np.float32
    assert KernelSolverState(X, t, GAUSSIAN, 1.0).cols.dtype == np.float32
    assert column_dtype(1e4, 1e-3) == np.float64 and column_dtype(1e3, 1e-3) == np.float32
    alpha, n_iter, converged, g = solve_kernel_dual(X, t, kernel=kernel, C=1.0)
    X32 = X.astype(np.float32)
    Q = kernel.block(X32, X32) * np.outer(t, t)
    exact = Q @ alpha - 1.0
    assert converged and kkt_violation(alpha, exact, 1.0) <= 1e-3
    reference = box_qp(Q, -np.ones(80), 1.0, np.zeros(80), 1e-4)
    assert dual_objective(Q, alpha) == pytest.approx(dual_objective(Q, reference), rel=1e-6)


@pytest.mark.parametrize("C", [0.1, 1.0, 100.0])
def test_the_dense_solver_reaches_the_kernel_solvers_optimum(C):
    """Small problems are solved on a kept K in one compiled call (``solve_dense_dual``):
    the same optimum as the cached-column solver (objective to 1e-4 relative, exact KKT
    within tol), also on a pair's rows read in place from a larger K."""
    from elmscale.solvers.dense_dual import solve_dense_dual

    X, y = nonlinear_problem(400, d=3, seed=21)
    t = np.where(y == 1, 1.0, -1.0)
    kernel = Kernel("gaussian", sigma=0.5)
    K = kernel.block(X.astype(np.float32), X.astype(np.float32))
    Q = np.outer(t, t) * K
    ref, _, ref_ok, _ = solve_kernel_dual(X, t, kernel=kernel, C=C)
    alpha, steps, ok, g = solve_dense_dual(K, t, C=C)
    assert ok and ref_ok and steps > 0
    np.testing.assert_allclose(g, Q @ alpha - 1.0, atol=1e-10)
    assert kkt_violation(alpha, g, C) <= 1e-3
    f, f_ref = dual_objective(Q, alpha), dual_objective(Q, ref)
    assert abs(f - f_ref) <= 1e-4 * abs(f_ref)
    # a subset of rows read through ``rows`` equals the same rows' K copied out
    rows = np.flatnonzero(np.arange(400) % 3 != 0)
    sub, _, _, _ = solve_dense_dual(K, t[rows], C=C, rows=rows)
    copied, _, _, _ = solve_dense_dual(K[np.ix_(rows, rows)], t[rows], C=C)
    np.testing.assert_array_equal(sub, copied)
    with pytest.raises(ValueError, match="square kernel matrix"):
        solve_dense_dual(K[:10], t, C=C)


def test_the_dense_solver_solves_many_pairs_in_one_call_as_one_by_one():
    """``solve_dense_duals`` (a small fit's one-vs-one pairs in one compiled call) gives
    each pair what ``solve_dense_dual`` gives it alone, to the bit, steps and gradient too;
    rows outside K are refused."""
    from elmscale.solvers.dense_dual import solve_dense_dual, solve_dense_duals

    X, _ = nonlinear_problem(300, d=4, seed=5)
    K = Kernel("gaussian", sigma=0.7).block(X, X)
    y = np.arange(300) % 3
    problems = [
        (rows, np.where(y[rows] == a, 1.0, -1.0))
        for a, b in ((0, 1), (0, 2), (1, 2))
        for rows in [np.flatnonzero((y == a) | (y == b))]
    ]
    together = solve_dense_duals(K, problems, C=10.0, tol=1e-3, max_iter=-1)
    for (rows, t), (alpha, steps, ok, g) in zip(problems, together):
        one = solve_dense_dual(K, t, C=10.0, rows=rows)
        np.testing.assert_array_equal(alpha, one[0])
        np.testing.assert_array_equal(g, one[3])
        assert (steps, ok) == (one[1], one[2]) and steps > 0 and ok
    capped = solve_dense_duals(K, problems, C=10.0, tol=1e-3, max_iter=3)
    assert [steps for _, steps, _, _ in capped] == [3, 3, 3]
    assert not any(ok for _, _, ok, _ in capped)
    with pytest.raises(ValueError, match="rows of K"):
        solve_dense_duals(K, [(np.array([0, 300]), np.array([1.0, -1.0]))], C=1.0)


def test_a_small_fit_and_a_large_fit_path_agree():
    """A fit below ``DENSE_ROWS`` rows (the dense solver) and the same problem through the
    cached-column solver give the same predictions and support vectors, up to tol."""
    from elmscale.models.sparse_elm_pairs import DENSE_ROWS

    X, y = nonlinear_problem(600, d=4, n_classes=3, seed=4)
    assert X.shape[0] <= DENSE_ROWS
    dense = SparseELMClassifier(sigma=0.7, C=10.0).fit(X, y)
    # cache_size below K's size: no K kept, the cached-column solver
    cached = SparseELMClassifier(sigma=0.7, C=10.0, cache_size=0.5).fit(X, y)
    assert np.all(dense.converged_) and np.all(cached.converged_)
    np.testing.assert_allclose(dense.objective_, cached.objective_, rtol=1e-4)
    assert np.mean(dense.predict(X) == cached.predict(X)) >= 0.99
