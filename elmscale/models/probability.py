"""Calibrated class probabilities for every classifier, as LIBSVM (``SVC(probability=True)``).

The numerics (Platt's sigmoid as LIBSVM's ``sigmoid_train``, Wu, Lin and Weng's pairwise
coupling, the one-vs-rest normalisation) are pure functions in
:mod:`elmscale.linalg.calibration`, imported here.

:class:`ProbabilityMixin` fits the calibration for any classifier that says which scores
its binary problems read (``_calibration_scores(X)`` ``(n, n_problems)``) and how they are
coupled (``_calibration_coupling()``: "binary", "pairwise" or "one_vs_rest"): out-of-fold
scores of clones fitted with ``probability=False`` on a ``StratifiedKFold`` (5 folds,
shuffled, seeded by the estimator's ``random_state`` or 0), the folds side by side on the
estimator's threads (or Ray tasks, for a fit given ``ray_address``), then one sigmoid per
problem (``prob_a_``, ``prob_b_``).
"""

from __future__ import annotations

import functools
import numbers

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import StratifiedKFold
from sklearn.utils.validation import check_is_fitted

from elmscale.core.sparse_kernels import is_sparse
from elmscale.distributed.collections import lazy_on_collections
from elmscale.linalg.calibration import calibrated_proba, platt_fit, problem_targets

#: Folds of the out-of-fold scores (fewer when the smallest class has fewer rows).
CALIBRATION_FOLDS = 5

# -- the estimators' side ------------------------------------------------------------------

#: The fitted attributes of the calibration (a copy of a model made without it drops them).
CALIBRATION_ATTRS = ("prob_a_", "prob_b_", "probability_coupling_")


def _no_calibration(estimator) -> AttributeError:
    return AttributeError(
        f"{type(estimator).__name__} has no calibrated probabilities: it was fitted "
        "without calibration (probability=False, or a model file written before "
        "probabilities existed); fit it with probability=True to use predict_proba"
    )


class _if_probability:
    """scikit-learn's ``available_if`` for ``probability``, with the reason as the message:
    on an estimator whose ``probability`` is False the method is not an attribute
    (``hasattr`` is False), and reaching for it raises an AttributeError that names the
    estimator and says to fit with ``probability=True`` (``available_if`` would say only
    that the attribute is missing)."""

    def __init__(self, fn):
        self.fn = fn
        functools.update_wrapper(self, fn)

    def __get__(self, obj, owner=None):
        if obj is None:
            return self.fn
        if not obj.probability:
            raise _no_calibration(obj)
        return self.fn.__get__(obj, owner)


def _fold_scores(split, *, X, y, base, path_values):
    """The scores of one fold's held-out rows: of a fit, or of each model of a path."""
    train, test = split
    if path_values is None:
        return [clone(base).fit(X[train], y[train])._calibration_scores(X[test])]
    models = clone(base).fit_path(X[train], y[train], path_values)
    return [model._calibration_scores(X[test]) for model in models]


