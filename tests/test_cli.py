"""The elmscale command line: sub-commands, outputs and exit codes."""

import json
import subprocess
import sys

import numpy as np
import pyarrow.parquet as pq
import pytest
from _problems import nonlinear_problem

import elmscale
from elmscale.app.cli import main


@pytest.fixture()
def csv_data(tmp_path):
    X, y = nonlinear_problem(400, d=3, seed=0)
    rows = ["a,b,c,target"] + [
        f"{a:.6f},{b:.6f},{c:.6f},{'yes' if t else 'no'}" for (a, b, c), t in zip(X * 10, y)
    ]
    train = tmp_path / "train.csv"
    train.write_text("\n".join(rows[:301]) + "\n")
    test = tmp_path / "test.csv"
    test.write_text("\n".join([rows[0]] + rows[301:]) + "\n")
    return train, test


def test_train_predict_round_trip(tmp_path, csv_data, capsys):
    train, test = csv_data
    model = tmp_path / "m.elm"
    rc = main(
        [
            "train",
            str(train),
            str(model),
            "--label",
            "target",
            "-p",
            "n_hidden=100",
            "-p",
            "C=100",
            "-p",
            "random_state=0",
            "--test",
            str(test),
            "--metrics",
            str(tmp_path / "metrics.json"),
        ]
    )
    assert rc == 0
    out = capsys.readouterr().out
    assert "test (100 rows): accuracy" in out
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["test"]["accuracy"] > 0.85
    loaded = elmscale.load(model)
    assert loaded[-1].n_hidden == 100 and loaded[0].__class__.__name__ == "Scaler"
    out_file = tmp_path / "pred.parquet"
    assert (
        main(["predict", str(model), str(test), str(out_file), "--label", "target", "--decision"])
        == 0
    )
    table = pq.read_table(out_file).to_pydict()
    assert set(table) == {"prediction", "decision"}
    assert len(table["prediction"]) == 100 and set(table["prediction"]) <= {"yes", "no"}
    assert all((d > 0) == (p == "yes") for d, p in zip(table["decision"], table["prediction"]))
    assert (
        main(["predict", str(model), str(test), str(tmp_path / "pred.csv"), "--label", "target"])
        == 0
    )
    assert (tmp_path / "pred.csv").read_text().splitlines()[0] == '"prediction"'


def test_train_takes_every_pipeline_estimator(tmp_path, csv_data, capsys):
    from elmscale import registry

    assert "SparseELMClassifier" in registry.names()
    train, test = csv_data
    model = tmp_path / "sparse.elm"
    assert (
        main(
            [
                "train",
                str(train),
                str(model),
                "--label",
                "target",
                "--estimator",
                "SparseELMClassifier",
                "-p",
                "C=10",
                "--test",
                str(test),
            ]
        )
        == 0
    )
    assert "trained SparseELMClassifier" in capsys.readouterr().out
    assert elmscale.load(model)[-1].__class__.__name__ == "SparseELMClassifier"
    assert (
        main(
            [
                "predict",
                str(model),
                str(test),
                str(tmp_path / "p.csv"),
                "--label",
                "target",
                "--decision",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "train",
                str(train),
                str(model),
                "--label",
                "target",
                "--estimator",
                "SparseELMClassifier",
                "-p",
                "n_hidden_units=5",
            ]
        )
        == 2
    )
    assert (
        "unknown parameter(s) ['n_hidden_units'] for SparseELMClassifier" in capsys.readouterr().err
    )


