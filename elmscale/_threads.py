"""Thread budgets for BLAS and numba.

On a small machine, idle BLAS threads that spin cost more than the work itself
(measured: 10x on 2 cores).  Every hot path runs inside ``thread_budget(n)``,
which caps the BLAS pools (threadpoolctl) and numba's pool to the same number.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import numba
from threadpoolctl import threadpool_limits


def available_cores() -> int:
    """Cores this process may use (CPU affinity, not the machine's count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def resolve_n_threads(n_threads: int | None) -> int:
    """``None`` or ``-1``: all available cores; otherwise at least 1 and at most numba's pool."""
    if n_threads is None or n_threads == -1:
        n = available_cores()
    else:
        n = int(n_threads)
    return max(1, min(n, numba.config.NUMBA_NUM_THREADS))


@contextlib.contextmanager
def thread_budget(n_threads: int | None = None) -> Iterator[int]:
    """Limit BLAS and numba threads to ``n_threads`` inside the block."""
    n = resolve_n_threads(n_threads)
    previous = numba.get_num_threads()
    with threadpool_limits(limits=n):
        numba.set_num_threads(n)
        try:
            yield n
        finally:
            numba.set_num_threads(previous)
