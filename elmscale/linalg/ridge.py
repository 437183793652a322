"""Ridge ELM in two steps: accumulate sufficient statistics, then solve.

The unified ELM with random nodes (paper eq. 11, primal form) needs only
``H'H`` (L x L), ``H'T`` (L x k) and the row count.  ``gram.accumulate_gram`` computes
them for a set of rows, block by block; ``gram.Gram`` adds Grams computed anywhere and
keeps them per cross-validation fold, so a distributed fit is a sum of the same local
computation.  ``solve_ridge`` and ``ridge_path`` turn the
statistics into output weights ``beta = (I/C + H'H)^-1 H'T``; the same two
functions solve the kernel (dual) form with ``Omega`` in place of ``H'H``.

Precision.  The nodes are always evaluated in float32 (that is the layer; the
same float32 values are used when scoring).  ``precision="double"`` forms ``H'H`` of
those values in float64: exact products, so ``H'H`` is the true Gram of the layer and the
solution is right at any C.
``precision="single"`` multiplies in float32 (about 2x faster), which adds
rounding of about 1e-7 * |H'H| that is not a Gram matrix: harmless while
``1/C`` is far above it (C up to ~1e3 on 1e5 rows of sigmoid nodes), wrong
beyond (measured: R^2 0.92 instead of 0.96 at C = 1e4, negative at 1e6; test
accuracy 0.951 instead of 0.958 at C = 100 on 2e5 rows).  ``choose_precision``
picks single only where it is safe; the estimators' default ``"auto"`` uses it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.linalg

PRECISIONS = ("single", "double")


#: float32 products leave rounding of about 1e-7 to 1e-6 of the mean diagonal of H'H
#: (measured on 2e5 rows of 1,000 sigmoid nodes: |E|_2 = 2.4e-6 mean diagonal); single
#: precision is chosen only while 1/C >= SINGLE_PRECISION_MARGIN * mean diagonal.  At that
#: margin test accuracy and decision values match double precision (2e5 rows, C <= 2:
#: accuracy equal to 4 decimals, decision values within 0.03).
SINGLE_PRECISION_MARGIN = 1e-5


def choose_precision(mean_diagonal: float, C_max: float) -> str:
    """ "single" if float32 products are safe for ``C_max`` given the mean diagonal of H'H, else
    "double"."""
    return "single" if 1.0 / C_max >= SINGLE_PRECISION_MARGIN * mean_diagonal else "double"


def _regularised(G: np.ndarray, C: float) -> np.ndarray:
    A = G.copy()
    A.flat[:: A.shape[0] + 1] += 1.0 / C
    return A


def solve_ridge(G: np.ndarray, B: np.ndarray, C: float) -> np.ndarray:
    """Solve ``(I/C + G) x = B`` for a symmetric positive semi-definite ``G``.

    Cholesky first; if ``I/C + G`` is numerically not positive definite (very
    large C with a rank-deficient G) an eigendecomposition with the
    eigenvalues clipped at zero gives the same minimum-norm-stable answer.
    """
    if not C > 0:
        raise ValueError(f"C must be > 0; got {C}")
    A = _regularised(G, C)
    try:
        factor = scipy.linalg.cho_factor(A, lower=False, overwrite_a=True, check_finite=False)
        return scipy.linalg.cho_solve(factor, B, check_finite=False)
    except np.linalg.LinAlgError:
        return ridge_path(G, B, [C])[0]


def ridge_path(G: np.ndarray, B: np.ndarray, Cs: Sequence[float]) -> np.ndarray:
    """Solutions of ``(I/C + G) x = B`` for every C in ``Cs`` from one eigendecomposition.

    Returns an array ``(len(Cs),) + B.shape``.  With ``G = V diag(w) V'``,
    ``x(C) = V diag(1 / (w + 1/C)) V' B``.
    """
    Cs = np.asarray(Cs, dtype=np.float64)
    if Cs.ndim != 1 or Cs.size == 0:
        raise ValueError("Cs must be a non-empty 1-D list of positive values")
    if not np.all(Cs > 0):
        raise ValueError(f"every C must be > 0; got {Cs.tolist()}")
    w, V = scipy.linalg.eigh(G, check_finite=False, driver="evd")  # 15% faster than evr here
    w = np.clip(w, 0.0, None)  # G is PSD; tiny negative eigenvalues are rounding
    VtB = V.T @ B
    out = np.empty((Cs.size,) + np.shape(B))
    for i, C in enumerate(Cs):
        scale = 1.0 / (w + 1.0 / C)
        out[i] = V @ (scale.reshape((-1,) + (1,) * (VtB.ndim - 1)) * VtB)
    return out
