"""What every feature map shares: row blocks."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

#: Default number of rows per block: 16,384 rows x 1,000 float64 units = 128 MB.
DEFAULT_BLOCK_ROWS = 16_384


def iter_row_blocks(n_rows: int, block_rows: int) -> Iterator[slice]:
    """Slices covering ``range(n_rows)`` in blocks of at most ``block_rows`` rows."""
    block_rows = max(1, int(block_rows))
    for start in range(0, n_rows, block_rows):
        yield slice(start, min(start + block_rows, n_rows))


def _as_float32_rows(X: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(X, dtype=np.float32)
