"""splitmix64: the one source of the seeds of elmscale's own random streams (the shuffles
of the explicit solver's passes, the Newton solver's gathered rows' solves, the folds of rows),
so that a rerun, or the same rows cut into other units, draws the same numbers."""

from __future__ import annotations

import numpy as np

GAMMA = 0x9E3779B97F4A7C15  # splitmix64's increment (odd: a multiple of it is never 0 mod 2^64)
_MIX1, _MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_MASK = 2**64 - 1


def mix64(z):
    """splitmix64's output function of ``z`` mod 2^64: a Python int, or a uint64 array
    element-wise."""
    if isinstance(z, np.ndarray):
        with np.errstate(over="ignore"):
            z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
            return z ^ (z >> np.uint64(31))
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK
    return z ^ (z >> 31)


def xorshift_state(seed: int) -> int:
    """A nonzero xorshift state from ``seed`` (the explicit solver's pass order)."""
    return (int(seed) * GAMMA + 1) & _MASK or 1


__all__ = ["GAMMA", "mix64", "xorshift_state"]
