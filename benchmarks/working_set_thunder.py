"""The one-process working set (``solvers.thunder``, Thunder style: q columns in blocks,
local steps on the q x q block, one batched gradient update) against the dual solver
(``solver="dual"``: LIBSVM's steps, LRU-cached columns one by one), in the same run: the
crossover that ``solvers.thunder.thunder_wins`` records (issue 52 item 3).

    python benchmarks/working_set_thunder.py            # a9a's first 8,000 rows, COD-RNA's
    python benchmarks/working_set_thunder.py --quick    # 2,000 rows each, q = 512 only
    python benchmarks/working_set_thunder.py --wide     # the crossover by features

``--wide``: generated dense sets (``elmscale.data.generate_classification``, uniform
features) of 20,000 rows (``--rows``) at 32 to 300 features, gaussian sigma 10 sqrt(d /
300) (sparse_elm_field.py's wide set at d = 300), C 1, and q = 512 (the default), against
the dual: the crossover that ``thunder.THUNDER_MIN_FEATURES`` records.

a9a: 123 binary features, gaussian sigma 4, C 1 (issue 52's row); COD-RNA: the seeded
half's first rows (benchmarks/sparse_elm_vs_svc.py's split), 8 features, sigma 0.5, C 100.
Times the best of ``--repeat`` (2) after a warm-up on 500 rows; the objectives beside.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from elmscale import SparseELMClassifier
from elmscale.data import load
from elmscale.features.kernels import Kernel
from elmscale.solvers.thunder import solve_thunder

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sparse_elm_vs_svc as vs  # noqa: E402


def sets(rows):
    a9a = load(vs.SHARED / "a9a" / "a9a")
    X = a9a.X[:rows]
    X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, np.float32)
    X_cod, y_cod, _, _ = vs.codrna_split(load(vs.CODRNA), rows)
    return (
        ("a9a", X, a9a.y[:rows], 4.0, 1.0),
        ("COD-RNA", np.asarray(X_cod, np.float32), y_cod, 0.5, 100.0),
    )


#: ``--wide``'s feature counts
WIDE_FEATURES = (32, 64, 128, 200, 300)


def wide_sets(rows):
    from elmscale.data import generate_classification

    for d in WIDE_FEATURES:
        data = generate_classification(rows, d, 2, random_state=0)
        yield (f"wide d={d}", np.asarray(data.X, np.float32), data.y, 10.0 * np.sqrt(d / 300), 1.0)


def best_of(repeat, fn):
    best, out = np.inf, None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--wide", action="store_true", help="the crossover by features")
    parser.add_argument(
        "--kernel",
        choices=("gaussian", "laplacian"),
        default="gaussian",
        help="--wide's kernel (laplacian: sigma 10 sqrt(d / 300) too; float64 block products)",
    )
    args = parser.parse_args(argv)
    if args.wide:
        rows = args.rows or (2_000 if args.quick else 20_000)
        qs: tuple = (512,)
    else:
        rows = args.rows or (2_000 if args.quick else 8_000)
        qs = (512,) if args.quick else (256, 1024, 2048)
    kind = args.kernel if args.wide else "gaussian"
    print(
        f"first {rows:,} rows; {kind} kernel; times the best of {args.repeat}; "
        "ratio = dual / working set"
    )
    for name, X, y, sigma, C in wide_sets(rows) if args.wide else sets(rows):
        y_idx = np.unique(y, return_inverse=True)[1]
        kernel = Kernel(kind, sigma=sigma)

        def dual():
            return SparseELMClassifier(kernel=kind, sigma=sigma, C=C, solver="dual").fit(X, y)

        SparseELMClassifier(kernel=kind, sigma=sigma, C=C, solver="dual").fit(X[:500], y[:500])
        solve_thunder(X[:500], y_idx[:500], 2, kernel, C=C, tol=1e-3, q=128)
        t_dual, model = best_of(args.repeat, dual)
        print(
            f"  {name} ({X.shape[1]} features, sigma {sigma:g}, C {C:g}): dual {t_dual:.2f} s, "
            f"objective {model.objective_[0]:.6g}"
        )
        for q in qs:
            t, result = best_of(
                args.repeat, lambda q=q: solve_thunder(X, y_idx, 2, kernel, C=C, tol=1e-3, q=q)
            )
            print(
                f"    working set q={q:<5} {t:6.2f} s, ratio {t_dual / t:5.2f}x, iterations "
                f"{int(result.n_iter[0])}, objective {result.objective[0]:.6g}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
