"""Running one piece: a trial of a table, or one point of a figure.

Each function takes a :class:`~elmscale.experiments.protocol.Piece` and the loaded data
sets and returns a :class:`PieceResult`: rows of deterministic numbers (accuracies,
chosen parameters, support vectors) and, apart, the times measured (which differ from
run to run, so ``results.csv`` stays comparable between runs).  Every estimator runs on
one thread (``n_threads=1``): pieces run side by side, and one thread each keeps the
numbers the same wherever a piece runs.
"""

from __future__ import annotations

import importlib
import json
import time
import warnings
from typing import NamedTuple

import numpy as np
from sklearn import metrics
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_selection import SelectFromModel
from sklearn.model_selection import GridSearchCV, KFold, StratifiedKFold, train_test_split
from sklearn.svm import SVC, LinearSVC

from elmscale.core.threads import thread_budget
from elmscale.experiments.datasets import LoadedSet, piece_split, trial_split
from elmscale.experiments.protocol import Method, Piece
from elmscale.model_selection import path_grid_search

__all__ = [
    "L1SelectSVC",
    "PaperSVC",
    "PieceResult",
    "run_piece",
    "selected_feature_count",
    "support_vector_count",
]


class PieceResult(NamedTuple):
    key: str
    kind: str
    rows: list[dict]
    timings: list[dict]
    #: the piece's own wall time (0 in journals written before it was recorded)
    seconds: float = 0.0
    #: "done", or why it has no rows: "timeout" (its time budget hit), "killed" (its
    #: process died: out of memory, a signal), "memory" (larger than the memory budget)
    status: str = "done"
    #: the reason in words, for the report ("" when done)
    left_out: str = ""
    #: its process's peak resident memory above its start, MB (0: not measured)
    peak_mb: float = 0.0
    #: the engine's estimate of it before it started, MB (0: none made)
    estimate_mb: float = 0.0
    #: when it started (seconds since the epoch; 0: not recorded)
    started_at: float = 0.0


class PaperSVC(ClassifierMixin, BaseEstimator):
    """scikit-learn's SVC (LIBSVM) with the sparse-ELM paper's kernels and parameters:
    gaussian exp(-||u-v||^2 / (2 sigma^2)) and polynomial (u.v + 1)^degree."""

    def __init__(self, kernel="gaussian", C=1.0, sigma=1.0, degree=3, cache_size=200):
        self.kernel = kernel
        self.C = C
        self.sigma = sigma
        self.degree = degree
        self.cache_size = cache_size

    def _svc(self) -> SVC:
        if self.kernel == "gaussian":
            return SVC(
                C=self.C,
                kernel="rbf",
                gamma=1.0 / (2.0 * self.sigma**2),
                cache_size=self.cache_size,
            )
        if self.kernel == "polynomial":
            return SVC(
                C=self.C,
                kernel="poly",
                degree=int(self.degree),
                gamma=1.0,
                coef0=1.0,
                cache_size=self.cache_size,
            )
        raise ValueError(f"kernel={self.kernel!r}; expected 'gaussian' or 'polynomial'")

    def fit(self, X, y):
        self.svc_ = self._svc().fit(X, y)
        self.classes_ = self.svc_.classes_
        self.n_support_ = self.svc_.n_support_
        return self

    def predict(self, X):
        return self.svc_.predict(X)


class L1SelectSVC(ClassifierMixin, BaseEstimator):
    """The feature-selecting SVM a scikit-learn user would build: ``SelectFromModel(
    LinearSVC(penalty="l1", dual=False, C=select_C))`` keeps the features of nonzero
    weight (scikit-learn's threshold for an l1 model, 1e-5), then :class:`PaperSVC`'s
    gaussian SVC (``C``, ``sigma``: exp(-||u-v||^2 / (2 sigma^2))) is fitted on them.

    Where the l1 model keeps no feature (a small ``select_C``), the one of largest weight
    is kept, so that the SVC has an input.  ``get_support()`` is the kept features."""

    def __init__(self, select_C=1.0, C=1.0, sigma=1.0, max_iter=10_000, cache_size=200):
        self.select_C = select_C
        self.C = C
        self.sigma = sigma
        self.max_iter = max_iter
        self.cache_size = cache_size

    def fit(self, X, y):
        X = np.asarray(X, dtype=np.float64)
        linear = LinearSVC(
            penalty="l1", dual=False, C=self.select_C, max_iter=self.max_iter, random_state=0
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ConvergenceWarning)
            linear.fit(X, y)
        #: False where liblinear stopped at max_iter (its warning is kept out of the logs)
        self.select_converged_ = not any(issubclass(w.category, ConvergenceWarning) for w in caught)
        mask = SelectFromModel(linear, prefit=True).get_support()
        if not mask.any():
            mask[int(np.argmax(np.abs(linear.coef_).max(axis=0)))] = True
        self.selector_ = linear
        self.support_mask_ = mask
        self.n_features_in_ = X.shape[1]
        self.n_features_selected_ = int(mask.sum())
        self.svc_ = PaperSVC("gaussian", C=self.C, sigma=self.sigma, cache_size=self.cache_size)
        self.svc_.fit(X[:, mask], y)
        self.classes_ = self.svc_.classes_
        self.n_support_ = self.svc_.n_support_
        return self

    def get_support(self, indices: bool = False):
        """The kept features: a boolean mask over the inputs, or their indices."""
        return np.flatnonzero(self.support_mask_) if indices else self.support_mask_.copy()

    def predict(self, X):
        return self.svc_.predict(np.asarray(X, dtype=np.float64)[:, self.support_mask_])


