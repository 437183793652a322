"""The same work from an object store as from a local folder: the ELM's Gram fit, the
random-node sparse ELM's Newton fit and ``elmscale score`` of N rows at an ``s3://`` URL,
against the same rows in a local folder (issue 51's target: at most 1.3x the local time
each), and the bytes read from the store per pass against the data's size.

    python benchmarks/object_storage.py            # 2,000,000 rows x 8 features
    python benchmarks/object_storage.py --quick    # 100,000 rows, for CI

The store is a real S3 endpoint on 127.0.0.1 that this script starts in a process of its
own (moto's server, ``tests/_s3.py``: the tests' own), reached through s3fs and pyarrow as
a user's code reaches S3; it counts the bytes of object data it sends.  The fits run on a
2-worker Dask LocalCluster (one thread each): each worker reads its units' row groups
straight from the store.  ``elmscale score`` runs as the command runs it (in this
process, file after file).  Each measurement is the best of ``--repeats``, local and s3://
in turn, after one run of each not timed (imports, compiled kernels, the workers' first
connections).  Run it alone: the ratios are of two timings on the same busy or idle cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from distributed import Client
from two_workers import two_worker_cluster

from elmscale import ELMClassifier, SparseELMClassifier, open_parquet, save
from elmscale.app.cli import main as elmscale_main
from elmscale.data import write_generated_parquet

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from _s3 import local_s3  # noqa: E402

TARGET = 1.3
PARTS = ("gram", "newton", "score")


def _store_process():
    """The store's server process (``local_s3(own_process=True)``: this process's child
    running tests/_s3.py), for its CPU time; None where it is not found."""
    import psutil

    for child in psutil.Process().children(recursive=True):
        try:
            if "_s3.py" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    return None


def _cpu_seconds(process) -> float:
    if process is None:
        return float("nan")
    times = process.cpu_times()
    return times.user + times.system


def _compare(local_run, remote_run, repeats: int, server) -> tuple[float, float, int, float]:
    """The best times of ``local_run()`` and ``remote_run()``, called in turn ``repeats``
    times each after one call of each not timed, the object bytes the store sent during
    one remote call, and the CPU seconds the store's server spent in it: on this machine
    the server shares the client's cores, which a store on other machines would not."""
    local_run(), remote_run()
    store = _store_process()
    local, remote, sent, store_cpu = [], [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        local_run()
        local.append(time.perf_counter() - start)
        before, cpu_before = server.bytes_sent(), _cpu_seconds(store)
        start = time.perf_counter()
        remote_run()
        remote.append(time.perf_counter() - start)
        sent.append(server.bytes_sent() - before)
        store_cpu.append(_cpu_seconds(store) - cpu_before)
    return min(local), min(remote), min(sent), min(store_cpu)


def _line(
    what: str,
    local: float,
    remote: float,
    sent: int,
    size: int,
    reads: str,
    n_reads: int,
    store_cpu: float,
):
    """One measurement: the times, their ratio, the store server's own CPU seconds in the
    remote run (on the same cores here), and the bytes read from the store in all and per
    read of the data (``n_reads`` of them, ``reads`` naming them), against the data's
    size."""
    ratio = remote / local
    print(
        f"  {what:<14} local {local:7.2f} s   s3 {remote:7.2f} s   ratio {ratio:.2f} "
        f"({'within' if ratio <= TARGET else 'over'} {TARGET}x; the store's server used "
        f"{store_cpu:.2f} s of CPU on these cores)   read from the store "
        f"{sent / 1e6:,.1f} MB = {sent / size:.3f}x the data; per read of the data "
        f"({n_reads}: {reads}) {sent / n_reads / size:.3f}x"
    )
    return ratio


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--n-hidden", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument(
        "--parts", nargs="+", choices=PARTS, default=list(PARTS), help="what to measure"
    )
    args = parser.parse_args(argv)
    rows = args.rows or (100_000 if args.quick else 2_000_000)
    repeats = args.repeats or 2
    # one BLAS thread per worker and here: the same work on the same cores, both ways
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")
    with (
        tempfile.TemporaryDirectory(prefix="elmscale-bench-") as tmp,
        local_s3(own_process=True) as server,
    ):
        tmp = Path(tmp)
        local = write_generated_parquet(tmp / "data", rows, 8, rows_per_file=-(-rows // 4))
        fs, options = server.filesystem(), server.storage_options
        bucket = server.new_bucket("bench")
        fs.put(f"{local}/", f"{bucket}/data/", recursive=True)
        url = f"s3://{bucket}/data/"
        size = sum(f.stat().st_size for f in local.glob("*.parquet"))
        print(
            f"{rows:,} rows x 8 features in {len(list(local.glob('*.parquet')))} Parquet files "
            f"({size / 1e6:,.1f} MB), local folder vs {url} on moto's S3 server at "
            f"{server.endpoint}; best of {repeats}"
        )
        here = open_parquet(local, label="label")
        there = open_parquet(url, label="label", storage_options=options)
        ratios = {}
        elm = ELMClassifier(hidden="sigmoid", n_hidden=args.n_hidden, random_state=0)
        with two_worker_cluster() as cluster, Client(cluster) as client:
            client.run(lambda: ELMClassifier(n_hidden=4).fit(np.zeros((4, 2)), [0, 1, 0, 1]))

            def gram(dataset):
                return lambda: ELMClassifier(**elm.get_params()).fit(dataset, client=client)

            model = gram(here)()  # the model scored below
            if "gram" in args.parts:
                local_s, remote_s, sent, store_cpu = _compare(
                    gram(here), gram(there), repeats, server
                )
                print(f"ELMClassifier(n_hidden={args.n_hidden}) Gram fit, 2-worker LocalCluster:")
                ratios["gram"] = _line(
                    "Gram fit", local_s, remote_s, sent, size, "the Gram pass", 1, store_cpu
                )
            if "newton" in args.parts:

                def newton(dataset):
                    return lambda: SparseELMClassifier(
                        hidden="sigmoid", n_hidden=200, C=1.0, tol=1e-3, random_state=0
                    ).fit(dataset, client=client)

                # the Newton iterations (n_iter_) do not each read the data: the fit reads
                # it twice, the column statistics' pass and the data pass
                n_iter = int(np.max(newton(here)().n_iter_))
                local_s, remote_s, sent, store_cpu = _compare(
                    newton(here), newton(there), repeats, server
                )
                print(
                    "SparseELMClassifier(n_hidden=200, C=1) Newton fit, same cluster "
                    f"({n_iter} Newton iterations):"
                )
                ratios["newton"] = _line(
                    "Newton fit",
                    local_s,
                    remote_s,
                    sent,
                    size,
                    "the column statistics' pass and the data pass",
                    2,
                    store_cpu,
                )
        if "score" in args.parts:
            model_file = tmp / "model.elm"
            save(model, model_file)
            os.environ["AWS_ENDPOINT_URL"] = server.endpoint  # the command's endpoint
            runs = iter(range(10**6))

            def score(source, out):
                def run():
                    argv = ["score", str(model_file), source, f"{out}/{next(runs)}", "--quiet"]
                    if elmscale_main(argv) != 0:
                        raise RuntimeError(f"elmscale {' '.join(argv)} failed")

                return run

            local_s, remote_s, sent, store_cpu = _compare(
                score(str(local), str(tmp / "scores")),
                score(url, f"s3://{bucket}/scores"),
                repeats,
                server,
            )
            print("elmscale score (in this process, file after file):")
            ratios["score"] = _line(
                "score",
                local_s,
                remote_s,
                sent,
                size,
                "the scoring pass, the plan's footer reads included",
                1,
                store_cpu,
            )
    worst = max(ratios, key=ratios.get)
    print(f"largest ratio: {worst} {ratios[worst]:.2f} (target <= {TARGET})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
