"""The unified ELM (paper Section III-B, eq. 11) as scikit-learn estimators.

* Random hidden nodes (``kernel=None``): primal solution
  ``beta = (I/C + H'H)^-1 H'T`` from ``H'H`` and ``H'T`` accumulated block by
  block (``elmscale.linalg.gram``); scoring is ``h(x) beta``.
* Kernels (``kernel="gaussian" | "laplacian" | "polynomial"``): dual solution
  ``alpha = (I/C + Omega)^-1 T``; scoring is ``K(x, X_train) alpha``.

Either way the fitted model is a feature map (``feature_map_``: the ``HiddenLayer``, or
``KernelFeatures`` against the training rows) and output weights, and scoring decides by
the map's type.  On a Parquet data set, ``dataset_gram`` (one pass: the feature map and the
Gram of the targets), ``target_encoder_`` and ``set_solution`` let a search such as
``elmscale.model_selection.cross_validate_path`` solve the ridge problems itself.

``C`` is the paper's: larger C, less regularisation.  Classifiers use one output
per class with targets +1 / -1 (one output of +1 / -1 for two classes).
``fit_path(X, y, Cs)`` returns one fitted estimator per C from one
eigendecomposition.
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from elmscale.core.sparse_kernels import SPARSE_FORMATS
from elmscale.core.threads import thread_budget
from elmscale.distributed.collections import lazy_on_collections
from elmscale.features.base import FeatureMap, iter_row_blocks
from elmscale.features.kernels import KERNEL_KINDS, Kernel, KernelFeatures, mg_params
from elmscale.features.layers import HIDDEN_KINDS, HiddenLayer
from elmscale.linalg.gram import Gram, accumulate_gram
from elmscale.linalg.ridge import PRECISIONS, choose_precision, ridge_path, solve_ridge
from elmscale.linalg.targets import TargetEncoder
from elmscale.models.probability import CALIBRATION_ATTRS, ProbabilityMixin
from elmscale.models.source_score import SourceScoreMixin

# Kernel scoring: rows per block so that a block of K stays near 32 MB.
_KERNEL_BLOCK_BYTES = 32 * 2**20
# precision="auto" looks at the hidden outputs of the first rows only.
_PRECISION_SAMPLE_ROWS = 4096


#: every estimator's ``n_threads``: a count of threads, or -1 / None for all cores (0 is
#: refused, not taken for one thread or for all)
N_THREADS_CONSTRAINT = [
    Interval(numbers.Integral, 1, None, closed="left"),
    Options(numbers.Integral, {-1}),
    None,
]


def check_class_labels(y: np.ndarray) -> None:
    """Raise unless ``y`` (1-D, as ``validate_data`` leaves it) holds class labels:
    scikit-learn's ``check_classification_targets``, with integer and integer-valued float
    labels let through at once (its target-type inference cost 0.2 ms a fit, an eighth of a
    small set's whole fit)."""
    if y.ndim == 1 and y.size and y.dtype.kind in "biuf":
        if y.dtype.kind != "f" or (np.isfinite(y).all() and np.array_equal(y, np.trunc(y))):
            return
    check_classification_targets(y)


def check_two_classes(estimator) -> None:
    """A ValueError naming ``estimator`` unless its ``classes_`` holds at least 2 classes."""
    classes = estimator.classes_
    if classes.size < 2:
        raise ValueError(
            f"{type(estimator).__name__} needs at least 2 classes in y; got "
            f"{classes.size} class ({', '.join(map(repr, classes.tolist()))})"
        )


def encode_class_labels(estimator, y, coding: str) -> np.ndarray:
    """``T`` of the class labels ``y`` (one per row) in ``coding``
    (``elmscale.linalg.targets``); sets ``estimator.classes_``.  Shared by the
    classifiers that fit coded targets (the unified ELM's, FLSA-SVM's)."""
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1:
        raise ValueError(f"y must hold one class label per row; got shape {y.shape}")
    check_class_labels(y)
    encoder = TargetEncoder(coding).fit(y)
    estimator.classes_ = encoder.classes
    check_two_classes(estimator)
    return encoder.transform(y)


@dataclass(kw_only=True, eq=False, repr=False)
class _ELMParameters:
    """The unified ELM's parameters (``ELMClassifier`` adds ``probability``)."""

    hidden: str = "sigmoid"
    n_hidden: int = 500
    weight_scale: float = 1.0
    kernel: str | None = None
    C: float = 1.0
    sigma: float = 1.0
    degree: int = 3
    sigma_star_ratio: float = 1024.0
    tau: float = 0.5
    precision: str = "auto"
    block_rows: int = 16384
    n_threads: int | None = None
    random_state: int | np.random.RandomState | None = None


class _BaseELM(BaseEstimator):
    """Fitting and scoring of the unified ELM estimators and of the boosting-ridge
    ensembles (their parameters: ``_ELMParameters``, the ensembles' own; the constraints
    here are the unified ELM's).

    The fitted model is a feature map and output weights: ``feature_map_`` is the random
    layer ``hidden_layer_`` (output weights ``coef_``) or the kernel against the training
    rows, ``KernelFeatures(kernel, X_fit_)`` (output weights ``dual_coef_``); scoring is
    ``feature_map_.scores(X, weights)`` either way.
    """

    #: The targets' coding (``elmscale.linalg.targets``), set by the subclasses.
    target_coding = "values"

    _parameter_constraints: dict = {
        "hidden": [StrOptions(set(HIDDEN_KINDS))],
        "n_hidden": [Interval(numbers.Integral, 1, None, closed="left")],
        "weight_scale": [Interval(numbers.Real, 0, None, closed="neither")],
        "kernel": [StrOptions(set(KERNEL_KINDS)), None],
        "C": [Interval(numbers.Real, 0, None, closed="neither")],
        "sigma": [Interval(numbers.Real, 0, None, closed="neither")],
        "degree": [Interval(numbers.Integral, 1, None, closed="left")],
        "sigma_star_ratio": [Interval(numbers.Real, 0, None, closed="neither")],
        "tau": [Interval(numbers.Real, 0, 1, closed="both")],
        "precision": [StrOptions({"auto", *PRECISIONS})],
        "block_rows": [Interval(numbers.Integral, 1, None, closed="left")],
        "n_threads": N_THREADS_CONSTRAINT,
        "random_state": ["random_state"],
    }

    # -- targets (classifier / regressor specific) -------------------------
    def _encode_targets(self, y):  # pragma: no cover - abstract
        """``T`` of the labels or values ``y``; sets ``classes_`` or ``n_outputs_``."""
        raise NotImplementedError

    def _set_gram_targets(self, gram: Gram):  # pragma: no cover - abstract
        """Sets ``classes_`` or ``n_outputs_`` from a data set's Gram."""
        raise NotImplementedError

    @property
    def target_encoder_(self) -> TargetEncoder:
        """The coding of the fitted targets (with ``classes_`` for classifiers): it turns the
        Gram of :meth:`dataset_gram` into this estimator's ``H'T``
        (``gram.ridge_terms(target_encoder_)``) and decodes outputs."""
        if self.target_coding == "values":
            return TargetEncoder("values")
        check_is_fitted(self, "classes_")
        return TargetEncoder(self.target_coding, self.classes_)

    # -- what a family says by its class (the ensembles), else by its parameters --------
    def _is_kernel_model(self) -> bool:
        """Whether the model is a kernel's (dual), not a random layer's."""
        return self.kernel is not None

    def _precision_setting(self) -> str:
        """The ``precision`` parameter: "auto", "single" or "double" for H'H."""
        return self.precision

    # -- feature maps ----------------------------------------------------------
    def _validate_X_y(self, X, y):
        is_regressor = isinstance(self, RegressorMixin)
        X, y = validate_data(
            self,
            X,
            y,
            dtype=[np.float64, np.float32],
            accept_sparse=SPARSE_FORMATS,
            multi_output=is_regressor,
            y_numeric=is_regressor,
        )
        return X, y

    def _new_layer(self, n_features: int) -> HiddenLayer:
        rng = check_random_state(self.random_state)
        seed = int(rng.randint(0, 2**31 - 1))
        return HiddenLayer(
            self.hidden, n_features, int(self.n_hidden), seed, weight_scale=float(self.weight_scale)
        )

    def _kernel_obj(self) -> Kernel:
        return Kernel(
            self.kernel,
            sigma=float(self.sigma),
            degree=int(self.degree),
            **mg_params(self),
        )

    @property
    def feature_map_(self) -> FeatureMap:
        """The fitted feature map: ``hidden_layer_`` (random nodes), or the kernel against the
        training rows ``KernelFeatures(Kernel(kernel, sigma, degree), X_fit_)``."""
        fitted = vars(self)
        if "hidden_layer_" in fitted:
            return self.hidden_layer_
        if "X_fit_" in fitted:
            return KernelFeatures(self._kernel_obj(), self.X_fit_)
        check_is_fitted(self, ("hidden_layer_", "X_fit_"), all_or_any=any)
        raise AssertionError("unreachable")  # pragma: no cover

    def _output_weights(self) -> np.ndarray:
        kernel = isinstance(self.feature_map_, KernelFeatures)
        return self.dual_coef_ if kernel else self.coef_

    # -- fitting -------------------------------------------------------------
    def _resolve_precision(self, layer: FeatureMap, X, C_max: float, n_rows=None) -> str:
        """``precision``, or for "auto" the choice for ``n_rows`` rows like the first of ``X``."""
        if self._precision_setting() != "auto":
            return self._precision_setting()
        sample = layer.transform(X[: min(X.shape[0], _PRECISION_SAMPLE_ROWS)])
        mean_square = float(np.mean(np.square(sample, dtype=np.float64)))
        return choose_precision(mean_square * (X.shape[0] if n_rows is None else n_rows), C_max)

    def _gram(self, X, T, C_max: float, row_space: bool):
        """``(feature map, G, B)``: the matrix G and right-hand side B of
        ``(I/C + G) x = B`` (primal ``H'H``, ``H'T``; kernels: dual ``K(X, X)``, ``T``)."""
        if self._is_kernel_model():
            features = KernelFeatures(self._kernel_obj(), X)
            return features, features.transform(features.basis, dtype=np.float64), T
        return self._layer_gram(self._new_layer(X.shape[1]), X, T, C_max, row_space)

    def _layer_gram(self, layer: FeatureMap, X, T, C_max: float, row_space: bool):
        """``_gram`` of a random layer: ``(layer, H'H, H'T)``, accumulated in blocks
        (``row_space``: whether an estimator may answer with the rows' outputs instead,
        where its solves pay on N x N: the boosting ensembles)."""
        del row_space
        self.precision_ = self._resolve_precision(layer, X, C_max)
        HtH, HtT, _ = accumulate_gram(
            layer, X, T, precision=self.precision_, block_rows=self.block_rows
        ).ridge_terms()
        return layer, HtH, HtT

    def dataset_gram(
        self,
        dataset,
        *,
        C_max: float | None = None,
        n_folds: int = 1,
        fold_seed: int = 0,
        client=None,
        n_units: int | None = None,
    ) -> tuple[FeatureMap, Gram]:
        """One pass over a Parquet data set (random hidden nodes): a new feature map and the
        :class:`~elmscale.linalg.gram.Gram` of its outputs and the targets.

        Returns ``(feature_map, gram)``: the hidden layer drawn from ``random_state`` and the
        Gram per cross-validation fold (``n_folds`` > 1: folds drawn per row from
        ``fold_seed``, ``elmscale.distributed.units.fold_of_rows``; ``gram.total(exclude=k)``
        is fold k's training part).  ``gram.ridge_terms(self.target_encoder_)`` gives
        ``H'H`` and ``H'T`` of this estimator's targets; a solution ``beta`` of
        ``(I/C + H'H) beta = H'T`` is installed by :meth:`set_solution`.  ``C_max`` (default
        ``C``): the largest C to be solved, for ``precision="auto"``.  Sets the fitted
        attributes that come from the data: ``n_features_in_``, ``precision_`` and
        ``classes_`` (classifiers) or ``n_outputs_`` (regressors).  Units run on the Dask
        cluster of ``client``, or here without one.
        """
        from elmscale.distributed import dataset_ops
        from elmscale.distributed.breakdown import timings_array
        from elmscale.distributed.collections import is_dataset

        self._validate_params()
        if self._is_kernel_model():
            raise ValueError("dataset_gram needs random hidden nodes (kernel=None)")
        if not is_dataset(dataset):
            raise TypeError(
                f"expected a ParquetDataset (elmscale.open_parquet); got {type(dataset).__name__}"
            )
        C_max = float(self.C if C_max is None else C_max)
        layer = self._new_layer(dataset.n_features)
        first_rows = dataset_ops.first_rows(dataset, _PRECISION_SAMPLE_ROWS, client=client)
        self.precision_ = self._resolve_precision(layer, first_rows, C_max, dataset.n_rows)
        timings: list = []  # the reduction's breakdown (distributed.breakdown.PASS_COLUMNS)
        gram = dataset_ops.gram(
            dataset,
            layer,
            targets="values" if self.target_coding == "values" else "classes",
            n_folds=n_folds,
            fold_seed=fold_seed,
            precision=self.precision_,
            block_rows=self.block_rows,
            client=client,
            n_threads=self.n_threads,
            n_units=n_units,
            timings=timings,
        )
        self.gram_timings_ = timings_array(timings)
        self.n_features_in_ = dataset.n_features
        self._set_gram_targets(gram)
        return layer, gram

    def _dataset_gram(self, dataset, client, C_max: float):
        """``_gram`` for a Parquet data set, on the cluster ``client`` (None: here)."""
        from elmscale.distributed import dataset_ops

        if not self._is_kernel_model():
            layer, gram = self.dataset_gram(dataset, C_max=C_max, client=client)
            HtH, HtT, _ = gram.ridge_terms(self.target_encoder_)
            return layer, HtH, HtT
        X, y = dataset_ops.gather_rows(dataset, client=client, n_threads=self.n_threads)
        self.n_features_in_ = dataset.n_features
        T = self._encode_targets(y)
        features = KernelFeatures(self._kernel_obj(), X)
        omega = dataset_ops.kernel_matrix(
            dataset, features.basis, features.kernel, client=client, n_threads=self.n_threads
        )
        return features, omega, T

    def prepare_gram(self, X, y=None, *, C_max: float | None = None, client=None):
        """The ridge system of a fit, without its solve: ``(feature_map, G, B)`` of
        ``(I/C + G) x = B``: ``H'H`` and ``H'T`` of a new random layer (from arrays, or a
        :class:`~elmscale.data.parquet.ParquetDataset` reduced on the Dask cluster of
        ``client``, here without one), or ``K(X, X)`` and the targets for a kernel.

        Checks the parameters and the data, and sets the fitted state that comes from the
        data (``n_features_in_``, ``precision_``, ``classes_`` or ``n_outputs_``); a
        solution ``x`` then becomes a model by :meth:`new_model` or :meth:`set_solution`.
        ``C_max`` (default ``C``): the largest C to be solved, for ``precision="auto"``.
        """
        self._validate_params()
        C_max = float(self.C if C_max is None else C_max)
        return self._any_gram(X, y, client, C_max, row_space=False)

    def new_model(self, feature_map: FeatureMap, coef, *, estimator_class=None, **params):
        """A new estimator (of ``estimator_class``, default this one's), with this one's
        parameters updated by ``params`` and its fitted state from the data (``classes_``,
        ``n_features_in_``, ``precision_``, ...), made the model ``h(x) @ coef`` of
        ``feature_map`` (:meth:`set_solution`): one model per C of a path, or per ensemble
        of one Gram."""
        own = self.get_params(deep=False)
        est = (estimator_class or type(self))(**{**own, **params})
        for name, value in vars(self).items():
            if name not in own and name not in CALIBRATION_ATTRS:  # classes_, ...
                setattr(est, name, value)
        return est.set_solution(feature_map, coef)

    def _any_gram(self, X, y, client, C_max: float, row_space: bool = True):
        """``(feature map, G, B)`` from arrays or, with ``client`` optional, a ParquetDataset
        or Dask collections (``row_space``: see ``_layer_gram``)."""
        from elmscale.distributed.collections import is_dataset, labelled_source

        X, y, client = labelled_source(X, y, client)
        self.__dict__.pop("gram_timings_", None)  # (a Parquet fit's, set by dataset_gram)
        if is_dataset(X):
            return self._dataset_gram(X, client, C_max)
        X, y = self._validate_X_y(X, y)
        return self._gram(X, self._encode_targets(y), C_max, row_space)

    def _warn_if_single_precision_is_too_coarse(self, feature_map, G, C_max: float) -> None:
        if self._precision_setting() == "single" and not isinstance(feature_map, KernelFeatures):
            mean_diagonal = float(np.trace(G)) / G.shape[0]
            if choose_precision(mean_diagonal, C_max) == "double":
                warnings.warn(
                    f"precision='single' is too coarse for C={C_max:g} here (1/C is within "
                    f"reach of float32 rounding of H'H); use precision='double' or 'auto'",
                    UserWarning,
                    stacklevel=3,
                )

    def _shape_coef(self, coef: np.ndarray) -> np.ndarray:
        """The output weights as stored (subclasses drop a single output's column)."""
        return coef

    def set_solution(self, feature_map: FeatureMap, coef: np.ndarray):
        """Make this estimator the model ``h(x) @ coef`` of ``feature_map``; returns ``self``.

        For a solution computed outside ``fit``, e.g. from the Gram of :meth:`dataset_gram`
        (``coef`` ``(n_outputs of the map, n_columns of the targets)``).  A
        ``KernelFeatures`` map (its kernel must be this estimator's) sets the dual model
        ``X_fit_`` (its basis rows) and ``dual_coef_``; any other map (the estimator's own
        ``HiddenLayer``: the one a model file can store) sets ``hidden_layer_`` and
        ``coef_``.  The fitted state from the targets (``classes_``, ``n_outputs_``,
        ``n_features_in_``) must be set already (by ``fit`` or ``dataset_gram``).
        """
        coef = self._shape_coef(np.asarray(coef))
        if isinstance(feature_map, KernelFeatures):
            if not self._is_kernel_model():
                raise ValueError(
                    f"{type(self).__name__} here fits random hidden nodes; expected its "
                    "HiddenLayer map, got a KernelFeatures map"
                )
            if feature_map.kernel != self._kernel_obj():
                raise ValueError(
                    f"the kernel map's {feature_map.kernel} is not this "
                    f"estimator's kernel ({self._kernel_obj()})"
                )
            attrs, stale = (
                {"X_fit_": feature_map.basis, "dual_coef_": coef},
                ("hidden_layer_", "coef_"),
            )
        else:
            if self._is_kernel_model():
                raise ValueError(
                    f"this estimator has kernel={self.kernel!r}; expected a "
                    f"KernelFeatures map, got {type(feature_map).__name__}"
                )
            attrs, stale = {"hidden_layer_": feature_map, "coef_": coef}, ("X_fit_", "dual_coef_")
        for name in stale:  # a refit in the other mode leaves no weights of the first
            self.__dict__.pop(name, None)
        for name, value in attrs.items():
            setattr(self, name, value)
        return self

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, client=None):
        """Fit the unified ELM on ``X`` (n_samples, n_features) and targets ``y``.

        ``X`` may also be a :class:`~elmscale.data.parquet.ParquetDataset` (labels from its
        label column, ``y`` None): its units are reduced on the Dask cluster of
        ``client`` (a ``distributed.Client``), or in this process without one.  Or a Dask
        DataFrame / Array with ``y`` a Dask Series / Array of the same partitions: each
        persisted partition is a unit, reduced on the worker that holds it
        (``elmscale.distributed.collections``; ``client`` default: Dask's default client).
        """
        with thread_budget(self.n_threads):
            features, G, B = self._any_gram(X, y, client, float(self.C))
            self._warn_if_single_precision_is_too_coarse(features, G, float(self.C))
            self.set_solution(features, self.solve(G, B, float(self.C)))
        return self

    # -- the solve (the ensembles of elmscale.models.boosting_ridge override both) --------
    def solve(self, G: np.ndarray, B: np.ndarray, C: float) -> np.ndarray:
        """The output weights for ``C`` from the Gram ``G`` and right-hand side ``B`` of
        :meth:`dataset_gram` or a fit: ridge, ``(I/C + G) x = B`` (a Cholesky)."""
        return solve_ridge(G, B, C)

    def solve_path(self, G: np.ndarray, B: np.ndarray, Cs: Sequence[float]) -> np.ndarray:
        """:meth:`solve` for every C in ``Cs``, ``(len(Cs),) + B.shape``: ridge from one
        eigendecomposition."""
        return ridge_path(G, B, Cs)

    def fit_path(self, X, y, Cs: Sequence[float], *, client=None) -> list:
        """Fit one estimator per value of ``Cs`` from one eigendecomposition.

        Returns a list of fitted estimators in the order of ``Cs``; each equals
        ``clone(self).set_params(C=c).fit(X, y)`` (same hidden layer when
        ``random_state`` is fixed) to rounding.  ``self`` is fitted with the last C.
        """
        Cs = [float(c) for c in np.atleast_1d(np.asarray(Cs, dtype=np.float64))]
        for c in Cs:
            if not c > 0:
                raise ValueError(f"every C in Cs must be > 0; got {c}")
        self._validate_params()
        for name in CALIBRATION_ATTRS:  # the path's models are not calibrated
            self.__dict__.pop(name, None)
        with thread_budget(self.n_threads):
            features, G, B = self._any_gram(X, y, client, max(Cs))
            self._warn_if_single_precision_is_too_coarse(features, G, max(Cs))
            solutions = self.solve_path(G, B, Cs)
        fitted = [self.new_model(features, coef, C=c) for c, coef in zip(Cs, solutions)]
        self.set_params(C=Cs[-1])
        self.set_solution(features, solutions[-1])
        return fitted

    # -- scoring -------------------------------------------------------------
    def _raw_output(self, X) -> np.ndarray:
        """``f(X)`` with shape (n_samples, n_outputs), in row blocks."""
        check_is_fitted(self)
        X = validate_data(
            self, X, dtype=[np.float64, np.float32], accept_sparse=SPARSE_FORMATS, reset=False
        )
        features = self.feature_map_
        coef = self._output_weights().reshape(features.n_outputs, -1)
        out = np.empty((X.shape[0], coef.shape[1]), dtype=np.float64)
        with thread_budget(self.n_threads):
            for rows in iter_row_blocks(X.shape[0], self.block_rows):
                out[rows] = features.scores(X[rows], coef)
        return out

    # -- persistence -----------------------------------------------------------
    def save(self, path) -> None:
        """Save the fitted model (see ``elmscale.persistence`` for the format)."""
        from elmscale.io.model_files import save

        save(self, path)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR / CSC rows, never densified
        return tags


