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
    if started is None:

        def started():
            return any(client.processing().values())

    # on the work's state, not a clock: busy cores can hold its start back for long
    while runner.is_alive() and not started():
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
    """Wait until the worker killed since ``pids`` (the workers' ``client.run(os.getpid)``
    before) has been replaced, so that the next test sees the same cluster.

    It waits on the cluster's state, not on a clock: while a nanny is bringing its worker
    back (a new process starting, slow on busy cores: issue 49 saw 120 s pass), it waits;
    a nanny that has given up (its restart failed or timed out, which Dask does not retry)
    is replaced through the cluster's spec (:func:`restore_workers`).  The test's own
    pytest-timeout bounds the wait."""
    restore_workers(client, len(pids), replaced=set(pids.values()))


def _worker_pids(client) -> dict:
    try:
        return client.run(os.getpid)
    except Exception:  # a worker leaving or arriving while asked; ask again
        return {}


def restore_workers(client, n_workers: int, *, replaced: set | None = None) -> None:
    """Wait until ``client``'s cluster has ``n_workers`` live workers (their processes no
    longer exactly ``replaced``: one of those was killed), replacing any worker whose
    nanny has stopped trying.

    A :class:`distributed.LocalCluster` restarts a killed worker through its nanny; when
    the restart itself fails (under load, the new process can outlast the nanny's start),
    the nanny closes and the cluster stays one short for good: the spec entry of such a
    nanny is dropped and the cluster scaled back to ``n_workers``, which starts a new one.
    """
    cluster = getattr(client, "cluster", None)
    while True:
        now = _worker_pids(client)  # a test's timeout shows it in the traceback
        if len(now) == n_workers and (replaced is None or set(now.values()) != replaced):
            return
        if cluster is not None and hasattr(cluster, "worker_spec"):
            stopped = [
                name
                for name, nanny in list(cluster.workers.items())
                if str(getattr(nanny, "status", "")).endswith(("closed", "failed"))
            ]
            if stopped:
                for name in stopped:
                    cluster.worker_spec.pop(name, None)
                cluster.scale(n_workers)
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
