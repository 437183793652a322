"""Kernels (paper eqs. 29-31) as feature maps: the kernel block ``K(A, B)`` against basis rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from elmscale.core import jit as _jit
from elmscale.core.memory import empty_huge
from elmscale.features.base import _as_float32_rows, iter_row_blocks

KERNELS = ("gaussian", "laplacian", "polynomial")


@dataclass(frozen=True)
class Kernel:
    """A kernel function with its parameters (``sigma`` for gaussian / laplacian, ``degree`` for polynomial)."""

    kind: str
    sigma: float = 1.0
    degree: int = 3

    def __post_init__(self) -> None:
        if self.kind not in KERNELS:
            raise ValueError(f"kernel must be one of {KERNELS}; got {self.kind!r}")
        if not self.sigma > 0:
            raise ValueError(f"sigma must be > 0; got {self.sigma}")
        if int(self.degree) < 1 or int(self.degree) != self.degree:
            raise ValueError(f"degree must be an integer >= 1; got {self.degree}")

    def block(self, A: np.ndarray, B: np.ndarray, dtype=np.float64) -> np.ndarray:
        """The kernel block ``K(A, B)``, ``(len(A), len(B))``.  Caller bounds the size."""
        A32 = _as_float32_rows(A)
        Bt = np.ascontiguousarray(_as_float32_rows(B).T)
        out = empty_huge((A32.shape[0], Bt.shape[1]), dtype)
        _jit.kernel_block(A32, Bt, _jit.KERNEL_CODES[self.kind], float(self.sigma),
                          int(self.degree), out)
        return out

    def block_matvec(self, A: np.ndarray, B: np.ndarray, coef: np.ndarray,
                     block_rows: int = 4096) -> np.ndarray:
        """``K(A, B) @ coef`` without storing the kernel block (fused, parallel)."""
        A32 = _as_float32_rows(A)
        Bt = np.ascontiguousarray(_as_float32_rows(B).T)
        coef2 = np.ascontiguousarray(coef, dtype=np.float64)
        squeeze = coef2.ndim == 1
        if squeeze:
            coef2 = coef2[:, None]
        out = np.empty((A32.shape[0], coef2.shape[1]), dtype=np.float64)
        code = _jit.KERNEL_CODES[self.kind]
        for rows in iter_row_blocks(A32.shape[0], block_rows):
            _jit.kernel_block_matvec(A32[rows], Bt, code, float(self.sigma),
                                     int(self.degree), coef2, out[rows])
        return out[:, 0] if squeeze else out

    def to_dict(self) -> dict:
        return {"kind": self.kind, "sigma": float(self.sigma), "degree": int(self.degree)}

    @classmethod
    def from_dict(cls, d: dict) -> Kernel:
        return cls(kind=str(d["kind"]), sigma=float(d["sigma"]), degree=int(d["degree"]))