class _ELMClassifierBase(SourceScoreMixin, ProbabilityMixin, ClassifierMixin, _BaseELM):
    """The unified ELM's classification, shared by ``ELMClassifier`` and the boosting-ridge
    classifiers: coded class targets, decisions, predictions and the calibration."""

    target_coding = "plus_minus"
    multiclass_coupling = "one_vs_rest"  # (predict_proba: the class columns, normalised)

    def fit(self, X, y=None, *, client=None):
        """Fit as :meth:`_BaseELM.fit`; with ``probability=True`` also the calibration
        (on arrays: five out-of-fold fits of a clone, then Platt's sigmoids; refused with a
        ParquetDataset before any work)."""
        self._check_calibration_data(X)
        super().fit(X, y, client=client)
        self._fit_calibration(X, y)
        return self

    def fit_path(self, X, y, Cs: Sequence[float], *, client=None) -> list:
        """As :meth:`_BaseELM.fit_path`; with ``probability=True`` every copy is calibrated,
        from one path per fold of the calibration's split (``self``: the last C's)."""
        self._check_calibration_data(X)
        models = super().fit_path(X, y, Cs, client=client)
        self._fit_calibration(X, y, path=(models, [m.C for m in models]))
        self._take_calibration(models[-1])
        return models

    def _calibration_scores(self, X) -> np.ndarray:
        """The scores the sigmoids read, ``(n, n_problems)``: the decision value for two
        classes, else one column per class."""
        decision = self.decision_function(X)
        return decision[:, None] if decision.ndim == 1 else decision

    def _encode_targets(self, y):
        return encode_class_labels(self, y, self.target_coding)

    def _check_classes(self):
        check_two_classes(self)

    def _set_gram_targets(self, gram):
        self.classes_ = gram.classes
        self._check_classes()

    def _shape_coef(self, coef):
        return coef[:, 0] if coef.ndim == 2 and coef.shape[1] == 1 else coef

    @lazy_on_collections
    def decision_function(self, X) -> np.ndarray:
        """ELM outputs: (n_samples,) for two classes (> 0 means ``classes_[1]``), else
        (n_samples, n_classes)."""
        out = self._raw_output(X)
        return out[:, 0] if len(self.classes_) == 2 else out

    @lazy_on_collections
    def predict(self, X) -> np.ndarray:
        out = self._raw_output(X)
        return self.classes_[self.target_encoder_.decode(out)]


