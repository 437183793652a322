"""Calibrated probabilities (``probability=True``): LIBSVM's design on every classifier.

The numerics are checked against literal transcriptions of LIBSVM's ``sigmoid_train``
and ``multiclass_probability`` (svm.cpp, written out below line for line); the estimators
on small binary and 3-class sets.

Where argmax of ``predict_proba`` cannot equal ``predict``: the sigmoids are fitted on
out-of-fold scores, apart from the decision rule, as SVC's.  With two classes the sigmoid
``1 / (1 + exp(A f + B))`` crosses 1/2 at ``f = -B / A`` instead of 0, so the two disagree
exactly on the rows whose decision value lies between 0 and ``-B / A`` (tested below);
with more classes the coupled (or normalised) sigmoids weigh each problem by its own
slope, so rows near a boundary between two classes can go either way.  Measured on the
sets here (``make_classification`` seeds 1-3, every family): 94.5-100 % agreement on 3
classes (96-100 % on seed 1, the tests' set; 93 % asserted), 98-100 % on 2 (98 % asserted).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from sklearn.datasets import make_classification
from sklearn.preprocessing import StandardScaler

import elmscale
from elmscale import (
    BRELMClassifier,
    ELMClassifier,
    FELMClassifier,
    FKELMClassifier,
    FLSASVMClassifier,
    GBRELMClassifier,
    GGBRELMClassifier,
    KBRELMClassifier,
    SparseELMClassifier,
)
from elmscale.linalg.calibration import (
    calibrated_proba,
    one_vs_rest_normalise,
    pairwise_coupling,
    platt_fit,
    sigmoid_predict,
)

FIXTURES = __import__("pathlib").Path(__file__).parent / "fixtures" / "models"


# -- LIBSVM, literally ---------------------------------------------------------------------


def libsvm_sigmoid_train(dec_values, labels):
    """svm.cpp's sigmoid_train, statement by statement."""
    l = len(dec_values)  # noqa: E741 - LIBSVM's name
    prior1 = sum(1.0 for i in range(l) if labels[i] > 0)
    prior0 = l - prior1
    max_iter, min_step, sigma, eps = 100, 1e-10, 1e-12, 1e-5
    hiTarget = (prior1 + 1.0) / (prior1 + 2.0)
    loTarget = 1 / (prior0 + 2.0)
    t = [0.0] * l
    A = 0.0
    B = math.log((prior0 + 1.0) / (prior1 + 1.0))
    fval = 0.0
    for i in range(l):
        t[i] = hiTarget if labels[i] > 0 else loTarget
        fApB = dec_values[i] * A + B
        if fApB >= 0:
            fval += t[i] * fApB + math.log(1 + math.exp(-fApB))
        else:
            fval += (t[i] - 1) * fApB + math.log(1 + math.exp(fApB))
    for _ in range(max_iter):
        h11 = sigma
        h22 = sigma
        h21 = g1 = g2 = 0.0
        for i in range(l):
            fApB = dec_values[i] * A + B
            if fApB >= 0:
                p = math.exp(-fApB) / (1.0 + math.exp(-fApB))
                q = 1.0 / (1.0 + math.exp(-fApB))
            else:
                p = 1.0 / (1.0 + math.exp(fApB))
                q = math.exp(fApB) / (1.0 + math.exp(fApB))
            d2 = p * q
            h11 += dec_values[i] * dec_values[i] * d2
            h22 += d2
            h21 += dec_values[i] * d2
            d1 = t[i] - p
            g1 += dec_values[i] * d1
            g2 += d1
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        stepsize = 1.0
        while stepsize >= min_step:
            newA = A + stepsize * dA
            newB = B + stepsize * dB
            newf = 0.0
            for i in range(l):
                fApB = dec_values[i] * newA + newB
                if fApB >= 0:
                    newf += t[i] * fApB + math.log(1 + math.exp(-fApB))
                else:
                    newf += (t[i] - 1) * fApB + math.log(1 + math.exp(fApB))
            if newf < fval + 0.0001 * stepsize * gd:
                A, B, fval = newA, newB, newf
                break
            stepsize = stepsize / 2.0
        if stepsize < min_step:
            break
    return A, B


