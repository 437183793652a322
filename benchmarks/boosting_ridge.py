"""GGBRELMClassifier (S random sigmoid layers of D nodes, one ridge system on the S
concatenated layers) fitted through Dask from generated Parquet data, against the in-memory
fit of the same rows and against a numpy floor; and every C of the paper's grid, GBRELM
and the single ELM solved from the same Gram.

    python benchmarks/boosting_ridge.py            # S = 10: 1M and 10M rows at D = 100,
                                                   # 100k rows at D = 1000 (a 10,000 x
                                                   # 10,000 Gram); ~1 GB of Parquet
    python benchmarks/boosting_ridge.py --quick    # 20k rows at D = 100, 4k at D = 200
    python benchmarks/boosting_ridge.py --sizes 200000x100 100000x1000

Rows: ``elmscale.data``'s generated problem (8 features in [-1, 1], two classes), written
by benchmarks/make_parquet.py into --data-dir (kept between runs, shared with
benchmarks/dask_gram.py).  Every model: C = 1 (the library's: ``(H'H + I / C)``),
precision "double" (float64 products, what the grid's C = 100 needs) unless --precision
says otherwise.

For each size, in this order:

* dask: a 2-worker LocalCluster, 1 thread each (started once, its start-up printed apart;
  numba warmed on the workers first).  The fit is ``fit(dataset, client=client)`` in its
  two public steps, so that its Gram serves the rest: ``est.dataset_gram`` (ONE pass over
  the Parquet rows on the workers: the S layers' ``H'H`` and ``H'Y``), then
  ``est.solve`` (a Cholesky) and ``set_solution``.  Peak RSS (VmHWM, reset before) of the
  coordinator and of each worker over the fit.
* from that Gram: GGBRELM at the grid's other C values, GBRELM (sequential) and the
  single ELM (the first layer's block) at every C of the paper's grid
  {0.01, 0.1, 1, 10, 100}: their time, as a percentage of the dask fit's (target <= 10 %).
* local: the cluster closed, ``GGBRELMClassifier(...).fit(X, y)`` on the same rows in
  memory (read before, not timed), both cores.  Throughput ratio: dask rows/s over local
  rows/s, i.e. local s / dask s (target >= 0.8).
* floor: what a careful numpy user writes for the same model, on both cores (BLAS 2
  threads): the S layers' weights concatenated (d x SD float32); per block of rows,
  ``X_b @ W + b`` into a reused float32 buffer, the sigmoid in place in float32
  (``negative, exp, += 1, reciprocal``: the library's nodes are float32 too), widened into
  a reused float64 buffer, ``G += H_b' H_b`` by one in-place ``dsyrk`` (upper triangle,
  float64 products, no L x L temporary) and ``H'T += H_b' T_b`` (dgemm); then ``I / C`` on
  the diagonal and a Cholesky (``cho_factor`` / ``cho_solve`` in place).  Blocks of
  --floor-block-rows rows (default: the float64 block near 256 MB, 2k-16k rows).  Target:
  floor s / ours s >= 2.

Checks (exit status 1 if one fails): dask and local output weights agree to 1e-6 relative
(Frobenius); the floor's decision values on 20k fresh rows agree with ours to 1e-3
relative (its float32 sigmoid rounds differently from the library's by an ulp, which the
near-singular directions of H'H amplify in the weights, so weights are printed, not
checked) and its test accuracy is within 0.002 of ours.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np
import scipy.linalg
import scipy.linalg.blas
from distributed import Client
from make_parquet import make_parquet
from peak_rss import measured
from threadpoolctl import threadpool_limits
from two_workers import two_worker_cluster

from elmscale import ELMClassifier, GBRELMClassifier, GGBRELMClassifier, open_parquet
from elmscale.core.threads import available_cores, thread_budget
from elmscale.data import generate_classification

#: the paper's grid of C (the paper's C is 1 / ours; the set is the same either way)
PAPER_CS = (0.01, 0.1, 1.0, 10.0, 100.0)
FULL_SIZES = ((1_000_000, 100), (10_000_000, 100), (100_000, 1000))
QUICK_SIZES = ((20_000, 100), (4_000, 200))  # CI: runs and prints (D = 300's grid: 85 s loaded)
#: dask and local output weights must agree to this (relative, Frobenius)
COEF_TOL = 1e-6
#: the floor's decision values against ours (relative), and test accuracy
FLOOR_OUTPUT_TOL = 1e-3
FLOOR_ACCURACY_TOL = 0.002
TEST_ROWS = 20_000


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


# -- the numpy floor --------------------------------------------------------------------
def floor_block_rows(n_columns: int) -> int:
    """Rows per block: the float64 block of H near 256 MB, within 2k-16k rows."""
    return int(min(16384, max(2048, 2**28 // (8 * n_columns))))


def numpy_floor_fit(X, y, layers, C: float, block_rows: int):
    """GGBRELM's ``beta = (H'H + I / C)^-1 H'T`` (T: 0/1 class indicators) written in numpy
    and BLAS as a careful user would (see the module docstring)."""
    W = np.ascontiguousarray(np.concatenate([layer.weights for layer in layers], axis=1))
    b = np.concatenate([layer.biases for layer in layers])
    classes = np.unique(y)
    L = W.shape[1]
    G = np.zeros((L, L), order="F")  # dsyrk accumulates into it in place
    HtT = np.zeros((L, classes.size))
    H32 = np.empty((block_rows, L), dtype=np.float32)
    H64 = np.empty((block_rows, L), dtype=np.float64)
    for start in range(0, X.shape[0], block_rows):
        Xb, yb = X[start : start + block_rows], y[start : start + block_rows]
        h32, h64 = H32[: len(Xb)], H64[: len(Xb)]
        np.matmul(Xb, W, out=h32)
        h32 += b
        np.negative(h32, out=h32)
        np.exp(h32, out=h32)
        h32 += np.float32(1.0)
        np.reciprocal(h32, out=h32)
        np.copyto(h64, h32)
        # h64' is Fortran-ordered (L x n): G += h64' h64 without copies or temporaries
        G = scipy.linalg.blas.dsyrk(1.0, h64.T, beta=1.0, c=G, trans=0, lower=0, overwrite_c=1)
        HtT += h64.T @ (yb[:, None] == classes).astype(np.float64)
    G.flat[:: L + 1] += 1.0 / C
    factor = scipy.linalg.cho_factor(G, lower=False, overwrite_a=True, check_finite=False)
    return classes, W, b, scipy.linalg.cho_solve(factor, HtT, check_finite=False)


def numpy_floor_decision(X, W, b, beta) -> np.ndarray:
    H = 1.0 / (1.0 + np.exp(-(X @ W + b)))
    out = H.astype(np.float64) @ beta
    return out[:, 1] - out[:, 0]


# -- the benchmark ----------------------------------------------------------------------
def parse_size(text: str) -> tuple[int, int]:
    rows, _, hidden = text.lower().partition("x")
    try:
        return int(float(rows)), int(hidden)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected ROWSxD such as 200000x100; got {text!r}"
        ) from None


def relative(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a) - b) / np.linalg.norm(b))


def dask_fit(rows, hidden, path, params, C, client, test):
    """One size's dask fit, its RSS and the grid's extra solves from the same Gram."""
    other_Cs = [c for c in PAPER_CS if c != C]
    ds = open_parquet(path)
    est = GGBRELMClassifier(**params, n_hidden=hidden)

    def fit():
        (layer, gram), pass_s = timed(lambda: est.dataset_gram(ds, client=client))
        with thread_budget(est.n_threads):
            start = time.perf_counter()
            HtH, HtT, _ = gram.ridge_terms(est.target_encoder_)
            est.set_solution(layer, est.solve(HtH, HtT, C))
            solve_s = time.perf_counter() - start
        return HtH, HtT, pass_s, solve_s

    (HtH, HtT, pass_s, solve_s), seconds, coordinator, workers = measured(fit, client)
    # every other C, GBRELM and the single ELM, from the same Gram
    gb = GBRELMClassifier(**params, n_hidden=hidden)
    elm = ELMClassifier(n_hidden=hidden)
    with thread_budget(est.n_threads):
        _, grid_s = timed(lambda: est.solve_path(HtH, HtT, other_Cs))
        gb_coefs, gb_s = timed(lambda: gb.solve_path(HtH, HtT, PAPER_CS))
        _, elm_s = timed(lambda: elm.solve_path(HtH[:hidden, :hidden], HtT[:hidden], PAPER_CS))
    gb.set_params(C=C)
    for name in ("classes_", "n_features_in_", "precision_"):
        setattr(gb, name, getattr(est, name))
    gb.set_solution(est.hidden_layer_, gb_coefs[PAPER_CS.index(C)])
    extra = grid_s + gb_s + elm_s
    r = dict(
        seconds=seconds,
        pass_s=pass_s,
        solve_s=solve_s,
        coordinator=coordinator,
        workers=workers,
        grid_s=grid_s,
        gb_s=gb_s,
        elm_s=elm_s,
        extra=extra,
        coef=est.coef_,
        precision=est.precision_,
        acc=est.score(test.X, test.y),
        gb_acc=gb.score(test.X, test.y),
    )
    print(
        f"  dask  {rows:>11,} rows, S={params['n_estimators']}, D={hidden} "
        f"({r['precision']}): {seconds:8.2f} s (pass {pass_s:.2f} + solve {solve_s:.2f}), "
        f"{rows / seconds / 1e6:.3f} M rows/s; peak RSS coordinator {coordinator:.0f} MB, "
        f"workers {', '.join(f'{w:.0f}' for w in workers)} MB; test acc {r['acc']:.4f}",
        flush=True,
    )
    print(
        f"        same Gram: GGBRELM at the other {len(other_Cs)} C {grid_s:.2f} s, "
        f"GBRELM at {len(PAPER_CS)} C {gb_s:.2f} s (test acc at C={C:g} "
        f"{r['gb_acc']:.4f}), ELM at {len(PAPER_CS)} C {elm_s:.3f} s: "
        f"+{extra:.2f} s = {100 * extra / seconds:.1f} % of the fit (target <= 10 %)",
        flush=True,
    )
    return r


def dask_phase(sizes, paths, params, C, client, test):
    """Each size's dask fit (:func:`dask_fit`), the Grams freed between sizes."""
    results = {}
    for rows, hidden in sizes:
        results[rows, hidden] = dask_fit(rows, hidden, paths[rows], params, C, client, test)
        gc.collect()
    return results


