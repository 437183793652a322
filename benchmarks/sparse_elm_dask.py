"""The random-node sparse ELM (L = 200 sigmoid nodes, C = 1) fitted from Parquet by the
Newton solver on a 2-worker Dask LocalCluster, against the one-process fits.

    python benchmarks/sparse_elm_dask.py            # 1M rows against one process; 10M, 20M
    python benchmarks/sparse_elm_dask.py --quick    # 100k rows against one process; 200k, 400k
    python benchmarks/sparse_elm_dask.py --large    # the 1M-row comparison only
    python benchmarks/sparse_elm_dask.py --must-show [--quick]   # issue 53's run (below)

Data: benchmarks/make_parquet.py's generated problem (8 features, 3 % label noise; row i
the same in every size, so the first 1M rows of the 10M set are the 1M set), kept in
--data-dir between runs.  Test accuracy on 100k fresh rows.

1. On the small set (1M rows), in this process from arrays read from the same files, the
   two one-process solvers: dual coordinate descent (``solver="dual"``, the default before
   the Newton solver; its pair uses both cores through its helper thread) and the Newton
   solver on both cores (``solver="newton"``); then the Newton solver on the cluster from
   the Parquet files.  Prints the times, the cluster's ratio to the fastest one-process fit
   (target: at most 0.55x) and to each, the objectives and their relative difference
   (target: within tol), the test accuracies (target: within 0.05 points), the passes.
2. On the large sets (10M, 20M): the Newton solver on the cluster, each size with fresh
   workers; prints the passes, the largest KKT violation and gap (target: converged to
   tol), the wall time and the 20M / 10M ratio (target: at most 2.1x), test accuracy, and
   the peak RSS of the coordinator and of each worker (target: at most 1.1x when the rows
   double).

``--must-show`` (issue 53: every added core pays), in one run, alone on the machine:

* the Newton fit (1M rows; --quick 100k) on 2 Dask workers of 1 thread each against the
  one-thread fit in this process (target: at least 1.6x), each side's second fit (a
  process's first fit of a size pays for touching fresh memory: both shown), the
  objectives (within tol), and
  the Dask fit's breakdown per pass (``pass_timings_``: the blocks' compute from Dask's task
  stream, their CPU, the wait, the coordinator's work, the bytes each way);
* the kernel fit (gaussian sigma 0.5, C = 1, 300k rows; --quick 6k) with a 2-worker client,
  whichever solver "auto" takes, against the one-thread dual in this process (target: at
  least 1.5x), the objectives, and the working set's breakdown per exchange
  (``exchange_timings_``) when "auto" takes it; then the same fit beside a cluster with
  Dask's default diagnostics, which the benchmarks' clusters turn off (``two_workers``).

``--cache-mb`` is each worker's cache of hidden outputs (default 2,048 MB: 10M rows x 200
nodes is 8 GB, so the large sets stream most units from their files at each pass, the
memory bounded).
"""

from __future__ import annotations

import argparse
import functools
import time
from pathlib import Path

import numpy as np
from distributed import Client
from make_parquet import make_parquet
from peak_rss import measured
from two_workers import two_worker_cluster

from elmscale import SparseELMClassifier, open_parquet
from elmscale.data import generate_classification
from elmscale.distributed import dataset_ops
from elmscale.distributed.breakdown import breakdown_table


def _model(args, **kw) -> SparseELMClassifier:
    return SparseELMClassifier(
        hidden="sigmoid", n_hidden=args.n_hidden, C=1.0, tol=args.tol, random_state=0, **kw
    )


def _on_cluster(args, path, client, test):
    ds = open_parquet(path, label="label")
    fitted, seconds, coordinator, workers = measured(
        lambda: _model(args).fit(ds, client=client, cache_mb=args.cache_mb), client
    )
    accuracy = float(np.mean(fitted.predict(test.X) == test.y))
    return fitted, seconds, coordinator, workers, accuracy