def libsvm_multiclass_probability(k, r, *, eps=None, max_iter=None):
    """svm.cpp's multiclass_probability (r[i][j]: P(i | i or j)), statement by statement;
    ``eps`` / ``max_iter`` default to LIBSVM's (0.005 / k, max(100, k))."""
    max_iter = max(100, k) if max_iter is None else max_iter
    eps = 0.005 / k if eps is None else eps
    p = [1.0 / k] * k
    Q = [[0.0] * k for _ in range(k)]
    Qp = [0.0] * k
    for t in range(k):
        Q[t][t] = 0
        for j in range(t):
            Q[t][t] += r[j][t] * r[j][t]
            Q[t][j] = Q[j][t]
        for j in range(t + 1, k):
            Q[t][t] += r[j][t] * r[j][t]
            Q[t][j] = -r[j][t] * r[t][j]
    for _ in range(max_iter):
        pQp = 0.0
        for t in range(k):
            Qp[t] = 0
            for j in range(k):
                Qp[t] += Q[t][j] * p[j]
            pQp += p[t] * Qp[t]
        max_error = 0.0
        for t in range(k):
            error = abs(Qp[t] - pQp)
            if error > max_error:
                max_error = error
        if max_error < eps:
            break
        for t in range(k):
            diff = (-Qp[t] + pQp) / Q[t][t]
            p[t] += diff
            pQp = (pQp + diff * (diff * Q[t][t] + 2 * Qp[t])) / (1 + diff) / (1 + diff)
            for j in range(k):
                Qp[j] = (Qp[j] + diff * Q[t][j]) / (1 + diff)
                p[j] /= 1 + diff
    return p


def _pair_matrix(r_row, k):
    """LIBSVM's r[i][j] from one row of pair probabilities (pairs i < j in order),
    clipped as svm_predict_probability clips them."""
    min_prob = 1e-7
    r = [[0.0] * k for _ in range(k)]
    p = 0
    for i in range(k):
        for j in range(i + 1, k):
            v = min(max(r_row[p], min_prob), 1 - min_prob)
            r[i][j], r[j][i] = v, 1 - v
            p += 1
    return r


# -- the numerics --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_platt_fit_is_libsvm_sigmoid_train(seed):
    rng = np.random.default_rng(seed)
    n = 300
    positive = rng.random(n) < [0.5, 0.2, 0.8, 0.5][seed]
    f = rng.normal(size=n) * 2 + np.where(positive, 1.0, -1.0) * [1.0, 2.0, 0.3, 5.0][seed]
    A, B = platt_fit(f, positive)
    A_ref, B_ref = libsvm_sigmoid_train(f.tolist(), np.where(positive, 1, -1).tolist())
    np.testing.assert_allclose([A, B], [A_ref, B_ref], rtol=1e-9, atol=1e-9)
    assert A < 0  # larger f, more likely positive


def test_platt_fit_agrees_with_scikit_learns_sigmoid_calibration():
    from sklearn.calibration import _sigmoid_calibration

    rng = np.random.default_rng(7)
    positive = rng.random(500) < 0.4
    f = rng.normal(size=500) + np.where(positive, 1.5, -1.0)
    A, B = platt_fit(f, positive)
    a_skl, b_skl = _sigmoid_calibration(f, positive.astype(int))
    grid = np.linspace(-4, 4, 41)
    np.testing.assert_allclose(
        sigmoid_predict(grid, A, B), sigmoid_predict(grid, a_skl, b_skl), atol=1e-3
    )


def test_platt_fit_refuses_mismatched_lengths():
    with pytest.raises(ValueError, match="same length"):
        platt_fit(np.zeros(3), np.zeros(4, dtype=bool))


