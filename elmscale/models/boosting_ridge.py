"""Boosting-ridge ELM ensembles (Peralez-González, Pérez-Rodríguez and Durán-Rosal,
Scientific Reports 2023, doi:10.1038/s41598-023-38948-3) as scikit-learn estimators:
BRELM, GBRELM, GGBRELM and KBRELM, each a classifier and a regressor.

Each ensemble sums S = ``n_estimators`` ridge learners; the learners differ in how they are
fitted, not in how they score, so every fitted model is one feature map and one set of
output weights, scored like the unified ELM (``elmscale.models.elm``):

* :class:`BRELMClassifier` / :class:`BRELMRegressor` (eq. 10-13): one random layer shared by
  every learner, each fitted in turn to the residual of the ones before.  The S steps are a
  spectral filter of ``H'H``: ``coef_`` is their sum, from one eigendecomposition.
* :class:`GBRELMClassifier` / :class:`GBRELMRegressor`: a random layer per learner, fitted in
  turn to the residual (learner s solves against ``H(s)'Y - sum_{t<s} H(s)'H(t) beta(t)``).
* :class:`GGBRELMClassifier` / :class:`GGBRELMRegressor` (eq. 19, the paper's proposal): a
  layer per learner, every learner's weights from one global ridge system on the S
  concatenated layers.
* :class:`KBRELMClassifier` / :class:`KBRELMRegressor`: S kernel ridge learners on the
  residuals; one eigendecomposition of K gives their summed dual weights (``dual_coef_``).

All of it comes from one pass over the rows: ``[H(1) .. H(S)]'[H(1) .. H(S)]`` and
``[H(s)]'Y`` (``elmscale.linalg.boosting`` solves every ensemble and every C from them),
in memory or reduced on Dask workers from a Parquet data set (``fit(dataset,
client=client)``, as ``ELMClassifier``).  ``fit_path(X, y, Cs)`` returns a fitted copy per C
from the same Gram.

Conventions.  ``C`` is the library's: larger C, less shrinkage; the learners solve
``(H'H + I / C) beta = H'Y``.  The paper's C multiplies I (``(H'H + C I)``), so **paper
C = 1 / our C** (its grid 10^-2 .. 10^2 is the same set of values either way).  KBRELM's
gaussian kernel is the library's ``exp(-||u - v||^2 / (2 sigma^2))``; the paper's gamma
divides the squared distance, so **gamma = 2 sigma^2**.  Classifiers fit 0/1 one-of-J
targets (a column per class, also for two classes) and predict the argmax (eq. 5), as the
paper; regressors fit the targets as given (several outputs allowed; no intercept: scale
them, e.g. to [0, 1] as the paper does).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_random_state

from elmscale.distributed.collections import lazy_on_collections
from elmscale.features.kernels import KERNELS
from elmscale.features.layers import HIDDEN_KINDS, ConcatenatedLayers, HiddenLayer
from elmscale.linalg.boosting import (
    RowSpace,
    boosting_filter_path,
    global_path,
    sequential_path,
)
from elmscale.linalg.ridge import PRECISIONS
from elmscale.models.elm import (
    N_THREADS_CONSTRAINT,
    _BaseELM,
    _ELMClassifierBase,
    _ELMRegressorBase,
)

__all__ = [
    "ONE_PASS_ENSEMBLES",
    "fit_ensembles",
    "BRELMClassifier",
    "BRELMRegressor",
    "GBRELMClassifier",
    "GBRELMRegressor",
    "GGBRELMClassifier",
    "GGBRELMRegressor",
    "KBRELMClassifier",
    "KBRELMRegressor",
]

_COMMON = {
    "n_estimators": [Interval(numbers.Integral, 1, None, closed="left")],
    "C": [Interval(numbers.Real, 0, None, closed="neither")],
    "block_rows": [Interval(numbers.Integral, 1, None, closed="left")],
    "n_threads": N_THREADS_CONSTRAINT,
}


@dataclass(kw_only=True, eq=False, repr=False)
class _RandomNodeEnsemble(_BaseELM):
    """S ridge learners on random layers; ``ensemble`` says how they are fitted:
    "shared" (BRELM), "sequential" (GBRELM) or "global" (GGBRELM).  The classifiers add
    ``probability``."""

    ensemble = "global"

    _parameter_constraints: ClassVar[dict] = {
        **_COMMON,
        "hidden": [StrOptions(set(HIDDEN_KINDS))],
        "n_hidden": [Interval(numbers.Integral, 1, None, closed="left")],
        "weight_scale": [Interval(numbers.Real, 0, None, closed="neither")],
        "precision": [StrOptions({"auto", *PRECISIONS})],
        "random_state": ["random_state"],
    }

    n_estimators: int = 10
    hidden: str = "sigmoid"
    n_hidden: int = 100
    weight_scale: float = 1.0
    C: float = 1.0
    precision: str = "auto"
    block_rows: int = 16384
    n_threads: int | None = None
    random_state: int | np.random.RandomState | None = None

    def _is_kernel_model(self) -> bool:
        return False  # random nodes only: the family has no ``kernel`` parameter

    def _new_layer(self, n_features: int):
        """BRELM: one layer; GBRELM / GGBRELM: S layers side by side, seeds drawn in turn
        from ``random_state``."""
        rng = check_random_state(self.random_state)
        layers = tuple(
            HiddenLayer(
                self.hidden,
                n_features,
                int(self.n_hidden),
                int(rng.randint(0, 2**31 - 1)),
                weight_scale=float(self.weight_scale),
            )
            for _ in range(1 if self.ensemble == "shared" else int(self.n_estimators))
        )
        return layers[0] if self.ensemble == "shared" else ConcatenatedLayers(layers)

    def _layer_gram(self, layer, X, T, C_max: float, row_space: bool):
        """In memory with fewer rows than a solve's columns, the rows' outputs themselves
        (:class:`~elmscale.linalg.boosting.RowSpace`): the solves then work on N x N.  A
        solve's columns: S D for the global system, D for BRELM; the sequential learners
        by the cost model of :meth:`_row_space_pays`."""
        if row_space and self._row_space_pays(X.shape[0]):
            self.precision_ = "double"  # H H' of the float32 nodes, formed in float64
            return layer, RowSpace(layer.transform(X, dtype=np.float64)), T
        return super()._layer_gram(layer, X, T, C_max, row_space)

    def _row_space_pays(self, n_rows: int) -> bool:
        """Whether N x N solves beat the Gram's: global N < S D; BRELM N < D; GBRELM when S
        learners' ``H_s H_s'`` and a few (~5) N x N Cholesky factors each, S (N^2 D + 5 N^3
        / 3), cost less than the full Gram N (S D)^2 (D = 1000, S = 10: N below ~2,000)."""
        S, D, N = int(self.n_estimators), int(self.n_hidden), int(n_rows)
        if self.ensemble == "global":
            return N < S * D
        if self.ensemble == "shared":
            return N < D
        return S * (N * N * D + 5 * N**3 / 3) < N * (S * D) ** 2

    def _warn_if_single_precision_is_too_coarse(self, feature_map, G, C_max: float) -> None:
        if not isinstance(G, RowSpace):
            super()._warn_if_single_precision_is_too_coarse(feature_map, G, C_max)

    def solve_path(self, G, B, Cs):
        """Every C's output weights from the Gram of the layer(s): the boosting filter
        (BRELM), the sequential block solves (GBRELM) or the global ridge (GGBRELM)."""
        if self.ensemble == "shared":
            return boosting_filter_path(G, B, Cs, int(self.n_estimators))
        if self.ensemble == "sequential":
            return sequential_path(G, B, [int(self.n_hidden)] * int(self.n_estimators), Cs)
        return global_path(G, B, Cs)

    def solve(self, G, B, C):
        return self.solve_path(G, B, [C])[0]


@dataclass(kw_only=True, eq=False, repr=False)
class _KernelEnsemble(_BaseELM):
    """S kernel ridge learners on the residuals (KBRELM; the classifier adds
    ``probability``)."""

    _parameter_constraints: ClassVar[dict] = {
        **_COMMON,
        "kernel": [StrOptions(set(KERNELS))],
        "sigma": [Interval(numbers.Real, 0, None, closed="neither")],
        "degree": [Interval(numbers.Integral, 1, None, closed="left")],
    }

    n_estimators: int = 10
    kernel: str = "gaussian"
    C: float = 1.0
    sigma: float = 1.0
    degree: int = 3
    block_rows: int = 16384
    n_threads: int | None = None

    def _precision_setting(self) -> str:
        return "double"  # K is formed in float64; the family has no ``precision`` parameter

    def solve_path(self, G, B, Cs):
        """The S steps' summed dual weights per C: a spectral filter of K."""
        return boosting_filter_path(G, B, Cs, int(self.n_estimators))

    def solve(self, G, B, C):
        return self.solve_path(G, B, [C])[0]


