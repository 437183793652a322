"""path_grid_search chooses what scikit-learn's GridSearchCV chooses."""

import numpy as np
import pytest
from _problems import nonlinear_problem
from sklearn.model_selection import GridSearchCV, StratifiedKFold

from elmscale import ELMClassifier
from elmscale.model_selection import path_grid_search


@pytest.mark.parametrize(
    "estimator, grid",
    [
        (ELMClassifier(kernel="gaussian"), {"sigma": [0.2, 0.5, 1.0, 5.0]}),
        (ELMClassifier(n_hidden=60, random_state=0), {"weight_scale": [1.0, 3.0]}),
    ],
)
def test_same_choice_and_scores_as_sklearn_grid_search(estimator, grid):
    X, y = nonlinear_problem(240, d=4, n_classes=3, seed=11)
    Cs = [0.01, 0.1, 1.0, 10.0, 100.0, 1000.0]
    cv = StratifiedKFold(5, shuffle=True, random_state=3)
    ours = path_grid_search(estimator, X, y, Cs=Cs, param_grid=grid, cv=cv)
    theirs = GridSearchCV(estimator, {**grid, "C": Cs}, cv=cv).fit(X, y)
    assert ours.best_params_ == theirs.best_params_
    assert ours.best_score_ == pytest.approx(theirs.best_score_, abs=1e-12)
    for i, params in enumerate(ours.params):
        for j, C in enumerate(Cs):
            k = next(
                n for n, p in enumerate(theirs.cv_results_["params"]) if p == {**params, "C": C}
            )
            assert ours.mean_scores[i, j] == pytest.approx(
                theirs.cv_results_["mean_test_score"][k], abs=1e-12
            )
    np.testing.assert_array_equal(
        ours.best_estimator_.predict(X), theirs.best_estimator_.predict(X)
    )