@pytest.mark.parametrize("k", [3, 4, 6])
def test_pairwise_coupling_is_libsvm_multiclass_probability(k):
    rng = np.random.default_rng(k)
    n_pairs = k * (k - 1) // 2
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    r = rng.random((20, n_pairs))
    r[0, 0] = 0.0  # clipped to LIBSVM's min_prob
    r[1, :] = 1.0
    p = pairwise_coupling(r, pairs, k)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(p >= 0)
    for row in range(r.shape[0]):
        R = _pair_matrix(r[row].tolist(), k)
        # LIBSVM's own stopping rule: close; run to convergence: the same optimum
        np.testing.assert_allclose(p[row], libsvm_multiclass_probability(k, R), atol=5e-3)
        exact = libsvm_multiclass_probability(k, R, eps=1e-14, max_iter=100_000)
        np.testing.assert_allclose(p[row], exact, atol=1e-9)


def test_pairwise_coupling_of_consistent_pairs_returns_the_classes_probabilities():
    truth = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    pairs = [(0, 1), (0, 2), (1, 2)]
    r = np.column_stack([truth[:, a] / (truth[:, a] + truth[:, b]) for a, b in pairs])
    np.testing.assert_allclose(pairwise_coupling(r, pairs, 3), truth, atol=1e-12)


def test_one_vs_rest_normalise_and_the_binary_coupling():
    s = np.array([[0.2, 0.6, 0.2], [0.0, 0.0, 0.0]])
    np.testing.assert_allclose(one_vs_rest_normalise(s), [[0.2, 0.6, 0.2], [1 / 3] * 3])
    P = calibrated_proba(np.array([[0.0], [10.0]]), np.array([-1.0]), np.array([0.0]), "binary", 2)
    np.testing.assert_allclose(P[0], [0.5, 0.5])
    np.testing.assert_allclose(P[1], [1 / (1 + np.exp(10)), 1 / (1 + np.exp(-10))])
    with pytest.raises(ValueError, match="coupling"):
        calibrated_proba(np.zeros((1, 1)), np.zeros(1), np.zeros(1), "softmax", 2)


def test_every_problems_probability_is_clipped_as_libsvms():
    """LIBSVM clips each problem's probability to [1e-7, 1 - 1e-7]: a far row's sigmoid
    rounds to 0 or 1, and a class's probability 0 has a log of -inf."""
    scores = np.array([[-1e6], [1e6], [0.0]])
    P = calibrated_proba(scores, np.array([-1.0]), np.array([0.0]), "binary", 2)
    np.testing.assert_allclose(P[:2], [[1 - 1e-7, 1e-7], [1e-7, 1 - 1e-7]], rtol=1e-9, atol=0)
    np.testing.assert_allclose(P[2], [0.5, 0.5])
    scores = np.array([[-1e6, -1e6, 1e6]])
    P = calibrated_proba(scores, -np.ones(3), np.zeros(3), "one_vs_rest", 3)
    np.testing.assert_allclose(P, [[1e-7, 1e-7, 1 - 1e-7]], rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "make, k",
    [
        (lambda: SparseELMClassifier(kernel="polynomial", C=10), 2),  # binary
        (lambda: ELMClassifier(kernel="polynomial", C=10), 3),  # one-vs-rest
    ],
    ids=["binary", "one_vs_rest"],
)
def test_a_far_rows_log_probabilities_are_finite(make, k):
    """The polynomial kernel grows without bound away from the data: decision values of
    1e4 and more on this row, whose sigmoids were exactly 0 or 1."""
    X, y = _data(k)
    model = make().set_params(probability=True).fit(X, y)
    far = np.full((1, X.shape[1]), 50.0)
    assert np.abs(model.decision_function(far)).max() > 1e4
    P = model.predict_proba(far)
    assert P.min() > 0 and P.min() == pytest.approx(1e-7, rel=0.5)
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    assert np.all(np.isfinite(model.predict_log_proba(far)))


# -- the estimators ------------------------------------------------------------------------

