"""FELM / FKELM (feature selection inside the sparse ELM) and the memorization-generalization
kernel: the equalities the design rests on (FELM without selection is the sparse ELM, a
tau = 0 kernel is the gaussian, warm re-solves equal cold ones, the dual screen rejects
only flips a solve would reject, block sizes and threads do not change the result), the
objective path, psi's two scales (the absolute one is the model before the relative one
existed; the relative one follows the objective's units and walks a grid from many
features to one), and the estimator's interface (selector, model files, bad input)."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.pipeline import Pipeline
from sklearn.svm import SVC

from elmscale.features.kernels import Kernel
from elmscale.features.layers import HiddenLayer
from elmscale.io import model_files
from elmscale.models.elm import ELMClassifier
from elmscale.models.felm import FELMClassifier, FKELMClassifier
from elmscale.models.sparse_elm import SparseELMClassifier
from elmscale.models.sparse_elm_pairs import fit_binary
from elmscale.solvers.feature_flips import (
    ExplicitMaskProblem,
    KernelMaskProblem,
    evaluate_block,
    relative_psi_unit,
    select_features,
)
from elmscale.solvers.sparse_dual import kkt_violation, solve_kernel_dual


def relevant_two(n=160, d=12, seed=0):
    """Labels from features 0 and 1 only; the other columns are noise in [-1, 1]."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    t = np.where(X[:, 0] + X[:, 1] ** 2 - 0.3 > 0, 1.0, -1.0)
    return X, t


