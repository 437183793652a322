"""The random-node sparse ELM (L = 200 sigmoid nodes, C = 1) fitted from Parquet by CoCoA+
rounds on a 2-worker Dask LocalCluster, against the single-process solver.

    python benchmarks/sparse_elm_dask.py            # 1M rows against one process; 10M, 20M
    python benchmarks/sparse_elm_dask.py --quick    # 100k rows against one process; 200k, 400k
    python benchmarks/sparse_elm_dask.py --cap-rounds 3   # 20M for its memory only
    python benchmarks/sparse_elm_dask.py --small 100000 --memory-rounds 2   # 10M, 20M: memory

Data: benchmarks/make_parquet.py's generated problem (8 features, 3 % label noise; row i
the same in every size, so the first 1M rows of the 10M set are the 1M set), kept in
--data-dir between runs.  Test accuracy on 100k fresh rows.

1. On the small set (1M rows): the single-process solver in this process (rows in memory,
   both cores: its one-vs-one pair uses two threads) against CoCoA+ on the cluster; prints
   both times, their ratio, the objectives and their relative difference (target: within
   tol), and both test accuracies.
2. On the large sets (10M, 20M): CoCoA+ on the cluster, each size with fresh workers;
   prints the rounds, the relative duality gap (target: below tol), wall time, test
   accuracy against the single-process model of step 1 (target: within 0.1 point), and the
   peak RSS of the coordinator and of each worker (target: flat when the rows double).

``--cache-mb`` is each worker's cache of hidden outputs (default 2,048 MB: a 5M-row block
of 200 nodes is 4 GB, so the large sets stream their units, the memory bounded).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from distributed import Client
from make_parquet import make_parquet
from peak_rss import measured
from two_workers import two_worker_cluster

from elmscale import SparseELMClassifier, open_parquet
from elmscale.data import generate_classification


def _model(args) -> SparseELMClassifier:
    return SparseELMClassifier(
        hidden="sigmoid", n_hidden=args.n_hidden, C=1.0, tol=args.tol, random_state=0
    )


def _cocoa(args, path, client, test, max_rounds=None):
    ds = open_parquet(path, label="label")
    model = _model(args).set_params(max_iter=-1 if max_rounds is None else max_rounds)
    fitted, seconds, coordinator, workers = measured(
        lambda: model.fit(ds, client=client, cache_mb=args.cache_mb), client
    )
    accuracy = float(np.mean(fitted.predict(test.X) == test.y))
    return fitted, seconds, coordinator, workers, accuracy


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--small", type=int, default=None, help="rows against one process")
    parser.add_argument("--large", type=int, nargs="*", default=None, help="rows on the cluster")
    parser.add_argument("--n-hidden", type=int, default=200)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--cache-mb", type=float, default=2048.0)
    parser.add_argument(
        "--cap-rounds",
        type=int,
        default=None,
        help="rounds at most for the large sets after the first (their memory, not their "
        "convergence, is measured)",
    )
    parser.add_argument(
        "--memory-rounds",
        type=int,
        default=None,
        help="rounds at most for every large set, the first included (their peak memory "
        "compared at equal rounds, not their convergence)",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    small = args.small or (100_000 if args.quick else 1_000_000)
    large = (
        args.large
        if args.large is not None
        else ([200_000, 400_000] if args.quick else [10_000_000, 20_000_000])
    )
    test = generate_classification(100_000, 8, random_state=12345)
    sets = {}
    for n in [small, *large]:
        start = time.perf_counter()
        sets[n] = make_parquet(args.data_dir / f"classification-{n}", n)
        print(f"data {n:>11,} rows: {time.perf_counter() - start:.1f} s", flush=True)
    print(
        f"SparseELMClassifier(hidden='sigmoid', n_hidden={args.n_hidden}, C=1, "
        f"tol={args.tol:g}); 2-worker LocalCluster (1 thread each), cache {args.cache_mb:.0f} MB"
    )

    X, y = open_parquet(sets[small], label="label").read()
    single, single_s, single_peak, _ = measured(lambda: _model(args).fit(X, y))
    X = y = None  # freed before the cluster starts
    single_acc = float(np.mean(single.predict(test.X) == test.y))
    print(
        f"  single process {small:>11,} rows: {single_s:8.1f} s, {single.n_iter_[0]} passes, "
        f"objective {single.objective_[0]:.6e}, test acc {single_acc:.4f}, "
        f"peak RSS {single_peak:.0f} MB",
        flush=True,
    )
    with two_worker_cluster() as cluster, Client(cluster) as client:
        fitted, seconds, coordinator, workers, accuracy = _cocoa(args, sets[small], client, test)
    rel = (fitted.objective_[0] - single.objective_[0]) / abs(single.objective_[0])
    print(
        f"  CoCoA+         {small:>11,} rows: {seconds:8.1f} s, {fitted.n_iter_[0]} rounds, "
        f"gap {fitted.duality_gap_[0]:.2e}, objective {fitted.objective_[0]:.6e} "
        f"(relative to one process {rel:+.2e}, {'within' if abs(rel) <= args.tol else 'NOT within'}"
        f" tol), test acc {accuracy:.4f}; time ratio CoCoA+ / one process "
        f"{seconds / single_s:.2f}x",
        flush=True,
    )
    peaks = {}
    for i, n in enumerate(large):
        cap = (
            args.memory_rounds
            if args.memory_rounds is not None
            else (args.cap_rounds if i > 0 else None)
        )
        with two_worker_cluster() as cluster, Client(cluster) as client:
            fitted, seconds, coordinator, workers, accuracy = _cocoa(
                args, sets[n], client, test, cap
            )
        peaks[n] = (coordinator, workers)
        ok_gap = bool(np.all(fitted.duality_gap_ <= args.tol))
        print(
            f"  CoCoA+         {n:>11,} rows: {seconds:8.1f} s, {fitted.n_iter_[0]} rounds, "
            f"gap {fitted.duality_gap_[0]:.2e} ({'below' if ok_gap else 'NOT below'} tol"
            f"{f'; capped at {cap} rounds' if cap is not None else ''}), "
            f"test acc {accuracy:.4f} ({100 * (accuracy - single_acc):+.2f} points against "
            f"one process on {small:,} rows), support {fitted.support_.size:,}, "
            f"peak RSS coordinator {coordinator:.0f} MB, workers "
            f"{', '.join(f'{w:.0f}' for w in workers)} MB",
            flush=True,
        )
    if len(large) >= 2:
        a, b = large[0], large[-1]
        ratios = [peaks[b][0] / peaks[a][0]] + [w2 / w1 for w1, w2 in zip(peaks[a][1], peaks[b][1])]
        print(
            f"  peak RSS {b:,} / {a:,} rows: coordinator {ratios[0]:.2f}x, workers "
            f"{', '.join(f'{r:.2f}x' for r in ratios[1:])}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
