"""The sparse ELM against the unified kernel ELM and scikit-learn's SVC on six small data
sets: 5-fold CV accuracy (C tuned inside each fold), average ranks and a CD diagram."""

import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn import datasets
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC

from elmscale import ELMClassifier, SparseELMClassifier
from elmscale.experiments import stats

out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parents[1] / "figures"
data = {
    "breast cancer": datasets.load_breast_cancer(return_X_y=True),
    "wine": datasets.load_wine(return_X_y=True),
    "digits": datasets.load_digits(return_X_y=True),
    "moons": datasets.make_moons(400, noise=0.3, random_state=0),
    "circles": datasets.make_circles(400, noise=0.2, factor=0.5, random_state=0),
    "classification": datasets.make_classification(400, n_informative=5, random_state=0),
}
folds = StratifiedKFold(5, shuffle=True, random_state=0)
scores = pd.DataFrame(index=list(data), columns=["sparse ELM", "unified ELM", "SVC"], dtype=float)
for name, (X, y) in data.items():
    sigma = np.sqrt(X.shape[1])  # one gaussian width for all three: SVC's gamma = 1/(2 sigma^2)
    models = {
        "sparse ELM": SparseELMClassifier(kernel="gaussian", sigma=sigma),
        "unified ELM": ELMClassifier(kernel="gaussian", sigma=sigma),
        "SVC": SVC(kernel="rbf", gamma=1 / (2 * sigma**2)),
    }
    for method, model in models.items():
        pipeline = Pipeline([("scale", StandardScaler()), ("model", model)])
        tuned = GridSearchCV(pipeline, {"model__C": [1, 10, 100]}, cv=3)
        scores.loc[name, method] = cross_val_score(tuned, X, y, cv=folds).mean()

print(scores.round(4).to_string())
friedman = stats.friedman(scores)
cd = stats.nemenyi_critical_difference(scores.shape[1], len(scores))
print(f"average ranks: {friedman.average_ranks.round(2).to_dict()}; Nemenyi CD {cd:.2f}")
print(f"Friedman chi2 {friedman.chi2:.2f}, p = {friedman.chi2_pvalue:.3f}")
stats.cd_diagram(
    friedman.average_ranks,
    stats.nemenyi_pvalues(scores),
    out_dir / "sparse_elm_cd_diagram.png",
    title="5-fold CV accuracy on six data sets: average ranks",
    cd=cd,
)