def local_phase(sizes, paths, params, C, test, block_rows_arg, cores, dask_results):
    """Each size's in-memory fit and numpy floor, compared with the dask fit."""
    failures = []
    for rows, hidden in sizes:
        X, y = open_parquet(paths[rows]).read()
        d = dask_results[rows, hidden]
        est, local_s, local_mb, _ = measured(
            lambda X=X, y=y, hidden=hidden: GGBRELMClassifier(**params, n_hidden=hidden).fit(X, y)
        )
        coef_diff = relative(d["coef"], est.coef_)
        block_rows = block_rows_arg or floor_block_rows(params["n_estimators"] * hidden)
        with threadpool_limits(cores):
            (classes, W, b, beta), floor_s, floor_mb, _ = measured(
                lambda X=X, y=y, est=est: numpy_floor_fit(
                    X, y, est.hidden_layer_.layers, C, block_rows
                )
            )
            floor_out = numpy_floor_decision(test.X, W, b, beta)
        ours_out = est.decision_function(test.X)
        floor_acc = float(np.mean(classes[(floor_out > 0).astype(int)] == test.y))
        local_acc = est.score(test.X, test.y)
        out_diff = relative(floor_out, ours_out)
        beta_diff = relative(beta, est.coef_)
        del X, y
        gc.collect()
        d.update(
            local_s=local_s,
            local_mb=local_mb,
            floor_s=floor_s,
            floor_mb=floor_mb,
            coef_diff=coef_diff,
            out_diff=out_diff,
        )
        print(
            f"  local {rows:>11,} rows, S={params['n_estimators']}, D={hidden} "
            f"({est.precision_}): {local_s:8.2f} s, {rows / local_s / 1e6:.3f} M rows/s, "
            f"peak RSS {local_mb:.0f} MB; test acc {local_acc:.4f}; "
            f"|coef dask - local| / |coef local| = {coef_diff:.1e} (must be <= {COEF_TOL:g})",
            flush=True,
        )
        print(
            f"  floor {rows:>11,} rows, S={params['n_estimators']}, D={hidden} "
            f"(blocks of {block_rows:,} rows): {floor_s:8.2f} s, "
            f"{rows / floor_s / 1e6:.3f} M rows/s, peak RSS {floor_mb:.0f} MB; test acc "
            f"{floor_acc:.4f}; decision values vs ours {out_diff:.1e} (must be <= "
            f"{FLOOR_OUTPUT_TOL:g}), weights {beta_diff:.1e}",
            flush=True,
        )
        if not coef_diff <= COEF_TOL:
            failures.append(
                f"{rows:,} x D={hidden}: dask and local weights differ ({coef_diff:.1e})"
            )
        if not out_diff <= FLOOR_OUTPUT_TOL or abs(floor_acc - local_acc) > FLOOR_ACCURACY_TOL:
            failures.append(
                f"{rows:,} x D={hidden}: the floor disagrees with ours (decision values "
                f"{out_diff:.1e}, accuracy {floor_acc:.4f} against {local_acc:.4f})"
            )
    return failures


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for CI")
    parser.add_argument(
        "--sizes",
        type=parse_size,
        nargs="+",
        default=None,
        metavar="ROWSxD",
        help="sizes to run instead, e.g. 200000x100 100000x1000",
    )
    parser.add_argument("--n-estimators", type=int, default=10, help="S (default 10)")
    parser.add_argument("--C", type=float, default=1.0, help="the fit's C (default 1)")
    parser.add_argument("--precision", default="double", choices=("double", "single", "auto"))
    parser.add_argument("--floor-block-rows", type=int, default=None)
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    C = float(args.C)
    cores = available_cores()
    params = dict(n_estimators=args.n_estimators, C=C, precision=args.precision, random_state=0)

    start = time.perf_counter()
    paths = {
        rows: make_parquet(args.data_dir / f"classification-{rows}", rows) for rows, _ in sizes
    }
    print(
        f"GGBRELMClassifier(sigmoid, n_estimators={args.n_estimators}, C={C:g}, "
        f"precision={args.precision!r}) on generated rows x 8 features; Parquet in "
        f"{args.data_dir} ({time.perf_counter() - start:.1f} s to write or find); "
        f"{cores} cores; dask: 2-worker LocalCluster, 1 thread each; local and floor: "
        f"this process, {cores} threads",
        flush=True,
    )
    test = generate_classification(TEST_ROWS, random_state=1)
    warm_X = np.random.default_rng(0).uniform(-1, 1, (64, 8)).astype(np.float32)
    warm_y = np.arange(64) % 2

    def warm_up():
        GGBRELMClassifier(n_estimators=2, n_hidden=4, random_state=0).fit(warm_X, warm_y)

    warm_up()
    start = time.perf_counter()
    with (
        two_worker_cluster() as cluster,
        Client(cluster) as client,
    ):
        startup = time.perf_counter() - start
        client.run(warm_up)
        print(f"  cluster start {startup:.1f} s (not counted in the fits)", flush=True)
        results = dask_phase(sizes, paths, params, C, client, test)
    failures = local_phase(sizes, paths, params, C, test, args.floor_block_rows, cores, results)

    print(
        "\n  rows        S    D   dask s  local s  floor s  dask/local thr  floor/local  "
        "floor/dask  coord MB  max worker MB  grid+GBRELM+ELM"
    )
    for (rows, hidden), r in results.items():
        print(
            f"  {rows:<11,} {args.n_estimators:<3} {hidden:<5}"
            f"{r['seconds']:7.2f}  {r['local_s']:7.2f}  {r['floor_s']:7.2f}  "
            f"{r['local_s'] / r['seconds']:14.2f}  {r['floor_s'] / r['local_s']:11.2f}  "
            f"{r['floor_s'] / r['seconds']:10.2f}  {r['coordinator']:8.0f}  "
            f"{max(r['workers']):13.0f}  {100 * r['extra'] / r['seconds']:13.1f} %"
        )
    print(
        "  targets: dask/local throughput >= 0.8; floor / ours >= 2; RSS flat in rows at "
        "equal D; grid + GBRELM + ELM <= 10 % of a fit"
    )
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
