"""The benchmarks' 2-worker Dask LocalCluster: one thread per worker process, on
127.0.0.1, no dashboard, no memory limit (the benchmarks measure the memory themselves),
Dask's idle wake-ups off as on ``elmscale run``'s local cluster
(``elmscale.distributed.local_cluster``) unless ``dask_defaults``.

Starting it also makes SIGTERM raise in the script's main thread (as Ctrl-C does), so that
a benchmark stopped with ``kill`` unwinds its ``with`` block and closes the cluster; killed
outright, its worker processes end by themselves (each watches a pipe to this process).
"""

from distributed import LocalCluster

from elmscale.core.lifeline import terminate_raises
from elmscale.distributed.local_cluster import QUIET_DASK, start_local_cluster


def two_worker_cluster(n_workers: int = 2, dask_defaults: bool = False) -> LocalCluster:
    """The benchmarks' LocalCluster: ``n_workers`` (2) processes of one thread each, with
    Dask's default diagnostics (a 20 ms tick, the workers' profiler) when
    ``dask_defaults``."""
    terminate_raises()
    return start_local_cluster(
        n_workers,
        1,
        config={} if dask_defaults else QUIET_DASK,
        dashboard_address=None,
        host="127.0.0.1",
        memory_limit=0,
    )
