"""The kernel sparse ELM's working-set solver (``elmscale.solvers.working_set``) with its blocks
of rows where they live: on Dask workers, or on this process's threads.

The blocks are ``RowBlock`` states kept for the whole fit:

* ``ThreadBlocks``: every block in this process, their calls side by side on threads (one
  numba and BLAS thread each, as on a one-thread worker);
* ``DaskBlocks``: one Dask actor per block, pinned to a worker, which reads its Parquet units
  there and keeps its rows, alpha, gradient and column cache; the coordinator calls the
  actors directly (no scheduler round trip per call), one call per block per iteration.

Both run the same ``RowBlock`` methods, so the iterates are the same (each row's sums in the
same order).  A worker lost mid-fit: its blocks are made again on the other workers, from
their units, the coordinator's alpha (``SeenRows``: every row with ``a > 0`` has been in a
working set; a step's alpha is written there after the step) and an exact gradient, as
they were before the call they were lost in, and that call is made again on them: a step
is applied once, an exact check computed again from the same support.  The fit goes on
to the same optimum within ``tol``.  The client is the caller's; nothing here starts a
cluster.
"""

from __future__ import annotations

import time

import numpy as np

from elmscale.core.threads import map_in_threads, resolve_n_threads, thread_budget
from elmscale.data.work_units import attach, partition_keys
from elmscale.distributed.collections import group_holders, holder_groups
from elmscale.distributed.newton import _class_index, array_units, group_units, parquet_units
from elmscale.distributed.worker_heap import workers_passes_heap
from elmscale.features.kernels import Kernel
from elmscale.linalg.targets import one_vs_one_pairs
from elmscale.solvers.working_set import (
    DEFAULT_Q,
    RowBlock,
    check_q,
    solve_working_set,
)

__all__ = [
    "BlockActor",
    "DaskBlocks",
    "ThreadBlocks",
    "array_units",
    "fit_working_set",
    "parquet_units",
    "read_block",
]

#: Seconds a call to a block may take before its worker is asked after (not an error in
#: itself: a call on a large block takes long).
CALL_POLL_SECONDS = 5.0
#: Seconds to wait for the scheduler to drop a worker whose connection broke.
LOST_WORKER_SECONDS = 60.0


def read_block(units, classes):
    """A block's rows from its work units: ``(X float32, row numbers, class indices)``."""
    classes = tuple(np.asarray(classes).tolist())
    Xs, ids, cls = [], [], []
    for unit in units:
        X, y = unit.read()
        if y is None:
            raise ValueError(f"{unit.pieces[0][0]}: the data set has no label column")
        Xs.append(np.asarray(X, dtype=np.float32))
        ids.append(unit.start + np.arange(unit.n_rows, dtype=np.int64))
        cls.append(_class_index(y, classes, unit))
    if not Xs:
        raise ValueError("a block of the working-set solver has no work units")
    return np.concatenate(Xs), np.concatenate(ids), np.concatenate(cls)


def _new_block(units, classes, pairs, kernel, C, cache_mb, n_threads, alphas=None, support=None):
    """A ``RowBlock`` from its units; with ``alphas`` (a rebuilt block) its alpha set and every
    pair's gradient made exact against ``support``."""
    X, ids, cls = read_block(units, classes)
    block = RowBlock(X, ids, cls, pairs, kernel, C, cache_mb, n_threads)
    if alphas is not None:
        block.set_alpha(alphas)
        with thread_budget(n_threads):
            block.exact(support, range(len(pairs)), 1)
    return block