def graded(n=200, d=16, seed=0, flip=0.05):
    """A linear rule on features 0-5 with weights 1 .. 0.2 (each less useful than the one
    before), 5 % of the labels flipped; the other columns are noise in [-1, 1]."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    w = np.zeros(d)
    w[:6] = (1.0, 0.8, 0.6, 0.45, 0.3, 0.2)
    t = np.where(X @ w > 0, 1.0, -1.0)
    t[rng.random(n) < flip] *= -1
    return X, t


def felm_problem(X, t, psi=0.0, C=1.0, n_hidden=100, seed=3):
    layer = HiddenLayer("sigmoid", X.shape[1], n_hidden, seed=seed)
    return ExplicitMaskProblem(X, t, layer, C=C, psi=psi)


def fkelm_problem(X, t, psi=0.0, C=4.0, tau=0.5):
    return KernelMaskProblem(X, t, Kernel("mg", sigma=3.0, sigma_star=12.0, tau=tau), C=C, psi=psi)


# -- the kernel ---------------------------------------------------------------------------


def test_mg_kernel_with_tau_zero_is_the_gaussian_kernel():
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(30, 5)), rng.normal(size=(25, 5))
    gaussian = Kernel("gaussian", sigma=1.3).block(A, B)
    mg = Kernel("mg", sigma=1.3, sigma_star=40.0, tau=0.0).block(A, B)
    np.testing.assert_allclose(mg, gaussian, rtol=0, atol=1e-15)


def test_mg_kernel_is_the_weighted_sum_of_two_gaussians():
    rng = np.random.default_rng(2)
    A, B = rng.normal(size=(20, 4)), rng.normal(size=(15, 4))
    A32, B32 = A.astype(np.float32).astype(float), B.astype(np.float32).astype(float)
    d2 = ((A32[:, None, :] - B32[None, :, :]) ** 2).sum(-1)
    expected = 0.7 * np.exp(-d2 / (2 * 1.1**2)) + 0.3 * np.exp(-d2 / (2 * 0.2**2))
    kernel = Kernel("mg", sigma=1.1, sigma_star=0.2, tau=0.3)
    np.testing.assert_allclose(kernel.block(A, B), expected, rtol=1e-12, atol=1e-14)
    coef = rng.normal(size=15)
    np.testing.assert_allclose(kernel.block_matvec(A, B, coef), expected @ coef, atol=1e-12)
    assert Kernel.from_dict(kernel.to_dict()) == kernel


def test_sparse_elm_solver_takes_the_mg_kernel_from_rows_and_from_a_gram():
    X, t = relevant_two(n=120, d=4)
    kernel = Kernel("mg", sigma=0.7, sigma_star=3.0, tau=0.4)
    from_rows, *_ = solve_kernel_dual(X, t, kernel=kernel, C=2.0, tol=1e-6)
    from_gram, *_ = solve_kernel_dual(X, t, kernel=kernel, C=2.0, tol=1e-6, gram=kernel.block(X, X))
    np.testing.assert_allclose(from_rows, from_gram, atol=1e-4)
    # and tau = 0 is the gaussian problem's solution
    g0, *_ = solve_kernel_dual(X, t, kernel=Kernel("gaussian", sigma=0.7), C=2.0, tol=1e-6)
    m0, *_ = solve_kernel_dual(
        X, t, kernel=Kernel("mg", sigma=0.7, sigma_star=3.0, tau=0.0), C=2.0, tol=1e-6
    )
    np.testing.assert_allclose(m0, g0, atol=1e-4)  # float32 gaussian columns, float64 mg


@pytest.mark.parametrize(
    "bad, message",
    [({"tau": 1.5}, "tau"), ({"sigma_star": 0.0}, "sigma_star"), ({"sigma": -1.0}, "sigma")],
)
def test_mg_kernel_rejects_bad_parameters(bad, message):
    params = {"sigma": 1.0, "sigma_star": 2.0, "tau": 0.5, **bad}
    with pytest.raises(ValueError, match=message):
        Kernel("mg", **params)


# -- the selection's equalities -------------------------------------------------------------


def test_felm_without_selection_is_the_sparse_elm_on_the_same_layer():
    X, t = relevant_two()
    y = np.where(t > 0, "a", "b")  # t = +1 is the first class, as the sparse ELM pairs it
    felm = FELMClassifier(
        C=1.0, psi=0.0, n_hidden=100, initial_selection=False, max_sweeps=0, random_state=5
    ).fit(X, y)
    sparse = SparseELMClassifier(hidden="sigmoid", n_hidden=100, C=1.0, random_state=5).fit(X, y)
    assert felm.n_features_selected_ == X.shape[1]
    assert felm.hidden_layer_ == sparse.hidden_layer_
    # the same dual: the sparse ELM's solution is optimal for FELM's problem to tol
    layer = felm.hidden_layer_
    H = layer.transform(X).astype(np.float64)
    problem = felm_problem(X, t, n_hidden=100)
    problem.weights, problem.biases = layer.weights.astype(float), layer.biases.astype(float)
    point = select_features(problem, max_sweeps=0, initial_selection=False).point
    reference = fit_binary(
        X, t, feature_map=layer, C=1.0, tol=1e-3, cache_size=10, shrinking=True, max_iter=-1
    )
    Q_alpha = lambda a: H @ (H.T @ (a * t)) * t  # noqa: E731
    assert kkt_violation(point.alpha, Q_alpha(point.alpha) - 1.0, 1.0) <= 2e-3
    assert kkt_violation(reference.alpha, Q_alpha(reference.alpha) - 1.0, 1.0) <= 2e-3
    # primal (FELM) = -dual (sparse ELM) at the optimum, to the solvers' tolerance
    assert felm.objective_[0] == pytest.approx(-sparse.objective_[0], rel=2e-3)
    np.testing.assert_allclose(felm.coef_[:, 0], sparse.coef_[:, 0], atol=0.05)
    assert np.mean(felm.predict(X) == sparse.predict(X)) >= 0.99


@pytest.mark.parametrize("make", [felm_problem, fkelm_problem])
def test_warm_started_re_solve_equals_a_cold_one(make, monkeypatch):
    from elmscale.solvers import feature_flips

    # the iterative solvers, which take the warm start (the dense QP always starts at zero)
    monkeypatch.setattr(feature_flips, "DENSE_MAX_ROWS", 0)
    X, t = relevant_two()
    problem = make(X, t)
    problem.kkt_tol = 1e-6
    full = np.ones(X.shape[1], bool)
    current = problem.solve(full, problem.pre(full), None)
    for j in (0, 5, 11):
        mask = full.copy()
        mask[j] = False
        pre = problem.moved(current.pre, j, False)
        np.testing.assert_allclose(pre, problem.pre(mask), atol=1e-10)  # the rank-1 move
        warm = problem.solve(mask, pre, current.alpha)
        cold = problem.solve(mask, pre, None)
        assert warm.objective == pytest.approx(cold.objective, rel=1e-5)
        np.testing.assert_allclose(warm.alpha, cold.alpha, atol=1e-3)


@pytest.mark.parametrize("make", [felm_problem, fkelm_problem])
@pytest.mark.parametrize("psi", [0.3, 1.0])
def test_objective_path_strictly_decreases_and_ends_at_the_model(make, psi):
    X, t = relevant_two()
    # from every feature (no score-based drop), so that flips must remove the noise
    result = select_features(make(X, t, psi=psi), tol=1e-6, max_sweeps=10, initial_selection=False)
    path = result.objective_path
    assert path.size >= 2, "this problem should keep at least one flip"
    assert np.all(np.diff(path) < -1e-6)
    assert path[-1] == result.point.objective
    assert result.converged
    assert result.stats["kept"] == path.size - 1


def test_selection_scores_rows_with_the_mapping_prediction_uses():
    """The selection's node values and kernel values come from the layer and the kernel
    that score the fitted model: its decisions on the training rows are the model's."""
    X, t = relevant_two()
    felm = felm_problem(X, t, psi=0.3)
    point = select_features(felm, max_sweeps=3).point
    here = felm.features(point.pre) @ felm.weights_of(point)
    there = felm.layer.scores(X * point.mask, felm.weights_of(point))
    np.testing.assert_allclose(here, there, rtol=1e-4, atol=1e-4)
    fkelm = fkelm_problem(X, t, psi=0.3)
    point = select_features(fkelm, max_sweeps=3).point
    u, Xm = fkelm.weights_of(point), X[:, point.mask]
    here = fkelm.gram(point.pre) @ u
    np.testing.assert_allclose(here, fkelm.kernel.block_matvec(Xm, Xm, u), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("make", [felm_problem, fkelm_problem])
def test_dual_screen_rejects_only_flips_a_solve_rejects(make):
    X, t = relevant_two()
    problem = make(X, t, psi=0.3)
    full = np.ones(X.shape[1], bool)
    current = problem.solve(full, problem.pre(full), None)
    screened = 0
    for j in range(X.shape[1]):
        (candidate,) = evaluate_block([j], problem=problem, current=current, tol=1e-6)[:1]
        if candidate.screened:
            screened += 1
            mask = full.copy()
            mask[j] = False
            solved = problem.solve(mask, problem.moved(current.pre, j, False), current.alpha)
            assert solved.objective >= current.objective - 1e-6
    assert screened >= 1


@pytest.mark.parametrize("make", [felm_problem, fkelm_problem])
def test_block_sizes_do_not_change_the_selection(make):
    X, t = relevant_two()
    one = select_features(make(X, t, psi=0.2), block_size=1, n_blocks=1)
    many = select_features(make(X, t, psi=0.2), block_size=3, n_blocks=3)
    np.testing.assert_array_equal(one.point.mask, many.point.mask)
    np.testing.assert_array_equal(one.objective_path, many.objective_path)


def test_fkelm_finds_the_two_relevant_features():
    X, t = relevant_two(n=200)
    model = FKELMClassifier(C=4.0, psi=0.5, sigma=0.8, tau=0.5).fit(X, t)
    assert model.get_support(indices=True).tolist() == [0, 1]
    assert model.score(X, t) > 0.9


# -- psi's scale -----------------------------------------------------------------------------

#: the models of relevant_two() before psi_scale existed (psi then always absolute): the
#: kept features and objective_path_ of each, recorded with the code of commit 230f22b
BEFORE_PSI_SCALE = [
    (
        lambda: FELMClassifier(n_hidden=60, psi=0.2, random_state=1),
        [0, 1, 2, 4, 9, 11],
        [50.29911576608792, 50.15090371839071, 49.704080327157534, 49.68531283659132]
        + [49.13526642668579, 49.00769777999942, 48.96689654108933, 48.85420501654972],
    ),
    (
        lambda: FELMClassifier(
            n_hidden=60, psi=0.05, C=4.0, initial_selection=False, random_state=2
        ),
        [0, 2, 4, 5, 6, 7, 9, 10, 11],
        [169.10727676158373, 166.71200341053841, 165.96318374459995, 165.7564552364686],
    ),
    (
        lambda: FKELMClassifier(C=4.0, psi=0.3, sigma=0.8),
        [0, 1],
        [191.96379875927548, 114.96191411557095],
    ),
    (
        lambda: FKELMClassifier(C=1.0, psi=0.1, sigma=2.0, tau=0.2, initial_selection=False),
        [0, 1, 8],
        [65.25929448687688, 64.55868295248442, 64.08716848545929, 63.37439216717146]
        + [62.61249496910841, 62.43451253424056, 61.73893382023639, 61.68269955663405]
        + [61.04471375561656, 60.619987946308456, 60.545300005557046, 59.75181745669469],
    ),
]


@pytest.mark.parametrize("case", range(len(BEFORE_PSI_SCALE)))
def test_the_absolute_scale_is_the_model_before_the_relative_scale(case):
    make, kept, path = BEFORE_PSI_SCALE[case]
    X, t = relevant_two()
    model = make().set_params(psi_scale="absolute", n_threads=1).fit(X, t)
    assert model.get_support(indices=True).tolist() == kept
    # the recorded path came from one CPU's kernels: FELM's random nodes are float32, whose
    # pre-activations (d + 2 roundings) move the objective by that relative amount under
    # other kernels (1.5e-8 under OpenBLAS Sandybridge and numba x86-64-v2: issue 49);
    # FKELM's kernel values are float64
    random_nodes = isinstance(model, FELMClassifier)
    rtol = (X.shape[1] + 2) * 2.0**-24 if random_nodes else 1e-9
    np.testing.assert_allclose(model.objective_path_, path, rtol=rtol)
    assert model.psi_effective_.tolist() == [model.psi]


@pytest.mark.parametrize("cls", [FELMClassifier, FKELMClassifier])
def test_relative_psi_is_psi_times_the_objective_on_every_feature_over_sqrt_d(cls):
    X, t = graded()
    kw = {"n_hidden": 60, "random_state": 1} if cls is FELMClassifier else {"sigma": 2.0}
    psi = 0.3
    plain = cls(**kw, psi=0.0, initial_selection=False, max_sweeps=0).fit(X, t)
    f0 = plain.objective_[0]
    assert relative_psi_unit(f0, X.shape[1]) == pytest.approx(f0 / 4.0)  # sqrt(16)
    relative = cls(**kw, psi=psi).fit(X, t)
    absolute = cls(**kw, psi=psi * f0 / 4.0, psi_scale="absolute").fit(X, t)
    np.testing.assert_allclose(relative.psi_effective_, [psi * f0 / 4.0], rtol=1e-12)
    np.testing.assert_array_equal(relative.support_mask_, absolute.support_mask_)
    np.testing.assert_allclose(relative.objective_path_, absolute.objective_path_, rtol=1e-12)


@pytest.mark.parametrize("cls", [FELMClassifier, FKELMClassifier])
def test_kept_features_fall_along_the_relative_grid_from_many_to_one(cls):
    """psi = 2^-8 .. 2^4 on a problem whose six useful features are graded: the kept count
    never rises and ends at one feature (measured: FELM 9 -> 1, FKELM 7 -> 1); the six
    useful features are kept at the smallest psi, and at psi = 1 only the most useful."""
    X, t = graded()
    kw = {"n_hidden": 60, "random_state": 1} if cls is FELMClassifier else {"sigma": 2.0}
    masks = [cls(**kw, psi=2.0**k).fit(X, t).support_mask_ for k in range(-8, 5)]
    kept = [int(m.sum()) for m in masks]
    assert kept[0] >= 6 and kept[-1] == 1
    assert all(a >= b for a, b in zip(kept, kept[1:])), kept
    assert all(masks[0][:6])
    assert 1 <= masks[8].sum() and set(np.flatnonzero(masks[8])) <= {0, 1}  # psi = 2^0


@pytest.mark.parametrize("make", [felm_problem, fkelm_problem])
def test_the_relative_scale_follows_the_objectives_units(make):
    """C x 4 with the node outputs / 2 (the kernel / 4) multiplies every mask's objective by
    4 (beta = 2 gamma): the relative scale selects the same features, the absolute one
    (the same psi now weighs 4x less) keeps more."""
    X, t = graded()

    def scaled(c):
        problem = make(X, t, C=c * (1.0 if make is felm_problem else 4.0))
        if make is felm_problem:
            features = problem.features
            problem.features = lambda pre: features(pre) / np.sqrt(c)
        else:
            gram = problem.gram
            problem.gram = lambda pre: gram(pre) / c
        return problem

    found = {}
    for scale, psi in (("relative", 0.25), ("absolute", 2.0)):
        for c in (1.0, 4.0):
            problem = scaled(c)
            problem.psi = psi
            found[scale, c] = select_features(problem, psi_scale=scale)
    one, four = found["relative", 1.0], found["relative", 4.0]
    np.testing.assert_array_equal(one.point.mask, four.point.mask)
    np.testing.assert_allclose(four.objective_path, 4.0 * one.objective_path, rtol=1e-6)
    assert four.psi_effective == pytest.approx(4.0 * one.psi_effective, rel=1e-9)
    # measured: FELM 7 and 11 kept features, FKELM 10 and 14
    assert found["absolute", 4.0].point.mask.sum() >= found["absolute", 1.0].point.mask.sum() + 3


@pytest.mark.parametrize("make", [felm_problem, fkelm_problem])
def test_a_relative_selection_leaves_the_problems_psi_as_given(make):
    X, t = graded()
    problem = make(X, t, C=1.0)
    problem.psi = 0.25
    first = select_features(problem, psi_scale="relative")
    assert problem.psi == 0.25
    second = select_features(problem, psi_scale="relative")
    assert second.psi_effective == first.psi_effective != 0.25
    np.testing.assert_array_equal(second.point.mask, first.point.mask)


def test_each_pair_prices_features_in_its_own_objectives_units():
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(150, 6))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 2], [-0.4, 0.4])  # three classes
    model = FKELMClassifier(C=2.0, psi=0.5, sigma=0.8, tau=0.3).fit(X, y)
    plain = FKELMClassifier(
        C=2.0, psi=0.0, sigma=0.8, tau=0.3, initial_selection=False, max_sweeps=0
    ).fit(X, y)
    expected = 0.5 * plain.objective_ / np.sqrt(6)
    np.testing.assert_allclose(model.psi_effective_, expected, rtol=1e-12)
    assert np.unique(model.psi_effective_).size == 3


