"""Ray fan-out on a real local Ray: one-vs-one pairs and grid search equal local runs."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import psutil
import pytest
from _datasets import shared_data
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV as SklearnGridSearchCV
from sklearn.model_selection import StratifiedKFold

from elmscale import ELMClassifier, SparseELMClassifier
from elmscale.data import Scaler, generate_classification, load
from elmscale.distributed.connect import is_loopback
from elmscale.distributed.executors import PieceFailed
from elmscale.model_selection import GridSearchCV, paper_grid


@pytest.fixture(scope="session")  # as ray_session: set up first, skips before Ray starts
def satimage():
    train = load(shared_data("satimage", "satimage.scale"))
    return Scaler().fit_transform(train.X), train.y


@pytest.mark.needs_shared
def test_ray_one_vs_one_equals_local_on_satimage(satimage, ray_session):
    X, y = satimage
    model = SparseELMClassifier(sigma=2.0, C=5.0)
    local = clone(model).fit(X, y)
    on_ray = clone(model).fit(X, y, ray_address="auto")
    assert len(on_ray.pairs_) == 15
    np.testing.assert_array_equal(on_ray.support_, local.support_)
    np.testing.assert_allclose(on_ray.dual_coef_, local.dual_coef_, rtol=0, atol=1e-8)
    np.testing.assert_array_equal(on_ray.predict(X), local.predict(X))
    path = clone(model).fit_path(X[:1500], y[:1500], [1.0, 5.0], ray_address="auto")
    alone = clone(model).fit_path(X[:1500], y[:1500], [1.0, 5.0])
    for a, b in zip(path, alone):
        np.testing.assert_array_equal(a.dual_coef_, b.dual_coef_)


def _small_problem():
    data = generate_classification(900, n_features=6, n_classes=3, random_state=11)
    return data.X, data.y


GRID = {"C": [0.5, 5.0, 50.0], "sigma": [0.5, 2.0]}


def test_calibration_folds_on_ray_equal_local(ray_session):
    """probability=True: the five out-of-fold fits as Ray tasks give the local calibration."""
    X, y = _small_problem()
    model = SparseELMClassifier(C=5.0, sigma=2.0, random_state=0, probability=True)
    local = clone(model).fit(X, y)
    on_ray = clone(model).fit(X, y, ray_address="auto")
    assert on_ray.probability_coupling_ == "pairwise"
    np.testing.assert_array_equal(on_ray.prob_a_, local.prob_a_)
    np.testing.assert_array_equal(on_ray.prob_b_, local.prob_b_)
    np.testing.assert_array_equal(on_ray.predict_proba(X), local.predict_proba(X))


def test_grid_search_is_the_same_locally_and_on_ray(ray_session):
    X, y = _small_problem()
    search = GridSearchCV(SparseELMClassifier(), GRID, cv=3, random_state=4)
    local = clone(search).fit(X, y)
    on_ray = clone(search).set_params(ray_address="auto").fit(X, y)
    assert local.n_pieces_ == 3 * 2 * 3  # folds x sigmas x pairs
    for key in ("mean_test_score", "split0_test_score", "split2_test_score", "rank_test_score"):
        np.testing.assert_array_equal(on_ray.cv_results_[key], local.cv_results_[key])
    assert on_ray.best_params_ == local.best_params_
    np.testing.assert_array_equal(
        on_ray.best_estimator_.predict(X), local.best_estimator_.predict(X)
    )
    # each candidate's fold score is that of a separate fit (warm starts stop within tol:
    # at most a row or two may change side)
    splits = list(StratifiedKFold(3, shuffle=True, random_state=4).split(X, y))
    for params, *fold_scores in zip(
        local.cv_results_["params"], *(local.cv_results_[f"split{k}_test_score"] for k in range(3))
    ):
        for (train, test), score in zip(splits, fold_scores):
            alone = SparseELMClassifier(**params).fit(X[train], y[train]).score(X[test], y[test])
            assert abs(alone - score) <= 2.0 / len(test)


def test_grid_search_of_the_unified_elm_matches_sklearn(ray_session):
    X, y = _small_problem()
    grid = {"C": [0.1, 10.0, 1000.0], "sigma": [0.5, 1.0]}
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    ours = GridSearchCV(ELMClassifier(kernel="gaussian"), grid, cv=cv, ray_address="auto").fit(X, y)
    theirs = SklearnGridSearchCV(ELMClassifier(kernel="gaussian"), grid, cv=cv).fit(X, y)
    order = [ours.cv_results_["params"].index(p) for p in theirs.cv_results_["params"]]
    np.testing.assert_allclose(
        ours.cv_results_["mean_test_score"][order],
        theirs.cv_results_["mean_test_score"],
        atol=1e-12,
    )
    assert ours.best_params_ == theirs.best_params_


def test_results_do_not_depend_on_ray_cpus(ray_session, tmp_path):
    X, y = _small_problem()
    two = GridSearchCV(SparseELMClassifier(), GRID, cv=3, random_state=4, ray_address="auto").fit(
        X, y
    )
    script = f"""
