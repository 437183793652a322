"""The Newton solver's ``state_dir`` as a URL (issue 51): a shared folder the user names, a
local path, a ``file://`` URL or an object store's prefix (``s3://bucket/state/`` on the
local S3 server, the ``s3_server`` fixture), where the workers write the units' support
files and the coordinator reads them, through ``elmscale.data.storage``.  The model is the
default fit's to the bit (the rows returned through the results), nothing of the fit stays
in the folder, a failing fit leaves nothing either, and a folder that cannot be written is
an error naming its URL, never a secret, before any pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from elmscale import SparseELMClassifier, open_parquet
from elmscale.core.errors import DataError
from elmscale.data import write_generated_parquet
from elmscale.data.storage import locate
from elmscale.distributed import newton
from elmscale.features.layers import HiddenLayer

pytestmark = pytest.mark.timeout(180)

KEY_ID = "elmscale-state-key-id-4711"
SECRET = "elmscale-state-secret-0815-do-not-show"
FITTED = ("coef_", "support_", "n_support_", "n_iter_", "objective_", "kkt_violation_")


def _options(server) -> dict:
    return {"key": KEY_ID, "secret": SECRET, "client_kwargs": {"endpoint_url": server.endpoint}}


@pytest.fixture(scope="module")
def data(s3_server, tmp_path_factory):
    """2,400 rows of 5 features, 3 classes, in 3 files of 2 row groups: a local folder and
    the same files under ``s3://<bucket>/train/``; returns (local, url, bucket)."""
    local = tmp_path_factory.mktemp("newton-state") / "train"
    write_generated_parquet(
        local, 2_400, 5, 3, random_state=7, rows_per_file=800, row_group_size=400
    )
    bucket = s3_server.new_bucket()
    s3_server.filesystem().put(str(local) + "/", f"{bucket}/train/", recursive=True)
    return local, f"s3://{bucket}/train/", bucket


def _model():
    return SparseELMClassifier(hidden="sigmoid", n_hidden=12, C=1.0, tol=1e-3, random_state=0)


def _same(a, b) -> None:
    for name in FITTED:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def _left(server, bucket: str) -> list:
    fs = server.filesystem()
    fs.invalidate_cache()
    return sorted(p for p in fs.find(bucket) if "/train/" not in p)


def test_a_state_url_in_s3_gives_the_default_fit_to_the_bit(s3_server, data, tmp_path, monkeypatch):
    local, url, bucket = data
    dataset = open_parquet(url, storage_options=_options(s3_server))
    default = _model().fit(dataset, n_blocks=2)
    assert default.converged_.all() and default.support_.size > 0
    put = []
    write_whole = newton.write_whole
    monkeypatch.setattr(
        newton,
        "write_whole",
        lambda where, *a, **k: put.append(str(where)) or write_whole(where, *a, **k),
    )
    # a URL of the data's store takes its options (endpoint and credentials)
    in_s3 = clone(_model()).fit(dataset, n_blocks=2, state_dir=f"s3://{bucket}/state/")
    _same(in_s3, default)
    assert len(put) == len(dataset.units()) and all(
        p.startswith(f"s3://{bucket}/state/") and p.endswith(".support.npy") for p in put
    )
    assert _left(s3_server, bucket) == []  # every unit's object read and removed
    # local data, the state in the store: its options given with the URL (storage.locate)
    where = locate(f"s3://{bucket}/other-state", _options(s3_server))
    _same(clone(_model()).fit(open_parquet(local), n_blocks=3, state_dir=where), default)
    assert _left(s3_server, bucket) == []
    # a file:// URL and a plain path: the same
    for state in (f"file://{tmp_path}/state-url", tmp_path / "state-path"):
        _same(clone(_model()).fit(dataset, n_blocks=2, state_dir=state), default)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state-path", "state-url"]
    assert [list(p.iterdir()) for p in tmp_path.iterdir()] == [[], []]


def test_a_failing_fit_leaves_nothing_in_the_store(s3_server, data, monkeypatch):
    """The second unit's write fails after the first unit's object was put: the error goes
    up and the fit's objects are removed (none was ever half there: each is put whole)."""
    _, url, bucket = data
    dataset = open_parquet(url, storage_options=_options(s3_server))
    written = newton._write_support

    def second_fails(problem, unit, rows):
        if unit.index == 1:
            raise RuntimeError("the second unit's write fails")
        written(problem, unit, rows)

    monkeypatch.setattr(newton, "_write_support", second_fails)
    with pytest.raises(RuntimeError, match="the second unit's write fails"):
        _model().fit(dataset, n_blocks=1, state_dir=f"s3://{bucket}/failing/")
    assert _left(s3_server, bucket) == []


def test_a_bad_state_url_is_named_without_secrets_before_any_pass(s3_server, data):
    _, url, bucket = data
    dataset = open_parquet(url, storage_options=_options(s3_server))
    passes = []
    missing = f"s3://no-such-bucket-{bucket}/state/"
    units = newton.parquet_units(dataset)
    layer = HiddenLayer("sigmoid", dataset.n_features, 12, seed=0).to_dict()
    for state in (locate(missing, _options(s3_server)), missing):
        with pytest.raises(DataError) as error:
            newton.fit_newton(
                units,
                layer,
                [0, 1, 2],
                C=1.0,
                tol=1e-3,
                n_blocks=2,
                state_dir=state,
                on_pass=lambda index, phases: passes.append(index),
            )
        message = str(error.value)
        assert missing in message and "state" in message, message
        assert SECRET not in message and KEY_ID not in message, message
    assert passes == []
    assert not s3_server.filesystem().exists(f"no-such-bucket-{bucket}")
    with pytest.raises(DataError, match="nope://somewhere/state"):
        _model().fit(dataset, n_blocks=2, state_dir="nope://somewhere/state")
    assert _left(s3_server, bucket) == []
