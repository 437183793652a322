"""The sparse ELM classifier (paper Sections IV-V): a dual QP without bias, one-vs-one.

Each one-vs-one pair is an independent pure function of (rows, labels,
parameters), ``sparse_paths.fit_binary``, so that pairs run as Ray tasks too.  The
model keeps only the support vectors: ``decision_function`` costs
O(n_rows x n_SV x n_features).
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context, clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import _ovr_decision_function
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from elmscale.core.bit_kernels import bits_pay
from elmscale.core.sparse_kernels import SPARSE_FORMATS, float32_rows, is_sparse
from elmscale.core.threads import resolve_n_threads, thread_budget
from elmscale.distributed.collections import lazy_on_collections
from elmscale.distributed.executors import make_executor
from elmscale.features.base import DEFAULT_BLOCK_ROWS, iter_row_blocks
from elmscale.features.kernels import KERNEL_KINDS, SCORE_PRECISIONS, Kernel, mg_params
from elmscale.features.layers import HIDDEN_KINDS
from elmscale.linalg.targets import one_vs_one_pairs
from elmscale.models.elm import N_THREADS_CONSTRAINT, check_class_labels
from elmscale.models.grid_plan import GridPlan
from elmscale.models.probability import ProbabilityMixin
from elmscale.models.source_score import SourceScoreMixin

# the binary problems are in sparse_elm_pairs (no scikit-learn there, for Ray workers)
from elmscale.models.sparse_elm_pairs import (
    DENSE_ROWS,
    BinarySolution,
    fit_binary,
    fit_dense_pairs,
    fits_gram_budget,
    is_kernel,
    mapping_from_dict,
    newton_pairs,
    newton_wins,
    pair_path,
    pair_problem,
    pair_validation_scores,
    working_set_wins,
)
from elmscale.solvers.kernel_kmeans import nearest_centre
from elmscale.solvers.thunder import solve_thunder, thunder_wins
from elmscale.solvers.working_set import DEFAULT_MAX_ITERATIONS

#: With ``n_parts="auto"`` and ``early_prediction=True``, at most one part per this many
#: rows.
AUTO_PART_ROWS = 5_000
#: The fitted attributes of an early-prediction fit (``fit(..., early_prediction=True)``).
EARLY_PREDICTION_ATTRS = ("part_centres_", "part_weights_", "part_centre_sq_", "support_part_")


def ovo_decision(pair_scores: np.ndarray, n_classes: int) -> np.ndarray:
    """Decision values from one-vs-one pair scores ``(n, n_pairs)`` (pair p > 0 votes for
    its first class): (n,) for two classes, else scikit-learn's one-vs-rest view of the
    votes (votes plus a confidence below 1/3, so ``argmax`` is the voted class)."""
    if n_classes == 2:
        return -pair_scores[:, 0]  # pair +1 is classes_[0]
    return _ovr_decision_function(pair_scores < 0, -pair_scores, n_classes)


def pair_problem_scores(pair_scores: np.ndarray, n_classes: int) -> np.ndarray:
    """The scores the calibration's sigmoids read from one-vs-one pair scores ``(n,
    n_pairs)``: the decision value for two classes (> 0: the second class), else the pairs'
    scores (> 0: the pair's first class)."""
    return -pair_scores if n_classes == 2 else pair_scores


def decision_to_class_index(decision: np.ndarray) -> np.ndarray:
    """Index into ``classes_`` of the decision values of :func:`ovo_decision`."""
    if decision.ndim == 1:
        return (decision > 0).astype(np.intp)
    return np.argmax(decision, axis=1)


class SparseELMClassifier(SourceScoreMixin, ProbabilityMixin, ClassifierMixin, BaseEstimator):
    """Sparse ELM (Bai et al. 2014): hinge loss, no bias, ``0 <= a_i <= C``; one-vs-one.

    Parameters
    ----------
    kernel : {"gaussian", "laplacian", "polynomial", "mg"}, default="gaussian"
        Kernel (eqs. 29-31); ignored when ``hidden`` is set.
    hidden : {"sigmoid", "sinusoid", "multiquadric", "gaussian"} or None, default=None
        Random hidden nodes instead of a kernel (Omega = HH', eq. 24); solved by
        dual coordinate descent on the primal vector (no kernel columns).
    n_hidden, weight_scale : random-node layer size and input-weight scale.
    C : float, default=1.0
        Upper bound of the dual variables (> 0).
    sigma, degree : kernel parameters.
    sigma_star_ratio, tau : the memorization-generalization kernel's ("mg") second width
        as a multiple of ``sigma`` and its weight in [0, 1] (see
        ``elmscale.features.kernels.Kernel``); ignored by the other kernels.
    tol : float, default=1e-3
        KKT tolerance, checked on exit with an exact float64 gradient.
    cache_size : float, default=200
        Kernel-column cache in MB (float32 columns; float64 when the kernel's scale
        needs them, as a polynomial kernel on unscaled features may).
    shrinking : bool, default=True
    max_iter : int, default=-1
        Steps (kernels) or passes (random nodes) per binary problem; -1: LIBSVM's cap
        of max(10^7, 100 n) steps for kernels, 100,000 passes for random nodes.
        A ``ConvergenceWarning`` is raised when it stops the solver.
    n_threads, random_state : as in ``ELMClassifier``.  With two threads or more (and two
        cores in the process's CPU affinity), one binary problem of 8,192 rows or more
        uses two: a helper thread takes half of each long pass of the solver's steps (the
        same solution to the bit), and the solver's thread takes a half back, or runs
        alone for a while, when the helper has no core (another process has it); several
        one-vs-one pairs run side by side, one thread each.  Up to 1,024 rows, K is
        computed once (its upper half, mirrored) and every pair solved on it in one
        compiled call (``dense_dual``), one pair after another.
    solver : {"auto", "newton", "dual", "working_set"}, default="auto"
        How the problems are solved.  Kernels: "dual", the one-process solver (LIBSVM's
        shape: two variables a step, an LRU cache of kernel columns, shrinking), the
        solver of ``fit_path`` and of grid searches; "working_set", a decomposition with
        a large working set (``elmscale.solvers.working_set``): each iteration the
        ``working_set_size`` largest KKT violators are solved together on the coordinator
        while the blocks of rows, on Dask workers or on this process's threads, update
        their gradients with the kernel columns of the changed variables, one exchange
        per iteration; the same KKT stop and exact float64 check as "dual", so the same
        optimum within ``tol``.  From arrays with no ``n_blocks``, one block in this
        process (``elmscale.solvers.thunder``, Thunder's design), its kernel columns
        computed in blocks, one GEMM each, from 48 features.  "auto" takes "working_set"
        for a ParquetDataset fitted with a ``client`` of at least 4 worker threads
        (projected faster from there; on 2 workers the one-process dual solver measured
        faster: ``docs/performance.md``); from dense arrays of at least 64 features and
        4,096 rows with a gaussian or laplacian kernel (not rows of 0s and 1s, whose packed columns
        make the dual faster), the one-process working set (measured 1.17x the dual's speed
        at 64 features, 3.6x at 300: ``benchmarks/results/working_set_thunder_wide.txt``);
        else "dual" (narrow rows: ``benchmarks/results/working_set_thunder.txt``).  Random
        nodes:
        "newton": primal Newton passes on a smoothed hinge, one pass over the
        rows serving every one-vs-one pair, finished on the exact dual over the rows near
        the margin (``elmscale.solvers.primal_newton``): the same optimum, certified by the
        same KKT check; a ParquetDataset's random-node fit always takes it.  "dual": dual
        coordinate descent per pair (LIBLINEAR's), the solver of ``fit_path`` and of grid
        searches, whose C paths it warm-starts.  "auto": "newton" where it was measured
        faster (``docs/performance.md``), from 2,000 rows per one-vs-one pair (2,000 rows
        for two classes, 6,000 for 3, 90,000 for 10); else "dual", and "dual" when
        ``fit`` is given ``ray_address`` (its pairs fan out).
    working_set_size : int, default=512
        The working-set solver's q: variables solved together per iteration (>= 2).
        Measured on 100,000 generated rows (2 blocks on 2 threads, ``benchmarks/
        working_set.py --q-sweep``): 256 took 8.0 s (821 iterations), 512 7.5 s (405),
        1,024 12.2 s (196), 2,048 12.6 s (89), 4,096 18.5 s (42): larger sets take fewer
        exchanges but choose from staler gradients, more work in all.
    precision : {"single", "double"}, default="single"
        The kernel values of ``predict``, ``decision_function``, ``predict_proba`` and
        ``elmscale score`` (gaussian and laplacian kernels): "single" computes them in
        float32 as the solver's kernel columns are, their weighted sums in float64, about
        twice as fast as "double" (every value in float64).  The decision values then
        differ from the float64 ones by at most ``features.kernels.float32_error_bound``
        (about 1e-6 relative to the sum of the |dual coefficients| at worst; measured
        5e-6 on decision values up to 9 on COD-RNA, C = 1); a model file written before
        this option scores in "double", as it did.  Polynomial and mg kernels, and random
        nodes, compute the same in both.  The kernel solver's final KKT check follows it:
        "single" first checks from float32 values with that bound, and ends there when
        every violation is within ``tol`` for any gradient within it (the same solution as
        the exact check's: it would pass too; ``kkt_violation_`` and ``objective_`` then come
        from that gradient), else checks in float64.
    probability : bool, default=False
        Also fit calibrated probabilities (``predict_proba``) as ``SVC(probability=True)``:
        Platt sigmoids on out-of-fold scores of a 5-fold stratified split, the one-vs-one
        pairs coupled as Wu, Lin and Weng (2004) (``elmscale.models.probability``); the
        five out-of-fold fits run as Ray tasks when ``fit`` is given ``ray_address``; in
        memory only (not with a ParquetDataset's random-node fit).

    Attributes
    ----------
    classes_, n_features_in_
    support_ : indices of the training rows that are support vectors (any pair)
    support_vectors_ : those rows (float32)
    dual_coef_ : (n_pairs, n_SV) a_i t_i of each pair over ``support_vectors_``
    coef_ : (n_hidden, n_pairs) primal vectors beta (random nodes only)
    hidden_layer_ : the random layer (random nodes only)
    n_support_ : support vectors per class
    n_iter_, objective_, kkt_violation_, converged_ : per pair (``n_iter_``: the kernel
        solver's steps, the working-set solver's iterations, or passes over the rows for
        random nodes)
    solver_ : the solver that ran ("dual", "working_set" or "newton"; ``solver``'s "auto"
        resolved)
    exact_checks_, blocks_rebuilt_, iteration_seconds_ : the working-set solver's: checks of
        every row's gradient made (the last one exact in float64), blocks of rows rebuilt
        after their Dask worker was lost, and the wall seconds of each exchange with the
        blocks; ``exchange_timings_`` (exchanges x 6) each exchange's breakdown: exact check
        or step, wall, the slowest block's compute and CPU, the wait, the coordinator's
        work before it (``elmscale.distributed.working_set.EXCHANGE_COLUMNS``)
    duality_gap_, n_gathered_, pass_seconds_ : the Newton solver's (``solver``): each pair's
        relative duality gap at the end, the rows its phase 2 gathered near the margin, and
        each pass's wall seconds; ``pass_timings_`` (passes x 9) each pass's breakdown:
        wall, the coordinator's work, the map, the slowest block's compute (Dask's task
        stream) and CPU, the wait, transfers, bytes sent and returned
        (``elmscale.distributed.newton.PASS_COLUMNS``, ``pass_breakdown``)
    n_parts_ : parts of a kernel fit (1: solved whole; more: divide and conquer on Dask, see
        ``fit``'s ``n_parts``), with ``part_sizes_`` (rows per part), ``sub_iter_``
        (n_parts, n_pairs: the parts' steps; ``n_iter_`` is then the global solve's) and
        ``phase_seconds_`` (``divide_conquer.PHASES``) when divided
    part_centres_, part_weights_, part_centre_sq_, support_part_ : an early-prediction
        fit's partition (``fit``'s ``early_prediction``): the k-means sample rows
        (float32), their weights per centre (sample rows x parts), the centres' squared
        norms in the kernel's space, and each support vector's part
    pairs_ : (n_pairs, 2) class indices of each pair; +1 is the first class
    prob_a_, prob_b_ : (n_problems,) Platt's sigmoids ``1 / (1 + exp(A f + B))``
        (``probability=True``): the decision value for two classes, else each pair's score
        (P of its first class)
    probability_coupling_ : "binary" or "pairwise"
    """

    multiclass_coupling = "pairwise"  # (predict_proba: the pairs coupled, Wu-Lin-Weng)

    _parameter_constraints: dict = {
        "kernel": [StrOptions(set(KERNEL_KINDS))],
        "hidden": [StrOptions(set(HIDDEN_KINDS)), None],
        "n_hidden": [Interval(numbers.Integral, 1, None, closed="left")],
        "weight_scale": [Interval(numbers.Real, 0, None, closed="neither")],
        "C": [Interval(numbers.Real, 0, None, closed="neither")],
        "sigma": [Interval(numbers.Real, 0, None, closed="neither")],
        "degree": [Interval(numbers.Integral, 1, None, closed="left")],
        "sigma_star_ratio": [Interval(numbers.Real, 0, None, closed="neither")],
        "tau": [Interval(numbers.Real, 0, 1, closed="both")],
        "tol": [Interval(numbers.Real, 0, None, closed="neither")],
        "cache_size": [Interval(numbers.Real, 0, None, closed="neither")],
        "shrinking": ["boolean"],
        "max_iter": [Interval(numbers.Integral, -1, None, closed="left")],
        "n_threads": N_THREADS_CONSTRAINT,
        "random_state": ["random_state"],
        "solver": [StrOptions({"auto", "newton", "dual", "working_set"})],
        "working_set_size": [Interval(numbers.Integral, 2, None, closed="left")],
        "precision": [StrOptions(set(SCORE_PRECISIONS))],
        "probability": ["boolean"],
    }

    def __init__(
        self,
        *,
        kernel="gaussian",
        hidden=None,
        n_hidden=200,
        weight_scale=1.0,
        C=1.0,
        sigma=1.0,
        degree=3,
        sigma_star_ratio=1024.0,
        tau=0.5,
        tol=1e-3,
        cache_size=200.0,
        shrinking=True,
        max_iter=-1,
        n_threads=None,
        random_state=None,
        solver="auto",
        working_set_size=512,
        precision="single",
        probability=False,
    ):
        self.kernel = kernel
        self.hidden = hidden
        self.n_hidden = n_hidden
        self.weight_scale = weight_scale
        self.C = C
        self.sigma = sigma
        self.degree = degree
        self.sigma_star_ratio = sigma_star_ratio
        self.tau = tau
        self.tol = tol
        self.cache_size = cache_size
        self.shrinking = shrinking
        self.max_iter = max_iter
        self.n_threads = n_threads
        self.random_state = random_state
        self.solver = solver
        self.working_set_size = working_set_size
        self.precision = precision
        self.probability = probability

    def _kernel_obj(self) -> Kernel:
        return Kernel(
            self.kernel,
            sigma=float(self.sigma),
            degree=int(self.degree),
            **mg_params(self),
        )

    def save(self, path) -> None:
        """Save the fitted model (see ``elmscale.io.model_files`` for the format)."""
        from elmscale.io.model_files import save

        save(self, path)

    def _feature_map_description(self, n_features: int) -> tuple[dict, int]:
        """``(description, seed)``: the kernel or random layer as its ``to_dict()``, not yet
        checked (``mapping_from_dict`` builds it; a grid piece does so itself, so that a
        bad setting fails in the piece that names it), and the solver's seed, drawn from
        ``random_state``."""
        seed = int(check_random_state(self.random_state).randint(0, 2**31 - 1))
        if self.hidden is not None:
            return {
                "kind": self.hidden,
                "n_features": int(n_features),
                "n_hidden": self.n_hidden,
                "seed": seed,
                "weight_scale": self.weight_scale,
            }, seed
        return {
            "kind": self.kernel,
            "sigma": self.sigma,
            "degree": self.degree,
            **mg_params(self),
        }, seed

    def _class_indices(self, X, y):
        """``(X, y's class indices)`` validated, ``classes_`` set; at least 2 classes."""
        X, y = validate_data(
            self, X, y, dtype=[np.float64, np.float32], accept_sparse=SPARSE_FORMATS
        )
        check_class_labels(y)
        self.classes_, y_idx = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError(
                f"SparseELMClassifier needs at least 2 classes in y; got 1 class "
                f"({self.classes_[0]!r})"
            )
        return X, y_idx

    def _dataset_classes(self, dataset, client) -> None:
        """``classes_`` and ``n_features_in_`` of a ParquetDataset (its label column read
        where the rows live); at least 2 classes."""
        from elmscale.distributed import dataset_ops as dataplane

        stats = dataplane.column_stats(dataset, client=client)
        self.classes_ = np.asarray(stats.classes)
        if self.classes_.size < 2:
            raise ValueError(
                f"SparseELMClassifier needs at least 2 classes; {dataset!r} has "
                f"{self.classes_.size}"
            )
        self.n_features_in_ = dataset.n_features

    def _prepare(self, X, y):
        X, y_idx = self._class_indices(X, y)
        n_classes = len(self.classes_)
        X32 = float32_rows(X)  # sparse rows stay CSR
        description, seed = self._feature_map_description(X.shape[1])
        feature_map = mapping_from_dict(description)
        pairs = one_vs_one_pairs(n_classes)
        every_row = np.arange(y_idx.size)
        rows_of = [pair_problem(every_row, y_idx, a, b) for a, b in pairs]
        return X32, y_idx, feature_map, pairs, rows_of, seed

    def _solver_options(self) -> dict:
        return {
            "tol": float(self.tol),
            "cache_size": float(self.cache_size),
            "shrinking": bool(self.shrinking),
            "max_iter": int(self.max_iter),
        }

    def _solve_pairs(self, X32, feature_map, rows_of, seed, Cs, ray_address=None):
        """results[c][p]: pair p solved at Cs[c], each C warm-started from the previous one.

        Pairs run side by side on the thread budget (one numba thread each), a
        single pair on all of it, or as Ray tasks when ``ray_address`` is given;
        the results do not depend on which.
        """
        shared = {"X": X32}
        n_threads = self.n_threads
        small = (
            is_kernel(feature_map)
            and X32.shape[0] <= DENSE_ROWS
            and fits_gram_budget(X32.shape[0], X32.shape[0], self.cache_size)
        )
        here_once = len(Cs) == 1 and ray_address is None
        if small and (here_once or len(rows_of) > 1):
            # small problems: K of every row once, each pair reads its block (a kernel
            # evaluation per pair cost more than its solve), and the pairs one after
            # another (each takes tens of microseconds: a thread pool's start and the GIL
            # between two threads cost more; satimage, 250 rows, 15 pairs: 8.3 ms on two
            # threads, 5.5 ms on one)
            with thread_budget(self.n_threads):
                shared["K"] = feature_map.block(X32, X32)
            if here_once:  # one C here: every pair in one compiled call
                return [
                    fit_dense_pairs(
                        shared["K"],
                        rows_of,
                        C=float(Cs[0]),
                        tol=float(self.tol),
                        max_iter=int(self.max_iter),
                    )
                ]
            n_threads = 1
        executor = make_executor(ray_address=ray_address, n_threads=n_threads)
        by_pair = executor.map(
            pair_path,
            list(rows_of),
            shared=shared,
            label="one-vs-one pairs",
            feature_map=feature_map,
            Cs=list(Cs),
            seed=seed,
            check_precision=self.precision,
            **self._solver_options(),
        )
        return [[by_pair[p][c] for p in range(len(rows_of))] for c in range(len(Cs))]

    def grid_plan(self, X, y, splits, settings, Cs, scoring=None) -> GridPlan:
        """``GridSearchCV``'s pieces for this estimator: one per (fold, setting, one-vs-one
        pair), each solving the pair's C path (increasing, warm-started) on the fold's
        training rows and returning its scores on the validation rows; a fold's accuracy
        comes from the pairs' votes.  Pieces get plain values (a feature map's description,
        a seed, solver options), so a worker imports no scikit-learn."""
        if scoring not in (None, "accuracy"):
            raise ValueError(
                f"scoring={scoring!r}: the sparse ELM's grid search scores accuracy only"
            )
        classes, y_idx = np.unique(y, return_inverse=True)
        pairs = one_vs_one_pairs(classes.size)
        pieces = [
            (k, s, pair) for k in range(len(splits)) for s in range(len(settings)) for pair in pairs
        ]
        resolved = []
        for setting in settings:
            est = clone(self).set_params(**setting)
            description, seed = est._feature_map_description(X.shape[1])
            resolved.append((description, seed, est._solver_options()))

        def scores(results) -> np.ndarray:
            out = np.empty((len(settings), len(Cs), len(splits)))
            for k, (_, test) in enumerate(splits):
                for s in range(len(settings)):
                    first = (k * len(settings) + s) * len(pairs)
                    block = np.stack(results[first : first + len(pairs)])  # (pairs, C, rows)
                    for c in range(len(Cs)):
                        guess = decision_to_class_index(ovo_decision(block[:, c].T, classes.size))
                        out[s, c, k] = np.mean(guess == y_idx[test])
            return out

        shared = {
            "X": float32_rows(X),
            "y_idx": y_idx,
            "splits": splits,
            "settings": resolved,
        }
        return GridPlan(
            pieces=pieces,
            fn=pair_validation_scores,
            scores=scores,
            shared=shared,
            kwargs={"Cs": list(Cs)},
        )

    def _warn_if_not_converged(self):
        if self.kkt_violation_.size and not np.all(self.converged_):
            if self.max_iter >= 0:
                limit = f"max_iter={self.max_iter}"
            elif getattr(self, "solver_", None) == "working_set":
                limit = f"the default cap ({DEFAULT_MAX_ITERATIONS:,} working-set iterations)"
            else:
                limit = (
                    "the default cap (kernels: max(1e7, 100 n) steps; random nodes: 100,000 passes)"
                )
            if np.isnan(self.kkt_violation_).all():  # early prediction: the parts' checks
                violation = "a part's solve"
            else:
                violation = f"largest KKT violation {np.nanmax(self.kkt_violation_):.3g}"
            warnings.warn(
                f"SparseELMClassifier stopped at {limit} before reaching "
                f"tol={self.tol:g} ({violation}); increase max_iter, or scale "
                "the features",
                ConvergenceWarning,
                stacklevel=3,
            )

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(
        self,
        X,
        y=None,
        *,
        ray_address=None,
        client=None,
        n_blocks=None,
        cache_mb=1024.0,
        state_dir=None,
        n_parts="auto",
        early_prediction=False,
    ):
        """Fit the one-vs-one pairs on ``X``, ``y``.

        ``ray_address``: None trains the pairs in this process (side by side on
        ``n_threads`` cores); otherwise each pair is a Ray task on the Ray that is
        already initialised, or on the cluster at this address ("auto", "ray://...",
        "host:port"), with ``X`` put in the object store once.  The model is the same.

        ``X`` may also be a :class:`~elmscale.data.parquet.ParquetDataset` (labels from
        its label column, ``y`` None), or a Dask DataFrame / Array with ``y`` a Dask
        Series / Array of the same partitions, fitted as a data set whose units are the
        persisted partitions, each read on the worker that holds it
        (``elmscale.distributed.collections``; ``client`` default: Dask's default client).
        With random nodes (``hidden``) the rows stay where
        they are: primal Newton passes finished on the exact dual
        (``elmscale.distributed.newton``, ``elmscale.solvers.primal_newton``) on the Dask
        cluster of ``client``, or on this process's threads without one.  Each pass is an
        exact map-reduce over every row (the L-number gradient and L x L Gram of the rows
        near the margin per pair and unit), so the passes do not depend on how many
        workers run them; the rows near the margin at the end (a few thousand) are
        gathered and solved exactly by the single-process dual solver, and a verification
        pass checks every row.  ``tol`` is each row's KKT violation at the end, as from
        arrays; ``max_iter`` the passes over the data (-1: at most 500); ``n_blocks`` the
        blocks of work units run side by side (default: the worker threads of the
        cluster, or ``n_threads`` here; the model does not depend on it), ``cache_mb``
        each process's cache of hidden outputs.  The last pass's support rows come back
        through the tasks' results, one block at a time, into a temporary file of this
        process: the workers need no disk shared with it.  ``state_dir``: a folder every
        worker can write and this process read (a shared file system), where the workers
        write the support rows' files instead (default None: no folder).  ``n_iter_``
        counts the passes, ``duality_gap_`` is each pair's relative duality gap,
        ``n_gathered_`` the rows phase 2 gathered, ``pass_seconds_`` each pass's wall time.
        The model holds ``coef_`` and the hidden layer, not the support vectors' rows:
        ``support_`` are their row numbers, a read-only memory map of a file (unlinked)
        that is never read whole into memory (the coordinator's memory stays flat as the
        rows grow).

        With a kernel and the working-set solver (``solver``; "auto" takes it on a
        ``client`` of 4 worker threads or more) the rows stay where they are: each block of
        work units is a Dask actor on a worker (``elmscale.distributed.working_set``),
        which reads its rows there and keeps their dual variables, gradients and kernel
        columns for the whole fit; the coordinator exchanges with every block once per
        iteration.  ``n_blocks``: the
        blocks (default: the workers, or ``n_threads`` here; the model does not depend on
        it); the column caches hold ``cache_size`` MB per worker.  A worker lost mid-fit:
        its blocks are rebuilt on the others from the coordinator's dual variables, and the
        fit goes on to the same optimum within ``tol`` (``blocks_rebuilt_``).  The model
        holds the support rows (``support_vectors_``), which the coordinator has seen.

        Otherwise, with a kernel the rows are gathered here.  With a ``client`` and
        ``n_parts`` of 2 or more they are then solved by divide and conquer (Hsieh, Si and
        Dhillon, ICML 2014; ``elmscale.distributed.divide_conquer``): kernel k-means on a sample of
        ``SAMPLE_ROWS`` rows (seeded by ``random_state``) cuts the rows into ``n_parts``
        parts (every row to its nearest centre, computed on the workers); each part's pairs
        are solved on the workers, side by side, by the single-process solver; their duals
        start the global solve here, with the starting gradient computed on the workers;
        the global solve stops by the same KKT rule as a fit from arrays, so the model is
        the same optimum within ``tol``.  ``n_parts``: a number, 0 or 1 gathering and
        solving here alone, as without a client; or "auto" (the default): 1, as dividing
        was measured no faster here (see ``docs/performance.md``), and for early prediction
        the cluster's worker threads, at most one part per ``AUTO_PART_ROWS`` rows.
        ``n_iter_`` then counts the global solve's steps, ``sub_iter_`` (n_parts, n_pairs)
        the parts', and ``phase_seconds_`` the wall seconds of its phases (``PHASES``:
        partition, sub-solves, gradient, global solve); ``n_parts_`` the parts used (1
        without), ``part_sizes_`` their rows.

        ``early_prediction=True`` (Hsieh et al.'s early prediction; only where divide and
        conquer runs: a kernel, a ParquetDataset, a client and more than one part, and
        not with ``probability=True``) stops after the sub-solves: no starting gradient,
        no global solve.  The model is the parts' duals, and ``decision_function`` sends
        each row to its nearest centre (kept as ``part_centres_``, ``part_weights_``,
        ``part_centre_sq_``) and scores it with that part's support vectors only
        (``support_part_``).  This is *not* the one-process optimum: it trades some
        accuracy (a few tenths of a point in the measurements of the guide) for skipping
        the global solve.  Its status is the parts': ``n_iter_`` the largest of the
        parts' steps per pair, ``converged_`` whether every part's solve converged,
        ``objective_`` the sum of the parts' dual objectives (not the whole problem's
        objective at that point), ``kkt_violation_`` NaN (not checked on the whole
        problem); ``phase_seconds_`` is 0 for the gradient and global solve.
        """
        from elmscale.distributed.collections import as_source, is_dataset

        X, y, client = as_source(X, y, client)
        self._check_n_parts(n_parts, X, client)
        self._check_early_prediction(early_prediction, n_parts, X, client)
        self._forget_divide_conquer()
        if is_dataset(X):
            if y is not None:
                raise ValueError(
                    "y must be None when X is a ParquetDataset: the labels come from its "
                    "label column"
                )
            if self.hidden is not None:
                self._fit_calibration(X, None)  # a clear error with probability=True
                self._kernel_solver(None, client)  # names a kernel-only solver
                if self.solver == "dual":
                    raise ValueError(
                        "solver='dual' solves rows held in memory; a ParquetDataset's "
                        "random-node fit takes solver='newton' or 'auto'"
                    )
                return self._fit_newton(X, client, n_blocks, cache_mb, state_dir)
            from elmscale.distributed import dataset_ops as dataplane

            dataset = X
            parts = self._parts_wanted(n_parts, client, dataset.n_rows, early_prediction)
            if parts <= 1 and self._kernel_solver(None, client, dataset) == "working_set":
                return self._fit_working_set(dataset, None, None, client, n_blocks)
            X, y = dataplane.gather_rows(dataset, client=client, n_threads=self.n_threads)
            if early_prediction and parts <= 1:
                raise ValueError(
                    f"early_prediction=True needs more than one part; n_parts={n_parts!r} "
                    f"gives 1 for {dataset.n_rows:,} rows (give n_parts=2 or more)"
                )
            if parts > 1:
                return self._fit_divide_conquer(dataset, X, y, client, parts, early_prediction)
        elif client is not None:
            raise ValueError(
                "client is used with a ParquetDataset (elmscale.open_parquet); got arrays, "
                "which are fitted here"
            )
        if y is None:
            raise ValueError(
                "SparseELMClassifier requires y to be passed, but the target y is None "
                "(y may be None only when X is a ParquetDataset)"
            )
        if self._kernel_solver(ray_address, None, X) == "working_set":
            return self._fit_working_set(None, X, y, None, n_blocks)
        X32, y_idx, feature_map, pairs, rows_of, seed = self._prepare(X, y)
        if self._uses_newton(X32.shape[0], ray_address):
            results, status = newton_pairs(
                X32,
                y_idx,
                len(self.classes_),
                layer=feature_map,
                C=self.C,
                tol=self.tol,
                max_iter=self.max_iter,
                seed=seed,
                n_threads=self.n_threads,
            )
        else:
            status = None
            results = self._solve_pairs(X32, feature_map, rows_of, seed, [self.C], ray_address)[0]
        self._assemble(X32, y_idx, pairs, results, rows_of, feature_map)
        self.solver_ = "newton" if status is not None else "dual"
        if is_kernel(feature_map):
            self.n_parts_ = 1
        if status is not None:
            self._take_newton_status(status)
        else:
            self._warn_if_not_converged()
        self._fit_calibration(X, y, ray_address=ray_address)
        return self

    def _kernel_solver(self, ray_address, client, X=None) -> str:
        """The solver of a kernel fit (``solver``): "working_set" or "dual"; from arrays
        ``X`` here, "auto" by the one-process working set's measured crossover
        (``solvers.thunder.thunder_wins``: features, C, rows)."""
        if self.solver == "working_set":
            if self.hidden is not None:
                raise ValueError(
                    "solver='working_set' solves a kernel's dual; random nodes (hidden="
                    f"{self.hidden!r}) take solver='newton', 'dual' or 'auto'"
                )
            if ray_address is not None:
                raise ValueError(
                    "solver='working_set' runs its blocks here or on a Dask client; "
                    "ray_address fans pairs out: give solver='dual' (or 'auto') with it"
                )
            return "working_set"
        if self.solver != "auto" or self.hidden is not None or ray_address is not None:
            return "dual"
        # from arrays: the one-process working set past its measured crossover (wide dense
        # rows, thunder_wins); on a cluster, from enough workers
        if client is None:
            # (dense arrays: sparse rows and the others are solved by the dual solver)
            if not isinstance(X, np.ndarray) or X.ndim != 2:
                return "dual"
            if bits_pay(X):  # 0/1 rows: the dual's packed columns are cheaper than GEMMs
                return "dual"
            wins = thunder_wins(self._kernel_obj(), X.shape[1], float(self.C), X.shape[0])
            return "working_set" if wins else "dual"
        if getattr(X, "sparse_width", None) is not None:  # a data set of sparse rows
            return "dual"
        return "working_set" if working_set_wins(sum(client.nthreads().values())) else "dual"

    def _fit_working_set(self, dataset, X, y, client, n_blocks):
        """A kernel fit by the working-set solver: the blocks of a ParquetDataset's rows on
        the workers of ``client`` (or this process's threads), or of ``X`` here."""
        from elmscale.distributed import dataset_ops as dataplane
        from elmscale.distributed.working_set import (
            array_units,
            exchanges_array,
            fit_working_set,
            parquet_units,
        )
        from elmscale.solvers.working_set import check_q

        q = check_q(self.working_set_size)
        # arrays with no client and no n_blocks: one block of rows in this process
        in_process = dataset is None and client is None and n_blocks is None
        if dataset is not None:
            if getattr(dataset, "sparse_width", None) is not None:
                raise ValueError(
                    "solver='working_set' reads dense rows; got a data set of sparse rows: "
                    "give solver='dual' or 'auto', which solve sparse rows as they are"
                )
            self._dataset_classes(dataset, client)
            units = parquet_units(dataset)
            classes = self.classes_
        else:
            X, y_idx = self._class_indices(X, y)
            if is_sparse(X):
                raise ValueError(
                    "solver='working_set' reads dense rows; got a sparse X: give "
                    "solver='dual' or 'auto', which solve sparse rows as they are"
                )
            X32 = np.ascontiguousarray(X, dtype=np.float32)
            if not in_process:  # (solve_thunder takes the rows themselves)
                units = array_units(X32, y_idx, n_blocks or resolve_n_threads(self.n_threads))
            classes = np.arange(self.classes_.size)
        kernel = self._kernel_obj()
        exchanges: list = []  # (distributed.working_set.exchange_breakdown)
        if in_process:  # one block of rows, its columns in blocks where they pay
            result = solve_thunder(
                X32,
                y_idx,
                classes.size,
                kernel,
                C=float(self.C),
                tol=float(self.tol),
                q=q,
                cache_mb=float(self.cache_size),
                max_iter=int(self.max_iter),
                n_threads=self.n_threads,
            )
        else:
            result = fit_working_set(
                units,
                classes,
                kernel,
                C=float(self.C),
                tol=float(self.tol),
                q=q,
                client=client,
                n_blocks=n_blocks,
                cache_mb=float(self.cache_size),
                max_iter=int(self.max_iter),
                n_threads=self.n_threads,
                timings=exchanges,
            )
        self.exchange_timings_ = exchanges_array(exchanges)  # (EXCHANGE_COLUMNS)
        seen = result.seen
        pairs = one_vs_one_pairs(self.classes_.size)
        sv = np.flatnonzero((seen.alpha > 0.0).any(axis=1))
        sv = sv[np.argsort(seen.ids[sv], kind="stable")]
        self.support_ = seen.ids[sv]
        self.support_vectors_ = np.ascontiguousarray(seen.X[sv], dtype=np.float32)
        self.dual_coef_ = np.zeros((len(pairs), sv.size))
        for p, (a, _) in enumerate(pairs):
            t = np.where(seen.cls[sv] == a, 1.0, -1.0)
            self.dual_coef_[p] = seen.alpha[sv, p] * t
        self.n_support_ = np.bincount(seen.cls[sv], minlength=self.classes_.size)
        self.pairs_ = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        self.n_iter_ = result.n_iter
        self.objective_ = result.objective
        self.kkt_violation_ = result.kkt
        self.converged_ = result.converged
        self.exact_checks_ = int(result.exact_checks)
        self.blocks_rebuilt_ = int(result.rebuilt)
        self.iteration_seconds_ = np.asarray(result.seconds)
        self.solver_ = "working_set"
        self.n_parts_ = 1
        self._warn_if_not_converged()
        if dataset is not None and self.probability:
            # the calibration's out-of-fold fits are made from arrays, as a gathered fit's
            X, y = dataplane.gather_rows(dataset, client=client, n_threads=self.n_threads)
        self._fit_calibration(X, y)
        return self

    def _uses_newton(self, n_rows: int, ray_address) -> bool:
        """Whether a fit from arrays takes the Newton solver (``solver``)."""
        if self.solver == "newton":
            if self.hidden is None:
                raise ValueError(
                    "solver='newton' solves random hidden nodes; set hidden (e.g. "
                    "hidden='sigmoid'), or solver='auto' for a kernel"
                )
            if ray_address is not None:
                raise ValueError(
                    "solver='newton' solves every pair here in one pass over the rows; "
                    "ray_address fans pairs out: give solver='dual' (or 'auto') with it"
                )
            return True
        return (
            self.solver == "auto"
            and self.hidden is not None
            and ray_address is None
            and newton_wins(n_rows, len(self.classes_))
        )

    def _check_n_parts(self, n_parts, X, client) -> None:
        """``n_parts`` is "auto" or an integer >= 0, and more than one part only where
        divide and conquer runs: a kernel, a ParquetDataset and a client."""
        if not (
            (isinstance(n_parts, str) and n_parts == "auto")
            or (
                isinstance(n_parts, numbers.Integral)
                and not isinstance(n_parts, bool)
                and int(n_parts) >= 0
            )
        ):
            raise ValueError(f"n_parts must be 'auto' or an integer >= 0; got {n_parts!r}")
        if not isinstance(n_parts, str) and int(n_parts) > 1:
            self._check_divide_conquer_runs(f"n_parts={n_parts}", X, client, "or n_parts=1")

    def _check_divide_conquer_runs(self, setting: str, X, client, instead: str) -> None:
        """``setting`` asks for divide and conquer: it needs a kernel, a ParquetDataset and
        a client (``instead``: what else the message offers)."""
        from elmscale.distributed.collections import is_dataset

        if self.hidden is not None:
            raise ValueError(
                f"{setting}: divide and conquer solves a kernel; random nodes (hidden) on "
                "a ParquetDataset take n_blocks"
            )
        if not is_dataset(X) or client is None:
            raise ValueError(
                f"{setting}: divide and conquer runs on a Dask cluster: give a ParquetDataset "
                f"(elmscale.open_parquet) and client, {instead}"
            )

    def _check_early_prediction(self, early_prediction, n_parts, X, client) -> None:
        """``early_prediction`` is a bool, and True only where divide and conquer runs (a
        kernel, a ParquetDataset, a client, not one part) and without ``probability``."""
        if not isinstance(early_prediction, bool):
            raise ValueError(f"early_prediction must be True or False; got {early_prediction!r}")
        if not early_prediction:
            return
        self._check_divide_conquer_runs(
            "early_prediction=True", X, client, "with n_parts of 2 or more"
        )
        if not isinstance(n_parts, str) and int(n_parts) <= 1:
            raise ValueError(
                f"early_prediction=True needs more than one part; got n_parts={n_parts}"
            )
        if self.probability:
            raise ValueError(
                "early_prediction=True with probability=True: the calibration fits models "
                "from arrays, not the parts' models (fit with probability=False)"
            )

    def _parts_wanted(self, n_parts, client, n_rows: int, early: bool) -> int:
        """The parts of a kernel fit on a ParquetDataset (1: gather and solve here).
        "auto" divides only for early prediction: the exact divide and conquer was not
        faster than gathering and solving here (2 workers: 0.62x at 100,000 rows,
        0.84-1.04x on COD-RNA, 1.03-1.10x at 300,000; docs/performance.md)."""
        if client is None:
            return 1
        if n_parts == "auto":
            if not early:
                return 1
            threads = sum(client.nthreads().values())
            return max(1, min(threads, n_rows // AUTO_PART_ROWS))
        return int(n_parts)

    def _forget_divide_conquer(self) -> None:
        # refitting forgets: a plain fit leaves no divide-and-conquer status behind
        divided = ("n_parts_", "part_sizes_", "sub_iter_", "phase_seconds_")
        newton = ("duality_gap_", "n_gathered_", "pass_seconds_", "pass_timings_")
        working_set = (
            "exact_checks_",
            "blocks_rebuilt_",
            "iteration_seconds_",
            "exchange_timings_",
        )
        for name in (*divided, *EARLY_PREDICTION_ATTRS, *newton, *working_set):
            self.__dict__.pop(name, None)

    def _fit_divide_conquer(self, dataset, X, y, client, n_parts: int, early: bool = False):
        from elmscale.distributed.divide_conquer import fit_divide_conquer

        X32, y_idx, feature_map, pairs, rows_of, seed = self._prepare(X, y)
        result = fit_divide_conquer(
            dataset,
            X32,
            rows_of,
            kernel=feature_map,
            solve=fit_binary,
            options={"C": float(self.C), **self._solver_options()},
            n_parts=n_parts,
            client=client,
            seed=seed,
            n_threads=self.n_threads,
            early=early,
        )
        solutions = result.solutions
        if early:
            solutions = [
                BinarySolution(
                    alpha=alpha,
                    beta=None,
                    n_iter=int(result.sub_iter[:, p].max()),
                    converged=bool(result.sub_converged[:, p].all()),
                    objective=float(result.sub_objective[:, p].sum()),
                    kkt_violation=float("nan"),
                    gradient=None,
                )
                for p, alpha in enumerate(result.sub_alphas)
            ]
        self._assemble(X32, y_idx, pairs, solutions, rows_of, feature_map)
        if early:
            centres = result.centres
            self.part_centres_ = np.ascontiguousarray(centres.sample, dtype=np.float32)
            self.part_weights_ = np.asarray(centres.weights, dtype=np.float64)
            self.part_centre_sq_ = np.asarray(centres.centre_sq, dtype=np.float64)
            self.support_part_ = result.parts[self.support_].astype(np.int64)
        self.n_parts_ = int(result.part_sizes.size)
        self.solver_ = "dual"
        self.part_sizes_ = result.part_sizes
        self.sub_iter_ = result.sub_iter
        self.phase_seconds_ = result.seconds
        self._warn_if_not_converged()
        self._fit_calibration(X, y)
        return self

    def fit_path(self, X, y, Cs, *, ray_address=None):
        """Fit one model per value of ``Cs``; returns the fitted copies in the order of ``Cs``.

        The values are solved in increasing order, each binary problem
        warm-started from its solution at the previous C (feasible, since the
        box only grows), which costs far less than separate fits; the random
        layer, when there is one, is drawn once.  Each copy is what ``fit``
        with that C gives, up to the solver tolerance.  ``ray_address`` as in ``fit``.
        """
        from elmscale.distributed.collections import is_collection, is_dataset

        Cs = [float(c) for c in Cs]
        if not Cs or min(Cs) <= 0:
            raise ValueError(f"Cs must be a non-empty list of positive values; got {Cs!r}")
        if is_dataset(X) or is_collection(X) or is_collection(y):
            # (not pulled whole into this process behind the caller's back)
            raise ValueError(
                "SparseELMClassifier.fit_path warm-starts in-memory solvers: it takes arrays; "
                "for a ParquetDataset or Dask collections, fit once per C (fit(X, y) with "
                "set_params(C=c)), or read the rows first"
            )
        self._validate_params()
        X32, y_idx, feature_map, pairs, rows_of, seed = self._prepare(X, y)
        order = np.argsort(Cs, kind="stable")
        solved = self._solve_pairs(
            X32, feature_map, rows_of, seed, [Cs[i] for i in order], ray_address
        )
        fitted = [None] * len(Cs)
        for c, i in enumerate(order):
            est = clone(self).set_params(C=Cs[i])
            est.classes_, est.n_features_in_ = self.classes_, self.n_features_in_
            if hasattr(self, "feature_names_in_"):
                est.feature_names_in_ = self.feature_names_in_
            est._assemble(X32, y_idx, pairs, solved[c], rows_of, feature_map)
            est._warn_if_not_converged()
            fitted[i] = est
        # probability=True: each copy calibrated from one path per fold of the split
        self._fit_calibration(X, y, ray_address=ray_address, path=(fitted, Cs))
        return fitted

    def _fit_newton(self, dataset, client, n_blocks, cache_mb, state_dir):
        from elmscale.distributed.newton import fit_newton, parquet_units

        if not isinstance(cache_mb, numbers.Real) or cache_mb < 0:
            raise ValueError(f"cache_mb must be a number >= 0; got {cache_mb!r}")
        self._dataset_classes(dataset, client)
        description, seed = self._feature_map_description(dataset.n_features)
        layer = mapping_from_dict(description)
        result = fit_newton(
            parquet_units(dataset),
            layer.to_dict(),
            self.classes_,
            C=float(self.C),
            tol=float(self.tol),
            client=client,
            n_blocks=n_blocks,
            cache_mb=float(cache_mb),
            state_dir=state_dir,
            max_passes=int(self.max_iter),
            seed=seed,
            n_threads=self.n_threads,
        )
        pairs = one_vs_one_pairs(self.classes_.size)
        self.hidden_layer_ = layer
        self.pairs_ = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        self.support_ = result.support
        self.support_vectors_ = np.empty((0, dataset.n_features), dtype=np.float32)
        self.dual_coef_ = np.empty((len(pairs), 0))
        self.coef_ = result.beta.T.copy()
        self.n_support_ = result.n_support
        self.n_iter_ = result.passes
        self.objective_ = result.dual
        self.kkt_violation_ = result.kkt
        self.converged_ = result.converged
        self.solver_ = "newton"
        self._take_newton_status(result)
        return self

    def _take_newton_status(self, result) -> None:
        """The Newton solver's own status (``distributed.newton.NewtonResult``), from arrays
        or a ParquetDataset, and its warning when a pair stopped before ``tol``."""
        self.duality_gap_ = result.gap
        self.n_gathered_ = result.gathered
        self.pass_seconds_ = np.asarray(result.seconds)
        from elmscale.distributed.newton import timings_array

        self.pass_timings_ = timings_array(result.timings)  # (columns: newton.PASS_COLUMNS)
        if not result.converged.all():
            checked = result.kkt[np.isfinite(result.kkt)]
            worst = f"largest KKT violation {checked.max():.3g}" if checked.size else "unchecked"
            warnings.warn(
                f"SparseELMClassifier's Newton solver stopped after {result.passes.max()} "
                f"passes before reaching tol={self.tol:g} ({worst}); increase max_iter "
                "(the passes), or scale the features",
                ConvergenceWarning,
                stacklevel=4,
            )

    def _assemble(self, X32, y_idx, pairs, results, rows_of, feature_map):
        support_mask = np.zeros(X32.shape[0], bool)
        for (rows, _), r in zip(rows_of, results):
            support_mask[rows[r.alpha > 0]] = True
        self.support_ = np.flatnonzero(support_mask)
        self.support_vectors_ = X32[self.support_]
        position = np.full(X32.shape[0], -1)
        position[self.support_] = np.arange(self.support_.size)
        self.dual_coef_ = np.zeros((len(pairs), self.support_.size))
        for p, ((rows, t), r) in enumerate(zip(rows_of, results)):
            sv = r.alpha > 0
            self.dual_coef_[p, position[rows[sv]]] = r.alpha[sv] * t[sv]
        self.n_support_ = np.bincount(y_idx[self.support_], minlength=len(self.classes_))
        self.pairs_ = np.array(pairs, dtype=np.int64).reshape(-1, 2)
        self.n_iter_ = np.array([r.n_iter for r in results])
        self.objective_ = np.array([r.objective for r in results])
        self.kkt_violation_ = np.array([r.kkt_violation for r in results])
        self.converged_ = np.array([r.converged for r in results])
        if not is_kernel(feature_map):
            self.hidden_layer_ = feature_map
            self.coef_ = np.column_stack([r.beta for r in results])

    def _pair_scores(self, X) -> np.ndarray:
        check_is_fitted(self)
        X = validate_data(
            self, X, dtype=[np.float64, np.float32], accept_sparse=SPARSE_FORMATS, reset=False
        )
        out = np.empty((X.shape[0], len(self.pairs_)))
        with thread_budget(self.n_threads):
            if self.hidden is not None:
                for rows in iter_row_blocks(X.shape[0], DEFAULT_BLOCK_ROWS):
                    out[rows] = self.hidden_layer_.scores(X[rows], self.coef_)
            elif self.support_.size:
                out[:] = self._kernel_pair_scores(X)
            else:
                out[:] = 0.0
        return out

    def _kernel_pair_scores(self, X) -> np.ndarray:
        """``(n, n_pairs)`` of the kernel expansion over the support vectors; for an
        early-prediction fit, each row's over its nearest centre's part's only."""
        kernel = self._kernel_obj()
        if "part_centres_" not in vars(self):
            return _expansion(kernel, X, self.support_vectors_, self.dual_coef_, self.precision)
        part = nearest_centre(
            kernel.block_matvec(X, self.part_centres_, self.part_weights_), self.part_centre_sq_
        )
        out = np.zeros((X.shape[0], len(self.pairs_)))
        for q in np.unique(part):
            rows, sv = part == q, self.support_part_ == q
            if sv.any():
                out[rows] = _expansion(
                    kernel,
                    X[rows],
                    self.support_vectors_[sv],
                    self.dual_coef_[:, sv],
                    self.precision,
                )
        return out

    def _calibration_scores(self, X) -> np.ndarray:
        """The scores the sigmoids read, ``(n, n_problems)`` (:func:`pair_problem_scores`)."""
        return pair_problem_scores(self._pair_scores(X), len(self.classes_))

    @lazy_on_collections
    def decision_function(self, X) -> np.ndarray:
        """(n,) for two classes (> 0 means ``classes_[1]``); else (n, n_classes).

        Multiclass values are scikit-learn's one-vs-rest view of the one-vs-one
        votes (SVC's ``decision_function_shape="ovr"``): votes plus a confidence
        below 1/3, so that ``argmax`` is the voted class.
        """
        return ovo_decision(self._pair_scores(X), len(self.classes_))

    @lazy_on_collections
    def predict(self, X) -> np.ndarray:
        """The class with the most one-vs-one votes (ties: the larger summed confidence)."""
        return self._labels_from_decision(self.decision_function(X))  # checks fitted first

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True  # CSR / CSC rows, never densified
        return tags

    def _labels_from_decision(self, decision) -> np.ndarray:
        """``predict``'s classes from ``decision_function``'s values: a caller that wants
        both (``elmscale score --decision``) computes the kernel expansion once."""
        return self.classes_[decision_to_class_index(decision)]


def _expansion(kernel: Kernel, X, support_vectors, dual_coef, precision) -> np.ndarray:
    """``(n, n_pairs)``: the pairs' kernel expansions ``K(X, SV) @ dual_coef.T``, the kernel
    values in ``precision``."""
    return kernel.block_matvec(X, support_vectors, dual_coef.T, precision=precision)
