"""The kernel sparse ELM by the working-set solver, its blocks of rows as Dask actors on a
2-worker LocalCluster, against the one-process dual solver and scikit-learn's SVC.

    python benchmarks/working_set.py                 # COD-RNA, 300,000 and 1,000,000 generated
    python benchmarks/working_set.py --rows 300000   # COD-RNA and 300,000 only
    python benchmarks/working_set.py --blocks        # iterations against K blocks (300,000)
    python benchmarks/working_set.py --q-sweep       # q = 256 ... 4,096 (100,000 rows)
    python benchmarks/working_set.py --crossover     # one process: dual against working set
    python benchmarks/working_set.py --quick         # all four, small, for CI
    python benchmarks/working_set.py --workers 8 --rows 1000000   # on a machine with the cores

Parameters: COD-RNA's usual ones, features scaled to [-1, 1], sigma 0.5 (SVC: gamma = 2),
C 1, tol 1e-3, 200 MB kernel cache, q = ``working_set_size`` (512).  Per set:

* working set: ``SparseELMClassifier`` fitted from the set written as Parquet on a
  LocalCluster of 2 worker processes of 1 thread each, one block (a Dask actor) per worker;
* one process: the same model with ``solver="dual"`` fitted from arrays in this process
  (both cores: its solver's helper thread), cut after ``--dual-limit`` seconds;
* SVC (LIBSVM, one process) in a subprocess cut after ``--svc-limit`` seconds, on sets of
  at most ``--svc-max-rows`` rows (100,000: 300,000 rows did not finish in 30 minutes in
  the divide-and-conquer benchmark's run).

Prints fit time, objective, test accuracy, support vectors, the ratio one-process time /
working-set time (targets: 1.0x at 300,000 rows, 1.5x at 1,000,000, objective within tol,
accuracy within 0.05 points), and the working set's iterations, exact checks, and its
exchanges' seconds (median).

``--blocks``: the working set on 1, 2, 4, 8 and 16 blocks on this process's threads, on
``--rows`` (300,000) rows: iterations (they do not depend on K), fit seconds, and per
iteration the coordinator's seconds (selection and subproblem) and the blocks' (kernel
columns and gradient updates, summed over the blocks), from which the performance page
projects K workers.

Data: COD-RNA's training file from ../shared/data, scaled on its rows; tested on
``--codrna-test`` when given, else on the training rows (and said so).  ``--quick``: 4,000
train / 4,000 held-out rows of it.  The generated sets: ``benchmarks/make_parquet.py``'s
problem (8 features, 3 % label noise) in ``--data-dir``; tested on 20,000 fresh rows.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
from distributed import Client
from make_parquet import make_parquet
from sparse_elm_divide import codrna_sets, svc_fit
from two_workers import two_worker_cluster

from elmscale import SparseELMClassifier, open_parquet
from elmscale.core.threads import thread_budget
from elmscale.data import generate_classification, write_parquet
from elmscale.distributed import working_set as dws
from elmscale.features.kernels import Kernel
from elmscale.solvers import working_set as ws

SIGMA, C, TOL, CACHE_MB = 0.5, 1.0, 1e-3, 200.0


def _model(**kw) -> SparseELMClassifier:
    return SparseELMClassifier(sigma=SIGMA, C=C, tol=TOL, cache_size=CACHE_MB, random_state=0, **kw)


def _generated(args, rows: int):
    data = open_parquet(make_parquet(args.data_dir / f"classification-{rows}", rows), label="label")
    X, y = data.read()
    return data, X, y


def _accuracy(model, X_te, y_te) -> float:
    return float(np.mean(model.predict(X_te) == y_te))


def compare(name, dataset, X, y, X_te, y_te, tested_on, client, args) -> None:
    print(f"{name}: {X.shape[0]:,} train rows x {X.shape[1]} features; test on {tested_on}")
    start = time.perf_counter()
    spread = _model(solver="working_set").fit(dataset, client=client)
    spread_s = time.perf_counter() - start
    spread_acc = _accuracy(spread, X_te, y_te)
    exchanges = np.median(spread.iteration_seconds_) if spread.iteration_seconds_.size else 0.0
    print(
        f"  working set, {args.workers} workers: fit {spread_s:8.2f} s, objective "
        f"{spread.objective_[0]:.9e}, test acc {spread_acc:.4f}, SVs {spread.support_.size:,}; "
        f"{spread.n_iter_[0]:,} iterations, {spread.exact_checks_} exact checks, exchange "
        f"median {1e3 * exchanges:.1f} ms",
        flush=True,
    )
    if X.shape[0] > args.dual_max_rows:
        print(f"  one process (dual)    : not run (over --dual-max-rows {args.dual_max_rows:,})")
    else:
        start = time.perf_counter()
        single = _model(solver="dual").fit(X, y)
        single_s = time.perf_counter() - start
        single_acc = _accuracy(single, X_te, y_te)
        rel = (spread.objective_[0] - single.objective_[0]) / abs(single.objective_[0])
        print(
            f"  one process (dual)    : fit {single_s:8.2f} s, objective "
            f"{single.objective_[0]:.9e}, test acc {single_acc:.4f}, SVs "
            f"{single.support_.size:,}, steps {single.n_iter_[0]:,}",
            flush=True,
        )
        print(
            f"  one process / working set {single_s / spread_s:.2f}x; objective "
            f"{rel:+.1e} relative ({'within' if abs(rel) <= TOL else 'NOT within'} tol); "
            f"accuracy {100 * (spread_acc - single_acc):+.3f} points",
            flush=True,
        )
    if X.shape[0] > args.svc_max_rows:
        print(f"  SVC                   : not run (over --svc-max-rows {args.svc_max_rows:,})")
    else:
        print(f"  {svc_fit(X, y, X_te, y_te, args.svc_limit)}", flush=True)


class _TimedBlocks:
    """``ThreadBlocks`` whose calls are timed: the blocks' seconds beside the loop's."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, 0.0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _timed(self, method, *args):
        start = time.perf_counter()
        out = getattr(self.inner, method)(*args)
        self.seconds += time.perf_counter() - start
        return out

    def step(self, *args):
        return self._timed("step", *args)

    def exact(self, *args):
        return self._timed("exact", *args)


