"""FELM / FKELM on colon (2,000 features) and leukaemia (7,129 features) against
``RFECV(LinearSVC)`` and ``SelectFromModel(LinearSVC(penalty="l1"))`` + SVC, all in the
same run; the share of their fit time spent in re-solves and what warm-started re-solves
save against cold ones, on these sets (exact dense path) and on a larger problem
(iterative path).

    python benchmarks/felm.py                # 5 splits of each set (a few minutes)
    python benchmarks/felm.py --quick        # 1 split of colon, a smaller large problem (CI)
    python benchmarks/felm.py --splits 10 --cv   # psi by inner 5-fold CV (slow)
    python benchmarks/felm.py --psi-grid     # kept features / accuracy along relative psi

Data (``../shared/data/feature-selection``), read by ``elmscale.experiments`` (the FELM
protocol's DataSet entries): colon (62 x 2,000, row-number column dropped, labels 0/1)
and leukaemia (72 x 7,129, labels 1/2).  Each split is a seeded stratified 70 / 30 split
at Table 4's sizes (colon 44 / 18, leukaemia 51 / 21; ``trial_split(data, seed)``,
seeds 0, 1, ...), inputs scaled to [-1, 1] on the training part.  Every figure is the
mean over the splits.

Parameters, never tuned on the test part.  By default fixed and documented:

* FELM / FKELM: the paper's Table 5 values for the set (``../shared/reference/
  felm_paper_results.csv``: colon C = 2^-1, psi = 2^2, FKELM sigma_p = 2^0, tau = 0.6;
  leukaemia C = 2^4, psi = 2^4, FKELM sigma_p = 2^-5, tau = 0.6), the paper's sigma_p
  (an inverse width) as the library's sigma = 1 / (sqrt(2) sigma_p); 300 sigmoid nodes,
  ``sigma_star_ratio`` 2^10, the library's other defaults; ``n_threads=1`` (the
  baselines, liblinear and libsvm, run on one thread; ``--n-threads`` to change).
* the baselines: scikit-learn's defaults: ``LinearSVC()`` (C = 1) inside
  ``RFECV(cv=StratifiedKFold(5))``; ``SelectFromModel(LinearSVC(penalty="l1",
  dual=False, C=1))`` then ``SVC()`` (rbf, gamma "scale") in a Pipeline.  RFECV's
  default ``step=1`` refits the linear SVM once per dropped feature (2,000 / 7,129 times
  per fold): measured at 128 s a fit on colon on 2 cores, and several minutes on
  leukaemia, so the splits use ``step=0.05`` (5 % of the features a step; ``--step``),
  and the full run fits the default ``step=1`` once, on colon's first split, beside it.

``--cv``: parameters by a 5-fold ``GridSearchCV`` on the training part instead, the
search included in the reported time: FELM / FKELM at the paper's C (sigma, tau) with psi
on the relative scale (``psi_scale="relative"``) over ``REL_PSI`` = 2^4, 2^2, ..., 2^-8
(7 points, the largest first so that ties go to the sparser model) and at most 5 sweeps
(the FELM protocol's grid and sweeps), the baselines over 4 points each (``CV_GRIDS``).
36 fits per FELM / FKELM per split: slow (leukaemia's FELM fits take seconds each), hence
not the default.

``--psi-grid`` (only this section): kept features and test accuracy of FELM and FKELM
along the relative psi grid 2^-8, 2^-6, ..., 2^4 (and psi = 0) on colon and leukaemia
(the paper's C, sigma, tau), WDBC (``load_breast_cancer``; FELM C = 2^-2, FKELM C = 2^4,
sigma_p = 2^-2, tau = 0.5, the protocol's usual CV choices) and a generated spam-like
set (``make_classification``: 3,000 rows x 57 features, 12 informative and 8 redundant,
3 % of the labels flipped; FELM C = 1, FKELM C = 2^4, sigma_p = 2^-2, tau = 0.5), at
most 5 sweeps (the protocol's); 3 splits (the spam-like set 1: its FKELM fits take
seconds each), ``--splits`` to change.

Per set: test accuracy, kept features and fit seconds of each method; then, for FELM
and FKELM against each baseline, the accuracy difference and the kept-feature ratio,
and the time ratio against RFECV, each with whether the issue's target holds (at least
as accurate, no more features, faster than RFECV; printed, never the exit status).
Re-solves: ``resolve_seconds_`` over the whole fit's seconds; the same model refitted
with ``resolve_start="cold"``: the resolve-seconds ratio and the whole-fit ratio (cold
over warm).  Training masks of at most ``DENSE_MAX_ROWS`` (600) rows are re-solved
exactly by one dense box QP on the rows' Gram, so on these sets warm against cold is
that path; the last section fits FELM and FKELM with both starts on a generated problem
of 1,500 rows x 30 features (``generate_classification``, ``max_sweeps=1``), where the
iterative solvers (dual coordinate descent for FELM, the kernel dual's for FKELM) run.
The full run also fits FELM on colon's first split with ``n_threads=None`` (the
library's default, every core) beside ``n_threads=1``, an aside on BLAS threads.

Exit status 1 if a correctness check fails: warm and cold selecting different features
on the exact dense path, or an ``objective_path_`` that does not strictly decrease.
(On the iterative path, which stops at ``kkt_tol``, a different mask is printed only.)
Needs ../shared/data.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_selection import RFECV, SelectFromModel
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import Pipeline
from sklearn.svm import SVC, LinearSVC

from elmscale import FELMClassifier, FKELMClassifier
from elmscale.data import generate_classification
from elmscale.experiments.datasets import load_dataset, trial_split
from elmscale.experiments.papers.felm import BENCHMARK, MAX_SWEEPS, REL_PSI, library_sigma
from elmscale.solvers.feature_flips import DENSE_MAX_ROWS

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SETS = ("colon", "leukemia")
SPECS = {d.name: d for d in BENCHMARK}

#: the paper's Table 5 parameters (log2 exponents decoded in felm_paper_results.csv); its
#: psi is a cost in the objective's own units (psi_scale="absolute")
ABS = {"psi_scale": "absolute"}
PAPER = {
    "colon": {
        "FELM": dict(C=2.0**-1, psi=2.0**2, **ABS),
        "FKELM": dict(C=2.0**-1, psi=2.0**2, sigma=library_sigma(2.0**0), tau=0.6, **ABS),
    },
    "leukemia": {
        "FELM": dict(C=2.0**4, psi=2.0**4, **ABS),
        "FKELM": dict(C=2.0**4, psi=2.0**4, sigma=library_sigma(2.0**-5), tau=0.6, **ABS),
    },
}
#: --cv: FELM / FKELM search psi on the relative scale at the paper's other parameters
#: (the FELM protocol's grid, largest first, and sweeps); the baselines 4 points each
REL = {"psi_scale": "relative", "max_sweeps": MAX_SWEEPS}
CV_GRIDS = {
    "FELM": {"psi": list(REL_PSI)},
    "FKELM": {"psi": list(REL_PSI)},
    "RFECV": {"estimator__C": [0.01, 0.1, 1.0, 10.0]},
    "L1+SVC": {"select__estimator__C": [0.1, 1.0], "svc__C": [1.0, 10.0]},
}
FOLDS = 5
METHODS = ("FELM", "FKELM", "RFECV", "L1+SVC")
OURS = ("FELM", "FKELM")
BASELINES = ("RFECV", "L1+SVC")


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def quiet(fn):
    """``fn()`` with scikit-learn's ConvergenceWarnings (liblinear's max_iter, FELM's
    max_sweeps) counted instead of printed: ``(result, count)``."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        result = fn()
    return result, sum(issubclass(w.category, ConvergenceWarning) for w in caught)


