"""The sparse-ELM paper's protocol (Section VI-A, VI-C) on the shared data sets.

Random splits of the paper's sizes (Table I), features scaled to [-1, 1] on the
training part only, parameters chosen by 5-fold cross-validation (stratified,
seeded) over the paper's grid on the training part, accuracy on the test part.
"""

from __future__ import annotations

import csv
from functools import cache

import numpy as np
from _datasets import shared_data, shared_path
from sklearn.model_selection import StratifiedKFold

from elmscale.data import Scaler, load
from elmscale.model_selection import PAPER_C_GRID, path_grid_search

# name in the paper -> (training file, test file or None, loader keywords, training rows)
PAPER_SETS = {
    "Australian": ("australian/australian.dat", None, {"label": "last"}, 345),
    "Diabetes": ("diabetes/diabetes_scale", None, {}, 384),
    "Heart": ("heart/heart_scale", None, {}, 135),
    "Ionosphere": ("ionosphere/ionosphere_scale", None, {}, 176),
    "SVMguide1": ("svmguide1/svmguide1", "svmguide1/svmguide1.t", {}, 3089),
    "Satimage": ("satimage/satimage.scale", "satimage/satimage.scale.t", {}, 4435),
}


def sparse_elm_and_svc(mapping: str, C: float, param: float):
    """The sparse ELM and SVC with the same kernel and C (SVC's polynomial kernel set to
    the paper's (1 + u.v)^m: gamma=1, coef0=1; gaussian: gamma = 1 / (2 sigma^2))."""
    from sklearn.svm import SVC

    from elmscale import SparseELMClassifier

    if mapping == "gaussian":
        return (
            SparseELMClassifier(kernel="gaussian", sigma=param, C=C),
            SVC(kernel="rbf", gamma=1 / (2 * param * param), C=C),
        )
    return (
        SparseELMClassifier(kernel="polynomial", degree=int(param), C=C),
        SVC(kernel="poly", degree=int(param), gamma=1.0, coef0=1.0, C=C),
    )


def own_test_file(name: str) -> bool:
    """Sets with their own test file train on the same rows for every seed."""
    return PAPER_SETS[name][1] is not None


def _reference_rows(filename: str):
    with open(shared_path("reference", filename)) as fh:
        return list(csv.DictReader(fh))


def paper_params(dataset: str, method: str, mapping: str):
    """Table III: (C, kernel parameter) the paper chose; the parameter is None for nodes."""
    for row in _reference_rows("sparse_elm_paper_params.csv"):
        if (row["dataset"], row["method"], row["mapping"]) == (dataset, method, mapping):
            param = row["kernel_param"]
            return float(row["C"]), (float(param) if param else None)
    raise KeyError((dataset, method, mapping))


def paper_support_vectors(dataset: str, method: str, mapping: str) -> float:
    """Table VIII: the paper's mean support-vector count."""
    for row in _reference_rows("sparse_elm_paper_support_vectors.csv"):
        if (row["dataset"], row["method"], row["mapping"]) == (dataset, method, mapping):
            return float(row["n_support"])
    raise KeyError((dataset, method, mapping))


@cache
def _read(path: str, **kw):
    ds = load(shared_data(path), **kw)
    return ds.X, ds.y


def paper_split(name: str, seed: int):
    """(X_train, y_train, X_test, y_test), scaled on the training part."""
    train_file, test_file, kw, n_train = PAPER_SETS[name]
    X, y = _read(train_file, **kw)
    if test_file is None:
        order = np.random.default_rng(seed).permutation(len(y))
        train, test = order[:n_train], order[n_train:]
        X_tr, y_tr, X_te, y_te = X[train], y[train], X[test], y[test]
    else:
        X_te, y_te = _read(test_file, n_features=X.shape[1])
        X_tr, y_tr = X, y
    scaler = Scaler().fit(X_tr)
    return scaler.transform(X_tr), y_tr, scaler.transform(X_te), y_te


def paper_test_accuracy(table: str, dataset: str, method: str, mapping: str) -> float:
    for row in _reference_rows("sparse_elm_paper_results.csv"):
        if (row["table"], row["dataset"], row["method"], row["mapping"]) == (
            table,
            dataset,
            method,
            mapping,
        ):
            return float(row["test_acc"])
    raise KeyError((table, dataset, method, mapping))


def protocol_run(name: str, estimator, param_grid, seed: int, Cs=PAPER_C_GRID):
    """Cross-validate on the training part, refit, and return (test accuracy %, best params)."""
    X_tr, y_tr, X_te, y_te = paper_split(name, seed)
    cv = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
    search = path_grid_search(estimator, X_tr, y_tr, Cs=Cs, param_grid=param_grid, cv=cv)
    return 100.0 * search.best_estimator_.score(X_te, y_te), search.best_params_
