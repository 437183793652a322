"""SIGTERM mid-work stops each long-running command and everything it started (issue 41).

Each test starts the command in a session of its own on small generated inputs
(``tests/_reliability.py``: :func:`kill_commands`), sends SIGTERM to the command alone
once it is at work, and checks that it exits 143 naming it, that every one of its
processes (its session's, or any carrying its environment tag) ends, and that no
half-written file is left.  The processes are polled until none is running, for as long
as the test's pytest-timeout allows less what its checks after need (:func:`ends_at`):
one that never ends fails the test, named, while a loaded machine's slower ending does
not (``benchmarks/stress.py --only kill`` reports what is left
:data:`~_reliability.GRACE_S` seconds after the signal, and how long it lingers; it runs
the whole matrix: SIGINT, SIGTERM, SIGKILL, at start-up and mid-work, then a rerun).
"""

import signal
import time

import _reliability as rel
import pytest

pytestmark = pytest.mark.skipif(
    not __import__("sys").platform.startswith("linux"), reason="Linux process lifelines"
)

#: seconds of a test's time limit kept for what follows the wait for the command's
#: processes to end: killing those left, reading its output, checking its files
AFTER_WAIT_S = 30.0
#: and, in the SIGKILL test, its rerun too (a dry run: seconds)
RERUN_S = 90.0


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return tmp_path_factory.mktemp("kill")


@pytest.fixture
def ends_at(request) -> float:
    """When (``time.monotonic()``) this test's pytest-timeout runs out, counted from now
    (its function fixtures' set-up; the module's fixture is a folder made): the limit of
    its ``timeout`` marker, else the configured one; 300 s where none is set."""
    marker = request.node.get_closest_marker("timeout")
    limit = marker.args[0] if marker is not None and marker.args else None
    if limit is None:
        limit = request.config.getoption("timeout", None)
    if limit is None:
        try:
            limit = request.config.getini("timeout")
        except ValueError:  # pytest-timeout not installed
            limit = None
    return time.monotonic() + (float(limit or 0) or 300.0)


def _sigterm_mid_work(inputs, name: str, ends_at: float) -> None:
    command = rel.kill_commands(inputs)[name]
    stopped = rel.stop_command(
        command.argv,
        signal.SIGTERM,
        ready=command.ready,
        delay=command.delay,
        env=command.env,
        ready_timeout=180,
        gone_by=ends_at - AFTER_WAIT_S,
    )
    assert stopped.ready, f"{name} never reached its work: {stopped.err[-500:]}"
    assert not stopped.left, (
        f"{len(stopped.left)} of its processes still running {stopped.waited_s:.0f} s after "
        f"SIGTERM (the test's time limit less {AFTER_WAIT_S:g} s): {stopped.left}"
    )
    assert stopped.code == 143, (stopped.code, stopped.err[-800:])
    # its own last word (the resource tracker may report after it the semaphores of the
    # piece workers it killed, and clean them up)
    assert "elmscale: terminated" in stopped.err.splitlines(), stopped.err[-800:]
    assert "Traceback" not in stopped.err, stopped.err[-1500:]
    assert not command.partial(), command.partial()


@pytest.mark.timeout(300)
def test_sigterm_stops_reproduce_and_its_piece_workers(inputs, ends_at):
    """The confirmed defect: the forkserver and its piece workers ran on for minutes."""
    _sigterm_mid_work(inputs, "reproduce", ends_at)


@pytest.mark.timeout(300)
def test_sigkill_of_reproduce_ends_its_forkserver_and_piece_workers(inputs, ends_at):
    """Killed outright, the command cannot clean up: the workers' and the forkserver's
    lifelines end them, and the rerun resumes from the journal."""
    command = rel.kill_commands(inputs, full_rerun=False)["reproduce"]
    stopped = rel.stop_command(
        command.argv,
        signal.SIGKILL,
        ready=command.ready,
        delay=command.delay,
        ready_timeout=180,
        gone_by=ends_at - AFTER_WAIT_S - RERUN_S,
    )
    assert stopped.ready, stopped.err[-500:]
    assert len(stopped.at_signal) >= 4, stopped.at_signal  # forkserver, worker(s), tracker
    assert not stopped.left, f"still running {stopped.waited_s:.0f} s after SIGKILL: {stopped.left}"
    assert stopped.code == -signal.SIGKILL
    assert not command.partial()
    rerun_s = max(1.0, ends_at - AFTER_WAIT_S - time.monotonic())  # RERUN_S at least
    verdict = command.check(rel.rerun(command, timeout=rerun_s))
    assert verdict.startswith("resumable"), verdict


