"""Every path elmscale reads or writes, at an object store's URL (issue 51, the storage seam).

The store is a real S3 endpoint on 127.0.0.1 (moto's server, the ``s3_server`` fixture of
conftest.py), reached through s3fs and pyarrow with ``endpoint_url`` as a user's code
reaches S3: Parquet data sets and their work units (here and on a Dask cluster), the CSV,
LIBSVM and ARFF readers, model files, batch scoring (resumable), the command line and a
pipeline.  Bad input (wrong credentials, a missing bucket or key, an object that vanishes)
is an error naming the URL, never a secret, with nothing written.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from _s3 import run_elmscale

from elmscale import ELMClassifier, load, open_parquet, save
from elmscale.core.errors import DataError
from elmscale.data import generate_classification, write_parquet
from elmscale.data import load as load_data
from elmscale.data.storage import Store, locate, redact_options, scrub

ROOT = Path(__file__).resolve().parents[1]

# every test here has a limit: its own mark, else this one
pytestmark = pytest.mark.timeout(120)

#: A key and secret that no message, repr or file may show (moto accepts any credentials
#: while its IAM checks are off).
KEY_ID = "elmscale-test-key-id-4711"
SECRET = "elmscale-test-secret-0815-do-not-show"


def _options(server, *, key=KEY_ID, secret=SECRET) -> dict:
    return {"key": key, "secret": secret, "client_kwargs": {"endpoint_url": server.endpoint}}


def _write_parts(folder, data, n_parts: int = 3, **options) -> None:
    """The rows of ``data`` as ``n_parts`` Parquet files in ``folder`` (local or a URL),
    row groups of 1,000 rows."""
    bounds = np.linspace(0, data.n_samples, n_parts + 1).astype(int)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        part = f"{str(folder).rstrip('/')}/part-{i}.parquet"
        write_parquet(data.X[a:b], part, y=data.y[a:b], feature_names=data.feature_names, **options)


def _same_fitted_arrays(a, b) -> None:
    arrays = [  # (how long a pass took, gram_timings_, is not part of the model)
        k
        for k, v in vars(a).items()
        if k.endswith("_") and isinstance(v, np.ndarray) and "timings" not in k
    ]
    assert arrays
    for name in arrays:
        assert np.array_equal(getattr(a, name), getattr(b, name)), name


@pytest.fixture
def data_in_both(s3_server, tmp_path):
    """The same 6,000 rows as a local folder and as an s3:// prefix of a new bucket."""
    data = generate_classification(6_000, n_features=8, random_state=3)
    local = tmp_path / "train"
    local.mkdir()
    _write_parts(local, data)
    # write_parquet clips row groups to >= 131,072 rows: rewrite with 1,000-row groups so
    # that units are row groups of several files
    for part in sorted(local.glob("*.parquet")):
        table = pq.read_table(part)
        pq.write_table(table, part, row_group_size=1_000)
    bucket = s3_server.new_bucket()
    s3_server.filesystem().put(str(local) + "/", f"{bucket}/train/", recursive=True)
    return local, f"s3://{bucket}/train/", data


@pytest.mark.timeout(120)
def test_open_parquet_from_s3_gives_the_local_rows_units_and_model(s3_server, data_in_both):
    local, url, _ = data_in_both
    options = _options(s3_server)
    here, there = open_parquet(local), open_parquet(url, storage_options=options)
    assert there.n_rows == here.n_rows == 6_000
    assert there.row_groups == here.row_groups and len(there.row_groups) == 3
    assert there.features == here.features and there.label == here.label
    units_here, units_there = here.units(), there.units()
    assert len(units_there) == len(units_here) == 6
    assert [u.n_rows for u in units_there] == [u.n_rows for u in units_here]
    assert all(u.pieces[0][0].startswith(url) for u in units_there)
    X_here, y_here = here.read()
    X_there, y_there = there.read()
    assert np.array_equal(X_here, X_there) and np.array_equal(y_here, y_there)
    # fitted in this process from the store: the local folder's model to the bit
    model_here = ELMClassifier(n_hidden=40, random_state=0).fit(here)
    model_there = ELMClassifier(n_hidden=40, random_state=0).fit(there)
    _same_fitted_arrays(model_here, model_there)


