"""The kernel sparse ELM on a Dask cluster by divide and conquer (Hsieh, Si and Dhillon, "A
Divide-and-Conquer Solver for Kernel SVMs", ICML 2014), one level.

1. Partition: kernel k-means on a seeded sample of the rows, here
   (``solvers.kernel_kmeans``); every row goes to its nearest centre in the kernel's
   space, ``K(x, S) @ W`` computed blockwise on the workers where the rows live
   (``dataset_ops.kernel_matvec``) and the argmin taken here.
2. Sub-solves: each part's one-vs-one pairs, one task each on the workers, every one the
   single-process solver on the part's rows (``solve``, the model's ``fit_binary``),
   side by side.  A task reads each part's rows from the Parquet units; they are not
   scattered from here.
3. Start: the parts' duals concatenated are the global problem's ``alpha0``; its exact
   gradient ``Q alpha0 - 1`` and ``G_bar`` (Q times the variables at C) are one
   ``n x |SV|`` kernel product, computed blockwise on the workers against the support
   rows (``dataset_ops.kernel_matvec``).
4. The global solve: each pair by the same solver here (its shrinking and its LRU column
   cache), from ``alpha0`` with that gradient, to the same KKT rule as a solve from zero:
   the same optimum within ``tol``.

With ``early=True`` the fit stops after step 2 (Hsieh et al.'s early prediction): no start,
no global solve; the result carries the parts' duals and the centres, and the model
predicts each row with the part of its nearest centre.

The client is the caller's; nothing here starts a cluster.  Tasks are pure functions of
their arguments, submitted with ``retries``, so a lost worker's task runs again to the
same result, and so do the tasks that read the rows it needs when their results were
held by that worker (Dask can recompute a task's result, never scattered data: a part's
rows scattered once were lost with their worker).  The arrays broadcast to every worker
(the centres, the start's coefficients) survive the loss of some of them.  No
scikit-learn here: a fresh worker starts fast.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from elmscale.core.threads import thread_budget
from elmscale.data.parquet import ParquetDataset
from elmscale.data.work_units import partition_keys
from elmscale.distributed import dataset_ops
from elmscale.distributed.executors import DaskExecutor, LocalExecutor
from elmscale.distributed.units import unit_rows_at
from elmscale.features.kernels import Kernel
from elmscale.solvers.kernel_kmeans import (
    KernelCentres,
    kernel_kmeans,
    nearest_centre,
    sample_rows,
)

__all__ = ["PHASES", "DivideConquerResult", "fit_divide_conquer", "partition", "start_point"]

#: The sample that kernel k-means runs on (rows; all of them when fewer).
SAMPLE_ROWS = 2048
#: The phases whose wall seconds a fit reports, in this order.
PHASES = ("partition", "sub-solves", "gradient", "global solve")
#: Retries of a task whose worker is lost.
RETRIES = 3


class PairSolution(NamedTuple):
    """What a sub-solve sends back: the dual variables on its rows, its steps, its dual
    objective and whether its KKT check passed."""

    alpha: np.ndarray
    n_iter: int
    objective: float
    converged: bool


class DivideConquerResult(NamedTuple):
    """``solutions``: each pair's global solution (the solver's own result; None with
    ``early``); ``parts``: each row's part; ``part_sizes``: rows per part; ``sub_iter``
    (n_parts, n_pairs): the sub-solves' steps; ``seconds``: wall seconds of each of
    ``PHASES`` (0 for those ``early`` skips); ``centres``: the partition's centres;
    ``sub_alphas``: each pair's duals from the sub-solves, on its rows (every row in one
    part); ``sub_objective`` and ``sub_converged`` (n_parts, n_pairs): the sub-solves'
    dual objectives and KKT checks (0 and True where a part has no rows of a pair)."""

    solutions: list | None
    parts: np.ndarray
    part_sizes: np.ndarray
    sub_iter: np.ndarray
    seconds: np.ndarray
    centres: KernelCentres
    sub_alphas: list
    sub_objective: np.ndarray
    sub_converged: np.ndarray


def partition(
    X: np.ndarray,
    kernel: Kernel,
    n_parts: int,
    *,
    seed: int,
    n_sample: int = SAMPLE_ROWS,
    cross: Callable[[KernelCentres], np.ndarray] | None = None,
) -> tuple[np.ndarray, KernelCentres]:
    """``(part of each row, centres)``: kernel k-means of a seeded sample of ``X`` into at
    most ``n_parts`` clusters (``centres.n_centres`` of them), each row then assigned to
    its nearest centre.  ``cross(centres)`` gives ``K(every row, sample) @ weights``
    (default: here, in blocks; a fit on Parquet computes it on the workers)."""
    sample = sample_rows(X.shape[0], n_sample, seed)
    centres, _ = kernel_kmeans(kernel, X[sample], n_parts, seed=seed)
    if cross is None:
        values = kernel.block_matvec(X, centres.sample, centres.weights)
    else:
        values = cross(centres)
    return nearest_centre(values, centres.centre_sq).astype(np.int32), centres


def start_point(alphas, problems, C, product):
    """Each pair's start ``(alpha0, Q alpha0 - 1, G_bar)`` from its duals ``alphas[p]`` on
    its rows ``problems[p] = (rows, t)``: one product ``K(every row, support rows) @ coef``
    (``product(support rows, coef)``, coef (|SV|, 2 n_pairs): the pairs' ``alpha t`` and
    their ``C t`` at the bound) for all pairs."""
    n_pairs = len(problems)
    support = np.unique(np.concatenate([rows[a > 0] for a, (rows, _) in zip(alphas, problems)]))
    if support.size == 0:
        return [(a, np.full(a.size, -1.0), np.zeros(a.size)) for a in alphas]
    coef = np.zeros((support.size, 2 * n_pairs))
    for p, (alpha, (rows, t)) in enumerate(zip(alphas, problems)):
        for column, where, value in (
            (p, alpha > 0, alpha * t),
            (n_pairs + p, alpha >= C, C * t),
        ):
            coef[np.searchsorted(support, rows[where]), column] = value[where]
    F = product(support, coef)
    return [
        (alpha, t * F[rows, p] - 1.0, t * F[rows, n_pairs + p])
        for p, (alpha, (rows, t)) in enumerate(zip(alphas, problems))
    ]


def _sub_solve(X, t, pick, *, solve, kernel, options, n_threads=1) -> PairSolution:
    """One part's pair solved by the single-process solver, on ``n_threads`` threads: its
    rows ``X[pick]`` of the part's ``X`` (all of them when ``pick`` is None)."""
    if pick is not None:
        X = X[pick]
    with thread_budget(n_threads):
        r = solve(X, t, feature_map=kernel, **options)
    return PairSolution(
        np.asarray(r.alpha, dtype=np.float64), int(r.n_iter), float(r.objective), bool(r.converged)
    )


