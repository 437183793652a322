"""The sparse ELM's binary problems and their C paths, as pure functions.

``fit_binary`` solves one one-vs-one pair, ``pair_path`` one pair along increasing C
(warm-started), and ``pair_validation_scores`` one grid-search piece (a fold, a kernel
or layer setting, a pair).  The feature map says which problem it is: a
:class:`~elmscale.features.kernels.Kernel` is solved in the dual with kernel columns, a
random layer (:class:`~elmscale.features.layers.HiddenLayer`) by dual coordinate descent
on the primal vector.  Each solve returns a :class:`BinarySolution`.  They import numpy,
numba and elmscale's numerics only, not scikit-learn: a Ray worker that runs them starts in
a fraction of the time (measured: ``import elmscale.sparse_elm`` 2.0 s, most of it
scikit-learn; this module 0.4 s), and a grid's first pieces wait on that.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from elmscale.core.sparse_kernels import is_sparse
from elmscale.features.base import DEFAULT_BLOCK_ROWS, feature_map_from_dict, iter_row_blocks
from elmscale.features.kernels import Kernel
from elmscale.features.layers import HiddenLayer
from elmscale.linalg.targets import one_vs_one_pairs
from elmscale.solvers.dense_dual import solve_dense_dual, solve_dense_duals
from elmscale.solvers.sparse_dual import (
    KernelSolverState,
    kkt_violation,
    solve_explicit_dual,
    solve_kernel_dual,
)

#: What a binary problem is solved with: a kernel (dual) or a random layer (primal vector);
#: not features.base.FeatureMap, since a Kernel alone is a kernel function, not a map.
PairMap = Kernel | HiddenLayer


class BinarySolution(NamedTuple):
    """One binary problem's solution at one C.

    ``alpha`` the dual variables; ``beta`` the primal vector (random nodes; None for
    kernels); ``n_iter`` the solver's steps (kernels) or passes (random nodes);
    ``converged`` whether the exact KKT check passed; ``objective`` and
    ``kkt_violation`` in float64; ``gradient`` the exact gradient (a warm start's; None
    once a path has used it).
    """

    alpha: np.ndarray
    beta: np.ndarray | None
    n_iter: int
    converged: bool
    objective: float
    kkt_violation: float
    gradient: np.ndarray | None


def is_kernel(feature_map: PairMap) -> bool:
    """Whether ``feature_map`` is solved in the dual with kernel columns."""
    if isinstance(feature_map, Kernel):
        return True
    if isinstance(feature_map, HiddenLayer):
        return False
    raise TypeError(
        f"the sparse ELM solves a Kernel or a HiddenLayer; got {type(feature_map).__name__}"
    )


def fit_binary(
    X,
    t,
    *,
    feature_map: PairMap,
    C,
    tol,
    cache_size,
    shrinking,
    max_iter,
    seed=0,
    alpha0=None,
    H=None,
    gradient0=None,
    gradient0_alpha=None,
    g_bar0=None,
    gram=None,
    gram_rows=None,
    state=None,
    check_precision="double",
) -> BinarySolution:
    """Solve one binary sparse-ELM problem; ``t`` in {-1, +1}.

    ``alpha0`` warm-starts the solver (``gradient0``: the exact gradient of
    ``gradient0_alpha``, default ``alpha0``, returned as ``gradient`` by the previous
    call; ``g_bar0``, its G_bar, when known: see ``solve_kernel_dual``); ``H``, the
    layer's output on ``X`` when the caller already has it; ``gram``,
    ``K(X, X)`` in float64 when the caller solves the same rows many times (or a small
    problem once: then, without ``state``, the dense solver ``solve_dense_dual`` takes it,
    and ``gram_rows`` may name this problem's rows of a larger ``gram``), and
    ``state``, the kernel solver's state kept from the last call on them (see
    ``solve_kernel_dual``); ``check_precision``, its final check's (``solve_kernel_dual``:
    "single" only where no other solve starts from the gradient returned).
    """
    if is_kernel(feature_map) and gram is not None and state is None:
        # a small problem with K kept: the whole solve in one compiled call (``dense_dual``)
        alpha, n_iter, converged, g = solve_dense_dual(
            gram, t, C=C, rows=gram_rows, tol=tol, max_iter=max_iter, alpha0=alpha0
        )
        f = t * (g + 1.0)
        beta = None
    elif is_kernel(feature_map):
        alpha, n_iter, converged, g = solve_kernel_dual(
            X,
            t,
            kernel=feature_map,
            C=C,
            tol=tol,
            cache_size=cache_size,
            shrinking=shrinking,
            max_iter=max_iter,
            alpha0=alpha0,
            gradient0=gradient0,
            gradient0_alpha=gradient0_alpha,
            g_bar0=g_bar0,
            gram=gram,
            state=state,
            check_precision=check_precision,
        )
        f = t * (g + 1.0)  # the solver's gradient g = t f - 1 (see check_precision)
        beta = None
    else:
        if H is None:
            H = feature_map.transform(X)
        alpha, beta, n_iter, converged = solve_explicit_dual(
            H,
            t,
            C=C,
            tol=tol,
            shrinking=shrinking,
            max_iter=max_iter,
            alpha0=alpha0,
            random_state=seed,
        )
        # in blocks: a float64 copy of the whole of H is 1.6 GB at a million rows
        f = np.empty(H.shape[0])
        for rows in iter_row_blocks(H.shape[0], DEFAULT_BLOCK_ROWS):
            f[rows] = H[rows].astype(np.float64) @ beta
        g = t * f - 1.0
    return _solution(alpha, beta, n_iter, converged, t, f, g, C)


def _solution(alpha, beta, n_iter, converged, t, f, g, C) -> BinarySolution:
    """The solution with its objective and KKT violation (``f`` the scores, ``g`` the
    exact gradient ``t f - 1``)."""
    objective = 0.5 * float(np.dot(alpha * t, f)) - float(alpha.sum())
    return BinarySolution(
        alpha, beta, n_iter, bool(converged), objective, kkt_violation(alpha, g, C), g
    )


def fit_dense_pairs(K, problems, *, C, tol, max_iter) -> list[BinarySolution]:
    """``fit_binary`` of each ``(rows, t)`` of ``problems`` (one C, from zero) on ``K``, the
    kernel matrix of every row: a small fit's one-vs-one pairs, solved in one compiled
    call (``solve_dense_duals``)."""
    solved = solve_dense_duals(K, problems, C=C, tol=tol, max_iter=max_iter)
    return [
        _solution(alpha, None, n_iter, converged, t, t * (g + 1.0), g, C)
        for (_, t), (alpha, n_iter, converged, g) in zip(problems, solved)
    ]


# The largest K (MB, float64) a C path keeps whole.  Larger ones cost more than they
# save, and pieces side by side contend on them: a 6,000-row grid (pairs of 4,500 rows,
# K 162 MB) took 14-30 s on two threads with K kept, 3.5 s without; at 2,400 rows (46 MB)
# the COD-RNA grid's paths ran 1.2x faster with it.
GRAM_BUDGET_MB = 64


# The column cache (MB) beside a kept K: its columns are copies of K's, quick to make
# again, and a small cache leaves the last-level cache to K when pieces run side by
# side (the COD-RNA grid on two threads: 8.1-10.3 s with 8 MB, 9.1-11.9 s with 200).
GRAM_COLUMN_CACHE_MB = 8


# Rows up to which a binary problem keeps K whole even for a single C: computing it is then
# cheaper than a fit's fixed costs around a column cache (its allocation, exact products
# through the parallel kernel, a pass of Python per phase), and every exact product is a
# read of it.  K for 1,000 rows x 57 features: 6 ms on two threads (LIBSVM's whole fit on
# them 9.3 ms); 2,000 x 8: 13 ms, past what it saves.
DENSE_ROWS = 1024


def fits_gram_budget(n_rows: int, n_cols: int, cache_size: float) -> bool:
    """Whether an ``n_rows x n_cols`` float64 kernel block may be kept whole: within
    ``GRAM_BUDGET_MB`` and the estimator's ``cache_size`` (MB)."""
    return 8 * n_rows * n_cols <= min(cache_size, GRAM_BUDGET_MB) * 2**20


