"""The unified ELM against the sparse-ELM paper's Tables IV (gaussian kernel) and VI
(sigmoid nodes).

Protocol (tests/_paper_protocol.py): seeded random splits of the paper's sizes,
scaling fitted on the training part, 5-fold stratified cross-validation over the
paper's grid on the training part (C, and sigma for the kernel; C and the
node weight scale in {1, 2, 4} for sigmoid nodes, L = 200), test accuracy
averaged over seeds 0-4.  Target: within 2.5 points of the paper or better.

Two documented exceptions:
* SVMguide1 has its own test file, so every seed trains on the same rows; the
  kernel search costs ~2.5 min a seed here, so it runs for seed 0 only.
* Heart: on random splits every method lands ~3 points under the paper's
  figures (SVC with the same protocol: 79.5 % over 10 seeds vs the paper's
  SVM 82.96 %), because the paper used one fixed partition (its +-0 standard
  deviations: "random permutation within training and testing set
  separately").  So Heart is checked twice: on random splits against SVC run
  the same way in the same test, and on the file's own partition (first 135
  rows / last 135 rows) against the paper.
"""

import functools

import numpy as np
import pytest
from _paper_protocol import PAPER_SETS, paper_split, paper_test_accuracy, protocol_run
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.svm import SVC

from elmscale import ELMClassifier
from elmscale.data import Scaler
from elmscale.model_selection import PAPER_C_GRID, PAPER_SIGMA_GRID, path_grid_search

pytestmark = [pytest.mark.slow, pytest.mark.needs_shared]

SEEDS = range(5)
TOLERANCE = 2.5


def _model(mapping, seed):
    if mapping == "gaussian":
        return ELMClassifier(kernel="gaussian"), {"sigma": list(PAPER_SIGMA_GRID)}
    return (
        ELMClassifier(hidden="sigmoid", n_hidden=200, random_state=seed),
        {"weight_scale": [1.0, 2.0, 4.0]},
    )


def _table(mapping):
    return "TABLE IV" if mapping == "gaussian" else "TABLE VI"


@pytest.mark.timeout(2700)  # SVMguide1-gaussian: 904 s here on a loaded 2-core machine
@pytest.mark.parametrize("mapping", ["gaussian", "sigmoid"])
@pytest.mark.parametrize("name", ["Australian", "Diabetes", "Ionosphere", "SVMguide1"])
def test_unified_elm_reaches_the_papers_accuracy(name, mapping):
    seeds = [0] if (name == "SVMguide1" and mapping == "gaussian") else SEEDS
    accuracies = [protocol_run(name, *_model(mapping, seed), seed)[0] for seed in seeds]
    paper = paper_test_accuracy(_table(mapping), name, "unified_elm", mapping)
    ours = float(np.mean(accuracies))
    print(
        f"{name} {mapping}: ours {ours:.2f} (seeds {list(seeds)}: "
        f"{np.round(accuracies, 2).tolist()}), paper {paper:.2f}"
    )
    assert ours >= paper - TOLERANCE


@functools.cache
def _svc_on_heart_split(seed: int) -> float:
    """SVC's test accuracy (%) on Heart's random split ``seed``, its C and gamma chosen by
    the same protocol (the paper's C and sigma grids, 5-fold stratified CV seeded alike).
    Both mappings' tests compare with the same figures: the 980 SVC fits of a seed are
    made once per session, not once per mapping."""
    X_tr, y_tr, X_te, y_te = paper_split("Heart", seed)
    grid = {"C": list(PAPER_C_GRID), "gamma": [1 / (2 * s * s) for s in PAPER_SIGMA_GRID]}
    search = GridSearchCV(
        SVC(kernel="rbf"), grid, cv=StratifiedKFold(5, shuffle=True, random_state=seed)
    )
    return 100 * search.fit(X_tr, y_tr).score(X_te, y_te)


@pytest.mark.timeout(900)  # gaussian: 116 s here on a loaded 2-core machine
@pytest.mark.parametrize("mapping", ["gaussian", "sigmoid"])
def test_heart_on_random_splits_matches_svc_run_the_same_way(mapping):
    ours = [protocol_run("Heart", *_model(mapping, seed), seed)[0] for seed in SEEDS]
    svc = [_svc_on_heart_split(seed) for seed in SEEDS]
    print(
        f"Heart {mapping}, random splits: ours {np.mean(ours):.2f}, SVC {np.mean(svc):.2f}, "
        f"paper {paper_test_accuracy(_table(mapping), 'Heart', 'unified_elm', mapping):.2f}"
    )
    assert np.mean(ours) >= np.mean(svc) - 1.0


@pytest.mark.parametrize("mapping", ["gaussian", "sigmoid"])
def test_heart_on_the_files_partition_reaches_the_paper(mapping):
    from _paper_protocol import _read

    train_file, _, kw, n_train = PAPER_SETS["Heart"]
    X, y = _read(train_file, **kw)
    scaler = Scaler().fit(X[:n_train])
    X_tr, X_te = scaler.transform(X[:n_train]), scaler.transform(X[n_train:])
    accuracies = []
    for seed in SEEDS:
        estimator, grid = _model(mapping, seed)
        search = path_grid_search(
            estimator,
            X_tr,
            y[:n_train],
            Cs=PAPER_C_GRID,
            param_grid=grid,
            cv=StratifiedKFold(5, shuffle=True, random_state=seed),
        )
        accuracies.append(100 * search.best_estimator_.score(X_te, y[n_train:]))
    paper = paper_test_accuracy(_table(mapping), "Heart", "unified_elm", mapping)
    print(f"Heart {mapping}, file partition: ours {np.mean(accuracies):.2f}, paper {paper:.2f}")
    assert np.mean(accuracies) >= paper - TOLERANCE
