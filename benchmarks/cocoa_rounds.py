"""CoCoA+ rounds against the number of blocks K: how the random-node sparse ELM's rounds
(to a relative duality gap of ``tol``) grow as the rows are split over more workers.

    python benchmarks/cocoa_rounds.py            # 1M rows, K = 1, 2, 4, 8, 16
    python benchmarks/cocoa_rounds.py --quick    # 50k rows, K = 1, 2, 4, for CI

The blocks run on this process's threads (``fit_cocoa`` without a client: the same
rounds, bit for bit, as on a cluster with K worker threads), so the rounds and the gap are
what K workers would need; the seconds are this machine's 2 cores running K blocks and say
nothing about K machines.  Each K twice: every dual starting at zero (``warm_rows=0``, the
default) and the warm start (a sample's solution, ``warm_rows="auto"``).  Same problem as
benchmarks/sparse_elm_dask.py: L = 200 sigmoid nodes, C = 1, tol 1e-3, the generated
8-feature set of benchmarks/make_parquet.py (written as 64 files, so that every K has
its blocks).  Prints a table and draws the rounds against
K (log scale) into --plot.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from elmscale import open_parquet  # noqa: E402
from elmscale.data import write_generated_parquet  # noqa: E402
from elmscale.distributed.cocoa import fit_cocoa  # noqa: E402
from elmscale.features.layers import HiddenLayer  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--blocks", type=int, nargs="*", default=None)
    parser.add_argument("--n-hidden", type=int, default=200)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--max-rounds", type=int, default=300)
    parser.add_argument("--plot", type=Path, default=None, help="the figure (PNG)")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    rows = args.rows or (50_000 if args.quick else 1_000_000)
    blocks = args.blocks or ([1, 2, 4] if args.quick else [1, 2, 4, 8, 16])
    # benchmarks/make_parquet.py's rows, in 64 files: K blocks need K units at least
    folder = args.data_dir / f"classification-{rows}-64-files"
    write_generated_parquet(folder, rows, 8, rows_per_file=-(-rows // 64))
    data = open_parquet(folder, label="label")
    units = len(data.units())
    if units < max(blocks):
        raise SystemExit(f"{folder}: {units} units, fewer than {max(blocks)} blocks")
    layer = HiddenLayer("sigmoid", data.n_features, args.n_hidden, 0).to_dict()
    print(
        f"{rows:,} rows, {args.n_hidden} sigmoid nodes, C = 1, tol {args.tol:g}, at most "
        f"{args.max_rounds} rounds; K blocks on this process's threads"
    )
    print(f"{'K':>3} {'start':>6} {'rounds':>7} {'gap':>9} {'dual objective':>15} {'seconds':>8}")
    found = {}
    for start, warm_rows in (("zero", 0), ("warm", "auto")):
        for k in blocks:
            began = time.perf_counter()
            result = fit_cocoa(
                data, layer, [0, 1], C=1.0, tol=args.tol, n_blocks=k,
                max_rounds=args.max_rounds, warm_rows=warm_rows, cache_mb=8192.0,
            )  # fmt: skip
            seconds = time.perf_counter() - began
            found[start, k] = result.rounds if result.converged else None
            rounds = f"{result.rounds}" + ("" if result.converged else "+")
            print(
                f"{k:>3} {start:>6} {rounds:>7} {result.gap[0]:9.2e} {result.dual[0]:15.6e} "
                f"{seconds:8.1f}",
                flush=True,
            )
    plot = args.plot or (None if args.quick else RESULTS / "cocoa_rounds.png")
    if plot is not None:
        fig, ax = plt.subplots(figsize=(6, 4), layout="constrained")
        for start in ("zero", "warm"):
            ks = [k for k in blocks if found[start, k] is not None]
            line = ax.plot(ks, [max(found[start, k], 0.5) for k in ks], "o-", label=start)[0]
            capped = [k for k in blocks if found[start, k] is None]
            if capped:  # not converged: drawn open at the cap
                ax.plot(
                    capped, [args.max_rounds] * len(capped), "o", mfc="none",
                    color=line.get_color(), label=f"{start}: not converged in {args.max_rounds}",
                )  # fmt: skip
        ax.set(
            xscale="log", yscale="log", xlabel="blocks K (workers)",
            ylabel=f"rounds to a relative gap of {args.tol:g}",
            title=f"CoCoA+ on {rows:,} rows, {args.n_hidden} nodes",
        )  # fmt: skip
        ax.set_xticks(blocks, [str(k) for k in blocks])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.legend()
        fig.savefig(plot, dpi=100)
        print(f"plot: {plot}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
