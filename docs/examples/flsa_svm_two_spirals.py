"""FLSA-SVM against scikit-learn's SVC on the two-spirals problem: both tuned by 5-fold CV
on 400 points and scored on 4,000 fresh ones; circles mark each model's support vectors."""

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from sklearn.model_selection import GridSearchCV as SkGridSearchCV
from sklearn.model_selection import StratifiedKFold
from sklearn.svm import SVC

from elmscale import FLSASVMClassifier
from elmscale.data import generate_two_spirals
from elmscale.model_selection import GridSearchCV

out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "figures"
out_dir.mkdir(parents=True, exist_ok=True)
train, test = generate_two_spirals(400, random_state=0), generate_two_spirals(4000, random_state=1)
X, y = train.X, train.y
sigmas = [0.05, 0.1, 0.2, 0.4]  # gaussian widths; SVC's gamma = 1 / (2 sigma^2)

# FLSA-SVM: the number of support vectors is its path (one selection run per fold, width)
searches = {
    "FLSA-SVM": GridSearchCV(
        FLSASVMClassifier(), {"sigma": sigmas, "n_support": [10, 20, 40, 80, 160]}, cv=5
    ),
    "SVC": SkGridSearchCV(
        SVC(),
        {"C": [1, 10, 100, 1000], "gamma": [1 / (2 * s * s) for s in sigmas]},
        cv=StratifiedKFold(5, shuffle=True, random_state=0),
    ),
}
xx, yy = np.meshgrid(np.linspace(-1.2, 1.2, 300), np.linspace(-1.2, 1.2, 300))
points = np.column_stack([xx.ravel(), yy.ravel()])
fig, axes = plt.subplots(1, 2, figsize=(9, 4.9), layout="constrained")
for ax, (name, search) in zip(axes, searches.items()):
    start = time.perf_counter()
    model = search.fit(X, y).best_estimator_
    seconds = time.perf_counter() - start
    accuracy, n_support = model.score(test.X, test.y), len(model.support_)
    print(f"{name}: {n_support} support vectors, test accuracy {accuracy:.4f} ({seconds:.1f} s)")
    regions = model.predict(points).reshape(xx.shape)
    ax.contourf(xx, yy, regions, levels=[-0.5, 0.5, 1.5], colors=["#bcd7ee", "#f2b8b8"])
    ax.scatter(*X[y == 0].T, s=6, c="#1f4e79", label="class 0")
    ax.scatter(*X[y == 1].T, s=6, c="#990000", label="class 1")
    support = X[model.support_]
    ax.scatter(*support.T, s=40, facecolors="none", edgecolors="k", lw=0.8, label="support vector")
    ax.set_title(f"{name}: {n_support} support vectors\ntest accuracy {accuracy:.3f}")
    ax.set(aspect="equal", xlim=(-1.2, 1.2), ylim=(-1.2, 1.2))
axes[0].legend(loc="lower left", fontsize=9)
fig.savefig(out_dir / "flsa_svm_two_spirals.png", dpi=100)
