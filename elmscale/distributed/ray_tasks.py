"""Independent pieces of work (one-vs-one pairs, grid-search pieces) as Ray tasks.

:func:`run_tasks` runs ``fn(item, **shared, **kwargs)`` for every item as a Ray task
and returns the results in item order.  Large arrays go in ``shared``: each is put in
the object store once and passed to every task by reference (numpy arrays arrive
zero-copy and read-only).  Each task holds ``num_cpus`` CPUs and caps its BLAS and numba
threads to the same number.  Ray re-runs a task whose worker process dies
(``max_retries``); a task that raises is reported with its item's description.

Connecting is the caller's choice (:func:`connect`): an initialised Ray is used as it
is; otherwise ``ray_address`` names the cluster ("auto" for the one started by
``ray start``, "ray://host:10001", "host:6379").  Nothing here starts a cluster unless
the address asks for one ("local").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from elmscale.core.errors import PieceFailed
from elmscale.core.threads import thread_budget

__all__ = ["PieceFailed", "connect", "iter_tasks", "on_every_node", "run_tasks"]


def _refuse_partition_units(items) -> None:
    """A Dask collection's partitions live in Dask workers' memory, which a Ray task
    cannot reach: refuse their units before anything starts (not a "not attached" error
    from inside a task)."""
    from elmscale.data.work_units import partition_keys

    for item in items:
        if partition_keys(item):
            raise ValueError(
                "Ray tasks cannot read a Dask collection's partitions (they live in the Dask "
                "workers' memory): fit Dask collections with their Dask client (without "
                "ray_address), or write them to Parquet (dd.to_parquet) and fit that with Ray"
            )


def connect(ray_address: str | None = "auto") -> None:
    """Use the initialised Ray, or connect to ``ray_address``."""
    import ray

    from elmscale.distributed.connect import connect_ray

    if ray.is_initialized():
        return
    if ray_address is None:
        raise ValueError(
            "Ray is not initialised: call ray.init() first or pass ray_address "
            "(for example 'auto' for a cluster started with `ray start`)"
        )
    connect_ray(ray_address, log_to_driver=False)


def _run_piece(fn, item, names, n_threads, kwargs, *values):
    with thread_budget(n_threads):
        return fn(item, **dict(zip(names, values)), **kwargs)


def run_tasks(
    fn: Callable,
    items: Sequence,
    *,
    shared: dict | None = None,
    ray_address: str | None = "auto",
    num_cpus: int = 1,
    max_retries: int = 3,
    describe: Callable | None = None,
    on_done: Callable | None = None,
    **kwargs,
) -> list:
    """``[fn(item, **shared, **kwargs) for item in items]`` as Ray tasks, in item order.

    ``on_done(n_done, n_total)`` is called as results arrive (progress);
    ``describe(item)`` names a piece in the error raised when it fails.
    """
    items = list(items)
    results: list = [None] * len(items)
    done = 0
    for index, result in iter_tasks(
        fn,
        items,
        shared=shared,
        ray_address=ray_address,
        num_cpus=num_cpus,
        max_retries=max_retries,
        describe=describe,
        **kwargs,
    ):
        results[index] = result
        done += 1
        if on_done is not None:
            on_done(done, len(results))
    return results


def iter_tasks(
    fn: Callable,
    items: Sequence,
    *,
    shared: dict | None = None,
    ray_address: str | None = "auto",
    num_cpus: int = 1,
    max_retries: int = 3,
    describe: Callable | None = None,
    **kwargs,
) -> Iterator[tuple[int, object]]:
    """``(index, fn(items[index], **shared, **kwargs))`` as each Ray task finishes.

    A failed piece cancels the others and raises :class:`PieceFailed` naming it
    (``describe(item)``); so does closing the generator early (the rest are cancelled).
    """
    import ray

    items = list(items)
    _refuse_partition_units(items)
    connect(ray_address)
    shared = shared or {}
    names = tuple(shared)
    refs = [ray.put(value) for value in shared.values()]
    remote = ray.remote(_run_piece).options(
        num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False
    )
    pending = {
        remote.remote(fn, item, names, num_cpus, kwargs, *refs): i for i, item in enumerate(items)
    }
    try:
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                index = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except ray.exceptions.RayTaskError as exc:
                    what = describe(items[index]) if describe else f"piece {index}"
                    cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                    raise PieceFailed(f"{what} failed: {type(cause).__name__}: {cause}") from cause
                yield index, result
    finally:
        for other in pending:
            ray.cancel(other)


def _call(fn):
    return fn()


def on_every_node(fn: Callable, *, ray_address: str | None = "auto", timeout: float = 60.0):
    """``fn()`` once on every live node of the cluster, each a task pinned to its node
    (no CPU held); waits ``timeout`` seconds at most, its failures ignored."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    connect(ray_address)
    remote = ray.remote(num_cpus=0, max_retries=0)(_call)
    refs = [
        remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        ).remote(fn)
        for node in ray.nodes()
        if node["Alive"]
    ]
    if refs:
        ray.wait(refs, num_returns=len(refs), timeout=timeout)
