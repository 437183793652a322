"""Large scratch arrays in transparent huge pages."""

from __future__ import annotations

import mmap

import numpy as np


def empty_huge(shape, dtype) -> np.ndarray:
    """``np.empty(shape, dtype)``, in transparent huge pages where Linux offers them.

    A fresh array costs a page fault per 4 KB when first touched: 0.2-0.5 s for a
    200 MB column cache here, a fifth of a whole fit at COD-RNA scale, and 12 ms of
    the 30 ms a 2,400-row float64 kernel matrix takes.  2 MB pages cut that by an
    order of magnitude.  Arrays under 16 MB, and other systems: ``np.empty``.
    """
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if nbytes >= 1 << 24 and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            buffer = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
            buffer.madvise(mmap.MADV_HUGEPAGE)
            return np.frombuffer(buffer, dtype=dtype).reshape(shape)
        except (OSError, ValueError):
            pass
    return np.empty(shape, dtype)