def _threads_fit(X, y_idx, q, n_blocks, n_threads=2):
    """The working set on ``n_blocks`` blocks on this process's threads: ``(seconds, result,
    blocks' seconds)``."""
    kernel = Kernel("gaussian", sigma=SIGMA)
    units = dws.array_units(X, y_idx, max(n_blocks, 16))
    start = time.perf_counter()
    with thread_budget(n_threads):
        groups = dws.group_units(units, n_blocks)
        blocks = _TimedBlocks(
            dws.ThreadBlocks(groups, np.arange(2), [(0, 1)], kernel.to_dict(), C, CACHE_MB, 2)
        )
        result = ws.solve_working_set(
            blocks, [(0, 1)], X.shape[1], kernel=kernel, C=C, tol=TOL, q=q
        )
    return time.perf_counter() - start, result, blocks.seconds


def blocks_sweep(X, y, args) -> None:
    y_idx = np.unique(y, return_inverse=True)[1]
    X = np.ascontiguousarray(X, dtype=np.float32)
    print(f"iterations against K blocks, {X.shape[0]:,} rows, q = {args.q}, 2 threads")
    base = None
    for k in (1, 2, 4, 8, 16):
        seconds, r, block_s = _threads_fit(X, y_idx, args.q, k)
        iters = int(r.n_iter[0])
        base = base or iters
        loop_s = seconds - block_s
        print(
            f"  K = {k:2d}: {iters:,} iterations ({iters / base:.3f}x K = 1), fit {seconds:.2f} s; "
            f"per iteration: coordinator {1e3 * loop_s / max(iters, 1):.2f} ms, blocks "
            f"{1e3 * block_s / max(iters, 1):.2f} ms; objective {r.objective[0]:.9e}, "
            f"{r.exact_checks} exact checks",
            flush=True,
        )