def _one_process(args, X, y, test, solver):
    fitted, seconds, peak, _ = measured(lambda: _model(args, solver=solver).fit(X, y))
    accuracy = float(np.mean(fitted.predict(test.X) == test.y))
    print(
        f"  one process, {solver:<6} {X.shape[0]:>11,} rows: {seconds:8.1f} s, "
        f"{fitted.n_iter_[0]} passes, objective {fitted.objective_[0]:.9e}, "
        f"test acc {accuracy:.4f}, peak RSS {peak:.0f} MB",
        flush=True,
    )
    return fitted, seconds, accuracy


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--small", type=int, default=None, help="rows against one process")
    parser.add_argument("--large", type=int, nargs="*", default=None, help="rows on the cluster")
    parser.add_argument("--n-hidden", type=int, default=200)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--cache-mb", type=float, default=2048.0)
    parser.add_argument("--must-show", action="store_true", help="issue 53's run")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    if args.must_show:
        return must_show(args)
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
    _model(args, solver="newton").fit(X[:5_000], y[:5_000])  # compiled before timing
    singles = {solver: _one_process(args, X, y, test, solver) for solver in ("dual", "newton")}
    X = y = None  # freed before the cluster starts
    with two_worker_cluster() as cluster, Client(cluster) as client:
        fitted, seconds, coordinator, workers, accuracy = _on_cluster(
            args, sets[small], client, test
        )
    fastest = min(singles, key=lambda k: singles[k][1])
    reference, reference_s, reference_acc = singles["dual"]
    rel = (fitted.objective_[0] - reference.objective_[0]) / abs(reference.objective_[0])
    print(
        f"  Newton, 2 workers {small:>11,} rows: {seconds:8.1f} s, {fitted.n_iter_[0]} passes "
        f"({fitted.n_gathered_[0]:,} rows gathered), KKT {fitted.kkt_violation_[0]:.1e}, gap "
        f"{fitted.duality_gap_[0]:.1e}, objective {fitted.objective_[0]:.9e} (relative to "
        f"the dual solver's {rel:+.2e}, {'within' if abs(rel) <= args.tol else 'NOT within'}"
        f" tol), test acc {accuracy:.4f} ({100 * (accuracy - reference_acc):+.3f} points)",
        flush=True,
    )
    print(
        f"  time ratio, 2 workers / the fastest one-process fit ({fastest}): "
        f"{seconds / singles[fastest][1]:.2f}x (target 0.55x); / one process, dual: "
        f"{seconds / reference_s:.2f}x; / one process, newton: "
        f"{seconds / singles['newton'][1]:.2f}x",
        flush=True,
    )
    runs = {}
    for n in large:
        with two_worker_cluster() as cluster, Client(cluster) as client:
            runs[n] = _on_cluster(args, sets[n], client, test)
        fitted, seconds, coordinator, workers, accuracy = runs[n]
        ok = bool(fitted.converged_.all())
        print(
            f"  Newton, 2 workers {n:>11,} rows: {seconds:8.1f} s, {fitted.n_iter_[0]} passes, "
            f"KKT {fitted.kkt_violation_[0]:.1e}, gap {fitted.duality_gap_[0]:.1e} "
            f"({'converged to' if ok else 'NOT converged to'} tol), test acc {accuracy:.4f} "
            f"({100 * (accuracy - reference_acc):+.2f} points against one process on "
            f"{small:,} rows), support {fitted.support_.size:,}, peak RSS coordinator "
            f"{coordinator:.0f} MB, workers {', '.join(f'{w:.0f}' for w in workers)} MB",
            flush=True,
        )
    if len(large) >= 2:
        a, b = large[0], large[-1]
        ratios = [runs[b][2] / runs[a][2]] + [w2 / w1 for w1, w2 in zip(runs[a][3], runs[b][3])]
        print(
            f"  {b:,} / {a:,} rows: time {runs[b][1] / runs[a][1]:.2f}x (target 2.1x); peak "
            f"RSS coordinator {ratios[0]:.2f}x, workers "
            f"{', '.join(f'{r:.2f}x' for r in ratios[1:])} (target 1.1x)"
        )
    return 0


def _relative(a: float, b: float) -> float:
    return (a - b) / abs(b)


