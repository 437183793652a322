"""Write a large synthetic Parquet data set (elmscale.data's generated problem).

    python benchmarks/make_parquet.py OUT_DIR --rows 10000000            # 10 files of 1M rows
    python benchmarks/make_parquet.py OUT_DIR --rows 20000000 --features 8 --rows-per-file 1000000

Rows come from ``elmscale.data.iter_classification_blocks`` (8 features in [-1, 1], a
nonlinear two-class problem, 3 % label noise): row i is the same whatever the file size, so
a 20M-row set starts with the 10M-row one.  Files hold ``--rows-per-file`` rows in row
groups of 256k (float32 features without dictionary encoding, zstd; the label as int64),
each written to a temporary name and renamed.  A finished set is marked by
``_elmscale_generated.json``; running again with the same arguments does nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from elmscale.data import iter_classification_blocks, write_parquet

MARKER = "_elmscale_generated.json"


def make_parquet(out: Path, rows: int, features: int = 8, rows_per_file: int = 1_000_000,
                 row_group_rows: int = 262_144, random_state: int = 0) -> Path:
    """Write the set (or keep it when the marker says it is already there); returns ``out``."""
    out = Path(out)
    spec = {"rows": rows, "features": features, "rows_per_file": rows_per_file,
            "row_group_rows": row_group_rows, "random_state": random_state}
    marker = out / MARKER
    if marker.exists() and json.loads(marker.read_text()) == spec:
        return out
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("part-*.parquet"):
        old.unlink()
    marker.unlink(missing_ok=True)
    blocks = iter_classification_blocks(rows, rows_per_file, n_features=features,
                                        random_state=random_state)
    for i, (X, y) in enumerate(blocks):
        write_parquet(X, out / f"part-{i:05d}.parquet", y=y, row_group_size=row_group_rows)
    marker.write_text(json.dumps(spec))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--features", type=int, default=8)
    parser.add_argument("--rows-per-file", type=int, default=1_000_000)
    parser.add_argument("--random-state", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    make_parquet(args.out, args.rows, args.features, args.rows_per_file,
                 random_state=args.random_state)
    size = sum(f.stat().st_size for f in args.out.glob("part-*.parquet")) / 2**20
    print(f"{args.out}: {args.rows:,} rows x {args.features} features, {size:.0f} MB, "
          f"{time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
