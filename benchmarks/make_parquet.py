"""Write a large synthetic Parquet data set (elmscale.data's generated problem).

    python benchmarks/make_parquet.py OUT_DIR --rows 10000000            # 10 files of 1M rows

Rows come from ``elmscale.data.write_generated_parquet`` (8 features in [-1, 1], a
nonlinear two-class problem, 3 % label noise): row i is the same whatever the file size, so
a 20M-row set starts with the 10M-row one.  Files hold ``--rows-per-file`` rows in row
groups of 256k (float32 features without dictionary encoding, zstd), each written to a
temporary name and renamed; a finished folder is marked and kept on a rerun.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from elmscale.data import write_generated_parquet


def make_parquet(
    out: Path, rows: int, features: int = 8, rows_per_file: int = 1_000_000, random_state: int = 0
) -> Path:
    return write_generated_parquet(
        out, rows, n_features=features, random_state=random_state, rows_per_file=rows_per_file
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=1_000_000)
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    make_parquet(args.out, args.rows, args.features, args.rows_per_file, args.random_state)
    size = sum(f.stat().st_size for f in args.out.glob("part-*.parquet")) / 2**20
    print(
        f"{args.out}: {args.rows:,} rows x {args.features} features, {size:.0f} MB, "
        f"{time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
