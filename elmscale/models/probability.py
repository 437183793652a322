"""Calibrated class probabilities for every classifier, as LIBSVM (``SVC(probability=True)``).

The numerics are small pure functions:

* :func:`platt_fit`: LIBSVM's ``sigmoid_train``, Platt's sigmoid fitted by Newton's method
  with backtracking on the prior-corrected targets ``(N+ + 1) / (N+ + 2)`` and
  ``1 / (N- + 2)``; :func:`sigmoid_predict` is ``P(positive | f) = 1 / (1 + exp(A f + B))``.
* :func:`pairwise_coupling`: Wu, Lin and Weng (2004), method 2 (LIBSVM's
  ``multiclass_probability``), in closed form: the minimiser of ``p'Qp`` subject to
  ``sum p = 1`` (``Q_tt = sum_{s != t} r_st^2``, ``Q_st = -r_st r_ts``), one batched
  linear solve of the KKT system for all rows (LIBSVM iterates to the same optimum).
* :func:`one_vs_rest_normalise`: the sigmoids of one problem per class, scaled to sum 1.

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

from elmscale.linalg.targets import one_vs_one_pairs

#: LIBSVM clips every pair's probability to [MIN_PROB, 1 - MIN_PROB] before coupling.
MIN_PROB = 1e-7
#: Folds of the out-of-fold scores (fewer when the smallest class has fewer rows).
CALIBRATION_FOLDS = 5
COUPLINGS = ("binary", "pairwise", "one_vs_rest")


# -- the numerics --------------------------------------------------------------------------


def platt_fit(
    f: np.ndarray, positive: np.ndarray, *, max_iter: int = 100, eps: float = 1e-5
) -> tuple[float, float]:
    """``(A, B)`` of Platt's sigmoid ``P(positive | f) = 1 / (1 + exp(A f + B))`` fitted to
    the decision values ``f`` and booleans ``positive``: LIBSVM's ``sigmoid_train``
    (Lin, Lin and Weng 2007), Newton's method with backtracking on the prior-corrected
    targets, stopping when both gradient entries are below ``eps``."""
    f = np.asarray(f, dtype=np.float64).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    if f.shape != positive.shape:
        raise ValueError(
            f"f and positive must have the same length; got {f.size} and {positive.size}"
        )
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    hi, lo = (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0)
    t = np.where(positive, hi, lo)
    min_step, sigma = 1e-10, 1e-12
    A, B = 0.0, float(np.log((n_neg + 1.0) / (n_pos + 1.0)))

    def objective(A: float, B: float) -> float:
        fApB = f * A + B
        return float(
            np.sum(
                np.where(
                    fApB >= 0,
                    t * fApB + np.log1p(np.exp(-np.abs(fApB))),
                    (t - 1.0) * fApB + np.log1p(np.exp(-np.abs(fApB))),
                )
            )
        )

    fval = objective(A, B)
    for _ in range(max_iter):
        fApB = f * A + B
        e = np.exp(-np.abs(fApB))
        # p = 1 / (1 + exp(fApB)), q = 1 - p, computed without overflow
        p = np.where(fApB >= 0, e / (1.0 + e), 1.0 / (1.0 + e))
        q = np.where(fApB >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        d2 = p * q
        h11 = sigma + float(np.sum(f * f * d2))
        h22 = sigma + float(np.sum(d2))
        h21 = float(np.sum(f * d2))
        d1 = t - p
        g1, g2 = float(np.sum(f * d1)), float(np.sum(d1))
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= min_step:
            newA, newB = A + step * dA, B + step * dB
            newf = objective(newA, newB)
            if newf < fval + 1e-4 * step * gd:
                A, B, fval = newA, newB, newf
                break
            step /= 2.0
        if step < min_step:
            break  # line search fails, as LIBSVM reports
    return float(A), float(B)


def sigmoid_predict(f: np.ndarray, A, B) -> np.ndarray:
    """``1 / (1 + exp(A f + B))`` element-wise (``A``, ``B`` broadcast against ``f``),
    without overflow."""
    fApB = np.asarray(f, dtype=np.float64) * A + B
    e = np.exp(-np.abs(fApB))
    return np.where(fApB >= 0, e / (1.0 + e), 1.0 / (1.0 + e))


def pairwise_coupling(r: np.ndarray, pairs, n_classes: int) -> np.ndarray:
    """Class probabilities ``(n, n_classes)`` from pairwise ones: ``r[:, p]`` is
    P(class ``pairs[p][0]`` | it is ``pairs[p][0]`` or ``pairs[p][1]``).  Wu, Lin and Weng
    (2004) method 2 (LIBSVM's ``multiclass_probability``): per row, the minimiser of
    ``p'Qp`` subject to ``sum p = 1``, solved from its KKT system in one batched solve.
    ``r`` is clipped to [MIN_PROB, 1 - MIN_PROB] first, as LIBSVM does."""
    r = np.clip(np.asarray(r, dtype=np.float64), MIN_PROB, 1.0 - MIN_PROB)
    pairs = np.asarray(pairs, dtype=np.intp).reshape(-1, 2)
    n = r.shape[0]
    if r.shape[1] != len(pairs):
        raise ValueError(f"r has {r.shape[1]} columns for {len(pairs)} pairs")
    k = int(n_classes)
    R = np.zeros((n, k, k))  # R[:, i, j] = r_ij = P(i | i or j)
    a, b = pairs[:, 0], pairs[:, 1]
    R[:, a, b] = r
    R[:, b, a] = 1.0 - r
    kkt = np.zeros((n, k + 1, k + 1))
    Q = -R * np.swapaxes(R, 1, 2)  # Q_st = -r_st r_ts
    idx = np.arange(k)
    Q[:, idx, idx] = np.sum(np.swapaxes(R, 1, 2) ** 2, axis=2)  # Q_tt = sum_s r_st^2
    kkt[:, :k, :k] = Q
    kkt[:, :k, k] = 1.0
    kkt[:, k, :k] = 1.0
    rhs = np.zeros((n, k + 1, 1))
    rhs[:, k, 0] = 1.0
    p = np.linalg.solve(kkt, rhs)[:, :k, 0]
    p = np.clip(p, 0.0, None)  # the optimum is >= 0 (Wu et al., Theorem 2); rounding only
    return p / p.sum(axis=1, keepdims=True)


def one_vs_rest_normalise(s: np.ndarray) -> np.ndarray:
    """Class probabilities from one sigmoid per class (``s[:, k]``: P(class k) of its
    one-vs-rest problem), scaled to sum 1 per row (a row of zeros gives equal shares)."""
    s = np.asarray(s, dtype=np.float64)
    total = s.sum(axis=1, keepdims=True)
    out = np.full_like(s, 1.0 / s.shape[1])
    np.divide(s, total, out=out, where=total > 0)
    return out


def calibrated_proba(
    scores: np.ndarray, A: np.ndarray, B: np.ndarray, coupling: str, n_classes: int
) -> np.ndarray:
    """Class probabilities ``(n, n_classes)`` from the problems' scores ``(n, n_problems)``
    and their sigmoids, coupled as ``coupling`` says (see :data:`COUPLINGS`)."""
    if coupling not in COUPLINGS:
        raise ValueError(f"coupling must be one of {COUPLINGS}; got {coupling!r}")
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    expected = {"binary": 1, "pairwise": n_classes * (n_classes - 1) // 2}.get(coupling, n_classes)
    shapes = {scores.shape[1:], A.shape, B.shape}
    if scores.ndim != 2 or shapes != {(expected,)}:
        raise ValueError(
            f"the {coupling!r} calibration of {n_classes} classes needs {expected} sigmoids "
            f"and score columns; got {A.shape} and {B.shape} sigmoid parameters and scores "
            f"of shape {scores.shape}"
        )
    s = sigmoid_predict(scores, A[None, :], B[None, :])
    if coupling == "binary":
        return np.column_stack([1.0 - s[:, 0], s[:, 0]])
    if coupling == "pairwise":
        return pairwise_coupling(s, one_vs_one_pairs(n_classes), n_classes)
    return one_vs_rest_normalise(s)  # "one_vs_rest"


def problem_targets(coupling: str, y_idx: np.ndarray, n_classes: int) -> list:
    """``(rows, positive)`` of each binary problem: the rows its sigmoid is fitted on and
    which of them are its positive class.  "binary": every row, ``classes_[1]``;
    "pairwise": the rows of the pair's classes, its first class; "one_vs_rest": every row,
    the problem's class."""
    every = np.ones(y_idx.size, dtype=bool)
    if coupling == "binary":
        return [(every, y_idx == 1)]
    if coupling == "one_vs_rest":
        return [(every, y_idx == c) for c in range(n_classes)]
    if coupling == "pairwise":
        out = []
        for a, b in one_vs_one_pairs(n_classes):
            rows = (y_idx == a) | (y_idx == b)
            out.append((rows, y_idx[rows] == a))
        return out
    raise ValueError(f"coupling must be one of {COUPLINGS}; got {coupling!r}")


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
    calls :meth:`_fit_calibration` at the end of ``fit`` with the arrays it was fitted on.
    """

    multiclass_coupling: str

    def _calibration_coupling(self) -> str:
        """ "binary" for two classes (one problem), else the family's ``multiclass_coupling``."""
        return "binary" if len(self.classes_) == 2 else self.multiclass_coupling

    def _calibration_scores(self, X) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

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
        from elmscale.data.parquet import ParquetDataset
        from elmscale.distributed.executors import make_executor

        if isinstance(X, ParquetDataset):
            raise ValueError(
                f"{type(self).__name__}(probability=True) fits its calibration on in-memory "
                "arrays; got a ParquetDataset (fit it with probability=False, or on arrays)"
            )
        X, y = np.asarray(X), np.asarray(y)
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
    def predict_log_proba(self, X) -> np.ndarray:
        """The log of :meth:`predict_proba`."""
        with np.errstate(divide="ignore"):
            return np.log(self.predict_proba(X))