def _exchange_table(timings: np.ndarray) -> str:
    """The working set's exchanges (``exchange_timings_``, columns
    ``working_set.EXCHANGE_COLUMNS``), summed by kind."""
    from elmscale.distributed.working_set import EXCHANGE_COLUMNS

    at = {name: i for i, name in enumerate(EXCHANGE_COLUMNS)}
    lines = [
        f"{'exchange':<8} {'count':>6} {'wall s':>8} {'compute s':>9} {'cpu s':>8} "
        f"{'wait s':>7} {'coord s':>8}"
    ]
    for name, exact in (("step", 0.0), ("exact", 1.0)):
        mine = timings[timings[:, at["exact"]] == exact]
        cells = " ".join(
            f"{mine[:, at[c]].sum():>{w}.2f}"
            for c, w in (("seconds", 8), ("compute_s", 9), ("cpu_s", 8), ("wait_s", 7))
        )
        lines.append(f"{name:<8} {len(mine):>6} {cells} {mine[:, at['coordinator_s']].sum():>8.2f}")
    lines.append("(compute, cpu: the slowest block's per exchange; wait: the exchange beyond it)")
    return "\n".join(lines)


def _timed_twice(fit) -> tuple:
    """``fit()`` twice: ``(first seconds, second seconds, second model)``."""
    seconds = []
    for _ in range(2):
        started = time.perf_counter()
        model = fit()
        seconds.append(time.perf_counter() - started)
    return seconds[0], seconds[1], model


def _seconds(values) -> str:
    return " ".join(f"{v:.2f}" for v in values)


