"""Pictures of cross-validation results: ``plot_cv_results`` for every grid shape, and the
``cv_results.png`` that ``elmscale run`` writes next to ``cv_results.csv`` (task cv)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import StratifiedKFold

from elmscale import ELMClassifier
from elmscale.app.cli import main
from elmscale.data import generate_classification
from elmscale.io import reports
from elmscale.io.reports import plot_cv_results
from elmscale.model_selection import path_grid_search
from elmscale.model_selection.search import PAPER_C_GRID, PAPER_SIGMA_GRID

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def problem():
    data = generate_classification(90, n_features=3, random_state=0)
    return data.X, data.y


def _search(problem, estimator, Cs, grid=None):
    X, y = problem
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    return path_grid_search(estimator, X, y, Cs=Cs, param_grid=grid, cv=cv, refit=False)


def _check_png(directory: Path, name: str):
    """The only file in ``directory`` is a real PNG ``name`` (no temporary files left)."""
    assert sorted(p.name for p in directory.iterdir()) == [name]
    data = (directory / name).read_bytes()
    assert data.startswith(PNG)
    assert len(data) > 5_000


@pytest.fixture
def heatmaps(monkeypatch):
    """The (x, y) of every heatmap drawn."""
    calls = []
    draw = reports.plot_cv_heatmap

    def spy(cv_results, path, *, x="C", y="sigma", title=None):
        calls.append((x, y))
        return draw(cv_results, path, x=x, y=y, title=title)

    monkeypatch.setattr(reports, "plot_cv_heatmap", spy)
    return calls


def test_C_only_is_a_curve_with_a_std_band(problem, tmp_path, heatmaps):
    result = _search(problem, ELMClassifier(n_hidden=20, random_state=0), Cs=PAPER_C_GRID)
    assert np.ptp(result.cv_results_["std_test_score"]) > 0
    path = plot_cv_results(result.cv_results_, tmp_path / "cv_results.png")
    assert path == tmp_path / "cv_results.png"
    _check_png(tmp_path, "cv_results.png")
    assert heatmaps == []


def test_C_by_five_degrees_is_a_line_per_degree(problem, tmp_path, heatmaps):
    result = _search(
        problem,
        ELMClassifier(kernel="polynomial"),
        Cs=[0.01, 1, 100],
        grid={"degree": [1, 2, 3, 4, 5]},
    )
    assert len(result.cv_results_["params"]) == 15
    plot_cv_results(result.cv_results_, tmp_path / "degree.png", title="C x degree")
    _check_png(tmp_path, "degree.png")
    assert heatmaps == []


@pytest.mark.timeout(120)
def test_the_paper_C_by_sigma_grid_is_a_heatmap(problem, tmp_path, heatmaps):
    result = _search(
        problem,
        ELMClassifier(kernel="gaussian"),
        Cs=PAPER_C_GRID,
        grid={"sigma": list(PAPER_SIGMA_GRID)},
    )
    assert len(result.cv_results_["params"]) == 14 * 14
    plot_cv_results(result.cv_results_, tmp_path / "sigma.png")
    _check_png(tmp_path, "sigma.png")
    assert heatmaps == [("C", "sigma")]


def test_three_parameters_are_lines_with_the_rest_at_the_best(problem, tmp_path, heatmaps):
    result = _search(
        problem,
        ELMClassifier(random_state=0),
        Cs=[0.1, 10, 1000],
        grid={"n_hidden": [5, 10, 20, 40], "hidden": ["sigmoid", "sinusoid"]},
    )
    assert len(result.cv_results_["params"]) == 3 * 4 * 2
    plot_cv_results(result.cv_results_, tmp_path / "three.png")
    _check_png(tmp_path, "three.png")
    assert heatmaps == []


# -- elmscale run (task cv) ------------------------------------------------------------

C_PIPELINE = """
[run]
name = "c_only"
task = "cv"
seed = 3
[data]
train = "{d}/train"
label = "label"
generate = {{ rows = 3000, features = 4 }}
[model]
estimator = "ELMClassifier"
params = {{ hidden = "sigmoid", n_hidden = 20 }}
[search]
grid = {{ C = [0.1, 10, 1000] }}
folds = 3
[output]
dir = "{d}/runs"
"""

SIGMA_PIPELINE = """
[run]
name = "c_sigma"
task = "cv"
seed = 1
[data]
train = "{d}/train.csv"
label = "label"
test_size = 0.25
[model]
estimator = "ELMClassifier"
params = {{ kernel = "gaussian" }}
[search]
grid = {{ C = [0.1, 10, 1000], sigma = [0.5, 1, 2] }}
folds = 3
[output]
dir = "{d}/runs"
"""


def _run(tmp_path: Path, text: str, dask_client) -> Path:
    """``elmscale run`` against the session's Dask cluster (no local cluster or Ray is
    started); returns the run directory."""
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(text.format(d=tmp_path))
    address = dask_client.scheduler.address
    assert main(["run", str(pipeline), "--scheduler", address]) == 0
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


@pytest.mark.timeout(240)
@pytest.mark.parametrize("shape", ["C on Parquet", "C x sigma in memory"])
def test_run_writes_the_picture_next_to_the_cv_results(tmp_path, dask_client, capsys, shape):
    if shape == "C on Parquet":
        run_dir = _run(tmp_path, C_PIPELINE, dask_client)
    else:
        data = generate_classification(160, n_features=3, random_state=2)
        frame = pd.DataFrame(data.X, columns=data.feature_names).assign(label=data.y)
        frame.to_csv(tmp_path / "train.csv", index=False)
        run_dir = _run(tmp_path, SIGMA_PIPELINE, dask_client)
    for name in ("cv_results.csv", "cv_results.json"):
        assert (run_dir / name).is_file(), name
    picture = (run_dir / "cv_results.png").read_bytes()
    assert picture.startswith(PNG) and len(picture) > 5_000
    assert not list(run_dir.glob(".*.tmp"))
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["cv"]["files"] == ["cv_results.csv", "cv_results.json", "cv_results.png"]