def _as_written_before_psi_scale(path):
    """Rewrite a model file as the release before psi_scale wrote it: no psi_scale parameter,
    no psi_effective_ array (checksums made anew)."""
    with zipfile.ZipFile(path) as zf:
        members = {name: zf.read(name) for name in zf.namelist() if name != "SHA256SUMS"}
    meta = json.loads(members["metadata.json"])
    node = meta["model"]
    del node["params"]["psi_scale"]
    members.pop(node["arrays"].pop("psi_effective_"))
    members["metadata.json"] = json.dumps(meta).encode()
    sums = "".join(f"{hashlib.sha256(v).hexdigest()}  {k}\n" for k, v in members.items())
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr("SHA256SUMS", sums)
    path.write_bytes(buffer.getvalue())


@pytest.mark.parametrize(
    "make",
    [
        lambda: FELMClassifier(n_hidden=40, psi=0.2, psi_scale="absolute", random_state=0),
        lambda: FKELMClassifier(C=4.0, psi=0.3, psi_scale="absolute", sigma=0.8),
    ],
)
def test_a_model_file_written_before_psi_scale_loads_and_predicts_the_same(make, tmp_path):
    X, t = relevant_two()
    model = make().fit(X, t)
    path = tmp_path / "old.elm"
    model.save(path)
    _as_written_before_psi_scale(path)
    assert "psi_scale" not in zipfile.ZipFile(path).read("metadata.json").decode()
    loaded = model_files.load(path)
    np.testing.assert_array_equal(loaded.support_mask_, model.support_mask_)
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    # its psi meant the absolute scale then: a refit of the loaded parameters selects the same
    assert loaded.get_params()["psi_scale"] == "absolute"
    refit = clone(loaded).fit(X, t)
    np.testing.assert_array_equal(refit.support_mask_, model.support_mask_)


