"""Calibration numerics, as LIBSVM's (``SVC(probability=True)``): small pure functions.

* :func:`platt_fit`: LIBSVM's ``sigmoid_train``, Platt's sigmoid fitted by Newton's method
  with backtracking on the prior-corrected targets ``(N+ + 1) / (N+ + 2)`` and
  ``1 / (N- + 2)``; :func:`sigmoid_predict` is ``P(positive | f) = 1 / (1 + exp(A f + B))``.
* :func:`pairwise_coupling`: Wu, Lin and Weng (2004), method 2 (LIBSVM's
  ``multiclass_probability``), in closed form: the minimiser of ``p'Qp`` subject to
  ``sum p = 1`` (``Q_tt = sum_{s != t} r_st^2``, ``Q_st = -r_st r_ts``), one batched
  linear solve of the KKT system for all rows (LIBSVM iterates to the same optimum).
* :func:`one_vs_rest_normalise`: the sigmoids of one problem per class, scaled to sum 1.

The estimators' side (out-of-fold fits, ``predict_proba``) is
:mod:`elmscale.models.probability`; the ONNX export writes the same numerics as a graph.
"""

from __future__ import annotations

import numpy as np

from elmscale.linalg.targets import one_vs_one_pairs

#: LIBSVM clips every problem's probability (each pair's, a binary one's) to
#: [MIN_PROB, 1 - MIN_PROB]; :func:`calibrated_proba` clips every coupling's so.
MIN_PROB = 1e-7
COUPLINGS = ("binary", "pairwise", "one_vs_rest")


def platt_fit(
    f: np.ndarray, positive: np.ndarray, *, max_iter: int = 100, eps: float = 1e-5
) -> tuple[float, float]:
    """``(A, B)`` of Platt's sigmoid ``P(positive | f) = 1 / (1 + exp(A f + B))`` fitted to
    the decision values ``f`` and booleans ``positive``: LIBSVM's ``sigmoid_train``
    (Lin, Lin and Weng 2007), Newton's method with backtracking on the prior-corrected
    targets, stopping when both gradient entries are below ``eps``."""
    f = np.asarray(f, dtype=np.float64).ravel()
    positive = np.asarray(positive, dtype=bool).ravel()
    if f.shape != positive.shape:
        raise ValueError(
            f"f and positive must have the same length; got {f.size} and {positive.size}"
        )
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    hi, lo = (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0)
    t = np.where(positive, hi, lo)
    min_step, sigma = 1e-10, 1e-12
    A, B = 0.0, float(np.log((n_neg + 1.0) / (n_pos + 1.0)))

    def objective(A: float, B: float) -> float:
        fApB = f * A + B
        return float(
            np.sum(
                np.where(
                    fApB >= 0,
                    t * fApB + np.log1p(np.exp(-np.abs(fApB))),
                    (t - 1.0) * fApB + np.log1p(np.exp(-np.abs(fApB))),
                )
            )
        )

    fval = objective(A, B)
    for _ in range(max_iter):
        fApB = f * A + B
        e = np.exp(-np.abs(fApB))
        # p = 1 / (1 + exp(fApB)), q = 1 - p, computed without overflow
        p = np.where(fApB >= 0, e / (1.0 + e), 1.0 / (1.0 + e))
        q = np.where(fApB >= 0, 1.0 / (1.0 + e), e / (1.0 + e))
        d2 = p * q
        h11 = sigma + float(np.sum(f * f * d2))
        h22 = sigma + float(np.sum(d2))
        h21 = float(np.sum(f * d2))
        d1 = t - p
        g1, g2 = float(np.sum(f * d1)), float(np.sum(d1))
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= min_step:
            newA, newB = A + step * dA, B + step * dB
            newf = objective(newA, newB)
            if newf < fval + 1e-4 * step * gd:
                A, B, fval = newA, newB, newf
                break
            step /= 2.0
        if step < min_step:
            break  # line search fails, as LIBSVM reports
    return float(A), float(B)


def sigmoid_predict(f: np.ndarray, A, B) -> np.ndarray:
    """``1 / (1 + exp(A f + B))`` element-wise (``A``, ``B`` broadcast against ``f``),
    without overflow."""
    fApB = np.asarray(f, dtype=np.float64) * A + B
    e = np.exp(-np.abs(fApB))
    return np.where(fApB >= 0, e / (1.0 + e), 1.0 / (1.0 + e))


