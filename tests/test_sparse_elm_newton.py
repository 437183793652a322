"""The random-node sparse ELM from arrays: the Newton solver against dual coordinate descent,
and the ``solver`` setting."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from elmscale import SparseELMClassifier, open_parquet
from elmscale.core.jit import huber_step_losses
from elmscale.data import generate_classification, write_generated_parquet
from elmscale.models.sparse_elm_pairs import NEWTON_MIN_ROWS_PER_PAIR, newton_wins
from elmscale.solvers import primal_newton

TOL = 1e-3


def _model(**kw):
    params = {"hidden": "sigmoid", "n_hidden": 40, "C": 1.0, "tol": TOL, "random_state": 0}
    params.update(kw)
    return SparseELMClassifier(**params)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_newton_reaches_the_dual_solvers_optimum(n_classes):
    data = generate_classification(6_000, 6, n_classes=n_classes, random_state=1)
    newton = _model(solver="newton").fit(data.X, data.y)
    dual = _model(solver="dual", tol=1e-4).fit(data.X, data.y)
    assert newton.converged_.all() and np.all(newton.kkt_violation_ <= TOL)
    # the same problem (layer), the same optimum within tol
    np.testing.assert_array_equal(newton.hidden_layer_.weights, dual.hidden_layer_.weights)
    rel = (newton.objective_ - dual.objective_) / np.abs(dual.objective_)
    assert np.all(np.abs(rel) <= TOL), rel
    assert np.mean(newton.predict(data.X) == dual.predict(data.X)) > 0.99
    # the model's duals are its primal vectors': beta = sum a_i t_i h_i, per pair
    H = newton.hidden_layer_.transform(newton.support_vectors_, dtype=np.float64)
    np.testing.assert_allclose(H.T @ newton.dual_coef_.T, newton.coef_, rtol=1e-4, atol=1e-4)
    # a pass serves every pair: the passes are few, not the dual solver's hundreds
    assert newton.n_iter_.max() < 60 < dual.n_iter_.max()


def test_auto_takes_newton_from_its_row_count():
    big = generate_classification(NEWTON_MIN_ROWS_PER_PAIR, 6, random_state=2)
    small = generate_classification(NEWTON_MIN_ROWS_PER_PAIR - 1, 6, random_state=2)
    auto_big = _model().fit(big.X, big.y)
    auto_small = _model().fit(small.X, small.y)
    np.testing.assert_array_equal(auto_big.coef_, _model(solver="newton").fit(big.X, big.y).coef_)
    np.testing.assert_array_equal(
        auto_small.coef_, _model(solver="dual").fit(small.X, small.y).coef_
    )
    assert hasattr(auto_big, "n_gathered_") and not hasattr(auto_small, "n_gathered_")
    # more classes: 2,000 rows a pair (measured: small pairs favour the dual solver)
    assert newton_wins(2_000, 2) and not newton_wins(1_999, 2)
    assert newton_wins(6_000, 3) and not newton_wins(5_999, 3)
    assert newton_wins(90_000, 10) and not newton_wins(89_999, 10)
    three = generate_classification(5_999, 6, n_classes=3, random_state=2)
    assert not hasattr(_model().fit(three.X, three.y), "n_gathered_")


def test_bad_solver_settings_are_named(tmp_path):
    data = generate_classification(500, 4, random_state=0)
    with pytest.raises(ValueError, match="solver='newton' solves random hidden nodes"):
        SparseELMClassifier(solver="newton").fit(data.X, data.y)
    with pytest.raises(ValueError, match="ray_address fans pairs out"):
        _model(solver="newton").fit(data.X, data.y, ray_address="127.0.0.1:1")
    with pytest.raises(ValueError, match="solver"):
        _model(solver="lbfgs").fit(data.X, data.y)
    write_generated_parquet(tmp_path, 1_000, 4, 2, random_state=0, rows_per_file=500)
    with pytest.raises(ValueError, match="solver='dual' solves rows held in memory"):
        _model(solver="dual").fit(open_parquet(tmp_path, label="label"))


def _huber_loss(margins, h):
    """The Huber hinge of each margin, written out: 1 - m below 1 - h, (1 + h - m)^2 / 4h
    within h of 1, 0 above 1 + h."""
    out = 1.0 - margins
    zone = np.abs(out) <= h
    out[zone] = (out[zone] + h) ** 2 / (4.0 * h)
    out[margins > 1.0 + h] = 0.0
    return out


def test_the_line_search_kernel_is_the_huber_loss():
    rng = np.random.default_rng(0)
    ahead, along = rng.normal(1.0, 0.5, 1_000), rng.normal(0.0, 0.3, 1_000)
    steps, hs = np.asarray(primal_newton.STEPS), np.array([0.01, 0.25])
    out = np.empty((2, steps.size))
    huber_step_losses(ahead, along, steps, hs, out)
    expected = [[_huber_loss(ahead - (1.0 - s) * along, h).sum() for s in steps] for h in hs]
    np.testing.assert_allclose(out, expected, rtol=1e-12)


def test_a_newton_fit_cut_short_says_so():
    data = generate_classification(3_000, 6, random_state=3)
    with pytest.warns(ConvergenceWarning, match="Newton solver stopped after 2 passes"):
        fitted = _model(solver="newton", max_iter=2).fit(data.X, data.y)
    assert not fitted.converged_.any() and fitted.n_iter_[0] == 2