# -- the estimators --------------------------------------------------------------------------


def test_threads_and_one_thread_give_the_same_model():
    X, t = relevant_two()
    a = FELMClassifier(n_hidden=60, psi=0.2, random_state=1, n_threads=1).fit(X, t)
    b = FELMClassifier(n_hidden=60, psi=0.2, random_state=1, n_threads=2).fit(X, t)
    np.testing.assert_array_equal(a.support_mask_, b.support_mask_)
    np.testing.assert_array_equal(a.objective_path_, b.objective_path_)
    np.testing.assert_array_equal(a.coef_, b.coef_)


def test_ray_pieces_give_the_local_model(ray_session):
    X, t = relevant_two(n=100)
    local = FKELMClassifier(C=4.0, psi=0.3, sigma=0.8).fit(X, t)
    remote = FKELMClassifier(C=4.0, psi=0.3, sigma=0.8).fit(X, t, ray_address=ray_session)
    np.testing.assert_array_equal(local.support_mask_, remote.support_mask_)
    np.testing.assert_array_equal(local.objective_path_, remote.objective_path_)
    np.testing.assert_array_equal(local.dual_coef_, remote.dual_coef_)


def test_selector_in_a_pipeline_and_transform_keeps_the_columns():
    X, t = relevant_two()
    pipe = Pipeline([("select", FKELMClassifier(C=4.0, psi=0.5, sigma=0.8)), ("svc", SVC())]).fit(
        X, t
    )
    selector = pipe.named_steps["select"]
    kept = selector.get_support(indices=True)
    np.testing.assert_array_equal(selector.transform(X), X[:, kept])
    assert pipe.score(X, t) > 0.8