FAMILIES = {
    "ELM random nodes": lambda: ELMClassifier(n_hidden=50, C=10, random_state=0),
    "ELM kernel": lambda: ELMClassifier(kernel="gaussian", C=10, sigma=3),
    "sparse ELM kernel": lambda: SparseELMClassifier(C=10, sigma=3, random_state=0),
    "sparse ELM random nodes": lambda: SparseELMClassifier(
        hidden="sigmoid", n_hidden=50, C=10, random_state=0
    ),
    "FLSA-SVM": lambda: FLSASVMClassifier(n_support=20, sigma=3, random_state=0),
    "BRELM": lambda: BRELMClassifier(n_estimators=3, n_hidden=30, C=10, random_state=0),
    "GBRELM": lambda: GBRELMClassifier(n_estimators=3, n_hidden=20, C=10, random_state=0),
    "GGBRELM": lambda: GGBRELMClassifier(n_estimators=3, n_hidden=20, C=10, random_state=0),
    "KBRELM": lambda: KBRELMClassifier(n_estimators=3, C=10, sigma=3),
    "FELM": lambda: FELMClassifier(n_hidden=50, C=10, random_state=0),
    "FKELM": lambda: FKELMClassifier(C=10, sigma=3),
}
COUPLING = {
    "ELM random nodes": "one_vs_rest",
    "ELM kernel": "one_vs_rest",
    "sparse ELM kernel": "pairwise",
    "sparse ELM random nodes": "pairwise",
    "FLSA-SVM": "one_vs_rest",
    "BRELM": "one_vs_rest",
    "GBRELM": "one_vs_rest",
    "GGBRELM": "one_vs_rest",
    "KBRELM": "one_vs_rest",
    "FELM": "pairwise",
    "FKELM": "pairwise",
}


def _data(n_classes, seed=1):
    X, y = make_classification(
        200, 6, n_informative=4, n_redundant=0, n_classes=n_classes, random_state=seed
    )
    return StandardScaler().fit_transform(X), np.array(["a", "b", "c"])[y]


@pytest.fixture(scope="module")
def fitted():
    """Every family fitted with probability=True on the binary and the 3-class set."""
    out = {}
    for name, make in FAMILIES.items():
        for k in (2, 3):
            X, y = _data(k)
            out[name, k] = (make().set_params(probability=True).fit(X, y), X, y)
    return out


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_probabilities_are_distributions_over_classes(fitted, name, k):
    model, X, y = fitted[name, k]
    P = model.predict_proba(X)
    assert P.shape == (len(X), k)
    assert np.all((P >= 0) & (P <= 1))
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(model.predict_log_proba(X), np.log(P))
    assert model.probability_coupling_ == ("binary" if k == 2 else COUPLING[name])
    n_problems = {2: 1, 3: 3}[k]  # 3 classes: 3 pairs or 3 one-vs-rest columns
    for attr in ("prob_a_", "prob_b_"):
        value = getattr(model, attr)
        assert value.dtype == np.float64 and value.shape == (n_problems,)
    assert np.all(model.prob_a_ < 0)  # a larger score is more likely the positive class
    # the columns follow classes_: the true class is the likeliest on most rows
    assert np.mean(model.classes_[P.argmax(axis=1)] == y) > 0.7


@pytest.mark.parametrize("k", [2, 3])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_argmax_of_the_probabilities_agrees_with_predict(fitted, name, k):
    model, X, _ = fitted[name, k]
    P = model.predict_proba(X)
    agree = model.classes_[P.argmax(axis=1)] == model.predict(X)
    assert agree.mean() >= (0.98 if k == 2 else 0.93)
    if k == 2:
        # they part exactly where the sigmoid's midpoint -B/A and 0 put f on two sides
        f = model.decision_function(X)
        midpoint = -model.prob_b_[0] / model.prob_a_[0]
        between = (f - 0.0) * (f - midpoint) < 0
        np.testing.assert_array_equal(~agree & ~between, False)
        assert np.all(agree[~between & (np.abs(P[:, 1] - 0.5) > 1e-12)])