def pair_path(
    pair,
    *,
    X,
    feature_map: PairMap,
    Cs,
    seed,
    tol,
    cache_size,
    shrinking,
    max_iter,
    K=None,
    check_precision="double",
) -> list[BinarySolution]:
    """One binary problem along ``Cs`` (increasing), each C warm-started from the previous.

    ``pair`` is ``(rows, t)``: the rows of ``X`` in the problem and their +1 / -1 targets.
    ``K``: the kernel matrix of every row of ``X`` when the caller keeps it (small
    one-vs-one problems: one kernel evaluation for all pairs).  ``check_precision``: the
    last C's final check (``fit_binary``; the other Cs' gradients start the next C, so
    they are checked exactly).  A pure function of its arguments, so it runs in a thread
    or in a Ray task alike.
    """
    rows, t = pair
    # sparse rows of a binary problem (every row, in order) are read in place: a CSR
    # fancy index copies them all, which the high-dimensional fits cannot spare
    every_row = is_sparse(X) and rows.size == X.shape[0] and np.all(rows == np.arange(rows.size))
    Xp = X if every_row else X[rows]
    kernel = is_kernel(feature_map)
    H = None if kernel else feature_map.transform(Xp)
    gram, gram_rows = None, None
    small_once = kernel and len(Cs) == 1 and rows.size <= DENSE_ROWS
    if K is not None and kernel:
        if small_once:  # the dense solver reads the pair's rows of K in place
            gram, gram_rows = K, rows
        else:
            gram = K[np.ix_(rows, rows)]
    elif (
        kernel
        and (len(Cs) > 1 or small_once)
        and fits_gram_budget(rows.size, rows.size, cache_size)
    ):
        # small enough to keep K whole (float64): every C of the path (or a small
        # problem's one C) reads its columns and exact products instead of computing them
        gram = feature_map.block(Xp, Xp)
    # one C on a small problem with K kept: the dense solver (no column cache); a path:
    # the solver's column cache, kept along it (Q's columns do not depend on C)
    dense = small_once and gram is not None
    column_cache = cache_size if gram is None else min(cache_size, GRAM_COLUMN_CACHE_MB)
    state = (
        KernelSolverState(Xp, t, feature_map, column_cache, tol) if kernel and not dense else None
    )
    alpha, gradient, path, previous_C = None, None, [], None
    if gram is not None and not dense:
        # Q 1: at a path's first (smallest) C most variables end at the bound, so every
        # variable starts there when that beats the zero start, 1/2 C^2 1'Q1 - n C < 0;
        # the start is then one box QP's, not a thousand steps' (COD-RNA, 2,400 rows,
        # C = 0.01: 5-12 ms against 18-23)
        q1 = t * (gram @ t)
        state.known_bar = (np.ones(t.size), q1)  # (u, Q u), exact, for the first G_bar
        first = float(Cs[0])
        if 0.5 * first**2 * q1.sum() < t.size * first:
            alpha, gradient, previous_C = np.full(t.size, first), first * q1 - 1.0, first
    for C in Cs:
        start = alpha
        if kernel and alpha is not None and C > previous_C and np.any(alpha >= previous_C):
            # predictor: the variables at the old bound start at the new one (on a face
            # that does not change they all stay there), which saves the steps that
            # would move them one by one.  (Not for random nodes: there it cost dual
            # coordinate descent more passes.)
            start = np.where(alpha >= previous_C, float(C), alpha)
        previous_C = float(C)
        r = fit_binary(
            Xp,
            t,
            feature_map=feature_map,
            C=float(C),
            tol=tol,
            cache_size=cache_size,
            shrinking=shrinking,
            max_iter=max_iter,
            seed=seed,
            alpha0=start,
            H=H,
            gradient0=gradient,
            gradient0_alpha=alpha,
            gram=gram,
            gram_rows=gram_rows,
            state=state,
            # the last C's gradient starts no other solve: its check may be float32's
            check_precision=check_precision if C == Cs[-1] else "double",
        )
        gradient = r.gradient  # only the next C needs it
        path.append(r._replace(gradient=None))
        alpha = r.alpha
    return path