@pytest.mark.parametrize(
    "make",
    [
        lambda: FELMClassifier(n_hidden=40, psi=0.2, random_state=0),
        lambda: FKELMClassifier(C=2.0, psi=0.2, sigma=0.8, tau=0.3),
    ],
)
def test_multiclass_pairs_select_their_own_features(make, tmp_path):
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(150, 6))
    y = np.digitize(X[:, 0] + 0.5 * X[:, 2], [-0.4, 0.4])  # three classes
    model = make().fit(X, y)
    assert model.pair_masks_.shape == (3, 6)
    np.testing.assert_array_equal(model.support_mask_, model.pair_masks_.any(axis=0))
    assert model.objective_path_.shape[0] == 3
    assert model.score(X, y) > 0.7
    # the model file keeps the masks: the loaded model predicts the same
    path = tmp_path / "model.elm"
    model.save(path)
    loaded = model_files.load(path)
    np.testing.assert_array_equal(loaded.pair_masks_, model.pair_masks_)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))


@pytest.mark.parametrize(
    "est, message",
    [
        (FELMClassifier(psi=-1.0), "psi"),
        (FELMClassifier(C=0.0), "'C'"),
        (FKELMClassifier(tau=2.0), "tau"),
        (FKELMClassifier(sigma_star_ratio=0.0), "sigma_star_ratio"),
        (FELMClassifier(resolve_start="lukewarm"), "resolve_start"),
        (FKELMClassifier(psi_scale="per-feature"), "psi_scale"),
    ],
)
def test_bad_parameters_name_themselves(est, message):
    X, t = relevant_two(n=40)
    with pytest.raises(ValueError, match=message):
        est.fit(X, t)


