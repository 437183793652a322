"""FLSA-SVM: the forward least-squares sparse LS-SVM (Xia et al., Mathematical Problems in
Engineering 2013), and its reduced variant (candidates from a random pool of rows), as
scikit-learn estimators.

The model is ``f(x) = sum_k alpha_k K(x, sv_k) + b``: a least-squares fit of the targets on
``m = n_support`` kernel columns of the training rows, chosen one at a time by forward
orthogonal least squares (``elmscale.solvers.forward_selection``: each step takes the
column that most reduces the squared residual, orthogonalised against the chosen ones;
candidates left linearly dependent on them are pruned; back substitution gives the
weights).  The number of support vectors is the regulariser: there is no C.  The kernel
matrix is never held: each step costs one product of the candidates' kernel rows with the
new basis vector (l x M kernel values for l rows and M candidates) and memory is
O(l m + M J).

``fit_path(X, y, ms)`` returns the fitted model of every m in ``ms`` from one run to
``max(ms)`` (the selections are nested).

Classification codes the labels +1 / -1 (one column for two classes; one-vs-rest columns
for more) and selects one set of support vectors for all the columns together: a step
takes the column that most reduces the summed squared residual of every class.  One
selection serves every class at the cost of one (one-vs-one would need a selection per
pair, each its own l x M products, and count support vectors once per pair).
"""

from __future__ import annotations

import copy
import numbers
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from elmscale.core.sparse_kernels import SPARSE_FORMATS
from elmscale.core.threads import thread_budget
from elmscale.distributed.collections import lazy_on_collections
from elmscale.features.kernels import KERNELS, Kernel
from elmscale.linalg.targets import TargetEncoder
from elmscale.models.elm import N_THREADS_CONSTRAINT, check_two_classes, encode_class_labels
from elmscale.models.probability import CALIBRATION_ATTRS, ProbabilityMixin
from elmscale.models.source_score import SourceScoreMixin
from elmscale.solvers.forward_selection import (
    CandidateColumns,
    CandidateSource,
    candidate_gram,
    coefficients,
    forward_select,
    forward_select_gram,
    gram_bytes,
    residual_sums,
)

__all__ = ["FLSASVMClassifier", "FLSASVMRegressor"]


