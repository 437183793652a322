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

import numbers
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.base import BaseEstimator, clone
from sklearn.metrics import check_scoring
from sklearn.model_selection import KFold, ParameterGrid, StratifiedKFold, check_cv
from sklearn.utils import check_X_y
from sklearn.utils.multiclass import check_classification_targets, type_of_target

from elmscale import registry
from elmscale.distributed.executors import make_executor, progress_bars
from elmscale.model_selection.results import cv_results
from elmscale.models.grid_plan import GridPlan
from elmscale.models.paper_grids import (
    PAPER_C_GRID,
    PAPER_DEGREE_GRID,
    PAPER_SIGMA_GRID,
    paper_grid,
)

__all__ = [
    "PAPER_C_GRID",
    "PAPER_DEGREE_GRID",
    "PAPER_SIGMA_GRID",
    "GridSearchCV",
    "PathSearchResult",
    "paper_grid",
    "path_grid_search",
]


@dataclass
class PathSearchResult:
    """Outcome of ``path_grid_search``.

    ``mean_scores[i, j]`` is the mean validation score of ``params[i]`` with
    ``Cs[j]``; ``fold_scores`` has one more axis for the folds; ``cv_results_`` the same
    scores in scikit-learn's shape (:func:`elmscale.model_selection.results.cv_results`).
    """

    best_params_: dict
    best_score_: float
    params: list = field(repr=False)
    Cs: tuple = field(repr=False)
    mean_scores: np.ndarray = field(repr=False)
    fold_scores: np.ndarray = field(repr=False)
    best_estimator_: object = field(default=None, repr=False)
    cv_results_: dict = field(default=None, repr=False)


def _path_value(path_param: str):
    """How a path's values are compared and passed: C as floats, others as given."""
    return float if path_param == "C" else (lambda v: v)


def path_grid_search(
    estimator,
    X,
    y,
    Cs=PAPER_C_GRID,
    param_grid=None,
    cv=5,
    refit=True,
    scoring=None,
    path_param="C",
):
    """Choose C (and the parameters of ``param_grid``) by cross-validation.

    ``Cs`` are the values of ``path_param`` that ``estimator.fit_path`` runs along: C by
    default, or another path parameter (FLSA-SVM's ``"n_support"``).

    ``cv`` is anything ``sklearn.model_selection.check_cv`` takes (an int gives
    ``StratifiedKFold`` for classifiers, unshuffled as in scikit-learn; pass a
    seeded ``StratifiedKFold(shuffle=True, random_state=...)`` for the paper's
    protocol).  Ties go to the first setting in grid order, C varying fastest,
    as in ``GridSearchCV``.  ``scoring``: as ``GridSearchCV``'s (a name of
    ``sklearn.metrics.get_scorer_names()`` or a callable); None uses ``estimator.score``.
    """
    p = path_param
    value = _path_value(p)
    Cs = tuple(value(c) for c in Cs)
    scorer = check_scoring(estimator, scoring=scoring)
    grid = list(ParameterGrid(param_grid or {}))
    classifier = type_of_target(y) in ("binary", "multiclass")
    splitter = check_cv(cv, y, classifier=classifier)
    splits = list(splitter.split(X, y))
    scores = np.empty((len(grid), len(Cs), len(splits)))
    for i, params in enumerate(grid):
        for k, (train, test) in enumerate(splits):
            est = clone(estimator).set_params(**params)
            for j, fitted in enumerate(est.fit_path(X[train], y[train], Cs)):
                scores[i, j, k] = scorer(fitted, X[test], y[test])
    # GridSearchCV's candidate order: ParameterGrid over {**param_grid, "C": Cs}
    # sorts the keys, so C is fastest only if it sorts last; rank like it does.
    candidates = list(ParameterGrid({**(param_grid or {}), p: list(Cs)}))
    split = np.array(
        [
            scores[grid.index({k: v for k, v in c.items() if k != p}), Cs.index(value(c[p]))]
            for c in candidates
        ]
    )
    results = cv_results(candidates, split)
    best = int(np.argmin(results["rank_test_score"]))
    best_key = candidates[best]
    result = PathSearchResult(
        best_params_=best_key,
        best_score_=float(results["mean_test_score"][best]),
        params=grid,
        Cs=Cs,
        mean_scores=scores.mean(axis=2),
        fold_scores=scores,
        cv_results_=results,
    )
    if refit:
        result.best_estimator_ = clone(estimator).set_params(**best_key).fit(X, y)
    return result