# -- the estimators ----------------------------------------------------------------------
def ours(name, params, seed, n_threads, **extra):
    cls = FELMClassifier if name == "FELM" else FKELMClassifier
    return cls(**params, random_state=seed, n_threads=n_threads, **extra)


def rfecv(step, C=1.0):
    return RFECV(LinearSVC(C=C), step=step, cv=StratifiedKFold(FOLDS))


def l1_svc(C=1.0):
    return Pipeline(
        [
            ("select", SelectFromModel(LinearSVC(penalty="l1", dual=False, C=C))),
            ("svc", SVC()),
        ]
    )


def describe(name, params):
    def power(v):
        return f"2^{math.log2(v):g}" if v > 0 else "0"

    scale = " (relative)" if params.get("psi_scale") == "relative" else ""
    if name == "FELM":
        return f"FELM C={power(params['C'])} psi={power(params['psi'])}{scale}"
    sigma_p = 1.0 / (math.sqrt(2.0) * params["sigma"])
    return (
        f"FKELM C={power(params['C'])} psi={power(params['psi'])}{scale} "
        f"sigma_p={power(sigma_p)} tau={params['tau']:g}"
    )


def kept_of(name, model) -> int:
    if name in OURS:
        return int(model.n_features_selected_)
    if name == "RFECV":
        return int(model.n_features_)
    return int(model.named_steps["select"].get_support().sum())


