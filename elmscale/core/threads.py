"""Thread budgets for BLAS and numba.

On a small machine, idle BLAS threads that spin cost more than the work itself
(measured: 10x on 2 cores).  Every hot path runs inside ``thread_budget(n)``,
which caps the BLAS pools (threadpoolctl) and numba's pool to the same number.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed

import numba
from threadpoolctl import ThreadpoolController


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


# threadpoolctl finds the BLAS libraries by walking every shared object the process has
# loaded and reading their headers: 1.4-6 ms per ``threadpool_limits`` here, more than a
# whole small fit (LIBSVM's on 135 rows: 1.4 ms).  The controller is kept and made again
# only when modules were imported since (a new import is what loads a new library).
_controller_lock = threading.Lock()
_controller: tuple[int, ThreadpoolController] | None = None


def blas_controller() -> ThreadpoolController:
    """threadpoolctl's controller of the BLAS (and OpenMP) pools loaded now, kept between
    calls while no module has been imported since."""
    global _controller
    with _controller_lock:
        n_modules = len(sys.modules)
        if _controller is None or _controller[0] != n_modules:
            _controller = (n_modules, ThreadpoolController())
        return _controller[1]


def blas_limits(n: int):
    """``threadpool_limits(limits=n)`` through the kept controller (a context manager)."""
    return blas_controller().limit(limits=n)


@contextlib.contextmanager
def thread_budget(n_threads: int | None = None) -> Iterator[int]:
    """Limit BLAS and numba threads to ``n_threads`` inside the block."""
    n = resolve_n_threads(n_threads)
    previous = numba.get_num_threads()
    with blas_limits(n):
        numba.set_num_threads(n)
        try:
            yield n
        finally:
            numba.set_num_threads(previous)


def map_in_threads(fn, items, n_threads: int) -> list:
    """``[fn(x) for x in items]`` on up to ``n_threads`` threads, each with one numba and
    one BLAS thread.

    For independent pieces of numba work that release the GIL (``nogil``), such
    as one-vs-one pairs: two pairs on two cores beat one pair on two threads,
    whose serial solver loop would use one.  Results come back in order; with
    one thread or one item it is a plain loop on the caller's thread budget.
    """
    items = list(items)
    results: list = [None] * len(items)
    for index, result in iter_in_threads(fn, items, n_threads):
        results[index] = result
    return results


def iter_in_threads(fn, items, n_threads: int) -> Iterator[tuple[int, object]]:
    """``(index, fn(items[index]))`` as each finishes, on up to ``n_threads`` threads (as
    :func:`map_in_threads`, which collects them).  The first exception is raised once the
    pieces already started have stopped; the ones not started are cancelled."""
    items = list(items)
    n_workers = min(int(n_threads), len(items))
    if n_workers <= 1:
        for index, x in enumerate(items):
            yield index, fn(x)
        return

    def run(x):
        numba.set_num_threads(1)  # numba's thread count is per calling thread
        return fn(x)

    # BLAS limits are process-wide: one BLAS thread per worker thread, not n each
    with blas_limits(1), ThreadPoolExecutor(max_workers=n_workers) as pool:
        futures = {pool.submit(run, x): index for index, x in enumerate(items)}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            for future in futures:
                future.cancel()


# A pool kept for ``parallel_rows`` (threads are started once, not per call: a pool's start
# costs about 0.1 ms, more than a small block's work).
_row_pool_lock = threading.Lock()
_row_pool: ThreadPoolExecutor | None = None
ROWS_PER_CHUNK = 256  # a chunk's rows at least: below, a hand-over costs more than the work


def _rows_pool() -> ThreadPoolExecutor:
    global _row_pool
    with _row_pool_lock:
        if _row_pool is None:
            _row_pool = ThreadPoolExecutor(
                max_workers=max(2, available_cores()), thread_name_prefix="elmscale-rows"
            )
        return _row_pool


def parallel_rows(
    fn, n_rows: int, n_threads: int | None = None, *, min_rows: int = ROWS_PER_CHUNK
) -> None:
    """``fn(start, stop)`` over ``[0, n_rows)`` in chunks, on up to ``n_threads`` threads
    (default: numba's thread count for this thread, which ``thread_budget`` sets), each
    thread given ``min_rows`` rows at least (fewer for costly rows: whole kernel columns).

    For numba kernels that release the GIL (``nogil``) and work on a range of rows.  The
    chunks (four per thread) are taken as threads free up, so a thread that shares its
    core with another process takes fewer; the calling thread takes chunks too.  The first
    exception is raised once every chunk has stopped.
    """
    n = numba.get_num_threads() if n_threads is None else max(1, int(n_threads))
    n = min(n, max(1, n_rows // max(1, int(min_rows))))
    if n <= 1:
        fn(0, n_rows)
        return
    n_chunks = 4 * n
    bounds = [n_rows * k // n_chunks for k in range(n_chunks + 1)]
    next_chunk = iter(range(n_chunks))
    lock = threading.Lock()

    def work():
        while True:
            with lock:
                k = next(next_chunk, None)
            if k is None:
                return
            fn(bounds[k], bounds[k + 1])

    helpers = [_rows_pool().submit(work) for _ in range(n - 1)]
    try:
        work()
    finally:
        errors = [f.exception() for f in helpers]
    for error in errors:
        if error is not None:
            raise error
