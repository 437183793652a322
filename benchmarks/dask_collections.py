"""Fits from a persisted Dask DataFrame against the same fits from Parquet: the
random-node sparse ELM's Newton fit and the ELM's Gram fit of N rows on a 2-worker Dask
LocalCluster, their times, the bytes moved between workers during the Dask fit (the
workers' transfer logs) against the data's size (issue 51's target: at most 1 %), and
whether the two models are the same to the bit.

    python benchmarks/dask_collections.py            # 2,000,000 rows x 8 features
    python benchmarks/dask_collections.py --quick    # 100,000 rows, for CI

The DataFrame's partitions are the Parquet files' row groups (one partition read from each
row group on a worker), so both fits map the same units and sum them in the same order;
the partitions are dealt to the workers in contiguous halves, or in turn (see
``PLACEMENTS``).  The transfer logs count Dask's size of each object moved; "partial results" are
the reductions' sums (a unit's Gram, its tree's sums), the rest is anything else, rows
included.  Each time is the best of ``--repeats`` after one run of each not timed.  Run it
alone: the ratios are of two timings on the same busy or idle cores.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from distributed import Client, wait
from two_workers import two_worker_cluster

from elmscale import ELMClassifier, SparseELMClassifier, open_parquet
from elmscale.data import write_generated_parquet

TARGET = 0.01
#: Task names whose results are a reduction's partial results (see the docstring)
PARTIAL_RESULTS = ("_attached-", "_with_budget-", "combine-", "add_arrays-")


def _unit_frame(unit):
    """One Parquet unit's rows as a pandas DataFrame (features, then the label)."""
    import pandas as pd

    X, y = unit.read()
    frame = pd.DataFrame(X, columns=list(unit.features))
    frame[unit.label] = y
    return frame


#: How the partitions are dealt to the workers: contiguous halves of the rows, or in turn.
#: A reduction sums the units' results in row order (so that the model is the Parquet
#: fit's to the bit): units in halves meet their neighbours on their own worker, units in
#: turn meet them on the other one, and more partial results cross between workers.
PLACEMENTS = ("in halves", "in turn")


def _persisted(client, units, way: str):
    """A Dask DataFrame of one partition per unit (a Parquet row group), each read on the
    worker that ``way`` deals it to, and persisted there."""
    import dask.dataframe as dd

    workers = sorted(client.nthreads())
    n = len(units)

    def home(i: int) -> str:
        if way == "in turn":
            return workers[i % len(workers)]
        return workers[i * len(workers) // n]

    parts = [client.submit(_unit_frame, u, workers=[home(i)]) for i, u in enumerate(units)]
    wait(parts)
    meta = _unit_frame(units[0].head(1)).iloc[:0]
    frame = client.persist(dd.from_delayed(parts, meta=meta, verify_meta=False))
    wait(frame)
    return frame


def _logs(client) -> dict:
    return client.run(lambda dask_worker: list(dask_worker.transfer_incoming_log))


def _moved_since(client, before: dict) -> dict:
    """``{key: bytes}`` moved between workers since ``before`` (a ``_logs``)."""
    return {
        key: n
        for worker, log in _logs(client).items()
        for entry in log[len(before.get(worker, [])) :]
        for key, n in entry["keys"].items()
    }


def _same_to_the_bit(a, b) -> bool:
    """Whether two fitted models' attributes are equal to the bit (timings aside)."""
    for name, value in vars(a).items():
        if not name.endswith("_") or name.startswith("_") or "seconds" in name:
            continue
        other = vars(b).get(name)
        if isinstance(value, np.ndarray) or np.ndim(value):
            if not np.array_equal(np.asarray(value), np.asarray(other)):
                return False
        elif hasattr(value, "to_dict"):
            if repr(value.to_dict()) != repr(other.to_dict()):
                return False
        elif value != other and not (value != value and other != other):
            return False
    return True


def _best(run, repeats: int):
    """``(fastest seconds, last model)`` of ``repeats`` calls after one more not timed."""
    model = run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model = run()
        times.append(time.perf_counter() - start)
    return min(times), model


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument(
        "--n-hidden", type=int, default=None, help="hidden nodes (default 200; --quick: 40)"
    )
    parser.add_argument("--repeats", type=int, default=None)
    args = parser.parse_args(argv)
    rows = args.rows or (100_000 if args.quick else 2_000_000)
    repeats = args.repeats or (1 if args.quick else 2)
    # (an L x L Gram is a fixed cost: against --quick's 4 MB, 200 nodes' 0.3 MB is 8 %)
    n_hidden = args.n_hidden or (40 if args.quick else 200)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")

    with tempfile.TemporaryDirectory(prefix="elmscale-bench-") as tmp:
        path = write_generated_parquet(Path(tmp) / "data", rows, 8, rows_per_file=-(-rows // 4))
        dataset = open_parquet(path, label="label")
        with two_worker_cluster() as cluster, Client(cluster) as client:
            units = dataset.units()
            frames = {way: _persisted(client, units, way) for way in PLACEMENTS}
            size = int(frames["in turn"].memory_usage(index=False).sum().compute())
            print(
                f"{rows:,} rows x 8 features: Parquet ({len(dataset.files)} files, "
                f"{len(units)} row groups) vs a persisted Dask DataFrame of the same "
                f"{len(units)} partitions ({size / 1e6:,.1f} MB in memory), dealt to the "
                f"workers in halves or in turn; 2-worker LocalCluster, one thread each; "
                f"best of {repeats}"
            )
            fits = {
                f"ELMClassifier(n_hidden={n_hidden}) Gram fit": (
                    lambda: ELMClassifier(hidden="sigmoid", n_hidden=n_hidden, random_state=0),
                    PLACEMENTS,
                ),
                f"SparseELMClassifier(n_hidden={n_hidden}) Newton fit": (
                    lambda: SparseELMClassifier(
                        hidden="sigmoid", n_hidden=n_hidden, C=1.0, tol=1e-3, random_state=0
                    ),
                    ("in turn",),
                ),
            }
            worst = 0.0
            for what, (make, ways) in fits.items():
                parquet_s, from_parquet = _best(lambda: make().fit(dataset, client=client), repeats)
                print(f"{what}:\n  Parquet                     {parquet_s:7.2f} s")
                for way in ways:
                    frame = frames[way]
                    X, y = frame[list(dataset.features)], frame["label"]
                    before = _logs(client)
                    dask_s, from_dask = _best(lambda: make().fit(X, y, client=client), repeats)
                    moved = _moved_since(client, before)
                    runs = repeats + 1
                    total = sum(moved.values()) / runs
                    partial = sum(n for k, n in moved.items() if str(k).startswith(PARTIAL_RESULTS))
                    held = set(client.who_has(frame))
                    partitions = [k for k in moved if k in held or "_pack" in str(k)]
                    share = total / size
                    worst = max(worst, share)
                    print(
                        f"  Dask DataFrame ({way:<9}) {dask_s:7.2f} s   ratio "
                        f"{dask_s / parquet_s:.2f}   same model to the bit: "
                        f"{_same_to_the_bit(from_parquet, from_dask)}\n"
                        f"    moved between workers per fit: {total / 1e3:,.1f} kB = "
                        f"{100 * share:.3f} % of the data "
                        f"({'within' if share <= TARGET else 'over'} {100 * TARGET:g} %): "
                        f"the reductions' partial results {partial / runs / 1e3:,.1f} kB, "
                        f"other {total - partial / runs:,.0f} B, partitions {len(partitions)}"
                    )
        print(f"largest share moved: {100 * worst:.3f} % of the data (target <= 1 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
