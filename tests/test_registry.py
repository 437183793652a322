"""The estimator registry: one entry makes a new estimator usable everywhere.

A small estimator defined here (a nearest-centroid classifier with C-shrunk centroids)
is registered with one ``register`` call and then goes through ``elmscale run`` (a grid
search on Ray), ``elmscale train`` / ``predict``, the model-file round trip and
``GridSearchCV`` in this process, with nothing else changed.
"""

import sys

import numpy as np
import pytest
from _problems import nonlinear_problem
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.validation import check_is_fitted, validate_data

import elmscale
from elmscale import ModelFileError, registry
from elmscale.app.cli import main
from elmscale.model_selection import GridSearchCV
from elmscale.registry import Capabilities, EstimatorEntry


class ShrunkCentroidClassifier(ClassifierMixin, BaseEstimator):
    """Nearest class centroid; each centroid shrunk towards the overall mean by
    ``1 / (1 + 1/C)`` (larger C, less shrinkage, as the library's C)."""

    def __init__(self, C=1.0):
        self.C = C

    def fit(self, X, y):
        X, y = validate_data(self, X, y)
        if not self.C > 0:
            raise ValueError(f"C must be > 0; got {self.C}")
        self.classes_, index = np.unique(y, return_inverse=True)
        mean = X.mean(axis=0)
        weight = 1.0 / (1.0 + 1.0 / self.C)
        self.centroids_ = np.array(
            [mean + weight * (X[index == k].mean(axis=0) - mean) for k in range(self.classes_.size)]
        )
        return self

    def decision_function(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False)
        closeness = -np.square(X[:, None, :] - self.centroids_[None]).sum(axis=2)
        return closeness[:, 1] - closeness[:, 0] if self.classes_.size == 2 else closeness

    def predict(self, X):
        scores = self.decision_function(X)
        index = (scores > 0).astype(int) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[index]


NAME = "ShrunkCentroidClassifier"


@pytest.fixture
def registered():
    entry = registry.register(
        EstimatorEntry(NAME, ShrunkCentroidClassifier, Capabilities(task="classifier"))
    )
    yield entry
    registry.unregister(NAME)


@pytest.fixture
def csv_data(tmp_path):
    X, y = nonlinear_problem(300, d=4, seed=2)
    path = tmp_path / "train.csv"
    rows = ["f0,f1,f2,f3,label"] + [",".join(f"{v:.6f}" for v in x) + f",{c}" for x, c in zip(X, y)]
    path.write_text("\n".join(rows) + "\n")
    return path, X, y


def test_registration_is_what_the_commands_read(registered):
    assert NAME in registry.names()
    assert registry.entry(NAME).load() is ShrunkCentroidClassifier
    assert registry.entry_for(ShrunkCentroidClassifier()) is registered
    with pytest.raises(ValueError, match="already registered"):
        registry.register(registered)
    with pytest.raises(KeyError, match="did you mean 'ShrunkCentroidClassifier'"):
        registry.entry("ShrunkCentroidClassifer")


def test_a_registered_estimator_round_trips_through_a_model_file(registered, tmp_path):
    X, y = nonlinear_problem(200, d=4, seed=1)
    model = ShrunkCentroidClassifier(C=3.0).fit(X, y)
    elmscale.save(model, tmp_path / "centroids.elm")
    again = elmscale.load(tmp_path / "centroids.elm")
    assert type(again) is ShrunkCentroidClassifier and again.C == 3.0
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
    registry.unregister(NAME)
    try:
        with pytest.raises(ModelFileError, match="unknown estimator 'ShrunkCentroidClassifier'"):
            elmscale.load(tmp_path / "centroids.elm")
    finally:
        registry.register(registered)


def test_an_unregistered_class_cannot_be_saved(tmp_path):
    X, y = nonlinear_problem(50, d=4)
    with pytest.raises(TypeError, match="cannot save a ShrunkCentroidClassifier"):
        elmscale.save(ShrunkCentroidClassifier().fit(X, y), tmp_path / "no.elm")