@pytest.mark.timeout(240)
def test_a_dask_fit_reads_each_unit_on_its_worker_from_s3(s3_server, data_in_both, dask_client):
    local, url, data = data_in_both
    there = open_parquet(url, storage_options=_options(s3_server))
    # the workers were started before the store existed: all they have is the unit's store
    model_there = ELMClassifier(n_hidden=40, random_state=0).fit(there, client=dask_client)
    model_here = ELMClassifier(n_hidden=40, random_state=0).fit(
        open_parquet(local), client=dask_client
    )
    _same_fitted_arrays(model_here, model_there)
    assert model_there.score(data.X.astype(np.float32), data.y) > 0.7


@pytest.mark.timeout(60)
def test_work_units_are_small_and_never_show_the_secret(s3_server, data_in_both):
    _, url, _ = data_in_both
    dataset = open_parquet(url, storage_options=_options(s3_server))
    unit = dataset.units()[0]
    assert unit.store is not None and unit.store.options["secret"] == SECRET  # it travels
    assert len(pickle.dumps(unit)) < 1_000
    assert pickle.loads(pickle.dumps(unit)) == unit
    for shown in (repr(unit), repr(dataset), str(unit), repr(unit.store), repr(locate(url))):
        assert SECRET not in shown and KEY_ID not in shown, shown
    assert s3_server.endpoint in repr(unit.store)  # an endpoint is no secret


def test_secrets_are_redacted_at_any_depth_and_in_urls():
    options = {
        "key": "k1",
        "secret": "s1",
        "profile": "analytics",
        "client_kwargs": {"endpoint_url": "http://e", "aws_session_token": "t1"},
        "connection_string": "AccountKey=abc",
    }
    assert redact_options(options) == {
        "key": "***",
        "secret": "***",
        "profile": "analytics",
        "client_kwargs": {"endpoint_url": "http://e", "aws_session_token": "***"},
        "connection_string": "***",
    }
    assert repr(Store("s3", options)).count("***") == 4
    text = "failed for s1 with t1 at https://user:p4ss@host/x (key k1)"
    assert scrub(text, options) == "failed for *** with *** at https://user:***@host/x (key ***)"


@pytest.mark.timeout(60)
def test_load_csv_libsvm_and_arff_from_s3(s3_server, tmp_path):
    from sklearn.datasets import dump_svmlight_file

    data = generate_classification(300, n_features=4, random_state=1)
    csv = tmp_path / "train.csv"
    np.savetxt(csv, np.column_stack([data.X, data.y]), delimiter=",", fmt="%.6f")
    libsvm = tmp_path / "heart_scale"  # no suffix: the format is sniffed from the head
    dump_svmlight_file(data.X, data.y, str(libsvm), zero_based=False)
    arff = tmp_path / "train.arff"
    lines = ["@relation t"] + [f"@attribute f{j} numeric" for j in range(4)]
    lines += ["@attribute label {0,1}", "@data"]
    lines += [",".join([*(f"{v:.6f}" for v in row), str(int(c))]) for row, c in zip(data.X, data.y)]
    arff.write_text("\n".join(lines) + "\n")
    bucket = s3_server.new_bucket()
    fs = s3_server.filesystem()
    for file in (csv, libsvm, arff):
        fs.put_file(str(file), f"{bucket}/in/{file.name}")
    options = _options(s3_server)
    for file in (csv, libsvm, arff):
        url = f"s3://{bucket}/in/{file.name}"
        here, there = load_data(file), load_data(url, storage_options=options)
        assert there.source == url
        assert np.array_equal(here.X, there.X) and np.array_equal(here.y, there.y), file.name
        assert there.feature_names == here.feature_names


