"""``probability=True`` with a ParquetDataset is refused before any work, by every family
whose ``fit`` takes one (the calibration's out-of-fold fits read in-memory arrays).

Before, the unified ELM, FLSA-SVM and the boosting-ridge ensembles ran the whole fit (the
pass over the data, the solve) and only then refused, in the calibration; the sparse ELM
checked first.  Here the data set's units may not be read at all, and the estimator is
left unfitted.  (FELM and FKELM take arrays only.)
"""

from __future__ import annotations

import numpy as np
import pytest

from elmscale import (
    BRELMClassifier,
    ELMClassifier,
    FLSASVMClassifier,
    GBRELMClassifier,
    GGBRELMClassifier,
    KBRELMClassifier,
    SparseELMClassifier,
)
from elmscale.data import write_parquet
from elmscale.data.parquet import ParquetDataset, open_parquet

FAMILIES = {
    "ELM random nodes": lambda: ELMClassifier(n_hidden=20, random_state=0),
    "ELM kernel": lambda: ELMClassifier(kernel="gaussian"),
    "FLSA-SVM": lambda: FLSASVMClassifier(n_support=5, random_state=0),
    "BRELM": lambda: BRELMClassifier(n_estimators=2, n_hidden=10, random_state=0),
    "GBRELM": lambda: GBRELMClassifier(n_estimators=2, n_hidden=10, random_state=0),
    "GGBRELM": lambda: GGBRELMClassifier(n_estimators=2, n_hidden=10, random_state=0),
    "KBRELM": lambda: KBRELMClassifier(n_estimators=2),
    "sparse ELM random nodes": lambda: SparseELMClassifier(
        hidden="sigmoid", n_hidden=20, random_state=0
    ),
}
#: what each family's fit_path takes (the sparse ELM's fit_path takes arrays only)
PATH_VALUES = {"FLSA-SVM": [2, 4]}


@pytest.fixture
def dataset(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = (X[:, 0] > 0).astype(np.int64)
    write_parquet(X[:30], tmp_path / "part-0.parquet", y=y[:30])
    write_parquet(X[30:], tmp_path / "part-1.parquet", y=y[30:])
    return open_parquet(tmp_path)


@pytest.fixture
def no_reads(monkeypatch):
    """Any read of a data set's units fails the test: the refusal must come first."""

    def units(self, n_units=None):
        raise AssertionError("the data set was read before probability=True was refused")

    monkeypatch.setattr(ParquetDataset, "units", units)


def _assert_refused_unfitted(model, call):
    with pytest.raises(ValueError, match=r"\(probability=True\) .*ParquetDataset"):
        call()
    assert [name for name in vars(model) if name.endswith("_")] == []


@pytest.mark.parametrize("name", list(FAMILIES))
def test_fit_refuses_probability_with_a_parquet_dataset_first(name, dataset, no_reads):
    model = FAMILIES[name]().set_params(probability=True)
    _assert_refused_unfitted(model, lambda: model.fit(dataset))


@pytest.mark.parametrize("name", [n for n in FAMILIES if not n.startswith("sparse")])
def test_fit_path_refuses_probability_with_a_parquet_dataset_first(name, dataset, no_reads):
    model = FAMILIES[name]().set_params(probability=True)
    values = PATH_VALUES.get(name, [1.0, 10.0])
    _assert_refused_unfitted(model, lambda: model.fit_path(dataset, None, values))


@pytest.mark.parametrize("name", ["ELM random nodes", "FLSA-SVM", "GGBRELM"])
def test_without_probability_the_parquet_fit_runs(name, dataset):
    """The check refuses only probability=True: the same fit without it reads the units."""
    model = FAMILIES[name]().fit(dataset)
    assert model.classes_.tolist() == [0, 1]
