"""The kernel dual's column source and block fetches, measured (issue 52): the same rows'
dual solved from the dense source (``core.jit.q_segment``) and from the CSR source
(``core.sparse_kernels.csr_q_segment``), in the same run, on sets of several densities
(a9a 11 %, mushrooms 18.8 %, COD-RNA 100 %, and generated binary rows at chosen densities),
to place ``kernel_columns.CSR_SOURCE_MAX_DENSITY``.

Each solve is ``solve_kernel_dual`` with one thread (no helper), best of ``--repeat``; the
ratio dense / CSR > 1 means the CSR source is faster.  ``--quick``: small subsets (CI).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sparse_elm_vs_svc as vs  # noqa: E402

from elmscale.data import load  # noqa: E402
from elmscale.features.kernels import Kernel  # noqa: E402
from elmscale.solvers.kernel_dual import solve_kernel_dual  # noqa: E402


def _dense(X):
    return X.toarray() if sp.issparse(X) else np.asarray(X)


def _labels(y):
    y = np.asarray(y)
    return np.where(y == y.max(), 1.0, -1.0)


def sets(rows):
    a9a = load(vs.SHARED / "a9a" / "a9a")
    mush = load(vs.SHARED / "mushrooms" / "mushrooms")
    cod = vs.codrna_split(load(vs.CODRNA), None)
    rng = np.random.default_rng(0)
    out = [
        ("a9a", _dense(a9a.X[:rows]), _labels(a9a.y[:rows]), 4.0, 1.0),
        ("mushrooms", _dense(mush.X[:rows]), _labels(mush.y[:rows]), 4.0, 1.0),
        ("cod-rna", np.asarray(cod[0][:rows]), _labels(cod[1][:rows]), 0.5, 1.0),
    ]
    for density in (0.05, 0.2, 0.35, 0.5):
        X = (rng.random((rows, 123)) < density).astype(np.float32)
        w = rng.standard_normal(123)
        y = np.where(X @ w + 0.3 * rng.standard_normal(rows) > np.median(X @ w), 1.0, -1.0)
        out.append((f"binary d=123 {density:.0%}", X, y, 4.0, 1.0))
    return out


def timed(X, t, kernel, C):
    info = {}
    start = time.perf_counter()
    alpha, steps, converged, g = solve_kernel_dual(
        X, t, kernel=kernel, C=C, helper=False, cache_size=100.0, info=info
    )
    elapsed = time.perf_counter() - start
    # 0.5 a'Qa - 1'a = 0.5 a'(g + 1) - 1'a
    objective = 0.5 * float(alpha @ (g + 1.0)) - float(alpha.sum())
    return elapsed, objective, steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=8_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    rows = 1_000 if args.quick else args.rows
    print(
        f"{'set':<22} {'density':>8} {'dense s':>8} {'CSR s':>8} {'dense/CSR':>9} {'obj diff':>9}"
    )
    for name, X, t, sigma, C in sets(rows):
        X = np.ascontiguousarray(X, np.float32)
        kernel = Kernel("gaussian", sigma=sigma)
        density = np.count_nonzero(X) / X.size
        csr = sp.csr_matrix(X)
        timed(X[:200], t[:200], kernel, C)  # compile
        timed(csr[:200], t[:200], kernel, C)
        dense = min((timed(X, t, kernel, C) for _ in range(args.repeat)), key=lambda r: r[0])
        sparse = min((timed(csr, t, kernel, C) for _ in range(args.repeat)), key=lambda r: r[0])
        print(
            f"{name:<22} {density:8.3f} {dense[0]:8.3f} {sparse[0]:8.3f} "
            f"{dense[0] / sparse[0]:9.2f} {abs(dense[1] - sparse[1]) / abs(dense[1]):9.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