def pair_problem(rows, y_idx, a, b):
    """``(rows, t)`` of the one-vs-one pair (a, b) among ``rows``: those of class a or b,
    with t = +1 for a and -1 for b."""
    rows = rows[(y_idx[rows] == a) | (y_idx[rows] == b)]
    return rows, np.where(y_idx[rows] == a, 1.0, -1.0)


def mapping_from_dict(d: dict) -> PairMap:
    """The kernel or random layer described by its ``to_dict()``; raises for bad values,
    naming them (a grid piece builds its own, so that a bad setting fails in the piece
    that names it)."""
    if "sigma" in d:
        return Kernel.from_dict(d)
    return feature_map_from_dict(d)


def pair_validation_scores(piece, *, X, y_idx, splits, settings, Cs):
    """Pair scores of one grid piece ``(fold, setting index, (a, b))`` along ``Cs``
    (increasing), warm-started, on the fold's validation rows: ``(n_C, n_validation_rows)``.

    ``settings[s]`` is ``(feature map description, seed, solver options)``, the
    description a ``to_dict()`` that :func:`mapping_from_dict` rebuilds.
    """
    fold, s, (a, b) = piece
    description, seed, options = settings[s]
    feature_map = mapping_from_dict(description)
    kernel = is_kernel(feature_map)
    train, test = splits[fold]
    rows, t = pair_problem(train, y_idx, a, b)
    path = pair_path((rows, t), X=X, feature_map=feature_map, Cs=Cs, seed=seed, **options)
    if kernel and fits_gram_budget(test.size, rows.size, options["cache_size"]):
        # one kernel block and one product for every C of the path (gathering each C's
        # support-vector columns cost more than the zeros it skips)
        K_test = feature_map.block(X[test], X[rows])
        coef = np.stack([result.alpha * t for result in path], axis=1)
        return (K_test @ coef).T
    scores = np.empty((len(Cs), test.size))
    for c, result in enumerate(path):
        if not kernel:
            scores[c] = feature_map.scores(X[test], result.beta)
            continue
        sv = result.alpha > 0
        scores[c] = feature_map.block_matvec(X[test], X[rows[sv]], result.alpha[sv] * t[sv])
    return scores