def _shares(m: int, n_groups: int) -> list[int]:
    """``m`` selections shared among ``n_groups`` selections, as evenly as they go (the
    first ones one more): the total basis size stays ``m``."""
    return [m // n_groups + (g < m % n_groups) for g in range(n_groups)]


def _joint_residuals(paths: list[np.ndarray]) -> np.ndarray:
    """The Frobenius norm of every column's residual after each round of selections (a
    selection each), a path that has stopped holding its last value."""
    if len(paths) == 1:
        return paths[0].copy()
    n = max(p.size for p in paths)
    padded = np.array([np.concatenate([p, np.full(n - p.size, p[-1])]) for p in paths])
    return np.sqrt((padded**2).sum(axis=0))


@dataclass(kw_only=True, eq=False, repr=False)
class _BaseFLSASVM(BaseEstimator):
    """Shared parameters, fitting and scoring of the FLSA-SVM estimators (the classifier
    adds ``probability``)."""

    _parameter_constraints: ClassVar[dict] = {
        "kernel": [StrOptions(set(KERNELS))],
        "sigma": [Interval(numbers.Real, 0, None, closed="neither")],
        "degree": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_support": [Interval(numbers.Integral, 1, None, closed="left")],
        "candidates": [
            StrOptions({"all"}),
            Interval(numbers.Integral, 1, None, closed="left"),
            Interval(numbers.Real, 0, 1, closed="right"),
        ],
        "tol": [Interval(numbers.Real, 0, 1, closed="left")],
        "fit_intercept": ["boolean"],
        "support_sets": [StrOptions({"shared", "per_class"})],
        "cache_mb": [Interval(numbers.Real, 0, None, closed="left")],
        "n_threads": N_THREADS_CONSTRAINT,
        "random_state": ["random_state"],
    }

    kernel: str = "gaussian"
    sigma: float = 1.0
    degree: int = 3
    n_support: int = 100
    candidates: str | int | float = "all"
    tol: float = 1e-8
    fit_intercept: bool = True
    support_sets: str = "shared"
    cache_mb: float = 1024.0
    n_threads: int | None = None
    random_state: int | np.random.RandomState | None = None

    # -- targets (classifier / regressor specific) ---------------------------------------
    def _encode_targets(self, y):  # pragma: no cover - abstract
        raise NotImplementedError

    def _shape_weights(self, w):  # pragma: no cover - abstract
        raise NotImplementedError

    def _dataset_targets(self, stats) -> TargetEncoder:  # pragma: no cover - abstract
        """The coding of a data set's labels from its column statistics; sets ``classes_``
        or ``n_outputs_``."""
        raise NotImplementedError

    # -- fitting ---------------------------------------------------------------------------
    def _kernel_obj(self) -> Kernel:
        return Kernel(self.kernel, sigma=float(self.sigma), degree=int(self.degree))

    def _candidate_rows(self, n_rows: int) -> np.ndarray:
        """Indices of the candidate rows: every row, or a random pool (sorted)."""
        if isinstance(self.candidates, str):
            return np.arange(n_rows)
        if isinstance(self.candidates, numbers.Integral):
            size = min(int(self.candidates), n_rows)
        else:
            size = max(1, int(round(float(self.candidates) * n_rows)))
        rng = check_random_state(self.random_state)
        return np.sort(rng.choice(n_rows, size=size, replace=False))

    def _run(self, X, y, n_select: int, client=None):
        """Validate, select up to ``n_select`` columns (the candidates on the workers of a
        Dask ``client`` when given): ``(candidate rows, pool, paths, residual_of)``, where
        ``residual_of(points, alpha, b)`` is a model's squared training residual per
        target column, computed from the rows."""
        from elmscale.distributed.collections import as_source, is_dataset

        X, y, client = as_source(X, y, client)
        if is_dataset(X):
            return self._run_dataset(X, y, n_select, client)
        is_regressor = isinstance(self, RegressorMixin)
        X, y = validate_data(
            self,
            X,
            y,
            dtype=np.float32,
            order="C",
            accept_sparse=SPARSE_FORMATS,
            multi_output=is_regressor,
            y_numeric=is_regressor,
        )
        T = np.asarray(self._encode_targets(y), dtype=np.float64)
        if T.ndim == 1:
            T = T[:, None]
        pool = self._candidate_rows(X.shape[0])
        groups = self._target_groups(T.shape[1])
        counts = _shares(n_select, len(groups))
        kernel = self._kernel_obj()

        def residual_of(points, alpha, b) -> np.ndarray:
            with thread_budget(self.n_threads):
                return residual_sums(kernel, X, T, points, alpha, b)

        with thread_budget(self.n_threads):
            if gram_bytes(pool.size, max(counts)) <= self.cache_mb * 2**20:
                if client is None:
                    gram = candidate_gram(kernel, X, X[pool], T)
                else:
                    from elmscale.distributed.forward_selection import dask_candidate_gram

                    gram = dask_candidate_gram(client, kernel, X, X[pool], T)
                return X[pool], pool, self._select_in_gram(gram, groups, counts), residual_of
            paths = []
            for group, n in zip(groups, counts):
                candidates: CandidateSource
                if client is None:
                    candidates = CandidateColumns(
                        kernel, X, X[pool], T[:, group], cache_mb=float(self.cache_mb)
                    )
                else:
                    from elmscale.distributed.forward_selection import DaskCandidates

                    candidates = DaskCandidates(
                        client, kernel, X, pool, T[:, group], cache_mb=float(self.cache_mb)
                    )
                paths.append(
                    forward_select(
                        candidates,
                        T[:, group],
                        n,
                        tol=float(self.tol),
                        intercept=bool(self.fit_intercept),
                    )
                )
        return X[pool], pool, paths, residual_of

    def _target_groups(self, n_columns: int) -> list[slice]:
        """The target columns each selection serves: all of them (one shared support set),
        or one each (``support_sets="per_class"``)."""
        if self.support_sets == "per_class":
            return [slice(c, c + 1) for c in range(n_columns)]
        return [slice(0, n_columns)]

    def _select_in_gram(self, gram, groups, counts) -> list:
        """Each group's selection in the candidates' space, all from one Gram."""
        return [
            forward_select_gram(
                gram.columns(group), n, tol=float(self.tol), intercept=bool(self.fit_intercept)
            )
            for group, n in zip(groups, counts)
        ]

    def _run_dataset(self, dataset, y, n_select: int, client):
        """``_run`` on a Parquet data set: the candidate pool read where its rows live and
        the candidates' Gram reduced over the units (on the workers of ``client``), the
        selection in the candidates' space here; the rows never gathered.  A pool whose
        Gram does not fit ``cache_mb`` gathers the rows and runs the rows' steps."""
        from elmscale.distributed import dataset_ops
        from elmscale.distributed.collections import check_labels_in

        check_labels_in(dataset, y)
        self._validate_params()
        stats = dataset_ops.column_stats(dataset, client=client)
        pool = self._candidate_rows(stats.n_rows)
        encoder = self._dataset_targets(stats)
        groups = self._target_groups(encoder.n_columns if encoder.for_classes else 1)
        counts = _shares(n_select, len(groups))
        if gram_bytes(pool.size, max(counts)) > self.cache_mb * 2**20:
            X, y = dataset_ops.gather_rows(dataset, client=client, n_threads=self.n_threads)
            return self._run(X, y, n_select, client)
        self.n_features_in_ = dataset.n_features
        kernel = self._kernel_obj()
        with thread_budget(self.n_threads):
            X_cand = dataset_ops.rows_at(dataset, pool, client=client, n_threads=self.n_threads)
            gram = dataset_ops.candidate_gram(
                dataset, X_cand, kernel, encoder, client=client, n_threads=self.n_threads
            )

        def residual_of(points, alpha, b) -> np.ndarray:  # one more pass over the units
            return dataset_ops.residual_sums(
                dataset, points, alpha, b, kernel, encoder, client=client, n_threads=self.n_threads
            )

        return X_cand, pool, self._select_in_gram(gram, groups, counts), residual_of

    def _set_model(self, X_cand, pool, paths, m: int, residual_of) -> None:
        """The model of the first ``m`` selections (shared among the paths as in ``_run``):
        the union of the paths' support vectors, each column's weights on its own; the
        last residual is this model's own, from the rows (``residual_of``): the tracked
        ones can drift (``forward_select_gram``), and a user reads it to choose ``m``."""
        parts = [coefficients(path, n) for path, n in zip(paths, _shares(m, len(paths)))]
        chosen_each = [path.selected[: a.shape[0]] for path, (a, _) in zip(paths, parts)]
        chosen = np.array(
            list(dict.fromkeys(int(j) for c in chosen_each for j in c)), dtype=np.int64
        )
        where = {j: i for i, j in enumerate(chosen.tolist())}
        J = sum(a.shape[1] for a, _ in parts)
        alpha, b = np.zeros((chosen.size, J)), np.zeros(J)
        col = 0
        for (a, b_part), picked in zip(parts, chosen_each):
            width = a.shape[1]
            alpha[[where[int(j)] for j in picked], col : col + width] = a
            b[col : col + width] = b_part
            col += width
        rows = pool[chosen]
        self.support_ = rows.astype(np.int64)
        self.support_vectors_ = X_cand[chosen]
        self.dual_coef_ = self._shape_weights(alpha)
        shaped = self._shape_weights(b[None, :])  # (1,) for one column, else (1, J)
        self.intercept_ = float(shaped[0]) if shaped.ndim == 1 else shaped[0]
        self.n_support_ = int(rows.size)
        self.n_iter_ = int(sum(c.size for c in chosen_each))
        residuals = _joint_residuals(
            [path.residuals[: c.size + 1] for path, c in zip(paths, chosen_each)]
        )
        residuals[-1] = float(np.sqrt(np.sum(residual_of(X_cand[chosen], alpha, b))))
        self.residuals_ = residuals

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, client=None):
        """Select ``n_support`` kernel columns (fewer when the rank runs out).

        ``X`` may be a :class:`~elmscale.data.parquet.ParquetDataset` (``y`` None: its label
        column): the candidate pool is read where its rows live and the candidates' Gram
        reduced over the units, on the Dask cluster of ``client`` or here, the rows never
        gathered (a pool whose Gram does not fit ``cache_mb`` gathers them).  Dask
        collections (``X`` a DataFrame / Array, ``y`` a Series / Array of the same
        partitions) are fitted as such a data set, each partition read on the worker that
        holds it (``elmscale.distributed.collections``).  With arrays
        and ``client``: the candidates' Gram computed over shares of the rows on its workers
        when it fits ``cache_mb``; otherwise the candidates' state and kernel columns live
        on its workers (one actor each, the rows sent once), one round trip per step.  The
        selection equals the local one."""
        X, pool, paths, residual_of = self._run(X, y, int(self.n_support), client)
        self._set_model(X, pool, paths, int(self.n_support), residual_of)
        return self

    def fit_path(self, X, y, ms, client=None) -> list:
        """A fitted copy for each number of support vectors in ``ms`` (its ``n_support``
        set to it), all from one selection run to ``max(ms)`` (``client``: as ``fit``)."""
        ms = [int(m) for m in ms]
        if not ms or min(ms) < 1:
            raise ValueError(f"ms must be a non-empty list of integers >= 1; got {ms}")
        self._validate_params()
        X, pool, paths, residual_of = self._run(X, y, max(ms), client)
        for name in CALIBRATION_ATTRS:  # the copies are not calibrated
            self.__dict__.pop(name, None)
        models = []
        for m in ms:
            # a copy carries what _run set (n_features_in_, classes_ or n_outputs_, ...)
            model = copy.copy(self).set_params(n_support=m)
            model._set_model(X, pool, paths, m, residual_of)
            models.append(model)
        self._set_model(X, pool, paths, min(int(self.n_support), max(ms)), residual_of)
        return models

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR / CSC rows, never densified
        return tags

    # -- scoring ---------------------------------------------------------------------------
    def _raw_output(self, X) -> np.ndarray:
        check_is_fitted(self, ("support_vectors_", "dual_coef_"))
        X = validate_data(
            self, X, dtype=np.float32, order="C", accept_sparse=SPARSE_FORMATS, reset=False
        )
        alpha = np.asarray(self.dual_coef_, dtype=np.float64)
        alpha2 = alpha[:, None] if alpha.ndim == 1 else alpha
        b = np.atleast_1d(np.asarray(self.intercept_, dtype=np.float64))
        with thread_budget(self.n_threads):
            if alpha2.shape[0] == 0:
                out = np.zeros((X.shape[0], alpha2.shape[1]))
            else:
                out = self._kernel_obj().block_matvec(X, self.support_vectors_, alpha2)
        out = out + b[None, :]
        return out


