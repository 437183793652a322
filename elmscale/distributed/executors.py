"""Running a unit function over work units: in this process, or on a Dask cluster.

The caller passes a ``distributed.Client`` (never created here).  Without one, the units
run one after another in this process under its thread budget; with one, each unit is a
task (its worker's BLAS and numba capped at ``threads_per_task``), results are summed on
the workers in a tree of fan-in ``fan_in`` and only the total comes back.  Dask re-runs
the tasks of a worker that dies, so a reduction survives a lost worker; every task is a
pure function of its unit, so the re-run gives the same values, and the tree's shape
depends only on the number of units, so the sum is the same too.

Large constant arguments (a matrix of points, a fitted model) go through
:func:`broadcast`: scattered once to every worker, passed to tasks by reference.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from elmscale.core.threads import resolve_n_threads

__all__ = ["broadcast", "map_units", "reduce_units"]

#: Partial results summed per tree node on the workers.
FAN_IN = 4


def _check_client(client) -> None:
    if client is None:
        return
    from distributed import Client

    if not isinstance(client, Client):
        raise TypeError(f"client must be a distributed.Client or None; got "
                        f"{type(client).__name__}")


def broadcast(value, client):
    """``value`` itself without a client; a future of it, copied to every worker, with one."""
    _check_client(client)
    if client is None:
        return value
    return client.scatter(value, broadcast=True, hash=False)


def _task_threads(client, threads_per_task: int | None) -> int:
    if client is None:
        return resolve_n_threads(threads_per_task)
    return 1 if threads_per_task is None else int(threads_per_task)


def map_units(fn: Callable, units: Sequence, *, client=None, threads_per_task: int | None = None,
              **kwargs) -> list:
    """``[fn(unit, **kwargs, n_threads=...) for unit in units]``, on the cluster if given.

    ``threads_per_task``: BLAS / numba threads inside each call; default all of this
    process's cores without a client, 1 per task with one (one task per worker thread).
    """
    _check_client(client)
    n_threads = _task_threads(client, threads_per_task)
    if client is None:
        return [fn(unit, n_threads=n_threads, **kwargs) for unit in units]
    futures = client.map(fn, list(units), pure=False, n_threads=n_threads, **kwargs)
    return client.gather(futures)


def reduce_units(fn: Callable, units: Sequence, combine: Callable, *, client=None,
                 threads_per_task: int | None = None, fan_in: int = FAN_IN, **kwargs):
    """``combine(*[fn(unit, **kwargs) for unit in units])``, summed in a tree on the cluster.

    ``combine(*parts)`` must add its parts (associative); without a client the results
    are added one at a time as they come, so memory holds two of them.
    """
    _check_client(client)
    units = list(units)
    if not units:
        raise ValueError("no work units: the data set has no rows")
    n_threads = _task_threads(client, threads_per_task)
    if client is None:
        total = None
        for unit in units:
            part = fn(unit, n_threads=n_threads, **kwargs)
            total = part if total is None else combine(total, part)
        return total
    level = client.map(fn, units, pure=False, n_threads=n_threads, **kwargs)
    while len(level) > 1:
        level = [client.submit(combine, *level[i:i + fan_in], pure=False)
                 for i in range(0, len(level), fan_in)]
    return level[0].result()