@dataclass(kw_only=True, eq=False, repr=False)
class ELMClassifier(_ELMClassifierBase, _ELMParameters):
    """Unified ELM classifier (random hidden nodes or a kernel).

    Parameters
    ----------
    hidden : {"sigmoid", "sinusoid", "multiquadric", "gaussian"}, default="sigmoid"
        Random hidden node type (eqs. 25-28); used when ``kernel`` is None.
    n_hidden : int, default=500
        Number of random hidden nodes L.
    weight_scale : float, default=1.0
        Input weights of sigmoid / sinusoid nodes are drawn from
        U(-weight_scale, weight_scale) (1: the original ELM); larger is less linear.
    kernel : {"gaussian", "laplacian", "polynomial", "mg"} or None, default=None
        Use this kernel (eqs. 29-31, dual solution) instead of random nodes; "mg" is the
        memorization-generalization kernel (``elmscale.features.kernels.Kernel``).
    C : float, default=1.0
        Regularisation as in the paper: larger C, less regularisation (> 0).
    sigma : float, default=1.0
        Width of the gaussian and laplacian kernels (> 0).
    degree : int, default=3
        Degree m of the polynomial kernel.
    sigma_star_ratio, tau : float, default=1024.0, 0.5
        The "mg" kernel's second width as a multiple of ``sigma`` and its weight in [0, 1]
        (ignored by the other kernels).
    precision : {"auto", "double", "single"}, default="auto"
        Precision of the products forming H'H (nodes are float32 either way).
        "double" is exact at any C; "single" is about 2x faster to fit but only
        accurate while 1/C is large against float32 rounding of H'H (see
        ``elmscale.linalg.ridge``); "auto" picks single where it is safe, else double.
    block_rows : int, default=16384
        Rows per block when building H, bounding memory.
    n_threads : int or None, default=None
        Threads for BLAS and numba inside fit / predict (None or -1: all cores).
    random_state : int, RandomState or None, default=None
        Seed of the random hidden layer.
    probability : bool, default=False
        Also fit calibrated probabilities (``predict_proba``), as ``SVC(probability=True)``:
        Platt sigmoids on out-of-fold decision values of a 5-fold stratified split (five
        more fits), one per class normalised to sum 1 for three classes or more
        (``elmscale.models.probability``).

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    hidden_layer_ : HiddenLayer
        The random layer (random nodes only); rebuilt from its seed anywhere.
    coef_ : ndarray of shape (n_hidden,) or (n_hidden, n_classes)
        Output weights beta (random nodes only).
    X_fit_ : ndarray of shape (n_samples, n_features), float32
        Training rows (kernels only).
    dual_coef_ : ndarray of shape (n_samples,) or (n_samples, n_classes)
        Dual weights alpha (kernels only).
    precision_ : {"single", "double"}
        Precision used for H'H (random nodes only).
    n_features_in_ : int
    gram_timings_ : ndarray of shape (1, 9), float64
        A Parquet data set's fit (random nodes): its Gram reduction's breakdown, columns
        ``elmscale.distributed.breakdown.PASS_COLUMNS`` (on a Dask client: the busiest
        worker's compute from Dask's task stream and its thread CPU, the wait, the bytes).
    prob_a_, prob_b_ : ndarray of shape (n_problems,), float64
        Platt's sigmoids ``1 / (1 + exp(A f + B))`` (``probability=True`` only): one
        problem (the decision value) for two classes, else one per class (its column).
    probability_coupling_ : {"binary", "one_vs_rest"}
    """

    _parameter_constraints: ClassVar[dict] = {
        **_BaseELM._parameter_constraints,
        "probability": ["boolean"],
    }

    probability: bool = False


