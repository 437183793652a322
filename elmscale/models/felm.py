"""FELM and FKELM (Axioms 2022): feature selection inside the sparse ELM.

Both are classifiers and feature selectors (scikit-learn's ``SelectorMixin``):
``get_support()`` is the kept input columns and ``transform`` keeps them, so one fitted
model is a selector in a ``Pipeline`` and a classifier of its own.  The selection is
``elmscale.solvers.feature_flips.select_features`` (the paper's Algorithms 1-2, with the
re-solves warm-started, screened by a dual bound and evaluated in speculative blocks side
by side); each mask's output weights are the sparse ELM's (``SparseELMClassifier``'s
dual without bias) on the masked inputs.

Multiclass data are split one-vs-one, as the sparse ELM does: each pair selects its own
features (``pair_masks_``) and scores with them; ``get_support()`` is their union.  On
binary data (the paper's case) there is one pair, and the per-pair attributes are 1-D.
"""

from __future__ import annotations

import numbers
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import ClassVar

import numba
import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_selection import SelectorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from elmscale.core.sparse_kernels import SPARSE_FORMATS, is_sparse
from elmscale.core.threads import resolve_n_threads, thread_budget
from elmscale.distributed.collections import lazy_on_collections
from elmscale.distributed.executors import make_executor
from elmscale.features.base import iter_row_blocks
from elmscale.features.kernels import Kernel
from elmscale.features.layers import HIDDEN_KINDS, HiddenLayer
from elmscale.linalg.targets import one_vs_one_pairs
from elmscale.models.elm import N_THREADS_CONSTRAINT, check_class_labels
from elmscale.models.probability import ProbabilityMixin
from elmscale.models.source_score import SourceScoreMixin
from elmscale.models.sparse_elm import (
    decision_to_class_index,
    ovo_decision,
    pair_problem_scores,
)
from elmscale.models.sparse_elm_pairs import pair_problem
from elmscale.solvers.feature_flips import (
    PSI_SCALES,
    ExplicitMaskProblem,
    KernelMaskProblem,
    MaskProblem,
    evaluate_block,
    select_features,
)

__all__ = ["FELMClassifier", "FKELMClassifier"]

#: candidate flips per block a thread (or a Ray task) evaluates in one go
BLOCK_SIZE = {"threads": 4, "ray": 64}
#: threads evaluate candidates side by side only when a candidate's kept matrix (rows x
#: nodes, or rows x rows) has this many entries: below it a candidate is a few numpy
#: calls on small arrays, which hold the GIL (colon, 44 x 300: two threads were 4x
#: slower than one)
THREADS_MIN_ENTRIES = 50_000


def _blocks_on(executor):
    def map_blocks(blocks, **kwargs):
        return executor.map(evaluate_block, blocks, label="feature flips", **kwargs)

    return map_blocks


def _blocks_on_pool(pool):
    def map_blocks(blocks, **kwargs):
        return list(pool.map(lambda block: evaluate_block(block, **kwargs), blocks))

    return map_blocks


def _one_numba_thread():
    numba.set_num_threads(1)  # numba's thread count is per calling thread