@pytest.mark.timeout(90)
def test_a_model_file_round_trips_through_s3(s3_server, tmp_path):
    data = generate_classification(500, n_features=5, random_state=2)
    model = ELMClassifier(n_hidden=30, random_state=0).fit(data.X, data.y)
    bucket = s3_server.new_bucket()
    url = f"s3://{bucket}/models/model.elm"
    options = _options(s3_server)
    save(model, url, features=data.feature_names, label="label", storage_options=options)
    same = load(url, storage_options=options)
    assert np.array_equal(same.predict(data.X), model.predict(data.X))
    assert np.array_equal(same.decision_function(data.X), model.decision_function(data.X))
    stored = s3_server.filesystem().cat_file(f"{bucket}/models/model.elm")
    assert stored[:2] == b"PK" and SECRET.encode() not in stored and KEY_ID.encode() not in stored
    local = tmp_path / "model.elm"
    save(model, local, features=data.feature_names, label="label")
    assert np.array_equal(load(local).predict(data.X), same.predict(data.X))


def _scoring_inputs(server, n_files: int = 3):
    """A fitted model, its training rows and ``n_files`` Parquet inputs at
    ``s3://<bucket>/in/``; returns (model, data, bucket)."""
    data = generate_classification(3_000, n_features=6, random_state=4)
    model = ELMClassifier(n_hidden=30, random_state=0).fit(data.X, data.y)
    bucket = server.new_bucket()
    _write_parts(f"s3://{bucket}/in", data, n_files, storage_options=_options(server))
    return model, data, bucket


@pytest.mark.timeout(120)
def test_batch_scoring_s3_to_s3_resumes_after_an_object_vanishes(s3_server):
    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    model, data, bucket = _scoring_inputs(s3_server)
    fs, options = s3_server.filesystem(), _options(s3_server)
    source, target = f"s3://{bucket}/in/", f"s3://{bucket}/out/"
    jobs = plan_jobs(model, source, target, storage_options=options)
    assert [job.output for job in jobs] == [f"{target}part-{i}.parquet" for i in range(3)]
    assert all(SECRET not in repr(job) for job in jobs)
    # the second input vanishes after the plan, before its job: the run stops there, naming
    # it, with the first output whole and marked and nothing of the second
    vanished = f"{bucket}/in/part-1.parquet"
    kept = fs.cat_file(vanished)
    fs.rm_file(vanished)
    with pytest.raises(DataError, match=f"s3://{vanished}") as error:
        score_jobs(model, jobs)
    assert SECRET not in str(error.value)
    fs.invalidate_cache()
    assert fs.exists(f"{bucket}/out/part-0.parquet")
    assert fs.exists(f"{bucket}/out/.elmscale-done/part-0.parquet.json")
    assert not fs.exists(f"{bucket}/out/part-1.parquet")
    # back again: a rerun scores the two left and skips the done one
    fs.pipe_file(vanished, kept)
    jobs = plan_jobs(model, source, target, storage_options=options)
    summary = score_jobs(model, jobs)
    assert (summary["skipped"], summary["scored"], summary["rows"]) == (1, 2, 2_000)
    bounds = np.linspace(0, 3_000, 4).astype(int)
    for i in range(3):
        table = pq.read_table(f"{bucket}/out/part-{i}.parquet", filesystem=fs)
        rows = slice(bounds[i], bounds[i + 1])
        assert np.array_equal(table["prediction"].to_numpy(), model.predict(data.X[rows]))
    # an output that vanished, and one whose marker did (a put not followed by its marker):
    # both are scored again, the third skipped
    fs.rm_file(f"{bucket}/out/part-2.parquet")
    fs.rm_file(f"{bucket}/out/.elmscale-done/part-0.parquet.json")
    fs.invalidate_cache()
    summary = score_jobs(model, plan_jobs(model, source, target, storage_options=options))
    assert (summary["skipped"], summary["scored"]) == (1, 2)
    assert (
        score_jobs(model, plan_jobs(model, source, target, storage_options=options))["skipped"] == 3
    )


