"""Held-out log loss of the calibrated classifiers (``probability=True``) against SVC's.

    python benchmarks/calibration.py            # australian, cod-rna 2,000 / 5,000,
                                                #   satimage (its files), svmguide2
    python benchmarks/calibration.py --quick    # australian, cod-rna 500 / 1,000,
                                                #   satimage 500 / 1,000, svmguide2

Each set is scaled to [-1, 1] on its training part; australian and svmguide2 are split
70 / 30 (stratified, seed 0), cod-rna takes the first rows of each half of a seeded
permutation, satimage its own train / test files.  Every model sees the same gaussian
width ``sigma`` and ``C`` per set (SVC: ``gamma = 1 / (2 sigma^2)``; random-node families:
200 sigmoid nodes, the boosting ensembles 5 learners of 50); all calibrate the same way
(LIBSVM's: Platt sigmoids on 5-fold out-of-fold decision values; one-vs-one pairs coupled
by Wu, Lin and Weng, one-vs-rest columns normalised).  Prints per set and model: the
held-out log loss (``sklearn.metrics.log_loss``), its difference to SVC's, accuracy of
``predict``, the top-label expected calibration error (``ECE``: 10 equal-width bins of the
largest probability, the rows-weighted gap between confidence and accuracy; it measures
the calibration apart from how well the model separates the classes, which log loss
mixes in), and the fit time (calibration included).  FELM / FKELM run on the sets of up
to 1,000 training rows only (their feature selection repeats per fold).

SVC(probability=True) is LIBSVM's own calibration, which scikit-learn 1.9 deprecates (for
``CalibratedClassifierCV(SVC(), ensemble=False)``); its FutureWarning is silenced here.

Data: the public copies of ``elmscale.data.public_data`` (downloaded once into
``~/elmscale_data`` or ``$ELMSCALE_DATA`` and checked against their sha256), read from
``$ELMSCALE_DATA_MIRROR`` when set, else from the project's ``../shared/data`` (or
``$ELMSCALE_SHARED/data``) when it is there: no network then (CI).
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.svm import SVC

from elmscale import (
    BRELMClassifier,
    ELMClassifier,
    FELMClassifier,
    FKELMClassifier,
    FLSASVMClassifier,
    KBRELMClassifier,
    SparseELMClassifier,
)
from elmscale.data import Scaler, fetch_public, load, public_url
from elmscale.data.public_data import MIRROR_ENV

#: the project's shared data folder, a local mirror of the public files where it exists
LOCAL_MIRROR = (
    Path(os.environ.get("ELMSCALE_SHARED") or Path(__file__).resolve().parents[2] / "shared")
    / "data"
)
#: (sigma, C) per set: the gaussian width and C every kernel model uses
PARAMS = {
    "australian": (2.0, 1.0),
    "cod-rna": (0.5, 1.0),
    "satimage": (2.0, 5.0),
    "svmguide2": (2.0, 1.0),
}
SMALL_ROWS = 1_000  # FELM / FKELM up to this many training rows


def public(name: str) -> Path:
    """The cached copy of the public file ``name`` (``"cod-rna/codrna.csv"``)."""
    use_local = not os.environ.get(MIRROR_ENV) and LOCAL_MIRROR.is_dir()
    return fetch_public(public_url(name), mirror=LOCAL_MIRROR if use_local else None)


def _split(X, y):
    tr, te = train_test_split(np.arange(len(y)), test_size=0.3, stratify=y, random_state=0)
    return X[tr], y[tr], X[te], y[te]


def sets(quick: bool) -> dict:
    out = {}
    aus = load(public("australian/australian.dat"), label="last")
    out["australian"] = _split(aus.X, aus.y)
    cod = load(public("cod-rna/codrna.csv"), label="last")
    order = np.random.default_rng(0).permutation(len(cod.y))
    half = len(order) // 2
    n_tr, n_te = (500, 1_000) if quick else (2_000, 5_000)
    tr, te = order[:half][:n_tr], order[half:][:n_te]
    out["cod-rna"] = (cod.X[tr], cod.y[tr], cod.X[te], cod.y[te])
    train = load(public("satimage/satimage.scale"), n_features=36)
    test = load(public("satimage/satimage.scale.t"), n_features=36)
    if quick:
        rng = np.random.default_rng(0)
        # 500 training rows: all 6 classes, their 15 pairs calibrated and coupled; FELM and
        # FKELM (feature selection per class and per fold) took 16 of the run's 26 s at 1,000
        tr, te = rng.permutation(len(train.y))[:500], rng.permutation(len(test.y))[:1_000]
        out["satimage"] = (train.X[tr], train.y[tr], test.X[te], test.y[te])
    else:
        out["satimage"] = (train.X, train.y, test.X, test.y)
    guide = load(public("svmguide2/svmguide2.txt"))
    out["svmguide2"] = _split(guide.X, guide.y)
    for name, (X, y, X_te, y_te) in out.items():
        scaler = Scaler().fit(X)
        out[name] = (scaler.transform(X), y, scaler.transform(X_te), y_te)
    return out


def expected_calibration_error(y_true, P, classes, n_bins: int = 10) -> float:
    """Top-label ECE: sum over confidence bins of |accuracy - mean confidence| x share."""
    confidence = P.max(axis=1)
    correct = classes[P.argmax(axis=1)] == y_true
    bins = np.minimum((confidence * n_bins).astype(int), n_bins - 1)
    gap = 0.0
    for b in np.unique(bins):
        rows = bins == b
        gap += abs(correct[rows].mean() - confidence[rows].mean()) * rows.mean()
    return float(gap)


def models(sigma: float, C: float, n_train: int) -> dict:
    out = {
        "SVC": SVC(C=C, gamma=1 / (2 * sigma * sigma), probability=True, random_state=0),
        "SparseELM kernel": SparseELMClassifier(C=C, sigma=sigma, random_state=0),
        "SparseELM nodes": SparseELMClassifier(hidden="sigmoid", n_hidden=200, C=C, random_state=0),
        "ELM kernel": ELMClassifier(kernel="gaussian", C=C, sigma=sigma),
        "ELM nodes": ELMClassifier(n_hidden=200, C=C, random_state=0),
        "BRELM": BRELMClassifier(n_estimators=5, n_hidden=50, C=C, random_state=0),
        "KBRELM": KBRELMClassifier(n_estimators=5, C=C, sigma=sigma),
        "FLSA-SVM": FLSASVMClassifier(n_support=100, sigma=sigma, random_state=0),
    }
    if n_train <= SMALL_ROWS:
        out["FELM"] = FELMClassifier(n_hidden=200, C=C, random_state=0)
        out["FKELM"] = FKELMClassifier(C=C, sigma=sigma)
    for name, model in out.items():
        if name != "SVC":
            model.set_params(probability=True)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a CI size")
    args = parser.parse_args(argv)
    header = f"{'log loss':>9} {'- SVC':>8} {'accuracy':>9} {'ECE':>7} {'fit s':>7}"
    print(f"{'set':<11} {'model':<17} {header}")
    for set_name, (X, y, X_te, y_te) in sets(args.quick).items():
        sigma, C = PARAMS[set_name]
        print(f"# {set_name}: {len(y)} train / {len(y_te)} test rows, sigma={sigma}, C={C}")
        reference = None
        for name, model in models(sigma, C, len(y)).items():
            start = time.perf_counter()
            with warnings.catch_warnings():
                # scikit-learn 1.9 deprecates SVC(probability=True) (LIBSVM's own
                # calibration, the reference here) for CalibratedClassifierCV
                warnings.simplefilter("ignore", FutureWarning)
                model.fit(X, y)
            seconds = time.perf_counter() - start
            P = model.predict_proba(X_te)
            loss = log_loss(y_te, P, labels=model.classes_)
            reference = loss if reference is None else reference
            accuracy = float(np.mean(model.predict(X_te) == y_te))
            ece = expected_calibration_error(y_te, P, model.classes_)
            print(
                f"{set_name:<11} {name:<17} {loss:9.4f} {loss - reference:+8.4f} "
                f"{accuracy:9.4f} {ece:7.4f} {seconds:7.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
