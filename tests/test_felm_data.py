"""The FELM / FKELM paper's data: the two generated 2-D sets, the built-in WDBC, the
shared files (Table 4's shapes and labels) and the stratified 70 / 30 trial split."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _datasets import shared_data, shared_path
from scipy.spatial.distance import cdist

from elmscale.core.errors import DataError
from elmscale.data import generate_two_gaussians, generate_two_moons
from elmscale.experiments.datasets import load_dataset, trial_split
from elmscale.experiments.papers.felm import ARTIFICIAL, BENCHMARK, DATASETS
from elmscale.experiments.protocol import DataSet

SPECS = {d.name: d for d in DATASETS}


@pytest.mark.parametrize("generate", [generate_two_moons, generate_two_gaussians])
def test_the_generators_are_seeded_balanced_and_two_dimensional(generate):
    a, b, other = generate(random_state=5), generate(random_state=5), generate(random_state=6)
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)
    assert not np.allclose(a.X, other.X)
    assert a.X.shape[1] == 2 and set(np.unique(a.y)) == {0, 1}
    counts = np.bincount(a.y)
    assert abs(counts[0] - counts[1]) <= 1
    with pytest.raises(ValueError, match="n_samples"):
        generate(n_samples=1)


def test_the_two_moons_lie_apart_in_the_papers_range():
    d = generate_two_moons(601, random_state=1)
    assert d.X.shape == (601, 2)
    assert 0.0 < d.X[:, 0].min() and d.X[:, 0].max() < 4.5
    gap = cdist(d.X[d.y == 0], d.X[d.y == 1]).min()
    assert gap > 0.1  # "completely divided"
    with pytest.raises(ValueError, match="width"):
        generate_two_moons(width=3.0)


def test_the_two_gaussians_have_the_papers_means_and_unit_covariance():
    d = generate_two_gaussians(20_000, random_state=2)
    for label, mean in ((0, (0.0, 0.0)), (1, (0.8, 0.8))):
        part = d.X[d.y == label]
        np.testing.assert_allclose(part.mean(axis=0), mean, atol=0.05)
        np.testing.assert_allclose(np.cov(part.T), np.eye(2), atol=0.06)


@pytest.mark.parametrize("name", ["wdbc", "two-moon", "two-gaussians"])
def test_the_sets_without_files_load_and_split_70_30_stratified(name):
    spec = SPECS[name]
    data = load_dataset(spec, None)
    X, y = data.parts[0]
    assert X.shape == (spec.n_train + spec.n_test, spec.n_features)
    assert data.group == "binary"
    X_tr, y_tr, X_te, y_te = trial_split(data, 3)
    assert X_tr.shape == (spec.n_train, spec.n_features) and len(y_te) == spec.n_test
    assert X_tr.min() >= -1 - 1e-12 and X_tr.max() <= 1 + 1e-12  # scaled on the training part
    share = np.mean(y == y[0])
    assert abs(np.mean(y_tr == y[0]) - share) < 1.5 / len(y_tr) + 1e-12
    again = trial_split(data, 3)
    assert np.array_equal(again[0], X_tr) and np.array_equal(again[3], y_te)
    other = trial_split(data, 4)
    assert not np.array_equal(other[0], X_tr)


def test_the_artificial_sets_are_drawn_once_at_the_papers_sizes():
    assert {d.name: (d.n_train, d.n_test) for d in ARTIFICIAL} == {
        "two-moon": (501, 100),
        "two-gaussians": (350, 50),
    }
    first = load_dataset(SPECS["two-moon"], None).parts[0][0]
    assert np.array_equal(first, load_dataset(SPECS["two-moon"], None).parts[0][0])


def test_a_set_has_files_or_a_source_and_a_bad_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="not neither"):
        DataSet("none", ())
    with pytest.raises(ValueError, match="not both"):
        DataSet("both", ("a.csv",), source="sklearn.datasets:load_iris")
    (tmp_path / "feature-selection").mkdir()
    path = tmp_path / "feature-selection" / "wpbc.data"
    pd.DataFrame(np.arange(40.0).reshape(4, 10)).to_csv(path, header=False, index=False)
    with pytest.raises(DataError, match="wpbc.data gives 8 feature columns"):
        load_dataset(SPECS["wpbc"], tmp_path)
    bad = DataSet("bad", (), source="elmscale.data.synthetic:no_such_generator")
    with pytest.raises(DataError, match="source elmscale.data.synthetic:no_such_generator"):
        load_dataset(bad, None)


# -- the shared files (Table 4's shapes, the README's labels) ---------------------------

_LABELS = {
    "australian": {0, 1},
    "heart": {-1, 1},
    "ionosphere": {-1, 1},
    "wpbc": {"N", "R"},
    "sonar": {-1, 1},
    "colon": {0, 1},
    "leukemia": {1, 2},
}


@pytest.mark.needs_shared
@pytest.mark.parametrize("name", sorted(_LABELS))
def test_each_shared_set_loads_with_its_shape_and_labels(name):
    spec = SPECS[name]
    data = load_dataset(spec, shared_data())
    X, y = data.parts[0]
    assert X.shape == (spec.n_train + spec.n_test, spec.n_features)
    assert set(np.unique(y).tolist()) == _LABELS[name]
    assert np.isfinite(X).all()


@pytest.mark.needs_shared
def test_the_split_sizes_are_the_papers_table_4():
    paper = pd.read_csv(shared_path("reference", "felm_paper_datasets.csv"))
    sizes = paper.set_index("dataset")[["n_train", "n_test"]]
    for spec in DATASETS:
        assert (spec.n_train, spec.n_test) == tuple(sizes.loc[spec.paper_name]), spec.name
    benchmark_features = paper.set_index("dataset")["n_features"]
    # the paper prints 33 for Ionosphere (one constant attribute dropped) and 34 for WPBC
    assert {s.name: s.n_features for s in BENCHMARK} == {
        s.name: int(benchmark_features[s.paper_name]) - (s.name == "wpbc") for s in BENCHMARK
    }
