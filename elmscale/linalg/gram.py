"""Gram reductions: ``H'H`` and ``H'T`` of a feature map, block by block."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elmscale.features.base import DEFAULT_BLOCK_ROWS, iter_row_blocks
from elmscale.features.layers import HiddenLayer
from elmscale.linalg.ridge import PRECISIONS


@dataclass
class GramStats:
    """``H'H``, ``H'T`` (float64) and the number of rows they sum over."""

    HtH: np.ndarray
    HtT: np.ndarray
    n_samples: int

    @classmethod
    def zeros(cls, n_hidden: int, n_outputs: int) -> GramStats:
        return cls(np.zeros((n_hidden, n_hidden)), np.zeros((n_hidden, n_outputs)), 0)

    def __add__(self, other: GramStats) -> GramStats:
        return GramStats(self.HtH + other.HtH, self.HtT + other.HtT,
                         self.n_samples + other.n_samples)

    def __sub__(self, other: GramStats) -> GramStats:
        """Statistics of the rows of ``self`` not in ``other`` (a CV fold's training part)."""
        return GramStats(self.HtH - other.HtH, self.HtT - other.HtT,
                         self.n_samples - other.n_samples)

    def __iadd__(self, other: GramStats) -> GramStats:
        self.HtH += other.HtH
        self.HtT += other.HtT
        self.n_samples += other.n_samples
        return self


def accumulate_gram(layer: HiddenLayer, X: np.ndarray, T: np.ndarray, *,
                    precision: str = "double",
                    block_rows: int = DEFAULT_BLOCK_ROWS) -> GramStats:
    """``H'H`` and ``H'T`` of the rows ``X`` with targets ``T`` (``(n, k)``), in row blocks."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}; got {precision!r}")
    dtype = np.float32 if precision == "single" else np.float64
    T = np.asarray(T, dtype=np.float64)
    if T.ndim == 1:
        T = T[:, None]
    stats = GramStats.zeros(layer.n_hidden, T.shape[1])
    # One reused buffer: a fresh 100 MB array per block costs its page faults again.
    buffer = np.empty((min(block_rows, X.shape[0]), layer.n_hidden), dtype=dtype)
    for rows in iter_row_blocks(X.shape[0], block_rows):
        H = layer.transform(X[rows], out=buffer[: rows.stop - rows.start])
        stats.HtH += H.T @ H  # numpy calls SYRK; blocks are summed in float64
        stats.HtT += H.T @ T[rows].astype(dtype)
        stats.n_samples += rows.stop - rows.start
    return stats
