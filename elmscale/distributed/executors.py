"""One way to run independent pieces of work: in this process, on a Dask cluster or on Ray.

An :class:`Executor` runs ``fn(item, **shared, **kwargs)`` for every item and returns the
results in item order (:meth:`Executor.map`), or adds them up (:meth:`Executor.reduce`).
``shared`` holds large constant arguments (a matrix of points, a fitted model): they are
sent once (Dask: scattered to every worker; Ray: put in the object store) and passed to
every piece by reference.  Each piece runs with its BLAS and numba threads capped at
``threads_per_task`` (:func:`elmscale.core.threads.thread_budget`).

* :class:`LocalExecutor`: this process.  ``side_by_side=True`` runs the pieces on up to
  ``n_threads`` threads, one numba and one BLAS thread each (numba work that releases the
  GIL, such as one-vs-one pairs); otherwise one after another on all of them (BLAS-bound
  work units).  Partial sums are added as they come, so memory holds two.
* :class:`DaskExecutor`: a ``distributed.Client`` (never created here).  A reduction sums
  the parts on the workers in a tree of fan-in ``fan_in`` and only the total comes back.
  Dask re-runs the tasks of a worker that dies; every task is a pure function of its
  item and the tree's shape depends only on the number of items, so the sum is the same.
* :class:`RayExecutor`: a Ray address ("auto", "ray://host:10001", "host:6379") or an
  initialised Ray.  Ray re-runs a task whose worker dies (``max_retries``).

Progress: every map and reduce reports pieces done of total to the reporter installed by
:func:`report_progress` (``elmscale run`` installs progress bars), under a label (given,
or the piece function's ``progress_label`` attribute, or its name).  A piece that raises
is reported as :class:`PieceFailed` naming it when ``describe`` is given (and always on
Ray).
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from elmscale.core.errors import PieceFailed
from elmscale.core.threads import (
    iter_in_threads,
    map_in_threads,
    resolve_n_threads,
    thread_budget,
)
from elmscale.data.work_units import partition_keys

__all__ = [
    "DaskExecutor",
    "Executor",
    "LocalExecutor",
    "PieceFailed",
    "RayExecutor",
    "broadcast",
    "make_executor",
    "map_units",
    "reduce_units",
    "report_progress",
]

#: Partial results summed per tree node on a Dask cluster.
FAN_IN = 4


# -- progress ------------------------------------------------------------------------

ProgressReporter = Callable[[str, int, int], None]
_reporter: contextvars.ContextVar[ProgressReporter | None] = contextvars.ContextVar(
    "elmscale_progress", default=None
)


@contextlib.contextmanager
def report_progress(reporter: ProgressReporter | None) -> Iterator[None]:
    """Inside the block, every executor calls ``reporter(label, done, total)`` as pieces
    finish (``reporter`` None: nothing is reported)."""
    token = _reporter.set(reporter)
    try:
        yield
    finally:
        _reporter.reset(token)


@contextlib.contextmanager
def progress_bars(enabled: bool = True) -> Iterator[None]:
    """:func:`report_progress` with one tqdm bar per label on stderr (pieces done / total,
    elapsed, remaining)."""
    if not enabled:
        yield
        return
    from tqdm.auto import tqdm

    bars: dict[str, object] = {}
    lock = threading.Lock()

    def reporter(label: str, done: int, total: int) -> None:
        with lock:
            bar = bars.get(label)
            if bar is None or bar.total != total or done < bar.n:
                if bar is not None:
                    bar.close()
                bar = bars[label] = tqdm(total=total, desc=label, unit="piece")
            bar.update(done - bar.n)
            if done >= total:
                bar.close()
                del bars[label]

    try:
        with report_progress(reporter):
            yield
    finally:
        for bar in bars.values():
            bar.close()


class _Progress:
    """Counts finished pieces of one map or reduce and tells the current reporter."""

    def __init__(self, label: str, total: int):
        self.label, self.total, self.done = label, total, 0
        self.reporter = _reporter.get()
        self.lock = threading.Lock()
        if self.reporter is not None and total:
            self.reporter(label, 0, total)

    def add(self, n: int = 1) -> None:
        if self.reporter is None:
            return
        with self.lock:
            self.done += n
            done = self.done
        self.reporter(self.label, done, self.total)


def _label(fn: Callable, label: str | None) -> str:
    """The progress label: ``label``, the function's ``progress_label`` attribute, or its
    name."""
    if label:
        return label
    if getattr(fn, "progress_label", None):
        return fn.progress_label
    name = getattr(fn, "__name__", "pieces")
    return name.removeprefix("unit_").removeprefix("_").replace("_", " ")


def _describe_failure(describe, item, index, exc) -> PieceFailed:
    what = describe(item) if describe is not None else f"piece {index}"
    return PieceFailed(f"{what} failed: {type(exc).__name__}: {exc}")


# -- executors -----------------------------------------------------------------------


class Executor:
    """Runs pieces of work: see the module docstring."""

    #: True when pieces run in this process (they may then take callables and locks).
    in_process = False

    def map(
        self,
        fn: Callable,
        items: Sequence,
        *,
        shared: dict | None = None,
        describe: Callable | None = None,
        label: str | None = None,
        **kwargs,
    ) -> list:
        """``[fn(item, **shared, **kwargs) for item in items]``, in item order."""
        raise NotImplementedError

    def reduce(
        self,
        fn: Callable,
        items: Sequence,
        combine: Callable,
        *,
        shared: dict | None = None,
        label: str | None = None,
        **kwargs,
    ):
        """``combine(*[fn(item, **shared, **kwargs) ...])``; ``combine`` must be
        associative (it adds its parts)."""
        raise NotImplementedError

    def as_completed(
        self,
        fn: Callable,
        items: Sequence,
        *,
        shared: dict | None = None,
        describe: Callable | None = None,
        **kwargs,
    ) -> Iterator[tuple[int, object]]:
        """``(index, fn(items[index], **shared, **kwargs))`` as each piece finishes, so a
        caller can keep each result (a journal) before the others are done.  Closing the
        iterator early cancels the pieces not started."""
        raise NotImplementedError

    def on_every_machine(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` here and on every machine the pieces may have run on (once per
        worker: ``fn`` must not mind running twice on one machine); for removing a
        run's files there.  Its failures on the workers are ignored."""
        fn()