def must_show(args) -> int:
    """Issue 53's comparisons in one run (see the module's docstring)."""
    newton_rows = args.small or (100_000 if args.quick else 1_000_000)
    kernel_rows = 6_000 if args.quick else 300_000
    newton_path = make_parquet(args.data_dir / f"classification-{newton_rows}", newton_rows)
    kernel_path = make_parquet(args.data_dir / f"classification-{kernel_rows}", kernel_rows)
    warm = generate_classification(2_000, 8, random_state=1)
    _model(args, solver="newton", n_threads=1).fit(warm.X, warm.y)  # compiled before timing
    kernel_model = functools.partial(
        SparseELMClassifier, sigma=0.5, C=1.0, tol=args.tol, cache_size=200.0, random_state=0
    )
    kernel_model(solver="dual", n_threads=1).fit(warm.X, warm.y)
    X, y = open_parquet(newton_path, label="label").read()
    # each side's Newton fit twice: a process's first fit of this size touches memory this
    # machine's host has not backed yet (here 800 MB: 1.04 s the first time, 0.10 s after),
    # which the first pass pays; the ratio is taken on the second fits, the first shown
    one_first_s, one_s, one = _timed_twice(
        lambda: _model(args, solver="newton", n_threads=1).fit(X, y)
    )
    X, y = open_parquet(kernel_path, label="label").read()
    started = time.perf_counter()
    dual = kernel_model(solver="dual", n_threads=1).fit(X, y)
    dual_s = time.perf_counter() - started
    # the ceiling of a fit gathered here: the dual on this process's 2 threads, no cluster
    started = time.perf_counter()
    kernel_model(solver="dual", n_threads=2).fit(X, y)
    dual2_s = time.perf_counter() - started
    X = y = None
    warm_path = make_parquet(args.data_dir / "classification-20000", 20_000)
    with two_worker_cluster() as cluster, Client(cluster) as client:
        # the workers' imports and compiled kernels loaded before timing, as here
        _model(args).fit(open_parquet(warm_path, label="label"), client=client)
        kernel_model(solver="auto").fit(open_parquet(warm_path, label="label"), client=client)
        two_first_s, two_s, two = _timed_twice(
            lambda: _model(args).fit(open_parquet(newton_path, label="label"), client=client)
        )
        # the kernel fit's parts: the rows gathered here (timed alone, as "auto" gathers
        # them), then the solve; the workers' own CPU meanwhile (Dask's idle work: the
        # heartbeats, the event loops' ticks), on the cores the solve runs on
        started = time.perf_counter()
        gathered, _ = dataset_ops.gather_rows(
            open_parquet(kernel_path, label="label"), client=client
        )
        gather_s = time.perf_counter() - started
        layout = (gathered.dtype, gathered.flags["C_CONTIGUOUS"])
        gathered = None
        workers_cpu = client.run(time.process_time)
        here_cpu = time.process_time()
        started = time.perf_counter()
        spread = kernel_model(solver="auto").fit(
            open_parquet(kernel_path, label="label"), client=client
        )
        spread_s = time.perf_counter() - started
        here_cpu = time.process_time() - here_cpu
        workers_cpu = {w: c - workers_cpu[w] for w, c in client.run(time.process_time).items()}
    # the same kernel fit beside a cluster with Dask's default diagnostics (a 20 ms tick,
    # the workers' 10 ms profiler), which wake every process often (see
    # elmscale.distributed.local_cluster)
    with two_worker_cluster(dask_defaults=True) as cluster, Client(cluster) as client:
        kernel_model(solver="auto").fit(open_parquet(warm_path, label="label"), client=client)
        started = time.perf_counter()
        noisy = kernel_model(solver="auto").fit(
            open_parquet(kernel_path, label="label"), client=client
        )
        noisy_s = time.perf_counter() - started
    rel = _relative(two.objective_[0], one.objective_[0])
    print(
        f"Newton fit, {newton_rows:,} rows, L = {args.n_hidden}, C = 1, tol {args.tol:g}, "
        f"each side's second fit: one thread here {one_s:.2f} s ({one.n_iter_[0]} passes); 2 "
        f"Dask workers (1 thread each) {two_s:.2f} s ({two.n_iter_[0]} passes): "
        f"{one_s / two_s:.2f}x (target 1.6x); objective {two.objective_[0]:.9e} against "
        f"{one.objective_[0]:.9e} ({rel:+.1e}, "
        f"{'within' if abs(rel) <= args.tol else 'NOT within'} tol)\n"
        f"the first fits (their first pass touching fresh memory): one thread "
        f"{one_first_s:.2f} s, 2 workers {two_first_s:.2f} s: {one_first_s / two_first_s:.2f}x; "
        f"the second fits' passes (s): one thread {_seconds(one.pass_seconds_)}; 2 workers "
        f"{_seconds(two.pass_seconds_)}",
        flush=True,
    )
    print("the 2-worker Newton fit's passes (pass_timings_, the second fit):")
    print(breakdown_table(two.pass_timings_))
    rel = _relative(spread.objective_[0], dual.objective_[0])
    print(
        f"\nkernel fit, gaussian sigma 0.5, C = 1, {kernel_rows:,} rows: one-thread dual here "
        f"{dual_s:.2f} s; 2-worker client, solver 'auto' took {spread.solver_!r}: "
        f"{spread_s:.2f} s: {dual_s / spread_s:.2f}x (target 1.5x); objective "
        f"{spread.objective_[0]:.9e} against {dual.objective_[0]:.9e} ({rel:+.1e}, "
        f"{'within' if abs(rel) <= args.tol else 'NOT within'} tol)",
        flush=True,
    )
    print(
        f"the kernel fit's parts: the rows gathered here {gather_s:.2f} s ({layout[0]}, "
        f"C-contiguous {layout[1]}: the solver takes them without a copy); the rest, "
        f"{spread_s - gather_s:.2f} s, against the dual on 2 threads here with no cluster "
        f"{dual2_s:.2f} s ({dual_s / dual2_s:.2f}x the one-thread dual); during the fit "
        f"this process used {here_cpu:.1f} s of CPU, the idle workers "
        f"{', '.join(f'{c:.2f}' for c in workers_cpu.values())} s (Dask's own work)",
        flush=True,
    )
    rel = _relative(noisy.objective_[0], dual.objective_[0])
    print(
        f"the same kernel fit beside a 2-worker cluster with Dask's default diagnostics "
        f"(the benchmarks' and elmscale run's local clusters turn them off): solver "
        f"{noisy.solver_!r}, {noisy_s:.2f} s: {dual_s / noisy_s:.2f}x the one-thread dual; "
        f"objective {rel:+.1e} against it",
        flush=True,
    )
    if getattr(spread, "exchange_timings_", None) is not None and spread.solver_ == "working_set":
        print("the working set's exchanges (exchange_timings_):")
        print(_exchange_table(spread.exchange_timings_))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
