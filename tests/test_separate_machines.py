"""Fits, predictions and scoring on a Dask cluster whose workers share no disk with the client
(issue 51): each worker in its own mount namespace with a private ``/tmp``
(``_separate_machines``), the data in a folder every process sees.  Anything that one process
writes to its local disk and another reads through a local path fails here, as on a cluster
of other machines; each fit is compared with the same fit here, without a cluster."""

from __future__ import annotations

import os
import tempfile
import uuid
import weakref

import numpy as np
import pyarrow.parquet as pq
import pytest
from _problems import assert_same_optimum
from _separate_machines import Unavailable, separate_machines
from sklearn.base import clone

from elmscale import (
    BRELMClassifier,
    ELMClassifier,
    FLSASVMClassifier,
    SparseELMClassifier,
    dataplane,
    open_parquet,
)
from elmscale.data import generate_classification, write_generated_parquet

pytestmark = pytest.mark.timeout(300)

TOL = 1e-3


@pytest.fixture(scope="module")
def machines():
    """The cluster, started once for the module (skipped, with the reason, where this
    machine permits no mount namespace)."""
    try:
        with separate_machines(n_workers=2) as cluster:
            yield cluster
    except Unavailable as exc:
        pytest.skip(f"no separate machines here: {exc}")


@pytest.fixture(scope="module")
def binary(machines):
    """4,000 rows of 6 features in 4 Parquet files, in the folder every process sees."""
    folder = machines.folder / "binary"
    write_generated_parquet(
        folder, 4_000, 6, 2, random_state=3, rows_per_file=1_000, row_group_size=500
    )
    return open_parquet(folder, label="label")


def _touch_in_tmp(name: str) -> str:
    path = os.path.join("/tmp", name)
    open(path, "w").close()
    return path


def _tmp_of_this_process() -> tuple:
    """(On a worker) its temporary folder, and what ``/tmp`` holds."""
    return tempfile.gettempdir(), sorted(os.listdir("/tmp"))


def test_each_worker_has_its_own_tmp_and_sees_the_data(machines, binary):
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
    # the data folder is outside /tmp and seen by every worker
    assert all(client.run(os.path.isdir, str(machines.folder / "binary")).values())


def test_the_random_node_sparse_elm_newton_fit(machines, binary):
    """The fit that failed (its workers wrote the support rows into a folder made on the
    client): the cluster's passes are the blocked passes here, to the bit."""
    model = SparseELMClassifier(hidden="sigmoid", n_hidden=20, C=1.0, tol=TOL, random_state=0)
    there = clone(model).fit(binary, client=machines.client)
    here = clone(model).fit(binary, n_blocks=2)
    for name in ("coef_", "support_", "n_support_", "n_iter_", "objective_"):
        np.testing.assert_array_equal(getattr(there, name), getattr(here, name), err_msg=name)
    assert there.converged_.all() and there.support_.size == there.n_support_.sum() > 0
    X, _ = binary.read()
    np.testing.assert_array_equal(
        dataplane.predict(there, binary, client=machines.client), here.predict(X)
    )


def test_the_elm_gram_fit(machines, binary):
    model = ELMClassifier(n_hidden=40, precision="double", random_state=0)
    there = clone(model).fit(binary, client=machines.client)
    here = clone(model).fit(binary)
    X, y = binary.read()
    from_arrays = clone(model).fit(X, y)
    for other in (here, from_arrays):
        rel = np.abs(there.coef_ - other.coef_).max() / np.abs(other.coef_).max()
        assert rel <= 1e-6, rel
    np.testing.assert_array_equal(there.classes_, here.classes_)
    np.testing.assert_array_equal(
        dataplane.predict(there, binary, client=machines.client), there.predict(X)
    )


def test_the_kernel_sparse_elm_working_set(machines, binary, monkeypatch):
    """Dask actors on the workers: the same blocks on threads here give the same model to
    the bit.  The client given is the only one and not Dask's default
    (``set_as_default=False``): the actors' handles once called through the default (or
    current) client, and failed without one (``AttributeError: type object 'BlockActor'
    has no attribute '_io_loop'``)."""
    import contextvars

    import distributed

    model = SparseELMClassifier(
        sigma=0.5, C=1.0, tol=TOL, random_state=0, solver="working_set", working_set_size=128
    )

    def fit_with_no_default_client():
        with pytest.raises(ValueError, match="No clients found"):
            distributed.default_client()
        return clone(model).fit(binary, client=machines.client)

    # no default client, whichever other test made one: none of this process's clients is
    # Dask's default (set_as_default), nor current (a fresh context: a session fixture's
    # client, entered with `with`, is current in the tests' context)
    monkeypatch.setattr(distributed.client, "_global_clients", weakref.WeakValueDictionary())
    there = contextvars.Context().run(fit_with_no_default_client)
    assert there.solver_ == "working_set"
    here = clone(model).set_params(n_threads=2).fit(binary)
    for name in ("support_", "dual_coef_", "n_iter_"):
        np.testing.assert_array_equal(getattr(there, name), getattr(here, name), err_msg=name)


def test_the_kernel_sparse_elm_divide_and_conquer(machines, binary):
    model = SparseELMClassifier(sigma=0.5, C=1.0, tol=TOL, random_state=0)
    divided = clone(model).fit(binary, client=machines.client, n_parts=2)
    assert divided.n_parts_ == 2
    X, y = binary.read()
    held_out = generate_classification(1_000, 6, 2, random_state=50).X
    assert_same_optimum(divided, clone(model).fit(X, y), held_out, TOL)


OTHER_FAMILIES = {
    "kernel_elm": (lambda: ELMClassifier(kernel="gaussian", sigma=2.0), "dual_coef_"),
    "boosting_ridge": (lambda: BRELMClassifier(n_hidden=20, random_state=0), "coef_"),
    "flsa_svm": (
        lambda: FLSASVMClassifier(n_support=20, candidates=200, random_state=0),
        "dual_coef_",
    ),
}


@pytest.mark.parametrize("family", list(OTHER_FAMILIES))
def test_the_other_families_fit(machines, binary, family):
    make, coef = OTHER_FAMILIES[family]
    there = make().fit(binary, client=machines.client)
    here = make().fit(binary)
    a, b = getattr(there, coef), getattr(here, coef)
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-6 * np.abs(b).max(), family
    X, _ = binary.read()
    assert np.mean(there.predict(X) == here.predict(X)) >= 0.999


def test_predictions_and_batch_scoring_on_the_workers(machines, binary):
    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    X, _ = binary.read()
    model = ELMClassifier(n_hidden=30, random_state=1).fit(binary)
    client = machines.client
    np.testing.assert_array_equal(dataplane.predict(model, binary, client=client), model.predict(X))
    np.testing.assert_allclose(
        dataplane.decision_function(model, binary, client=client),
        model.decision_function(X),
        rtol=1e-6,
        atol=1e-6,
    )
    source, target = machines.folder / "binary", machines.folder / "scores"
    jobs = plan_jobs(model, source, target, decision=True)
    summary = score_jobs(model, jobs, client=client)
    assert summary["scored"] == 4 and summary["rows"] == 4_000
    for file in sorted(source.glob("*.parquet")):
        rows = pq.read_table(file).to_pandas()
        scored = pq.read_table(target / f"{file.stem}.parquet")
        features = rows[[c for c in rows.columns if c != "label"]].to_numpy(np.float32)
        np.testing.assert_array_equal(
            scored.column("prediction").to_numpy(), model.predict(features)
        )
    assert score_jobs(model, jobs, client=client)["skipped"] == 4  # a rerun finds them done