def fit_method(name, set_name, X, y, seed, args):
    """One method on one split: ``(seconds, fitted model, its parameters, warnings,
    seconds of the final fit)``; with --cv the seconds include the search and the model
    is the refitted best (its refit the final fit)."""
    if name in OURS:
        params = {**PAPER[set_name][name], **(REL if args.cv else {})}
        est = ours(name, params, seed, args.n_threads)
    else:
        params = {}
        est = rfecv(args.step) if name == "RFECV" else l1_svc()
    if not args.cv:
        (seconds, model), n_warn = quiet(lambda: timed(lambda: est.fit(X, y)))
        return seconds, model, params, n_warn, seconds
    search = GridSearchCV(est, CV_GRIDS[name], cv=StratifiedKFold(FOLDS), n_jobs=1)
    (seconds, search), n_warn = quiet(lambda: timed(lambda: search.fit(X, y)))
    params = {**params, **search.best_params_}
    return seconds, search.best_estimator_, params, n_warn, float(search.refit_time_)


def strictly_decreasing(model) -> bool:
    path = np.asarray(model.objective_path_, dtype=np.float64)
    path = path[np.isfinite(path)]
    return bool(np.all(np.diff(path) < 0))


# -- one data set ------------------------------------------------------------------------
def run_set(set_name, args, failures):
    data = load_dataset(SPECS[set_name], SHARED)
    spec = data.spec
    X_all, y_all = data.parts[0]
    print(
        f"\n{spec.paper_name}: {X_all.shape[0]} rows x {X_all.shape[1]:,} features, "
        f"{spec.n_train} train / {spec.n_test} test, {args.splits} stratified split(s) "
        f"(seeds 0-{args.splits - 1}), [-1, 1] on the training part",
        flush=True,
    )
    rows = {name: [] for name in METHODS}
    resolve = {name: [] for name in OURS}
    for seed in range(args.splits):
        X, y, X_te, y_te = trial_split(data, seed)
        for name in METHODS:
            seconds, model, params, n_warn, final_s = fit_method(name, set_name, X, y, seed, args)
            r = dict(
                acc=float(model.score(X_te, y_te)),
                kept=kept_of(name, model),
                seconds=seconds,
                params=params,
                warnings=n_warn,
            )
            rows[name].append(r)
            if name in OURS:
                if not strictly_decreasing(model):
                    failures.append(f"{set_name} split {seed}: {name} objective_path_ rises")
                resolve[name].append(
                    warm_cold(name, model, final_s, params, X, y, seed, args, failures)
                )
                r["converged"] = bool(np.all(model.converged_))
            extra = f", {n_warn} ConvergenceWarning(s)" if n_warn else ""
            if args.cv:
                extra += f"; chosen {params}"
            print(
                f"  split {seed} {name:<7} acc {r['acc']:.4f}  kept {r['kept']:>5,}  "
                f"{seconds:7.2f} s{extra}",
                flush=True,
            )
    summarise(set_name, spec, rows, resolve, args)
    if args.default_step and set_name == "colon" and args.step != 1:
        default_step(data, args, rows)
    return rows, resolve


