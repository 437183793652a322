"""Boosting-ridge ensembles of weak ELMs (10 random nodes each) on Friedman's regression
problem #1: test RMSE against the number of learners S for BRELM, GBRELM and GGBRELM."""

import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from sklearn.datasets import make_friedman1
from sklearn.metrics import root_mean_squared_error
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import MinMaxScaler

from elmscale import BRELMRegressor, GBRELMRegressor, GGBRELMRegressor

out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "figures"
out_dir.mkdir(parents=True, exist_ok=True)
X, y = make_friedman1(1500, noise=1.0, random_state=0)
X = MinMaxScaler((-1, 1)).fit_transform(X)
y = MinMaxScaler().fit_transform(y.reshape(-1, 1)).ravel()  # no intercept: targets in [0, 1]
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)

# one fit per S; the layers' seeds are drawn in turn, so every S shares its first layers
sizes = range(1, 51)
models = {
    "BRELM: one layer shared by the S learners": BRELMRegressor,
    "GBRELM: a layer per learner, fitted in turn": GBRELMRegressor,
    "GGBRELM: a layer per learner, one global ridge": GGBRELMRegressor,
}
fig, ax = plt.subplots(figsize=(9, 6), layout="constrained")
for label, model in models.items():
    start = time.perf_counter()
    rmse = []
    for s in sizes:
        fitted = model(n_estimators=s, n_hidden=10, C=100, random_state=0).fit(X_train, y_train)
        rmse.append(root_mean_squared_error(y_test, fitted.predict(X_test)))
    print(
        f"{label.split(':')[0]}: test RMSE {rmse[0]:.4f} with 1 learner, {rmse[-1]:.4f} with "
        f"{sizes[-1]} ({time.perf_counter() - start:.1f} s for {len(sizes)} fits)"
    )
    ax.plot(sizes, rmse, label=label)
ax.set(xlabel="learners S (10 random nodes each)", ylabel="test RMSE (targets scaled to [0, 1])")
ax.set_title("Friedman #1 (1,050 training rows, 450 test rows), C = 100")
ax.grid(alpha=0.3)
ax.legend(loc="center right")
fig.savefig(out_dir / "boosting_ridge_layers.png", dpi=100)
