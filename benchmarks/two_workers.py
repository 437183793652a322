"""The benchmarks' 2-worker Dask LocalCluster: one thread per worker process, on
127.0.0.1, no dashboard, no memory limit (the benchmarks measure the memory themselves)."""

from distributed import LocalCluster


def two_worker_cluster() -> LocalCluster:
    return LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        host="127.0.0.1",
        memory_limit=0,
    )