class _OneOfJClassifier(_ELMClassifierBase):
    """The paper's classification: 0/1 one-of-J targets, argmax of the outputs (eq. 5)."""

    target_coding = "one_of_j"

    @lazy_on_collections
    def decision_function(self, X) -> np.ndarray:
        """Outputs ``(n_samples, n_classes)``; for two classes, ``out[:, 1] - out[:, 0]``
        (> 0 means ``classes_[1]``)."""
        out = self._raw_output(X)
        return out[:, 1] - out[:, 0] if len(self.classes_) == 2 else out


@dataclass(kw_only=True, eq=False, repr=False)
class _RandomNodeEnsembleClassifier(_RandomNodeEnsemble, _OneOfJClassifier):
    """BRELM / GBRELM / GGBRELM classifiers: the ensemble's parameters and ``probability``
    (calibrated probabilities, as ``ELMClassifier``)."""

    _parameter_constraints: ClassVar[dict] = {
        **_RandomNodeEnsemble._parameter_constraints,
        "probability": ["boolean"],
    }

    probability: bool = False


@dataclass(kw_only=True, eq=False, repr=False)
class _KernelEnsembleClassifier(_KernelEnsemble, _OneOfJClassifier):
    """KBRELM's classifier: the ensemble's parameters and ``probability``."""

    _parameter_constraints: ClassVar[dict] = {
        **_KernelEnsemble._parameter_constraints,
        "probability": ["boolean"],
    }

    probability: bool = False