def warm_cold(name, model, warm_fit, params, X, y, seed, args, failures):
    """The warm-started fit's re-solve share; the same model cold: the ratios."""
    cold = ours(name, params, seed, args.n_threads, resolve_start="cold")
    (cold_s, cold), _ = quiet(lambda: timed(lambda: cold.fit(X, y)))
    same = bool(np.array_equal(model.get_support(), cold.get_support()))
    dense = X.shape[0] <= DENSE_MAX_ROWS
    if not same:
        msg = (
            f"split {seed}: {name} warm and cold select different features "
            f"({model.n_features_selected_} against {cold.n_features_selected_})"
        )
        print(f"  {msg}", flush=True)
        if dense:
            failures.append(msg)
    return dict(
        warm_resolve=float(np.sum(model.resolve_seconds_)),
        warm_selection=float(np.sum(model.selection_seconds_)),
        warm_fit=warm_fit,
        cold_resolve=float(np.sum(cold.resolve_seconds_)),
        cold_fit=cold_s,
        same=same,
        solves=int(np.sum(model.n_flip_solves_)),
        screened=int(np.sum(model.n_flip_screened_)),
        candidates=int(np.sum(model.n_flip_candidates_)),
        flips_kept=int(np.sum(model.n_flip_kept_)),
        sweeps=int(np.max(model.n_iter_)),
    )


def mean(values):
    return float(np.mean(values))


def summarise(set_name, spec, rows, resolve, args):
    n = args.splits
    how = (
        f"parameters by inner {FOLDS}-fold GridSearchCV on the training part (FELM / FKELM: "
        f"relative psi over {len(REL_PSI)} points at the paper's other parameters and "
        f"max_sweeps={MAX_SWEEPS}; the baselines 4 points each; the time includes the search)"
        if args.cv
        else "fixed parameters (FELM / FKELM: the paper's Table 5; baselines: scikit-learn's "
        "defaults)"
    )
    print(f"\n  {spec.paper_name}, mean over {n} split(s); {how}")
    print(f"  {'method':<46} {'test acc':>15} {'kept':>8} {'fit s':>8}")
    label = {
        "RFECV": f"RFECV(LinearSVC(), step={args.step:g}, cv=5)",
        "L1+SVC": "SelectFromModel(LinearSVC(l1)) + SVC()",
    }
    summary = {}
    for name in METHODS:
        acc = np.array([r["acc"] for r in rows[name]])
        kept = mean([r["kept"] for r in rows[name]])
        seconds = mean([r["seconds"] for r in rows[name]])
        summary[name] = (acc.mean(), kept, seconds)
        if name in OURS:
            chosen = {describe(name, r["params"]) for r in rows[name]}
            text = next(iter(chosen)) if len(chosen) == 1 else f"{name} ({len(chosen)} choices)"
        else:
            text = label[name]
        spread = f" +-{acc.std():.3f}" if n > 1 else ""
        print(f"  {text:<46} {acc.mean():8.4f}{spread:>7} {kept:8.1f} {seconds:8.2f}")
    for name in OURS:
        if not all(r["converged"] for r in rows[name]):
            bad = sum(not r["converged"] for r in rows[name])
            print(f"  {name}: max_sweeps reached in {bad} of {n} split(s)")
    print("\n  against the baselines (target: acc diff >= 0, kept ratio <= 1, time ratio < 1)")
    for name in OURS:
        acc, kept, seconds = summary[name]
        for base in BASELINES:
            b_acc, b_kept, b_seconds = summary[base]
            diff = 100 * (acc - b_acc)
            ratio = kept / b_kept
            parts = [
                f"acc {diff:+6.2f} points ({'holds' if diff >= 0 else 'misses'})",
                f"kept {ratio:6.3f}x ({'holds' if ratio <= 1 else 'misses'})",
            ]
            if base == "RFECV":
                t = seconds / b_seconds
                parts.append(f"time {t:6.3f}x ({'holds' if t < 1 else 'misses'})")
            print(f"    {name:<6} vs {base:<7} " + ", ".join(parts))
    print(
        "\n  re-solves (rows <= DENSE_MAX_ROWS = "
        f"{DENSE_MAX_ROWS}: each mask's dual by one exact dense box QP, warm or cold start)"
    )
    for name in OURS:
        w = resolve[name]
        warm_fit = sum(x["warm_fit"] for x in w)
        warm_res = sum(x["warm_resolve"] for x in w)
        cold_fit = sum(x["cold_fit"] for x in w)
        cold_res = sum(x["cold_resolve"] for x in w)
        same = sum(x["same"] for x in w)
        print(
            f"    {name:<6} {100 * warm_res / warm_fit:5.1f} % of the fit in re-solves "
            f"({warm_res / len(w):.2f} of {warm_fit / len(w):.2f} s); "
            f"{mean([x['solves'] for x in w]):,.0f} solves, "
            f"{mean([x['screened'] for x in w]):,.0f} screened of "
            f"{mean([x['candidates'] for x in w]):,.0f} candidates, "
            f"{mean([x['flips_kept'] for x in w]):,.0f} flips kept, "
            f"{mean([x['sweeps'] for x in w]):.1f} sweeps"
        )
        print(
            f"           cold / warm: re-solves {cold_res / warm_res:.2f}x "
            f"({cold_res / len(w):.2f} against {warm_res / len(w):.2f} s), whole fit "
            f"{cold_fit / warm_fit:.2f}x; same features in {same} of {len(w)} split(s)"
        )


