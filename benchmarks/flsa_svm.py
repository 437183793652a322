"""FLSA-SVM on COD-RNA against SVC (LIBSVM) and against what a user would pick for a budget
of m basis functions (scikit-learn's ``Nystroem(n_components=m)`` + ``RidgeClassifier``),
and its Dask path against the local one.

    python benchmarks/flsa_svm.py           # the COD-RNA half (29,768 training rows)
    python benchmarks/flsa_svm.py --quick   # 5,000 training rows, small m, for CI

Gaussian kernel, sigma = 0.5 (gamma = 2), features scaled to [-1, 1] on the training
part; the sparse-ELM paper's split (a seeded permutation, 29,768 / 29,767 rows).
In this order, timed in the same run:

* SVC(C=1, gamma=2): fit, test accuracy, support vectors.
* the reduced FLSA-SVM (``candidates`` = --pool rows, seeded): ONE selection run to the
  largest m, the models of every m of --ms from it; test accuracy at each m.  Its
  candidates' Gram fits the default ``cache_mb``, so it runs in their space
  (``forward_select_gram``).
* the full FLSA-SVM (every training row a candidate): the rows' steps with every kernel
  column kept in float32 (``cache_mb`` = --full-cache-mb, by default enough for all l^2
  values: 3.4 GB on the COD-RNA half); the time of a step measured as the difference of
  two short runs (1 and 1 + 20 steps: the columns' kernel values are computed once, in
  the first), then one run to the largest m of --ms up to --full-m (500, the bound the
  issue set: within 3x SVC's fit) that fits in --full-budget seconds (it says where it
  stops), timed with its peak memory.
* Peak memory (resident, added by the fit: VmHWM) beside each fit.
* Nystroem(n_components=m, gamma=2, random_state=0) + RidgeClassifier() at each m:
  fit (both steps) and test accuracy, one fit per m.
* Dask: the reduced variant fitted on --dask-rows rows of COD-RNA's whole training file
  (all 59,535 by default, in a seeded order) with m = --dask-m, on a 2-worker LocalCluster
  (``fit(X, y, client=client)``), against the same fit here: the same support vectors and
  weights (checked), the time of each.

Exit status 1 if the Dask and local models differ.  Needs ../shared/data (COD-RNA).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from distributed import Client
from sklearn.kernel_approximation import Nystroem
from sklearn.linear_model import RidgeClassifier
from sklearn.pipeline import make_pipeline
from sklearn.svm import SVC

from elmscale import FLSASVMClassifier
from elmscale.data import Scaler, load

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmarks
from sparse_elm_vs_svc import codrna_split, peak_extra_mb  # noqa: E402
from two_workers import two_worker_cluster  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CODRNA = SHARED / "cod-rna" / "codrna.csv"
SIGMA = 0.5
GAMMA = 1.0 / (2 * SIGMA**2)


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def timed_peak(fn):
    """``(seconds, result, peak MB)``: ``fn`` timed, and the resident memory it added at
    its peak."""
    out = {}
    peak = peak_extra_mb(lambda: out.update(zip(("s", "r"), timed(fn))))
    return out["s"], out["r"], peak


def split(quick: bool):
    """``sparse_elm_vs_svc.codrna_split`` (5,000 rows of each part with ``quick``), and the
    loaded data set (the Dask part samples it)."""
    data = load(CODRNA)
    return (*codrna_split(data, 5_000 if quick else None), data)


def flsa_path(X, y, X_te, y_te, ms, **params):
    seconds, models, peak = timed_peak(
        lambda: FLSASVMClassifier(sigma=SIGMA, **params).fit_path(X, y, list(ms))
    )
    scores = {m: (model.n_support_, model.score(X_te, y_te)) for m, model in zip(ms, models)}
    return seconds, scores, peak


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a CI size")
    parser.add_argument("--ms", type=int, nargs="+", default=None)
    parser.add_argument("--pool", type=int, default=None, help="reduced variant's candidates")
    parser.add_argument("--full-budget", type=float, default=None, help="seconds, full variant")
    parser.add_argument(
        "--full-cache-mb", type=float, default=None, help="full variant's cache_mb (all columns)"
    )
    parser.add_argument(
        "--full-m", type=int, default=500, help="full variant: the largest m it runs to"
    )
    parser.add_argument("--dask-rows", type=int, default=None)
    parser.add_argument("--dask-m", type=int, default=None)
    args = parser.parse_args(argv)
    quick = args.quick
    ms = args.ms or ([10, 25, 50, 100] if quick else [50, 100, 200, 500, 1000])
    pool = args.pool or (500 if quick else 2000)
    budget = args.full_budget or (30.0 if quick else 600.0)
    dask_rows = args.dask_rows or (10_000 if quick else 59_535)
    dask_m = args.dask_m or (50 if quick else 200)

    X, y, X_te, y_te, data = split(quick)
    # numba compile / cache load, of both paths: the candidates' space, and the rows' steps
    # with cached float32 columns (a cache too small for the 100 x 100 Gram, not the columns)
    FLSASVMClassifier(n_support=3).fit(X[:100], y[:100])
    FLSASVMClassifier(n_support=3, cache_mb=0.01).fit(X[:100], y[:100])
    print(
        f"COD-RNA, {len(y):,} train / {len(y_te):,} test rows, gaussian sigma={SIGMA}; m in {ms}",
        flush=True,
    )
    svc_s, svc, svc_mb = timed_peak(lambda: SVC(C=1.0, gamma=GAMMA, cache_size=200).fit(X, y))
    svc_acc = svc.score(X_te, y_te)
    n_sv = int(svc.n_support_.sum())
    print(
        f"  SVC(C=1): fit {svc_s:.2f} s, peak +{svc_mb:.0f} MB, test accuracy {svc_acc:.4f}, "
        f"{n_sv:,} SVs",
        flush=True,
    )

    reduced_s, reduced, reduced_mb = flsa_path(
        X, y, X_te, y_te, ms, candidates=pool, random_state=0
    )
    gap = 100 * (reduced[max(ms)][1] - svc_acc)
    print(
        f"  FLSA-SVM reduced (pool {pool:,}): one run to m={max(ms)} in {reduced_s:.2f} s, "
        f"peak +{reduced_mb:.0f} MB ({reduced_s / svc_s:.2f}x SVC's fit; at most 1x: "
        f"{reduced_s <= svc_s}); test accuracy at m={max(ms)} {gap:+.2f} points against SVC "
        f"(within 0.3: {abs(gap) <= 0.3 or gap > 0})",
        flush=True,
    )
    # the full variant, every column cached: as far as the budget goes
    cache_mb = args.full_cache_mb or (len(y) ** 2 * 4 / 2**20 + 64)
    full_params = {"cache_mb": cache_mb}
    probe = 20
    first_s, _ = timed(lambda: FLSASVMClassifier(sigma=SIGMA, n_support=1, **full_params).fit(X, y))
    probe_s, _ = timed(
        lambda: FLSASVMClassifier(sigma=SIGMA, n_support=1 + probe, **full_params).fit(X, y)
    )
    per_step = max(probe_s - first_s, 0.0) / probe
    reach = [m for m in ms if m <= args.full_m and first_s + m * per_step <= budget]
    full = {}
    beyond = [m for m in ms if m not in reach and m <= args.full_m]
    where = (
        f"; stops there: m={beyond[0]} would take about {beyond[0] * per_step:.0f} s, over "
        f"the {budget:.0f} s budget"
        if beyond
        else ""
    )
    if reach:
        full_s, full, full_mb = flsa_path(X, y, X_te, y_te, reach, **full_params)
        print(
            f"  FLSA-SVM full (all {len(y):,} rows candidates, cache_mb={cache_mb:.0f}): "
            f"one run to m={max(reach)} in {full_s:.2f} s ({first_s:.2f} s of kernel columns "
            f"and a step, then {(full_s - first_s) / max(max(reach) - 1, 1):.3f} s a step; "
            f"the {probe}-step probe's {per_step:.3f} s set the reach), peak "
            f"+{full_mb:.0f} MB ({full_s / svc_s:.2f}x SVC's fit; within 3x: "
            f"{full_s <= 3 * svc_s}){where}",
            flush=True,
        )
    else:
        print(f"  FLSA-SVM full: {per_step:.2f} s a step, no m within budget{where}")

    print(
        "\n     m  FLSA reduced acc  FLSA full acc  Nystroem+Ridge acc  Nystroem s  "
        "FLSA - Nystroem (reduced)"
    )
    ahead = 0
    for m in ms:
        ny_s, ny = timed(
            lambda m=m: make_pipeline(
                Nystroem(gamma=GAMMA, n_components=m, random_state=0), RidgeClassifier()
            ).fit(X, y)
        )
        ny_acc = ny.score(X_te, y_te)
        red = reduced[m][1]
        ahead += red > ny_acc
        full_acc = f"{full[m][1]:.4f}" if m in full else "-"
        print(
            f"  {m:>5}  {red:16.4f}  {full_acc:>13}  {ny_acc:18.4f}  {ny_s:10.2f}  "
            f"{100 * (red - ny_acc):+8.2f} points"
        )
    print(
        f"  FLSA-SVM (reduced) ahead of Nystroem + Ridge at {ahead} of {len(ms)} budgets; "
        f"at m={max(ms)} it keeps {100 * reduced[max(ms)][0] / n_sv:.1f} % of SVC's "
        f"{n_sv:,} support vectors at {reduced[max(ms)][1]:.4f} against SVC's {svc_acc:.4f}"
    )

    # the Dask path against the local one on the whole training file
    rows = min(dask_rows, data.n_samples)
    take = np.random.default_rng(1).permutation(data.n_samples)[:rows]  # the file is sorted
    Xd = Scaler().fit_transform(data.X[take])
    yd = data.y[take]
    params = dict(sigma=SIGMA, n_support=dask_m, candidates=pool, random_state=0)
    # here in the candidates' space (the default), on the workers the rows' steps: the
    # same selection, the weights equal to rounding
    local_s, local = timed(lambda: FLSASVMClassifier(**params).fit(Xd, yd))
    with (
        two_worker_cluster() as cluster,
        Client(cluster) as client,
    ):
        client.run(lambda: FLSASVMClassifier(n_support=3).fit(X[:100], y[:100]))
        dask_s, on_dask = timed(lambda: FLSASVMClassifier(**params).fit(Xd, yd, client=client))
    same = np.array_equal(local.support_, on_dask.support_) and np.allclose(
        local.dual_coef_, on_dask.dual_coef_, rtol=1e-6, atol=1e-9
    )
    print(
        f"\n  Dask, {rows:,} rows, pool {pool:,}, m={dask_m}: 2 workers {dask_s:.2f} s, here "
        f"{local_s:.2f} s (local / dask {local_s / dask_s:.2f}); the same model: {same}"
    )
    if not same:
        print("FAILED: the Dask model differs from the local one", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