def pairwise_coupling(r: np.ndarray, pairs, n_classes: int) -> np.ndarray:
    """Class probabilities ``(n, n_classes)`` from pairwise ones: ``r[:, p]`` is
    P(class ``pairs[p][0]`` | it is ``pairs[p][0]`` or ``pairs[p][1]``).  Wu, Lin and Weng
    (2004) method 2 (LIBSVM's ``multiclass_probability``): per row, the minimiser of
    ``p'Qp`` subject to ``sum p = 1``, solved from its KKT system in one batched solve.
    ``r`` is clipped to [MIN_PROB, 1 - MIN_PROB] first, as LIBSVM does."""
    r = np.clip(np.asarray(r, dtype=np.float64), MIN_PROB, 1.0 - MIN_PROB)
    pairs = np.asarray(pairs, dtype=np.intp).reshape(-1, 2)
    n = r.shape[0]
    if r.shape[1] != len(pairs):
        raise ValueError(f"r has {r.shape[1]} columns for {len(pairs)} pairs")
    k = int(n_classes)
    R = np.zeros((n, k, k))  # R[:, i, j] = r_ij = P(i | i or j)
    a, b = pairs[:, 0], pairs[:, 1]
    R[:, a, b] = r
    R[:, b, a] = 1.0 - r
    kkt = np.zeros((n, k + 1, k + 1))
    Q = -R * np.swapaxes(R, 1, 2)  # Q_st = -r_st r_ts
    idx = np.arange(k)
    Q[:, idx, idx] = np.sum(np.swapaxes(R, 1, 2) ** 2, axis=2)  # Q_tt = sum_s r_st^2
    kkt[:, :k, :k] = Q
    kkt[:, :k, k] = 1.0
    kkt[:, k, :k] = 1.0
    rhs = np.zeros((n, k + 1, 1))
    rhs[:, k, 0] = 1.0
    p = np.linalg.solve(kkt, rhs)[:, :k, 0]
    p = np.clip(p, 0.0, None)  # the optimum is >= 0 (Wu et al., Theorem 2); rounding only
    return p / p.sum(axis=1, keepdims=True)


def one_vs_rest_normalise(s: np.ndarray) -> np.ndarray:
    """Class probabilities from one sigmoid per class (``s[:, k]``: P(class k) of its
    one-vs-rest problem), scaled to sum 1 per row (a row of zeros gives equal shares)."""
    s = np.asarray(s, dtype=np.float64)
    total = s.sum(axis=1, keepdims=True)
    out = np.full_like(s, 1.0 / s.shape[1])
    np.divide(s, total, out=out, where=total > 0)
    return out


def calibrated_proba(
    scores: np.ndarray, A: np.ndarray, B: np.ndarray, coupling: str, n_classes: int
) -> np.ndarray:
    """Class probabilities ``(n, n_classes)`` from the problems' scores ``(n, n_problems)``
    and their sigmoids, each clipped to [MIN_PROB, 1 - MIN_PROB], coupled as ``coupling``
    says (see :data:`COUPLINGS`): none is 0, so their log is finite."""
    if coupling not in COUPLINGS:
        raise ValueError(f"coupling must be one of {COUPLINGS}; got {coupling!r}")
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    expected = {"binary": 1, "pairwise": n_classes * (n_classes - 1) // 2}.get(coupling, n_classes)
    shapes = {scores.shape[1:], A.shape, B.shape}
    if scores.ndim != 2 or shapes != {(expected,)}:
        raise ValueError(
            f"the {coupling!r} calibration of {n_classes} classes needs {expected} sigmoids "
            f"and score columns; got {A.shape} and {B.shape} sigmoid parameters and scores "
            f"of shape {scores.shape}"
        )
    # clipped as LIBSVM clips every problem's (svm_predict_probability): a far row's sigmoid
    # rounds to 0 or 1, a class's probability then to 0, and predict_log_proba's to -inf
    s = np.clip(sigmoid_predict(scores, A[None, :], B[None, :]), MIN_PROB, 1.0 - MIN_PROB)
    if coupling == "binary":
        return np.column_stack([1.0 - s[:, 0], s[:, 0]])
    if coupling == "pairwise":
        return pairwise_coupling(s, one_vs_one_pairs(n_classes), n_classes)
    return one_vs_rest_normalise(s)  # "one_vs_rest"


def problem_targets(coupling: str, y_idx: np.ndarray, n_classes: int) -> list:
    """``(rows, positive)`` of each binary problem: the rows its sigmoid is fitted on and
    which of them are its positive class.  "binary": every row, ``classes_[1]``;
    "pairwise": the rows of the pair's classes, its first class; "one_vs_rest": every row,
    the problem's class."""
    every = np.ones(y_idx.size, dtype=bool)
    if coupling == "binary":
        return [(every, y_idx == 1)]
    if coupling == "one_vs_rest":
        return [(every, y_idx == c) for c in range(n_classes)]
    if coupling == "pairwise":
        out = []
        for a, b in one_vs_one_pairs(n_classes):
            rows = (y_idx == a) | (y_idx == b)
            out.append((rows, y_idx[rows] == a))
        return out
    raise ValueError(f"coupling must be one of {COUPLINGS}; got {coupling!r}")
