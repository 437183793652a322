"""Fit time of ELMClassifier(hidden="sigmoid", n_hidden=1000) against a plain numpy floor.

The floor is the same model written the obvious way in numpy: float64 H built in
chunks (np.exp), H'H and H'T summed chunk by chunk, a Cholesky solve; BLAS may use
every core, like elmscale.  Both use the same hidden-layer weights and the same
generated rows (elmscale.data.generate_classification, 8 features in [-1, 1]).

    python benchmarks/elm_fit.py            # 200,000 training rows (the issue's size)
    python benchmarks/elm_fit.py --quick    # 20,000 rows, for CI

Prints the best-of-N wall time of each, the ratio floor / elmscale, and the test
accuracy of each, at C = 1 (the default) and C = 100.  Target: ratio >= 1.5 at
equal accuracy.  elmscale's default precision="auto" multiplies in float32 where
that is exact enough (C = 1 here) and in float64 where it is not (C = 100).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

from elmscale import ELMClassifier
from elmscale.core.threads import available_cores
from elmscale.data import generate_classification


def numpy_floor_fit(X, y, weights, biases, C, chunk=10_000):
    """beta = (I/C + H'H)^-1 H'T with float64 numpy, chunked; returns beta."""
    W = weights.astype(np.float64)
    b = biases.astype(np.float64)
    L = W.shape[1]
    T = np.where(y == 1, 1.0, -1.0)
    G = np.zeros((L, L))
    HT = np.zeros(L)
    for start in range(0, X.shape[0], chunk):
        H = 1.0 / (1.0 + np.exp(-(X[start : start + chunk] @ W + b)))
        G += H.T @ H
        HT += H.T @ T[start : start + chunk]
    G.flat[:: L + 1] += 1.0 / C
    return scipy.linalg.cho_solve(scipy.linalg.cho_factor(G), HT)


def numpy_floor_predict(X, weights, biases, beta, chunk=10_000):
    W = weights.astype(np.float64)
    b = biases.astype(np.float64)
    out = np.empty(X.shape[0])
    for start in range(0, X.shape[0], chunk):
        out[start : start + chunk] = (
            1.0 / (1.0 + np.exp(-(X[start : start + chunk] @ W + b))) @ beta
        )
    return (out > 0).astype(int)


def best_time(fn, repeats):
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small size for CI")
    parser.add_argument("--rows", type=int, default=None)
    parser.add_argument("--n-hidden", type=int, default=1000)
    parser.add_argument(
        "--C",
        type=float,
        nargs="+",
        default=[1.0, 100.0],
        help="values of C (default: 1, the estimator's default, and 100)",
    )
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    rows = args.rows or (20_000 if args.quick else 200_000)
    cores = available_cores()

    data = generate_classification(rows + 50_000, n_features=8, random_state=0)
    X, y = data.X[:rows], data.y[:rows]
    X_test, y_test = data.X[rows:], data.y[rows:]

    # Warm-up: numba compiles (or loads its cache) outside the timed runs.
    ELMClassifier(n_hidden=16, random_state=0).fit(X[:500], y[:500]).predict(X[:10])

    print(
        f"ELM fit, sigmoid, {args.n_hidden} nodes, {rows:,} x 8 rows, {cores} cores, "
        f"best of {args.repeats}; floor = numpy float64, chunked H'H, Cholesky"
    )
    ratios = []
    for C in args.C:
        est = ELMClassifier(hidden="sigmoid", n_hidden=args.n_hidden, C=C, random_state=0)
        seconds, model = best_time(lambda est=est: est.fit(X, y), args.repeats)
        acc = float(np.mean(model.predict(X_test) == y_test))
        layer = model.hidden_layer_
        with threadpool_limits(cores):
            floor_s, beta = best_time(
                lambda: numpy_floor_fit(X, y, layer.weights, layer.biases, C), args.repeats
            )
            floor_acc = float(
                np.mean(numpy_floor_predict(X_test, layer.weights, layer.biases, beta) == y_test)
            )
        ratios.append(floor_s / seconds)
        print(
            f"  C={C:<6g} floor {floor_s:6.3f} s (test acc {floor_acc:.4f})   "
            f"elmscale {seconds:6.3f} s (test acc {acc:.4f}, precision {model.precision_})   "
            f"speed-up {floor_s / seconds:4.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