def default_step(data, args, rows):
    """RFECV at scikit-learn's default step=1, once, on the first split."""
    X, y, X_te, y_te = trial_split(data, 0)
    (seconds, model), n_warn = quiet(lambda: timed(lambda: rfecv(1).fit(X, y)))
    acc, kept = model.score(X_te, y_te), model.n_features_
    felm = rows["FELM"][0]["seconds"]
    fkelm = rows["FKELM"][0]["seconds"]
    print(
        f"\n  RFECV(LinearSVC(), step=1, cv=5), scikit-learn's default step, split 0 only: "
        f"{seconds:.2f} s, acc {acc:.4f}, kept {kept:,} (step={args.step:g} on this split: "
        f"{rows['RFECV'][0]['seconds']:.2f} s, acc {rows['RFECV'][0]['acc']:.4f}, kept "
        f"{rows['RFECV'][0]['kept']:,}); FELM / RFECV(step=1) time {felm / seconds:.4f}x, "
        f"FKELM {fkelm / seconds:.4f}x" + (f"; {n_warn} ConvergenceWarning(s)" if n_warn else ""),
        flush=True,
    )


# -- kept features along the relative psi grid --------------------------------------------
#: --psi-grid: psi on the relative scale, 2^-8 .. 2^4 every 2 octaves (0 first, for reference)
GRID_PSI = (0.0, *(2.0**k for k in range(-8, 5, 2)))
SIGMA_2 = library_sigma(2.0**-2)
GRID_PARAMS = {
    **{
        name: {
            m: {k: v for k, v in p.items() if k not in ("psi", "psi_scale")}
            for m, p in paper.items()
        }
        for name, paper in PAPER.items()
    },
    "wdbc": {"FELM": dict(C=2.0**-2), "FKELM": dict(C=2.0**4, sigma=SIGMA_2, tau=0.5)},
    "spam-like": {"FELM": dict(C=1.0), "FKELM": dict(C=2.0**4, sigma=SIGMA_2, tau=0.5)},
}


def spam_like_split(seed):
    """The generated spam-like set (3,000 x 57), a stratified 70 / 30 split seeded by
    ``seed``, [-1, 1] on the training part (the test part clipped to it)."""
    from sklearn.datasets import make_classification
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import MinMaxScaler

    X, y = make_classification(
        3000, 57, n_informative=12, n_redundant=8, flip_y=0.03, random_state=0
    )
    X, X_te, y, y_te = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
    scaler = MinMaxScaler((-1, 1)).fit(X)
    return scaler.transform(X), y, np.clip(scaler.transform(X_te), -1, 1), y_te


