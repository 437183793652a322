"""The random-node sparse ELM in one process: the Newton solver against dual coordinate
descent, by rows and by one-vs-one pairs, for ``solver="auto"``'s crossover.

    python benchmarks/newton_crossover.py            # 1k .. 10M rows, 2 .. 10 classes
    python benchmarks/newton_crossover.py --quick    # a few small sizes, for CI

Each row: ``SparseELMClassifier(hidden="sigmoid", n_hidden=200, C=1, tol=1e-3)`` fitted from
arrays (elmscale's generated problem, 8 features) with ``solver="dual"`` and with
``solver="newton"``, both on the process's two cores, after a warm-up fit of each (so no
compile time counts); best of ``--repeat`` fits below 1M rows, one fit above.  Prints both
times, their ratio (Newton / dual: below 1, Newton is faster), the passes, and the relative
difference of the objectives (both are the same optimum within tol).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from elmscale import SparseELMClassifier
from elmscale.data import generate_classification

FULL = [(1_000, 2), (1_000, 6), (2_000, 2), (2_000, 6), (5_000, 6), (10_000, 10)]
FULL += [(100_000, k) for k in (2, 3, 5, 10)]
FULL += [(n, 2) for n in (300_000, 1_000_000, 3_000_000, 10_000_000)]
QUICK = [(1_000, 2), (2_000, 6), (20_000, 2), (20_000, 3)]


def _timed(model, X, y, repeat):
    best, fitted = np.inf, None
    for _ in range(repeat):
        started = time.perf_counter()
        fitted = model.fit(X, y)
        best = min(best, time.perf_counter() - started)
    return fitted, best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--n-hidden", type=int, default=200)
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL

    def model(solver):
        return SparseELMClassifier(
            hidden="sigmoid", n_hidden=args.n_hidden, C=1.0, random_state=0, solver=solver
        )

    warm = generate_classification(3_000, 8, n_classes=3, random_state=0)
    for solver in ("dual", "newton"):
        model(solver).fit(warm.X, warm.y)
    print(
        f"SparseELMClassifier(hidden='sigmoid', n_hidden={args.n_hidden}, C=1, tol=1e-3) "
        "from arrays, two cores; times in s (best of "
        f"{args.repeat} below 1M rows)"
    )
    print(
        f"{'rows':>11} {'classes':>7} {'dual s':>8} {'passes':>7} {'newton s':>9} "
        f"{'passes':>7} {'newton/dual':>11} {'objective rel':>13}",
        flush=True,
    )
    for n, k in sizes:
        data = generate_classification(n, 8, n_classes=k, random_state=1)
        X, y = data.X.astype(np.float32), data.y
        repeat = args.repeat if n < 1_000_000 else 1
        dual, dual_s = _timed(model("dual"), X, y, repeat)
        newton, newton_s = _timed(model("newton"), X, y, repeat)
        rel = np.max(np.abs(newton.objective_ - dual.objective_) / np.abs(dual.objective_))
        print(
            f"{n:>11,} {k:>7} {dual_s:>8.3f} {dual.n_iter_.max():>7} {newton_s:>9.3f} "
            f"{newton.n_iter_.max():>7} {newton_s / dual_s:>10.2f}x {rel:>13.1e}",
            flush=True,
        )
        del X, y, data, dual, newton
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