_PARAMS_DOC = """
    Parameters
    ----------
    kernel : {"gaussian", "laplacian", "polynomial"}, default="gaussian"
        The shared kernels: ``exp(-||u - v||^2 / (2 sigma^2))``,
        ``exp(-||u - v|| / sigma)``, ``(u . v + 1)^degree``.
    sigma : float, default=1.0
        Width of the gaussian and laplacian kernels.
    degree : int, default=3
        Degree of the polynomial kernel.
    n_support : int, default=100
        m, the number of kernel columns (support vectors) to select: the regulariser.
    candidates : "all", int or float in (0, 1], default="all"
        The rows whose kernel columns may be selected: every row (FLSA-SVM), or a random
        pool of that many rows / that fraction of them (the reduced FLSA-SVM), drawn with
        ``random_state``.
    tol : float, default=1e-8
        Linear-dependence pruning: a candidate whose squared norm after orthogonalisation
        against the chosen columns is at most ``tol`` times its squared norm before is
        dropped (step vii of the paper: ``n_support_`` may end below ``n_support``).
    fit_intercept : bool, default=True
        A constant column, first in the orthogonal basis (so the kernel columns are chosen
        against centred targets); its weight is ``intercept_``.  It is not a candidate and
        not counted in ``n_support``.  False: no bias, as the LS-SVM without one.
    support_sets : {"shared", "per_class"}, default="shared"
        One set of support vectors for every target column (each step takes the column
        that most reduces their summed squared residual), or a set per column (a class of
        the one-vs-rest coding, or an output), ``n_support`` shared among them so that the
        total basis size is the same; ``support_`` is then their union and each column's
        weights are zero outside its own set.  Two classes: the same model either way.
    cache_mb : float, default=1024
        Memory for the candidates' Gram matrix (M x M float64, with their products with the
        basis, M x m): when it fits, the selection runs in the candidates' space
        (``forward_select_gram``: the kernel values once, one BLAS product, then O(M m) a
        step).  Otherwise, and on Dask (per worker), the rows' steps, with as many
        candidates' kernel columns as fit kept in float32 (``CandidateColumns``); the
        others' kernel products with each new basis vector are computed again.  The same
        selection either way.
    n_threads : int or None, default=None
        Threads for the kernel products (None or -1: all cores).
    random_state : int, RandomState or None, default=None
        Seed of the candidate pool (only with ``candidates`` a number).

    Time and memory, for l training rows, M candidates, d features and m steps: with the
    Gram in ``cache_mb``, l M d kernel operations once and the l M^2 product that forms
    the Gram, then O(M m) a step; memory 8 M (M + m) bytes.  Otherwise l M d kernel
    operations per step (the candidates' products with the new basis vector, computed,
    never stored) plus O(l m) for the orthogonalisation; memory O(l m + M J) (J target
    columns) and one block of 1,024 kernel rows.
"""

