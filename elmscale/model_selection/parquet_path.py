"""K-fold cross-validation of the unified ELM's C path on a Parquet data set, in one or two
passes over the data (``cross_validate_path``).

The estimator is asked, through its public methods, for what the search needs: one pass
for its feature map and the per-fold Gram of its targets (``dataset_gram``), the target
coding (``target_encoder_``), every fold's path from its Gram (``solve_path``: ridge for
the unified ELM, the ensembles' own solves for the boosting-ridge ELMs) and the best
solution handed back (``set_solution``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from sklearn.base import clone, is_classifier

from elmscale.data.parquet import ParquetDataset
from elmscale.distributed import dataset_ops
from elmscale.linalg.gram import Gram
from elmscale.model_selection.results import cv_results

__all__ = ["SCORINGS", "PathCVResult", "cross_validate_path"]

SCORINGS = ("accuracy", "neg_mean_squared_error")


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
        """In the shape of scikit-learn's ``cv_results_`` (``model_selection.results``)."""
        return cv_results([{"C": float(c)} for c in self.Cs], self.split_scores.T)


def _gram_scores(gram: Gram, encoder, coefs: np.ndarray) -> np.ndarray:
    """Negative mean squared error of each fold's path from the fold's own Gram (no data)."""
    scores = np.empty(coefs.shape[:2])
    for k in range(gram.n_folds):
        fold = gram.fold(k)
        HtH, HtT, TtT = fold.ridge_terms(encoder)
        for j, beta in enumerate(coefs[k]):
            sse = TtT.sum() - 2 * np.sum(beta * HtT) + np.sum(beta * (HtH @ beta))
            scores[k, j] = -sse / max(fold.n_samples * beta.shape[1], 1)
    return scores


def cross_validate_path(
    estimator,
    dataset: ParquetDataset,
    Cs,
    *,
    n_folds: int = 5,
    scoring: str | None = None,
    fold_seed: int = 0,
    client=None,
    n_units: int | None = None,
    y=None,
) -> PathCVResult:
    """K-fold cross-validation of a random-node ELM over the values ``Cs``, then a refit.

    One pass over the data computes ``H'H`` / ``H'Y`` per fold; the training Gram of fold
    k is the total minus fold k's, and one eigendecomposition per fold gives the solutions
    for every C.  ``scoring="neg_mean_squared_error"`` (the ridge loss on the ELM's
    targets) is computed from the folds' Grams: no second pass.  ``"accuracy"`` (the
    default for classifiers) needs each validation row's prediction: one more pass that
    scores every C and fold at once.  Folds are drawn per row from ``fold_seed``.
    The best C (highest mean score; the smallest C on ties) is refitted from the total
    Gram, without reading the data again.

    ``dataset`` may also be a Dask DataFrame or Array with ``y`` a Dask Series or Array of
    the same partitions (``client`` default: Dask's default client): each persisted
    partition is a unit, its tasks run on the worker that holds it, and the folds are
    drawn per row as for a Parquet data set of the same rows in the same order (the same
    result, to the bit, when its row groups are the partitions).
    """
    from elmscale.distributed.collections import as_source

    dataset, y, client = as_source(dataset, y, client, name="dataset")
    if y is not None:
        raise ValueError(
            "y is given with Dask collections only; a ParquetDataset's labels come from "
            "its label column"
        )
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
        raise ValueError(
            f"scoring must be one of {SCORINGS} (accuracy for classifiers); got {scoring!r}"
        )
    model = clone(estimator)
    feature_map, gram = model.dataset_gram(
        dataset,
        C_max=float(Cs.max()),
        n_folds=int(n_folds),
        fold_seed=fold_seed,
        client=client,
        n_units=n_units,
    )
    encoder = model.target_encoder_
    coefs = []
    for k in range(gram.n_folds):
        HtH, HtT, _ = gram.total(exclude=k).ridge_terms(encoder)
        coefs.append(model.solve_path(HtH, HtT, Cs))
    coefs = np.asarray(coefs)  # (k, n_C, L, n_outputs)
    if scoring == "neg_mean_squared_error":
        split_scores = _gram_scores(gram, encoder, coefs)
    else:
        correct = dataset_ops.fold_scores(
            dataset,
            feature_map,
            coefs,
            encoder,
            n_folds=int(n_folds),
            fold_seed=fold_seed,
            block_rows=model.block_rows,
            client=client,
            n_threads=model.n_threads,
            n_units=n_units,
        )
        split_scores = correct / np.maximum(gram.n_rows, 1)[:, None]
    best = int(np.argmax(split_scores.mean(axis=0)))
    HtH, HtT, _ = gram.total().ridge_terms(encoder)
    model.set_params(C=float(Cs[best]))
    model.set_solution(feature_map, model.solve(HtH, HtT, float(Cs[best])))
    return PathCVResult(Cs, scoring, split_scores, float(Cs[best]), model)