def test_one_class_is_an_error():
    X, _ = relevant_two(n=30)
    with pytest.raises(ValueError, match="at least 2 classes"):
        FELMClassifier().fit(X, np.zeros(30))


def test_max_sweeps_reached_warns_and_reports():
    X, t = relevant_two()
    with pytest.warns(Warning, match="max_sweeps"):
        model = FELMClassifier(
            n_hidden=60, psi=0.3, psi_scale="absolute", max_sweeps=1, random_state=0
        ).fit(X, t)
    assert not model.converged_[0]
    assert model.n_iter_[0] == 1


@pytest.mark.parametrize(
    "est",
    [FELMClassifier(n_hidden=20, max_sweeps=2), FKELMClassifier(max_sweeps=2)],
    ids=["FELM", "FKELM"],
)
def test_scikit_learn_estimator_checks(est):
    from sklearn.utils.estimator_checks import check_estimator

    check_estimator(est)


# -- command line and pipelines ----------------------------------------------------------------


@pytest.fixture()
def named_csv(tmp_path):
    """A CSV with a row-number column first (as colon.csv has), named gene columns and a
    label: the labels depend on gene_0 and gene_1 only."""
    X, t = relevant_two(n=120, d=6)
    header = "row," + ",".join(f"gene_{j}" for j in range(6)) + ",label"
    lines = [header] + [
        f"{i}," + ",".join(f"{v:.6f}" for v in x) + f",{int(c > 0)}"
        for i, (x, c) in enumerate(zip(X, t))
    ]
    path = tmp_path / "genes.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_cli_train_prints_the_kept_features_by_name(named_csv, tmp_path, capsys):
    from elmscale.app.cli import main

    metrics = tmp_path / "metrics.json"
    args = ["train", str(named_csv), str(tmp_path / "m.elm"), "--label", "label"]
    args += ["--estimator", "FKELMClassifier", "-p", "C=4", "-p", "psi=0.5", "-p", "sigma=0.8"]
    assert main([*args, "--metrics", str(metrics)]) == 0
    out = capsys.readouterr().out
    import json

    kept = json.loads(metrics.read_text())["kept_features"]
    assert f"kept {len(kept)} of 7 features: {', '.join(kept)}" in out
    assert {"gene_0", "gene_1"} <= set(kept)