@dataclass(kw_only=True, eq=False, repr=False)
class _FeatureSelectingELM(
    SourceScoreMixin, ProbabilityMixin, SelectorMixin, ClassifierMixin, BaseEstimator
):
    """What FELM and FKELM share: the pairs, the selection loop, scoring, attributes, and
    the parameters but for the feature map's (FELM's layer, FKELM's kernel: theirs)."""

    multiclass_coupling = "pairwise"  # (predict_proba: the pairs coupled, Wu-Lin-Weng)

    C: float = 1.0
    psi: float = 0.0625
    psi_scale: str = "relative"
    tol: float = 1e-6
    kkt_tol: float = 1e-3
    max_sweeps: int = 20
    initial_selection: bool = True
    resolve_start: str = "warm"
    n_threads: int | None = None
    random_state: int | np.random.RandomState | None = None
    probability: bool = False

    _common_constraints: ClassVar[dict] = {
        "C": [Interval(numbers.Real, 0, None, closed="neither")],
        "psi": [Interval(numbers.Real, 0, None, closed="left")],
        "psi_scale": [StrOptions(set(PSI_SCALES))],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "kkt_tol": [Interval(numbers.Real, 0, None, closed="neither")],
        "max_sweeps": [Interval(numbers.Integral, 0, None, closed="left")],
        "initial_selection": ["boolean"],
        "resolve_start": [StrOptions({"warm", "cold"})],
        "n_threads": N_THREADS_CONSTRAINT,
        "random_state": ["random_state"],
        "probability": ["boolean"],
    }

    def save(self, path) -> None:
        """Save the fitted model (see ``elmscale.io.model_files`` for the format)."""
        from elmscale.io.model_files import save

        save(self, path)

    def _problem(self, X, t, seed) -> MaskProblem:  # pragma: no cover - FELM / FKELM's
        """The selection problem of one pair's rows ``X`` and targets ``t``."""
        raise NotImplementedError

    # -- fitting ------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, client=None, ray_address=None):
        """Select features and fit the output weights on ``X``, ``y``.

        ``ray_address``: None evaluates the candidate flips on this process's threads
        (``n_threads``); otherwise each block of candidates is a Ray task on the Ray
        already initialised or the cluster at this address.  The model is the same.

        ``X`` may also be a :class:`~elmscale.data.parquet.ParquetDataset` (``y`` None:
        its label column) or a Dask DataFrame / Array with ``y`` a Dask Series / Array of
        the same partitions (``client`` default: Dask's default client).  FELM's problems
        are held in memory (each pair's N x P outputs, FKELM's N x N kernel), so their
        rows are read on the workers (``client``; here without one) and gathered here,
        float32 as every data set's rows: the model is the arrays fit of those rows, to
        the bit.
        """
        X, y = self._rows(X, y, client)
        X, y = validate_data(
            self, X, y, dtype=[np.float64, np.float32], accept_sparse=SPARSE_FORMATS
        )
        X = _dense_for_selection(X)
        check_class_labels(y)
        self.classes_, y_idx = np.unique(y, return_inverse=True)
        if self.classes_.size < 2:
            raise ValueError(
                f"{type(self).__name__} needs at least 2 classes in y; got 1 class "
                f"({self.classes_[0]!r})"
            )
        X = np.asarray(X, dtype=np.float64)
        seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
        self._prepare_mapping(X.shape[1], seed)
        n_classes = self.classes_.size
        pairs = one_vs_one_pairs(n_classes)
        every_row = np.arange(y_idx.size)
        n_threads = resolve_n_threads(self.n_threads)
        results, rows_of = [], []
        # one BLAS / numba thread for the selection itself: its products are small (44 x 300
        # on colon: 7.1 ms on two BLAS threads beside a busy core, 0.07 ms on one, which
        # made the whole fit 14x slower); the pool's threads are the parallelism
        with (
            thread_budget(1),
            ThreadPoolExecutor(n_threads, initializer=_one_numba_thread) as pool,
        ):
            for a, b in pairs:
                rows, t = pair_problem(every_row, y_idx, a, b)
                problem = self._problem(X[rows], t, seed)
                if ray_address is not None:
                    map_blocks = _blocks_on(make_executor(ray_address=ray_address))
                    n_blocks, block_size = 2, BLOCK_SIZE["ray"]
                elif n_threads > 1 and rows.size * self._kept_width(rows.size) >= (
                    THREADS_MIN_ENTRIES
                ):
                    map_blocks = _blocks_on_pool(pool)
                    n_blocks, block_size = n_threads, BLOCK_SIZE["threads"]
                else:
                    map_blocks, n_blocks, block_size = None, 1, BLOCK_SIZE["threads"]
                results.append(
                    select_features(
                        problem,
                        tol=float(self.tol),
                        max_sweeps=int(self.max_sweeps),
                        block_size=block_size,
                        n_blocks=n_blocks,
                        map_blocks=map_blocks,
                        warm=self.resolve_start == "warm",
                        initial_selection=bool(self.initial_selection),
                        psi_scale=self.psi_scale,
                    )
                )
                rows_of.append((rows, t, problem))
        self._assemble(X, pairs, results, rows_of)
        if self.max_sweeps > 0 and not np.all(self.converged_):
            warnings.warn(
                f"{type(self).__name__} stopped after max_sweeps={self.max_sweeps} sweeps "
                "through the features with flips still lowering the objective; increase "
                "max_sweeps",
                ConvergenceWarning,
                stacklevel=2,
            )
        self._fit_calibration(X, y, ray_address=ray_address)
        return self

    @staticmethod
    def _rows(X, y, client):
        """``(X, y)`` in memory: arrays as given, a data set's or Dask collections' rows
        gathered (see :meth:`fit`)."""
        from elmscale.distributed import dataset_ops
        from elmscale.distributed.collections import is_dataset, labelled_source

        X, y, client = labelled_source(X, y, client)
        if not is_dataset(X):
            return X, y
        return dataset_ops.gather_rows(X, client=client)

    def _assemble(self, X, pairs, results, rows_of):
        binary = len(pairs) == 1
        self.pairs_ = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        self.pair_masks_ = np.array([r.point.mask for r in results])
        self.support_mask_ = self.pair_masks_.any(axis=0)
        self.n_features_selected_ = int(self.support_mask_.sum())
        scores = np.array([r.scores for r in results])
        self.feature_scores_ = scores[0] if binary else scores
        longest = max(r.objective_path.size for r in results)
        paths = np.full((len(pairs), longest), np.nan)
        for p, r in enumerate(results):
            paths[p, : r.objective_path.size] = r.objective_path
        self.objective_path_ = paths[0] if binary else paths
        self.objective_ = np.array([r.point.objective for r in results])
        self.psi_effective_ = np.array([r.psi_effective for r in results])
        self.n_iter_ = np.array([r.n_sweeps for r in results])
        self.converged_ = np.array([r.converged for r in results])
        for name in ("candidates", "screened", "solves", "kept"):
            setattr(self, f"n_flip_{name}_", np.array([r.stats[name] for r in results]))
        self.resolve_seconds_ = np.array([r.stats["solve_seconds"] for r in results])
        self.selection_seconds_ = np.array([r.stats["total_seconds"] for r in results])
        self._store_weights(X, results, rows_of)

    # -- scoring ------------------------------------------------------------------
    def _get_support_mask(self):
        check_is_fitted(self)
        return self.support_mask_

    def _calibration_scores(self, X) -> np.ndarray:
        """The scores the sigmoids read, ``(n, n_problems)`` (``pair_problem_scores``)."""
        return pair_problem_scores(self._checked_pair_scores(X), self.classes_.size)

    def _checked_pair_scores(self, X) -> np.ndarray:
        """``_pair_scores`` of validated rows, on the estimator's threads."""
        check_is_fitted(self)
        X = validate_data(
            self, X, dtype=[np.float64, np.float32], accept_sparse=SPARSE_FORMATS, reset=False
        )
        with thread_budget(self.n_threads):
            if not is_sparse(X):
                return self._pair_scores(np.asarray(X, dtype=np.float64))
            # sparse rows scored a block at a time, each block dense (the masks pick columns)
            rows_per_block = max(1, DENSE_SELECTION_BYTES // (8 * max(1, X.shape[1])))
            return np.concatenate(
                [
                    self._pair_scores(X[rows].toarray().astype(np.float64))
                    for rows in iter_row_blocks(X.shape[0], rows_per_block)
                ]
            )

    @lazy_on_collections
    def decision_function(self, X) -> np.ndarray:
        """(n,) for two classes (> 0 means ``classes_[1]``); else (n, n_classes), the
        one-vs-rest view of the pairs' votes (as ``SparseELMClassifier``)."""
        return ovo_decision(self._checked_pair_scores(X), self.classes_.size)

    @lazy_on_collections
    def predict(self, X) -> np.ndarray:
        index = decision_to_class_index(self.decision_function(X))  # checks fitted first
        return self.classes_[index]

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.estimator_type = "classifier"
        tags.target_tags.required = True
        tags.input_tags.sparse = True  # densified up to DENSE_SELECTION_BYTES
        return tags


#: The largest dense copy (bytes, float64) of sparse rows that FELM / FKELM make: their
#: selection flips single input features, reading and moving dense feature columns of every
#: row (rank-1 terms per flip), so sparse rows are densified up to this size and refused above
DENSE_SELECTION_BYTES = 256 * 2**20


def _dense_for_selection(X):
    """``X`` as given when dense; sparse rows as a dense array when within
    ``DENSE_SELECTION_BYTES``, else a ValueError naming ``X`` and why."""
    if not is_sparse(X):
        return X
    n_bytes = 8 * X.shape[0] * X.shape[1]
    if n_bytes > DENSE_SELECTION_BYTES:
        raise ValueError(
            f"X is sparse, {X.shape[0]:,} x {X.shape[1]:,}: feature selection (FELM, FKELM) "
            f"flips single features and reads dense feature columns, and X dense would take "
            f"{n_bytes / 2**20:,.0f} MB (more than {DENSE_SELECTION_BYTES // 2**20} MB); "
            "select features on fewer rows or columns, or use SparseELMClassifier or "
            "ELMClassifier, which fit sparse rows as they are"
        )
    return X.toarray()


@dataclass(kw_only=True, eq=False, repr=False)
class FELMClassifier(_FeatureSelectingELM):
    """FELM: random hidden nodes on masked inputs, the sparse ELM's output weights, and a
    cost ``psi`` per kept feature (eq. 9-10).

    Parameters
    ----------
    C : float, default=1.0
        Upper bound of the dual variables (the hinge loss's weight; > 0).
    psi : float, default=0.0625
        Cost of each kept feature in the objective (>= 0); larger keeps fewer.  On the
        relative scale (the default) in units of ``f0 / sqrt(d)``: ``f0`` the objective
        of every feature (E = I) without the psi term, ``d`` the number of features, so
        psi = 1 prices sqrt(d) kept features at ``f0`` (per one-vs-one pair, its own
        ``f0``); a logarithmic grid such as 2^-8 .. 2^4 walks from (nearly) every feature
        to a few.  The default 2^-4 keeps a subset at about the accuracy of every feature
        (docs/guide/felm.md: colon 143 of 2,000 genes, leukaemia 129 of 7,129).
    psi_scale : {"relative", "absolute"}, default="relative"
        "absolute": psi is the cost itself, in the objective's units (the paper's psi;
        those units differ by orders of magnitude between problems).
    n_hidden : int, default=300
        Random hidden nodes (the paper's P).
    hidden : {"sigmoid", "sinusoid", "multiquadric", "gaussian"}, default="sigmoid"
    weight_scale : float, default=1.0
        Input-weight scale of additive nodes (``HiddenLayer``).
    tol : float, default=1e-6
        A flip is kept only when it lowers the objective by more than this.
    kkt_tol : float, default=1e-3
        The sparse-ELM solver's KKT tolerance for each mask's output weights.
    max_sweeps : int, default=20
        Cycles through the features at most (the paper's k); a ``ConvergenceWarning``
        when the last still kept a flip.
    initial_selection : bool, default=True
        First drop the features whose eq. 27 score is under 1/n (Algorithm 1, step 2);
        False starts the flips from every feature (with ``max_sweeps=0`` and ``psi=0``
        the model is then the sparse ELM on the same layer).
    resolve_start : {"warm", "cold"}, default="warm"
        Each candidate's re-solve starts from the current dual, or from zero (the same
        masks up to the solver tolerance; "cold" is for measuring what warm saves).
    n_threads : int or None
        Threads for the candidate flips (None / -1: every core).
    random_state : int, RandomState or None
        Draws the hidden layer.
    probability : bool, default=False
        Also fit calibrated probabilities (``predict_proba``) as ``SVC(probability=True)``:
        Platt sigmoids on out-of-fold scores of a 5-fold stratified split (five more
        selections), the one-vs-one pairs coupled as Wu, Lin and Weng (2004)
        (``elmscale.models.probability``).

    Attributes
    ----------
    classes_, n_features_in_, feature_names_in_
    support_mask_ : (n_features_in_,) bool, the kept features (``get_support()``)
    n_features_selected_ : int
    pair_masks_ : (n_pairs, n_features_in_) each one-vs-one pair's mask
    feature_scores_ : eq. 27's scores at E = I ((n_pairs, d) for multiclass; NaN when
        ``initial_selection=False``)
    objective_path_ : f(E) after the initial selection and after each kept flip (rows
        per pair, NaN-padded, for multiclass)
    objective_ : final f(E) per pair
    psi_effective_ : (n_pairs,) the cost per kept feature each pair's objective used
        (``psi`` itself on the absolute scale)
    n_iter_ : sweeps through the features per pair; converged_ per pair
    n_flip_candidates_, n_flip_screened_, n_flip_solves_, n_flip_kept_ : per pair
    resolve_seconds_, selection_seconds_ : time in re-solves and in the whole selection
    hidden_layer_ : the random layer; coef_ : (n_hidden, n_pairs) output weights
    prob_a_, prob_b_ : (n_problems,) Platt's sigmoids ``1 / (1 + exp(A f + B))``
        (``probability=True``): the decision value for two classes, else each pair's score
    probability_coupling_ : "binary" or "pairwise"
    """

    _parameter_constraints: ClassVar[dict] = {
        **_FeatureSelectingELM._common_constraints,
        "n_hidden": [Interval(numbers.Integral, 1, None, closed="left")],
        "hidden": [StrOptions(set(HIDDEN_KINDS))],
        "weight_scale": [Interval(numbers.Real, 0, None, closed="neither")],
    }

    n_hidden: int = 300
    hidden: str = "sigmoid"
    weight_scale: float = 1.0

    def _prepare_mapping(self, n_features, seed):
        self.hidden_layer_ = HiddenLayer(
            self.hidden, n_features, int(self.n_hidden), seed, float(self.weight_scale)
        )

    def _problem(self, X, t, seed) -> ExplicitMaskProblem:
        return ExplicitMaskProblem(
            X,
            t,
            self.hidden_layer_,
            C=float(self.C),
            psi=float(self.psi),
            kkt_tol=float(self.kkt_tol),
            seed=seed,
        )

    def _kept_width(self, n_rows):
        del n_rows
        return int(self.n_hidden)

    def _store_weights(self, X, results, rows_of):
        self.coef_ = np.column_stack(
            [problem.weights_of(r.point) for r, (_, _, problem) in zip(results, rows_of)]
        )

    def _pair_scores(self, X):
        out = np.empty((X.shape[0], len(self.pairs_)))
        for p, mask in enumerate(self.pair_masks_):
            out[:, p] = self.hidden_layer_.scores(X * mask, self.coef_[:, p])
        return out


@dataclass(kw_only=True, eq=False, repr=False)
class FKELMClassifier(_FeatureSelectingELM):
    """FKELM: the memorization-generalization kernel on masked inputs (eq. 8, 11-12).

    The kernel is ``Kernel("mg", sigma, sigma_star=sigma_star_ratio * sigma, tau)``:
    ``(1 - tau) exp(-|u-v|^2 / (2 sigma^2)) + tau exp(-|u-v|^2 / (2 sigma_star^2))`` in this
    library's widths (see :class:`elmscale.features.kernels.Kernel`).  The default ratio
    ``2^10`` is the paper's choice (its ``s* = 2^-10 s`` with ``s`` an inverse width):
    the second term is then nearly constant; its text's intent, a memorizing narrow
    kernel, is ``sigma_star_ratio < 1``.  With ``tau = 0`` it is the gaussian kernel.

    Parameters: ``C``, ``psi``, ``psi_scale``, ``tol``, ``kkt_tol``, ``max_sweeps``,
    ``initial_selection``, ``resolve_start``, ``probability``,
    ``n_threads``, ``random_state`` (unused by the selection: kept for the interface) as
    in :class:`FELMClassifier`; ``sigma`` (> 0), ``sigma_star_ratio`` (> 0), ``tau`` in
    [0, 1].

    Attributes: as :class:`FELMClassifier`'s, with the kernel model in place of the
    layer: ``support_vectors_`` (the training rows with a nonzero dual variable in some
    pair) and ``dual_coef_`` (n_pairs, n_SV) ``a_i t_i`` over them; ``kernel_`` the
    kernel's description.
    """

    _parameter_constraints: ClassVar[dict] = {
        **_FeatureSelectingELM._common_constraints,
        "sigma": [Interval(numbers.Real, 0, None, closed="neither")],
        "sigma_star_ratio": [Interval(numbers.Real, 0, None, closed="neither")],
        "tau": [Interval(numbers.Real, 0, 1, closed="both")],
    }

    sigma: float = 1.0
    sigma_star_ratio: float = 1024.0
    tau: float = 0.5

    def _kernel(self) -> Kernel:
        return Kernel(
            "mg",
            sigma=float(self.sigma),
            sigma_star=float(self.sigma_star_ratio) * float(self.sigma),
            tau=float(self.tau),
        )

    def _prepare_mapping(self, n_features, seed):
        del n_features, seed  # nothing drawn (its values are checked by the constraints)

    def _problem(self, X, t, seed) -> KernelMaskProblem:
        del seed
        return KernelMaskProblem(
            X,
            t,
            self._kernel(),
            C=float(self.C),
            psi=float(self.psi),
            kkt_tol=float(self.kkt_tol),
        )

    def _kept_width(self, n_rows):
        return int(n_rows)

    def _store_weights(self, X, results, rows_of):
        n = X.shape[0]
        coef = np.zeros((len(results), n))
        for p, (r, (rows, t, _)) in enumerate(zip(results, rows_of)):
            coef[p, rows] = r.point.alpha * t
        self.support_ = np.flatnonzero(np.any(coef != 0.0, axis=0))
        self.support_vectors_ = X[self.support_]
        self.dual_coef_ = coef[:, self.support_]

    def _pair_scores(self, X):
        out = np.zeros((X.shape[0], len(self.pairs_)))
        if self.support_.size == 0:
            return out
        kernel = self._kernel()
        for p, mask in enumerate(self.pair_masks_):
            out[:, p] = kernel.block_matvec(
                X[:, mask], self.support_vectors_[:, mask], self.dual_coef_[p]
            )
        return out