@pytest.mark.parametrize("name", list(FAMILIES))
def test_calibrated_model_file_round_trips(fitted, name, tmp_path):
    model, X, _ = fitted[name, 3]
    elmscale.save(model, tmp_path / "m.elm")
    loaded = elmscale.load(tmp_path / "m.elm")
    assert loaded.probability is True
    assert loaded.probability_coupling_ == model.probability_coupling_
    np.testing.assert_array_equal(loaded.prob_a_, model.prob_a_)
    np.testing.assert_array_equal(loaded.predict_proba(X), model.predict_proba(X))


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_model_without_calibration_says_to_fit_with_probability(name):
    X, y = _data(2)
    model = FAMILIES[name]().fit(X, y)
    assert not hasattr(model, "predict_proba")
    assert not hasattr(model, "predict_log_proba")
    cls = type(model).__name__
    with pytest.raises(AttributeError, match=f"{cls} .*fit it with probability=True"):
        model.predict_proba(X)
    # switched on after a fit without it: still a clear error, not a wrong answer
    model.set_params(probability=True)
    with pytest.raises(AttributeError, match=f"{cls} .*probability=True"):
        model.predict_proba(X)


def test_a_refit_without_probability_drops_the_calibration():
    X, y = _data(2)
    model = ELMClassifier(n_hidden=20, random_state=0, probability=True).fit(X, y)
    assert hasattr(model, "prob_a_")
    model.set_params(probability=False).fit(X, y)
    assert not hasattr(model, "prob_a_")


@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.elm")))
def test_an_old_model_file_loads_without_calibration(name):
    model = elmscale.load(FIXTURES / f"{name}.elm")
    final = model.steps[-1][1] if hasattr(model, "steps") else model
    if not hasattr(final, "classes_"):
        return  # a regressor: no probabilities to speak of
    assert final.probability is False
    with pytest.raises(AttributeError, match="probability=True"):
        final.predict_proba(np.zeros((1, final.n_features_in_)))


def test_calibration_needs_two_rows_of_every_class():
    X, y = _data(2)
    y = y.copy()
    y[0] = "c"  # one row of a third class
    with pytest.raises(ValueError, match="at least 2 rows of every class.*'c' has 1"):
        ELMClassifier(n_hidden=20, probability=True).fit(X, y)


def test_the_calibration_is_reproducible_and_follows_random_state():
    X, y = _data(3)
    a = SparseELMClassifier(C=10, sigma=3, random_state=3, probability=True).fit(X, y)
    b = SparseELMClassifier(C=10, sigma=3, random_state=3, probability=True).fit(X, y)
    c = SparseELMClassifier(C=10, sigma=3, random_state=4, probability=True).fit(X, y)
    np.testing.assert_array_equal(a.prob_a_, b.prob_a_)
    assert not np.array_equal(a.prob_a_, c.prob_a_)  # other folds


def _rewritten(src, dst, change):
    """A copy of the model file ``src`` with its members changed by ``change`` (a dict to
    edit in place) and its checksums made anew: only the content checks can refuse it."""
    import hashlib
    import zipfile

    with zipfile.ZipFile(src) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    change(members)
    members["SHA256SUMS"] = "".join(
        f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in members.items() if n != "SHA256SUMS"
    ).encode()
    with zipfile.ZipFile(dst, "w") as zf:
        for n, d in members.items():
            zf.writestr(n, d)
    return dst


def test_a_model_file_whose_calibration_does_not_fit_is_refused(fitted, tmp_path):
    import io
    import json

    model, _, _ = fitted["sparse ELM kernel", 3]
    elmscale.save(model, tmp_path / "m.elm")

    def short_prob_a(members):
        name = next(n for n in members if n.endswith("prob_a_.npy"))
        buf = io.BytesIO()
        np.save(buf, np.array([-1.0]))  # one sigmoid for three pairs
        members[name] = buf.getvalue()

    def unknown_coupling(members):
        meta = json.loads(members["metadata.json"])
        meta["model"]["attributes"]["probability_coupling_"] = "softmax"
        members["metadata.json"] = json.dumps(meta).encode()

    for change in (short_prob_a, unknown_coupling):
        bad = _rewritten(tmp_path / "m.elm", tmp_path / f"{change.__name__}.elm", change)
        with pytest.raises(elmscale.ModelFileError, match="calibration does not fit"):
            elmscale.load(bad)


