"""Peak resident memory of this process and of a Dask cluster's workers (Linux), for the
benchmarks that print it."""

from __future__ import annotations

import gc
import time


def reset_peak_rss() -> None:
    """Start a new peak-RSS (VmHWM) measurement for this process (Linux)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def peak_rss_mb() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measured(fn, client=None):
    """``(result, seconds, coordinator peak MB, [worker peak MB])`` of ``fn()`` (garbage
    collected first, so that what an earlier step freed does not count)."""
    gc.collect()
    reset_peak_rss()
    if client is not None:
        client.run(reset_peak_rss)
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    workers = list(client.run(peak_rss_mb).values()) if client is not None else []
    return result, seconds, peak_rss_mb(), workers
