"""Real faults for the distributed tests: one Dask worker process killed mid-computation,
from outside (:func:`run_killing_a_worker`) or by the task it runs
(:func:`kill_the_worker_once`)."""

from __future__ import annotations

import os
import signal
import threading
import time


def run_killing_a_worker(
    client, fn, *, settle: float, timeout: float = 300.0, started=None, recover: bool = True
):
    """Run ``fn()`` on a thread, SIGKILL one of ``client``'s worker processes ``settle``
    seconds after the work has started (``started()`` is true; default: the cluster is
    processing tasks), and return ``fn()``'s result (its error is raised).  Fails if ``fn``
    ended before the kill or did not end within ``timeout`` seconds of it; with
    ``recover``, waits until the nanny has brought a new worker process back (so that the
    next test sees the same cluster)."""
    pids = client.run(os.getpid)
    outcome = {}

    def target():
        try:
            outcome["result"] = fn()
        except BaseException as exc:  # raised below, in the test's thread
            outcome["error"] = exc

    runner = threading.Thread(target=target, daemon=True)  # a hung fit must not hold up exit
    runner.start()
    deadline = time.monotonic() + 30
    if started is None:

        def started():
            return any(client.processing().values())

    while not started() and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(settle)
    victim = next(iter(pids.values()))
    os.kill(victim, signal.SIGKILL)
    assert runner.is_alive(), "the work finished before the worker was killed"
    runner.join(timeout)
    assert not runner.is_alive(), f"the work did not finish within {timeout} s of the kill"
    if "error" in outcome:
        raise outcome["error"]
    if recover:
        wait_for_a_new_worker(client, pids)
    return outcome["result"]


def wait_for_a_new_worker(client, pids: dict) -> None:
    """Wait until the nanny has brought back the worker killed since ``pids`` (the
    workers' ``client.run(os.getpid)`` before), so that the next test sees the same
    cluster."""
    # wait_for_workers may count the dead worker before the scheduler drops it
    deadline = time.monotonic() + 120
    while True:
        try:
            now = client.run(os.getpid)
        except Exception:  # a worker leaving while asked; ask again
            now = {}
        if len(now) == len(pids) and set(now.values()) != set(pids.values()):
            break
        assert time.monotonic() < deadline, f"the cluster did not recover: {now}"
        time.sleep(0.2)


def kill_the_worker_once(marker: str, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, except the first call of all (the one that creates the
    file ``marker``) SIGKILLs its own process: a Dask worker lost mid-task, as the
    kernel's OOM killer takes it."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return fn(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("not reached")