class LocalExecutor(Executor):
    """This process: pieces side by side on threads, or one after another."""

    in_process = True

    def __init__(self, n_threads: int | None = None, *, side_by_side: bool = True):
        self.n_threads = n_threads
        self.side_by_side = side_by_side

    def map(self, fn, items, *, shared=None, describe=None, label=None, **kwargs):
        items = list(items)
        progress = _Progress(_label(fn, label), len(items))
        shared = shared or {}

        def run(indexed):
            index, item = indexed
            try:
                result = fn(item, **shared, **kwargs)
            except Exception as exc:
                if describe is None:
                    raise
                raise _describe_failure(describe, item, index, exc) from exc
            progress.add()
            return result

        with thread_budget(self.n_threads) as n_threads:
            if self.side_by_side:
                return map_in_threads(run, list(enumerate(items)), n_threads)
            return [run(pair) for pair in enumerate(items)]

    def as_completed(self, fn, items, *, shared=None, describe=None, **kwargs):
        items = list(items)
        shared = shared or {}

        def run(indexed):
            index, item = indexed
            try:
                return fn(item, **shared, **kwargs)
            except Exception as exc:
                if describe is None:
                    raise
                raise _describe_failure(describe, item, index, exc) from exc

        with thread_budget(self.n_threads) as n_threads:
            n_workers = n_threads if self.side_by_side else 1
            yield from iter_in_threads(run, list(enumerate(items)), n_workers)

    def reduce(self, fn, items, combine, *, shared=None, label=None, **kwargs):
        items = list(items)
        if not items:
            raise ValueError("no pieces to reduce: the data set has no rows")
        progress = _Progress(_label(fn, label), len(items))
        shared = shared or {}
        total = None
        with thread_budget(self.n_threads):
            for item in items:
                part = fn(item, **shared, **kwargs)
                total = part if total is None else combine(total, part)
                progress.add()
        return total


