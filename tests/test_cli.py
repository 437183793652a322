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


def test_run_resolves_its_compute_target_and_tls_once(tmp_path, monkeypatch, capsys):
    """``elmscale run`` resolves the target and builds the TLS security once, in the
    command line (a bad TLS file refused before anything runs), and the run connects with
    that security: it resolved and built them again where the client connected."""
    from elmscale.app import runner
    from elmscale.app.pipeline import load_pipeline
    from elmscale.distributed import connect

    pipeline = tmp_path / "run.toml"
    pipeline.write_text(
        f"""
[run]
name = "once"
task = "train"
[data]
train = "{tmp_path}/train.parquet"
generate = {{ rows = 100, features = 4 }}
[model]
estimator = "ELMClassifier"
[output]
dir = "{tmp_path}/runs"
"""
    )
    for name in ("ca.pem", "cert.pem"):
        (tmp_path / name).write_text("not read here\n")
    resolved, built, connected = [], [], []
    resolve_compute, sentinel = runner.resolve_compute, object()

    def counting_resolve(*args, **kwargs):
        resolved.append(resolve_compute(*args, **kwargs))
        return resolved[-1]

    monkeypatch.setattr(runner, "resolve_compute", counting_resolve)
    monkeypatch.setattr(connect, "tls_security", lambda **files: built.append(files) or sentinel)
    argv = ["run", str(pipeline), "--scheduler", "tls://127.0.0.1:8786", "--dry-run"]
    argv += ["--tls-ca-file", str(tmp_path / "ca.pem"), "--tls-cert", str(tmp_path / "cert.pem")]
    assert main(argv) == 0, capsys.readouterr().err
    assert len(resolved) == 1 and len(built) == 1, (resolved, built)
    target = resolved[0]
    assert target["dask_address"] == "tls://127.0.0.1:8786" and target["security"] is sentinel
    assert '"dask": "tls://127.0.0.1:8786"' in capsys.readouterr().out  # the plan printed

    # the run's client: the target's security, not a second one
    monkeypatch.setattr(connect, "connect_dask", lambda address, **kw: connected.append(kw))
    runner.Compute(target, 1, 1).dask()
    assert connected == [{"security": sentinel}] and len(built) == 1

    # a resolved target or the flags, not both
    with pytest.raises(TypeError, match="not both"):
        runner.run_pipeline(
            load_pipeline(pipeline),
            target=target,
            scheduler="tcp://127.0.0.1:8786",
            dry_run=True,
        )


# -- --storage-option (issue 51): the flags alone reach a store -------------------------------

#: a key and secret that no output, log, run file or model file may show
_KEY_ID, _SECRET = "cli-flag-key-id-2718", "cli-flag-secret-3141-do-not-show"


def _cli_without_aws_env(*args):
    """``elmscale *args`` in a fresh process with no AWS variable in its environment (no
    credentials, endpoint or profile: what reaches the store is the flags) and no AWS
    credential or config file to find."""
    import os
    import tempfile

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    empty = tempfile.mkdtemp(prefix="elmscale-no-aws-")
    env["AWS_SHARED_CREDENTIALS_FILE"] = env["AWS_CONFIG_FILE"] = f"{empty}/none"
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = "1"
    return subprocess.run(
        [sys.executable, "-m", "elmscale", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )


def _in_two_lanes(*lanes):
    """``_cli_without_aws_env`` of each command of ``lanes`` (tuples of argument tuples):
    a lane's commands one after another, two lanes at a time.  Each command spends most of
    its time starting (importing scikit-learn, Dask, s3fs) and waiting on the store, so two
    side by side take about the time of one on a 2-core host.  Returns the finished
    commands, lane after lane."""
    from concurrent.futures import ThreadPoolExecutor

    def run_lane(lane):
        return [_cli_without_aws_env(*args) for args in lane]

    with ThreadPoolExecutor(2) as pool:
        return [done for finished in pool.map(run_lane, lanes) for done in finished]


def test_storage_option_flags_parse_as_fsspec_options(capsys):
    from elmscale.app.cli import UsageError, _storage_flags

    flags = [
        "key=12345",  # a secret stays the string typed
        "anon=false",
        "client_kwargs.endpoint_url=http://127.0.0.1:9000",
        'client_kwargs={"region_name": "eu-west-1"}',
        "default_block_size=1048576",
        "profile=dev",
    ]
    assert _storage_flags(flags) == {
        "key": "12345",
        "anon": False,
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "region_name": "eu-west-1"},
        "default_block_size": 1048576,
        "profile": "dev",
    }
    for bad in ("a-secret-without-a-key", "=value", "client_kwargs..x=1"):
        with pytest.raises(UsageError) as error:
            _storage_flags([bad])
        assert bad not in str(error.value) and "KEY=VALUE" in str(error.value)
    assert main(["info", "--storage-option", "just-a-secret-9"]) == 2
    assert "just-a-secret-9" not in capsys.readouterr().err