def selected_feature_count(est, n_features: int) -> int:
    """The input features a fitted model uses: its ``get_support()`` count where it selects
    features (scikit-learn's selectors, FELM / FKELM, :class:`L1SelectSVC`), else every
    one."""
    if hasattr(est, "get_support"):
        return int(np.count_nonzero(est.get_support()))
    return int(n_features)


def _estimator(method: Method, data: LoadedSet, seed: int):
    module, _, name = method.estimator.partition(":")
    cls = getattr(importlib.import_module(module), name)
    params = dict(method.params)
    if data.group == "multiclass":
        params.update(dict(method.multiclass_params))
    est = cls(**params)
    est_params = est.get_params()
    if "n_threads" in est_params:
        est.set_params(n_threads=1)
    if method.seed_param:
        est.set_params(**{method.seed_param: seed})
    return est


def support_vector_count(est, n_train: int) -> int:
    """Support vectors as the sparse-ELM paper's Table VIII counts them: the sparse ELM's
    summed over its one-vs-one pairs, LIBSVM's as it reports them (each training vector
    once), every training vector for the unified ELM (its solution is dense)."""
    if hasattr(est, "dual_coef_") and hasattr(est, "pairs_"):
        return int(np.count_nonzero(est.dual_coef_))
    if hasattr(est, "n_support_"):
        return int(np.sum(est.n_support_))
    return int(n_train)


def _plain(params: dict) -> str:
    return json.dumps(
        {k: (v.item() if isinstance(v, np.generic) else v) for k, v in params.items()},
        sort_keys=True,
    )


def _search(piece: Piece, est, X, y, regression: bool):
    """The parameters the CV chooses and their mean CV score (the evaluation's scoring, or
    the estimator's: accuracy, R^2)."""
    method = piece.method
    grid = method.grid_dict()
    kind = KFold if regression else StratifiedKFold
    cv = kind(n_splits=piece.folds, shuffle=True, random_state=piece.seed)
    scoring = piece.evaluation.scoring
    if method.c_path:
        path = grid.pop(method.path_param)
        search = path_grid_search(
            est,
            X,
            y,
            Cs=path,
            param_grid=grid,
            cv=cv,
            refit=False,
            scoring=scoring,
            path_param=method.path_param,
        )
    elif method.first_stage:
        cheap = clone(est).set_params(**dict(method.first_stage_params))
        first = GridSearchCV(
            cheap, dict(method.first_stage), cv=cv, n_jobs=1, refit=False, scoring=scoring
        ).fit(X, y)
        chosen = dict(first.best_params_)
        search = GridSearchCV(
            clone(est).set_params(**chosen), grid, cv=cv, n_jobs=1, refit=False, scoring=scoring
        ).fit(X, y)
        return {**chosen, **search.best_params_}, float(search.best_score_)
    else:
        search = GridSearchCV(est, grid, cv=cv, n_jobs=1, refit=False, scoring=scoring)
        search.fit(X, y)
    return search.best_params_, float(search.best_score_)


def cv_sample(X, y, n_rows: int | None, seed: int, regression: bool):
    """The rows the inner CV searches on: all of them, or a random sample of ``n_rows``
    (stratified by class) when there are more (``Evaluation.cv_rows``)."""
    if n_rows is None or len(y) <= n_rows:
        return X, y
    X_cv, _, y_cv, _ = train_test_split(
        X, y, train_size=n_rows, random_state=seed, stratify=None if regression else y
    )
    return X_cv, y_cv


def metric_values(names, y_true, y_pred) -> dict[str, float]:
    """``sklearn.metrics`` values of ``names`` (:data:`~elmscale.experiments.protocol.
    METRICS`): classification metrics in percent (macro averages over the classes,
    one-vs-rest, as the boosting-ridge paper), RMSE and R^2 as computed."""
    out = {}
    for name in names:
        if name == "balanced_accuracy":
            value = 100.0 * metrics.balanced_accuracy_score(y_true, y_pred)
        elif name == "precision_macro":
            value = 100.0 * metrics.precision_score(
                y_true, y_pred, average="macro", zero_division=0
            )
        elif name == "f1_macro":
            value = 100.0 * metrics.f1_score(y_true, y_pred, average="macro", zero_division=0)
        elif name == "rmse":
            value = metrics.root_mean_squared_error(y_true, y_pred)
        else:
            value = metrics.r2_score(y_true, y_pred)
        out[name] = float(value)
    return out