class DaskExecutor(Executor):
    """A Dask cluster reached through ``client`` (a ``distributed.Client``)."""

    def __init__(self, client, *, threads_per_task: int = 1, fan_in: int = FAN_IN):
        from distributed import Client

        if not isinstance(client, Client):
            raise TypeError(
                f"client must be a distributed.Client or None; got {type(client).__name__}"
            )
        self.client = client
        self.threads_per_task = int(threads_per_task)
        self.fan_in = int(fan_in)

    def _submit_all(self, fn, items, shared, kwargs, progress):
        scattered = {
            name: self.client.scatter(value, broadcast=True, hash=False)
            for name, value in (shared or {}).items()
        }
        items = list(items)
        common = {"_fn": fn, "_budget": self.threads_per_task, **scattered, **kwargs}
        if any(partition_keys(item) for item in items):
            from elmscale.distributed.collections import submit_placed

            # units of a Dask collection's partitions: each task where its partition is
            futures = submit_placed(self.client, _with_budget, items, pure=False, **common)
        else:
            futures = self.client.map(_with_budget, items, pure=False, **common)
        for future in futures:
            future.add_done_callback(lambda _: progress.add())
        return futures

    def map(self, fn, items, *, shared=None, describe=None, label=None, **kwargs):
        items = list(items)
        progress = _Progress(_label(fn, label), len(items))
        futures = self._submit_all(fn, items, shared, kwargs, progress)
        return self.client.gather(futures)

    def as_completed(self, fn, items, *, shared=None, describe=None, **kwargs):
        from distributed import as_completed

        items = list(items)
        progress = _Progress(_label(fn, None), len(items))
        futures = self._submit_all(fn, items, shared, kwargs, progress)
        index = {future.key: i for i, future in enumerate(futures)}
        try:
            for future in as_completed(futures):
                i = index[future.key]
                try:
                    result = future.result()
                except Exception as exc:
                    if describe is None:
                        raise
                    raise _describe_failure(describe, items[i], i, exc) from exc
                yield i, result
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def on_every_machine(self, fn):
        self.client.run(fn, on_error="ignore")
        fn()

    def reduce(self, fn, items, combine, *, shared=None, label=None, record=None, **kwargs):
        items = list(items)
        if not items:
            raise ValueError("no pieces to reduce: the data set has no rows")
        progress = _Progress(_label(fn, label), len(items))
        level = self._submit_all(fn, items, shared, kwargs, progress)
        every = list(level)
        while len(level) > 1:
            level = [
                self.client.submit(combine, *level[i : i + self.fan_in], pure=False)
                for i in range(0, len(level), self.fan_in)
            ]
            every.extend(level)
        if record is not None:  # (a breakdown.DaskPass: its tasks, in the task stream)
            record.sent(every, inputs=(items, shared, kwargs), back=level)
        return level[0].result()


class RayExecutor(Executor):
    """Ray tasks on the initialised Ray, or on the cluster at ``address``."""

    def __init__(self, address: str | None = "auto", *, num_cpus: int = 1, max_retries: int = 3):
        self.address = address
        self.num_cpus = int(num_cpus)
        self.max_retries = int(max_retries)

    def map(self, fn, items, *, shared=None, describe=None, label=None, **kwargs):
        from elmscale.distributed.ray_tasks import run_tasks

        items = list(items)
        progress = _Progress(_label(fn, label), len(items))
        return run_tasks(
            fn,
            items,
            shared=shared,
            ray_address=self.address,
            num_cpus=self.num_cpus,
            max_retries=self.max_retries,
            describe=describe,
            on_done=lambda done, total: progress.add(),
            **kwargs,
        )

    def as_completed(self, fn, items, *, shared=None, describe=None, **kwargs):
        from elmscale.distributed.ray_tasks import iter_tasks

        yield from iter_tasks(
            fn,
            items,
            shared=shared,
            ray_address=self.address,
            num_cpus=self.num_cpus,
            max_retries=self.max_retries,
            describe=describe,
            **kwargs,
        )

    def on_every_machine(self, fn):
        from elmscale.distributed.ray_tasks import on_every_node

        on_every_node(fn, ray_address=self.address)
        fn()

    def reduce(self, fn, items, combine, *, shared=None, label=None, **kwargs):
        parts = self.map(fn, items, shared=shared, label=label, **kwargs)
        if not parts:
            raise ValueError("no pieces to reduce: the data set has no rows")
        total = parts[0]
        for part in parts[1:]:
            total = combine(total, part)
        return total