# Rows per unit of an in-memory Newton fit (its units' terms are summed in unit order)
NEWTON_UNIT_ROWS = 65_536
# SparseELMClassifier(solver="auto") takes the Newton solver from this many rows per
# one-vs-one pair.  Measured alone, 200 nodes (benchmarks/newton_crossover.py,
# docs/performance.md), Newton / dual time: two classes 1.13x at 2,000 rows, 0.09-0.39x
# from 100k to 10M; 3 classes 0.56x at 10k, 0.50x at 100k; 6 classes 2.44x at 5k (333 rows a
# pair), 0.84x at 30k (2,000); 10 classes 2.53x at 10k (222), 0.79x at 30k (667), 0.88x
# at 100k, 0.99-1.02x at 300k and 1M.  Below a few hundred rows a pair the passes' fixed
# costs per pair lose to the dual solver's short passes.
NEWTON_MIN_ROWS_PER_PAIR = 2_000


#: A kernel fit with a Dask client takes the working-set solver (``solver="auto"``) when the
#: cluster has at least this many worker threads; with fewer it gathers the rows and solves
#: them here.  On 2 workers the one-process dual solver was faster (``benchmarks/
#: working_set.py``: 0.60x at 300,000 rows); the measured per-iteration costs project the
#: working set past it from about 4 (docs/performance.md).
WORKING_SET_MIN_WORKER_THREADS = 4


def working_set_wins(n_worker_threads: int) -> bool:
    """Whether a kernel fit on a cluster of ``n_worker_threads`` worker threads takes the
    working-set solver (``WORKING_SET_MIN_WORKER_THREADS``)."""
    return n_worker_threads >= WORKING_SET_MIN_WORKER_THREADS


def newton_wins(n_rows: int, n_classes: int) -> bool:
    """Whether ``solver="auto"`` takes the Newton solver for this many rows and classes."""
    n_pairs = max(1, n_classes * (n_classes - 1) // 2)
    return n_rows >= NEWTON_MIN_ROWS_PER_PAIR * n_pairs


def newton_pairs(
    X, y_idx, n_classes, *, layer: HiddenLayer, C, tol, max_iter, seed, n_threads
) -> tuple[list[BinarySolution], object]:
    """Every one-vs-one pair of a random-node problem held in memory, solved together by the
    primal Newton solver (``distributed.newton.fit_newton`` on row ranges, on this
    process's threads): one pass over the rows serves every pair.  The solutions are
    ``fit_binary``'s, over each pair's rows in order (``pair_problem``); returned with the
    solver's whole result (``NewtonResult``: gaps, gathered rows, passes' seconds)."""
    from elmscale.distributed.newton import array_units, fit_newton

    n_units = max(1, -(-X.shape[0] // NEWTON_UNIT_ROWS))
    result = fit_newton(
        array_units(X, y_idx, n_units),
        layer.to_dict(),
        list(range(n_classes)),
        C=float(C),
        tol=float(tol),
        max_passes=int(max_iter),
        seed=int(seed),
        n_threads=n_threads,
        cache_mb=float("inf"),
        keep_duals=True,
    )
    every_row = np.arange(y_idx.size)
    out = []
    for p, (a, b) in enumerate(one_vs_one_pairs(n_classes)):
        rows, _ = pair_problem(every_row, y_idx, a, b)
        out.append(
            BinarySolution(
                alpha=result.alpha[p, rows],
                beta=result.beta[p],
                n_iter=int(result.passes[p]),
                converged=bool(result.converged[p]),
                objective=float(result.dual[p]),
                kkt_violation=float(result.kkt[p]),
                gradient=None,
            )
        )
    return out, result
