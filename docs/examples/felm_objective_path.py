"""FELM on 50 features of which 5 are informative: the objective along the kept feature
flips, then the features kept and the test accuracy as the cost per feature psi grows."""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

from elmscale import FELMClassifier

out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "figures"
out_dir.mkdir(parents=True, exist_ok=True)
# shuffle=False puts the 5 informative features in columns 0-4; the other 45 are noise
X, y = make_classification(
    600, n_features=50, n_informative=5, n_redundant=0, class_sep=1.5, shuffle=False, random_state=0
)
X = MinMaxScaler((-1, 1)).fit_transform(X)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.5, random_state=0)

# psi = 0 without selection or flips is the sparse ELM on every feature (the same layer)
every = FELMClassifier(psi=0, initial_selection=False, max_sweeps=0, random_state=0)
baseline = every.fit(X_train, y_train).score(X_test, y_test)
print(f"every feature: test accuracy {baseline:.3f}")
psis = 2.0 ** np.arange(-6, 3)
sweep = [FELMClassifier(psi=psi, random_state=0).fit(X_train, y_train) for psi in psis]
felm = sweep[4]  # psi = 2^-2
start = int((felm.feature_scores_ >= 1 / X.shape[1]).sum())  # kept by the initial selection
print(
    f"psi = 0.25: 50 features -> {start} (initial selection) -> {felm.n_features_selected_} "
    f"after {felm.n_flip_kept_[0]} kept flips, {felm.support_mask_[:5].sum()} of them "
    f"informative; test accuracy {felm.score(X_test, y_test):.3f}"
)

fig = plt.figure(figsize=(9, 6), layout="constrained")
left, right = fig.subfigures(1, 2, width_ratios=[1.1, 1])
ax = left.subplots()
ax.plot(felm.objective_path_, "o-", markersize=4)
kept = felm.n_features_selected_
ax.set_title(f"psi = 0.25: {start} features after the initial\nselection, {kept} after the flips")
ax.set(xlabel="kept flip (a feature added or dropped)", ylabel="objective f(E)")
top, bottom = right.subplots(2, 1, sharex=True)
top.plot(psis, [m.n_features_selected_ for m in sweep], "o-", label="kept")
top.plot(psis, [m.support_mask_[:5].sum() for m in sweep], "s--", label="informative kept")
top.set_xscale("log", base=2)
top.set_xticks(psis)
top.set(ylabel="features", title="as psi grows")
top.legend()
bottom.plot(psis, [m.score(X_test, y_test) for m in sweep], "o-", color="C2", label="FELM")
bottom.axhline(baseline, color="gray", linestyle=":", label="every feature")
bottom.legend()
bottom.set(xlabel="psi (cost per kept feature)", ylabel="test accuracy")
fig.savefig(out_dir / "felm_objective_path.png", dpi=100)