@pytest.mark.timeout(600)
def test_storage_option_flags_alone_reach_the_bucket(s3_server, tmp_path):
    """``elmscale run``, ``score``, ``export``, ``info``, ``train`` and ``predict`` against
    the local S3 server with no AWS variable or file: ``--storage-option`` gives the
    endpoint, key and secret; the secret is in no output, log, run file or model file, and
    in no error of a store that refuses it."""
    pytest.importorskip("onnx")
    from elmscale.data import generate_classification, write_parquet

    bucket = s3_server.new_bucket()
    flags = [
        "--storage-option",
        f"key={_KEY_ID}",
        "--storage-option",
        f"secret={_SECRET}",
        "--storage-option",
        f"client_kwargs.endpoint_url={s3_server.endpoint}",
    ]
    options = {"key": _KEY_ID, "secret": _SECRET}
    options["client_kwargs"] = {"endpoint_url": s3_server.endpoint}
    data = generate_classification(600, n_features=4, random_state=0)
    write_parquet(data.X, f"s3://{bucket}/train.parquet", y=data.y, storage_options=options)
    write_parquet(data.X[:50], f"s3://{bucket}/score/part-0.parquet", storage_options=options)
    pipeline = tmp_path / "run.toml"
    pipeline.write_text(
        f"""
[run]
name = "flags"
task = "train"
[data]
train = "s3://{bucket}/train.parquet"
score = "s3://{bucket}/score/"
label = "label"
[model]
estimator = "ELMClassifier"
params = {{ n_hidden = 20 }}
[compute]
workers = 1
[output]
dir = "s3://{bucket}/runs"
"""
    )

    def succeeded(*finished):
        for done in finished:
            assert done.returncode == 0, f"{done.args[3:5]}: {done.stderr[-3000:]}"

    # without the flags the store is not reached (no credentials, no endpoint); with them
    # the same file validates, and runs (beside the two)
    bare, validated, ran = _in_two_lanes(
        [("validate", pipeline), ("validate", pipeline, *flags)], [("run", pipeline, *flags)]
    )
    assert bare.returncode == 2, bare.stdout + bare.stderr
    succeeded(validated, ran)
    assert "scored 50 rows in 1 file(s)" in ran.stdout, ran.stdout
    fs = s3_server.filesystem()
    fs.invalidate_cache()
    (run_dir,) = fs.ls(f"{bucket}/runs")
    model = f"s3://{run_dir}/model.elm"
    model_2, predictions = f"s3://{bucket}/m2.elm", tmp_path / "p.csv"
    later = _in_two_lanes(
        [
            ("score", model, f"s3://{bucket}/score/", f"s3://{bucket}/scored/", "--quiet", *flags),
            ("export", model, f"s3://{bucket}/model.onnx", *flags),
            ("info", model, *flags),
        ],
        [
            ("train", f"s3://{bucket}/train.parquet", model_2, "--label", "label", *flags),
            ("predict", model_2, f"s3://{bucket}/train.parquet", predictions, *flags),
        ],
    )
    succeeded(*later)
    assert "ELMClassifier" in later[2].stdout  # info
    outputs = [bare, validated, ran, *later]
    fs.invalidate_cache()
    assert fs.exists(f"{bucket}/model.onnx") and fs.exists(f"{bucket}/scored/part-0.parquet")

    # a store that refuses the key: an error naming the URL, without the secret
    s3_server.set_auth(True)
    try:
        refused = _cli_without_aws_env("info", model, *flags)
    finally:
        s3_server.set_auth(False)
    assert refused.returncode in (1, 2) and model in refused.stderr, refused.stderr[-2000:]
    outputs.append(refused)

    for done in outputs:
        assert _SECRET not in done.stdout + done.stderr
    # nor in the run's files (run.log, pipeline.json, metrics.json, the model file) or the
    # other files written
    fs.invalidate_cache()
    for path in fs.find(bucket):
        assert _SECRET.encode() not in fs.cat_file(path), path
    assert _SECRET not in (tmp_path / "p.csv").read_text()