@pytest.mark.timeout(300)
def test_the_command_line_scores_and_exports_from_s3_to_s3(s3_server):
    pytest.importorskip("onnx")
    model, data, bucket = _scoring_inputs(s3_server, n_files=2)
    save(model, f"s3://{bucket}/model.elm", storage_options=_options(s3_server))
    # a user's endpoint and credentials come from the environment
    env = {"AWS_ENDPOINT_URL": s3_server.endpoint}
    scored = run_elmscale(
        "score",
        f"s3://{bucket}/model.elm",
        f"s3://{bucket}/in/",
        f"s3://{bucket}/out/",
        "--quiet",
        env_extra=env,
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "scored 3,000 rows into 2 file(s)" in scored.stdout
    exported = run_elmscale(
        "export", f"s3://{bucket}/model.elm", f"s3://{bucket}/model.onnx", env_extra=env
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    fs = s3_server.filesystem()
    fs.invalidate_cache()
    assert fs.cat_file(f"{bucket}/model.onnx")[:2] and fs.exists(f"{bucket}/out/part-1.parquet")
    missing = run_elmscale(
        "score", f"s3://{bucket}/nothing.elm", f"s3://{bucket}/in/", "out", env_extra=env
    )
    assert missing.returncode == 2 and f"s3://{bucket}/nothing.elm" in missing.stderr


# -- bad input: a clear error naming the URL, no secret, nothing written ----------------------


def _refused(call, url: str) -> str:
    with pytest.raises(DataError) as error:
        call()
    message = str(error.value)
    assert url in message, message
    assert SECRET not in message and KEY_ID not in message, message
    return message


@pytest.mark.timeout(120)
def test_wrong_credentials_are_a_clear_error_and_nothing_is_written(s3_server, data_in_both):
    _, url, data = data_in_both
    bucket = url.split("/")[2]
    model = ELMClassifier(n_hidden=10, random_state=0).fit(data.X[:200], data.y[:200])
    # moto's IAM checks on: the test's key is one it does not know, as AWS refuses a wrong key
    wrong = _options(s3_server)
    s3_server.set_auth(True)
    try:
        message = _refused(lambda: open_parquet(url, storage_options=wrong), url)
        assert "access denied" in message and "credentials" in message
        model_url = f"s3://{bucket}/models/m.elm"
        _refused(lambda: save(model, model_url, storage_options=wrong), model_url)
        _refused(lambda: load(model_url, storage_options=wrong), model_url)
        csv_url = f"s3://{bucket}/train.csv"
        _refused(lambda: load_data(csv_url, storage_options=wrong), csv_url)
    finally:
        s3_server.set_auth(False)
    fs = s3_server.filesystem()
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(bucket)) == ["train"]


@pytest.mark.timeout(120)
def test_a_missing_bucket_or_key_is_named_and_nothing_is_written(s3_server, data_in_both):
    from elmscale.io.batch_scoring import plan_jobs

    _, url, data = data_in_both
    bucket = url.split("/")[2]
    options = _options(s3_server)
    model = ELMClassifier(n_hidden=10, random_state=0).fit(data.X[:200], data.y[:200])
    for missing in (f"s3://{bucket}/nothing/", f"s3://{bucket}-gone/train/"):
        _refused(lambda missing=missing: open_parquet(missing, storage_options=options), missing)
    for missing in (f"s3://{bucket}/nothing.csv", f"s3://{bucket}-gone/x.csv"):
        _refused(lambda missing=missing: load_data(missing, storage_options=options), missing)
    gone = f"s3://{bucket}-gone/models/m.elm"
    _refused(lambda: save(model, gone, storage_options=options), gone)
    _refused(lambda: load(f"s3://{bucket}/m.elm", storage_options=options), f"s3://{bucket}/m.elm")
    _refused(
        lambda: plan_jobs(
            model, f"s3://{bucket}/in/", f"s3://{bucket}/out/", storage_options=options
        ),
        f"s3://{bucket}/in/",
    )
    fs = s3_server.filesystem()
    fs.invalidate_cache()
    assert sorted(p.rsplit("/", 1)[1] for p in fs.ls(bucket)) == ["train"]
    assert not fs.exists(f"{bucket}-gone")


@pytest.mark.timeout(120)
def test_local_paths_import_no_store_package(tmp_path):
    """fsspec and the stores' packages load only when a URL names one."""
    code = (
        "import sys, numpy as np\n"
        "from elmscale import open_parquet, save, load, ELMClassifier\n"
        "from elmscale.data import write_parquet, load as load_data\n"
        "X, y = np.random.default_rng(0).normal(size=(40, 3)), np.arange(40) % 2\n"
        "write_parquet(X, 'd/a.parquet', y=y)\n"
        "model = ELMClassifier(n_hidden=5).fit(open_parquet('d'))\n"
        "save(model, 'm.elm'); load('m.elm'); load_data('d/a.parquet')\n"
        "print(sorted(m for m in ('fsspec', 's3fs', 'botocore', 'gcsfs') if m in sys.modules))\n"
        "from elmscale.data.storage import locate\n"
        "locate('s3://bucket/key')\n"
        "print(sorted(m for m in ('fsspec', 's3fs') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["[]", "['fsspec', 's3fs']"]


def test_a_store_without_its_package_names_the_extra_to_install():
    pytest.importorskip("s3fs")
    try:
        import gcsfs  # noqa: F401
    except ImportError:
        message = str(pytest.raises(DataError, locate, "gs://bucket/data/").value)
        assert 'pip install "elmscale[gcs]"' in message and "gs://bucket/data/" in message
    message = str(pytest.raises(DataError, locate, "nosuchfs://bucket/data/").value)
    assert "unknown protocol 'nosuchfs'" in message


# -- a pipeline: every path a URL, [storage] names the endpoint -------------------------------


def test_a_pipeline_file_holds_no_secret(tmp_path):
    from elmscale.app.pipeline import load_pipeline, storage_options

    file = tmp_path / "p.toml"
    file.write_text(
        '[data]\ntrain = "s3://b/train/"\n[storage]\nendpoint = "http://127.0.0.1:9"\n'
        'profile = "analytics"\nsecret_access_key = "abc"\n'
    )
    pipeline = load_pipeline(file)
    assert any(
        "storage.secret_access_key: a pipeline file holds no secret" in p for p in pipeline.problems
    )
    assert storage_options(pipeline, "s3://b/train/") == {
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:9"},
        "profile": "analytics",
    }
    assert storage_options(pipeline, "data/train.csv") == {}


@pytest.mark.timeout(300)
def test_a_pipeline_trains_scores_and_keeps_its_run_in_s3(s3_server, data_in_both, dask_client):
    from elmscale.app.pipeline import load_pipeline
    from elmscale.app.runner import run_pipeline

    _, url, _ = data_in_both
    bucket = url.split("/")[2]
    fs = s3_server.filesystem()
    fs.copy(f"{bucket}/train/part-2.parquet", f"{bucket}/score/part-2.parquet")
    file = Path(os.environ.get("TMPDIR", "/tmp")) / f"{bucket}.toml"
    file.write_text(
        f'[run]\nname = "s3run"\n[data]\ntrain = "{url}"\nscore = "s3://{bucket}/score/"\n'
        'id_columns = []\n[model]\nestimator = "ELMClassifier"\n'
        "params = {n_hidden = 40, random_state = 0}\n"
        f'[storage]\nendpoint = "{s3_server.endpoint}"\n'
        f'[output]\ndir = "s3://{bucket}/runs"\n'
    )
    # a cluster's workers take the store's credentials from their own environment
    credentials = {k: os.environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    dask_client.run(lambda: os.environ.update(credentials))
    try:
        metrics, run = run_pipeline(
            load_pipeline(file).check(), scheduler=dask_client.scheduler.address, progress=False
        )
    finally:
        dask_client.run(lambda: [os.environ.pop(k, None) for k in credentials])
        file.unlink()
    assert str(run).startswith(f"s3://{bucket}/runs/s3run-")
    fs.invalidate_cache()
    kept = sorted(p.rsplit("/", 1)[1] for p in fs.find(str(run).removeprefix("s3://")))
    assert {"metrics.json", "model.elm", "pipeline.json", "run.log", "part-2.parquet"} <= set(kept)
    assert metrics["scored"] == {"files": 1, "rows": 2_000}
    assert metrics["train_rows"] == 6_000
    model = load(f"{run}/model.elm", storage_options=_options(s3_server))
    assert model.predict(np.zeros((1, 8))).shape == (1,)