def test_convert_libsvm_to_parquet(tmp_path):
    src = tmp_path / "tiny.svm"
    src.write_text("+1 1:0.5 3:-1\n-1 2:0.25\n+1 1:1 2:1 3:1\n")
    out = tmp_path / "tiny.parquet"
    assert main(["convert", str(src), str(out)]) == 0
    table = pq.read_table(out)
    assert table.num_rows == 3
    X = np.column_stack([table.column(i).to_numpy() for i in range(3)])
    np.testing.assert_array_equal(X, [[0.5, 0, -1], [0, 0.25, 0], [1, 1, 1]])
    assert all(str(table.schema.field(i).type) == "float" for i in range(3))


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["train", "missing.csv", "m.elm"], 2, "no such file"),
        (["train", "{train}", "m.elm", "--label", "target", "-p", "C=-1"], 2, "'C' parameter"),
        (
            ["train", "{train}", "m.elm", "--label", "target", "-p", "sigma=0"],
            2,
            "'sigma' parameter",
        ),
        (["train", "{train}", "m.elm", "--label", "target", "-p", "n_hidden=0"], 2, "'n_hidden'"),
        (["train", "{train}", "m.elm", "--label", "target", "-p", "colour=red"], 2, "colour"),
        (["train", "{train}", "m.elm", "--label", "nope"], 1, "nope"),
        (["frobnicate"], 2, "invalid choice"),
        (["predict", "{train}", "{train}", "out.csv"], 1, "train.csv"),
    ],
)
def test_errors_have_exit_codes_and_write_nothing(
    tmp_path, csv_data, capsys, monkeypatch, argv, code, message
):
    monkeypatch.chdir(tmp_path)
    train, _ = csv_data
    before = set(tmp_path.iterdir())
    argv = [a.replace("{train}", str(train)) for a in argv]
    assert main(argv) == code
    assert message in capsys.readouterr().err
    assert set(tmp_path.iterdir()) == before


def test_predict_with_wrong_feature_count_names_the_file(tmp_path, csv_data, capsys):
    train, _ = csv_data
    model = tmp_path / "m.elm"
    assert main(["train", str(train), str(model), "--label", "target", "-p", "n_hidden=20"]) == 0
    narrow = tmp_path / "narrow.csv"
    narrow.write_text("a,b\n0.1,0.2\n0.3,0.4\n")
    assert main(["predict", str(model), str(narrow), str(tmp_path / "p.csv")]) == 1
    err = capsys.readouterr().err
    assert "narrow.csv" in err and "2 features" in err and "expecting 3" in err
    assert not (tmp_path / "p.csv").exists()


def test_installed_command_info_and_exit_codes(tmp_path):
    exe = [sys.executable, "-m", "elmscale"]
    info = subprocess.run(exe + ["info"], capture_output=True, text=True, check=True, timeout=120)
    assert f"elmscale {elmscale.__version__}" in info.stdout and "thread pool" in info.stdout
    bad = subprocess.run(exe + ["train"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "required" in bad.stderr


def test_info_shows_a_model_files_parameters_and_fitted_values(tmp_path, capsys):
    from sklearn.pipeline import make_pipeline

    from elmscale.data import Scaler

    X, y = np.random.default_rng(0).normal(size=(60, 3)), np.arange(60) % 2
    model = make_pipeline(Scaler(), elmscale.ELMClassifier(n_hidden=7, C=3.5)).fit(X, y)
    elmscale.save(model, tmp_path / "m.elm")
    assert main(["info", str(tmp_path / "m.elm")]) == 0
    out = capsys.readouterr().out
    assert "steps: scaler (Scaler), elmclassifier (ELMClassifier)" in out
    assert "elmclassifier parameters: C=3.5," in out and "n_hidden=7," in out
    assert "scaler fitted: n_features_in_=3, n_samples_seen_=60" in out


def test_demo_runs_end_to_end(tmp_path, capsys):
    rc = main(
        [
            "demo",
            "--rows",
            "3000",
            "--n-hidden",
            "200",
            "--data-dir",
            str(tmp_path / "d"),
            "--output-dir",
            str(tmp_path / "r"),
        ]
    )
    assert rc == 0
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert metrics["test_accuracy"] > 0.85 and metrics["reloaded_model_predicts_the_same"]
    assert "test accuracy" in capsys.readouterr().out