_PROBABILITY_PARAMETER = """    probability : bool, default=False
        Also fit calibrated probabilities (``predict_proba``) as ``SVC(probability=True)``:
        Platt sigmoids on out-of-fold outputs of a 5-fold stratified split (the decision
        value for two classes, else one per class, normalised to sum 1;
        ``elmscale.models.probability``); in-memory fits only.
"""

_CALIBRATION_ATTRS = """    prob_a_, prob_b_ : ndarray (n_problems,), float64
        Platt's sigmoids ``1 / (1 + exp(A f + B))`` (``probability=True`` only).
    probability_coupling_ : "binary" or "one_vs_rest"
"""

_PARAMETERS = """
    Parameters
    ----------
    n_estimators : int, default=10
        S, the number of learners.
    hidden : {"sigmoid", "sinusoid", "multiquadric", "gaussian"}, default="sigmoid"
        Random node type of every layer.
    n_hidden : int, default=100
        D, nodes per learner (the paper: 10 for weak learners, 1000 for strong ones).
    weight_scale : float, default=1.0
        Input weights of sigmoid / sinusoid nodes from U(-weight_scale, weight_scale).
    C : float, default=1.0
        The library's ridge convention, ``(H'H + I / C)``: larger C, less shrinkage.  The
        paper's C is 1 / this C.  One C for every learner (the paper's eq. 15-19).
    precision : {"auto", "double", "single"}, default="auto"
        Products forming the Gram (as ``ELMClassifier``).
    block_rows : int, default=16384
        Rows per block of the hidden outputs.
    n_threads : int or None, default=None
        BLAS and numba threads inside fit / predict (None or -1: all cores).
    random_state : int, RandomState or None, default=None
        Seeds of the random layers (drawn in turn for each learner).
"""