_ATTRS_DOC = """
    support_ : ndarray of shape (n_support_,)
        Indices of the selected training rows, in the order chosen.
    support_vectors_ : ndarray of shape (n_support_, n_features), float32
    dual_coef_ : ndarray of shape (n_support_,) or (n_support_, n_columns)
        Weights alpha of the support vectors' kernel columns.
    intercept_ : float or ndarray of shape (n_columns,)
    residuals_ : ndarray of shape (n_support_ + 1,)
        Frobenius norm of the training residual before the first kernel column (after the
        constant one) and after each step.  The last is the fitted model's own residual,
        computed from the training rows (on a ParquetDataset, one more pass); the others
        are the selection's running values, which in the candidates' space (the Gram in
        ``cache_mb``) are computed from squared norms and so are rounding below about
        ``sqrt(u k) kappa |Y|`` (u = 2^-53, k steps, kappa the chosen columns' condition
        number): see ``forward_select_gram``.
    n_support_ : int
        Support vectors selected (below ``n_support`` when the rank runs out).
    n_iter_ : int
        Selection steps taken (equal to ``n_support_``).
    n_features_in_ : int
"""


@dataclass(kw_only=True, eq=False, repr=False)
class FLSASVMClassifier(SourceScoreMixin, ProbabilityMixin, ClassifierMixin, _BaseFLSASVM):
    __doc__ = (
        "FLSA-SVM classifier: forward least-squares selection of kernel columns on +1 / -1\n"
        "    targets (one column for two classes, one-vs-rest columns for more, with one\n"
        "    shared set of support vectors); predicts the sign / the largest output.\n"
        + _PARAMS_DOC
        + "    probability : bool, default=False\n"
        "        Also fit calibrated probabilities (``predict_proba``) as\n"
        "        ``SVC(probability=True)``: Platt sigmoids on out-of-fold outputs of a 5-fold\n"
        "        stratified split, one per class normalised to sum 1 for three classes or\n"
        "        more (``elmscale.models.probability``); in-memory fits only.\n"
        + "\n    Attributes\n    ----------\n    classes_ : ndarray of shape (n_classes,)\n"
        + _ATTRS_DOC
        + "    prob_a_, prob_b_ : ndarray (n_problems,), float64\n"
        "        Platt's sigmoids ``1 / (1 + exp(A f + B))`` (``probability=True``): the\n"
        "        decision value for two classes, else one per class (its output column).\n"
        '    probability_coupling_ : "binary" or "one_vs_rest"\n'
    )

    target_coding = "plus_minus"

    multiclass_coupling = "one_vs_rest"  # (predict_proba: the class columns, normalised)

    _parameter_constraints: ClassVar[dict] = {
        **_BaseFLSASVM._parameter_constraints,
        "probability": ["boolean"],
    }

    probability: bool = False

    def fit(self, X, y=None, client=None):
        """As :meth:`_BaseFLSASVM.fit`; with ``probability=True`` also the calibration
        (on arrays: five out-of-fold fits of a clone, then Platt's sigmoids; refused with a
        ParquetDataset before any work)."""
        self._check_calibration_data(X)
        super().fit(X, y, client=client)
        self._fit_calibration(X, y)
        return self

    def fit_path(self, X, y, ms, client=None) -> list:
        """As :meth:`_BaseFLSASVM.fit_path`; with ``probability=True`` every copy is
        calibrated, from one selection path per fold of the calibration's split (``self``
        too when its ``n_support`` is among ``ms``)."""
        self._check_calibration_data(X)
        models = super().fit_path(X, y, ms, client=client)
        self._fit_calibration(X, y, path=(models, [m.n_support for m in models]))
        for model in models:
            if model.n_support == self.n_support:
                self._take_calibration(model)
        return models

    def _calibration_scores(self, X) -> np.ndarray:
        """The scores the sigmoids read, ``(n, n_problems)``: the output for two classes
        (> 0: ``classes_[1]``), else one column per class."""
        return self._raw_output(X)

    def _encode_targets(self, y):
        return encode_class_labels(self, y, self.target_coding)

    def _dataset_targets(self, stats) -> TargetEncoder:
        self.classes_ = np.asarray(stats.classes)
        check_two_classes(self)
        return TargetEncoder(self.target_coding, self.classes_)

    def _shape_weights(self, w):
        return w[:, 0] if w.shape[1] == 1 else w

    @lazy_on_collections
    def decision_function(self, X) -> np.ndarray:
        """(n_samples,) for two classes (> 0 means ``classes_[1]``), else
        (n_samples, n_classes)."""
        out = self._raw_output(X)
        return out[:, 0] if len(self.classes_) == 2 else out

    @lazy_on_collections
    def predict(self, X) -> np.ndarray:
        out = self._raw_output(X)
        return self.classes_[TargetEncoder(self.target_coding, self.classes_).decode(out)]


class FLSASVMRegressor(SourceScoreMixin, RegressorMixin, _BaseFLSASVM):
    __doc__ = (
        "FLSA-SVM regressor: forward least-squares selection of kernel columns on real\n"
        "    targets (several outputs share one set of support vectors).\n"
        + _PARAMS_DOC
        + "\n    Attributes\n    ----------\n    n_outputs_ : int\n"
        + _ATTRS_DOC
    )

    def _encode_targets(self, y):
        y = np.asarray(y, dtype=np.float64)
        if y.ndim not in (1, 2):
            raise ValueError(f"y must be 1-D or 2-D; got shape {y.shape}")
        self._single_output = y.ndim == 1
        T = y[:, None] if y.ndim == 1 else y
        self.n_outputs_ = int(T.shape[1])
        return T

    def _dataset_targets(self, stats) -> TargetEncoder:
        del stats  # a data set's label column: one output
        self._single_output = True
        self.n_outputs_ = 1
        return TargetEncoder("values")

    def _shape_weights(self, w):
        return w[:, 0] if self._single_output else w

    @lazy_on_collections
    def predict(self, X) -> np.ndarray:
        out = self._raw_output(X)
        return out[:, 0] if self._single_output else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