class _ELMRegressorBase(SourceScoreMixin, RegressorMixin, _BaseELM):
    """The unified ELM's regression, shared by ``ELMRegressor`` and the boosting-ridge
    regressors: the targets fitted as given."""

    target_coding = "values"

    def _encode_targets(self, y):
        T = TargetEncoder(self.target_coding).transform(y)
        self._single_output = np.ndim(y) == 1
        self.n_outputs_ = T.shape[1]
        return T

    def _set_gram_targets(self, gram):
        self._single_output = True  # one label column
        self.n_outputs_ = 1

    def _shape_coef(self, coef):
        return coef[:, 0] if coef.ndim == 2 and self._single_output else coef

    @lazy_on_collections
    def predict(self, X) -> np.ndarray:
        out = self._raw_output(X)
        return out[:, 0] if self._output_weights().ndim == 1 else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


class ELMRegressor(_ELMRegressorBase, _ELMParameters):
    """Unified ELM regressor (random hidden nodes or a kernel).

    Same parameters as ``ELMClassifier``; the targets are fitted as given (no
    intercept: scale them, e.g. to [0, 1] as the boosting-ridge paper does).

    Attributes
    ----------
    hidden_layer_, coef_, X_fit_, dual_coef_, n_features_in_, gram_timings_ : as
        ``ELMClassifier``.
    n_outputs_ : int
    """
