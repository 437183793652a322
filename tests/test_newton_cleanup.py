"""The Newton fit's files and cache when things go wrong (issue 50): a block whose last pass
fails (its support rows written to a state folder, or returned through Dask's results), a
worker killed while it writes its support file, and two fits in one process.

The failures are real ones on a real LocalCluster: a worker's file size limit
(``RLIMIT_FSIZE``, as a full quota) makes its support file's write fail, with an error
(Python ignores ``SIGXFSZ``) or by the signal's default action, which kills the worker
mid-write.  Block ``i`` of a fit runs on the ``i``-th worker by address.
"""

from __future__ import annotations

import os
import resource
import signal
import time
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from elmscale import SparseELMClassifier, open_parquet
from elmscale.data import generate_classification, write_generated_parquet
from elmscale.distributed import newton
from elmscale.features.layers import HiddenLayer

TOL = 1e-3
FILE_LIMIT = 64  # bytes: less than an .npy header, so every support file's write fails


@pytest.fixture()
def client():
    """A real two-worker Dask LocalCluster of its own (its workers' limits are changed)."""
    from conftest import two_worker_client

    with two_worker_client() as client:
        yield client


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("newton-cleanup") / "data"
    write_generated_parquet(
        out, 8_000, 5, 2, random_state=5, rows_per_file=2_000, row_group_size=2_000
    )
    return open_parquet(out, label="label")