# --------------------------------------------------------------------------- GridSearchCV


def _path_piece(piece, *, X, y, splits, settings, estimator, Cs, scoring, c_path, path_param="C"):
    """Scores of one (fold, setting index) along ``Cs`` (the values of ``path_param``) on
    the fold's validation rows: one ``fit_path`` (``c_path``), else one fit per value."""
    fold, s = piece
    train, test = splits[fold]
    est = clone(estimator).set_params(**settings[s])
    scorer = check_scoring(est, scoring)
    if c_path:
        fitted = est.fit_path(X[train], y[train], Cs)
    else:
        fitted = [clone(est).set_params(**{path_param: C}).fit(X[train], y[train]) for C in Cs]
    return np.array([scorer(model, X[test], y[test]) for model in fitted])


def _fold_plan(estimator, X, y, splits, settings, Cs, scoring, c_path, path_param="C") -> GridPlan:
    """The plan for every estimator without its own: a piece per (fold, setting)."""
    pieces = [(k, s) for k in range(len(splits)) for s in range(len(settings))]

    def scores(results) -> np.ndarray:
        out = np.empty((len(settings), len(Cs), len(splits)))
        for (k, s), result in zip(pieces, results):
            out[s, :, k] = result
        return out

    return GridPlan(
        pieces=pieces,
        fn=_path_piece,
        scores=scores,
        shared={"X": X, "y": y, "splits": splits, "settings": settings},
        kwargs={
            "estimator": estimator,
            "Cs": Cs,
            "scoring": scoring,
            "c_path": c_path,
            "path_param": path_param,
        },
    )


