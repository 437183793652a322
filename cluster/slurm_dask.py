"""Dask workers on Slurm (dask-jobqueue), then ``elmscale run`` against their scheduler.

    pip install dask-jobqueue
    python cluster/slurm_dask.py pipelines/large_parquet_elm.toml --jobs 4

Each Slurm job runs one worker process per core with one thread each (elmscale caps BLAS
and numba at one thread per task).  Adjust queue, account and walltime to your site.
"""

import argparse
import subprocess
import sys

from dask_jobqueue import SLURMCluster
from distributed import Client


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("pipeline")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--memory", default="32GB")
    parser.add_argument("--queue", default=None)
    parser.add_argument("--walltime", default="02:00:00")
    args = parser.parse_args()
    cluster = SLURMCluster(
        cores=args.cores,
        processes=args.cores,
        memory=args.memory,
        queue=args.queue,
        walltime=args.walltime,
    )
    cluster.scale(jobs=args.jobs)
    with Client(cluster) as client:
        client.wait_for_workers(args.jobs * args.cores)
        address = cluster.scheduler_address
        result = subprocess.run(["elmscale", "run", args.pipeline, "--scheduler", address])
    cluster.close()
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