def psi_grid(args):
    """Kept features and test accuracy along the relative psi grid (``--psi-grid``)."""
    sets = ("colon",) if args.quick else ("colon", "leukemia", "wdbc", "spam-like")
    head = " ".join(f"{'0' if v == 0 else f'2^{math.log2(v):g}':>6}" for v in GRID_PSI)
    print(
        f"\nkept features / test % along psi on the relative scale (psi_scale='relative'), "
        f"max_sweeps={MAX_SWEEPS}, n_threads={args.n_threads}; mean over the splits",
        flush=True,
    )
    for set_name in sets:
        if set_name == "spam-like":
            n_splits = 1 if args.splits_given is None else args.splits
            splits = [spam_like_split(seed) for seed in range(n_splits)]
        else:
            data = load_dataset(SPECS[set_name], SHARED)
            n_splits = args.splits
            splits = [trial_split(data, seed) for seed in range(n_splits)]
        X0 = splits[0][0]
        print(
            f"\n  {set_name}: {X0.shape[0]:,} training rows x {X0.shape[1]:,} features, "
            f"{n_splits} split(s)\n  {'':<6} {'psi':<7}{head}"
        )
        for name in OURS:
            kept = np.zeros((n_splits, len(GRID_PSI)))
            acc = np.zeros_like(kept)
            unit = []
            for s, (X, y, X_te, y_te) in enumerate(splits):
                for i, psi in enumerate(GRID_PSI):
                    params = dict(GRID_PARAMS[set_name][name], psi=psi, max_sweeps=MAX_SWEEPS)
                    model, _ = quiet(lambda p=params: ours(name, p, s, args.n_threads).fit(X, y))
                    kept[s, i] = model.n_features_selected_
                    acc[s, i] = 100 * model.score(X_te, y_te)
                    if psi == 1.0:
                        unit.append(float(model.psi_effective_[0]))
            print(f"  {name:<6} {'kept':<7}" + " ".join(f"{v:6.0f}" for v in kept.mean(0)))
            print(f"  {'':<6} {'test %':<7}" + " ".join(f"{v:6.1f}" for v in acc.mean(0)))
            print(
                f"  {'':<6} psi = 1 is {np.mean(unit):.3g} per kept feature (f0 / sqrt(d))",
                flush=True,
            )


# -- the iterative path ------------------------------------------------------------------
def iterative_path(args, failures):
    rows, features = (1_000, 20) if args.quick else (1_500, 30)
    data = generate_classification(rows, n_features=features, random_state=0)
    X, y = data.X, data.y
    configs = (
        ("FELM", dict(C=1.0, psi=1.0, **ABS), "dual coordinate descent (solve_explicit_dual)"),
        (
            "FKELM",
            dict(C=1.0, psi=1.0, sigma=2.0, tau=0.5, **ABS),
            "the kernel dual (solve_kernel_dual)",
        ),
    )
    print(
        f"\nwarm against cold on the iterative path: generate_classification({rows:,} rows, "
        f"{features} features, seed 0), {rows:,} > DENSE_MAX_ROWS = {DENSE_MAX_ROWS}; "
        f"max_sweeps=1, n_threads={args.n_threads}; best of {args.repeats} fit(s) each",
        flush=True,
    )
    for name, params, solver in configs:
        best = {}
        for start in ("warm", "cold"):
            for _ in range(args.repeats):
                est = ours(name, params, 0, args.n_threads, resolve_start=start, max_sweeps=1)
                (seconds, est), _ = quiet(lambda est=est: timed(lambda: est.fit(X, y)))
                res = float(np.sum(est.resolve_seconds_))
                if start not in best or seconds < best[start][0]:
                    best[start] = (seconds, res, est)
        (w_s, w_res, warm), (c_s, c_res, cold) = best["warm"], best["cold"]
        same = bool(np.array_equal(warm.get_support(), cold.get_support()))
        gap = abs(float(warm.objective_[0]) - float(cold.objective_[0]))
        print(
            f"  {describe(name, params)}, {solver}: warm fit {w_s:.2f} s "
            f"(re-solves {w_res:.2f} s, {100 * w_res / w_s:.0f} %), cold {c_s:.2f} s "
            f"(re-solves {c_res:.2f} s); cold / warm: re-solves {c_res / w_res:.2f}x, whole "
            f"fit {c_s / w_s:.2f}x; {int(warm.n_flip_solves_.sum())} solves, "
            f"{warm.n_features_selected_} of {features} kept; same features: {same} "
            f"(objectives differ by {gap:.1e})",
            flush=True,
        )
        if not strictly_decreasing(warm) or not strictly_decreasing(cold):
            failures.append(f"iterative path: {name} objective_path_ rises")


