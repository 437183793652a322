"""The local Ray of ``elmscale run`` / ``run_pipeline``: closing a run ends the processes of
the Ray it started and no other's (issue 50), and runs in threads of one process share it.

Each test runs in a fresh Python process of its own (the test session may hold a Ray of
its own, and a Ray is one per process), in a process group of its own, which the test
kills at the end whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="Linux process trees (psutil)"
)

# The driver's helpers: the other head (`ray start --head --block`, a child of the driver,
# as a `ray start` run by the user's script would be) and a watch of the driver's Ray
# processes (their own session's and the other head's) while the work runs.
_HELPERS = r'''
import contextlib, json, os, socket, subprocess, sys, threading, time
from pathlib import Path

import psutil

BIN = Path(sys.executable).parent
AGENT_PORTS = ("dashboard-agent-listen-port", "dashboard-agent-grpc-port",
               "runtime-env-agent-port", "metrics-export-port", "ray-client-server-port")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_other_head(temp_dir, log):
    """`ray start --head --block` with its own temp dir and ports; returns the process once
    its GCS accepts connections."""
    port = free_port()
    argv = [str(BIN / "ray"), "start", "--head", "--block", "--port", str(port),
            "--temp-dir", temp_dir, "--num-cpus", "1", "--include-dashboard", "false",
            "--object-store-memory", str(100 * 2**20), "--disable-usage-stats",
            *[f"--{name}={free_port()}" for name in AGENT_PORTS]]
    with open(log, "wb") as out:
        head = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while head.poll() is None and time.monotonic() < deadline:
        if "Ray runtime started" in Path(log).read_text(errors="replace"):
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return head
        time.sleep(0.5)
    raise SystemExit("the other head did not start: " + Path(log).read_text()[-2000:])


def tree(pid):
    with contextlib.suppress(psutil.Error):
        top = psutil.Process(pid)
        return [top, *top.children(recursive=True)]
    return []


def is_ray(proc):
    with contextlib.suppress(psutil.Error):
        command = " ".join(proc.cmdline())
        return command.startswith("ray::") or f"{os.sep}ray{os.sep}" in command
    return False


def alive(proc):
    with contextlib.suppress(psutil.Error):
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    return False


def settled_tree(pid, quiet=3.0, timeout=90.0):
    """The processes of ``pid``'s tree once none has come or gone for ``quiet`` s (a head
    just up may still start or end a worker)."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while True:
        procs = tree(pid)
        now = {p.pid for p in procs}
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet or time.monotonic() > deadline:
            return procs
        time.sleep(0.2)


