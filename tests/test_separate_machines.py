"""Fits, predictions, scoring and a pipeline on a Dask cluster whose workers share no disk
with the client (issue 51): each worker in its own mount namespace with a private ``/tmp``
and a private tmpfs over the client's data folder (``_separate_machines``), the data and
the outputs on the local S3 server (``_s3``, the ``s3_server`` fixture), as a cluster of
other machines keeps them.  Anything that one process writes to its local disk and another
reads through a local path fails here, as on such a cluster; each fit is compared with the
same fit here, without a cluster, from the client's local copy of the same files."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import uuid
import weakref
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
from _problems import assert_same_optimum
from _s3 import run_elmscale
from _separate_machines import Unavailable, separate_machines
from sklearn.base import clone

from elmscale import (
    BRELMClassifier,
    ELMClassifier,
    FELMClassifier,
    FLSASVMClassifier,
    SparseELMClassifier,
    dataplane,
    load,
    open_parquet,
    save,
)
from elmscale.data import generate_classification, write_generated_parquet

pytestmark = pytest.mark.timeout(300)

TOL = 1e-3
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def machines(s3_server):
    """The cluster, started once for the module (skipped, with the reason, where this
    machine permits no mount namespace); its workers are given the store's endpoint and
    (dummy) credentials in their environment, as a cluster's machines are given theirs."""
    from _s3 import CREDENTIALS

    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": s3_server.endpoint}
    try:
        with separate_machines(n_workers=2, worker_env=env) as cluster:
            yield cluster
    except Unavailable as exc:
        pytest.skip(f"no separate machines here: {exc}")


def _copy_to_s3(server, local: Path, url: str) -> None:
    server.filesystem().put(str(local) + "/", url.removeprefix("s3://"), recursive=True)


@pytest.fixture(scope="module")
def store(machines, s3_server):
    """The data, written in the client's own folder (which no worker sees) and copied to a
    new bucket: ``local`` and ``s3`` (open_parquet of each), their ``url``, the ``bucket``,
    the store's ``options``; ``small_local`` / ``small_s3``: 200 rows for FELM."""
    bucket = s3_server.new_bucket("separate")
    options = s3_server.storage_options
    out = SimpleNamespace(bucket=bucket, options=options)
    for name, rows, per_file, group in (("binary", 4_000, 1_000, 500), ("small", 200, 100, 50)):
        local = machines.folder / name
        write_generated_parquet(
            local, rows, 6, 2, random_state=3, rows_per_file=per_file, row_group_size=group
        )
        url = f"s3://{bucket}/{name}/"
        _copy_to_s3(s3_server, local, url)
        prefix = "" if name == "binary" else f"{name}_"
        setattr(out, f"{prefix}local", open_parquet(local, label="label"))
        setattr(out, f"{prefix}s3", open_parquet(url, label="label", storage_options=options))
        setattr(out, f"{prefix}url", url)
    return out


def _touch_in_tmp(name: str) -> str:
    path = os.path.join("/tmp", name)
    open(path, "w").close()
    return path


def _tmp_of_this_process() -> tuple:
    """(On a worker) its temporary folder, and what ``/tmp`` holds."""
    return tempfile.gettempdir(), sorted(os.listdir("/tmp"))


def test_each_worker_has_its_own_tmp_and_none_sees_the_clients_data(machines, store):
    client, (first, second) = machines.client, machines.addresses
    mine = _touch_in_tmp(f"elmscale-client-{uuid.uuid4().hex}")
    try:
        assert not any(client.run(os.path.exists, mine).values())  # the client's /tmp: unseen
    finally:
        os.unlink(mine)
    theirs = client.run(_touch_in_tmp, f"elmscale-worker-{uuid.uuid4().hex}", workers=[first])
    assert not os.path.exists(theirs[first])  # a worker's /tmp: unseen here
    assert client.run(os.path.exists, theirs[first], workers=[second]) == {second: False}
    assert client.run(os.path.exists, theirs[first], workers=[first]) == {first: True}
    for folder, _ in client.run(_tmp_of_this_process).values():
        assert folder == "/tmp"
    # the client's data folder: an empty tmpfs on every worker, and their working folder
    # is not in it
    assert {"binary", "small"} <= set(os.listdir(machines.folder))
    assert list(client.run(os.listdir, str(machines.folder)).values()) == [[], []]
    assert set(client.run(os.getcwd).values()) == {"/"}


