"""A Dask LocalCluster on this machine's cores that stays quiet while it waits.

The fits a local cluster runs share its cores with it: the kernel dual gathered on the
client runs on this process's threads beside the idle workers, and a worker's fit beside
the other workers' event loops.  Dask's defaults wake every process often for its own
diagnostics: the event loop's tick every 20 ms (``distributed.admin.tick.interval``: it
notices a blocked loop) and each worker's statistical profiler every 10 ms
(``distributed.worker.profile``).  Measured here (2 cores, an idle 2-worker cluster, 10 s):
the client process (scheduler and client) woke 114 times a second, each worker 102, and
the three used 0.93 s of CPU; with a 1 s tick and no profiler, 15 and 4 times a
second.  Each wake takes a core from a 2-thread solve for a moment, and the solve's two
threads wait for each other at every pass: the 150,000-row kernel dual took 26.3-26.6 s
beside the default cluster against 23.4-24.4 s with no cluster.  A cluster started here
(``elmscale run``'s local default, the benchmarks') keeps the tick at a second and the
profiler off; a user's own cluster keeps the user's settings.
"""

from __future__ import annotations

__all__ = ["QUIET_DASK", "start_local_cluster"]

# Dask's diagnostics that wake an idle process (see the module's docstring)
QUIET_DASK = {
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.profile.enabled": False,
}


def start_local_cluster(
    n_workers: int, threads_per_worker: int, config: dict = QUIET_DASK, **options
):
    """A ``distributed.LocalCluster`` of ``n_workers`` processes of ``threads_per_worker``
    threads, started under the Dask configuration ``config`` (default :data:`QUIET_DASK`;
    ``{}``: Dask's own; its workers take the configuration they are started with);
    ``options`` go to ``LocalCluster``."""
    import dask
    from distributed import LocalCluster

    with dask.config.set(config):
        return LocalCluster(
            n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True, **options
        )
