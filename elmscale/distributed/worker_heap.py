"""A Dask worker's heap during a fit's passes (issue 53: a worker's compute was 1.5x this
process's for the same block).

Dask's nanny starts every worker with ``MALLOC_TRIM_THRESHOLD_=65536`` (the
``distributed.nanny.pre-spawn-environ`` setting), so that freed memory goes back to the
system.  Setting any of glibc's malloc variables also turns off its dynamic mmap
threshold: it stays at 128 KB, so every array above 128 KB is a fresh mapping, and each
pass's temporaries (a unit's rows x L values, its L x L sums) fault in new pages every
time.  Measured here on one Newton fit of 200k rows: 27x the minor page faults of this
process and 1.2 s of system time on 2.6 s of user time; at 10k rows a pass's thread CPU on
a worker went from 41-65 ms to 12-16 ms, this process's figure, with the thresholds
raised.

``passes_heap(True)`` raises the thresholds on a worker that has the nanny's setting (and
no mmap threshold of its own) for the fit's passes: arrays up to ``MMAP_THRESHOLD`` come
from the heap, and up to ``TRIM_THRESHOLD`` freed at its top stays there for the next
pass.  ``passes_heap(False)`` puts back what the environment set and trims the heap, so the
worker holds no more than before once the fit ends.  Elsewhere (no glibc, no nanny
setting) both do nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import sys

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "heap_tuned", "passes_heap", "workers_passes_heap"]

#: glibc's mallopt parameters
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: glibc's mmap threshold while it is fixed (any MALLOC_*_ variable set)
_DEFAULT_MMAP_THRESHOLD = 128 * 1024
#: During the passes: arrays up to this from the heap (a 4,096-row block of 200 nodes'
#: float64 values is 6.5 MB; a unit's cached outputs, up to 210 MB, stay mappings)
MMAP_THRESHOLD = 32 * 2**20
#: During the passes: freed memory at the heap's top kept up to this (a pass's temporaries)
TRIM_THRESHOLD = 256 * 2**20

_fits = 0  # the fits running with the thresholds raised (fits may run side by side)


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


def passes_heap(on: bool) -> bool:
    """A fit's passes start (``on``) or end on this process: the first to start raises its
    malloc thresholds, the last to end puts them back (see the module's docstring); True
    when it changed them."""
    global _fits
    env_trim = os.environ.get("MALLOC_TRIM_THRESHOLD_")
    libc = _libc()
    if env_trim is None or "MALLOC_MMAP_THRESHOLD_" in os.environ or libc is None:
        return False
    if not on and _fits == 0:
        return False
    _fits += 1 if on else -1
    if on and _fits == 1:
        libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
        return True
    if not on and _fits == 0:
        libc.mallopt(_M_MMAP_THRESHOLD, _DEFAULT_MMAP_THRESHOLD)
        libc.mallopt(_M_TRIM_THRESHOLD, int(env_trim))
        libc.malloc_trim(0)
        return True
    return False


def heap_tuned() -> bool:
    """Whether this process's thresholds are raised now (``passes_heap``)."""
    return _fits > 0


def workers_passes_heap(client, on: bool) -> None:
    """``passes_heap(on)`` on every worker of the Dask ``client``, as a fit's passes start
    (``on``) or end.  Putting back never raises: a cluster going away leaves nothing to
    undo, and the fit's own error is the one to see."""
    if on:
        client.run(passes_heap, True, on_error="ignore")
        return
    with contextlib.suppress(Exception):
        client.run(passes_heap, False, on_error="ignore")
