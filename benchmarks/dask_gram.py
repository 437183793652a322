"""ELMClassifier(hidden="sigmoid", n_hidden=1000) fitted from Parquet on a 2-worker Dask
LocalCluster, against the floor: the same model fitted on the same rows already in memory,
in this process, on both cores.

    python benchmarks/dask_gram.py            # 10M rows, then 20M rows (generated, ~0.6 GB)
    python benchmarks/dask_gram.py --quick    # 200k / 400k rows, for CI

The data sets are written by benchmarks/make_parquet.py into --data-dir (kept between runs).
Prints, for each size: wall time, rows/s and the ratio to the floor's rows/s (target >= 0.8),
the peak resident memory of the coordinator and of each worker during the fit (target
< 2 GB each, flat when the rows double); then a 10-value C path with 5 folds on the first
set (one pass for the per-fold Grams, one to score the folds' validation rows), against
one plain fit (target < 1.3x), and the same scored from the Grams only (mean squared error,
no second pass).  Test accuracy on 100k fresh generated rows for every model.  Each Dask
fit's Gram reduction broken down (``gram_timings_``, issue 53): the busiest worker's
compute from Dask's task stream and its thread CPU, the wait, the coordinator's work, the
bytes each way.
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

from elmscale import ELMClassifier, dataplane, open_parquet
from elmscale.data import generate_classification
from elmscale.distributed.breakdown import breakdown_table

CS = np.logspace(-2, 3, 10)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--n-hidden", type=int, default=1000)
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    rows = args.rows or (200_000 if args.quick else 10_000_000)
    sets = {n: make_parquet(args.data_dir / f"classification-{n}", n) for n in (rows, 2 * rows)}
    test = generate_classification(100_000, random_state=1)
    model = ELMClassifier(hidden="sigmoid", n_hidden=args.n_hidden, random_state=0)
    print(
        f"ELMClassifier(hidden='sigmoid', n_hidden={args.n_hidden}), C=1, generated rows x 8 "
        "features; 2-worker LocalCluster (1 thread each) vs in-memory fit on 2 cores"
    )

    start = time.perf_counter()
    with (
        two_worker_cluster() as cluster,
        Client(cluster) as client,
    ):
        startup = time.perf_counter() - start
        client.run(lambda: ELMClassifier(n_hidden=4).fit(np.zeros((4, 2)), [0, 1, 0, 1]))
        print(f"  cluster start {startup:.1f} s")
        fits = {}
        for n, path in sets.items():
            ds = open_parquet(path)
            fitted, seconds, coordinator, workers = measured(
                lambda: ELMClassifier(**model.get_params()).fit(ds, client=client), client
            )
            fits[n] = seconds
            print(
                f"  dask  {n:>11,} rows ({fitted.precision_}): {seconds:7.2f} s, "
                f"{n / seconds / 1e6:.3f} M rows/s, peak RSS coordinator {coordinator:.0f} MB, "
                f"workers {', '.join(f'{w:.0f}' for w in workers)} MB, "
                f"test acc {fitted.score(test.X, test.y):.4f}"
            )
            print("  its Gram reduction (gram_timings_):")
            print("    " + breakdown_table(fitted.gram_timings_).replace("\n", "\n    "))
        ds = open_parquet(sets[rows])
        for scoring in ("accuracy", "neg_mean_squared_error"):
            result, seconds, coordinator, workers = measured(
                lambda: dataplane.cross_validate_path(
                    model, ds, CS, n_folds=5, scoring=scoring, client=client
                ),
                client,
            )
            print(
                f"  CV {len(CS)} C x 5 folds ({scoring}, "
                f"{'2 passes' if scoring == 'accuracy' else '1 pass'}): {seconds:.2f} s = "
                f"{seconds / fits[rows]:.2f}x one fit; best C {result.best_C:.3g} "
                f"(mean score {result.mean_scores.max():.4f}), test acc "
                f"{result.best_estimator.score(test.X, test.y):.4f}; peak RSS coordinator "
                f"{coordinator:.0f} MB, workers {', '.join(f'{w:.0f}' for w in workers)} MB"
            )

    X, y = open_parquet(sets[rows]).read()
    floor_model = ELMClassifier(**model.get_params()).fit(X[:1000], y[:1000])
    floor_model, seconds, _, _ = measured(lambda: ELMClassifier(**model.get_params()).fit(X, y))
    floor = rows / seconds
    print(
        f"  floor {rows:>11,} rows in memory ({floor_model.precision_}): {seconds:7.2f} s, "
        f"{floor / 1e6:.3f} M rows/s, "
        f"test acc {floor_model.score(test.X, test.y):.4f}"
    )
    print(
        f"  throughput ratio dask / floor at {rows:,} rows: "
        f"{rows / fits[rows] / floor:.2f} (target >= 0.8)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