class Watch:
    """The other head's processes when the block starts, and every other Ray process below
    the driver seen while it runs (this process's own Ray's: not there before)."""

    def __init__(self, head):
        self.head = head
        self.before = {(p.pid, p.create_time()) for p in psutil.Process().children(recursive=True)}
        self.ours, self.other = {}, settled_tree(head.pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _look(self):
        other = {p.pid for p in tree(self.head.pid)}
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                key = (proc.pid, proc.create_time())
                if proc.pid not in other and key not in self.before and is_ray(proc):
                    self.ours[key] = proc

    def _run(self):
        while not self._stop.is_set():
            self._look()
            time.sleep(0.05)

    def __enter__(self):
        self._look()
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(30)

    def report(self, grace=15.0):
        """What is left ``grace`` s after the close, as JSON."""
        _, left = psutil.wait_procs(list(self.ours.values()), timeout=grace)
        left = [p for p in left if alive(p)]
        dead = [p for p in self.other if not alive(p)]
        describe = lambda p: f"{p.pid} {' '.join(p.cmdline())[:120] if alive(p) else ''}"
        return {"ours": len(self.ours), "ours_left": [describe(p) for p in left],
                "other": len(self.other), "other_dead": [p.pid for p in dead],
                "other_head_exited": self.head.poll()}


def stop_other_head(head):
    """SIGTERM `ray start --block` (it stops its processes), then SIGKILL what is left."""
    procs = tree(head.pid)
    head.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        head.wait(60)
    _, left = psutil.wait_procs(procs, timeout=30)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
'''

# run_pipeline's local Ray beside another head started by the same process
_RUN_BESIDE_ANOTHER_HEAD = r'''
from elmscale.app.pipeline import load_pipeline
from elmscale.app.runner import run_pipeline
from elmscale.data import generate_classification, write_parquet

work = Path(sys.argv[1])
write_parquet(generate_classification(600, n_features=4, random_state=0), work / "train.parquet")
(work / "run.toml").write_text(f"""
[run]
name = "beside"
task = "cv"
[data]
train = "{work}/train.parquet"
[model]
estimator = "SparseELMClassifier"
params = {{ kernel = "gaussian" }}
[search]
grid = {{ C = [1, 10] }}
folds = 2
[compute]
workers = 1
[output]
dir = "{work}/runs"
""")
head = start_other_head(sys.argv[2], work / "other-head.log")
try:
    with Watch(head) as watch:
        metrics, _ = run_pipeline(load_pipeline(work / "run.toml"), echo=lambda *a: None,
                                  progress=False)
    assert metrics["compute"]["ray"] == "local Ray", metrics["compute"]
    print("RESULT " + json.dumps(watch.report()), flush=True)
finally:
    stop_other_head(head)
'''

# two runs' Compute objects in threads, as two run_pipeline calls in threads share them
_TWO_RUNS_IN_THREADS = r"""
import ray

from elmscale.app.runner import Compute, resolve_compute


@ray.remote
def where():
    return os.getpid()


target = resolve_compute(None)
assert target["local"], target
first, second = Compute(target, 1, 1), Compute(target, 1, 1)
started = threading.Barrier(2)


def start(compute):
    started.wait(30)  # side by side: both find no Ray yet
    assert compute.ray() == "auto"


threads = [threading.Thread(target=start, args=(c,)) for c in (first, second)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
assert ray.is_initialized()
own = [p for p in psutil.Process().children(recursive=True) if is_ray(p)]
ray.get(where.remote(), timeout=120)
first.close()  # the first run ends: the second's Ray runs on
after_first = {"initialized": ray.is_initialized(),
               "task": ray.get(where.remote(), timeout=120) > 0,
               "own_alive": sum(alive(p) for p in own)}
second.close()  # the last one shuts it down, and its processes end
_, left = psutil.wait_procs(own, timeout=15)
print("RESULT " + json.dumps({"after_first": after_first, "own": len(own),
                              "initialized": ray.is_initialized(),
                              "left": [p.pid for p in left if alive(p)]}), flush=True)
"""


def _drive(script: str, *args: str, timeout: float = 400) -> dict:
    """Run ``script`` (after the helpers) in a fresh Python in a process group of its own;
    returns its ``RESULT`` line's JSON.  The group is killed afterwards, whatever happened."""
    # no address in the environment: a run starts a local Ray
    env = {
        k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "DASK_SCHEDULER_ADDRESS")
    }
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    driver = subprocess.Popen(
        [sys.executable, "-c", _HELPERS + script, *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = driver.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            driver.communicate(timeout=30)
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    assert driver.returncode == 0 and lines, (driver.returncode, out[-2000:], err[-4000:])
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.timeout(600)
def test_closing_a_run_ends_its_own_ray_and_not_another_head(tmp_path):
    """The confirmed defect: the run's close SIGTERMed, then SIGKILLed, every descendant
    titled ray:: or run from Ray's folder, the processes of a `ray start` head started by
    the same process among them."""
    # a short temp dir: Ray's socket paths under it must stay within 107 characters
    head_temp = tempfile.mkdtemp(prefix="elmscale-other-ray-")
    try:
        found = _drive(_RUN_BESIDE_ANOTHER_HEAD, str(tmp_path), head_temp)
    finally:
        shutil.rmtree(head_temp, ignore_errors=True)
    assert found["other"] >= 3, found  # its gcs_server, raylet, agents, workers
    assert found["other_dead"] == [] and found["other_head_exited"] is None, found
    assert found["ours"] >= 3, found  # the run's own gcs_server, raylet, workers
    assert found["ours_left"] == [], found


@pytest.mark.timeout(600)
def test_runs_in_threads_share_the_local_ray_until_the_last_closes():
    """Two runs in threads of one process: the first to close shut the Ray down under the
    other; now the last to close does.  The threads that started them have ended by then,
    and Ray's servers are killed with the thread that started them (PR_SET_PDEATHSIG)."""
    found = _drive(_TWO_RUNS_IN_THREADS)
    assert found["after_first"] == {
        "initialized": True,
        "task": True,
        "own_alive": found["own"],
    }, found
    assert found["own"] >= 3 and not found["initialized"] and found["left"] == [], found
