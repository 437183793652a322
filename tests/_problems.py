"""Small generated problems shared by the tests."""

import numpy as np


def nonlinear_problem(n: int, d: int = 4, n_classes: int = 2, seed: int = 0):
    """A small nonlinear classification problem on [-1, 1]^d."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, size=(n, d))
    score = np.sin(2.5 * X[:, 0]) + X[:, 1] * X[:, min(2, d - 1)]
    if n_classes == 2:
        y = (score > 0).astype(int)
    else:
        y = np.digitize(score, np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1]))
    return X, y


def assert_same_optimum(fitted, reference, held_out, tol):
    """Two sparse ELM fits reach the same optimum: objectives within ``tol`` (relative),
    ``fitted`` converged with every KKT violation within ``tol``, and 99.5 % of the
    predictions on ``held_out`` alike."""
    rel = np.abs(fitted.objective_ - reference.objective_) / np.abs(reference.objective_)
    assert np.all(rel <= tol), rel
    assert fitted.converged_.all() and np.all(fitted.kkt_violation_ <= tol)
    agree = np.mean(fitted.predict(held_out) == reference.predict(held_out))
    assert agree >= 0.995, agree
