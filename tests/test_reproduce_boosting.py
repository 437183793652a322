"""``elmscale reproduce boosting-ridge``: the boosting-ridge paper's protocol on the
framework (repeated k-fold partitions shared by the methods, regression sets, metrics,
statistics against GGBRELM, the paper's claims beside ours)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from _datasets import shared_data

from elmscale.distributed.executors import LocalExecutor
from elmscale.experiments.datasets import kfold_split, load_dataset
from elmscale.experiments.papers import boosting_ridge
from elmscale.experiments.protocol import Evaluation
from elmscale.experiments.reproduce import load_protocol, reproduce

pytestmark = pytest.mark.needs_shared


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("boosting")
    reference = shared_data().parent / "reference"
    return reproduce(
        "boosting-ridge",
        out_dir=out,
        quick=True,
        data_dir=shared_data(),
        reference_dir=reference,
        executor=LocalExecutor(2),
        quiet=True,
    )


def test_the_quick_run_has_every_method_metric_and_fold(quick_run):
    results = pd.read_csv(quick_run.out_dir / "results.csv")
    protocol = load_protocol("boosting-ridge", quick=True)
    assert quick_run.n_pieces == len(protocol.pieces()) == 4 * 4 * 3
    assert set(results["method"]) == {"ELM", "GBRELM", "GGBRELM", "KBRELM"}
    classification = results[results["table"].str.endswith("classification")]
    regression = results[results["table"].str.endswith("regression")]
    assert set(classification["dataset"]) == {"heart"}
    assert set(regression["dataset"]) == {"yacht"}
    for column in ("test_balanced_accuracy", "test_precision_macro", "test_f1_macro"):
        assert classification[column].between(50, 100).all(), column
        assert regression[column].isna().all()
    assert (regression["test_rmse"] > 0).all() and (regression["test_rmse"] < 0.5).all()
    assert (regression["test_r2"] > 0).all()
    # 3 outer folds of heart's 270 rows and yacht's 308: the test parts are the folds
    assert sorted(set(classification["n_test"])) == [90]
    assert sorted(set(regression["n_test"])) == [102, 103]
    # the library's C is 1 / the paper's: the five values of 10^-2 .. 10^2 either way
    assert {eval(p)["C"] for p in results["params"]} <= set(boosting_ridge.library_Cs())


def test_the_report_ranks_by_each_tables_score_against_ggbrelm(quick_run):
    report = (quick_run.out_dir / "report.md").read_text()
    assert "Table E2-regression: D=100" in report
    assert "RMSE" in report and "balanced acc %" in report
    claims = quick_run.report.claims
    assert set(claims["metric"]) == {
        "balanced_accuracy",
        "precision_macro",
        "f1_macro",
        "rmse",
        "r2",
    }
    # the paper's counts as fractions of its 71 / 52 sets, and its F*
    row = claims[(claims["experiment"] == "E1") & (claims["metric"] == "balanced_accuracy")]
    assert row["paper best or second %"].iloc[0] == pytest.approx(100 * (31 + 36) / 71)
    assert row["paper F*"].iloc[0] == pytest.approx(27.80)
    statistics = {entry["table"]: entry for entry in quick_run.report.statistics}
    assert statistics["E1-regression"]["score"] == "test_rmse"


def test_the_outer_partitions_cover_every_row_once_per_repeat_for_every_method():
    spec = next(d for d in boosting_ridge.REGRESSION if d.name == "yacht")
    data = load_dataset(spec, shared_data())
    X, y = data.parts[0]
    assert y.min() == 0.0 and y.max() == 1.0  # targets scaled to [0, 1]
    evaluation = Evaluation(split="kfold", outer_folds=10, repeats=3, scaling="standard")
    for repeat in range(3):
        tests = []
        for fold in range(10):
            X_tr, y_tr, X_te, y_te = kfold_split(data, repeat * 10 + fold, evaluation, seed=0)
            assert len(y_tr) + len(y_te) == len(y)
            # standardised on the training part
            assert np.allclose(X_tr.mean(axis=0), 0, atol=1e-9)
            tests.append(np.sort(y_te))
        assert np.allclose(np.sort(np.concatenate(tests)), np.sort(y))
    # the partition depends on the repeat, not on anything a method brings
    first = kfold_split(data, 0, evaluation, seed=0)[3]
    assert np.array_equal(first, kfold_split(data, 0, evaluation, seed=0)[3])
    assert not np.array_equal(first, kfold_split(data, 10, evaluation, seed=0)[3])


def test_the_default_run_takes_the_small_sets_of_both_tasks():
    protocol = load_protocol("boosting-ridge")
    tables = {t.name: t for t in protocol.tables}
    assert set(tables) == {
        "E1-classification",
        "E1-regression",
        "E2-classification",
        "E2-regression",
    }
    assert all(t.trials == 30 for t in tables.values())
    small = {
        n for n, rows in boosting_ridge.ROWS.items() if rows <= boosting_ridge.DEFAULT_MAX_ROWS
    }
    assert (
        set(tables["E1-regression"].datasets) | set(tables["E1-classification"].datasets) == small
    )
    assert "cod-rna" not in small and "yacht" in small
    # every regression set of ../shared/data loads, its target in [0, 1]
    for spec in boosting_ridge.REGRESSION:
        data = load_dataset(spec, shared_data())
        X, y = data.parts[0]
        assert len(y) == boosting_ridge.ROWS[spec.name], spec.name
        assert np.isfinite(X).all() and y.min() == 0.0 and y.max() == 1.0, spec.name