def test_calibrated_proba_checks_the_sigmoids_against_the_scores():
    with pytest.raises(ValueError, match="'pairwise' calibration of 3 classes needs 3"):
        calibrated_proba(np.zeros((2, 3)), np.zeros(1), np.zeros(1), "pairwise", 3)
    with pytest.raises(ValueError, match="'one_vs_rest' calibration of 4 classes needs 4"):
        calibrated_proba(np.zeros((2, 3)), np.zeros(3), np.zeros(3), "one_vs_rest", 4)


PATHS = {
    "ELM random nodes": ("C", [0.5, 10.0]),
    "sparse ELM kernel": ("C", [1.0, 10.0]),
    "FLSA-SVM": ("n_support", [10, 20]),
    "GGBRELM": ("C", [0.5, 10.0]),
}


@pytest.mark.parametrize("name", list(PATHS))
def test_fit_path_calibrates_every_copy_as_a_fit_would(name):
    """probability=True on a path (a grid search's pieces): each copy is calibrated from
    one path per fold, as a separate fit with that value calibrates itself."""
    X, y = _data(3)
    param, values = PATHS[name]
    model = FAMILIES[name]().set_params(probability=True)
    copies = model.fit_path(X, y, values)
    for value, copy in zip(values, copies):
        alone = FAMILIES[name]().set_params(probability=True, **{param: value}).fit(X, y)
        assert copy.probability_coupling_ == alone.probability_coupling_
        # the sparse ELM's warm-started path equals its fits up to the solver's tol (1e-3)
        atol = 5e-3 if name.startswith("sparse") else 1e-6
        np.testing.assert_allclose(copy.predict_proba(X), alone.predict_proba(X), atol=atol)


# -- held out, against SVC(probability=True) on the shared sets ---------------------------------


