"""Pipeline files, `elmscale run` on real Dask and Ray clusters, and `elmscale score`."""

import contextlib
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
from _background import Background
from _background import stop_process as _stop

from elmscale import ELMClassifier, save
from elmscale.app.cli import main
from elmscale.app.pipeline import load_pipeline
from elmscale.app.runner import resolve_compute
from elmscale.data import generate_classification, write_parquet
from elmscale.data.synthetic import GENERATED_MARKER

BIN = Path(sys.executable).parent
CLEAN_ENV = {
    k: v for k, v in os.environ.items() if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS")
}


def _free_port() -> int:
    """A port free now: another process may take it before ours binds it (callers retry)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _closed_port():
    """A port bound and never listened on: connections are refused, and nobody else can
    take it while the block runs."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


def _elmscale(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "elmscale", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or CLEAN_ENV,
    )


def _start_elmscale(*args, logs: Path, env=None) -> Background:
    """``_elmscale``, started in the background: a command that waits on others (a run's
    Ray or Dask starting, a head's start-up) leaves a core to a command beside it."""
    return Background([sys.executable, "-m", "elmscale", *args], logs=logs, env=env or CLEAN_ENV)


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


@pytest.mark.timeout(900)
def test_run_against_a_real_dask_scheduler_equals_the_local_run(tmp_path):
    # the local run (its own local cluster) runs while the scheduler and workers start; it
    # generates the data, which the remote run reads once it is all written
    local = _start_elmscale("run", _write(tmp_path, ELM_PIPELINE, "local"), logs=tmp_path / "l")
    try:
        address = _run_against_a_scheduler(tmp_path, lambda: _generated(tmp_path, local))
        done = local.result()
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        local.stop()
    ours, theirs = _metrics(tmp_path / "runs", "local"), _metrics(tmp_path / "runs", "remote")
    assert _results(ours) == _results(theirs)
    assert ours["compute"]["dask"] == "local cluster"
    assert theirs["compute"]["dask"] == address
    assert ours["test"]["accuracy"] > 0.85 and ours["scored"]["rows"] == 6000
    run_dir = sorted((tmp_path / "runs").glob("remote-*"))[-1]
    for name in (
        "pipeline.json",
        "metrics.json",
        "model.elm",
        "cv_results.csv",
        "cv_results.json",
        "run.log",
        "scores/part-00000.parquet",
    ):
        assert (run_dir / name).is_file(), name


def _generated(tmp_path: Path, run: Background, timeout=300) -> None:
    """Wait until ``run`` has written ELM_PIPELINE's generated data (each folder's marker is
    written last), or fail if it ends first without it."""
    markers = [tmp_path / folder / GENERATED_MARKER for folder in ("train", "test")]
    deadline = time.monotonic() + timeout
    while not all(marker.exists() for marker in markers):
        if run.process.poll() is not None:
            done = run.result()
            pytest.fail(
                f"the local run ended (exit {done.returncode}) before writing its data:\n"
                + done.stderr[-3000:]
            )
        assert time.monotonic() < deadline, f"no generated data after {timeout} s"
        time.sleep(0.2)