def test_pipeline_features_pattern_on_a_csv_and_kept_features_in_metrics(named_csv, tmp_path):
    from elmscale.app.pipeline import load_pipeline
    from elmscale.app.runner import run_pipeline

    path = tmp_path / "felm.toml"
    path.write_text(
        f"""
[run]
name = "felm-test"
task = "train"
[data]
train = "{named_csv}"
label = "label"
features = "gene_*"
test_size = 0.25
[model]
estimator = "FKELMClassifier"
params = {{ C = 4.0, psi = 0.5, sigma = 0.8 }}
[output]
dir = "{tmp_path / "runs"}"
"""
    )
    lines = []
    metrics, run_dir = run_pipeline(load_pipeline(path), echo=lines.append, progress=False)
    assert set(metrics["kept_features"]) <= {f"gene_{j}" for j in range(6)}  # no "row"
    assert {"gene_0", "gene_1"} <= set(metrics["kept_features"])
    assert any(line.startswith("kept ") for line in lines)
    assert model_files.load(run_dir / "model.elm").n_features_in_ == 6


def test_the_sparse_elm_and_the_unified_elm_take_the_mg_kernel(tmp_path):
    X, t = relevant_two(n=120, d=4)
    for cls in (SparseELMClassifier, ELMClassifier):
        # the sparse ELM solved to 1e-6: two solves to the default KKT tol 1e-3 may end
        # 1e-3 apart in decision value (K's last-bit differences take other steps)
        solver = {"tol": 1e-6} if cls is SparseELMClassifier else {}
        mg = cls(kernel="mg", sigma=0.9, sigma_star_ratio=3.0, tau=0.0, C=2.0, **solver)
        mg.fit(X, t)
        gaussian = cls(kernel="gaussian", sigma=0.9, C=2.0, **solver).fit(X, t)
        np.testing.assert_allclose(
            mg.decision_function(X), gaussian.decision_function(X), atol=1e-3
        )
        model = cls(kernel="mg", sigma=0.9, sigma_star_ratio=3.0, tau=0.4, C=2.0).fit(X, t)
        assert model.score(X, t) > 0.85
        model.save(tmp_path / "mg.elm")
        loaded = model_files.load(tmp_path / "mg.elm")
        np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))


