"""FLSA-SVM on the multiclass sets: one support set shared by every class against a set per
class, at equal total basis size, with SVC as the reference.

    python benchmarks/flsa_support_sets.py           # satimage and svmguide2, m up to 400
    python benchmarks/flsa_support_sets.py --quick   # svmguide2, m up to 40 (CI)

Data (``../shared/data``): satimage (LIBSVM's train / test files, 4,435 / 2,000 rows, 6
classes) and svmguide2 (391 rows, 3 classes: a seeded stratified 70 / 30 split), inputs
scaled to [-1, 1] on the training part.  For each support-set option, sigma is chosen by
3-fold CV on the training part at each m (one selection run to the largest m per fold and
sigma gives every m); then one fit on the whole training part and its test accuracy.  SVC
(gaussian, C and sigma by the same 3-fold CV) gives the reference accuracy and support
vectors.  Accuracy only: the timings printed are for orientation.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from sklearn.model_selection import GridSearchCV, StratifiedKFold, train_test_split
from sklearn.svm import SVC

from elmscale import FLSASVMClassifier
from elmscale.data import Scaler, load

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
SIGMAS = (0.5, 1.0, 2.0, 4.0)
OPTIONS = ("shared", "per_class")


def sets(quick: bool):
    guide = load(SHARED / "svmguide2" / "svmguide2.txt")
    tr, te = train_test_split(
        np.arange(len(guide.y)), test_size=0.3, stratify=guide.y, random_state=0
    )
    out = {"svmguide2": (guide.X[tr], guide.y[tr], guide.X[te], guide.y[te])}
    if not quick:
        train = load(SHARED / "satimage" / "satimage.scale", n_features=36)
        test = load(SHARED / "satimage" / "satimage.scale.t", n_features=36)
        out["satimage"] = (train.X, train.y, test.X, test.y)
    for name, (X, y, X_te, y_te) in out.items():
        scaler = Scaler().fit(X)
        out[name] = (scaler.transform(X), y, scaler.transform(X_te), y_te)
    return out


def cv_sigma(X, y, ms, option):
    """The CV accuracy of every (sigma, m): one selection run per fold and sigma."""
    folds = StratifiedKFold(3, shuffle=True, random_state=0)
    scores = np.zeros((len(SIGMAS), len(ms)))
    for tr, va in folds.split(X, y):
        for s, sigma in enumerate(SIGMAS):
            models = FLSASVMClassifier(sigma=sigma, support_sets=option).fit_path(X[tr], y[tr], ms)
            scores[s] += [m.score(X[va], y[va]) for m in models]
    return scores / 3


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a CI size")
    args = parser.parse_args(argv)
    ms = [10, 20, 40] if args.quick else [25, 50, 100, 200, 400]
    for name, (X, y, X_te, y_te) in sets(args.quick).items():
        start = time.perf_counter()
        svc = GridSearchCV(
            SVC(),
            {"C": [1.0, 10.0, 100.0], "gamma": [1 / (2 * s * s) for s in SIGMAS]},
            cv=StratifiedKFold(3, shuffle=True, random_state=0),
        ).fit(X, y)
        svc_acc = svc.score(X_te, y_te)
        n_sv = int(svc.best_estimator_.n_support_.sum())
        print(
            f"{name}: {len(y):,} train / {len(y_te):,} test rows, {len(np.unique(y))} classes; "
            f"SVC {100 * svc_acc:.2f} % with {n_sv:,} SVs ({svc.best_params_}, "
            f"{time.perf_counter() - start:.1f} s)",
            flush=True,
        )
        print(f"  {'m':>5}  " + "  ".join(f"{o:>28}" for o in OPTIONS) + "  per_class - shared")
        results = {}
        for option in OPTIONS:
            scores = cv_sigma(X, y, ms, option)
            results[option] = []
            for j, m in enumerate(ms):
                sigma = SIGMAS[int(np.argmax(scores[:, j]))]
                model = FLSASVMClassifier(sigma=sigma, n_support=m, support_sets=option)
                model.fit(X, y)
                results[option].append((model.score(X_te, y_te), model.n_support_, sigma))
        for j, m in enumerate(ms):
            cells = [
                f"{100 * acc:6.2f} % ({sv:>4} SVs, s={sigma:g})"
                for acc, sv, sigma in (results[o][j] for o in OPTIONS)
            ]
            diff = 100 * (results["per_class"][j][0] - results["shared"][j][0])
            print(f"  {m:>5}  " + "  ".join(f"{c:>28}" for c in cells) + f"  {diff:+.2f} points")
        for option in OPTIONS:
            near = [
                (m, acc, sv)
                for m, (acc, sv, _) in zip(ms, results[option])
                if sv <= 0.1 * n_sv and acc >= svc_acc - 0.01
            ]
            verdict = (
                f"within 1 point of SVC at <= 10 % of its SVs at m = {near[0][0]} "
                f"({100 * near[0][1]:.2f} %, {near[0][2]} SVs)"
                if near
                else "never within 1 point of SVC at <= 10 % of its SVs on this grid"
            )
            print(f"  {option}: {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