def _run_against_a_scheduler(tmp_path, data_ready) -> str:
    """``elmscale run`` of ELM_PIPELINE as "remote" against a real scheduler and two workers
    (processes of their own), once ``data_ready()`` returns; stopped afterwards; the
    scheduler's address."""
    # the scheduler picks its own port and names it in its file: no port to race for
    scheduler_file = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen(
        [
            BIN / "dask",
            "scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--scheduler-file",
            scheduler_file,
            "--dashboard-address",
            ":0",
        ],
        env=CLEAN_ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers = subprocess.Popen(
        [
            BIN / "dask",
            "worker",
            "--scheduler-file",
            scheduler_file,
            "--nworkers",
            "2",
            "--nthreads",
            "1",
            "--dashboard-address",
            ":0",
        ],
        env=CLEAN_ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        from elmscale.distributed.connect import connect_dask

        with connect_dask(scheduler_file=scheduler_file, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
            address = client.scheduler.address
        data_ready()
        remote = _elmscale(
            "run", _write(tmp_path, ELM_PIPELINE, "remote"), "--scheduler", address, timeout=300
        )
        assert remote.returncode == 0, remote.stderr[-3000:]
    finally:
        _stop(workers)
        _stop(scheduler)
    return address


RAY_AGENT_PORTS = (
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
    "runtime-env-agent-port",
    "metrics-export-port",
    "ray-client-server-port",
)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10):
            return True
    except OSError:
        return False


def _ray_job_server_answers(url: str, env: dict) -> bool:
    try:
        probe = subprocess.run(
            [BIN / "ray", "job", "list", "--address", url], capture_output=True, env=env, timeout=60
        )
    except subprocess.TimeoutExpired:
        return False
    return probe.returncode == 0


def _start_ray_head(env: dict, logs: Path, attempts=3, wait=120):
    """``ray start --head --block`` on ports picked now; returns ``(process, GCS address,
    job server URL)`` once the GCS accepts connections and the job server answers.

    A port picked free may be taken before Ray binds it: a head that exits, or is not up
    within ``wait`` s, is stopped and started again on new ports."""
    failures = []
    for attempt in range(1, attempts + 1):
        port, dashboard = _free_port(), _free_port()
        # own ports for every agent: the test session's Ray may hold the default ones
        agent_ports = [f"--{name}={_free_port()}" for name in RAY_AGENT_PORTS]
        log = logs / f"ray-head-{attempt}.log"
        with open(log, "wb") as out:
            head = subprocess.Popen(
                [
                    BIN / "ray",
                    "start",
                    "--head",
                    "--block",
                    "--port",
                    str(port),
                    "--num-cpus",
                    "2",
                    "--dashboard-host",
                    "127.0.0.1",
                    "--dashboard-port",
                    str(dashboard),
                    "--include-dashboard",
                    "true",
                    *agent_ports,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        url = f"http://127.0.0.1:{dashboard}"
        deadline = time.monotonic() + wait
        while head.poll() is None and time.monotonic() < deadline:
            started = "Ray runtime started" in log.read_text(errors="replace")
            if started and _accepts(port) and _ray_job_server_answers(url, env):
                return head, f"127.0.0.1:{port}", url
            time.sleep(1)
        state = (
            f"exited with {head.returncode}"
            if head.poll() is not None
            else f"not up after {wait} s"
        )
        _stop(head, group=True)
        failures.append(
            f"attempt {attempt}, port {port}: {state}; its output ends:\n"
            + log.read_text(errors="replace")[-1500:]
        )
    pytest.fail("the Ray head did not start:\n" + "\n".join(failures))


@pytest.mark.timeout(1200)
def test_run_against_a_ray_head_and_as_a_ray_job_equals_the_local_run(tmp_path):
    train = generate_classification(1500, n_features=5, n_classes=3, random_state=8)
    test = generate_classification(500, n_features=5, n_classes=3, random_state=9)
    write_parquet(train, tmp_path / "sparse_train.parquet")
    write_parquet(test, tmp_path / "sparse_test.parquet")
    # the three runs are independent: the local one (its own local Ray) runs while the head
    # starts, the connected one while the job runs (each run's Ray work is its own job)
    local = _start_elmscale("run", _write(tmp_path, SPARSE_PIPELINE, "local"), logs=tmp_path / "l")
    connected = None
    # Ray >= 2.59 authenticates clients of a `ray start` cluster: one token for all
    env = {**CLEAN_ENV, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": os.urandom(16).hex()}
    try:
        head, address, job_server = _start_ray_head(env, tmp_path)
        try:
            connected = _start_elmscale(
                "run",
                _write(tmp_path, SPARSE_PIPELINE, "connected"),
                "--ray-address",
                address,
                env=env,
                logs=tmp_path / "c",
            )
            job_pipeline = _write(tmp_path, SPARSE_PIPELINE, "job")
            deadline = time.monotonic() + 120
            while True:  # the job server can answer before its agent is up: wait for it
                job = subprocess.run(
                    [
                        BIN / "ray",
                        "job",
                        "submit",
                        "--address",
                        job_server,
                        "--",
                        sys.executable,
                        "-m",
                        "elmscale",
                        "run",
                        job_pipeline,
                    ],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    env=env,
                )
                if (
                    job.returncode == 0
                    or "No available agent" not in job.stdout + job.stderr
                    or time.monotonic() > deadline
                ):
                    break
                time.sleep(2)
            assert job.returncode == 0, (job.stdout + job.stderr)[-3000:]
            done = connected.result()
            assert done.returncode == 0, done.stderr[-3000:]
        finally:
            _stop(head, group=True, timeout=120)
        done = local.result()
        assert done.returncode == 0, done.stderr[-3000:]
    finally:
        for started in (local, connected):
            if started is not None:
                started.stop()
    results = {name: _metrics(tmp_path / "runs", name) for name in ("local", "connected", "job")}
    assert _results(results["local"]) == _results(results["connected"]) == _results(results["job"])
    assert results["connected"]["compute"]["ray"] == address
    assert results["job"]["compute"]["ray"] not in ("local Ray", "in process")
    assert results["local"]["test"]["accuracy"] > 0.6


@pytest.fixture(scope="module")
def scoring_setup(tmp_path_factory):
    """A fitted model, its model file and 12 Parquet files of 60,000 rows to score, made
    once for the module's four scoring tests: they only read them (each writes its outputs
    under its own tmp_path)."""
    tmp_path = tmp_path_factory.mktemp("scoring")
    train = generate_classification(3000, n_features=6, random_state=1)
    model = ELMClassifier(n_hidden=60, random_state=0).fit(train.X, train.y)
    model_path = save(
        model, tmp_path / "model.elm", features=[f"f{j + 1}" for j in range(6)], label="label"
    )
    inputs = tmp_path / "inputs"
    for i in range(12):
        rows = generate_classification(60_000, n_features=6, random_state=100 + i)
        table = pa.table(
            {
                "id": np.arange(60_000) + i * 60_000,
                **{f"f{j + 1}": rows.X[:, j].astype(np.float32) for j in range(6)},
            }
        )
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
        np.testing.assert_array_equal(
            scored.column("id").to_numpy(), source.column("id").to_numpy()
        )
        np.testing.assert_array_equal(scored.column("prediction").to_numpy(), model.predict(X))
    return len(done)


def test_an_interrupted_score_resumes_without_partial_or_duplicate_files(scoring_setup, tmp_path):
    model, model_path, inputs = scoring_setup
    outputs = tmp_path / "outputs"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "elmscale",
            "score",
            model_path,
            inputs,
            outputs,
            "--id",
            "id",
            "--batch-rows",
            "5000",
            "--quiet",
        ],
        env=CLEAN_ENV,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(outputs.glob("*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.005)
    finally:
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
    assert (
        main(
            [
                "score",
                str(model_path),
                str(tmp_path / "small.csv"),
                str(tmp_path / "small_scores.csv"),
                "--id",
                "id",
                "--decision",
                "--quiet",
            ]
        )
        == 0
    )
    scored = pacsv.read_csv(tmp_path / "small_scores.csv")
    X = np.column_stack([source.column(f"f{j + 1}").to_numpy() for j in range(6)])
    np.testing.assert_allclose(
        scored.column("decision").to_numpy(), model.decision_function(X), rtol=1e-6, atol=1e-9
    )
    jobs = plan_jobs(
        model,
        inputs,
        tmp_path / "on_dask",
        id_columns=["id"],
        features=[f"f{j + 1}" for j in range(6)],
    )
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
    assert (
        main(["run", str(misspelt), "--set", "model.estimater=x", "--set", "search.folds=1"]) == 2
    )
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
    assert (
        main(
            [
                "score",
                str(tmp_path / "other.elm"),
                str(inputs / "part-00.parquet"),
                str(tmp_path / "o3.parquet"),
                "--id",
                "id",
            ]
        )
        == 1
    )
    assert "the model expects 3 features" in capsys.readouterr().err
    assert (
        main(
            [
                "score",
                str(model_path),
                str(tmp_path / "absent.parquet"),
                str(tmp_path / "o4.parquet"),
            ]
        )
        == 2
    )
    assert not list(tmp_path.glob("o*.parquet")) and not list(tmp_path.glob(".o*"))


def test_compute_precedence_flag_environment_file_local(tmp_path, monkeypatch):
    path = tmp_path / "p.toml"
    path.write_text(
        ELM_PIPELINE.format(d=tmp_path, name="p")
        + '[compute]\nscheduler = "tcp://file:1"\nray_address = "file:2"\n'
    )
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


PIPELINES = sorted(Path(__file__).resolve().parents[1].glob("pipelines/*.toml"))


@pytest.mark.parametrize("path", PIPELINES, ids=lambda p: p.name)
def test_example_pipelines_validate(path, capsys, monkeypatch):
    """Every example pipeline passes the checks, offline; paths are relative to the project
    folder.  Those of real data name registered public URLs (``elmscale.data.public_data``),
    which need no network to check (a run downloads them into the cache:
    tests/test_public_data.py runs them through a local mirror)."""
    monkeypatch.chdir(path.parents[1])
    assert "../shared/" not in path.read_text()
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


def test_score_files_as_ray_tasks(scoring_setup, tmp_path, ray_session):
    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    model, _, inputs = scoring_setup
    jobs = plan_jobs(
        model,
        inputs,
        tmp_path / "on_ray",
        id_columns=["id"],
        features=[f"f{j + 1}" for j in range(6)],
    )
    summary = score_jobs(model, jobs[:2], ray_address="auto")
    assert summary == {**summary, "files": 2, "scored": 2, "rows": 120_000}
    assert _check_outputs(model, inputs, tmp_path / "on_ray", expect_all=False) == 2


# -- a scheduler or Ray head that is not there: a clear error within seconds, never a hang --

DEAD_PIPELINE = """
[run]
name = "{name}"
task = "train"
seed = 1
[data]
train = "{d}/small.parquet"
[model]
estimator = "{estimator}"
params = {params}
[output]
dir = "{d}/runs"
"""


def _dead_pipeline(tmp_path: Path, estimator: str, params: str) -> Path:
    path = tmp_path / f"{estimator}.toml"
    path.write_text(
        DEAD_PIPELINE.format(d=tmp_path, name=estimator, estimator=estimator, params=params)
    )
    return path


def test_dead_scheduler_or_ray_address_fails_within_seconds_naming_it(tmp_path):
    """``run`` with a Ray head or a Dask scheduler, and ``score`` with a scheduler or a Ray
    Client server, that nobody runs: exit 1 within seconds (the connect timeout is 10 s),
    the address in the message.  The four run side by side.

    "Within seconds" is measured against a reference started beside them, a process that
    imports what they import (elmscale's command line, Dask, Ray) and exits: on busy cores
    their start-up stretches as its does (68 s at a load average of 20 on 2 cores, issue
    49), while a connect that hangs past its timeout still fails the test."""
    data = generate_classification(300, n_features=4, random_state=2)
    write_parquet(data, tmp_path / "small.parquet")
    on_dask = _dead_pipeline(tmp_path, "ELMClassifier", "{ n_hidden = 10 }")  # data plane
    on_ray = _dead_pipeline(tmp_path, "SparseELMClassifier", '{ kernel = "gaussian" }')
    model = ELMClassifier(n_hidden=10, random_state=0).fit(data.X, data.y)
    model_path = save(model, tmp_path / "model.elm", features=[f"f{j + 1}" for j in range(4)])
    pq.write_table(
        pa.table({f"f{j + 1}": data.X[:, j] for j in range(4)}), tmp_path / "input.parquet"
    )
    with contextlib.ExitStack() as stack:
        p1, p2, p3, p4 = (stack.enter_context(_closed_port()) for _ in range(4))
        cases = {
            f"127.0.0.1:{p1}": ["run", on_ray, "--ray-address", f"127.0.0.1:{p1}"],
            f"tcp://127.0.0.1:{p2}": ["run", on_dask, "--scheduler", f"tcp://127.0.0.1:{p2}"],
            f"tcp://127.0.0.1:{p3}": [
                "score",
                model_path,
                tmp_path / "input.parquet",
                tmp_path / "out3.parquet",
                "--scheduler",
                f"tcp://127.0.0.1:{p3}",
            ],
            f"ray://127.0.0.1:{p4}": [
                "score",
                model_path,
                tmp_path / "input.parquet",
                tmp_path / "out4.parquet",
                "--ray-address",
                f"ray://127.0.0.1:{p4}",
            ],
        }
        reference = "import elmscale.app.cli, distributed, ray"
        start = time.monotonic()
        running = {
            address: subprocess.Popen(
                [sys.executable, "-m", "elmscale", *map(str, argv)],
                env=CLEAN_ENV,
                stdout=subprocess.DEVNULL,
                stderr=stack.enter_context(open(tmp_path / f"err{i}", "w")),
            )
            for i, (address, argv) in enumerate(cases.items())
        }
        running["reference"] = subprocess.Popen([sys.executable, "-c", reference], env=CLEAN_ENV)
        seconds = {}
        try:  # until every one has exited: the test's own timeout bounds a hang
            while len(seconds) < len(running):
                for address, process in running.items():
                    if address not in seconds and process.poll() is not None:
                        seconds[address] = time.monotonic() - start
                time.sleep(0.1)
        finally:
            for process in running.values():
                if process.poll() is None:
                    process.kill()
                process.wait(30)
    start_up = seconds.pop("reference")
    assert running.pop("reference").returncode == 0
    print(f"reference start-up: {start_up:.1f} s")
    # the connect timeout (10 s) plus its retries' and the error path's own seconds
    allowed = start_up + 30
    for i, (address, process) in enumerate(running.items()):
        err = (tmp_path / f"err{i}").read_text()
        print(f"{address}: exit {process.returncode} after {seconds[address]:.1f} s")
        assert process.returncode == 1, (address, err[-2000:])
        assert address in err and "elmscale: error: " in err, (address, err[-2000:])
        assert "Traceback" not in err, (address, err[-2000:])
        assert seconds[address] < allowed, (address, seconds[address], start_up)
    assert not list(tmp_path.glob("out*.parquet"))


def test_connect_fails_fast_with_the_address(tmp_path, monkeypatch):
    """The connect functions themselves: an unreachable address, 'auto' with no cluster or
    a stale one, a scheduler file that is not there; Ray is never initialised."""
    import ray
    import ray._private.services as services

    from elmscale.distributed import connect

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda *a, **k: pytest.fail("ray.init was called"))
    with _closed_port() as port:
        start = time.monotonic()
        with pytest.raises(ConnectionError, match=f"Ray cluster at 127.0.0.1:{port}:"):
            connect.connect_ray(f"127.0.0.1:{port}", timeout=1)
        with pytest.raises(ConnectionError, match=f"ray://127.0.0.1:{port}"):
            connect.connect_ray(f"ray://127.0.0.1:{port}", timeout=1)
        monkeypatch.setattr(
            services, "get_ray_address_from_environment", lambda addr, temp_dir: f"127.0.0.1:{port}"
        )
        with pytest.raises(ConnectionError, match=f"found by 'auto' at 127.0.0.1:{port}"):
            connect.connect_ray("auto", timeout=1)
        with pytest.raises(ConnectionError, match=f"Dask scheduler at tcp://127.0.0.1:{port}"):
            connect.connect_dask(f"tcp://127.0.0.1:{port}", timeout=1)
        assert time.monotonic() - start < 30

    def nothing_running(addr, temp_dir):
        raise ConnectionError("Could not find any running Ray instance.")

    monkeypatch.setattr(services, "get_ray_address_from_environment", nothing_running)
    with pytest.raises(ConnectionError, match="at auto: no running Ray found"):
        connect.connect_ray("auto", timeout=1)
    with pytest.raises(ConnectionError, match=r"scheduler file .*absent\.json does not exist"):
        connect.connect_dask(scheduler_file=tmp_path / "absent.json", timeout=0.5)
    with pytest.raises(ValueError, match="expected 'auto', 'local'"):
        connect.connect_ray("nohost", timeout=1)


def test_the_connect_module_imports_neither_dask_nor_ray():
    code = (
        "import sys, elmscale.distributed.connect; "
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed', "
        "'ray'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"