def q_sweep(X, y, args) -> None:
    y_idx = np.unique(y, return_inverse=True)[1]
    X = np.ascontiguousarray(X, dtype=np.float32)
    print(f"q sweep, {X.shape[0]:,} rows, 2 blocks on 2 threads")
    for q in args.q_values:
        seconds, r, _ = _threads_fit(X, y_idx, q, 2)
        print(
            f"  q = {q:5d}: fit {seconds:7.2f} s, {int(r.n_iter[0]):,} iterations, objective "
            f"{r.objective[0]:.9e}",
            flush=True,
        )


def crossover(args) -> None:
    print("one process, 2 threads: the dual solver against the working set (2 blocks)")
    for rows in args.crossover_rows:
        _, X, y = _generated(args, rows)
        start = time.perf_counter()
        dual = _model(solver="dual").fit(X, y)
        dual_s = time.perf_counter() - start
        start = time.perf_counter()
        spread = _model(solver="working_set").fit(X, y)
        spread_s = time.perf_counter() - start
        rel = (spread.objective_[0] - dual.objective_[0]) / abs(dual.objective_[0])
        print(
            f"  {rows:9,} rows: dual {dual_s:8.2f} s, working set {spread_s:8.2f} s "
            f"(dual / working set {dual_s / spread_s:.2f}x; objective {rel:+.1e})",
            flush=True,
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, nargs="*", default=None)
    parser.add_argument("--blocks", action="store_true", help="iterations against K blocks")
    parser.add_argument("--q-sweep", action="store_true")
    parser.add_argument("--crossover", action="store_true")
    parser.add_argument("--q", type=int, default=ws.DEFAULT_Q)
    parser.add_argument(
        "--workers", type=int, default=2, help="the LocalCluster's worker processes (2)"
    )
    parser.add_argument("--svc-limit", type=float, default=1800.0)
    parser.add_argument("--svc-max-rows", type=int, default=100_000)
    parser.add_argument("--dual-max-rows", type=int, default=10**9)
    parser.add_argument("--codrna-test", type=Path, default=None)
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    only = args.blocks or args.q_sweep or args.crossover
    big = 6_000 if args.quick else 300_000
    args.q_values = [64, 256] if args.quick else [256, 512, 1024, 2048, 4096]
    args.crossover_rows = [6_000] if args.quick else [20_000, 100_000, 200_000, 400_000]
    # compiled kernels loaded before any timing
    warm = generate_classification(600, 8, random_state=1)
    _model(solver="working_set").fit(warm.X, warm.y)
    _model(solver="dual").fit(warm.X, warm.y)
    if args.quick or args.blocks:
        blocks_sweep(*_generated(args, big)[1:], args)
    if args.quick or args.q_sweep:
        q_sweep(*_generated(args, 6_000 if args.quick else 100_000)[1:], args)
    if args.quick or args.crossover:
        crossover(args)
    if only and not args.quick:
        return 0
    rows = args.rows or ([6_000] if args.quick else [300_000, 1_000_000])
    print(
        f"SparseELMClassifier(sigma={SIGMA}, C={C:g}, tol={TOL:g}, cache_size={CACHE_MB:.0f}, "
        f"working_set_size={ws.DEFAULT_Q}); {args.workers}-worker LocalCluster (1 thread each); "
        "SVC(gamma=2) in a subprocess"
    )
    test = generate_classification(20_000, 8, random_state=12345)
    with (
        tempfile.TemporaryDirectory(prefix="elmscale-working-set-") as folder,
        two_worker_cluster(args.workers) as cluster,
        Client(cluster) as client,
    ):
        small = write_parquet(warm.X, Path(folder) / "warm.parquet", y=warm.y)
        _model(solver="working_set").fit(open_parquet(small, label="label"), client=client)
        X, y, X_te, y_te, tested_on = codrna_sets(args.quick, args.codrna_test)
        path = write_parquet(X, Path(folder) / "codrna.parquet", y=y, row_group_size=32_768)
        compare(
            "COD-RNA", open_parquet(path, label="label"), X, y, X_te, y_te, tested_on, client, args
        )
        for n in rows:
            dataset, X, y = _generated(args, n)
            compare(
                f"generated {n:,}",
                dataset,
                X,
                y,
                test.X,
                test.y,
                "20,000 fresh rows",
                client,
                args,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