class ProbabilityMixin:
    """``predict_proba`` / ``predict_log_proba`` from sigmoids fitted on out-of-fold scores.

    A classifier provides ``probability`` (a parameter), ``classes_``,
    ``_calibration_scores(X)`` ``(n, n_problems)`` and ``multiclass_coupling`` (how its
    problems are coupled for three classes or more: "pairwise" or "one_vs_rest"), and
    calls :meth:`_fit_calibration` at the end of ``fit`` with the arrays it was fitted on
    (a ``fit`` that takes a ParquetDataset calls :meth:`_check_calibration_data` first).
    """

    multiclass_coupling: str

    def _calibration_coupling(self) -> str:
        """ "binary" for two classes (one problem), else the family's ``multiclass_coupling``."""
        return "binary" if len(self.classes_) == 2 else self.multiclass_coupling

    def _calibration_scores(self, X) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _check_calibration_data(self, X) -> None:
        """Refuse ``probability=True`` with a ParquetDataset or Dask collections: the
        calibration's out-of-fold fits read in-memory arrays.  A ``fit`` that takes data
        sets calls this first, so that the refusal comes before the fit's work, not after
        it."""
        from elmscale.distributed.collections import is_collection, is_dataset

        if self.probability and (is_dataset(X) or is_collection(X)):
            what = "Dask collections" if is_collection(X) else f"a {type(X).__name__}"
            raise ValueError(
                f"{type(self).__name__}(probability=True) fits its calibration on in-memory "
                f"arrays; got {what} (fit it with probability=False, or on arrays)"
            )

    def _fit_calibration(self, X, y, *, ray_address=None, path=None) -> None:
        """Fit ``prob_a_``, ``prob_b_`` and ``probability_coupling_`` when ``probability``
        is True (else drop a previous fit's); ``X``, ``y``: the fit's rows and labels.  The
        out-of-fold fits run side by side on ``n_threads`` threads, or as Ray tasks on the
        Ray at ``ray_address`` (the same model either way).  ``path``: ``(models, values)``
        of a ``fit_path``: each of its models is calibrated instead of ``self``, from one
        ``fit_path`` of the same values per fold."""
        targets = [self] if path is None else list(path[0])
        for model in (self, *targets):
            for name in CALIBRATION_ATTRS:
                model.__dict__.pop(name, None)
        if not self.probability:
            return
        from elmscale.distributed.executors import make_executor

        self._check_calibration_data(X)
        X = X.tocsr() if is_sparse(X) else np.asarray(X)  # sparse rows: CSR, row-indexable folds
        y = np.asarray(y)
        if y.ndim == 2 and y.shape[1] == 1:
            y = y[:, 0]
        classes = self.classes_
        y_idx = np.searchsorted(classes, y)
        counts = np.bincount(y_idx, minlength=classes.size)
        n_splits = int(min(CALIBRATION_FOLDS, counts.min()))
        if n_splits < 2:
            rare = classes[int(np.argmin(counts))].tolist()
            raise ValueError(
                f"{type(self).__name__}(probability=True) needs at least 2 rows of every "
                f"class for its out-of-fold calibration; class {rare!r} has "
                f"{int(counts.min())}"
            )
        seed = getattr(self, "random_state", None)
        if seed is None or not isinstance(seed, (numbers.Integral, np.random.RandomState)):
            seed = 0
        splits = list(StratifiedKFold(n_splits, shuffle=True, random_state=seed).split(X, y_idx))
        base = clone(self).set_params(probability=False)
        executor = make_executor(ray_address=ray_address, n_threads=self.n_threads)
        shared = {"X": X, "y": y, "base": base, "path_values": None if path is None else path[1]}
        parts = executor.map(_fold_scores, splits, shared=shared, label="calibration")
        coupling = self._calibration_coupling()
        problems = problem_targets(coupling, y_idx, classes.size)
        for i, model in enumerate(targets):
            f = np.empty((y.size, parts[0][i].shape[1]))
            for (_, test), part in zip(splits, parts):
                f[test] = part[i]
            fitted = [
                platt_fit(f[rows, p], positive) for p, (rows, positive) in enumerate(problems)
            ]
            model.prob_a_ = np.array([a for a, _ in fitted], dtype=np.float64)
            model.prob_b_ = np.array([b for _, b in fitted], dtype=np.float64)
            model.probability_coupling_ = coupling

    def _take_calibration(self, model) -> None:
        """Copy ``model``'s calibration (a path's model equal to this one) onto this one."""
        for name in CALIBRATION_ATTRS:
            if name in vars(model):
                setattr(self, name, getattr(model, name))

    @_if_probability
    @lazy_on_collections
    def predict_proba(self, X) -> np.ndarray:
        """Calibrated class probabilities ``(n_samples, n_classes)``, columns in the order
        of ``classes_`` (``probability=True`` only).  Their argmax may differ from
        ``predict`` on rows near the boundary, as SVC's (the sigmoids are fitted apart from
        the decision rule)."""
        check_is_fitted(self)
        if "prob_a_" not in vars(self):
            raise _no_calibration(self)
        scores = np.asarray(self._calibration_scores(X), dtype=np.float64)
        return calibrated_proba(
            scores, self.prob_a_, self.prob_b_, self.probability_coupling_, len(self.classes_)
        )

    @_if_probability
    @lazy_on_collections
    def predict_log_proba(self, X) -> np.ndarray:
        """The log of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))
