"""`elmscale reproduce flsa-svm`: the quick protocol through the engine (FLSA-SVM's
(n_support, sigma) path search beside SVC and the unified ELM) and its claims table.
Nothing here asserts accuracy (the README's full run reports it)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from _datasets import shared_data

from elmscale.distributed.executors import LocalExecutor
from elmscale.experiments.reproduce import load_protocol, reproduce

pytestmark = pytest.mark.needs_shared


@pytest.mark.timeout(600)
def test_the_quick_protocol_runs_every_method_and_judges_the_claim_per_set(tmp_path):
    run = reproduce(
        "flsa-svm",
        out_dir=tmp_path,
        quick=True,
        data_dir=shared_data(),
        executor=LocalExecutor(2),
        quiet=True,
    )
    assert run.n_pieces == len(load_protocol("flsa-svm", quick=True).pieces()) == 6
    results = pd.read_csv(tmp_path / "results.csv")
    assert set(results["method"]) == {"SVM", "unified_elm", "FLSA-SVM"}
    flsa = results[results["method"] == "FLSA-SVM"]
    chosen = [json.loads(p) for p in flsa["params"]]
    assert all(p["n_support"] in (5, 20, 50) and p["sigma"] in (0.5, 2.0, 8.0) for p in chosen)
    assert (flsa["n_support"] <= [p["n_support"] for p in chosen]).all()
    elm = results[results["method"] == "unified_elm"]
    assert (elm["n_support"] == elm["n_train"]).all()
    claims = run.report.claims
    assert len(claims) == 2 and set(claims["holds"]) <= {True, False}
    assert "FLSA-SVM" in (tmp_path / "report.md").read_text()