_KERNEL_PARAMETERS = """
    Parameters
    ----------
    n_estimators : int, default=10
        S, the number of kernel ridge learners.
    kernel : {"gaussian", "laplacian", "polynomial"}, default="gaussian"
        The learners' kernel (the paper's is gaussian).
    C : float, default=1.0
        The library's ridge convention, ``(K + I / C)``: larger C, less shrinkage; the paper's
        C is 1 / this C.
    sigma : float, default=1.0
        Kernel width: ``exp(-||u - v||^2 / (2 sigma^2))``; the paper's gamma = 2 sigma^2.
    degree : int, default=3
        Degree of the polynomial kernel.
    block_rows : int, default=16384
        Rows per block when scoring.
    n_threads : int or None, default=None
        BLAS and numba threads inside fit / predict (None or -1: all cores).

    Attributes
    ----------
    X_fit_ : ndarray (n_samples, n_features), float32
        The training rows.
    dual_coef_ : ndarray
        The S learners' summed dual weights, from one eigendecomposition of K (time
        O(n^3), memory O(n^2) in the training rows n).
"""

_RANDOM_ATTRIBUTES = """
    Attributes
    ----------
    hidden_layer_ : HiddenLayer (BRELM) or ConcatenatedLayers (the S layers side by side)
    coef_ : ndarray
        Output weights: BRELM the S learners' sum (n_hidden, ...); GBRELM / GGBRELM the
        learners' weights stacked, ``[beta(1); ..; beta(S)]`` (S * n_hidden, ...).
    precision_ : {"single", "double"}
    n_features_in_ : int
"""


def _doc(summary: str, parameters: str, attributes: str, extra: str) -> str:
    return summary + "\n" + parameters + attributes + extra


_CLASSES_ATTR = "    classes_ : ndarray (n_classes,)\n"
_OUTPUTS_ATTR = "    n_outputs_ : int\n"


class BRELMClassifier(_RandomNodeEnsembleClassifier):
    ensemble = "shared"
    __doc__ = _doc(
        "BRELM classifier: S ridge learners sharing one random layer, each fitted to the "
        "residual of the ones before (eq. 10-13).",
        _PARAMETERS + _PROBABILITY_PARAMETER,
        _RANDOM_ATTRIBUTES,
        _CLASSES_ATTR + _CALIBRATION_ATTRS,
    )


class BRELMRegressor(_RandomNodeEnsemble, _ELMRegressorBase):
    ensemble = "shared"
    __doc__ = _doc(
        "BRELM regressor: S ridge learners sharing one random layer (eq. 10-13).",
        _PARAMETERS,
        _RANDOM_ATTRIBUTES,
        _OUTPUTS_ATTR,
    )


class GBRELMClassifier(_RandomNodeEnsembleClassifier):
    ensemble = "sequential"
    __doc__ = _doc(
        "GBRELM classifier: a random layer per learner, the learners fitted in turn to the "
        "residual.",
        _PARAMETERS + _PROBABILITY_PARAMETER,
        _RANDOM_ATTRIBUTES,
        _CLASSES_ATTR + _CALIBRATION_ATTRS,
    )


class GBRELMRegressor(_RandomNodeEnsemble, _ELMRegressorBase):
    ensemble = "sequential"
    __doc__ = _doc(
        "GBRELM regressor: a random layer per learner, fitted in turn to the residual.",
        _PARAMETERS,
        _RANDOM_ATTRIBUTES,
        _OUTPUTS_ATTR,
    )


class GGBRELMClassifier(_RandomNodeEnsembleClassifier):
    ensemble = "global"
    __doc__ = _doc(
        "GGBRELM classifier (the paper's eq. 19): a random layer per learner, every "
        "learner's weights from one ridge system on the S concatenated layers (a Cholesky "
        "per C for short grids, one eigendecomposition for long ones).",
        _PARAMETERS + _PROBABILITY_PARAMETER,
        _RANDOM_ATTRIBUTES,
        _CLASSES_ATTR + _CALIBRATION_ATTRS,
    )


class GGBRELMRegressor(_RandomNodeEnsemble, _ELMRegressorBase):
    ensemble = "global"
    __doc__ = _doc(
        "GGBRELM regressor (eq. 19): ridge on the S concatenated random layers.",
        _PARAMETERS,
        _RANDOM_ATTRIBUTES,
        _OUTPUTS_ATTR,
    )


