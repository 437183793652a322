"""Sparse ELM against SVC at the same parameters (Table III's sparse-ELM values) on the
paper's sets.

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
import _paper_protocol as pp  # noqa: E402
import numpy as np  # noqa: E402

SETS = ("Australian", "Diabetes", "Heart", "Ionosphere", "SVMguide1", "Satimage")


def main(argv):
    names = (argv[0] if argv else ",".join(SETS)).split(",")
    for name in names:
        for kernel in ("gaussian", "polynomial"):
            C, p = pp.paper_params(name, "sparse_elm", kernel)
            seeds = [0] if pp.own_test_file(name) else range(5)
            ours, svc, sv_ours, sv_svc, t_ours, t_svc = [], [], [], [], 0.0, 0.0
            for seed in seeds:
                X_tr, y_tr, X_te, y_te = pp.paper_split(name, seed)
                model, ref = pp.sparse_elm_and_svc(kernel, C, p)
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
            print(
                f"{name:10s} {kernel:10s} C={C:g} p={p:g}: ours {np.mean(ours):.2f} "
                f"SVC {np.mean(svc):.2f} diff {np.mean(ours) - np.mean(svc):+.2f} | SVs ours "
                f"{np.mean(sv_ours):.0f} SVC {np.mean(sv_svc):.0f} | fit s ours {t_ours:.2f} "
                f"SVC {t_svc:.2f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