def test_the_random_node_sparse_elm_newton_fit(machines, s3_server, store):
    """The fit that failed (its workers wrote the support rows into a folder made on the
    client): the cluster's passes from s3:// are the blocked passes here from the local
    copy, to the bit; with ``state_dir`` an s3:// prefix (the workers put the units'
    support files there, the client reads them) the same, and nothing stays there."""
    model = SparseELMClassifier(hidden="sigmoid", n_hidden=20, C=1.0, tol=TOL, random_state=0)
    there = clone(model).fit(store.s3, client=machines.client)
    here = clone(model).fit(store.local, n_blocks=2)
    state = f"s3://{store.bucket}/newton-state/"
    shared = clone(model).fit(store.s3, client=machines.client, state_dir=state)
    for name in ("coef_", "support_", "n_support_", "n_iter_", "objective_"):
        np.testing.assert_array_equal(getattr(there, name), getattr(here, name), err_msg=name)
        np.testing.assert_array_equal(getattr(shared, name), getattr(here, name), err_msg=name)
    assert there.converged_.all() and there.support_.size == there.n_support_.sum() > 0
    fs = s3_server.filesystem()
    fs.invalidate_cache()
    assert fs.find(state.removeprefix("s3://")) == []
    X, _ = store.local.read()
    np.testing.assert_array_equal(
        dataplane.predict(there, store.s3, client=machines.client), here.predict(X)
    )


def test_the_elm_gram_fit(machines, store):
    model = ELMClassifier(n_hidden=40, precision="double", random_state=0)
    there = clone(model).fit(store.s3, client=machines.client)
    here = clone(model).fit(store.local)
    X, y = store.local.read()
    from_arrays = clone(model).fit(X, y)
    # the Gram's partial sums are added in another order on the cluster: equal to rounding
    for other in (here, from_arrays):
        rel = np.abs(there.coef_ - other.coef_).max() / np.abs(other.coef_).max()
        assert rel <= 1e-6, rel
    np.testing.assert_array_equal(there.classes_, here.classes_)
    np.testing.assert_array_equal(
        dataplane.predict(there, store.s3, client=machines.client), there.predict(X)
    )


def test_the_kernel_sparse_elm_working_set(machines, store, monkeypatch):
    """Dask actors on the workers, reading their blocks from s3://: the same blocks on
    threads here, from the local copy, give the same model to the bit.  The client given
    is the only one and not Dask's default (``set_as_default=False``): the actors' handles
    once called through the default (or current) client, and failed without one
    (``AttributeError: type object 'BlockActor' has no attribute '_io_loop'``)."""
    import contextvars

    import distributed

    model = SparseELMClassifier(
        sigma=0.5, C=1.0, tol=TOL, random_state=0, solver="working_set", working_set_size=128
    )

    def fit_with_no_default_client():
        with pytest.raises(ValueError, match="No clients found"):
            distributed.default_client()
        return clone(model).fit(store.s3, client=machines.client)

    # no default client, whichever other test made one: none of this process's clients is
    # Dask's default (set_as_default), nor current (a fresh context: a session fixture's
    # client, entered with `with`, is current in the tests' context)
    monkeypatch.setattr(distributed.client, "_global_clients", weakref.WeakValueDictionary())
    there = contextvars.Context().run(fit_with_no_default_client)
    assert there.solver_ == "working_set"
    here = clone(model).set_params(n_threads=2).fit(store.local)
    for name in ("support_", "dual_coef_", "n_iter_"):
        np.testing.assert_array_equal(getattr(there, name), getattr(here, name), err_msg=name)