@pytest.mark.timeout(300)
def test_sigterm_stops_run_and_its_local_ray_and_dask(inputs, ends_at):
    _sigterm_mid_work(inputs, "run", ends_at)


@pytest.mark.timeout(300)
def test_sigterm_stops_score(inputs, ends_at):
    _sigterm_mid_work(inputs, "score", ends_at)


@pytest.mark.timeout(300)
def test_sigterm_stops_train(inputs, ends_at):
    _sigterm_mid_work(inputs, "train", ends_at)


@pytest.mark.timeout(300)
def test_sigterm_stops_warmup(inputs, ends_at):
    _sigterm_mid_work(inputs, "warmup", ends_at)


def test_sigterm_raises_terminated_and_restores_the_handler():
    import os
    import time

    from elmscale.core.lifeline import Terminated, exit_code, sigterm_raises

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as caught, sigterm_raises():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at once
    assert exit_code(caught.value) == 143
    assert exit_code(KeyboardInterrupt()) == 130
    assert signal.getsignal(signal.SIGTERM) == before


def _ray_started(marker: str):
    """``ready`` for :func:`_reliability.stop_command`: a process of the command's whose
    command line names ``marker`` (one of the servers ``ray.init`` starts) is running."""
    import contextlib

    import psutil

    def ready(pid, out_path):
        with contextlib.suppress(psutil.Error):
            for proc in psutil.Process(pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if marker in " ".join(proc.cmdline()):
                        return True
        return False

    return ready


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("marker", "delay"),
    [
        ("gcs_server", 0.0),  # ray.init starting its head's processes (Python)
        ("raylet/raylet", 0.5),  # ray.init waiting in C++ for its node to register
    ],
)
def test_ctrl_c_during_local_ray_start_up(tmp_path, ends_at, marker, delay):
    """Issue 50's follow-up: Ctrl-C (SIGINT to the process group) while ``elmscale run``
    starts its local Ray.  Once the raylet ran, ``ray.init`` waits for it in C++, where no
    Python handler runs: the command stayed there until its 8 s deadline exited it, and
    the raylet's agents, which no lifeline ties to the command, ran on for a minute more.
    Now it exits 130 by its own unwinding, and its Ray's processes end within seconds."""
    pipeline = tmp_path / "run.toml"
    pipeline.write_text(
        rel.KILL_PIPELINE.format(
            train=tmp_path / "train", score=tmp_path / "unused", rows=600, runs=tmp_path / "runs"
        ).replace(f'score = "{tmp_path / "unused"}"\n', "")
    )
    stopped = rel.stop_command(
        [*rel.ELMSCALE, "run", pipeline],
        signal.SIGINT,
        ready=_ray_started(marker),
        delay=delay,
        ready_timeout=120,
        gone_by=ends_at - AFTER_WAIT_S,
    )
    assert stopped.ready, f"no {marker} started: {stopped.err[-800:]}"
    assert not stopped.left, f"still running {stopped.waited_s:.0f} s after: {stopped.left}"
    assert stopped.code == 130, (stopped.code, stopped.err[-1500:])
    # its own unwinding, not the deadline's exit ("still stopping 8 s after the signal")
    assert stopped.err.splitlines()[-1] == "elmscale: interrupted", stopped.err[-1500:]
    assert "Traceback" not in stopped.err, stopped.err[-1500:]
    assert stopped.gone_s is not None and stopped.gone_s < 30, stopped.gone_s
    assert not list((tmp_path / "runs").rglob("metrics.json"))
