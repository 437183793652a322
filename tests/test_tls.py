"""TLS to the Dask scheduler (issue 51): a ``tls://`` LocalCluster whose certificates the
test makes (trustme, a CA of its own), reached from the Python API, from ``elmscale run``
with the ``--tls-*`` flags or the pipeline's ``[compute] tls_*`` keys, and from Dask's own
configuration; refused, naming what is missing, without them."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from elmscale import ELMClassifier
from elmscale.data import generate_classification, open_parquet, write_parquet
from elmscale.distributed.connect import connect_dask, tls_security

pytestmark = pytest.mark.timeout(300)

CLEAN_ENV = {
    k: v
    for k, v in os.environ.items()
    if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS") and not k.startswith("DASK_DISTRIBUTED")
}


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """A CA of the test's own, and certificates it signed for 127.0.0.1 (the scheduler,
    the workers and the client each get one), as PEM files."""
    trustme = pytest.importorskip("trustme", reason="trustme is in the test extra")
    folder = tmp_path_factory.mktemp("tls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(folder / "ca.pem"))
    files = {"ca": str(folder / "ca.pem")}
    for who in ("scheduler", "worker", "client"):
        cert = ca.issue_cert("127.0.0.1", "localhost")
        cert.cert_chain_pems[0].write_to_path(str(folder / f"{who}.pem"))
        cert.private_key_pem.write_to_path(str(folder / f"{who}.key"))
        files[who] = (str(folder / f"{who}.pem"), str(folder / f"{who}.key"))
    other = trustme.CA()  # a CA that signed none of them
    other.cert_pem.write_to_path(str(folder / "other-ca.pem"))
    files["other_ca"] = str(folder / "other-ca.pem")
    return files


@pytest.fixture(scope="module")
def tls_cluster(certificates):
    """A two-worker LocalCluster that speaks TLS only (``require_encryption``)."""
    from distributed import LocalCluster, Security

    security = Security(
        tls_ca_file=certificates["ca"],
        tls_scheduler_cert=certificates["scheduler"][0],
        tls_scheduler_key=certificates["scheduler"][1],
        tls_worker_cert=certificates["worker"][0],
        tls_worker_key=certificates["worker"][1],
        tls_client_cert=certificates["client"][0],
        tls_client_key=certificates["client"][1],
        require_encryption=True,
    )
    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        protocol="tls",
        host="127.0.0.1",
        security=security,
        dashboard_address=None,
    ) as cluster:
        assert cluster.scheduler_address.startswith("tls://")
        yield cluster


@pytest.fixture(scope="module")
def data_set(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tls-data")
    data = generate_classification(3000, n_features=6, random_state=2)
    (folder / "train").mkdir()
    for i, rows in enumerate((slice(0, 1500), slice(1500, None))):
        write_parquet(data.X[rows], folder / "train" / f"part-{i}.parquet", data.y[rows])
    return folder


def test_the_api_fits_over_tls_as_on_a_plain_cluster(
    tls_cluster, certificates, data_set, dask_client
):
    cert, key = certificates["client"]
    security = tls_security(certificates["ca"], cert, key)
    dataset = open_parquet(data_set / "train")
    plain = ELMClassifier(n_hidden=40, random_state=0).fit(dataset, client=dask_client)
    with connect_dask(tls_cluster.scheduler_address, security=security, timeout=60) as client:
        client.wait_for_workers(2, timeout=60)
        remote = ELMClassifier(n_hidden=40, random_state=0).fit(dataset, client=client)
        # the workers really computed it: every task ran on a tls:// worker
        assert all(w.startswith("tls://") for w in client.scheduler_info()["workers"])
    np.testing.assert_array_equal(remote.coef_, plain.coef_)


def test_dask_configuration_gives_the_certificates(tls_cluster, certificates):
    import dask

    cert, key = certificates["client"]
    with dask.config.set(
        {
            "distributed.comm.tls.ca-file": certificates["ca"],
            "distributed.comm.tls.client.cert": cert,
            "distributed.comm.tls.client.key": key,
        }
    ):
        with connect_dask(tls_cluster.scheduler_address, timeout=60) as client:
            assert client.submit(sum, [1, 2]).result(timeout=60) == 3


def test_a_tls_address_without_certificates_is_refused_naming_it(tls_cluster):
    with pytest.raises(ValueError, match=r"tls://127\.0\.0\.1:\d+ speaks TLS.*--tls-ca-file"):
        connect_dask(tls_cluster.scheduler_address, timeout=10)


def test_a_certificate_of_another_ca_is_refused_naming_the_scheduler(tls_cluster, certificates):
    cert, key = certificates["client"]
    security = tls_security(certificates["other_ca"], cert, key)  # trusts no cluster cert
    with pytest.raises(ConnectionError, match=r"tls://127\.0\.0\.1:\d+"):
        connect_dask(tls_cluster.scheduler_address, security=security, timeout=5)


def test_a_missing_tls_file_is_named(certificates, tmp_path):
    cert, key = certificates["client"]
    with pytest.raises(ValueError, match=r"CA file .*nowhere\.pem: no such readable file"):
        tls_security(str(tmp_path / "nowhere.pem"), cert, key)
    with pytest.raises(ValueError, match="needs a certificate"):
        tls_security(certificates["ca"], None, key)


PIPELINE = """
[run]
name = "{name}"
task = "train"
seed = 3
[data]
train = "{d}/train"
label = "label"
[model]
estimator = "ELMClassifier"
params = {{ n_hidden = 40 }}
[compute]
{compute}
[output]
dir = "{d}/runs"
"""


def _elmscale(*args, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "elmscale", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=CLEAN_ENV,
    )


def _pipeline(tmp_path, data_set, name, compute=""):
    path = tmp_path / f"{name}.toml"
    path.write_text(PIPELINE.format(d=data_set, name=name, compute=compute))
    return path


def _model_coef(data_set, name):
    from elmscale import load
    from elmscale.core.pipelines import final_estimator

    (run,) = sorted((data_set / "runs").glob(f"{name}-*"))
    return final_estimator(load(run / "model.elm")).coef_


def test_elmscale_run_over_tls_with_flags_and_with_the_files_keys(
    tls_cluster, certificates, data_set, tmp_path
):
    cert, key = certificates["client"]
    address = tls_cluster.scheduler_address
    local = _elmscale("run", _pipeline(tmp_path, data_set, "tls-local"), "--scheduler", "")
    flags = _elmscale(
        "run",
        _pipeline(tmp_path, data_set, "tls-flags"),
        "--scheduler",
        address,
        "--tls-ca-file",
        certificates["ca"],
        "--tls-cert",
        cert,
        "--tls-key",
        key,
    )
    assert flags.returncode == 0, flags.stderr[-3000:]
    keys = (
        f'scheduler = "{address}"\ntls_ca_file = "{certificates["ca"]}"\n'
        f'tls_cert = "{cert}"\ntls_key = "{key}"'
    )
    in_file = _elmscale("run", _pipeline(tmp_path, data_set, "tls-keys", keys))
    assert in_file.returncode == 0, in_file.stderr[-3000:]
    assert local.returncode == 0, local.stderr[-3000:]
    expected = _model_coef(data_set, "tls-local")
    np.testing.assert_array_equal(_model_coef(data_set, "tls-flags"), expected)
    np.testing.assert_array_equal(_model_coef(data_set, "tls-keys"), expected)


def test_elmscale_run_refuses_tls_without_certificates_before_running(
    tls_cluster, data_set, tmp_path
):
    address = tls_cluster.scheduler_address
    out = _elmscale("run", _pipeline(tmp_path, data_set, "tls-none"), "--scheduler", address)
    assert out.returncode == 2, out.stderr[-3000:]
    assert f"{address} speaks TLS" in out.stderr and "--tls-ca-file" in out.stderr
    assert not list((data_set / "runs").glob("tls-none-*"))  # nothing was started
    bad = _pipeline(tmp_path, data_set, "tls-bad", 'tls_ca_file = "/nowhere/ca.pem"')
    out = _elmscale("validate", bad)
    assert out.returncode == 2 and "compute.tls_ca_file: /nowhere/ca.pem: no such file" in (
        out.stderr
    )
