"""Whole-data-set operations on a :class:`~elmscale.parquet_units.ParquetDataset`.

Each takes ``client=None`` (run the units here, one after another, on this process's
cores) or a ``distributed.Client`` (one task per unit, partial results summed on the
workers); both paths call the same unit functions (``elmscale.reductions``).

* :func:`column_stats` / :func:`fit_scaler`: one pass for rows, classes and the [-1, 1]
  scaler.
* :func:`gram`: ``H'H`` / ``H'Y`` of a hidden layer (optionally per CV fold).
* :func:`gather_rows`, :func:`kernel_matrix`: for the kernel ELM (the training rows are
  part of the model, so they come to the coordinator; the kernel matrix is computed in row
  blocks on the workers).
* :func:`predict`, :func:`decision_function`: score every row with a fitted model.
* :func:`cross_validate_path`: the unified ELM's whole C path for K folds from one pass
  (per-fold Grams, one eigendecomposition per fold).

``ELMClassifier(...).fit(dataset, client=client)`` and ``fit_path`` use these.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone, is_classifier

from elmscale.data.parquet import ParquetDataset
from elmscale.distributed.executors import broadcast, map_units, reduce_units
from elmscale.distributed.units import (
    ColumnStats,
    UnitGram,
    add_arrays,
    metrics_from_sums,
    unit_column_stats,
    unit_fold_scores,
    unit_gram,
    unit_kernel_rows,
    unit_method,
    unit_metric_sums,
    unit_rows,
)
from elmscale.features.base import DEFAULT_BLOCK_ROWS
from elmscale.features.kernels import Kernel
from elmscale.linalg.ridge import ridge_path, solve_ridge

__all__ = ["PathCVResult", "column_stats", "cross_validate_path", "decision_function", "evaluate",
           "fit_scaler", "gather_rows", "gram", "kernel_matrix", "predict"]


#: Size of the kernel-matrix block one task returns.
KERNEL_BLOCK_BYTES = 64 * 2**20


def _check_dataset(dataset) -> ParquetDataset:
    if not isinstance(dataset, ParquetDataset):
        raise TypeError(f"expected a ParquetDataset (elmscale.open_parquet); got "
                        f"{type(dataset).__name__}")
    return dataset


#: With a client and no unit count set, at least this many units per worker thread.
UNITS_PER_THREAD = 2


def _units(dataset, client, n_units: int | None = None):
    """The data set's units: ``n_units`` or the data set's own count if set; otherwise one
    per row group, cut finer when that leaves a cluster's threads idle."""
    units = _check_dataset(dataset).units(n_units)
    if n_units is None and dataset.n_units is None and client is not None:
        wanted = UNITS_PER_THREAD * sum(client.nthreads().values())
        if len(units) < wanted:
            units = dataset.units(wanted)
    return units


def column_stats(dataset: ParquetDataset, *, client=None, n_units: int | None = None
                 ) -> ColumnStats:
    """Rows, raw per-column minima / maxima and class counts of the whole data set."""
    units = _units(dataset, client, n_units)
    return reduce_units(unit_column_stats, units, ColumnStats.combine, client=client)


def fit_scaler(dataset: ParquetDataset, *, client=None, feature_range=(-1, 1)):
    """The paper's scaler fitted on every row of ``dataset`` (one pass)."""
    return column_stats(dataset, client=client).scaler(feature_range)


def gram(dataset: ParquetDataset, layer, *, targets: str = "classes", n_folds: int = 1,
         fold_seed: int = 0, precision: str = "double", block_rows: int = DEFAULT_BLOCK_ROWS,
         client=None, n_threads: int | None = None, n_units: int | None = None) -> UnitGram:
    """``H'H``, ``H'Y`` of ``layer`` (a ``HiddenLayer`` or ``ConcatenatedLayers``) over every
    row, per fold when ``n_folds`` > 1.  ``n_threads`` applies without a client."""
    units = _units(dataset, client, n_units)
    return reduce_units(unit_gram, units, UnitGram.combine, client=client,
                        threads_per_task=None if client is not None else n_threads,
                        layer=layer.to_dict(), targets=targets, n_folds=n_folds,
                        fold_seed=fold_seed, precision=precision, block_rows=block_rows)