def _with_budget(item, *, _fn, _budget, **kwargs):
    with thread_budget(_budget):
        return _fn(item, **kwargs)


def make_executor(
    *,
    client=None,
    ray_address: str | None = None,
    n_threads: int | None = None,
    side_by_side: bool = True,
) -> Executor:
    """A Dask executor for ``client``, else a Ray one for ``ray_address``, else this
    process on ``n_threads`` threads."""
    if client is not None and ray_address is not None:
        raise ValueError("give a Dask client or a Ray address, not both")
    if client is not None:
        return DaskExecutor(client)
    if ray_address is not None:
        return RayExecutor(ray_address)
    return LocalExecutor(n_threads, side_by_side=side_by_side)


# -- work units (the data plane's calling convention) ------------------------------------
# Unit functions take ``n_threads`` themselves and set their own budget.


#: A NumPy array up to this size goes to the workers inside each task's message (from the
#: scheduler, as the task's other arguments do) rather than scattered: no scatter round
#: trip, and no copies between the workers, which a broadcast scatter makes (Dask's
#: replicate; a test of the collections' fits saw a 4,800-byte candidate block move so).
#: Small, because every task carries its own copy: a billion rows are about 3,800 units
#: (``MAX_UNIT_ROWS``), 30 MB through the scheduler in a pass at this size
INLINE_BROADCAST_BYTES = 8 * 1024


def broadcast(value, client):
    """``value`` itself without a client, or when it is a NumPy array of at most
    ``INLINE_BROADCAST_BYTES`` (it travels with each task); otherwise a future of it,
    copied to every worker."""
    if client is None:
        return value
    DaskExecutor(client)  # checks the client
    if isinstance(value, np.ndarray) and value.nbytes <= INLINE_BROADCAST_BYTES:
        return value
    return client.scatter(value, broadcast=True, hash=False)


def _unit_threads(client, threads_per_task: int | None) -> int:
    if client is None:
        return resolve_n_threads(threads_per_task)
    return 1 if threads_per_task is None else int(threads_per_task)


def _unit_executor(client, n_threads: int, fan_in: int = FAN_IN) -> Executor:
    # without a client, units run one after another, each on all of this process's cores
    if client is None:
        return LocalExecutor(side_by_side=False)
    return DaskExecutor(client, threads_per_task=n_threads, fan_in=fan_in)


def map_units(
    fn: Callable,
    units: Sequence,
    *,
    client=None,
    threads_per_task: int | None = None,
    label: str | None = None,
    **kwargs,
) -> list:
    """``[fn(unit, **kwargs, n_threads=...) for unit in units]``, on the cluster if given.

    ``threads_per_task``: BLAS / numba threads inside each call; default all of this
    process's cores without a client, 1 per task with one (one task per worker thread).
    """
    n_threads = _unit_threads(client, threads_per_task)
    executor = _unit_executor(client, n_threads)
    return executor.map(fn, units, label=label, n_threads=n_threads, **kwargs)


def reduce_units(
    fn: Callable,
    units: Sequence,
    combine: Callable,
    *,
    client=None,
    threads_per_task: int | None = None,
    fan_in: int = FAN_IN,
    label: str | None = None,
    record=None,
    **kwargs,
):
    """``combine(*[fn(unit, **kwargs) for unit in units])``, summed in a tree on the cluster.

    ``combine(*parts)`` must add its parts (associative); without a client the results
    are added one at a time as they come, so memory holds two of them.  ``record``: a
    ``breakdown.DaskPass`` told the tasks sent (on a cluster).
    """
    units = list(units)
    if not units:
        raise ValueError("no work units: the data set has no rows")
    n_threads = _unit_threads(client, threads_per_task)
    executor = _unit_executor(client, n_threads, fan_in)
    if record is not None and client is not None:  # (here, the record times the call)
        kwargs["record"] = record
    return executor.reduce(fn, units, combine, label=label, n_threads=n_threads, **kwargs)
