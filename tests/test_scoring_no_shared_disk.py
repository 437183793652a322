"""Batch scoring with local inputs and outputs on a Dask cluster whose workers share no disk
with the client (issue 51): each worker in its own mount namespace with a private ``/tmp``
and a private tmpfs over the client's data folder (``_separate_machines``).  The output
folder's lock and the rerun's "already done" check are taken on the client, the files
written by the workers: a local folder the workers do not see is a clear error before
anything is written (not outputs left on the workers' own disks), and a folder every
worker sees (``/var/tmp``, outside the hidden folders) scores as before."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from _separate_machines import Unavailable, _shared_folder, separate_machines

from elmscale import ELMClassifier, save
from elmscale.core.errors import DataError
from elmscale.data import write_generated_parquet
from elmscale.io.batch_scoring import PROBE_PREFIX, plan_jobs, score_jobs

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def machines():
    """The cluster, once for the module (skipped, with the reason, where this machine
    permits no mount namespace)."""
    try:
        with separate_machines(n_workers=2) as cluster:
            yield cluster
    except Unavailable as exc:
        pytest.skip(f"no separate machines here: {exc}")


@pytest.fixture(scope="module")
def shared(machines):
    """A folder every worker sees as the client does (under /var/tmp, outside the folders
    hidden from them), with 400 rows in 2 Parquet files (``data``)."""
    folder = _shared_folder()
    try:
        write_generated_parquet(
            folder / "data", 400, 4, 2, random_state=0, rows_per_file=200, row_group_size=100
        )
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def model(shared):
    X = np.concatenate([_features(f) for f in sorted((shared / "data").glob("*.parquet"))])
    return ELMClassifier(n_hidden=10, random_state=0).fit(X, (X[:, 0] > 0).astype(int))


def _features(file: Path) -> np.ndarray:
    table = pq.read_table(file)
    return np.column_stack(
        [table.column(c).to_numpy() for c in table.column_names if c != "label"]
    ).astype(np.float32)


def _unseen_error(machines, excinfo, shown: str) -> None:
    message = str(excinfo.value)
    assert message.startswith(f"{shown}: worker "), message
    assert any(address in message for address in machines.addresses), message
    assert "shared file system" in message and "s3://" in message, message


def test_an_output_folder_the_workers_do_not_see_is_named_and_nothing_is_written(
    machines, shared, model
):
    # the client's own folder: each worker has an empty tmpfs there
    for target in (machines.folder / "new" / "scores", machines.folder / "existing"):
        if target.name == "existing":
            target.mkdir()
        jobs = plan_jobs(model, shared / "data", target, storage_options=None)
        with pytest.raises(DataError) as excinfo:
            score_jobs(model, jobs, client=machines.client)
        _unseen_error(machines, excinfo, str(target))
        assert "output folder" in str(excinfo.value)
        if target.name == "existing":
            assert list(target.iterdir()) == []  # the probe removed, nothing scored
        else:
            assert not (machines.folder / "new").exists()  # the folders made for the probe


def test_a_local_input_the_workers_do_not_see_is_named(machines, shared, model):
    hidden = machines.folder / "inputs"
    shutil.copytree(shared / "data", hidden)
    target = shared / "scores-of-hidden"
    jobs = plan_jobs(model, hidden, target)
    with pytest.raises(DataError) as excinfo:
        score_jobs(model, jobs, client=machines.client)
    _unseen_error(machines, excinfo, str(hidden / "part-00000.parquet"))
    assert "input file" in str(excinfo.value)
    assert not target.exists() or not list(target.iterdir())


def test_a_folder_every_worker_sees_is_scored(machines, shared, model):
    target = shared / "scores"
    jobs = plan_jobs(model, shared / "data", target)
    summary = score_jobs(model, jobs, client=machines.client)
    assert summary["scored"] == 2 and summary["rows"] == 400
    for file in sorted((shared / "data").glob("*.parquet")):
        scored = pq.read_table(target / file.name)
        np.testing.assert_array_equal(
            scored.column("prediction").to_numpy(), model.predict(_features(file))
        )
    assert not list(target.glob(f"{PROBE_PREFIX}*"))
    assert score_jobs(model, jobs, client=machines.client)["skipped"] == 2


def test_elmscale_score_names_the_folder(machines, shared, model, capsys):
    from elmscale.app.cli import main

    model_file = shared / "model.elm"
    save(model, model_file)
    target = machines.folder / "cli-scores"
    argv = ["score", str(model_file), str(shared / "data"), str(target)]
    code = main([*argv, "--scheduler", machines.address, "--quiet"])
    assert code != 0
    err = capsys.readouterr().err
    assert f"{target}: worker " in err and "shared file system" in err, err
    assert not target.exists()