class ThreadBlocks:
    """The blocks in this process, their calls side by side on ``n_threads`` threads."""

    def __init__(self, groups, classes, pairs, kernel: dict, C, cache_mb, n_threads):
        self.n_threads = resolve_n_threads(n_threads)
        per_block = cache_mb / max(len(groups), 1)
        threads = max(1, self.n_threads // max(len(groups), 1))
        self.blocks = map_in_threads(
            lambda units: _new_block(units, classes, pairs, kernel, C, per_block, threads),
            groups,
            self.n_threads,
        )
        self.threads = threads
        self.rebuilt = 0
        self.calls: list = []

    def attach(self, seen, pairs):
        """(Nothing is lost here: no rebuilds.)"""

    def _call(self, method, *args):
        started = time.perf_counter()
        if len(self.blocks) == 1:
            with thread_budget(self.threads):
                out = [_timed(self.blocks[0], method, args)]
        else:
            out = map_in_threads(lambda b: _timed(b, method, args), self.blocks, self.n_threads)
        self.calls.append((method, started, time.perf_counter(), [t for _, t in out]))
        return [r for r, _ in out]

    def call_records(self) -> list:
        """``(method, started, ended, [(compute wall, thread CPU) per block])`` per call."""
        return self.calls

    def step(self, updates, shrink, q):
        return self._call("step", updates, shrink, q)

    def exact(self, support, which, q, precise=True):
        return self._call("exact", support, which, q, precise)


class BlockActor:
    """A ``RowBlock`` kept on a Dask worker (a Dask actor): it reads its units there, and its
    calls run on the worker's ``n_threads``."""

    def __init__(
        self, units, classes, pairs, kernel, C, cache_mb, n_threads, alphas, support, partitions=()
    ):
        self.n_threads = int(n_threads)
        units = attach(units, list(partitions))  # a Dask collection's partitions, given as inputs
        with thread_budget(self.n_threads):
            self.block = _new_block(
                units, classes, pairs, kernel, C, cache_mb, n_threads, alphas, support
            )
        self.records: list = []  # (compute wall, thread CPU) per call: ``call_records``

    def step(self, updates, shrink, q):
        with thread_budget(self.n_threads):
            result, spent = _timed(self.block, "step", (updates, shrink, q))
        self.records.append(spent)
        return result

    def exact(self, support, which, q, precise=True):
        with thread_budget(self.n_threads):
            result, spent = _timed(self.block, "exact", (support, which, q, precise))
        self.records.append(spent)
        return result

    def call_records(self) -> list:
        """This block's ``(compute wall, thread CPU)`` per call, in call order."""
        return self.records


def _timed(block, method, args):
    """``(block.method(*args), (wall seconds, thread CPU seconds))``: a call's own cost on
    its worker (Dask records no actor calls in its task stream)."""
    wall, cpu = time.perf_counter(), time.thread_time()
    result = getattr(block, method)(*args)
    return result, (time.perf_counter() - wall, time.thread_time() - cpu)


class DaskBlocks:
    """One ``BlockActor`` per block on the workers of ``client`` (block i on worker i modulo
    the workers), each with the worker's threads; blocks lost with their worker are made
    again on the others (see the module's docstring)."""

    #: The class each block runs as on its worker (an attribute, so that a test's subclass
    #: can make a worker die inside a call).
    actor_class: type[BlockActor] = BlockActor

    def __init__(self, client, groups, classes, pairs, kernel: dict, C, cache_mb):
        self.client = client
        self.spec = (classes, pairs, kernel, C)
        self.groups = groups
        self.cache_mb = cache_mb / max(len(groups), 1)
        nthreads = client.nthreads()
        if not nthreads:
            raise ValueError("the Dask cluster of client has no workers")
        self.workers = sorted(nthreads)
        self.nthreads = nthreads
        self.seen = None
        self.pairs = pairs
        self.rebuilt = 0
        self.calls: list = []
        # a group of a Dask collection's partitions lives where they are (holder_groups)
        held = group_holders(client, groups)
        self.homes = [held[i] or self.workers[i % len(self.workers)] for i in range(len(groups))]
        made = [self._submit(i, self.homes[i]) for i in range(len(groups))]
        self.futures = made
        with self._current():
            self.actors = [f.result() for f in made]

    def _current(self):
        """``client`` as Dask's current client while the actors' handles are made and
        called: a handle sends its calls through the client current where it is
        deserialized or first called (``distributed.get_client``), else through Dask's
        default client, which is none, or another cluster's, when ``client`` is not the
        default (``Client(..., set_as_default=False)``, or a second client)."""
        return self.client.as_current()

    def _submit(self, i, worker, alphas=None, support=None):
        from distributed import Future

        classes, pairs, kernel, C = self.spec
        return self.client.submit(
            self.actor_class,
            self.groups[i],
            classes,
            pairs,
            kernel,
            C,
            self.cache_mb,
            self.nthreads.get(worker, 1),
            alphas,
            support,
            [Future(key, self.client) for key in partition_keys(self.groups[i])],
            actor=True,
            workers=[worker],
            allow_other_workers=False,
            pure=False,
        )

    def attach(self, seen, pairs):
        """The coordinator's alpha and support rows, from which a lost block is rebuilt."""
        self.seen = seen
        self.pairs = pairs

    def _alive(self) -> set:
        return set(self.client.scheduler_info(n_workers=-1)["workers"])

    def _call(self, method, *args):
        """Every block's ``method(*args)``; a block lost with its worker, before or during the
        call, is rebuilt to its state before the call (``_rebuild``) and called again."""
        started = time.perf_counter()
        with self._current():
            pending = [getattr(a, method)(*args) for a in self.actors]
            results: list = [None] * len(pending)
            lost = []
            for i, future in enumerate(pending):
                try:
                    results[i] = future.result()
                except Exception:
                    if not self._lost(self.homes[i]):
                        raise
                    lost.append(i)
            for i in lost:
                self._rebuild(i)
                results[i] = getattr(self.actors[i], method)(*args).result()
            self.calls.append((method, started, time.perf_counter(), lost))
            return results

    def call_records(self) -> list:
        """``(method, started, ended, [(compute wall, thread CPU) per block])`` per call:
        the calls' times here, their cost on the workers asked of each actor once (a block
        rebuilt mid-fit reports from its rebuilding on: its earlier calls count as none)."""
        with self._current():
            per_block = [a.call_records().result() for a in self.actors]
        out = []
        for n, (method, started, ended, _) in enumerate(self.calls):
            spent = [
                rec[n - (len(self.calls) - len(rec))]
                if n >= len(self.calls) - len(rec)
                else (0.0, 0.0)
                for rec in per_block
            ]
            out.append((method, started, ended, spent))
        return out

    def _lost(self, worker) -> bool:
        """Whether ``worker`` has left the cluster (waiting a while for the scheduler to
        notice a broken connection)."""
        deadline = time.monotonic() + LOST_WORKER_SECONDS
        while time.monotonic() < deadline:
            if worker not in self._alive():
                return True
            time.sleep(0.2)
        return False

    def _rebuild(self, i):
        """Block ``i`` made again on a living worker, from its units and the coordinator's
        alpha, its gradient exact: the block before the call it was lost in (the coordinator
        writes a step's alpha once the step has returned)."""
        alive = sorted(self._alive())
        if not alive:
            raise RuntimeError("every Dask worker was lost during the working-set fit")
        self.workers = alive
        self.nthreads = self.client.nthreads()
        worker = alive[i % len(alive)]
        seen = self.seen
        alphas = [(seen.ids, seen.alpha[:, p]) for p in range(len(self.pairs))]
        support = seen.support(self.pairs)
        future = self._submit(i, worker, alphas, support)
        self.futures[i] = future
        with self._current():
            self.actors[i] = future.result()
        self.homes[i] = worker
        self.rebuilt += 1

    def step(self, updates, shrink, q):
        return self._call("step", updates, shrink, q)

    def exact(self, support, which, q, precise=True):
        return self._call("exact", support, which, q, precise)


def fit_working_set(
    units,
    classes,
    kernel: Kernel,
    *,
    C,
    tol,
    q=DEFAULT_Q,
    client=None,
    n_blocks=None,
    cache_mb=200.0,
    max_iter=-1,
    n_threads=None,
    on_iteration=None,
    timings=None,
):
    """Fit every one-vs-one pair of ``classes`` on the rows of ``units`` (Parquet work units, or
    ``array_units`` of arrays here) by the working-set solver; returns its
    ``WorkingSetResult``.  ``client``: the blocks are Dask actors on its workers; None: on
    this process's ``n_threads`` threads.  ``n_blocks``: blocks of rows (default: the
    workers, or the threads here; the iterates do not depend on it); ``cache_mb`` the
    column caches' budget per worker (per process here), ``q`` the working set's size.
    ``timings``: a list that gets each exchange's breakdown (``exchange_breakdown``).
    """
    q = check_q(q)
    classes = np.asarray(classes)
    pairs = [tuple(int(c) for c in pair) for pair in one_vs_one_pairs(classes.size)]
    kernel_dict = kernel.to_dict()
    units = list(units)
    n_features = len(units[0].features) if hasattr(units[0], "features") else units[0].X.shape[1]
    if client is not None:
        # the actors' temporaries (each step's column products) from the workers' heaps,
        # not fresh pages (worker_heap), as for the Newton passes: a one-thread fit of
        # 10,000 rows run inside a worker process spent 1.03 s in its block's calls with
        # the nanny's malloc setting, 0.63-0.89 s with the thresholds raised (0.61 s here)
        workers_passes_heap(client, True)
    try:
        if client is None:
            threads = resolve_n_threads(n_threads)
            groups = group_units(units, n_blocks or threads)
            blocks = ThreadBlocks(groups, classes, pairs, kernel_dict, C, cache_mb, threads)
        else:
            workers = client.nthreads()
            groups = holder_groups(client, group_units(units, n_blocks or max(1, len(workers))))
            blocks = DaskBlocks(
                client, groups, classes, pairs, kernel_dict, C, cache_mb * max(len(workers), 1)
            )
        started = time.perf_counter()
        result = solve_working_set(
            blocks,
            pairs,
            n_features,
            kernel=kernel,
            C=C,
            tol=tol,
            q=q,
            max_iter=max_iter,
            on_iteration=on_iteration,
        )
    finally:
        if client is not None:
            workers_passes_heap(client, False)
    if timings is not None:
        timings.extend(exchange_breakdown(blocks.call_records(), started))
    return result


#: The columns of ``exchanges_array`` (an estimator's ``exchange_timings_``): per exchange,
#: 1 for a check of every row (0: a step), and the slowest block's compute and CPU
EXCHANGE_COLUMNS = ("exact", "seconds", "compute_s", "cpu_s", "wait_s", "coordinator_s")


def exchanges_array(timings: list[dict]) -> np.ndarray:
    """``exchange_breakdown``'s records as an (exchanges x ``EXCHANGE_COLUMNS``) float array
    (what a model file can hold)."""
    out = np.zeros((len(timings), len(EXCHANGE_COLUMNS)))
    for i, t in enumerate(timings):
        out[i] = [
            float(t["method"] == "exact"),
            t["seconds"],
            max(t["compute_s"], default=0.0),
            max(t["cpu_s"], default=0.0),
            t["wait_s"],
            t["coordinator_s"],
        ]
    return out


def exchange_breakdown(calls: list, started: float) -> list[dict]:
    """Each exchange with the blocks (a call of every block: a step, or a check of every
    row), one dict each: ``method``; ``seconds`` its wall time here; ``compute_s`` and
    ``cpu_s`` each block's compute wall and thread CPU on its worker; ``wait_s`` the
    call's time beyond the slowest block's compute (the messages, their
    (de)serialization); ``coordinator_s`` this process's own work since the exchange
    before (the subproblem, the working set's choice)."""
    out = []
    last = started
    for method, begun, ended, spent in calls:
        compute = [wall for wall, _ in spent]
        out.append(
            {
                "method": method,
                "seconds": ended - begun,
                "compute_s": compute,
                "cpu_s": [cpu for _, cpu in spent],
                "wait_s": max(0.0, ended - begun - max(compute, default=0.0)),
                "coordinator_s": begun - last,
            }
        )
        last = ended
    return out
