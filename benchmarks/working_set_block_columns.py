"""Kernel columns in blocks (one float64 GEMM, ``solvers.block_columns.BlockRows``) against
one by one (``core.jit.q_columns``, the per-column kernel), by the number of features: the
crossover that ``block_columns.BLOCK_MIN_FEATURES`` records (issue 52 item 2).

    python benchmarks/working_set_block_columns.py            # 30,000 rows, d = 4 .. 300
    python benchmarks/working_set_block_columns.py --quick    # 3,000 rows, d = 8, 123

Uniform rows in [-1, 1] (seeded), gaussian sigma = sqrt(d / 8) (the exp's arguments in the
same range at every d), 256 columns of Q (signed), best of 3; the largest difference of
the two from the exact float64 kernel is printed beside each.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from elmscale.core.jit import q_columns
from elmscale.features.kernels import Kernel
from elmscale.solvers.block_columns import BLOCK_MIN_FEATURES, BlockRows

FEATURES = (4, 8, 16, 32, 48, 64, 96, 123, 200, 300)


def best_of(repeat, fn):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--columns", type=int, default=256)
    args = parser.parse_args(argv)
    n = args.rows or (3_000 if args.quick else 30_000)
    m = args.columns
    features = (8, 123) if args.quick else FEATURES
    rng = np.random.default_rng(0)
    print(
        f"{n:,} rows x {m} columns of Q, gaussian sigma = sqrt(d / 8), best of 3; "
        f"BLOCK_MIN_FEATURES = {BLOCK_MIN_FEATURES}"
    )
    print(
        f"{'d':>4} {'one by one':>11} {'block':>9} {'block vs one':>13} "
        f"{'err one':>9} {'err block':>9}"
    )
    for d in features:
        X = rng.uniform(-1.0, 1.0, (n, d)).astype(np.float32)
        t = np.where(rng.random(n) < 0.5, 1.0, -1.0).astype(np.float32)
        kernel = Kernel("gaussian", sigma=float(np.sqrt(d / 8)))
        Xt = np.ascontiguousarray(X.T)
        XB, tB = np.ascontiguousarray(X[:m]), np.ascontiguousarray(t[:m])
        slots = np.arange(m, dtype=np.int64)
        one = np.empty((m, n), np.float32)
        block = np.empty((m, n), np.float32)
        params = kernel._params()
        rows = BlockRows(kernel, X, t)
        q_columns(Xt, t, n, XB[:1], tB[:1], slots[:1], 0, 1, *params, one)  # compile
        rows.columns(XB[:1], tB[:1], n, block)
        t_one = best_of(3, lambda: q_columns(Xt, t, n, XB, tB, slots, 0, m, *params, one))
        t_block = best_of(3, lambda: rows.columns(XB, tB, n, block))
        exact = kernel.block(XB, X) * tB[:, None] * t[None, :]
        print(
            f"{d:>4} {t_one * 1e3:>9.1f}ms {t_block * 1e3:>7.1f}ms {t_one / t_block:>12.2f}x "
            f"{np.abs(one - exact).max():>9.1e} {np.abs(block - exact).max():>9.1e}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
