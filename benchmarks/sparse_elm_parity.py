"""Sparse ELM against SVC at the same parameters (Table III's sparse-ELM values) on the paper's sets.

    python benchmarks/sparse_elm_parity.py Australian,Diabetes,Heart,Ionosphere,SVMguide1,Satimage

Mean test accuracy over 5 seeded splits of the paper's sizes (1 for SVMguide1
and Satimage, which have their own test files), support-vector counts and fit
times.  SVC's polynomial kernel is set to the paper's (1 + u.v)^m (gamma=1, coef0=1).
Uses the paper-protocol helpers of tests/ and ../shared/data.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import numpy as np
import _paper_protocol as pp  # noqa: E402
import numpy as np  # noqa: E402
from _datasets import shared_data  # noqa: E402
from sklearn.svm import SVC  # noqa: E402

from elmscale import SparseELMClassifier  # noqa: E402
from elmscale.data import Scaler, load  # noqa: E402

# Table III, sparse ELM: (C, sigma) for the gaussian kernel, (C, m) for the polynomial one.
PARAMS = {
    "Australian": ((200, 2), (1, 3)),
    "Diabetes": ((0.2, 0.5), (0.2, 3)),
    "Heart": ((5, 5), (0.5, 1)),
    "Ionosphere": ((1, 2), (0.01, 2)),
    "SVMguide1": ((20, 0.2), (1, 5)),
    "Satimage": ((1, 0.2), (1, 3)),
}


def split(name, seed):
    """Scaled (X_train, y_train, X_test, y_test); Satimage uses its own test file."""
    if name == "Satimage":
        train = load(shared_data("satimage/satimage.scale"))
        test = load(shared_data("satimage/satimage.scale.t"), n_features=train.n_features)
        scaler = Scaler().fit(train.X)
        return scaler.transform(train.X), train.y, scaler.transform(test.X), test.y
    return pp.paper_split(name, seed)


def models(kernel, C, p):
    if kernel == "gaussian":
        return (SparseELMClassifier(kernel="gaussian", sigma=p, C=C),
                SVC(kernel="rbf", gamma=1 / (2 * p * p), C=C))
    return (SparseELMClassifier(kernel="polynomial", degree=p, C=C),
            SVC(kernel="poly", degree=p, gamma=1.0, coef0=1.0, C=C))


def main(argv):
    names = (argv[0] if argv else ",".join(PARAMS)).split(",")
    for name in names:
        for k, kernel in enumerate(("gaussian", "polynomial")):
            C, p = PARAMS[name][k]
            seeds = [0] if name in ("SVMguide1", "Satimage") else range(5)
            ours, svc, sv_ours, sv_svc, t_ours, t_svc = [], [], [], [], 0.0, 0.0
            for seed in seeds:
                X_tr, y_tr, X_te, y_te = split(name, seed)
                model, ref = models(kernel, C, p)
                start = time.perf_counter()
                model.fit(X_tr, y_tr)
                t_ours += time.perf_counter() - start
                start = time.perf_counter()
                ref.fit(X_tr, y_tr)
                t_svc += time.perf_counter() - start
                ours.append(100 * model.score(X_te, y_te))
                svc.append(100 * ref.score(X_te, y_te))
                sv_ours.append(model.support_.size)
                sv_svc.append(ref.support_.size)
            print(f"{name:10s} {kernel:10s} C={C} p={p}: ours {np.mean(ours):.2f} "
                  f"SVC {np.mean(svc):.2f} diff {np.mean(ours) - np.mean(svc):+.2f} | SVs ours "
                  f"{np.mean(sv_ours):.0f} SVC {np.mean(sv_svc):.0f} | fit s ours {t_ours:.2f} "
                  f"SVC {t_svc:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
