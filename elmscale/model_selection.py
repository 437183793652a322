"""Cross-validation along C paths.

``path_grid_search`` is scikit-learn's grid search specialised to estimators
with ``fit_path``: for every other parameter setting and every fold, one
``fit_path`` call (one eigendecomposition) scores the whole list of C values.
It uses scikit-learn's splitters and the estimator's ``score``, and gives the
same choice as ``sklearn.model_selection.GridSearchCV`` over the same grid and
splits (tests/test_model_selection.py checks this).

The paper's grids (Section VI-C) are ``PAPER_C_GRID``, ``PAPER_SIGMA_GRID`` and
``PAPER_DEGREE_GRID``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import ParameterGrid, check_cv
from sklearn.utils.multiclass import type_of_target

PAPER_C_GRID = (0.01, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
PAPER_SIGMA_GRID = PAPER_C_GRID
PAPER_DEGREE_GRID = (1, 2, 3, 4, 5)


@dataclass
class PathSearchResult:
    """Outcome of ``path_grid_search``.

    ``mean_scores[i, j]`` is the mean validation score of ``params[i]`` with
    ``Cs[j]``; ``fold_scores`` has one more axis for the folds.
    """

    best_params_: dict
    best_score_: float
    params: list = field(repr=False)
    Cs: tuple = field(repr=False)
    mean_scores: np.ndarray = field(repr=False)
    fold_scores: np.ndarray = field(repr=False)
    best_estimator_: object = field(default=None, repr=False)


def path_grid_search(estimator, X, y, Cs=PAPER_C_GRID, param_grid=None, cv=5, refit=True):
    """Choose C (and the parameters of ``param_grid``) by cross-validation.

    ``cv`` is anything ``sklearn.model_selection.check_cv`` takes (an int gives
    ``StratifiedKFold`` for classifiers, unshuffled as in scikit-learn; pass a
    seeded ``StratifiedKFold(shuffle=True, random_state=...)`` for the paper's
    protocol).  Ties go to the first setting in grid order, C varying fastest,
    as in ``GridSearchCV``.
    """
    Cs = tuple(float(c) for c in Cs)
    grid = list(ParameterGrid(param_grid or {}))
    classifier = type_of_target(y) in ("binary", "multiclass")
    splitter = check_cv(cv, y, classifier=classifier)
    splits = list(splitter.split(X, y))
    scores = np.empty((len(grid), len(Cs), len(splits)))
    for i, params in enumerate(grid):
        for k, (train, test) in enumerate(splits):
            est = clone(estimator).set_params(**params)
            for j, fitted in enumerate(est.fit_path(X[train], y[train], Cs)):
                scores[i, j, k] = fitted.score(X[test], y[test])
    mean = scores.mean(axis=2)
    # GridSearchCV's candidate order: ParameterGrid over {**param_grid, "C": Cs}
    # sorts the keys, so C is fastest only if it sorts last; rank like it does.
    order = list(ParameterGrid({**(param_grid or {}), "C": list(Cs)}))
    flat = {(tuple(sorted(p.items()))): None for p in order}
    best_key, best = None, -np.inf
    for key in flat:
        p = dict(key)
        i = grid.index({k: v for k, v in p.items() if k != "C"})
        value = mean[i, Cs.index(float(p["C"]))]
        if value > best:
            best, best_key = value, p
    result = PathSearchResult(best_params_=best_key, best_score_=float(best), params=grid, Cs=Cs,
                              mean_scores=mean, fold_scores=scores)
    if refit:
        result.best_estimator_ = clone(estimator).set_params(**best_key).fit(X, y)
    return result