class GridSearchCV(BaseEstimator):
    """Grid search along C paths, in scikit-learn's shape, on Ray or in this process.

    The grid's ``C`` values are solved as a path inside each piece of work (increasing
    C, warm-started for the sparse ELM, one eigendecomposition for the unified ELM);
    the pieces are (fold x other parameters), or the estimator's own plan when its
    registry entry says ``grid_pieces="pairs"`` (``SparseELMClassifier``: x one-vs-one
    pair).  With ``ray_address`` (or an initialised Ray, with ``ray_address="auto"``)
    every piece is a Ray task with ``X`` put in the object store once; without it the
    pieces run here, side by side on ``n_threads`` cores.
    The results are the same either way.

    Parameters
    ----------
    estimator : a registered estimator (``elmscale.registry``).  With ``fit_path``
        (its ``c_path`` capability: ``SparseELMClassifier``, ``ELMClassifier``,
        ``ELMRegressor``) each piece solves the C list as one path; otherwise one fit per C.
    param_grid : dict (or list of dicts) of parameter lists, as scikit-learn's; its "C"
        list is the path (default: the estimator's C), or the list of the registry entry's
        ``path_param`` (FLSA-SVM: "n_support", one selection run per piece).
        ``paper_grid(kernel)`` gives the paper's grids.
    cv : int or splitter, default 5 (an int: ``StratifiedKFold(cv, shuffle=True,
        random_state=random_state)`` for classifiers, ``KFold`` likewise otherwise).
    scoring : None (the estimator's ``score``), or a scikit-learn scoring name; the
        sparse ELM supports accuracy only (its pieces return pair scores).
    refit : bool, default True: fit ``best_estimator_`` on all the data.
    ray_address : None (in this process) or a Ray address ("auto", "ray://...").
    progress : bool, default False: a progress bar (pieces done / total, elapsed,
        remaining) on stderr.
    n_threads : cores for the local run.
    random_state : the folds' seed, and the random layer's when the estimator's own
        ``random_state`` is None (every piece must use the same layer).

    Attributes
    ----------
    cv_results_, best_index_, best_params_, best_score_, best_estimator_, n_splits_ as in
    scikit-learn (``cv_results_`` has ``params``, ``param_*``, ``split*_test_score``,
    ``mean_test_score``, ``std_test_score``, ``rank_test_score``), and ``n_pieces_``.
    """

    def __init__(
        self,
        estimator,
        param_grid,
        *,
        cv=5,
        scoring=None,
        refit=True,
        ray_address=None,
        progress=False,
        n_threads=None,
        random_state=0,
    ):
        self.estimator = estimator
        self.param_grid = param_grid
        self.cv = cv
        self.scoring = scoring
        self.refit = refit
        self.ray_address = ray_address
        self.progress = progress
        self.n_threads = n_threads
        self.random_state = random_state

    def _splits(self, X, y, classifier):
        if isinstance(self.cv, numbers.Integral):
            splitter_cls = StratifiedKFold if classifier else KFold
            splitter = splitter_cls(int(self.cv), shuffle=True, random_state=self.random_state)
        else:
            splitter = check_cv(self.cv, y, classifier=classifier)
        return [(np.asarray(tr), np.asarray(te)) for tr, te in splitter.split(X, y)]

    def _candidates(self, path_param: str = "C"):
        """GridSearchCV's candidate list, each split into (setting without the path
        parameter, its value): the path's values sorted (C as floats)."""
        p = path_param
        value = _path_value(p)
        grids = self.param_grid if isinstance(self.param_grid, list) else [self.param_grid]
        default = self.estimator.get_params()[p]
        grids = [g if p in g else {**g, p: [default]} for g in grids]
        candidates = list(ParameterGrid(grids))
        settings, Cs = [], sorted({value(c[p]) for c in candidates})
        keys = []
        for c in candidates:
            setting = {k: v for k, v in c.items() if k != p}
            if setting not in settings:
                settings.append(setting)
            keys.append((settings.index(setting), Cs.index(value(c[p]))))
        return candidates, settings, Cs, keys

    def _capabilities(self):
        found = registry.entry_for(self.estimator)
        if found is None:
            raise TypeError(
                f"GridSearchCV takes a registered estimator (elmscale.models."
                f"registry); got {type(self.estimator).__name__}"
            )
        return found.capabilities

    def fit(self, X, y):
        X, y = check_X_y(X, y, dtype=[np.float64, np.float32])
        capabilities = self._capabilities()
        classifier = capabilities.task == "classifier"
        if classifier:
            check_classification_targets(y)
        splits = self._splits(X, y, classifier)
        candidates, settings, Cs, keys = self._candidates(capabilities.path_param)
        base = clone(self.estimator)
        if base.get_params().get("random_state", 0) is None:
            # every piece (and the refit) must draw the same random layer
            base.set_params(
                random_state=int(np.random.default_rng(self.random_state).integers(2**31 - 1))
            )
        if capabilities.grid_pieces == "pairs":
            plan = base.grid_plan(X, y, splits, settings, Cs, self.scoring)
        else:
            plan = _fold_plan(
                base,
                X,
                y,
                splits,
                settings,
                Cs,
                self.scoring,
                capabilities.c_path,
                capabilities.path_param,
            )
        self.n_pieces_ = len(plan.pieces)
        results = self._run(plan, settings)
        self._set_results(candidates, keys, plan.scores(results), len(splits))
        if self.refit:
            best = clone(base).set_params(**self.best_params_)
            if capabilities.ray_fit and self.ray_address is not None:
                best.fit(X, y, ray_address=self.ray_address)
            else:
                best.fit(X, y)
            self.best_estimator_ = best
        return self

    def _run(self, plan: GridPlan, settings) -> list:
        def describe(piece):
            # every piece names its setting by index: (fold, setting[, what follows])
            rest = "".join(f", pair {part}" for part in piece[2:])
            return f"fold {piece[0]}, parameters {settings[piece[1]]}{rest}"

        executor = make_executor(ray_address=self.ray_address, n_threads=self.n_threads)
        with progress_bars(self.progress):
            return executor.map(
                plan.fn,
                plan.pieces,
                shared=plan.shared,
                describe=describe,
                label="grid pieces",
                **plan.kwargs,
            )

    def _set_results(self, candidates, keys, scores, n_splits):
        split = np.array([scores[s, c] for s, c in keys])  # (candidates, folds)
        self.cv_results_ = cv_results(candidates, split)
        self.n_splits_ = n_splits
        self.best_index_ = int(np.argmin(self.cv_results_["rank_test_score"]))
        mean = self.cv_results_["mean_test_score"]
        self.best_params_ = candidates[self.best_index_]
        self.best_score_ = float(mean[self.best_index_])

    def plot_heatmap(self, path, *, x: str = "C", y: str = "sigma") -> Path:
        """Mean CV score over (``x``, ``y``) as a PNG heatmap (``io.reports.plot_cv_heatmap``)."""
        from elmscale.io.reports import plot_cv_heatmap

        return plot_cv_heatmap(self.cv_results_, path, x=x, y=y)

    def save_results(self, path) -> Path:
        """Write ``cv_results_`` as CSV (``path`` ending .csv) or JSON (.json), atomically."""
        from elmscale.io.reports import write_cv_results

        return write_cv_results(self.cv_results_, path)