def test_a_registered_estimator_trains_and_predicts_on_the_command_line(
    registered, csv_data, tmp_path, capsys
):
    path, X, y = csv_data
    model_path = tmp_path / "model.elm"
    assert (
        main(
            [
                "train",
                str(path),
                str(model_path),
                "--estimator",
                NAME,
                "-p",
                "C=2",
                "--label",
                "label",
            ]
        )
        == 0
    )
    assert (
        main(["predict", str(model_path), str(path), str(tmp_path / "out.csv"), "--label", "label"])
        == 0
    )
    model = elmscale.load(model_path)
    assert model[-1].C == 2
    written = np.loadtxt(tmp_path / "out.csv", skiprows=1)
    np.testing.assert_array_equal(written, model.predict(X))
    assert main(["train", str(path), str(model_path), "--estimator", NAME, "-p", "nope=1"]) == 2
    assert "unknown parameter(s) ['nope']" in capsys.readouterr().err


def test_a_registered_estimator_runs_a_pipeline_with_a_grid_search_on_ray(
    registered, csv_data, tmp_path, ray_session
):
    # Ray's workers cannot import this test module: send the class by value, as a user's
    # notebook-defined estimator would be sent
    ray_session.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    path, X, y = csv_data
    pipeline = tmp_path / "centroids.toml"
    pipeline.write_text(f"""
[run]
name = "centroids"
task = "cv"
[data]
train = "{path}"
label = "label"
test_size = 0.25
[model]
estimator = "{NAME}"
[search]
grid = {{C = [0.01, 1, 100]}}
folds = 3
[output]
dir = "{tmp_path / "runs"}"
""")
    assert main(["validate", str(pipeline)]) == 0
    assert main(["run", str(pipeline), "--ray-address", "auto"]) == 0
    run_dir = next((tmp_path / "runs").iterdir())
    import json

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["estimator"] == NAME
    assert metrics["cv"]["candidates"] == 3
    assert metrics["test"]["accuracy"] > 0.6
    model = elmscale.load(run_dir / "model.elm")
    assert type(model[-1]) is ShrunkCentroidClassifier
    assert model[-1].C == metrics["cv"]["best_params"]["C"]


def test_grid_search_in_this_process_fits_each_C_without_a_path(registered):
    X, y = nonlinear_problem(240, d=4, seed=3)
    search = GridSearchCV(ShrunkCentroidClassifier(), {"C": [0.01, 1.0, 100.0]}, cv=3).fit(X, y)
    assert search.n_pieces_ == 3  # one per fold: no other parameter
    from sklearn.model_selection import GridSearchCV as SklearnSearch
    from sklearn.model_selection import StratifiedKFold

    theirs = SklearnSearch(
        ShrunkCentroidClassifier(),
        {"C": [0.01, 1.0, 100.0]},
        cv=StratifiedKFold(3, shuffle=True, random_state=0),
    ).fit(X, y)
    np.testing.assert_allclose(
        search.cv_results_["mean_test_score"], theirs.cv_results_["mean_test_score"]
    )
    assert search.best_params_ == theirs.best_params_


def test_grid_search_refuses_an_unregistered_estimator():
    X, y = nonlinear_problem(60, d=4)
    with pytest.raises(TypeError, match="registered estimator"):
        GridSearchCV(ShrunkCentroidClassifier(), {"C": [1.0]}, cv=2).fit(X, y)


@pytest.mark.parametrize("name", registry.names())
def test_every_estimator_refuses_zero_threads_and_takes_minus_one(name):
    """``n_threads=0`` means neither one thread nor every core: each estimator refuses it
    alike, naming the parameter (some refused it, others took it for one thread)."""
    cls = registry.entry(name).load()
    X = np.random.default_rng(0).uniform(-1, 1, (40, 3))
    y = np.arange(40) % 2 if registry.entry(name).capabilities.task == "classifier" else X[:, 0]
    with pytest.raises(ValueError, match="'n_threads' parameter"):
        cls(n_threads=0).fit(X, y)
    assert cls(n_threads=-1).fit(X, y).predict(X[:3]).shape == (3,)