def test_the_kernel_sparse_elm_divide_and_conquer(machines, store):
    model = SparseELMClassifier(sigma=0.5, C=1.0, tol=TOL, random_state=0)
    divided = clone(model).fit(store.s3, client=machines.client, n_parts=2)
    assert divided.n_parts_ == 2
    X, y = store.local.read()
    held_out = generate_classification(1_000, 6, 2, random_state=50).X
    # divide and conquer's parts are solved apart, then the whole from their duals: the
    # same optimum within tol, not the same iterates
    assert_same_optimum(divided, clone(model).fit(X, y), held_out, TOL)


OTHER_FAMILIES = {
    "kernel_elm": (lambda: ELMClassifier(kernel="gaussian", sigma=2.0), "dual_coef_", ""),
    "boosting_ridge": (lambda: BRELMClassifier(n_hidden=20, random_state=0), "coef_", ""),
    "flsa_svm": (
        lambda: FLSASVMClassifier(n_support=20, candidates=200, random_state=0),
        "dual_coef_",
        "",
    ),
    # FELM's rows are read on the workers and gathered here (its problem is held in
    # memory): the arrays fit of the same rows, to the bit; 200 rows (its selection is slow)
    "felm": (lambda: FELMClassifier(n_hidden=20, random_state=0), "coef_", "small_"),
}


@pytest.mark.parametrize("family", list(OTHER_FAMILIES))
def test_the_other_families_fit(machines, store, family):
    make, coef, data = OTHER_FAMILIES[family]
    there = make().fit(getattr(store, f"{data}s3"), client=machines.client)
    here = make().fit(getattr(store, f"{data}local"))
    a, b = getattr(there, coef), getattr(here, coef)
    # the kernel ELM's and boosting's sums, and FLSA-SVM's, are added in another order on
    # the cluster: equal to rounding (FELM gathers the rows: to the bit)
    limit = 0.0 if family == "felm" else 1e-6 * np.abs(b).max()
    assert a.shape == b.shape and np.abs(a - b).max() <= limit, family
    X, _ = getattr(store, f"{data}local").read()
    assert np.mean(there.predict(X) == here.predict(X)) >= 0.999


@pytest.fixture(scope="module")
def scoring_model(store):
    return ELMClassifier(n_hidden=30, random_state=1).fit(store.local)


def _assert_scored(s3_server, store, model, target: str, n_files: int = 4) -> None:
    """Every input file's rows scored into ``target`` (an s3:// folder), one file each."""
    fs = s3_server.filesystem()
    fs.invalidate_cache()
    for file in sorted(Path(store.local.source).glob("*.parquet")):
        rows = pq.read_table(file).to_pandas()
        with fs.open(f"{target.removeprefix('s3://').rstrip('/')}/{file.stem}.parquet") as f:
            scored = pq.read_table(f)
        features = rows[[c for c in rows.columns if c != "label"]].to_numpy(np.float32)
        np.testing.assert_array_equal(
            scored.column("prediction").to_numpy(), model.predict(features)
        )
    assert len(sorted(Path(store.local.source).glob("*.parquet"))) == n_files


def test_predictions_and_batch_scoring_on_the_workers(machines, s3_server, store, scoring_model):
    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    X, _ = store.local.read()
    model, client = scoring_model, machines.client
    np.testing.assert_array_equal(
        dataplane.predict(model, store.s3, client=client), model.predict(X)
    )
    np.testing.assert_allclose(
        dataplane.decision_function(model, store.s3, client=client),
        model.decision_function(X),
        rtol=1e-6,
        atol=1e-6,
    )
    target = f"s3://{store.bucket}/scores/"
    jobs = plan_jobs(model, store.url, target, decision=True, storage_options=store.options)
    summary = score_jobs(model, jobs, client=client)
    assert summary["scored"] == 4 and summary["rows"] == 4_000
    _assert_scored(s3_server, store, model, target)
    assert score_jobs(model, jobs, client=client)["skipped"] == 4  # a rerun finds them done