class KBRELMClassifier(_KernelEnsembleClassifier):
    __doc__ = _doc(
        "KBRELM classifier: S kernel ridge learners, each fitted to the residual of the "
        "ones before.",
        _KERNEL_PARAMETERS.replace(
            "\n\n    Attributes\n", "\n" + _PROBABILITY_PARAMETER + "\n    Attributes\n"
        ),
        "",
        _CLASSES_ATTR + _CALIBRATION_ATTRS,
    )


class KBRELMRegressor(_KernelEnsemble, _ELMRegressorBase):
    __doc__ = _doc(
        "KBRELM regressor: S kernel ridge learners on the residuals.",
        _KERNEL_PARAMETERS,
        "",
        _OUTPUTS_ATTR,
    )


#: the boosting-ridge estimators, by ensemble and task
ENSEMBLES = {
    ("brelm", "classifier"): BRELMClassifier,
    ("brelm", "regressor"): BRELMRegressor,
    ("gbrelm", "classifier"): GBRELMClassifier,
    ("gbrelm", "regressor"): GBRELMRegressor,
    ("ggbrelm", "classifier"): GGBRELMClassifier,
    ("ggbrelm", "regressor"): GGBRELMRegressor,
    ("kbrelm", "classifier"): KBRELMClassifier,
    ("kbrelm", "regressor"): KBRELMRegressor,
}


#: what :func:`fit_ensembles` returns from one pass
ONE_PASS_ENSEMBLES = ("ELM", "BRELM", "GBRELM", "GGBRELM")


def fit_ensembles(estimator, X, y=None, *, Cs, client=None) -> dict[str, list]:
    """Every random-node ensemble and every C from ONE pass over the rows.

    ``estimator`` (a GGBRELM or GBRELM classifier or regressor) gives S, D, the nodes and
    ``random_state``; one Gram of its S layers side by side (in memory, or reduced on the
    Dask cluster of ``client`` from a ParquetDataset ``X``) is solved on this process for
    each of :data:`ONE_PASS_ENSEMBLES` and each C in ``Cs``.  Returns ``{name: [fitted
    estimator per C]}``: "ELM" the first layer alone (the paper's ELM: a one-learner
    GGBRELM, one-of-J targets for classes), "BRELM" S learners sharing the first layer,
    "GBRELM" and "GGBRELM" on the S layers.  Each equals the estimator of that name fitted
    with the same ``random_state`` (its layers are the same draws) to rounding.
    """
    from sklearn.base import clone, is_classifier

    from elmscale.core.threads import thread_budget
    from elmscale.linalg.ridge import ridge_path

    template = clone(estimator)
    if not isinstance(template, _RandomNodeEnsemble) or template.ensemble == "shared":
        raise TypeError(
            "fit_ensembles takes a GGBRELM or GBRELM estimator (S random layers); got "
            f"{type(estimator).__name__}"
        )
    Cs = [float(c) for c in np.atleast_1d(np.asarray(Cs, dtype=np.float64))]
    if not Cs or not all(c > 0 for c in Cs):
        raise ValueError(f"Cs must be positive values; got {Cs}")
    with thread_budget(template.n_threads):
        layers, G, B = template.prepare_gram(X, y, C_max=max(Cs), client=client)
        S, D = int(template.n_estimators), int(template.n_hidden)
        first = slice(0, D)
        solutions = {
            "ELM": ridge_path(G[first, first], B[first], Cs),
            "BRELM": boosting_filter_path(G[first, first], B[first], Cs, S),
            "GBRELM": sequential_path(G, B, [D] * S, Cs),
            "GGBRELM": global_path(G, B, Cs),
        }
    task = "classifier" if is_classifier(template) else "regressor"
    maps = {
        "ELM": ConcatenatedLayers(layers.layers[:1]),
        "BRELM": layers.layers[0],
        "GBRELM": layers,
        "GGBRELM": layers,
    }
    out: dict[str, list] = {}
    for name, coefs in solutions.items():
        cls = ENSEMBLES[("ggbrelm" if name == "ELM" else name.lower(), task)]
        n_estimators = 1 if name == "ELM" else S
        out[name] = [
            template.new_model(
                maps[name], coef, estimator_class=cls, C=C, n_estimators=n_estimators
            )
            for C, coef in zip(Cs, coefs)
        ]
    return out