# -- the fused screen ---------------------------------------------------------------------


def screen_problem(X, t, kind):
    """A problem of each hidden kind (FELM) or kernel (FKELM, ``kernel-...``)."""
    if kind == "kernel-gaussian":
        return KernelMaskProblem(X, t, Kernel("gaussian", sigma=2.0), C=4.0, psi=0.1)
    if kind == "kernel-mg":
        mg = Kernel("mg", sigma=2.0, sigma_star=8.0, tau=0.6)
        return KernelMaskProblem(X, t, mg, C=4.0, psi=0.1)
    layer = HiddenLayer(kind, X.shape[1], 60, seed=5)
    return ExplicitMaskProblem(X, t, layer, C=4.0, psi=0.1)


@pytest.mark.parametrize(
    "kind",
    ["sigmoid", "sinusoid", "multiquadric", "gaussian", "kernel-gaussian", "kernel-mg"],
)
def test_the_fused_screen_bound_equals_the_stored_one(kind):
    """``screen_bound`` (the numba kernels of one pass) equals ``dual_bound`` on the
    stored moved quantity and values to 1e-12 relative, on random masks, candidates on
    and off, and duals with zeros; its margin covers the difference."""
    rng = np.random.default_rng(7)
    X, t = relevant_two(n=40, d=15, seed=3)
    problem = screen_problem(X, t, kind)
    for _ in range(4):
        mask = rng.random(X.shape[1]) < 0.6
        mask[0] = True
        current = problem.solve(mask, problem.pre(mask), None)
        alpha = current.alpha * (rng.random(current.alpha.size) < 0.7)
        alpha[rng.integers(alpha.size)] = 0.5  # some nonzero
        current = current._replace(alpha=alpha)
        for j in rng.choice(X.shape[1], 6, replace=False):
            on = not mask[j]
            flipped = mask.copy()
            flipped[j] = on
            stored = problem.dual_bound(flipped, problem.moved(current.pre, j, on), alpha)
            fused, margin = problem.screen_bound(current, int(j), on, int(flipped.sum()))
            assert fused == pytest.approx(stored, rel=1e-12, abs=1e-12)
            assert abs(fused - stored) <= margin


def test_the_dual_ascent_screen_is_a_lower_bound_that_only_rises():
    """``box_dual_ascent``: from a feasible dual, its value never falls below the start's
    and never rises above the box QP's optimum (weak duality: a valid screen)."""
    from elmscale.core.jit import box_dual_ascent
    from elmscale.solvers.sparse_dual import box_qp

    rng = np.random.default_rng(11)
    for n, C in ((30, 0.5), (51, 16.0)):
        H = rng.uniform(-1, 1, (n, 20))
        Q = (H @ H.T) * np.multiply.outer(t := rng.choice([-1.0, 1.0], n), t)
        start = rng.uniform(0, C, n) * (rng.random(n) < 0.6)
        optimum = box_qp(Q, -np.ones(n), C, np.zeros(n), 1e-12)
        best = optimum.sum() - 0.5 * optimum @ Q @ optimum
        before = start.sum() - 0.5 * start @ Q @ start
        last = -np.inf
        for passes in (0, 1, 4, 32, 200):
            value, scale = box_dual_ascent(Q, start, C, passes)
            assert before - 1e-9 <= value <= best + 1e-9
            assert value >= last - 1e-12
            assert 0.5 * abs(start @ Q @ start) <= scale or passes > 0
            last = value
        assert value > before  # (a random start is not the optimum)
