"""SIGTERM mid-work stops each long-running command and everything it started (issue 41).

Each test starts the command in a session of its own on small generated inputs
(``tests/_reliability.py``: :func:`kill_commands`), sends SIGTERM to the command alone
once it is at work, and checks that it exits 143 naming it, that none of its processes
(its session's, or any carrying its environment tag) is left
:data:`~_reliability.GRACE_S` seconds later, and that no half-written file is left.
``benchmarks/stress.py --only kill`` runs the whole matrix (SIGINT, SIGTERM, SIGKILL, at
start-up and mid-work, then a rerun).
"""

import signal

import _reliability as rel
import pytest

pytestmark = pytest.mark.skipif(
    not __import__("sys").platform.startswith("linux"), reason="Linux process lifelines"
)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    return tmp_path_factory.mktemp("kill")


def _sigterm_mid_work(inputs, name: str) -> None:
    command = rel.kill_commands(inputs)[name]
    stopped = rel.stop_command(
        command.argv,
        signal.SIGTERM,
        ready=command.ready,
        delay=command.delay,
        env=command.env,
        ready_timeout=180,
    )
    assert stopped.ready, f"{name} never reached its work: {stopped.err[-500:]}"
    assert not stopped.left, (
        f"{len(stopped.left)} of its processes still running {rel.GRACE_S:g} s after "
        f"SIGTERM: {stopped.left}"
    )
    assert stopped.code == 143, (stopped.code, stopped.err[-800:])
    # its own last word (the resource tracker may report after it the semaphores of the
    # piece workers it killed, and clean them up)
    assert "elmscale: terminated" in stopped.err.splitlines(), stopped.err[-800:]
    assert "Traceback" not in stopped.err, stopped.err[-1500:]
    assert not command.partial(), command.partial()


@pytest.mark.timeout(300)
def test_sigterm_stops_reproduce_and_its_piece_workers(inputs):
    """The confirmed defect: the forkserver and its piece workers ran on for minutes."""
    _sigterm_mid_work(inputs, "reproduce")


@pytest.mark.timeout(300)
def test_sigkill_of_reproduce_ends_its_forkserver_and_piece_workers(inputs):
    """Killed outright, the command cannot clean up: the workers' and the forkserver's
    lifelines end them, and the rerun resumes from the journal."""
    command = rel.kill_commands(inputs, full_rerun=False)["reproduce"]
    stopped = rel.stop_command(
        command.argv, signal.SIGKILL, ready=command.ready, delay=command.delay, ready_timeout=180
    )
    assert stopped.ready, stopped.err[-500:]
    assert len(stopped.at_signal) >= 4, stopped.at_signal  # forkserver, worker(s), tracker
    assert not stopped.left, f"still running {rel.GRACE_S:g} s after SIGKILL: {stopped.left}"
    assert stopped.code == -signal.SIGKILL
    assert not command.partial()
    verdict = command.check(rel.rerun(command, timeout=240))
    assert verdict.startswith("resumable"), verdict


@pytest.mark.timeout(300)
def test_sigterm_stops_run_and_its_local_ray_and_dask(inputs):
    _sigterm_mid_work(inputs, "run")


@pytest.mark.timeout(300)
def test_sigterm_stops_score(inputs):
    _sigterm_mid_work(inputs, "score")


@pytest.mark.timeout(300)
def test_sigterm_stops_train(inputs):
    _sigterm_mid_work(inputs, "train")


@pytest.mark.timeout(300)
def test_sigterm_stops_warmup(inputs):
    _sigterm_mid_work(inputs, "warmup")


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