def _part_rows(units, members: np.ndarray) -> np.ndarray:
    """The part's rows, those numbered ``members`` (sorted), float32, read from the data
    set's ``units`` (the gathered rows' bytes, so the sub-solves' results are unchanged)."""
    return np.ascontiguousarray(np.concatenate([unit_rows_at(u, members) for u in units]))


def _sub_problems(problems, parts, n_parts):
    """``[(part, pair, positions in the pair's rows)]`` of every non-empty piece, the
    largest first (the cluster starts the long ones first)."""
    pieces = []
    for p, (rows, _) in enumerate(problems):
        part_of = parts[rows]
        for q in range(n_parts):
            where = np.flatnonzero(part_of == q)
            if where.size:
                pieces.append((q, p, where))
    pieces.sort(key=lambda piece: -piece[2].size)
    return pieces


def _solve_parts(client, dataset, X, parts, problems, pieces, solve, kernel, options):
    """Every piece's sub-solve as a task on the cluster; results in ``pieces``' order.
    Each part's rows are read once, by a task (recomputable: see the module docstring),
    and each of its pairs picks its own among them; the labels and picks travel in the
    sub-solve's own task.  A Dask collection's part is sent from ``X``, the rows gathered
    here, to one worker, where its sub-solves run: read from the partitions, or balanced
    over the workers, its rows would move between workers."""
    units = dataset.units()
    homes = sorted(client.nthreads()) if partition_keys(units) else []
    futures = []
    read: dict = {}  # part -> (its rows' numbers, the future of its rows, where it runs)
    for q, p, where in pieces:
        if q not in read:
            members = np.flatnonzero(parts == q)
            if homes:
                worker = homes[q % len(homes)]
                X_part = client.scatter(
                    np.ascontiguousarray(X[members]), workers=[worker], hash=False
                )
                # its sub-solves run there only: Dask's work stealing moved a part (86 kB)
                # to the other worker when it could (a test of the collections' fits saw it),
                # and scattered rows are lost with their worker wherever the task would run
                home = {"workers": [worker], "allow_other_workers": False}
            else:
                home = {}
                X_part = client.submit(_part_rows, units, members, pure=False, retries=RETRIES)
            read[q] = (members, X_part, home)
        members, X_part, home = read[q]
        rows, t = problems[p]
        pick = np.searchsorted(members, rows[where])  # both sorted
        whole = pick.size == members.size
        futures.append(
            client.submit(
                _sub_solve,
                X_part,
                t[where],
                None if whole else pick,
                solve=solve,
                kernel=kernel,
                options=options,
                pure=False,
                retries=RETRIES,
                **home,
            )
        )
    return client.gather(futures)