def _elmscale(*args, endpoint: str) -> subprocess.CompletedProcess:
    """The command line, as a user runs it: the store's endpoint and the (dummy)
    credentials from the environment, no scheduler but the one named."""
    return run_elmscale(*args, env_extra={"AWS_ENDPOINT_URL": endpoint})


def test_elmscale_score_on_the_cluster_from_s3_to_s3(machines, s3_server, store, scoring_model):
    model_url = f"s3://{store.bucket}/model.elm"
    save(scoring_model, model_url, storage_options=store.options)
    target = f"s3://{store.bucket}/cli-scores/"
    scored = _elmscale(
        "score",
        model_url,
        store.url,
        target,
        "--scheduler",
        machines.address,
        "--quiet",
        endpoint=s3_server.endpoint,
    )
    assert scored.returncode == 0, scored.stderr[-3000:]
    assert "scored 4,000 rows into 4 file(s)" in scored.stdout, scored.stdout
    _assert_scored(s3_server, store, scoring_model, target)


PIPELINE = """
[run]
name = "{name}"
seed = 1
[data]
train = "{train}"
score = "{train}"
id_columns = []
[model]
estimator = "SparseELMClassifier"
params = {{ hidden = "sigmoid", n_hidden = 20, C = 1.0, tol = 0.001, random_state = 0 }}
{compute}
[output]
dir = "{runs}"
"""


def test_a_pipeline_run_on_the_cluster_in_s3_equals_the_local_run(
    machines, s3_server, store, tmp_path
):
    """``elmscale run`` of a pipeline whose data and outputs are s3:// URLs and whose
    ``[compute]`` names the cluster's scheduler, against the same pipeline on the local
    copy of the data, run here: the random-node sparse ELM's Newton fit gives the same
    model to the bit (its passes do not depend on where the units run), and the same
    scores."""
    remote = tmp_path / "remote.toml"
    runs = f"s3://{store.bucket}/runs"
    remote.write_text(
        PIPELINE.format(
            name="remote",
            train=store.url,
            runs=runs,
            compute=f'[compute]\nscheduler = "{machines.address}"\n'
            f'[storage]\nendpoint = "{s3_server.endpoint}"',
        )
    )
    local = tmp_path / "local.toml"
    local.write_text(
        PIPELINE.format(
            name="local",
            train=store.local.source,
            runs=tmp_path / "runs",
            compute="[compute]\nworkers = 1",
        )
    )
    for file in (remote, local):
        ran = _elmscale("run", str(file), endpoint=s3_server.endpoint)
        assert ran.returncode == 0, (file.name, ran.stderr[-3000:])
    fs = s3_server.filesystem()
    fs.invalidate_cache()
    (run_there,) = fs.ls(runs.removeprefix("s3://"))
    (run_here,) = sorted((tmp_path / "runs").glob("local-*"))
    metrics = json.loads(fs.cat_file(f"{run_there}/metrics.json"))
    assert metrics["compute"]["dask"] == machines.address, metrics["compute"]
    there = load(f"s3://{run_there}/model.elm", storage_options=store.options)
    here = load(run_here / "model.elm")
    if hasattr(there, "steps"):  # (a scikit-learn Pipeline: the estimator is its last step)
        there, here = there[-1], here[-1]
    assert there.solver_ == here.solver_ == "newton"
    for name in ("coef_", "support_", "n_support_", "n_iter_", "objective_"):
        np.testing.assert_array_equal(getattr(there, name), getattr(here, name), err_msg=name)
    scored_there = sorted(p for p in fs.find(run_there) if p.endswith(".parquet"))
    scored_here = sorted((run_here).rglob("*.parquet"))
    assert len(scored_there) == len(scored_here) == 4
    for a, b in zip(scored_there, scored_here):
        with fs.open(a) as f:
            assert pq.read_table(f).equals(pq.read_table(b)), (a, b)