def run_trial(piece: Piece, data: LoadedSet) -> PieceResult:
    method = piece.method
    regression = data.spec.task == "regression"
    X_tr, y_tr, X_te, y_te = piece_split(data, piece)
    est = _estimator(method, data, piece.seed)
    start = time.perf_counter()
    X_cv, y_cv = cv_sample(X_tr, y_tr, piece.evaluation.cv_rows, piece.seed, regression)
    best, cv_score = _search(piece, est, X_cv, y_cv, regression)
    cv_time = time.perf_counter() - start
    model = clone(est).set_params(**best)
    start = time.perf_counter()
    model.fit(X_tr, y_tr)
    train_time = time.perf_counter() - start
    start = time.perf_counter()
    predicted = model.predict(X_te)
    test_time = time.perf_counter() - start
    row = {
        "table": piece.table,
        "dataset": piece.dataset,
        "mapping": method.mapping,
        "method": method.name,
        "trial": piece.trial,
        "seed": piece.seed,
        "n_train": len(y_tr),
        "n_test": len(y_te),
        "cv_rows": piece.evaluation.cv_rows,
        "n_cv": len(y_cv),
        "n_features": int(X_tr.shape[1]),
        "n_features_selected": selected_feature_count(model, X_tr.shape[1]),
        "params": _plain(best),
    }
    if regression:
        row["cv_score"] = cv_score
    else:
        row["cv_accuracy"] = 100.0 * cv_score
        row["train_accuracy"] = 100.0 * float(np.mean(model.predict(X_tr) == y_tr))
        row["test_accuracy"] = 100.0 * float(np.mean(predicted == y_te))
        row["n_support"] = support_vector_count(model, len(y_tr))
    metrics_named = piece.evaluation.metrics
    row.update({f"test_{k}": v for k, v in metric_values(metrics_named, y_te, predicted).items()})
    timing = {"cv_time_s": cv_time, "train_time_s": train_time, "test_time_s": test_time}
    return PieceResult(piece.key, piece.kind, [row], [{"key": piece.key, **timing}])


def _accuracy_over_C(piece, est, data, Cs, point: dict, train: bool) -> PieceResult:
    """One row per C (a figure's points): one fit of the C path where the method has one."""
    X_tr, y_tr, X_te, y_te = trial_split(data, piece.seed)
    if piece.method.c_path:
        models = est.fit_path(X_tr, y_tr, list(Cs))
    else:
        models = (clone(est).set_params(C=C).fit(X_tr, y_tr) for C in Cs)
    rows = []
    for C, model in zip(Cs, models):
        row = {
            "figure": piece.table,
            "dataset": piece.dataset,
            "method": piece.method.name,
            "mapping": piece.method.mapping,
            "trial": piece.trial,
            **point,
            "C": float(C),
        }
        if train:
            row["train_accuracy"] = 100.0 * float(np.mean(model.predict(X_tr) == y_tr))
        row["test_accuracy"] = 100.0 * float(np.mean(model.predict(X_te) == y_te))
        rows.append(row)
    return PieceResult(piece.key, piece.kind, rows, [])


def run_curve(piece: Piece, data: LoadedSet) -> PieceResult:
    """Training and test accuracy for every C at one L (one fit of the C path)."""
    n_hidden, Cs = piece.point
    est = _estimator(piece.method, data, piece.seed).set_params(n_hidden=int(n_hidden))
    return _accuracy_over_C(piece, est, data, Cs, {"n_hidden": int(n_hidden)}, train=True)


def run_grid(piece: Piece, data: LoadedSet) -> PieceResult:
    """Test accuracy for every C at one value of the kernel parameter."""
    param, value, Cs = piece.point
    est = _estimator(piece.method, data, piece.seed).set_params(**{param: value})
    point = {"param": param, "value": float(value)}
    return _accuracy_over_C(piece, est, data, Cs, point, train=False)


_RUNNERS = {"trial": run_trial, "curve": run_curve, "grid": run_grid}


def run_piece(piece: Piece, *, datasets: dict[str, LoadedSet]) -> PieceResult:
    """Run ``piece`` on one BLAS and one numba thread."""
    started_at, start = time.time(), time.perf_counter()
    with thread_budget(1):
        result = _RUNNERS[piece.kind](piece, datasets[piece.dataset])
    return result._replace(seconds=time.perf_counter() - start, started_at=started_at)


run_piece.progress_label = "reproduce"