def _held_out_set(name):
    """The benchmark's sets (benchmarks/calibration.py) at its --quick sizes, scaled."""
    from _datasets import shared_data
    from sklearn.model_selection import train_test_split

    from elmscale.data import Scaler, load

    if name == "satimage":
        train = load(shared_data("satimage", "satimage.scale"), n_features=36)
        test = load(shared_data("satimage", "satimage.scale.t"), n_features=36)
        rng = np.random.default_rng(0)
        tr, te = rng.permutation(len(train.y))[:1_000], rng.permutation(len(test.y))[:1_000]
        X, y, X_te, y_te = train.X[tr], train.y[tr], test.X[te], test.y[te]
    elif name == "cod-rna":
        cod = load(shared_data("cod-rna", "codrna.csv"), label="last")
        order = np.random.default_rng(0).permutation(len(cod.y))
        tr, te = order[: len(order) // 2][:500], order[len(order) // 2 :][:1_000]
        X, y, X_te, y_te = cod.X[tr], cod.y[tr], cod.X[te], cod.y[te]
    else:
        path = {
            "australian": ("australian", "australian.dat"),
            "svmguide2": ("svmguide2", "svmguide2.txt"),
        }
        ds = load(shared_data(*path[name]), **({"label": "last"} if name == "australian" else {}))
        tr, te = train_test_split(
            np.arange(len(ds.y)), test_size=0.3, stratify=ds.y, random_state=0
        )
        X, y, X_te, y_te = ds.X[tr], ds.y[tr], ds.X[te], ds.y[te]
    scaler = Scaler().fit(X)
    return scaler.transform(X), y, scaler.transform(X_te), y_te


@pytest.mark.needs_shared
@pytest.mark.parametrize(
    "name, sigma, C",
    [
        ("australian", 2.0, 1.0),
        ("cod-rna", 0.5, 1.0),
        ("satimage", 2.0, 5.0),
        ("svmguide2", 2.0, 1.0),
    ],
)
def test_sparse_elm_log_loss_held_out_is_within_002_of_svcs(name, sigma, C):
    """The kernel sparse ELM (SVC's dual without the bias, the same kernel and C) against
    LIBSVM's own calibration on two binary sets and two multiclass ones (satimage: 6
    classes, svmguide2: 3).  The other families' figures (not all within 0.02: they are
    other models at these parameters) are benchmarks/calibration.py's table in
    docs/guide/probabilities.md."""
    import warnings

    from sklearn.metrics import log_loss
    from sklearn.svm import SVC

    X, y, X_te, y_te = _held_out_set(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # scikit-learn 1.9 deprecates it
        svc = SVC(C=C, gamma=1 / (2 * sigma**2), probability=True, random_state=0).fit(X, y)
    ours = SparseELMClassifier(C=C, sigma=sigma, probability=True, random_state=0).fit(X, y)
    np.testing.assert_array_equal(ours.classes_, svc.classes_)
    svc_loss = log_loss(y_te, svc.predict_proba(X_te), labels=svc.classes_)
    our_loss = log_loss(y_te, ours.predict_proba(X_te), labels=ours.classes_)
    assert our_loss <= svc_loss + 0.02, (name, our_loss, svc_loss)


@pytest.mark.parametrize("name", ["sparse ELM kernel", "ELM random nodes", "KBRELM"])
def test_scikit_learns_calibratedclassifiercv_wraps_a_classifier(name):
    """scikit-learn 1.9 deprecates SVC(probability=True) for
    CalibratedClassifierCV(SVC(), ensemble=False): the same habit works on ours (through
    decision_function), and with the sigmoid it is our calibration apart from LIBSVM's
    prior-corrected targets and the folds."""
    from sklearn.calibration import CalibratedClassifierCV

    X, y = _data(3)
    wrapped = CalibratedClassifierCV(FAMILIES[name](), method="sigmoid", ensemble=False, cv=5)
    P = wrapped.fit(X, y).predict_proba(X)
    np.testing.assert_array_equal(wrapped.classes_, np.unique(y))
    np.testing.assert_allclose(P.sum(axis=1), 1.0, atol=1e-12)
    ours = FAMILIES[name]().set_params(probability=True).fit(X, y).predict_proba(X)
    assert np.mean(P.argmax(axis=1) == ours.argmax(axis=1)) > 0.9


@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_scikit_learns_estimator_checks_pass_with_probability(name):
    """Every check of scikit-learn's check_estimator passes on the calibrated estimator
    but one assertion of check_classifiers_train: that argmax(predict_proba) equals
    predict on every row, which LIBSVM's design does not promise (module docstring; SVC
    with probability=True does not either): there, at most 2 % of the rows may differ
    (measured: 1-2 rows of 200-300).  Where that assertion fails, the rest of its
    check (predict_proba refusing malformed input) is asserted here instead."""
    from sklearn.utils.estimator_checks import check_estimator

    estimator = FAMILIES[name]().set_params(probability=True)
    results = check_estimator(estimator, on_fail=None)
    failed = [r for r in results if r["status"] == "failed"]
    for r in failed:
        assert r["check_name"] == "check_classifiers_train", (r["check_name"], r["exception"])
        assert "Arrays are not equal" in str(r["exception"]), r["exception"]
        mismatched = re.search(r"Mismatched elements: (\d+) / (\d+)", str(r["exception"]))
        assert mismatched is not None, r["exception"]
        assert int(mismatched[1]) / int(mismatched[2]) <= 0.02, r["exception"]
    X, y = _data(3)
    model = FAMILIES[name]().set_params(probability=True).fit(X, y)
    with pytest.raises(ValueError):
        model.predict_proba(X.T)
    with pytest.raises(ValueError):
        model.predict_proba(X[:, :3])
