"""Newton passes against the number of blocks K: the random-node sparse ELM's passes over the
data do not grow as the rows are split over more workers.

    python benchmarks/newton_passes.py            # 1M rows, K = 1, 2, 4, 8, 16, 32
    python benchmarks/newton_passes.py --quick    # 50k rows, K = 1, 2, 4, for CI
    python benchmarks/newton_passes.py --breakdown [--rows N]   # each pass on 2 Dask workers

``--breakdown``: the fit on a 2-worker LocalCluster (1 thread each) of
benchmarks/sparse_elm_dask.py's data (1M rows; --quick 100k), each pass broken down from
Dask's task stream alone (the blocks' compute, the bytes they return; the rest of the
pass's wall time is the wait and the coordinator's work), so that the same table comes from
any version of ``fit_newton``: ``PYTHONPATH=<an older checkout> python
benchmarks/newton_passes.py --breakdown`` gives its "before".

The blocks run on this process's threads (``fit_newton`` without a client: the same passes,
bit for bit, as on a cluster with K worker threads, since every pass sums the units' terms
in unit order), so the passes are what K workers would make; the seconds are this
machine's 2 cores running K blocks and say nothing about K machines.  Same problem as
benchmarks/sparse_elm_dask.py: L = 200 sigmoid nodes, C = 1, tol 1e-3, the generated
8-feature set of benchmarks/make_parquet.py (written as 64 files, so that every K has its
blocks).  For each K: the passes, the relative duality gap and largest KKT violation at
the end, the dual objective, whether ``coef_`` equals K = 1's to the bit, the seconds.
Prints a table and draws the passes against K into --plot, beside CoCoA+'s rounds to the
same gap as measured on 2026-12-03 (the solver it replaced: 7, 15, 34 rounds for K = 1, 2,
4; no gap of 1e-3 in 40 rounds for K = 8 and 16).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from elmscale import open_parquet  # noqa: E402
from elmscale.data import write_generated_parquet  # noqa: E402
from elmscale.distributed.newton import fit_newton  # noqa: E402
from elmscale.features.layers import HiddenLayer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
#: CoCoA+'s rounds to a relative gap of 1e-3 on the same 1M rows (the removed
#: benchmarks/cocoa_rounds.py, 2026-12-03); None: not reached in 40 rounds
COCOA_ROUNDS = {1: 7, 2: 15, 4: 34, 8: None, 16: None}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--blocks", type=int, nargs="*", default=None)
    parser.add_argument("--n-hidden", type=int, default=200)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--plot", type=Path, default=None, help="the figure (PNG)")
    parser.add_argument("--breakdown", action="store_true", help="each pass on 2 workers")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    if args.breakdown:
        return breakdown(args)
    rows = args.rows or (50_000 if args.quick else 1_000_000)
    blocks = args.blocks or ([1, 2, 4] if args.quick else [1, 2, 4, 8, 16, 32])
    # benchmarks/make_parquet.py's rows, in 64 files: K blocks need K units at least
    folder = args.data_dir / f"classification-{rows}-64-files"
    write_generated_parquet(folder, rows, 8, rows_per_file=-(-rows // 64))
    data = open_parquet(folder, label="label")
    units = data.units()
    if len(units) < max(blocks):
        raise SystemExit(f"{folder}: {len(units)} units, fewer than {max(blocks)} blocks")
    layer = HiddenLayer("sigmoid", data.n_features, args.n_hidden, 0).to_dict()
    print(
        f"{rows:,} rows in {len(units)} units, {args.n_hidden} sigmoid nodes, C = 1, "
        f"tol {args.tol:g}; K blocks on this process's threads (2 cores)"
    )
    print(
        f"{'K':>3} {'passes':>6} {'gathered':>8} {'gap':>9} {'KKT':>9} "
        f"{'objective':>16} {'same bits as K=1':>16} {'seconds':>8}",
        flush=True,
    )
    found = {}
    first = None
    for k in blocks:
        started = time.perf_counter()
        result = fit_newton(
            units, layer, [0, 1], C=1.0, tol=args.tol, n_blocks=k, n_threads=2, cache_mb=4096
        )
        seconds = time.perf_counter() - started
        first = result if first is None else first
        same = bool(np.array_equal(result.beta, first.beta))
        found[k] = int(result.passes[0])
        print(
            f"{k:>3} {result.passes[0]:>6} {result.gathered[0]:>8} {result.gap[0]:>9.2e} "
            f"{result.kkt[0]:>9.2e} {result.dual[0]:>16.9e} {str(same):>16} {seconds:>8.1f}",
            flush=True,
        )
    spread = max(found.values()) - min(found.values())
    print(f"passes from K = {min(blocks)} to {max(blocks)}: spread {spread} (target: within 2)")
    if args.plot is not None:
        fig, ax = plt.subplots(figsize=(5.5, 3.6))
        ax.plot(list(found), list(found.values()), "o-", label="Newton passes (this run)")
        reached = {k: r for k, r in COCOA_ROUNDS.items() if r is not None}
        ax.plot(
            list(reached),
            list(reached.values()),
            "s--",
            color="grey",
            label="CoCoA+ rounds (2026-12-03, removed)",
        )
        stuck = [k for k, r in COCOA_ROUNDS.items() if r is None]
        ax.plot(stuck, [40] * len(stuck), "^", color="grey", label="CoCoA+: no gap 1e-3 in 40")
        ax.set_ylim(0, 45)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("blocks K (workers)")
        ax.set_ylabel("passes / rounds to a gap of 1e-3")
        ax.set_title(f"Random-node sparse ELM, {rows:,} rows, L = {args.n_hidden}")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)
        print(f"plot: {args.plot}")
    return 0


def breakdown(args) -> int:
    """Each pass of the 2-worker fit, from Dask's task stream (see the module's docstring)."""
    from distributed import Client, get_task_stream
    from make_parquet import make_parquet
    from two_workers import two_worker_cluster

    import elmscale
    from elmscale.distributed.newton import parquet_units

    rows = args.rows or (100_000 if args.quick else 1_000_000)
    data = open_parquet(make_parquet(args.data_dir / f"classification-{rows}", rows), label="label")
    units = parquet_units(data)
    layer = HiddenLayer("sigmoid", data.n_features, args.n_hidden, 0).to_dict()
    print(
        f"elmscale from {Path(elmscale.__file__).parent}; {rows:,} rows in {len(units)} "
        f"units, L = {args.n_hidden}, C = 1, tol {args.tol:g}; 2 Dask workers, 1 thread each"
    )
    with two_worker_cluster() as cluster, Client(cluster) as client:
        fit_newton(units[:2], layer, [0, 1], C=1.0, tol=args.tol, client=client)  # warm
        with get_task_stream(client=client) as stream:
            started = time.perf_counter()
            result = fit_newton(units, layer, [0, 1], C=1.0, tol=args.tol, client=client)
            seconds = time.perf_counter() - started
    tasks = sorted(
        (r for r in stream.data if r["key"].startswith("block_pass")),
        key=lambda r: r["startstops"][0]["start"],
    )
    n_blocks = len(tasks) // len(result.seconds)
    print(f"{'pass':>4} {'wall s':>7} {'compute s':>9} {'rest s':>7} {'KB back':>8}")
    sums = np.zeros(4)
    for i, wall in enumerate(result.seconds):
        mine = tasks[i * n_blocks : (i + 1) * n_blocks]
        compute = max(
            sum(s["stop"] - s["start"] for s in r["startstops"] if s["action"] == "compute")
            for r in mine
        )
        back = sum(r["nbytes"] for r in mine) / 1024
        sums += [wall, compute, wall - compute, back]
        print(f"{i:>4} {wall:>7.3f} {compute:>9.3f} {wall - compute:>7.3f} {back:>8.0f}")
    print(f"{'all':>4} {sums[0]:>7.2f} {sums[1]:>9.2f} {sums[2]:>7.2f} {sums[3]:>8.0f}")
    print(
        f"fit {seconds:.2f} s, {result.passes[0]} passes, {n_blocks} blocks a pass; compute: "
        "the slowest block's (task stream); rest: the pass's wall time beyond it (the "
        "scheduler's round trip, the messages, the coordinator's work)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
