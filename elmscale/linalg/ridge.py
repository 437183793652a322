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
    """Solutions of ``(I/C + G) x = B`` for every C in ``Cs`` from one reduction of ``G``.

    Returns an array ``(len(Cs),) + B.shape``.  ``G = Q T Q'`` with ``T`` tridiagonal
    (LAPACK's ``sytrd``), so ``x(C) = Q (T + I/C)^-1 Q' B``: each C is a tridiagonal
    solve (``ptsv``) and two applications of the reflectors, O(n^2 k).  That skips the
    eigenvectors an eigendecomposition would also form (its ``stedc`` and the back
    transformation of ``Q``): 1.7x less time for a 2,471-row kernel matrix, the kernel
    ELM's grid search being one such reduction per fold and sigma.  Where ``T + I/C`` is
    not numerically positive definite (a rank-deficient ``G`` at a very large C) the
    eigendecomposition, its eigenvalues clipped at zero, answers for every C instead.
    """
    Cs = np.asarray(Cs, dtype=np.float64)
    if Cs.ndim != 1 or Cs.size == 0:
        raise ValueError("Cs must be a non-empty 1-D list of positive values")
    if not np.all(Cs > 0):
        raise ValueError(f"every C must be > 0; got {Cs.tolist()}")
    rhs = np.asarray(B, dtype=np.float64).reshape(G.shape[0], -1)
    out = _tridiagonal_path(np.asarray(G, dtype=np.float64), rhs, Cs)
    if out is None:
        out = _eigen_path(G, rhs, Cs)
    return out.reshape((Cs.size,) + np.shape(B))


def _tridiagonal_path(G: np.ndarray, rhs: np.ndarray, Cs: np.ndarray) -> np.ndarray | None:
    """``ridge_path`` through ``G = Q T Q'``; None where a ``T + I/C`` is not positive
    definite.  ``Q``'s reflectors (``sytrd``, lower) are those of a QR factor of ``G``'s
    lower part shifted one row down, so ``ormqr`` applies them (scipy has no ``ormtr``)."""
    n = G.shape[0]
    if n < 2:
        return None
    # the workspace LAPACK asks for: with scipy's default (n) sytrd runs unblocked, 2x slower
    lwork, info = scipy.linalg.lapack.dsytrd_lwork(n, lower=1)
    reduced, diagonal, off_diagonal, tau, info = scipy.linalg.lapack.dsytrd(
        G, lower=1, lwork=max(n, int(lwork))
    )
    if info != 0:
        return None
    reflectors = np.asfortranarray(reduced[1:, : n - 1])

    QtB = _apply_reflectors(reflectors, tau, rhs, "T")
    out = np.empty((Cs.size,) + rhs.shape)
    for i, C in enumerate(Cs):
        *_, y, info = scipy.linalg.lapack.dptsv(diagonal + 1.0 / C, off_diagonal, QtB)
        if info != 0:
            return None
        out[i] = _apply_reflectors(reflectors, tau, y, "N")
    return out


def _apply_reflectors(reflectors: np.ndarray, tau: np.ndarray, M: np.ndarray, trans: str):
    """``Q M`` (``trans`` "N") or ``Q' M`` ("T") for ``sytrd``'s lower reflectors."""
    M = np.array(M, dtype=np.float64, order="F")
    lwork = max(1, 64 * M.shape[1])
    M[1:], _, info = scipy.linalg.lapack.dormqr("L", trans, reflectors, tau, M[1:], lwork=lwork)
    if info != 0:
        raise np.linalg.LinAlgError(f"dormqr failed (info {info})")
    return M


def _eigen_path(G: np.ndarray, rhs: np.ndarray, Cs: np.ndarray) -> np.ndarray:
    w, V = scipy.linalg.eigh(G, check_finite=False, driver="evd")  # 15% faster than evr here
    w = np.clip(w, 0.0, None)  # G is PSD; tiny negative eigenvalues are rounding
    VtB = V.T @ rhs
    out = np.empty((Cs.size,) + rhs.shape)
    for i, C in enumerate(Cs):
        out[i] = V @ (VtB / (w + 1.0 / C)[:, None])
    return out