def gather_rows(dataset: ParquetDataset, *, client=None, n_threads: int | None = None
                ) -> tuple[np.ndarray, np.ndarray | None]:
    """Every row on the coordinator: ``(X float32, y)`` (for small sets: kernel models)."""
    units = _units(dataset, client)
    parts = map_units(unit_rows, units, client=client,
                      threads_per_task=None if client is not None else n_threads)
    X = np.concatenate([p[0] for p in parts])
    y = None if dataset.label is None else np.concatenate([p[1] for p in parts])
    return X, y


def kernel_matrix(dataset: ParquetDataset, points: np.ndarray, kernel: Kernel, *, client=None,
                  n_threads: int | None = None) -> np.ndarray:
    """``K(every row of dataset, points)``, float64, computed on row blocks of at most
    ``KERNEL_BLOCK_BYTES`` each (so a task's result stays small)."""
    points = np.ascontiguousarray(points, dtype=np.float32)
    block_rows = max(1, KERNEL_BLOCK_BYTES // (8 * max(len(points), 1)))
    n_units = max(len(_check_dataset(dataset).units()), -(-dataset.n_rows // block_rows))
    units = dataset.units(n_units)
    blocks = map_units(unit_kernel_rows, units, client=client,
                       threads_per_task=None if client is not None else n_threads,
                       points=broadcast(points, client), kernel=kernel.to_dict())
    return np.concatenate(blocks)


def _model_for_tasks(model, n_threads: int | None):
    """A copy whose estimators' own thread counts are the task's (a model's methods set
    their own budget; left at "all cores" inside every task, they would oversubscribe)."""
    task_model = copy.deepcopy(model)
    for step in (task_model.steps if hasattr(task_model, "steps") else [(None, task_model)]):
        if "n_threads" in step[1].get_params(deep=False):
            step[1].n_threads = n_threads
    return task_model


def evaluate(model, dataset: ParquetDataset, *, client=None, n_threads: int | None = None
             ) -> dict:
    """Accuracy (classifiers) or R^2 (regressors) of ``model`` on every labelled row."""
    _check_dataset(dataset)
    if dataset.label is None:
        raise ValueError(f"{dataset.source}: no label column; expected labels to evaluate")
    threads = 1 if client is not None else n_threads
    sums = reduce_units(unit_metric_sums, _units(dataset, client), add_arrays, client=client,
                        threads_per_task=threads,
                        model=broadcast(_model_for_tasks(model, threads), client))
    return metrics_from_sums(sums)


def _score(model, dataset, method: str, client, n_threads) -> np.ndarray:
    units = _units(dataset, client)
    if dataset.n_features != getattr(model, "n_features_in_", dataset.n_features):
        raise ValueError(f"{dataset.source}: {dataset.n_features} feature columns; the model "
                         f"expects {model.n_features_in_}")
    threads = 1 if client is not None else n_threads
    parts = map_units(unit_method, units, client=client, threads_per_task=threads,
                      model=broadcast(_model_for_tasks(model, threads), client), method=method)
    return np.concatenate(parts)


def predict(model, dataset: ParquetDataset, *, client=None, n_threads: int | None = None
            ) -> np.ndarray:
    """``model.predict`` of every row of ``dataset``, in row order."""
    return _score(model, dataset, "predict", client, n_threads)


def decision_function(model, dataset: ParquetDataset, *, client=None,
                      n_threads: int | None = None) -> np.ndarray:
    """``model.decision_function`` of every row of ``dataset``, in row order."""
    return _score(model, dataset, "decision_function", client, n_threads)


@dataclass
class PathCVResult:
    """Cross-validation of a C path.  ``split_scores[k, j]``: fold k, ``Cs[j]``."""

    Cs: np.ndarray
    scoring: str
    split_scores: np.ndarray
    best_C: float
    best_estimator: object = field(repr=False)

    @property
    def mean_scores(self) -> np.ndarray:
        return self.split_scores.mean(axis=0)

    @property
    def std_scores(self) -> np.ndarray:
        return self.split_scores.std(axis=0)

    def cv_results(self) -> dict:
        """In the shape of scikit-learn's ``cv_results_``."""
        results = {"params": [{"C": float(c)} for c in self.Cs], "param_C": self.Cs.copy(),
                   "mean_test_score": self.mean_scores,
                   "std_test_score": self.std_scores}
        for k, row in enumerate(self.split_scores):
            results[f"split{k}_test_score"] = row
        order = np.argsort(-self.mean_scores, kind="stable")
        results["rank_test_score"] = np.empty(self.Cs.size, dtype=np.int64)
        results["rank_test_score"][order] = np.arange(1, self.Cs.size + 1)
        return results


SCORINGS = ("accuracy", "neg_mean_squared_error")


def _gram_scores(ug: UnitGram, coefs: np.ndarray) -> np.ndarray:
    """Negative mean squared error of each fold's path from the fold's own Gram (no data)."""
    scores = np.empty(coefs.shape[:2])
    for k in range(ug.n_folds):
        stats, TtT = ug.fold_stats(k)
        for j, beta in enumerate(coefs[k]):
            sse = TtT.sum() - 2 * np.sum(beta * stats.HtT) + np.sum(beta * (stats.HtH @ beta))
            scores[k, j] = -sse / max(stats.n_samples * beta.shape[1], 1)
    return scores


def cross_validate_path(estimator, dataset: ParquetDataset, Cs, *, n_folds: int = 5,
                        scoring: str | None = None, fold_seed: int = 0, client=None,
                        n_units: int | None = None) -> PathCVResult:
    """K-fold cross-validation of a random-node ELM over the values ``Cs``, then a refit.

    One pass over the data computes ``H'H`` / ``H'Y`` per fold; the training Gram of fold
    k is the total minus fold k's, and one eigendecomposition per fold gives the solutions
    for every C.  ``scoring="neg_mean_squared_error"`` (the ridge loss on the ELM's
    targets) is computed from the folds' Grams: no second pass.  ``"accuracy"`` (the
    default for classifiers) needs each validation row's prediction: one more pass that
    scores every C and fold at once.  Folds are drawn per row from ``fold_seed``.
    The best C (highest mean score; the smallest C on ties) is refitted from the total
    Gram, without reading the data again.
    """
    if getattr(estimator, "kernel", None) is not None:
        raise ValueError("cross_validate_path needs random hidden nodes (kernel=None)")
    Cs = np.asarray(Cs, dtype=np.float64).ravel()
    if Cs.size == 0 or not np.all(Cs > 0):
        raise ValueError(f"Cs must be positive values; got {Cs.tolist()}")
    if int(n_folds) < 2:
        raise ValueError(f"n_folds must be >= 2; got {n_folds}")
    classifier = is_classifier(estimator)
    scoring = scoring or ("accuracy" if classifier else "neg_mean_squared_error")
    if scoring not in SCORINGS or (scoring == "accuracy" and not classifier):
        raise ValueError(f"scoring must be one of {SCORINGS} (accuracy for classifiers); got "
                         f"{scoring!r}")
    model = clone(estimator)
    model._validate_params()
    layer, precision, ug = model._dataset_gram_stats(
        _check_dataset(dataset), client, float(Cs.max()), n_folds=int(n_folds),
        fold_seed=fold_seed, n_units=n_units)
    coefs = []
    for k in range(ug.n_folds):
        train, _ = ug.gram_stats(exclude_fold=k)
        path = ridge_path(train.HtH, train.HtT, Cs)
        coefs.append(path)
    coefs = np.asarray(coefs)  # (k, n_C, L, n_outputs)
    if scoring == "neg_mean_squared_error":
        split_scores = _gram_scores(ug, coefs)
    else:
        correct = reduce_units(
            unit_fold_scores, _units(dataset, client, n_units), add_arrays, client=client,
            threads_per_task=None if client is not None else model.n_threads,
            layer=layer.to_dict(), coefs=broadcast(coefs, client), classes=ug.classes,
            n_folds=int(n_folds), fold_seed=fold_seed, block_rows=model.block_rows)
        split_scores = correct / np.maximum(ug.n_rows, 1)[:, None]
    best = int(np.argmax(split_scores.mean(axis=0)))
    total, _ = ug.gram_stats()
    model.set_params(C=float(Cs[best]))
    model._set_solution(layer, solve_ridge(total.HtH, total.HtT, float(Cs[best])))
    return PathCVResult(Cs, scoring, split_scores, float(Cs[best]), model)