import json
from elmscale import SparseELMClassifier
from elmscale.data import generate_classification
from elmscale.distributed.connect import start_local_ray
from elmscale.model_selection import GridSearchCV
start_local_ray(num_cpus=1, include_dashboard=False, log_to_driver=False)
data = generate_classification(900, n_features=6, n_classes=3, random_state=11)
search = GridSearchCV(SparseELMClassifier(), {GRID!r}, cv=3, random_state=4,
                      ray_address="auto").fit(data.X, data.y)
search.save_results({str(tmp_path / "one_cpu.json")!r})
"""
    subprocess.run(
        [sys.executable, "-c", script],
        check=True,
        timeout=300,
        env={**os.environ, "RAY_ADDRESS": ""},
    )
    rows = json.loads((tmp_path / "one_cpu.json").read_text())
    np.testing.assert_array_equal(
        [r["mean_test_score"] for r in rows], two.cv_results_["mean_test_score"]
    )
    assert [r["params"] for r in rows] == two.cv_results_["params"]


@pytest.mark.timeout(120)
def test_the_local_ray_listens_on_loopback_only(ray_session):
    """The session's Ray, started by elmscale's start_local_ray: its node address is
    127.0.0.1 and every socket this process and its children (GCS, raylet, workers,
    agents) listen on is a loopback one; Ray's own servers are among them."""
    ray = ray_session
    ray.get(ray.remote(lambda: 1).remote())  # a worker up, its gRPC server listening
    me = psutil.Process()
    listening = []
    for proc in [me] + me.children(recursive=True):
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    listening.append((proc.name(), conn.laddr.ip, conn.laddr.port))
        except psutil.Error:  # a process that ended meanwhile
            pass
    beyond = [entry for entry in listening if not is_loopback(entry[1])]
    assert not beyond, f"listening beyond loopback: {beyond}"
    assert ray.util.get_node_ip_address() == "127.0.0.1"
    node = [n for n in ray.nodes() if n["Alive"]][0]
    gcs_port = int(ray.get_runtime_context().gcs_address.rsplit(":", 1)[1])
    ports = {port for _, _, port in listening}
    for name, port in [
        ("GCS server", gcs_port),
        ("raylet node manager", node["NodeManagerPort"]),
        ("raylet object manager", node["ObjectManagerPort"]),
        ("runtime env agent", node["RuntimeEnvAgentPort"]),
    ]:
        assert port in ports, f"{name} (port {port}) not found listening: {listening}"


def test_a_failing_piece_names_its_fold_and_parameters(ray_session):
    X, y = _small_problem()
    for ray_address in (None, "auto"):
        search = GridSearchCV(
            SparseELMClassifier(kernel="polynomial"),
            {"C": [1.0], "degree": [2, 0]},
            cv=2,
            ray_address=ray_address,
        )
        with pytest.raises(PieceFailed, match=r"fold 0, parameters \{'degree': 0\}.*degree"):
            search.fit(X, y)


def _task_processes():
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if cmd.startswith("ray::_run_piece"):
            found.append(proc.info["pid"])
    return found