def fit_divide_conquer(
    dataset: ParquetDataset,
    X: np.ndarray,
    problems: Sequence,
    *,
    kernel: Kernel,
    solve: Callable,
    options: dict,
    n_parts: int,
    client,
    seed: int = 0,
    n_sample: int = SAMPLE_ROWS,
    n_threads: int | None = None,
    early: bool = False,
) -> DivideConquerResult:
    """Solve every binary problem of ``problems`` (one-vs-one pairs ``(rows, t)`` over the
    rows ``X`` of ``dataset``, gathered here in its row order) by divide and conquer on the
    Dask cluster of ``client`` (see the module docstring).

    ``solve(X, t, *, feature_map, alpha0=None, gradient0=None, g_bar0=None, **options)``
    is the single-process solver of one pair (``models.sparse_elm_pairs.fit_binary``),
    ``options`` its settings (C, tol, cache_size, shrinking, max_iter); ``n_parts`` the
    parts of kernel k-means at most (fewer when clusters come out empty); ``seed`` draws
    the sample and seeds k-means, so the parts are a function of the rows and the seed;
    ``n_threads`` the threads of the global solve here (pairs side by side); ``early``
    stops after the sub-solves (``solutions`` None: the parts' duals are the model).
    """
    DaskExecutor(client)  # checks the client
    seconds = np.zeros(len(PHASES))
    started = time.perf_counter()

    def cross(centres: KernelCentres) -> np.ndarray:
        return dataset_ops.kernel_matvec(
            dataset, centres.sample, centres.weights, kernel, client=client
        )

    with thread_budget(n_threads):
        parts, centres = partition(X, kernel, n_parts, seed=seed, n_sample=n_sample, cross=cross)
    n_found = centres.n_centres
    seconds[0] = time.perf_counter() - started

    started = time.perf_counter()
    pieces = _sub_problems(problems, parts, n_found)
    solved = _solve_parts(client, dataset, X, parts, problems, pieces, solve, kernel, options)
    alphas = [np.zeros(rows.size) for rows, _ in problems]
    sub_iter = np.zeros((n_found, len(problems)), dtype=np.int64)
    sub_objective = np.zeros((n_found, len(problems)))
    sub_converged = np.ones((n_found, len(problems)), dtype=bool)
    for (q, p, where), result in zip(pieces, solved):
        alphas[p][where] = result.alpha
        sub_iter[q, p] = result.n_iter
        sub_objective[q, p] = result.objective
        sub_converged[q, p] = result.converged
    seconds[1] = time.perf_counter() - started
    found = {
        "parts": parts,
        "part_sizes": np.bincount(parts, minlength=n_found),
        "sub_iter": sub_iter,
        "seconds": seconds,
        "centres": centres,
        "sub_alphas": alphas,
        "sub_objective": sub_objective,
        "sub_converged": sub_converged,
    }
    if early:
        return DivideConquerResult(solutions=None, **found)

    started = time.perf_counter()

    def product(support: np.ndarray, coef: np.ndarray) -> np.ndarray:
        return dataset_ops.kernel_matvec(dataset, X[support], coef, kernel, client=client)

    starts = start_point(alphas, problems, float(options["C"]), product)
    seconds[2] = time.perf_counter() - started

    started = time.perf_counter()

    def global_solve(p: int):
        (rows, t), (alpha0, g0, g_bar0) = problems[p], starts[p]
        return solve(
            X[rows], t, feature_map=kernel, alpha0=alpha0, gradient0=g0, g_bar0=g_bar0, **options
        )

    solutions = LocalExecutor(n_threads).map(global_solve, range(len(problems)))
    seconds[3] = time.perf_counter() - started
    return DivideConquerResult(solutions=solutions, **found)