def warm_up(n_threads):
    """numba's compile or cache load, outside the timings."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (40, 12))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    Xl = rng.uniform(-1, 1, (DENSE_MAX_ROWS + 50, 4))
    yl = (Xl[:, 0] > 0).astype(int)
    for start in ("warm", "cold"):
        kw = dict(resolve_start=start, n_threads=n_threads, max_sweeps=1, psi=0.5)
        for est in (FELMClassifier(**kw, n_hidden=20), FKELMClassifier(**kw)):
            quiet(lambda est=est: est.fit(X, y))
            quiet(lambda est=est: est.fit(Xl, yl))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 split of colon (CI)")
    parser.add_argument("--splits", type=int, default=None, help="splits per set (default 5)")
    parser.add_argument("--sets", nargs="+", choices=SETS, default=None)
    parser.add_argument("--cv", action="store_true", help="psi by inner 5-fold CV")
    parser.add_argument(
        "--psi-grid", action="store_true", help="only kept features along relative psi"
    )
    parser.add_argument("--step", type=float, default=0.05, help="RFECV's step (default 0.05)")
    parser.add_argument(
        "--no-default-step",
        dest="default_step",
        action="store_false",
        help="skip RFECV at step=1 on colon's first split",
    )
    parser.add_argument("--n-threads", type=int, default=1, help="FELM / FKELM n_threads")
    parser.add_argument("--repeats", type=int, default=None, help="iterative path: best of")
    args = parser.parse_args(argv)
    args.splits_given = args.splits
    if args.psi_grid:
        args.splits = args.splits or (1 if args.quick else 3)
        started = time.perf_counter()
        warm_up(args.n_threads)
        psi_grid(args)
        print(f"\nwall time {time.perf_counter() - started:.1f} s")
        return 0
    args.splits = args.splits or (1 if args.quick else 5)
    args.sets = args.sets or (("colon",) if args.quick else SETS)
    args.repeats = args.repeats or (1 if args.quick else 2)
    if args.quick:
        args.default_step = False
    if args.step >= 1:
        args.step = int(args.step)
    started = time.perf_counter()
    warm_up(args.n_threads)
    print(
        f"FELM / FKELM against RFECV(LinearSVC) and SelectFromModel(LinearSVC(l1)) + SVC; "
        f"FELM / FKELM n_threads={args.n_threads}; numba warmed up "
        f"({time.perf_counter() - started:.1f} s)",
        flush=True,
    )
    failures: list[str] = []
    for set_name in args.sets:
        run_set(set_name, args, failures)
    if not args.quick and args.n_threads == 1 and "colon" in args.sets and not args.cv:
        every_core(args)
    iterative_path(args, failures)
    print(f"\nwall time {time.perf_counter() - started:.1f} s")
    for failure in failures:
        print(f"FAILED: {failure}", file=sys.stderr)
    return 1 if failures else 0


def every_core(args):
    """FELM on colon's first split with n_threads=None (the library's default) beside
    n_threads=1: the default's BLAS threads on tiny matrices, on this machine."""
    data = load_dataset(SPECS["colon"], SHARED)
    X, y, _, _ = trial_split(data, 0)
    params = PAPER["colon"]["FELM"]
    (one, _), _ = quiet(lambda: timed(lambda: ours("FELM", params, 0, 1).fit(X, y)))
    (every, _), _ = quiet(lambda: timed(lambda: ours("FELM", params, 0, None).fit(X, y)))
    print(
        f"\n  aside: FELM on colon split 0, n_threads=None (every core, the library's "
        f"default) {every:.2f} s against n_threads=1 {one:.2f} s ({every / one:.2f}x)",
        flush=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