def _limit_file_size(n_bytes: int, kill: bool) -> None:
    """(On a worker) files written from now on hold ``n_bytes`` at most; past it, a write
    fails with EFBIG, or with ``kill`` the process dies of SIGXFSZ (no core file)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (n_bytes, hard))
    if kill:
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)


def _hold_the_worker(marker: str, seconds: float) -> None:
    """(On a worker) keep its one thread busy for ``seconds``, saying so in ``marker``."""
    open(marker, "w").close()
    time.sleep(seconds)


def _fit(client, dataset, state, on_last_pass):
    """A Newton fit on the cluster; ``on_last_pass(first, second)`` is called with the
    blocks' workers just before the last pass.  A first fit compiles the kernels in the
    workers (numba's cache files written then would meet the file size limit)."""
    warm = SparseELMClassifier(hidden="sigmoid", n_hidden=10, C=1.0, tol=TOL, random_state=0)
    warm.fit(dataset, client=client, n_blocks=2)
    workers = sorted(client.nthreads())

    def on_pass(index, phases):
        if all(phase == "done" for phase in phases):  # the next pass is the last
            on_last_pass(*workers)

    return newton.fit_newton(
        newton.parquet_units(dataset),
        warm.hidden_layer_.to_dict(),
        warm.classes_,
        C=1.0,
        tol=TOL,
        client=client,
        n_blocks=2,
        state_dir=state,
        on_pass=on_pass,
    )


def _wait_until_idle(client, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while any(client.processing().values()):
        assert time.monotonic() < deadline, client.processing()
        time.sleep(0.1)


@pytest.mark.timeout(300)
def test_a_failing_block_leaves_no_files_of_the_fit(client, dataset, tmp_path):
    """The confirmed defect: one block's last pass raised, the other block (here held up
    behind another task) wrote its support file after the clean-up, and the failed writes'
    temporary files stayed."""
    state = tmp_path / "state"
    held = tmp_path / "held"
    holds = []  # (kept: a released future is cancelled)

    def on_last_pass(first, second):
        client.run(_limit_file_size, FILE_LIMIT, False, workers=[first])
        hold = client.submit(_hold_the_worker, str(held), 4.0, workers=[second], pure=False)
        deadline = time.monotonic() + 60
        while not held.exists():
            assert time.monotonic() < deadline and hold.status == "pending", hold
            time.sleep(0.02)
        holds.append(hold)

    with pytest.raises(OSError, match="File too large") as caught:
        _fit(client, dataset, state, on_last_pass)
    _wait_until_idle(client)  # the other block has written whatever it was going to
    left = sorted(name.partition(".")[2] for name in os.listdir(state))  # (less the fit id)
    assert left == [], (caught.value, left)


@pytest.mark.timeout(300)
def test_a_failing_block_of_returned_rows_waits_for_the_others(
    client, dataset, tmp_path, monkeypatch
):
    """By default the last pass's rows come back through Dask's results, gathered a block at
    a time: when the first block's last pass fails, the other block's task (3 s long) is
    waited for before the error goes up, as when the blocks are gathered together."""
    armed, finished = tmp_path / "armed", tmp_path / "finished"
    support = newton.block_support

    def failing_or_slow(units, requests, problem, *, n_threads=1):
        # (a closure: pickled by value to the workers, where it calls their block_support)
        if not os.path.exists(armed):
            return support(units, requests, problem, n_threads=n_threads)
        if any(unit.index == 0 for unit in units):
            raise RuntimeError("the first block's last pass fails")
        out = support(units, requests, problem, n_threads=n_threads)
        time.sleep(3.0)
        open(finished, "w").close()
        return out

    monkeypatch.setattr(newton, "block_support", failing_or_slow)
    with pytest.raises(RuntimeError, match="the first block's last pass fails"):
        _fit(client, dataset, None, lambda first, second: open(armed, "w").close())
    assert finished.exists()  # the other block ended before the error went up
    assert not any(client.processing().values()), client.processing()


@pytest.mark.timeout(300)
def test_a_worker_killed_mid_write_leaves_no_temporary_file(client, dataset, tmp_path):
    """The worker of the first block dies as it writes its support file; the block runs
    again elsewhere and the fit ends, with nothing of it left in the state folder."""
    state = tmp_path / "state"
    pids = client.run(os.getpid)

    def on_last_pass(first, second):
        client.run(_limit_file_size, FILE_LIMIT, True, workers=[first])

    result = _fit(client, dataset, state, on_last_pass)
    assert result.converged.all() and result.support.size == result.n_support.sum() > 0
    assert set(client.run(os.getpid).values()) != set(pids.values())  # one was killed
    assert sorted(os.listdir(state)) == []


# -- two fits in one process ----------------------------------------------------------------

_READS: Counter = Counter()


@dataclass(frozen=True)
class _CountedUnit(newton.ArrayUnit):
    """An array unit whose reads are counted by ``(tag, index)``."""

    tag: str = ""

    def read(self):
        _READS[self.tag, self.index] += 1
        return super().read()


def _units(tag: str, seed: int) -> list:
    data = generate_classification(4_000, 5, random_state=seed)
    y = np.searchsorted(np.unique(data.y), data.y)
    return [
        _CountedUnit(u.index, u.start, u.n_rows, u.X, u.y, tag)
        for u in newton.array_units(np.asarray(data.X, dtype=np.float32), y, 4)
    ]


@pytest.mark.parametrize("stale_after", [None, 0.0])
def test_a_fit_does_not_evict_the_rows_of_another_running_in_the_process(stale_after, monkeypatch):
    """Fit B runs to its end between two passes of fit A in the same process, the cache
    holding A's rows but not both fits': A's rows stay (each unit read once), B computes
    what does not fit.  Only a fit idle for ``STALE_FIT_S`` (ended without its clean-up)
    has its rows dropped for another's."""
    if stale_after is not None:
        monkeypatch.setattr(newton, "STALE_FIT_S", stale_after)
    n_hidden = 20
    layer = HiddenLayer("sigmoid", 5, n_hidden, seed=0).to_dict()
    first, second = _units("a", 1), _units("b", 2)
    unit_bytes = first[0].n_rows * (4 * n_hidden + 8)  # float32 outputs, int64 order
    budget_mb = 1.5 * len(first) * unit_bytes / 2**20  # A's rows, and half of B's

    def fit(units, on_pass=None):
        return newton.fit_newton(
            units,
            layer,
            [0, 1],
            C=1.0,
            tol=TOL,
            cache_mb=budget_mb,
            n_threads=1,
            on_pass=on_pass,
        )

    alone = fit(first)
    _READS.clear()

    def on_pass(index, phases):
        if index == 0:
            fit(second)

    both = fit(first, on_pass)
    np.testing.assert_array_equal(both.beta, alone.beta)  # (the cache changes no bit)
    a_reads = [_READS["a", u.index] for u in first]
    if stale_after is None:
        assert a_reads == [1] * len(first), a_reads
    else:
        assert min(a_reads) >= 2, a_reads
    assert newton.clear_cache() == 0
