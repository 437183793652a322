"""Pipeline files, `elmscale run` on real Dask and Ray clusters, and `elmscale score`."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elmscale import ELMClassifier, save
from elmscale.app.cli import main
from elmscale.app.pipeline import load_pipeline
from elmscale.app.runner import resolve_compute
from elmscale.data import generate_classification, write_parquet

BIN = Path(sys.executable).parent
CLEAN_ENV = {k: v for k, v in os.environ.items()
             if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _elmscale(*args, env=None, timeout=600):
    return subprocess.run([sys.executable, "-m", "elmscale", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env=env or CLEAN_ENV)


def _metrics(run_dir_parent: Path, name: str) -> dict:
    runs = sorted(run_dir_parent.glob(f"{name}-*"))
    assert runs, f"no run directory under {run_dir_parent}"
    return json.loads((runs[-1] / "metrics.json").read_text())


def _results(metrics: dict) -> dict:
    return {k: metrics[k] for k in ("cv", "test", "scored", "train_rows") if k in metrics}


ELM_PIPELINE = """
[run]
name = "{name}"
task = "cv"
seed = 3
[data]
train = "{d}/train"
test = "{d}/test"
score = "{d}/test"
label = "label"
generate = {{ rows = 40000, test_rows = 6000, features = 8 }}
[model]
estimator = "ELMClassifier"
params = {{ hidden = "sigmoid", n_hidden = 80 }}
[search]
grid = {{ C = [0.1, 10, 1000] }}
folds = 3
[output]
dir = "{d}/runs"
"""

SPARSE_PIPELINE = """
[run]
name = "{name}"
task = "cv"
seed = 1
[data]
train = "{d}/sparse_train.parquet"
test = "{d}/sparse_test.parquet"
[model]
estimator = "SparseELMClassifier"
params = {{ kernel = "gaussian" }}
[search]
grid = {{ C = [1, 10], sigma = [0.5, 2] }}
folds = 3
[output]
dir = "{d}/runs"
"""


def _write(tmp_path: Path, text: str, name: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text.format(d=tmp_path, name=name))
    return path


def test_run_against_a_real_dask_scheduler_equals_the_local_run(tmp_path):
    local = _elmscale("run", _write(tmp_path, ELM_PIPELINE, "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    port = _free_port()
    scheduler = subprocess.Popen([BIN / "dask", "scheduler", "--port", str(port),
                                  "--dashboard-address", ":0"], env=CLEAN_ENV,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    workers = subprocess.Popen([BIN / "dask", "worker", f"tcp://127.0.0.1:{port}",
                                "--nworkers", "2", "--nthreads", "1", "--dashboard-address",
                                ":0"], env=CLEAN_ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        from distributed import Client

        with Client(f"tcp://127.0.0.1:{port}", timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        remote = _elmscale("run", _write(tmp_path, ELM_PIPELINE, "remote"), "--scheduler",
                           f"tcp://127.0.0.1:{port}")
        assert remote.returncode == 0, remote.stderr[-3000:]
    finally:
        workers.terminate()
        scheduler.terminate()
        workers.wait(60)
        scheduler.wait(60)
    ours, theirs = _metrics(tmp_path / "runs", "local"), _metrics(tmp_path / "runs", "remote")
    assert _results(ours) == _results(theirs)
    assert ours["compute"]["dask"] == "local cluster"
    assert theirs["compute"]["dask"] == f"tcp://127.0.0.1:{port}"
    assert ours["test"]["accuracy"] > 0.85 and ours["scored"]["rows"] == 6000
    run_dir = sorted((tmp_path / "runs").glob("remote-*"))[-1]
    for name in ("pipeline.json", "metrics.json", "model.elm", "cv_results.csv",
                 "cv_results.json", "run.log", "scores/part-00000.parquet"):
        assert (run_dir / name).is_file(), name


def test_run_against_a_ray_head_and_as_a_ray_job_equals_the_local_run(tmp_path):
    train = generate_classification(1500, n_features=5, n_classes=3, random_state=8)
    test = generate_classification(500, n_features=5, n_classes=3, random_state=9)
    write_parquet(train, tmp_path / "sparse_train.parquet")
    write_parquet(test, tmp_path / "sparse_test.parquet")
    local = _elmscale("run", _write(tmp_path, SPARSE_PIPELINE, "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    port, dashboard = _free_port(), _free_port()
    # Ray >= 2.59 authenticates clients of a `ray start` cluster: one token for all
    env = {**CLEAN_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    # own ports for every agent: the test session's Ray may hold the default ones
    agent_ports = [f"--{name}={_free_port()}" for name in (
        "dashboard-agent-listen-port", "dashboard-agent-grpc-port", "runtime-env-agent-port",
        "metrics-export-port", "ray-client-server-port")]
    head = subprocess.Popen([BIN / "ray", "start", "--head", "--block", "--port", str(port),
                             "--num-cpus", "2", "--dashboard-host", "127.0.0.1",
                             "--dashboard-port", str(dashboard), "--include-dashboard",
                             "true", *agent_ports], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        address = f"127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:  # the job server answers once the dashboard is up
            probe = subprocess.run([BIN / "ray", "job", "list", "--address",
                                    f"http://127.0.0.1:{dashboard}"], capture_output=True,
                                   env=env)
            if probe.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(1)
        connected = _elmscale("run", _write(tmp_path, SPARSE_PIPELINE, "connected"),
                              "--ray-address", address, env=env)
        assert connected.returncode == 0, connected.stderr[-3000:]
        job_pipeline = _write(tmp_path, SPARSE_PIPELINE, "job")
        deadline = time.monotonic() + 120
        while True:  # the job server can answer before its agent is up: wait for it
            job = subprocess.run([BIN / "ray", "job", "submit", "--address",
                                  f"http://127.0.0.1:{dashboard}", "--", sys.executable, "-m",
                                  "elmscale", "run", job_pipeline],
                                 capture_output=True, text=True, timeout=600, env=env)
            if (job.returncode == 0 or "No available agent" not in job.stdout + job.stderr
                    or time.monotonic() > deadline):
                break
            time.sleep(2)
        assert job.returncode == 0, (job.stdout + job.stderr)[-3000:]
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(120)
    results = {name: _metrics(tmp_path / "runs", name) for name in ("local", "connected", "job")}
    assert _results(results["local"]) == _results(results["connected"]) == _results(results["job"])
    assert results["connected"]["compute"]["ray"] == address
    assert results["job"]["compute"]["ray"] not in ("local Ray", "in process")
    assert results["local"]["test"]["accuracy"] > 0.6


@pytest.fixture
def scoring_setup(tmp_path):
    train = generate_classification(3000, n_features=6, random_state=1)
    model = ELMClassifier(n_hidden=60, random_state=0).fit(train.X, train.y)
    model_path = save(model, tmp_path / "model.elm",
                      features=[f"f{j + 1}" for j in range(6)], label="label")
    inputs = tmp_path / "inputs"
    for i in range(12):
        rows = generate_classification(60_000, n_features=6, random_state=100 + i)
        table = pa.table({"id": np.arange(60_000) + i * 60_000,
                          **{f"f{j + 1}": rows.X[:, j].astype(np.float32) for j in range(6)}})
        inputs.mkdir(exist_ok=True)
        pq.write_table(table, inputs / f"part-{i:02d}.parquet", row_group_size=5_000)
    return model, model_path, inputs


def _check_outputs(model, inputs: Path, outputs: Path, expect_all=True):
    done = sorted(outputs.glob("*.parquet"))
    assert not list(outputs.glob(".*")), "temporary files left behind"
    if expect_all:
        assert [p.name for p in done] == sorted(p.name for p in inputs.glob("*.parquet"))
    for out in done:
        source = pq.read_table(inputs / out.name)
        scored = pq.read_table(out)
        X = np.column_stack([source.column(f"f{j + 1}").to_numpy() for j in range(6)])
        np.testing.assert_array_equal(scored.column("id").to_numpy(),
                                      source.column("id").to_numpy())
        np.testing.assert_array_equal(scored.column("prediction").to_numpy(), model.predict(X))
    return len(done)


def test_an_interrupted_score_resumes_without_partial_or_duplicate_files(scoring_setup, tmp_path):
    model, model_path, inputs = scoring_setup
    outputs = tmp_path / "outputs"
    process = subprocess.Popen([sys.executable, "-m", "elmscale", "score", model_path,
                                inputs, outputs, "--id", "id", "--batch-rows", "5000",
                                "--quiet"], env=CLEAN_ENV)
    deadline = time.monotonic() + 300
    while not list(outputs.glob("*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait(60)
    finished = len(list(outputs.glob("*.parquet")))
    assert 1 <= finished < 12, "the run was not interrupted midway"
    rerun = _elmscale("score", model_path, inputs, outputs, "--id", "id", "--quiet")
    assert rerun.returncode == 0, rerun.stderr
    assert f"({finished} already done)" in rerun.stdout
    assert _check_outputs(model, inputs, outputs) == 12


def test_score_with_decision_values_csv_and_a_dask_client(scoring_setup, tmp_path, dask_client):
    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    model, model_path, inputs = scoring_setup
    source = pq.read_table(inputs / "part-00.parquet").slice(0, 1000)
    import pyarrow.csv as pacsv

    pacsv.write_csv(source, tmp_path / "small.csv")
    assert main(["score", str(model_path), str(tmp_path / "small.csv"),
                 str(tmp_path / "small_scores.csv"), "--id", "id", "--decision",
                 "--quiet"]) == 0
    scored = pacsv.read_csv(tmp_path / "small_scores.csv")
    X = np.column_stack([source.column(f"f{j + 1}").to_numpy() for j in range(6)])
    np.testing.assert_allclose(scored.column("decision").to_numpy(),
                               model.decision_function(X), rtol=1e-6, atol=1e-9)
    jobs = plan_jobs(model, inputs, tmp_path / "on_dask", id_columns=["id"],
                     features=[f"f{j + 1}" for j in range(6)])
    summary = score_jobs(model, jobs[:3], client=dask_client)
    assert summary["rows"] == 180_000
    assert _check_outputs(model, inputs, tmp_path / "on_dask", expect_all=False) == 3


def test_bad_pipelines_are_usage_errors_and_write_nothing(tmp_path, capsys):
    text = ELM_PIPELINE.format(d=tmp_path, name="bad")
    misspelt = tmp_path / "misspelt.toml"
    misspelt.write_text(text.replace("estimator =", "estimater ="))
    assert main(["run", str(misspelt)]) == 2
    assert "unknown key model.estimater (did you mean 'estimator'?)" in capsys.readouterr().err
    missing = tmp_path / "missing.toml"
    missing.write_text(SPARSE_PIPELINE.format(d=tmp_path, name="missing"))
    assert main(["validate", str(missing)]) == 2
    assert "sparse_train.parquet: no such file or directory" in capsys.readouterr().err
    assert main(["run", str(misspelt), "--set", "model.estimater=x",
                 "--set", "search.folds=1"]) == 2
    assert "search.folds = 1; expected an integer >= 2" in capsys.readouterr().err
    bad_param = tmp_path / "bad_param.toml"
    bad_param.write_text(text.replace("n_hidden = 80", "n_hidden = -4"))
    assert main(["validate", str(bad_param)]) == 2
    assert "n_hidden" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "nope.toml")]) == 2
    assert not (tmp_path / "runs").exists() and not (tmp_path / "train").exists()
    good = tmp_path / "good.toml"
    good.write_text(text)
    assert main(["validate", str(good)]) == 0
    assert main(["run", str(good), "--dry-run", "--set", "search.folds=4"]) == 0
    assert '"folds": 4' in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()


def test_bad_scoring_inputs_are_named_and_write_nothing(scoring_setup, tmp_path, capsys):
    model, model_path, inputs = scoring_setup
    lacking = tmp_path / "lacking.parquet"
    pq.write_table(pq.read_table(inputs / "part-00.parquet").drop(["f3"]), lacking)
    assert main(["score", str(model_path), str(lacking), str(tmp_path / "o1.parquet")]) == 1
    assert "lacking.parquet: feature column 'f3' not found" in capsys.readouterr().err
    typed = tmp_path / "typed.parquet"
    table = pq.read_table(inputs / "part-00.parquet")
    table = table.set_column(2, "f2", pa.array(["x"] * table.num_rows))
    pq.write_table(table, typed)
    assert main(["score", str(model_path), str(typed), str(tmp_path / "o2.parquet")]) == 1
    assert "typed.parquet: feature column 'f2' has type string" in capsys.readouterr().err
    other = ELMClassifier(n_hidden=5).fit(np.zeros((4, 3)), [0, 1, 0, 1])
    save(other, tmp_path / "other.elm")
    assert main(["score", str(tmp_path / "other.elm"), str(inputs / "part-00.parquet"),
                 str(tmp_path / "o3.parquet"), "--id", "id"]) == 1
    assert "the model expects 3 features" in capsys.readouterr().err
    assert main(["score", str(model_path), str(tmp_path / "absent.parquet"),
                 str(tmp_path / "o4.parquet")]) == 2
    assert not list(tmp_path.glob("o*.parquet")) and not list(tmp_path.glob(".o*"))


def test_compute_precedence_flag_environment_file_local(tmp_path, monkeypatch):
    path = tmp_path / "p.toml"
    path.write_text(ELM_PIPELINE.format(d=tmp_path, name="p") +
                    '[compute]\nscheduler = "tcp://file:1"\nray_address = "file:2"\n')
    pipeline = load_pipeline(path)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resolve_compute(pipeline)["dask"] == "tcp://file:1"
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://env:1")
    monkeypatch.setenv("RAY_ADDRESS", "env:2")
    target = resolve_compute(pipeline)
    assert (target["dask"], target["ray"]) == ("tcp://env:1", "env:2")
    target = resolve_compute(pipeline, scheduler="tcp://flag:1", ray_address="flag:2")
    assert (target["dask"], target["ray"], target["local"]) == ("tcp://flag:1", "flag:2", False)
    monkeypatch.delenv("DASK_SCHEDULER_ADDRESS")
    monkeypatch.delenv("RAY_ADDRESS")
    path.write_text(ELM_PIPELINE.format(d=tmp_path, name="p"))
    assert resolve_compute(load_pipeline(path))["local"] is True


@pytest.mark.parametrize("path", sorted(Path(__file__).resolve().parents[1].glob("pipelines/*.toml")),
                         ids=lambda p: p.name)
def test_example_pipelines_validate(path, capsys, monkeypatch):
    """Every example pipeline passes the checks (the COD-RNA and satimage ones read
    ../shared/data, present in CI); paths are relative to the project folder."""
    from _datasets import shared_data

    monkeypatch.chdir(path.parents[1])
    if "shared/data" in path.read_text():
        shared_data()  # skips only where ../shared is absent
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


def test_score_files_as_ray_tasks(scoring_setup, tmp_path, ray_session):
    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    model, _, inputs = scoring_setup
    jobs = plan_jobs(model, inputs, tmp_path / "on_ray", id_columns=["id"],
                     features=[f"f{j + 1}" for j in range(6)])
    summary = score_jobs(model, jobs[:2], ray_address="auto")
    assert summary == {**summary, "files": 2, "scored": 2, "rows": 120_000}
    assert _check_outputs(model, inputs, tmp_path / "on_ray", expect_all=False) == 2
