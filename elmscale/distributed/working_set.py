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
from elmscale.distributed.newton import _class_index, array_units, parquet_units
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


def group_units(units, n_blocks: int) -> list[list]:
    """``units`` in ``n_blocks`` contiguous groups of about equal rows (none empty)."""
    n_blocks = max(1, min(int(n_blocks), len(units)))
    rows = np.cumsum([u.n_rows for u in units])
    cuts = np.searchsorted(rows, rows[-1] * np.arange(1, n_blocks) / n_blocks, side="left") + 1
    cuts = np.unique(np.clip(cuts, 1, len(units) - 1)) if len(units) > 1 else np.empty(0, int)
    bounds = [0, *cuts.tolist(), len(units)]
    return [list(units[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


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

    def attach(self, seen, pairs):
        """(Nothing is lost here: no rebuilds.)"""

    def _call(self, method, *args):
        if len(self.blocks) == 1:
            with thread_budget(self.threads):
                return [getattr(self.blocks[0], method)(*args)]
        return map_in_threads(lambda b: getattr(b, method)(*args), self.blocks, self.n_threads)

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

    def step(self, updates, shrink, q):
        with thread_budget(self.n_threads):
            return self.block.step(updates, shrink, q)

    def exact(self, support, which, q, precise=True):
        with thread_budget(self.n_threads):
            return self.block.exact(support, which, q, precise)


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
            return results

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
):
    """Fit every one-vs-one pair of ``classes`` on the rows of ``units`` (Parquet work units, or
    ``array_units`` of arrays here) by the working-set solver; returns its
    ``WorkingSetResult``.  ``client``: the blocks are Dask actors on its workers; None: on
    this process's ``n_threads`` threads.  ``n_blocks``: blocks of rows (default: the
    workers, or the threads here; the iterates do not depend on it); ``cache_mb`` the
    column caches' budget per worker (per process here), ``q`` the working set's size.
    """
    q = check_q(q)
    classes = np.asarray(classes)
    pairs = [tuple(int(c) for c in pair) for pair in one_vs_one_pairs(classes.size)]
    kernel_dict = kernel.to_dict()
    units = list(units)
    n_features = len(units[0].features) if hasattr(units[0], "features") else units[0].X.shape[1]
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
    return solve_working_set(
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
