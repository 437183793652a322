"""`elmscale reproduce`: the engine (local and Ray give the same results; a killed run
resumes without redoing finished pieces), the outputs, and its errors.

The quick protocol (two small sets, a 4 x 3 grid, one trial) keeps these tests short;
nothing here asserts accuracy (the full run's report does that against the paper).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from _datasets import shared_data

from elmscale.app.cli import main
from elmscale.core.errors import DataError
from elmscale.distributed.executors import LocalExecutor, RayExecutor
from elmscale.experiments.engine import Journal
from elmscale.experiments.pieces import PieceResult
from elmscale.experiments.reproduce import load_protocol, reproduce

# Every test but the bad-input one reads the shared data; that one must also pass without it.
needs_shared = pytest.mark.needs_shared

ROOT = Path(__file__).resolve().parents[1]


def _run(out_dir, executor, **kw):
    return reproduce(
        "sparse-elm",
        out_dir=out_dir,
        quick=True,
        data_dir=shared_data(),
        executor=executor,
        quiet=True,
        **kw,
    )


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("local")
    return _run(out, LocalExecutor(2))


@needs_shared
@pytest.mark.timeout(600)
def test_local_and_ray_give_identical_results(local_run, tmp_path, ray_session):
    ray_run = _run(tmp_path, RayExecutor(None))
    assert (
        ray_run.n_pieces
        == local_run.n_pieces
        == len(load_protocol("sparse-elm", quick=True).pieces())
    )
    for name in ("results.csv", "curves.csv", "grids.csv"):
        ours = (local_run.out_dir / name).read_bytes()
        assert ours == (tmp_path / name).read_bytes(), name
    results = pd.read_csv(tmp_path / "results.csv")
    # every trial of every table: 2 sets x (3 + 3 + 2 + 2) methods x 1 trial
    assert len(results) == 20
    assert set(results["dataset"]) == {"heart", "svmguide2"}


@needs_shared
def test_outputs_of_a_run(local_run):
    out = local_run.out_dir
    for name in (
        "results.csv",
        "timings.csv",
        "results.parquet",
        "summary.csv",
        "report.md",
        "report.html",
        "fig2-3.png",
        "fig4.png",
        "fig5.png",
        "fig6.png",
        "fig7.png",
        "cd_IV.png",
        "cd_V.png",
    ):
        assert (out / name).is_file(), name
    assert not [p for p in out.iterdir() if p.name.startswith(".") or p.suffix == ".tmp"]
    joined = pd.read_parquet(out / "results.parquet")
    assert {"test_accuracy", "train_time_s", "test_time_s", "n_support"} <= set(joined)
    assert (joined["train_time_s"] > 0).all()
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 7  # figures and CD diagrams embedded
    md = (out / "report.md").read_text()
    assert "Command: `elmscale reproduce sparse-elm`" in md
    assert "paper test %" in md and "Table VIII" in md
    summary = pd.read_csv(out / "summary.csv")
    heart = summary[
        (summary["dataset"] == "heart")
        & (summary["method"] == "sparse_elm")
        & (summary["mapping"] == "gaussian")
    ]
    assert heart["paper_test_acc"].iloc[0] == pytest.approx(84.44)  # Table IV, from the CSV
    assert np.allclose(
        summary["diff"], summary["test_acc"] - summary["paper_test_acc"], equal_nan=True
    )
    # the sparse ELM's support vectors are counted per one-vs-one pair (multiclass: >= rows)
    results = pd.read_csv(out / "results.csv")
    assert (
        results.loc[results["method"] == "unified_elm", "n_support"]
        == results.loc[results["method"] == "unified_elm", "n_train"]
    ).all()


@needs_shared
def test_a_second_run_in_the_same_directory_runs_nothing(local_run):
    before = (local_run.out_dir / "pieces.jsonl").read_bytes()
    again = _run(local_run.out_dir, LocalExecutor(2))
    assert (local_run.out_dir / "pieces.jsonl").read_bytes() == before
    assert again.n_pieces == local_run.n_pieces


def _journal_keys(path: Path) -> list[str]:
    if not path.exists():
        return []
    keys = []
    for line in path.read_bytes().splitlines(keepends=True):
        if line.endswith(b"\n"):
            keys.append(json.loads(line)["key"])
    return keys


@needs_shared
@pytest.mark.timeout(600)
def test_a_killed_run_resumes_and_runs_each_piece_once(tmp_path):
    """Cut after 10 of its 55 pieces (2 trials: more than one trial of a method to resume,
    20 pieces fewer than 3 trials to run again), then resumed."""
    data_dir = shared_data()
    trials = 2
    argv = [
        sys.executable,
        "-m",
        "elmscale",
        "reproduce",
        "sparse-elm",
        "--quick",
        "--trials",
        str(trials),
        "--out",
        str(tmp_path),
        "--data-dir",
        str(data_dir),
        "--quiet",
        "--threads",
        "1",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    journal = tmp_path / "pieces.jsonl"
    first = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        while len(_journal_keys(journal)) < 10:
            assert first.poll() is None, first.communicate()[0].decode()
            assert time.monotonic() < deadline, "no pieces finished in 300 s"
            time.sleep(0.05)
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    done_before = _journal_keys(journal)
    total = len(load_protocol("sparse-elm", quick=True, trials=trials).pieces())
    assert 10 <= len(done_before) < total, "the run must be cut half-way"

    second = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=480)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"{len(done_before)} of {total} pieces already done" in second.stderr
    keys = _journal_keys(journal)
    assert len(keys) == len(set(keys)) == total  # each piece once
    assert keys[: len(done_before)] == done_before  # the first run's pieces kept, not redone
    results = pd.read_csv(tmp_path / "results.csv")
    assert len(results) == 2 * (3 + 3 + 2 + 2) * trials


@needs_shared
def test_a_torn_journal_line_is_dropped_and_its_piece_rerun(local_run, tmp_path):
    lines = (local_run.out_dir / "pieces.jsonl").read_bytes().splitlines(keepends=True)
    (tmp_path / "pieces.jsonl").write_bytes(b"".join(lines[:5]) + lines[5][:40])
    done = Journal(tmp_path).read()
    assert len(done) == 5
    assert (tmp_path / "pieces.jsonl").read_bytes() == b"".join(lines[:5])


@needs_shared
def test_a_missing_set_is_skipped_with_a_line(tmp_path, capsys):
    data_dir = tmp_path / "data"
    (data_dir / "heart").mkdir(parents=True)
    os.symlink(shared_data("heart", "heart_scale"), data_dir / "heart" / "heart_scale")
    code = main(
        [
            "reproduce",
            "sparse-elm",
            "--quick",
            "--out",
            str(tmp_path / "out"),
            "--data-dir",
            str(data_dir),
            "--quiet",
            "--threads",
            "1",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "svmguide2: skipped, no file" in captured.err
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(results["dataset"]) == {"heart"}
    assert "svmguide2: skipped" in (tmp_path / "out" / "report.md").read_text()


@needs_shared
def test_a_users_own_file_runs_by_the_papers_protocol(tmp_path, capsys):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(120, 3))
    y = np.where(X[:, 0] + 0.5 * X[:, 1] > 0, "yes", "no")
    frame = pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=y)
    path = tmp_path / "mine.csv"
    frame.to_csv(path, index=False)
    code = main(
        [
            "reproduce",
            "sparse-elm",
            "--quick",
            "--sets",
            str(path),
            "--out",
            str(tmp_path / "out"),
            "--quiet",
            "--threads",
            "1",
            "--data-dir",
            str(shared_data()),
        ]
    )
    assert code == 0, capsys.readouterr().err
    results = pd.read_csv(tmp_path / "out" / "results.csv")
    assert set(results["dataset"]) == {"mine"}
    assert set(results["n_train"]) == {60}
    assert results["test_accuracy"].min() > 70  # a linear rule: every method learns it


@needs_shared
def test_cv_rows_searches_on_a_sample_and_fits_on_every_training_row(tmp_path, capsys):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 3))
    y = np.where(X[:, 0] - X[:, 2] > 0, 1, -1)
    path = tmp_path / "mine.csv"
    pd.DataFrame(X, columns=["a", "b", "c"]).assign(label=y).to_csv(path, index=False)
    out = tmp_path / "out"
    argv = ["reproduce", "sparse-elm", "--quick", "--sets", str(path), "--out", str(out)]
    argv += ["--cv-rows", "40", "--quiet", "--threads", "1", "--data-dir", str(shared_data())]
    assert main(argv) == 0, capsys.readouterr().err
    results = pd.read_csv(out / "results.csv")
    assert set(results["n_train"]) == {100}
    assert set(results["n_cv"]) == {40}
    keys = set(Journal(out).read())
    assert keys and all("/cv40/" in key for key in keys if key.startswith("trial/"))
    assert "--cv-rows" in (out / "report.md").read_text()
    # a training part no larger than --cv-rows runs the paper's CV, under the plain key
    argv[argv.index("--out") + 1] = str(tmp_path / "out2")
    argv[argv.index("--cv-rows") + 1] = "100"
    assert main(argv) == 0, capsys.readouterr().err
    assert set(pd.read_csv(tmp_path / "out2" / "results.csv")["n_cv"]) == {100}
    assert not any("/cv" in key for key in Journal(tmp_path / "out2").read())
    # the whole training part when it is no larger than cv_rows; the sample is stratified
    from elmscale.experiments.pieces import cv_sample

    X_all, y_all = cv_sample(X, y, 300, 0, regression=False)
    assert X_all is X and y_all is y
    _, y_cv = cv_sample(X, y, 50, 0, regression=False)
    assert len(y_cv) == 50
    assert abs(np.mean(y_cv == 1) - np.mean(y == 1)) <= 1 / 50


@pytest.mark.parametrize(
    "argv, message",
    [
        (["reproduce", "unbuilt-paper"], "not built yet"),
        (["reproduce", "sparse-elm", "--trials", "0"], "trials=0"),
        (["reproduce", "sparse-elm", "--cv-rows", "5"], "cv_rows=5"),
        (["reproduce", "sparse-elm", "--sets", "nosuchset"], "neither a data set"),
        (["reproduce", "sparse-elm", "--data-dir", "/nonexistent/dir"], "--data-dir"),
        (["reproduce", "nosuchpaper"], "invalid choice"),
    ],
)
def test_bad_input_is_refused_naming_it(argv, message, tmp_path, capsys, monkeypatch):
    from elmscale.experiments.papers import PAPERS

    # a paper whose model family is not built yet (every listed one is built now)
    monkeypatch.setitem(PAPERS, "unbuilt-paper", None)
    code = main([*argv, "--out", str(tmp_path / "out"), "--quiet"])
    assert code != 0
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def _journal_of(folder, n):
    journal = Journal(folder)
    for k in range(n):
        journal.append(PieceResult(f"piece-{k}", "sparse-elm", [{"acc": 0.5 + k}], [], 1.0))
    return journal


@pytest.mark.parametrize("bad_line", [2, 4], ids=["middle", "last-whole-line"])
def test_a_bad_journal_line_raises_and_keeps_every_line(tmp_path, bad_line):
    """Only a torn last line may be dropped: an unreadable whole line (a damaged file, a
    record of another version) raises, naming it, and no finished piece is deleted."""
    journal = _journal_of(tmp_path, 4)
    lines = journal.path.read_bytes().splitlines(keepends=True)
    lines.insert(bad_line - 1, b'{"key": "old-schema"}\n')
    journal.path.write_bytes(b"".join(lines))
    before = journal.path.read_bytes()
    with pytest.raises(DataError, match=rf"pieces.jsonl: line {bad_line} of 5 is not"):
        journal.read()
    assert journal.path.read_bytes() == before
    with pytest.raises(DataError, match="not a finished piece's record"):
        Journal(tmp_path).read()  # and again: nothing was cut


def test_a_torn_last_journal_line_is_dropped_and_the_rest_kept(tmp_path):
    journal = _journal_of(tmp_path, 3)
    whole = journal.path.read_bytes()
    journal.path.write_bytes(whole + b'{"key": "piece-3", "ki')
    assert list(journal.read()) == ["piece-0", "piece-1", "piece-2"]
    assert journal.path.read_bytes() == whole