def test_a_killed_ray_worker_does_not_change_the_grid(ray_session):
    data = generate_classification(6000, n_features=8, random_state=12)
    search = GridSearchCV(
        SparseELMClassifier(),
        {"C": [1.0, 10.0, 100.0, 1000.0], "sigma": [0.3, 0.5, 1.0]},
        cv=4,
        random_state=1,
        ray_address="auto",
        refit=False,
    )
    reference = clone(search).fit(data.X, data.y)
    outcome = {}

    def run():
        try:
            outcome["search"] = clone(search).fit(data.X, data.y)
        except BaseException as exc:  # reported below
            outcome["error"] = exc

    runner = threading.Thread(target=run, daemon=True)  # never holds up the exit
    runner.start()
    deadline, victims = time.monotonic() + 60, []
    while not victims and time.monotonic() < deadline:
        victims = _task_processes()
        time.sleep(0.02)
    assert victims, "no running grid task found"
    time.sleep(0.2)
    os.kill(victims[0], signal.SIGKILL)
    assert runner.is_alive(), "the grid finished before the worker was killed"
    runner.join(300)
    assert not runner.is_alive(), "the grid did not finish within 300 s"
    assert "error" not in outcome, outcome.get("error")
    np.testing.assert_array_equal(
        outcome["search"].cv_results_["mean_test_score"], reference.cv_results_["mean_test_score"]
    )
    assert not psutil.pid_exists(victims[0]) or psutil.Process(victims[0]).status() == "zombie"


def test_reports_csv_json_heatmap_and_paper_grid(tmp_path):
    X, y = _small_problem()
    search = GridSearchCV(SparseELMClassifier(), GRID, cv=2, refit=False).fit(X, y)
    csv = search.save_results(tmp_path / "cv.csv")
    assert csv.read_text().splitlines()[0].startswith("params,param_C,param_sigma,split0")
    rows = json.loads(search.save_results(tmp_path / "cv.json").read_text())
    assert len(rows) == 6 and rows[0]["params"] == {"C": 0.5, "sigma": 0.5}
    png = search.plot_heatmap(tmp_path / "cv.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))
    with pytest.raises(ValueError, match="expected a .csv or .json"):
        search.save_results(tmp_path / "cv.txt")
    grid = paper_grid("gaussian")
    assert len(grid["C"]) == 14 and grid["sigma"][0] == 0.01 and grid["sigma"][-1] == 1000
    assert paper_grid("polynomial")["degree"] == [1, 2, 3, 4, 5]


def test_progress_bar_reports_pieces(capsys):
    X, y = _small_problem()
    GridSearchCV(
        SparseELMClassifier(), {"C": [1.0], "sigma": [1.0]}, cv=2, refit=False, progress=True
    ).fit(X, y)
    err = capsys.readouterr().err
    assert "grid pieces" in err and "6/6" in err


def test_random_node_pieces_share_one_layer():
    X, y = _small_problem()
    search = GridSearchCV(
        SparseELMClassifier(hidden="sigmoid", n_hidden=30), {"C": [1.0, 10.0]}, cv=2, random_state=5
    )
    first, second = clone(search).fit(X, y), clone(search).fit(X, y)
    np.testing.assert_array_equal(
        first.cv_results_["mean_test_score"], second.cv_results_["mean_test_score"]
    )
    seed = first.best_estimator_.random_state
    assert isinstance(seed, int)
    splits = list(StratifiedKFold(2, shuffle=True, random_state=5).split(X, y))
    train, test = splits[0]
    alone = SparseELMClassifier(
        hidden="sigmoid", n_hidden=30, random_state=seed, C=first.cv_results_["params"][0]["C"]
    ).fit(X[train], y[train])
    assert abs(
        alone.score(X[test], y[test]) - first.cv_results_["split0_test_score"][0]
    ) <= 2.0 / len(test)


def test_a_task_imports_elmscale_numerics_without_scikit_learn():
    # what a grid piece or a one-vs-one pair task imports on a worker: scikit-learn
    # (1.6 s of a worker's 2 s start) must stay out of it
    code = (
        "import sys, elmscale.distributed.ray_tasks, elmscale.models.sparse_elm_pairs; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


@pytest.mark.timeout(180)
def test_another_process_joins_the_local_ray_through_connect_ray(ray_session):
    """A second process (no switch in its environment) given the session's loopback
    address by connect_ray reaches it: Ray alone would swap 127.0.0.1 for the machine's
    outward address there and fail after minutes."""
    address = ray_session.get_runtime_context().gcs_address
    assert address.startswith("127.0.0.1:")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    script = (
        "import sys, ray\n"
        "from elmscale.distributed.connect import connect_ray\n"
        "connect_ray(sys.argv[1])\n"
        "print(ray.get(ray.remote(lambda: 41).remote()) + 1)\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, address],
        env=env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.split()[-1] == "42"
