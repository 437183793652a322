"""`elmscale reproduce felm`: the protocol's pieces and notes, the baselines' kept features,
the claims against the paper's table, and the quick run through the engine (the kept
features beside the paper's accuracy, the statistics with their CD diagram).  Nothing
here asserts accuracy (the full run's report does)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from _datasets import shared_data

from elmscale.distributed.executors import LocalExecutor
from elmscale.experiments.papers import felm
from elmscale.experiments.pieces import L1SelectSVC, PaperSVC, selected_feature_count
from elmscale.experiments.reproduce import load_protocol, reproduce, select_datasets

METHODS = {"FELM", "FKELM", "FELM-rel", "FKELM-rel", "L1-select+SVC", "SVC"}


def test_the_quick_protocol_expands_into_one_trial_per_method_and_set():
    quick = load_protocol("felm", quick=True)
    pieces = quick.pieces()
    assert len(pieces) == len({p.key for p in pieces}) == 12
    assert {p.dataset for p in pieces} == set(felm.QUICK_SETS)
    assert {p.method.name for p in pieces} == METHODS
    assert {(p.trial, p.folds, p.table) for p in pieces} == {(0, 3, "5")}
    fkelm = next(p.method for p in pieces if p.method.name == "FKELM")
    assert dict(fkelm.first_stage)["sigma"] == (felm.library_sigma(2.0**-2),)
    assert list(fkelm.grid_dict()) == ["psi"]  # the second stage, with the selection
    assert dict(fkelm.first_stage_params) == dict(felm.WITHOUT_SELECTION)
    assert dict(fkelm.params)["sigma_star_ratio"] == 2.0**10
    # the paper's rows keep its absolute psi; the -rel rows search the relative scale,
    # largest psi first (the CV's ties go to the sparser model)
    by_name = {p.method.name: p.method for p in pieces}
    for name in ("FELM", "FKELM"):
        assert dict(by_name[name].params)["psi_scale"] == "absolute"
        assert dict(by_name[name + "-rel"].params)["psi_scale"] == "relative"
        assert by_name[name + "-rel"].first_stage == by_name[name].first_stage
    assert by_name["FELM-rel"].grid_dict()["psi"] == list(felm.QUICK["rel_psi"])
    full = load_protocol("felm")
    assert [(t.name, len(t.datasets), t.trials, t.folds) for t in full.tables] == [
        ("5", 8, 10, 5),
        ("3", 2, 10, 5),
    ]
    assert len(full.pieces()) == 10 * 6 * 10
    rel = next(m for m in full.tables[0].methods if m.name == "FKELM-rel")
    assert rel.grid_dict()["psi"] == [2.0**k for k in (4, 2, 0, -2, -4, -6, -8)]
    assert all(t.feature_counts and t.control == "FKELM" for t in full.tables)


def test_the_notes_state_the_grid_reduction():
    notes = load_protocol("felm").notes
    reduction = notes[0]
    assert reduction.startswith("Grid reduced and staged")
    assert "C in {2^-10, 2^-9, ..., 2^10}" in reduction  # the paper's
    assert "C in {2^-6, 2^-4, ..., 2^6}" in reduction  # this run's
    assert "psi in {0, 2^0, 2^2, 2^4}" in reduction and "tau in {0.3, 0.4, 0.5, 0.6}" in reduction
    assert "two CV stages" in reduction
    assert "relative psi in {2^4, 2^2, ..., 2^-8}" in reduction
    assert any("psi_scale='relative'" in note for note in load_protocol("felm").notes)
    assert "--quick" in load_protocol("felm", quick=True).notes[0]
    assert len(felm.PAPER_C) == len(felm.PAPER_SIGMA_P) == 21 and len(felm.PAPER_TAU) == 11


def test_the_papers_sigma_becomes_the_librarys_width():
    d2 = 3.7
    for sigma_p in (2.0**-4, 1.0, 2.0**3):
        sigma = felm.library_sigma(sigma_p)
        assert math.exp(-(sigma_p**2) * d2) == pytest.approx(math.exp(-d2 / (2 * sigma**2)))


def test_the_baselines_count_their_kept_features():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(200, 10))
    y = np.where(X[:, 0] - X[:, 3] > 0, 1, -1)
    model = L1SelectSVC(select_C=0.1, C=10.0, sigma=2.0).fit(X, y)
    kept = model.get_support()
    assert kept[0] and kept[3] and kept.sum() < 10
    assert list(model.get_support(indices=True)) == list(np.flatnonzero(kept))
    assert model.score(X, y) > 0.9
    assert selected_feature_count(model, 10) == model.n_features_selected_ == kept.sum()
    # an l1 model that keeps nothing still leaves the SVC one feature
    assert L1SelectSVC(select_C=1e-6).fit(X, y).n_features_selected_ == 1
    assert selected_feature_count(PaperSVC().fit(X, y), 10) == 10


def test_a_named_set_runs_in_the_table_that_lists_it():
    chosen = select_datasets(load_protocol("felm"), ["heart", "two-moon"])
    assert [(t.name, t.datasets) for t in chosen.tables] == [
        ("5", ("heart",)),
        ("3", ("two-moon",)),
    ]
    assert len(chosen.pieces()) == 2 * 6 * 10


def test_the_claim_is_judged_against_the_papers_accuracy(tmp_path):
    pd.DataFrame(
        {
            "table": ["Table 5", "Table 5", "Table 5", "Table 3"],
            "dataset": ["Heart", "Heart", "Heart", "Two-moon"],
            "method": ["FELM", "FKELM", "RFSVM", "FELM"],
            "train_acc": [0.9, 0.9, 0.9, 1.0],
            "test_acc": [0.8679, 0.8785, 0.8485, 1.0],
            "time_s": [0.15, 0.16, 3.9, 0.3],
        }
    ).to_csv(tmp_path / "felm_paper_results.csv", index=False)
    paper = felm.paper_values(tmp_path)
    assert set(paper["method"]) == {"FELM", "FKELM"}
    assert paper.set_index(["dataset", "method"]).loc[("heart", "FKELM"), "test_acc"] == (
        pytest.approx(87.85)
    )
    summary = pd.DataFrame(
        {
            "dataset": ["heart", "heart", "heart", "two-moon"],
            "method": ["FELM", "FKELM", "SVC", "FELM"],
            "test_acc": [90.0, 80.0, 90.0, 99.5],  # FELM 3.2 above the paper: holds
            "n_features_selected": [5.0, 7.0, 13.0, 2.0],
            "n_features": [13, 13, 13, 2],
        }
    )
    claims = felm.claims(summary, None, None, reference_dir=tmp_path)
    assert list(claims["holds"]) == [True, False, True]
    assert claims["difference"].tolist() == pytest.approx([90.0 - 86.79, 80.0 - 87.85, -0.5])
    assert felm.claims(summary, None, None, reference_dir=None).empty


@pytest.mark.needs_shared
@pytest.mark.timeout(300)
def test_the_quick_run_records_kept_features_beside_the_papers_accuracy(tmp_path):
    run = reproduce(
        "felm",
        out_dir=tmp_path,
        quick=True,
        data_dir=shared_data(),
        executor=LocalExecutor(2),
        quiet=True,
    )
    assert run.n_pieces == 12
    results = pd.read_csv(tmp_path / "results.csv")
    assert set(results["method"]) == METHODS
    assert (results["n_features_selected"] >= 1).all()
    assert (results["n_features_selected"] <= results["n_features"]).all()
    svc = results[results["method"] == "SVC"]
    assert (svc["n_features_selected"] == svc["n_features"]).all()
    assert set(svc["n_features"]) == {13, 30}
    chosen = [json.loads(p) for p in results.loc[results["method"] == "FKELM", "params"]]
    assert all(p["psi"] in (0.0, 4.0) and p["tau"] == 0.5 for p in chosen)
    chosen = [json.loads(p) for p in results.loc[results["method"] == "FELM-rel", "params"]]
    assert all(p["psi"] in felm.QUICK["rel_psi"] for p in chosen)
    md = (tmp_path / "report.md").read_text()
    assert "kept (mean)" in md and "paper test %" in md and "Grid reduced" in md
    summary = pd.read_csv(tmp_path / "summary.csv")
    heart = summary.set_index(["dataset", "method"]).loc[("heart", "FKELM")]
    assert heart["paper_test_acc"] == pytest.approx(87.85)  # Table 5, from the CSV
    claims = run.report.claims
    assert len(claims) == 4 and set(claims["holds"]) <= {True, False}
    (entry,) = run.report.statistics
    assert entry["table"] == "5" and entry["n_datasets"] == 2 and "nemenyi_cd" in entry
    assert (tmp_path / entry["cd_diagram"]).is_file()


def test_a_staged_search_keeps_the_first_stages_choice():
    from dataclasses import replace

    from elmscale.experiments.pieces import _search
    from elmscale.models.felm import FELMClassifier

    piece = next(p for p in load_protocol("felm", quick=True).pieces() if p.method.name == "FELM")
    method = replace(piece.method, first_stage=(("C", (0.01, 100.0)),), grid=(("psi", (0.0, 2.0)),))
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(90, 5))
    y = (X[:, 0] > 0).astype(int)
    est = FELMClassifier(n_hidden=30, max_sweeps=2, random_state=0)
    best, score = _search(replace(piece, method=method), est, X, y, regression=False)
    assert set(best) == {"C", "psi"} and best["C"] in (0.01, 100.0) and best["psi"] in (0.0, 2.0)
    assert 0.5 < score <= 1.0
