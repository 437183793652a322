"""Real faults for the distributed tests: one Dask worker process killed mid-computation,
from outside (:func:`run_killing_a_worker`) or by the task it runs
(:func:`kill_the_worker_once`)."""

from __future__ import annotations

import os
import signal
import threading
import time


def run_killing_a_worker(
    client,
    fn,
    *,
    settle: float,
    timeout: float = 300.0,
    started=None,
    recover: bool = True,
    choose=None,
):
    """Run ``fn()`` on a thread, SIGKILL one of ``client``'s worker processes ``settle``
    seconds after the work has started (``started()`` is true; default: the cluster is
    processing tasks), and return ``fn()``'s result (its error is raised).  The worker
    killed: the first listed, or the one at the address ``choose()`` returns then.  Fails
    if ``fn`` ended before the kill or did not end within ``timeout`` seconds of it; with
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
    victim = pids[choose()] if choose is not None else next(iter(pids.values()))
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


def _nannies_settled(cluster, n_workers: int) -> bool:
    """Whether ``cluster`` (a spec cluster; anything else counts as settled) has exactly
    its spec's nannies, ``n_workers`` of them, all running: not one being closed under a
    live worker (the lost-worker timer closes the nanny before its worker leaves)."""
    if cluster is None or not hasattr(cluster, "worker_spec"):
        return True
    workers = dict(cluster.workers)
    return (
        len(workers) == n_workers
        and set(workers) == set(cluster.worker_spec)
        and all(str(getattr(nanny, "status", "")).endswith("running") for nanny in workers.values())
    )


def restore_workers(client, n_workers: int, *, replaced: set | None = None) -> None:
    """Wait until ``client``'s cluster has ``n_workers`` live workers (their processes no
    longer exactly ``replaced``: one of those was killed), replacing any worker whose
    nanny has stopped trying or that the cluster has dropped.

    A :class:`distributed.LocalCluster` restarts a killed worker through its nanny, and two
    of its states leave it one short for good:

    - the restart itself failed (under load, the new process can outlast the nanny's
      start): the nanny closes;
    - the worker was not back within ``distributed.deploy.lost-worker-timeout`` of its
      loss (15 s by default; a restart under load, or a second kill of the same worker
      within those 15 s, as consecutive tests do): the cluster closes the nanny and drops it
      from ``cluster.workers`` but keeps its spec entry, and nothing starts it again.

    Either way the given-up nanny is taken out of ``cluster.workers`` (its spec entry
    kept), and the cluster's own reconciliation (``_correct_state``, as ``scale`` runs it)
    starts a new one under the same name.
    """
    cluster = getattr(client, "cluster", None)
    while True:
        now = _worker_pids(client)  # a test's timeout shows it in the traceback
        if (
            len(now) == n_workers
            and (replaced is None or set(now.values()) != replaced)
            and _nannies_settled(cluster, n_workers)
        ):
            return
        if cluster is not None and hasattr(cluster, "worker_spec"):
            cluster.sync(_reopen_given_up, cluster)
        time.sleep(0.2)


async def _reopen_given_up(cluster) -> None:
    """On ``cluster``'s loop: drop each closed or failed nanny from ``cluster.workers``
    and start what its spec then lacks (a nanny being started or closed is left alone)."""
    for name, nanny in list(cluster.workers.items()):
        if str(getattr(nanny, "status", "")).endswith(("closed", "failed")):
            del cluster.workers[name]
    if set(cluster.worker_spec) - set(cluster.workers):
        await cluster._correct_state()


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
