"""A cost model of the Dask fits, calibrated on this machine and checked against it: the
random-node sparse ELM's Newton passes and the kernel sparse ELM's working set.

    python benchmarks/scale_model.py            # Newton 400k rows, working set 20k rows
    python benchmarks/scale_model.py --quick    # 20k and 2k rows, for CI

Every figure comes from the fits' own breakdowns (``elmscale.distributed.breakdown``'s
pass records; ``working_set.exchange_breakdown``): the workers' compute from Dask's task
stream (Newton) or the actors' own timers (the working set: Dask's task stream does not
see actor calls).

The model: a fit on K workers and N rows takes

    T(K, N) = sum over passes p of [ w a_p N / K  +  w u U / K  +  c_p  +  r(K) ]  +  f(K)

* ``a_p``, the **compute per row** of pass p: measured in this process on one thread (one
  block, no Dask) at N rows, one pass at a time.  It gives each pass's share (the first
  pass computes the hidden outputs, the later ones read them from the cache; the active
  rows shrink) and the passes themselves, which do not depend on K (each pass is an exact
  map-reduce: the same iterates on any number of blocks);
* ``w(K)``, **a Dask worker's compute over this process's**, for the same blocks of the
  same code path: a fit at N / 2 rows in this process (one thread) and on K one-thread
  workers, the slowest block's compute per pass from Dask's task stream (each block's
  task's ``compute`` interval) over this process's map time split K ways.  K = 2 adds what
  two workers computing at once cost each other here, and the blocks' imbalance.  A worker
  can differ: the nanny starts it with
  ``MALLOC_TRIM_THRESHOLD_`` set, which pins glibc's mmap threshold at 128 KB, so every
  large temporary array was fresh pages (27x the minor page faults of this process, 1.5x
  its compute, until ``distributed.worker_heap`` raised the thresholds for the passes);
  ``w`` measures whatever is left;
* ``u``, the **compute per unit and pass** (a unit's fixed cost: its cache entry, its
  slices, its answer), from the same fit in this process with 4x the units, times ``w``;
* ``c_p``, **the coordinator's own work** in pass p (the requests, the tree's last sums,
  the L x L steps, phase 2's gathered solve): measured in this process, the same
  arithmetic to the bit as on the cluster;
* ``r(K)``, **the fixed cost of a pass: a measured round trip**, on the cluster of K
  one-thread workers: K tasks sent at once, one to each worker, each returning a block's
  answer (its bytes as measured in the fit), from the send to the answers in hand (the
  median of 15: the scheduler's round trip, the messages, their (de)serialization);
* ``f(K)``, **the fixed cost per fit**: the set-up and the last pass (every row's duals),
  from this process's fit split over K, plus what a Dask fit of 4,000 rows (all overhead)
  spends beyond its passes.

The working set's exchanges are modelled the same way: the compute of this process's
one-thread fit split into the same K blocks (the slowest block each exchange) times the
worker's ratio ``w(K)`` measured at half the rows on K workers, the coordinator's
subproblem per exchange, the wait per exchange
measured on a fit of 1,000 rows (its actor calls' round trips), and its fixed cost per fit.

It predicts the Dask fits at N rows on K = 1 and 2 workers, runs them, and prints
prediction against measurement, term by term (target: within 15 %).

Projection: 8, 64 and 256 workers at 10M, 100M and 1B rows, with a 1 ms network round
trip added per exchange, each block's answer crossing a ``--gbit`` network link into the
coordinator (K answers a pass), the scheduler's cost per task as measured between K = 1
and 2, and this machine's per-core speed on a worker (``w``).  The Newton fit keeps its
passes; phase 2's gathered solve grows with the rows (the rows near the margin do).  The
working set's iterations grow with the rows as measured between two sizes here (N^e), each
iteration computing n x q kernel values split over the workers.  Projections, not
measurements: only K = 1, 2 are measured on this 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from distributed import Client
from make_parquet import make_parquet
from two_workers import two_worker_cluster

from elmscale import open_parquet
from elmscale.distributed.newton import MAX_UNIT_ROWS, fit_newton, parquet_units
from elmscale.distributed.working_set import fit_working_set
from elmscale.features.kernels import Kernel
from elmscale.features.layers import HiddenLayer
from elmscale.solvers.working_set import DEFAULT_Q

RESULTS = Path(__file__).resolve().parent / "results"
N_HIDDEN = 200
WORKERS = (8, 64, 256)
ROWS = (10_000_000, 100_000_000, 1_000_000_000)


def _data(folder: Path, rows: int, n_units: int):
    """The generated problem (benchmarks/make_parquet.py) in ``n_units`` files."""
    path = make_parquet(
        folder / f"classification-{rows}-{n_units}-units", rows, rows_per_file=-(-rows // n_units)
    )
    data = open_parquet(path, label="label")
    return data, parquet_units(data)


def _newton(units, layer, client=None, n_blocks=1):
    """``(result, seconds, [phase of each pass])``."""
    phases: list = []
    started = time.perf_counter()
    result = fit_newton(
        units,
        layer,
        [0, 1],
        C=1.0,
        tol=1e-3,
        client=client,
        n_blocks=n_blocks,
        n_threads=1,
        on_pass=lambda _, now: phases.append(now[0]),
    )
    return result, time.perf_counter() - started, phases


def _noop(i):
    return i


def _answer(nbytes: int) -> np.ndarray:
    """A block's answer of ``nbytes`` bytes (what a pass brings back from each block)."""
    return np.zeros(max(1, nbytes // 8))


def _round_trip(client, nbytes: int, repeats: int = 15) -> float:
    """A pass's fixed cost on this cluster: one task on each worker, sent at once, each
    returning ``nbytes``; from the send to the answers in hand (the median of ``repeats``,
    after 2 not counted)."""
    workers = sorted(client.nthreads())
    times = []
    for _ in range(repeats + 2):
        started = time.perf_counter()
        client.gather(
            [client.submit(_answer, int(nbytes), workers=[w], pure=False) for w in workers]
        )
        times.append(time.perf_counter() - started)
    return float(np.median(times[2:]))


def _per_task_seconds(client, n: int = 400) -> float:
    """The scheduler's and the workers' cost per task: a burst of ``n`` empty tasks."""
    client.gather(client.map(_noop, range(20), pure=False))
    started = time.perf_counter()
    client.gather(client.map(_noop, range(n), pure=False))
    return (time.perf_counter() - started) / n


def _measured_parts(result, seconds) -> dict:
    """A Dask Newton fit's time as the model splits it: the slowest block's compute per
    pass, the wait, the coordinator's work, the rest (set-up, the last pass)."""
    t = result.timings
    parts = {
        "compute": sum(max(p["compute_s"]) for p in t),
        "wait": sum(p["wait_s"] for p in t),
        "coordinator": sum(p["coordinator_s"] for p in t),
        "fixed": seconds - sum(result.seconds),
    }
    parts["total"] = seconds
    return parts


def _working_set(units, client=None, n_blocks=1, q=DEFAULT_Q):
    timings: list = []
    started = time.perf_counter()
    result = fit_working_set(
        units,
        [0, 1],
        Kernel("gaussian", sigma=0.5),
        C=1.0,
        tol=1e-3,
        q=q,
        client=client,
        n_blocks=n_blocks,
        n_threads=1,
        timings=timings,
    )
    return result, time.perf_counter() - started, timings


def _interleaved(*fits):
    """The middle of three runs (by seconds) of each of ``fits`` (``(fit, args, kwargs)``
    each, ``fit`` returning ``(result, seconds, ...)``), run in turn (a, b, a, b, a, b): a
    calibration and the fit it predicts see the same drift of this machine's speed.  It
    moves between consecutive runs (the same 200,000-row one-thread Newton fit took 1.28 to
    2.02 s within a minute) and a worker's first fit of a size pays its fresh pages (the
    working set's first 5,000-row fit on a new worker took 1.9x its second): the middle run
    is moved by neither."""
    runs: list = [[] for _ in fits]
    for _ in range(3):
        for out, (fit, args, kwargs) in zip(runs, fits):
            out.append(fit(*args, **kwargs))
    return [sorted(out, key=lambda r: r[1])[1] for out in runs]


def _middle_of_three(fit, *args, **kwargs):
    """``_interleaved`` of one fit."""
    return _interleaved((fit, args, kwargs))[0]


def _worker_ratio(here: float, on_worker: float) -> float:
    """``w``: a Dask worker's compute over this process's for the same blocks."""
    return on_worker / here if here > 0 else 1.0


class NewtonModel:
    """The Newton fit's costs (the module's docstring: ``a_p``, ``w``, ``u``, ``c_p``,
    ``r(K)``, ``f(K)``), from one-thread fits here, a 1-worker fit at half the rows, round
    trips and a small Dask fit."""

    def __init__(
        self, local, rows, per_unit, n_units, worker, dask_small, round_trip, per_task, gbit
    ):
        result, seconds, phases = local
        t = result.timings
        self.rows = rows
        self.passes = len(t)
        # each pass's compute per row (one block on one thread: the map's time)
        self.per_row = np.array([p["map_s"] for p in t]) / rows
        self.coordinator = np.array([p["coordinator_s"] for p in t])
        # a pass ending in phase 2 (or done) solved the gathered rows: grows with the rows
        self.gathered = np.array([phase != "newton" for phase in phases])
        self.per_unit = per_unit
        self.n_units = n_units
        # w(K): the slowest block's compute per pass on K workers over this process's map
        # split K ways, same rows (N / 2): K = 1 is a worker against this process; K = 2
        # adds what two workers computing at once cost each other on this machine (1.2-1.8x
        # in the runs of 2026-12-07; not explained: two plain processes running the same
        # fit side by side do not slow each other) and the blocks' imbalance
        (half_here, _, _), workers = worker
        self.worker = {
            k: _worker_ratio(
                sum(p["map_s"] for p in half_here.timings) / k,
                sum(max(p["compute_s"]) for p in r.timings),
            )
            for k, (r, _, _) in workers.items()
        }
        # the same by thread CPU (what a shared machine's load changes least): a check
        self.worker_cpu = {
            k: _worker_ratio(
                sum(max(p["cpu_s"]) for p in half_here.timings) / k,
                sum(max(p["cpu_s"]) for p in r.timings),
            )
            for k, (r, _, _) in workers.items()
        }
        self.round_trip = round_trip  # r(K): a pass's measured round trip
        # the set-up and the last pass (the duals of every row): compute, split over K
        self.local_fixed = seconds - sum(result.seconds)
        # per K measured on few rows: the wait per pass, the fixed cost per fit, the bytes
        self.wait = {
            k: np.mean([p["wait_s"] for p in r.timings]) for k, (r, _, _) in dask_small.items()
        }
        self.fixed = {k: s - sum(r.seconds) for k, (r, s, _) in dask_small.items()}
        self.block_bytes = np.mean([p["bytes_returned"] for p in t])  # (one block here)
        self.per_task = per_task  # the scheduler's cost per task (a burst of empty tasks)
        self.bandwidth = gbit * 1e9 / 8

    def predict(self, k: int) -> dict:
        """The measured setting: this machine, K = 1 or 2, the calibration rows."""
        compute = (self.per_row.sum() * self.rows + self.per_unit * self.n_units * self.passes) / k
        parts = {
            "compute": self.worker[k] * compute,
            "wait": self.passes * self.round_trip[k],
            "coordinator": self.coordinator.sum(),
            "fixed": self.worker[k] * self.local_fixed / k + self.fixed[k],
        }
        parts["total"] = sum(parts.values())
        return parts

    def project(self, k: int, n: int, rtt: float) -> dict:
        # a worker's speed with every core of its machine busy: w(2), the most measured here
        w = self.worker[max(self.worker)]
        scale = n / self.rows
        compute = w * self.per_row.sum() * n / k
        units = -(-n // MAX_UNIT_ROWS)
        unit_cost = w * self.per_unit * units / k * self.passes
        # phase 2's gathered solve grows with the gathered rows, which grow with the rows
        coordinator = (
            self.coordinator[~self.gathered].sum() + scale * self.coordinator[self.gathered].sum()
        )
        exchange = self.passes * (
            self.round_trip[1]
            + self.per_task * (k - 1)
            + rtt
            + k * self.block_bytes / self.bandwidth
        )
        fixed = w * self.local_fixed * scale / k + self.fixed[1]
        total = compute + unit_cost + coordinator + exchange + fixed
        return {"total": total, "exchange": exchange, "coordinator": coordinator}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None, help="the Newton fit's rows")
    parser.add_argument("--ws-rows", type=int, default=None, help="the working set's rows")
    parser.add_argument("--rtt-ms", type=float, default=1.0)
    parser.add_argument("--gbit", type=float, default=10.0, help="the coordinator's link")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    rows = args.rows or (20_000 if args.quick else 400_000)
    ws_rows = args.ws_rows or (2_000 if args.quick else 20_000)
    rtt = args.rtt_ms / 1000
    lines: list[str] = []

    def say(text=""):
        print(text, flush=True)
        lines.append(text)

    say(
        f"# python benchmarks/scale_model.py {' '.join(argv if argv is not None else sys.argv[1:])}"
    )
    say(
        f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; this machine: "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start (above "
        f"{os.cpu_count()}: other work shared the cores)"
    )

    # -- Newton: calibration --------------------------------------------------------------
    data, units = _data(args.data_dir, rows, 8)
    _, many = _data(args.data_dir, rows, 32)
    _, half = _data(args.data_dir, rows // 2, 8)
    layer = HiddenLayer("sigmoid", data.n_features, N_HIDDEN, 0).to_dict()
    _newton(units[:1], layer)  # compiled before timing
    local, local_half = _interleaved((_newton, (units, layer), {}), (_newton, (half, layer), {}))
    local_many = _middle_of_three(_newton, many, layer)
    per_unit = max(
        0.0,
        (sum(p["map_s"] for p in local_many[0].timings) - sum(p["map_s"] for p in local[0].timings))
        / ((len(many) - len(units)) * len(local[0].timings)),
    )
    _, small = _data(args.data_dir, 4_000, 8)
    dask_small, measured = {}, {}
    ws_measured, ws_small = {}, {}
    _, ws_units = _data(args.data_dir, ws_rows, 8)
    _, ws_units2 = _data(args.data_dir, 2 * ws_rows, 8)
    _, ws_half = _data(args.data_dir, ws_rows // 2, 8)
    _working_set(ws_units[:1])  # compiled before timing
    _, ws_tiny = _data(args.data_dir, 1_000, 8)
    # the blocks of a K-worker fit on this process's one thread, at N and at N / 2: a
    # block's compute per exchange is not proportional to its rows (5,000 rows 1.2 us a row
    # and exchange, 10,000 rows 1.7-2.1 us), so the model takes the blocks' own
    ws_split, ws_half_split = {}, {}
    for k in (1, 2):
        ws_split[k], ws_half_split[k] = _interleaved(
            (_working_set, (ws_units,), {"n_blocks": k}),
            (_working_set, (ws_half,), {"n_blocks": k}),
        )
    ws_local, ws_local_s, ws_t = ws_split[1]
    ws_local2, ws_local2_s, ws_t2 = _middle_of_three(_working_set, ws_units2)
    ws_tiny_local = _middle_of_three(_working_set, ws_tiny)
    round_trip: dict = {}
    newton_worker: dict = {}
    ws_worker: dict = {}
    block_bytes = np.mean([p["bytes_returned"] for p in local[0].timings])
    for k in (1, 2):
        with two_worker_cluster(k) as cluster, Client(cluster) as client:
            _newton(units[:2], layer, client, n_blocks=k)  # the workers warm
            _working_set(ws_tiny, client, n_blocks=k)
            round_trip[k] = _round_trip(client, int(block_bytes))
            dask_small[k] = _newton(small, layer, client, n_blocks=k)
            ws_small[k] = _working_set(ws_tiny, client, n_blocks=k)
            # w(K): the same fits at half the rows on these K workers, in turn with the fits
            # at N that the model predicts
            on = {"n_blocks": k}
            newton_worker[k], measured[k] = _interleaved(
                (_newton, (half, layer, client), on), (_newton, (units, layer, client), on)
            )
            ws_worker[k], ws_measured[k] = _interleaved(
                (_working_set, (ws_half, client), on), (_working_set, (ws_units, client), on)
            )
            if k == 2:
                per_task = _per_task_seconds(client)
    model = NewtonModel(
        local,
        rows,
        per_unit,
        len(units),
        (local_half, newton_worker),
        dask_small,
        round_trip,
        per_task,
        args.gbit,
    )

    say(f"\n## Newton fit: {rows:,} rows, {len(units)} units, L = {N_HIDDEN}, C = 1, tol 1e-3")
    say(
        f"calibration (one thread, this process): {local[0].passes[0]} passes, "
        f"{local[1]:.2f} s; "
        f"compute {1e9 * model.per_row.sum() / model.passes:.1f} ns per row and pass "
        f"(first pass {1e9 * model.per_row[0]:.1f}), {1e3 * per_unit:.2f} ms per unit and pass; "
        f"coordinator {model.coordinator.sum():.2f} s in all"
    )
    say(
        f"a worker's compute over this process's (w(K), {rows // 2:,} rows, Dask's task "
        f"stream, the slowest block): {model.worker[1]:.2f} (K = 1), {model.worker[2]:.2f} "
        f"(K = 2) (by thread CPU, which load changes less: {model.worker_cpu[1]:.2f}, "
        f"{model.worker_cpu[2]:.2f})"
    )
    say(
        f"Dask fixed costs: a pass's round trip r(K) (a {model.block_bytes / 1024:.0f} KB "
        f"answer from each worker) {1e3 * model.round_trip[1]:.1f} ms (K = 1), "
        f"{1e3 * model.round_trip[2]:.1f} ms (K = 2); the wait per pass a fit of 4,000 rows "
        f"saw: {1e3 * model.wait[1]:.1f} ms, {1e3 * model.wait[2]:.1f} ms; per fit "
        f"{model.fixed[1]:.2f} s, {model.fixed[2]:.2f} s; {1e3 * per_task:.2f} ms per task "
        f"(a burst of empty tasks, K = 2)"
    )
    say(
        f"{'K':>3} {'':<10} {'total s':>8} {'compute':>8} {'wait':>8} {'coord':>8} "
        f"{'fixed':>8}  (predicted / measured: target within 15 %)"
    )
    names = ("total", "compute", "wait", "coordinator", "fixed")
    for k in (1, 2):
        result, seconds, _ = measured[k]
        same = np.array_equal(result.beta, local[0].beta)
        predicted, found = model.predict(k), _measured_parts(result, seconds)
        for label, parts in (("predicted", predicted), ("measured", found)):
            say(f"{k:>3} {label:<10} " + " ".join(f"{parts[n]:>8.2f}" for n in names))
        say(
            f"{k:>3} {'ratio':<10} {predicted['total'] / seconds:>8.2f}  (coef_ equal to this "
            f"process's to the bit: {same})"
        )

    # -- working set: calibration --------------------------------------------------------
    ws = _ws_model(ws_t, ws_rows, ws_t2, 2 * ws_rows)
    # w(K) of the working set: the actors' compute over this process's, the same K blocks
    # of the same N / 2 rows, the slowest block each exchange
    ws_w = {
        k: _worker_ratio(_ws_compute(ws_half_split[k][2]), _ws_compute(t))
        for k, (_, _, t) in ws_worker.items()
    }
    # fixed per fit: the blocks made (their rows read) and the end, split over K, and the
    # Dask set-up (actors) beyond it as measured on 1,000 rows; the wait per exchange
    ws_local_fixed = ws_local_s - _ws_busy(ws_t)
    ws_tiny_fixed = ws_tiny_local[1] - _ws_busy(ws_tiny_local[2])
    ws_fixed = {k: s - _ws_busy(t) - ws_tiny_fixed for k, (_, s, t) in ws_small.items()}
    waits = {k: np.mean([e["wait_s"] for e in t]) for k, (_, _, t) in ws_small.items()}
    say(f"\n## Working set: {ws_rows:,} rows, gaussian sigma 0.5, C = 1, q {DEFAULT_Q}")
    say(
        f"calibration (one thread): {len(ws_t)} exchanges ({ws_local_s:.2f} s) at "
        f"{ws_rows:,} rows, {len(ws_t2)} ({ws_local2_s:.2f} s) at {2 * ws_rows:,}: "
        f"exchanges ~ N^{ws['exponent']:.2f}; compute {1e9 * ws['per_row']:.1f} ns per row "
        f"and exchange; coordinator {1e3 * ws['coordinator']:.2f} ms per exchange; a "
        f"worker's compute over this process's (w(K), {ws_rows // 2:,} rows, the slowest "
        f"block): {ws_w[1]:.2f} (K = 1), {ws_w[2]:.2f} (K = 2)"
    )
    say(
        f"Dask fixed costs (1,000 rows): wait per exchange {1e3 * waits[1]:.1f} ms (K = 1), "
        f"{1e3 * waits[2]:.1f} ms (K = 2); per fit {ws_fixed[1]:.2f} s, {ws_fixed[2]:.2f} s"
    )
    say(
        f"{'K':>3} {'':<10} {'total s':>8} {'compute':>8} {'wait':>8} {'coord':>8} "
        f"{'fixed':>8}  (predicted / measured: target within 15 %)"
    )
    for k in (1, 2):
        result, seconds, t = ws_measured[k]
        w = ws_w[k]
        predicted = {
            "compute": w * _ws_compute(ws_split[k][2]),
            "wait": len(ws_t) * waits[k],
            "coordinator": len(ws_t) * ws["coordinator"],
            "fixed": w * ws_local_fixed / k + ws_fixed[k],
        }
        predicted["total"] = sum(predicted.values())
        found = {
            "compute": _ws_compute(t),
            "wait": sum(e["wait_s"] for e in t),
            "coordinator": sum(e["coordinator_s"] for e in t),
            "fixed": seconds - sum(e["seconds"] + e["coordinator_s"] for e in t),
            "total": seconds,
        }
        same = np.array_equal(result.seen.alpha, ws_local.seen.alpha)
        for label, parts in (("predicted", predicted), ("measured", found)):
            say(f"{k:>3} {label:<10} " + " ".join(f"{parts[n]:>8.2f}" for n in names))
        say(
            f"{k:>3} {'ratio':<10} {predicted['total'] / seconds:>8.2f}  (alpha equal to this "
            f"process's to the bit: {same})"
        )

    # -- projections ------------------------------------------------------------------
    say(
        f"\n## Projection (not measured): {args.rtt_ms:g} ms round trip per exchange, "
        f"{args.gbit:g} Gbit/s into the coordinator, this machine's per-core speed"
    )
    say(f"{'fit':<12} {'K':>4} " + " ".join(f"{n:>14,}" for n in ROWS))
    for k in WORKERS:
        cells = []
        for n in ROWS:
            p = model.project(k, n, rtt)
            cells.append(f"{_hms(p['total']):>9} ({100 * p['exchange'] / p['total']:.0f}%)")
        say(f"{'newton':<12} {k:>4} " + " ".join(f"{c:>14}" for c in cells))
    for k in WORKERS:
        cells = []
        for n in ROWS:
            iters = ws["exchanges"] * (n / ws_rows) ** ws["exponent"]
            exchange = waits[1] + model.per_task * (k - 1) + rtt
            total = iters * (ws_w[2] * ws["per_row"] * n / k + ws["coordinator"] + exchange)
            cells.append(f"{_hms(total):>9} ({100 * iters * exchange / total:.0f}%)")
        say(f"{'working set':<12} {k:>4} " + " ".join(f"{c:>14}" for c in cells))
    say("(in brackets: the exchanges' share: the scheduler, the round trip, the bytes)")
    say(f"# load average {os.getloadavg()[0]:.1f} at the end")
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")
    return 0


def _ws_compute(timings) -> float:
    """A working-set fit's compute: the slowest block's, summed over the exchanges."""
    return sum(max(e["compute_s"]) for e in timings)


def _ws_busy(timings) -> float:
    """The seconds of a working-set fit's exchanges and the coordinator's work between them."""
    return sum(e["seconds"] + e["coordinator_s"] for e in timings)


def _ws_model(t1, n1, t2, n2) -> dict:
    """The working set's costs: compute per row and exchange (one block on one thread: the
    call's time), the coordinator's per exchange, and the exchanges' growth with the rows."""
    per_row = sum(e["seconds"] for e in t1) / (len(t1) * n1)
    coordinator = sum(e["coordinator_s"] for e in t1[1:]) / max(1, len(t1) - 1)
    exponent = float(np.log(len(t2) / len(t1)) / np.log(n2 / n1))
    return {
        "per_row": per_row,
        "coordinator": coordinator,
        "exponent": exponent,
        "exchanges": len(t1),
    }


def _hms(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


if __name__ == "__main__":
    raise SystemExit(main())
