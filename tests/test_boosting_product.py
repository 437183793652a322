"""The boosting-ridge ensembles through the product, with real parts only: the installed
command line (``train`` / ``predict`` / ``score`` in subprocesses) against the estimator
fitted here, the library's ``GridSearchCV`` with its pieces as tasks on a local Ray
against the same search in this process (and against scikit-learn's search over separate
fits), and KBRELM fitted from a Parquet data set on a Dask LocalCluster against the local
fit, through a model file."""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sklearn.base import clone
from sklearn.datasets import make_classification, make_regression
from sklearn.model_selection import GridSearchCV as SklearnGridSearchCV
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.pipeline import make_pipeline

import elmscale
from elmscale import dataplane
from elmscale.data import Scaler, load, write_parquet
from elmscale.data.parquet import open_parquet
from elmscale.model_selection import GridSearchCV
from elmscale.models.boosting_ridge import (
    GBRELMRegressor,
    GGBRELMClassifier,
    KBRELMClassifier,
)

CLASSES = np.array(["low", "mid", "high"])


def _elmscale(*args, cwd):
    """``python -m elmscale ARGS`` in a fresh interpreter, no cluster addresses inherited;
    fails the test, showing its output, unless it exits 0."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "DASK_SCHEDULER_ADDRESS")
    }
    run = subprocess.run(
        [sys.executable, "-m", "elmscale", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, f"elmscale {args}\n{run.stdout}\n{run.stderr}"
    return run.stdout


@pytest.fixture()
def csv_problem(tmp_path):
    """Three classes named by strings, features on different scales, as CSV files."""
    X, y = make_classification(
        700, 5, n_informative=4, n_redundant=0, n_classes=3, class_sep=1.5, random_state=4
    )
    X = X * np.array([1.0, 10.0, 0.1, 100.0, 3.0])
    names = ["a", "b", "c", "d", "e"]

    def write(path, rows):
        lines = [",".join([*names, "target"])]
        lines += [",".join([*(f"{v:.6f}" for v in X[i]), CLASSES[y[i]]]) for i in rows]
        path.write_text("\n".join(lines) + "\n")

    write(tmp_path / "train.csv", range(500))
    write(tmp_path / "test.csv", range(500, 700))
    return tmp_path / "train.csv", tmp_path / "test.csv", names


def test_the_command_line_trains_predicts_and_scores_as_the_estimator_here(csv_problem, tmp_path):
    train_path, test_path, names = csv_problem
    params = {"n_estimators": 4, "n_hidden": 20, "C": 10.0, "random_state": 3}
    cli_params = [arg for k, v in params.items() for arg in ("-p", f"{k}={v}")]
    out = _elmscale(
        "train",
        train_path,
        "model.elm",
        "--estimator",
        "GGBRELMClassifier",
        *cli_params,
        "--label",
        "target",
        "--test",
        test_path,
        "--metrics",
        "metrics.json",
        cwd=tmp_path,
    )
    assert "trained GGBRELMClassifier on 500 rows x 5 features" in out

    # the same estimator here, on the same rows read by the same loader
    train, test = load(train_path, label="target"), load(test_path, label="target")
    here = make_pipeline(Scaler(), GGBRELMClassifier(**params)).fit(train.X, train.y)
    expected = here.predict(test.X)
    decision = here.decision_function(test.X)
    assert set(expected) == set(CLASSES)  # every class predicted: not a constant model
    accuracy = float(np.mean(expected == test.y))
    assert accuracy > 0.7

    saved = elmscale.load(tmp_path / "model.elm")
    assert type(saved[-1]) is GGBRELMClassifier
    assert saved[-1].get_params() == here[-1].get_params()
    np.testing.assert_array_equal(saved[-1].coef_, here[-1].coef_)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["test"]["accuracy"] == pytest.approx(accuracy, abs=1e-12)

    # predict: a CSV file with the label column left out
    _elmscale(
        "predict",
        "model.elm",
        test_path,
        "pred.parquet",
        "--label",
        "target",
        "--decision",
        cwd=tmp_path,
    )
    written = pq.read_table(tmp_path / "pred.parquet").to_pydict()
    np.testing.assert_array_equal(np.array(written["prediction"]), expected)
    for j, cls in enumerate(here.classes_):
        np.testing.assert_allclose(written[f"decision_{cls}"], decision[:, j], rtol=0, atol=1e-9)

    # score: a Parquet file of ids and float32 features (as write_parquet writes them; batch
    # scoring reads features as float32), scored in row batches of 64
    X32 = test.X.astype(np.float32)
    columns = {name: X32[:, j] for j, name in enumerate(names)}
    pq.write_table(pa.table({"id": np.arange(200) * 7, **columns}), tmp_path / "input.parquet")
    out = _elmscale(
        "score",
        "model.elm",
        "input.parquet",
        "scores.parquet",
        "--id",
        "id",
        "--decision",
        "--batch-rows",
        "64",
        "--quiet",
        cwd=tmp_path,
    )
    assert "scored 200 rows" in out
    scored = pq.read_table(tmp_path / "scores.parquet").to_pydict()
    np.testing.assert_array_equal(scored["id"], np.arange(200) * 7)
    np.testing.assert_array_equal(np.array(scored["prediction"]), here.predict(X32))
    decision32 = here.decision_function(X32)
    for j, cls in enumerate(here.classes_):
        np.testing.assert_allclose(scored[f"decision_{cls}"], decision32[:, j], rtol=0, atol=1e-9)


def _regression():
    X, y = make_regression(400, 6, n_informative=4, noise=5.0, random_state=1)
    X = Scaler().fit_transform(X)
    return X, (y - y.min()) / (y.max() - y.min())  # targets in [0, 1], as the paper's


def _classification():
    X, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=2)
    return Scaler().fit_transform(X), y


SEARCHES = {
    "GBRELMRegressor": (
        _regression,
        GBRELMRegressor(n_estimators=3, precision="double", random_state=5),
        {"n_hidden": [10, 30], "C": [0.01, 1.0, 100.0, 10_000.0]},
    ),
    "KBRELMClassifier": (
        _classification,
        KBRELMClassifier(n_estimators=3),
        {"sigma": [0.5, 2.0], "C": [0.01, 1.0, 100.0]},
    ),
}


@pytest.mark.parametrize("name", list(SEARCHES))
def test_the_grid_search_on_ray_equals_the_search_here_and_separate_fits(name, ray_session):
    problem, estimator, grid = SEARCHES[name]
    X, y = problem()
    on_ray = GridSearchCV(estimator, grid, cv=4, random_state=6, ray_address="auto").fit(X, y)
    here = GridSearchCV(estimator, grid, cv=4, random_state=6, n_threads=1).fit(X, y)
    n_settings = len(grid[next(k for k in grid if k != "C")])
    assert on_ray.n_pieces_ == here.n_pieces_ == 4 * n_settings
    assert on_ray.best_params_ == here.best_params_
    keys = [f"split{k}_test_score" for k in range(4)] + ["mean_test_score"]
    for key in keys:
        np.testing.assert_allclose(on_ray.cv_results_[key], here.cv_results_[key], rtol=1e-12)
    np.testing.assert_array_equal(
        on_ray.cv_results_["rank_test_score"], here.cv_results_["rank_test_score"]
    )
    mean = here.cv_results_["mean_test_score"]
    assert mean.max() - mean.min() > 0.05  # the grid matters: equal scores are not trivial
    assert here.best_score_ > (0.8 if name == "GBRELMRegressor" else 0.6)
    np.testing.assert_array_equal(
        on_ray.best_estimator_.predict(X), here.best_estimator_.predict(X)
    )

    # the C path solved in each piece equals scikit-learn's search of separate fits
    splitter = (KFold if name == "GBRELMRegressor" else StratifiedKFold)(
        4, shuffle=True, random_state=6
    )  # what cv=4 means to the library's search
    reference = SklearnGridSearchCV(estimator, grid, cv=splitter).fit(X, y)
    assert reference.best_params_ == here.best_params_
    np.testing.assert_allclose(reference.cv_results_["mean_test_score"], mean, rtol=1e-7, atol=1e-9)


def test_kbrelm_from_parquet_on_dask_equals_the_local_fit_through_a_model_file(
    tmp_path, dask_client
):
    X, y = make_classification(900, 6, n_informative=4, n_classes=3, class_sep=1.2, random_state=8)
    X = (X * np.array([1.0, 5.0, 0.5, 20.0, 2.0, 1.0])).astype(np.float32)
    labels = CLASSES[y]
    for i, rows in enumerate(np.array_split(np.arange(900), 3)):
        write_parquet(X[rows], tmp_path / "data" / f"part-{i}.parquet", y=labels[rows])
    raw = open_parquet(tmp_path / "data")
    # the runner's path: the scaler's statistics from the workers, the rows scaled as read
    scaler = dataplane.fit_scaler(raw, client=dask_client)
    data = raw.scaled(scaler).with_units(5)
    model = KBRELMClassifier(n_estimators=4, C=10.0, sigma=1.5)
    on_dask = clone(model).fit(data, client=dask_client)

    Xr, yr = raw.read()
    local_scaler = Scaler().fit(Xr)
    # the workers' statistics are float64; Scaler keeps float32 data's in float32
    np.testing.assert_allclose(scaler.scale_, local_scaler.scale_, rtol=1e-6)
    np.testing.assert_allclose(scaler.min_, local_scaler.min_, rtol=1e-6, atol=1e-6)
    # the rows the workers read: the same files, scaled as read, here in this process
    Xs, ys = data.read()
    np.testing.assert_allclose(Xs, local_scaler.transform(Xr), rtol=0, atol=1e-6)
    local = clone(model).fit(Xs, ys)
    np.testing.assert_array_equal(on_dask.classes_, local.classes_)
    np.testing.assert_array_equal(on_dask.X_fit_, local.X_fit_)
    scale = np.abs(local.dual_coef_).max()
    assert np.abs(on_dask.dual_coef_ - local.dual_coef_).max() <= 1e-9 * scale
    expected = local.predict(Xs)
    assert np.mean(expected == yr) > 0.8  # a model that learned, not a constant
    np.testing.assert_array_equal(on_dask.predict(Xs), expected)

    # saved with its scaler, loaded, and scored on the workers from the raw files
    path = elmscale.save(make_pipeline(scaler, on_dask), tmp_path / "kbrelm.elm")
    loaded = elmscale.load(path)
    np.testing.assert_array_equal(loaded[-1].dual_coef_, on_dask.dual_coef_)
    np.testing.assert_array_equal(dataplane.predict(loaded, raw, client=dask_client), expected)
