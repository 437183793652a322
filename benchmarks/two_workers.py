"""The benchmarks' 2-worker Dask LocalCluster: one thread per worker process, on
127.0.0.1, no dashboard, no memory limit (the benchmarks measure the memory themselves).

Starting it also makes SIGTERM raise in the script's main thread (as Ctrl-C does), so that
a benchmark stopped with ``kill`` unwinds its ``with`` block and closes the cluster; killed
outright, its worker processes end by themselves (each watches a pipe to this process).
"""

from distributed import LocalCluster

from elmscale.core.lifeline import terminate_raises


def two_worker_cluster(n_workers: int = 2) -> LocalCluster:
    """The benchmarks' LocalCluster: ``n_workers`` (2) processes of one thread each."""
    terminate_raises()
    return LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
        memory_limit=0,
    )
