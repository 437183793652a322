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
import _paper_protocol as pp
from elmscale import SparseELMClassifier
from elmscale.data import Scaler, load
from _datasets import shared_data
from sklearn.svm import SVC
PARAMS = {"Australian": ((200, 2), (1, 3)), "Diabetes": ((0.2, 0.5), (0.2, 3)), "Heart": ((5, 5), (0.5, 1)),
          "Ionosphere": ((1, 2), (0.01, 2)), "SVMguide1": ((20, 0.2), (1, 5)), "Satimage": ((1, 0.2), (1, 3))}
def split(name, seed):
    if name == "Satimage":
        tr=load(shared_data("satimage/satimage.scale")); te=load(shared_data("satimage/satimage.scale.t"), n_features=36)
        sc=Scaler().fit(tr.X); return sc.transform(tr.X), tr.y, sc.transform(te.X), te.y
    return pp.paper_split(name, seed)
names = (sys.argv[1] if len(sys.argv) > 1 else ",".join(PARAMS)).split(",")
for name in names:
    for kern in ("gaussian","polynomial"):
        C, p = PARAMS[name][0 if kern=="gaussian" else 1]
        ours=[]; svc=[]; sv_o=[]; sv_s=[]; t_o=0; t_s=0
        for seed in range(5 if name not in ("SVMguide1","Satimage") else 1):
            Xtr,ytr,Xte,yte=split(name, seed)
            if kern=="gaussian":
                m=SparseELMClassifier(kernel="gaussian", sigma=p, C=C); s=SVC(kernel="rbf", gamma=1/(2*p*p), C=C)
            else:
                m=SparseELMClassifier(kernel="polynomial", degree=p, C=C); s=SVC(kernel="poly", degree=p, gamma=1.0, coef0=1.0, C=C)
            t0=time.perf_counter(); m.fit(Xtr,ytr); t_o+=time.perf_counter()-t0
            t0=time.perf_counter(); s.fit(Xtr,ytr); t_s+=time.perf_counter()-t0
            ours.append(100*m.score(Xte,yte)); svc.append(100*s.score(Xte,yte)); sv_o.append(m.support_.size); sv_s.append(s.support_.size)
        print(f"{name:10s} {kern:10s} C={C} p={p}: ours {np.mean(ours):.2f} SVC {np.mean(svc):.2f} diff {np.mean(ours)-np.mean(svc):+.2f} | SVs ours {np.mean(sv_o):.0f} SVC {np.mean(sv_s):.0f} | fit s ours {t_o:.2f} SVC {t_s:.2f}", flush=True)
