"""Forward orthogonal least-squares selection of kernel columns (FLSA-SVM, Xia et al. 2013;
``../shared/papers/forward-least-squares-sparse-lssvm.txt``, ``../shared/notes/
methods-wave2.md``), without the l x l kernel matrix in memory.

The model is ``f(x) = sum_k alpha_k K(x, x_{s_k}) (+ b)``, fitted to the targets ``Y`` (l x
J) by least squares on the columns ``K[:, s_1 .. s_m]`` of the kernel matrix of the training
rows, the columns chosen greedily: each step takes the candidate column that most reduces
the squared residual, orthogonalised (Gram-Schmidt) against the columns already chosen.

State, per candidate column j (:class:`CandidateColumns`): ``c_j = K[:, j]' r`` (its
correlation with the residual r, J values) and ``n_j`` (its squared norm after removing its
projections on the chosen basis).  A step picks ``argmax_j sum_k c_jk^2 / n_j`` among the
candidates that keep more than ``tol`` of their squared norm (the others are linearly
dependent on the chosen columns: the paper's pruning), forms the new orthonormal basis
vector q from that one kernel column, and updates every candidate with one kernel product
``p = K[cand, :] q``: ``c -= p (q' r)``, ``n -= p^2``, ``r -= q (q' r)``.  The chosen
columns' ``R`` (upper triangular, ``R_ik = q_i' K[:, s_k]``) and ``z = Q' Y`` give the
coefficients of the first m columns by back substitution, ``R[:m, :m] alpha = z[:m]``, so
one run to m_max holds the model of every m <= m_max (the selections are nested).

Cost, for l training rows, M candidates, d features, m steps: kernel values O(l M d) per
step (the candidates' product with q; recomputed, never stored), O(l m) for the basis Q,
O(M J) for the candidates' state; memory O(l m + M J) and one block of kernel rows.  With
every row a candidate (M = l) a step costs l^2 kernel values; a random pool of M rows (the
reduced FLSA-SVM) l M.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np
import scipy.linalg

from elmscale.core.jit import rows_dot_f32
from elmscale.core.threads import parallel_rows
from elmscale.features.kernels import Kernel

__all__ = [
    "CandidateColumns",
    "CandidateGram",
    "CandidateSource",
    "ForwardPath",
    "candidate_gram",
    "coefficients",
    "forward_select",
    "forward_select_gram",
    "gram_bytes",
    "residual_sums",
]

#: rows of candidates per kernel block (a block is CANDIDATE_BLOCK x l float64)
CANDIDATE_BLOCK = 1024


class CandidateSource(Protocol):
    """What :func:`forward_select` asks of its candidates (:class:`CandidateColumns` here,
    ``distributed.forward_selection.DaskCandidates`` over Dask workers): the best active
    candidate after pruning at ``tol``, a candidate's kernel column, the update of every
    candidate by a new basis vector, and marking one chosen."""

    def best(self, tol: float) -> tuple[int, float]: ...

    def column(self, j: int) -> np.ndarray: ...

    def update(self, q: np.ndarray, qr: np.ndarray) -> None: ...

    def choose(self, j: int) -> None: ...


class CandidateColumns:
    """The candidates' state for a set of candidate rows ``X_cand`` against the training rows
    ``X``: each candidate j is the kernel column ``K(X, X_cand[j])``.

    The state is ``corr`` (M x J: the columns' products with the residual), ``norm2``
    (M: squared norms after orthogonalisation), ``norm2_start`` (M: squared norms before)
    and ``active`` (M: not chosen and not pruned).  A distributed run keeps one of these
    next to each worker's candidates; the coordinator broadcasts q and gathers each block's
    :meth:`best`.

    ``cache_mb``: the first candidates' kernel columns that fit in it are kept in float32
    (``n_cached``), so that a step's products with them are one pass over memory
    (``core.jit.rows_dot_f32``, sums in float64) instead of l d kernel operations each;
    the others are computed again at every step.  A cached candidate's state is that of
    its float32 column throughout (its start as its products), so its leftover norm is
    that column's, exact to float64 rounding against the basis (whose vectors come from the
    exact columns, :meth:`column`); the float32 rounding (6e-8 relative) moves a
    candidate's gain by as little, and a leftover norm only below about 1e-7 of the
    column's (a pruning ``tol`` of 1e-8 on squared norms is decided the same).
    """

    def __init__(
        self,
        kernel: Kernel,
        X: np.ndarray,
        X_cand: np.ndarray,
        Y: np.ndarray,
        cache_mb: float = 0.0,
    ):
        self.kernel = kernel
        self.X = X
        self.X_cand = X_cand
        M = X_cand.shape[0]
        self.n_cached = int(min(M, cache_mb * 2**20 // max(4 * X.shape[0], 1)))
        self.cached = np.empty((self.n_cached, X.shape[0]), dtype=np.float32)
        self.corr = np.empty((M, Y.shape[1]))
        self.norm2_start = np.empty(M)
        for start in range(0, M, CANDIDATE_BLOCK):
            rows = slice(start, min(M, start + CANDIDATE_BLOCK))
            block = kernel.block(X_cand[rows], X)  # (rows, l): kernel columns as rows
            kept = slice(start, min(rows.stop, self.n_cached))
            if kept.start < kept.stop:  # cached: the state of the float32 columns
                n_kept = kept.stop - kept.start
                self.cached[kept] = block[:n_kept]
                block[:n_kept] = self.cached[kept]
            self.corr[rows] = block @ Y
            self.norm2_start[rows] = np.einsum("ij,ij->i", block, block)
        self.norm2 = self.norm2_start.copy()
        self.active = self.norm2_start > 0

    def prune(self, tol: float) -> None:
        """Drop the candidates left with at most ``tol`` of their squared norm."""
        self.active &= self.norm2 > tol * self.norm2_start

    def best(self, tol: float) -> tuple[int, float]:
        """``(index, reduction of the squared residual)`` of the best active candidate after
        pruning at ``tol``; ``(-1, 0.0)`` when none is left."""
        self.prune(tol)
        if not self.active.any():
            return -1, 0.0
        gain = np.full(self.norm2.shape, -np.inf)
        act = self.active
        gain[act] = np.einsum("ij,ij->i", self.corr[act], self.corr[act]) / self.norm2[act]
        j = int(np.argmax(gain))
        return j, float(gain[j])

    def column(self, j: int) -> np.ndarray:
        """Candidate j's kernel column ``K(X, X_cand[j])`` (l values)."""
        return self.kernel.block(self.X, self.X_cand[j : j + 1])[:, 0]

    def update(self, q: np.ndarray, qr: np.ndarray) -> None:
        """A new basis vector q (unit, orthogonal to the previous ones) with ``qr = q' r``:
        one product ``p = K(X_cand, X) q`` updates every candidate (the cached columns'
        from memory, the others' kernel values computed)."""
        c = self.n_cached
        p = np.empty(self.X_cand.shape[0])
        if c:
            q64 = np.ascontiguousarray(q, dtype=np.float64)
            parallel_rows(lambda a, b: rows_dot_f32(self.cached, q64, p, a, b), c)
        if c < p.size:
            p[c:] = self.kernel.block_matvec(self.X_cand[c:], self.X, q)
        self.corr -= np.outer(p, qr)
        self.norm2 -= p * p

    def choose(self, j: int) -> None:
        self.active[j] = False


class ForwardPath(NamedTuple):
    """One run of forward selection.

    selected : (m,) candidate indices in the order chosen.
    R : (k, k) upper triangular, ``R_ik = q_i' column_k``, k = m (+ 1 with the constant
        column, first).
    z : (k, J) ``Q' Y``.
    residuals : (m + 1,) Frobenius norm of the residual before any kernel column and after
        each step (after the constant column when there is one), as the selection tracks
        it: from the residual vector itself in :func:`forward_select`, from
        ``|Y|^2 - sum |z_k|^2`` in :func:`forward_select_gram` (see there how far that can
        drift; the estimators recompute the last one from the data, :func:`residual_sums`).
    intercept : whether the constant column is the basis' first column.
    """

    selected: np.ndarray
    R: np.ndarray
    z: np.ndarray
    residuals: np.ndarray
    intercept: bool


def forward_select(
    candidates: CandidateSource,
    Y: np.ndarray,
    n_select: int,
    *,
    tol: float = 1e-8,
    intercept: bool = False,
) -> ForwardPath:
    """Choose up to ``n_select`` candidate columns by forward orthogonal least squares.

    ``Y`` (l x J) are the targets; ``intercept`` puts the constant column first in the
    basis (it is not a candidate and never counted in ``n_select``).  Stops early when
    every candidate is chosen or pruned (linearly dependent to ``tol``: its squared norm
    after orthogonalisation at most ``tol`` times its squared norm before).
    """
    n_rows, J = Y.shape
    k_max = n_select + int(intercept)
    Q = np.empty((n_rows, k_max))
    R = np.zeros((k_max, k_max))
    z = np.empty((k_max, J))
    r = np.array(Y, dtype=np.float64, copy=True)
    residuals = []
    selected: list[int] = []
    k = 0

    def add(v: np.ndarray) -> bool:
        """Orthogonalise v against the basis (twice: classical Gram-Schmidt loses
        orthogonality on near-dependent kernel columns), append it; False if dependent."""
        nonlocal k
        Rcol = np.zeros(k + 1)
        norm0 = float(v @ v)
        for _ in range(2):
            proj = Q[:, :k].T @ v
            v -= Q[:, :k] @ proj
            Rcol[:k] += proj
        norm = float(np.sqrt(v @ v))
        if not norm * norm > tol * norm0:
            return False
        q = v / norm
        Rcol[k] = norm
        Q[:, k] = q
        R[: k + 1, k] = Rcol
        qr = q @ r
        z[k] = qr
        np.subtract(r, np.outer(q, qr), out=r)  # in place: r belongs to forward_select
        candidates.update(q, qr)
        k += 1
        return True

    if intercept:
        add(np.ones(n_rows))
    residuals.append(float(np.sqrt(np.einsum("ij,ij->", r, r))))
    while len(selected) < n_select:
        j, _ = candidates.best(tol)
        if j < 0:
            break
        candidates.choose(j)
        if add(candidates.column(j)):
            selected.append(j)
            residuals.append(float(np.sqrt(np.einsum("ij,ij->", r, r))))
    return ForwardPath(
        np.asarray(selected, dtype=np.int64), R[:k, :k], z[:k], np.asarray(residuals), intercept
    )


#: memory of a candidate-space run's blocks of kernel values (M x rows float64)
GRAM_BLOCK_BYTES = 64 * 2**20


def gram_bytes(n_candidates: int, n_select: int) -> int:
    """Memory of :func:`forward_select_gram` for M candidates: the candidates' Gram (M x M)
    and their products with the basis (M x m), float64."""
    return 8 * n_candidates * (n_candidates + n_select + 1)


class CandidateGram(NamedTuple):
    """What the candidates' space needs of the rows, sums over them (so that blocks of rows,
    or Parquet units on workers, add up): ``G = K'K`` (M x M) of the candidates' kernel
    columns ``K = K(X, X_cand)``, ``c0 = K'Y`` (M x J), ``s = K'1`` (M), ``y_sum = 1'Y``
    (J), ``y_sq`` the squared norms of Y's columns (J) and ``n_rows``."""

    G: np.ndarray
    c0: np.ndarray
    s: np.ndarray
    y_sum: np.ndarray
    y_sq: np.ndarray
    n_rows: int

    def columns(self, which: slice) -> CandidateGram:
        """The same for the target columns ``which`` (a selection of their own: the Gram
        is shared)."""
        return self._replace(c0=self.c0[:, which], y_sum=self.y_sum[which], y_sq=self.y_sq[which])

    @classmethod
    def combine(cls, *parts: CandidateGram) -> CandidateGram:
        """The sums over every part's rows."""

        def total(arrays) -> np.ndarray:  # in place: no stack of M x M parts
            out = np.array(arrays[0], dtype=np.float64, copy=True)
            for a in arrays[1:]:
                out += a
            return out

        return cls(
            total([p.G for p in parts]),
            total([p.c0 for p in parts]),
            total([p.s for p in parts]),
            total([p.y_sum for p in parts]),
            total([p.y_sq for p in parts]),
            int(sum(p.n_rows for p in parts)),
        )


def candidate_gram(
    kernel: Kernel, X: np.ndarray, X_cand: np.ndarray, Y: np.ndarray
) -> CandidateGram:
    """The :class:`CandidateGram` of the rows ``X`` with targets ``Y`` (l x J), accumulated
    over blocks of rows (one pass of kernel values; the products are BLAS)."""
    M = X_cand.shape[0]
    G = np.zeros((M, M))
    c0 = np.zeros((M, Y.shape[1]))
    s = np.zeros(M)
    step = max(1, GRAM_BLOCK_BYTES // (8 * max(M, 1)))
    for start in range(0, X.shape[0], step):
        rows = slice(start, min(X.shape[0], start + step))
        block = kernel.block(X_cand, X[rows])  # (M, rows): kernel columns as rows
        G += block @ block.T
        c0 += block @ Y[rows]
        s += block.sum(axis=1)
    y_sq = np.einsum("ij,ij->j", Y, Y)
    return CandidateGram(G, c0, s, Y.sum(axis=0), y_sq, int(X.shape[0]))


def forward_select_gram(
    gram: CandidateGram,
    n_select: int,
    *,
    tol: float = 1e-8,
    intercept: bool = False,
) -> ForwardPath:
    """:func:`forward_select` in the candidates' space: the same selection from the
    candidates' :class:`CandidateGram`, never touching an l-vector.

    Every basis vector is a combination of candidate columns (and the constant column), so
    a candidate's products with the basis, ``P = K'Q`` (M x k), follow from ``G``: the new
    basis vector of candidate j has ``K'q = (G[:, j] - P R[:, k]) / |q_unnormalised|``
    with ``R[:, k] = P[j]`` (its products with the basis so far) and the norm
    ``sqrt(n_j)``; correlations and leftover norms are then updated as in
    :class:`CandidateColumns`.  A step costs O(M k), against O(l M d) kernel values and
    O(l k) for the basis in :func:`forward_select`: a pool of M rows is paid once, by the
    Gram's O(l M^2) BLAS product.  ``z = Q'Y`` is the candidate's correlation over its
    norm; the residual norms follow from ``|r|^2 = |Y|^2 - |z|^2`` summed.

    How far those residual norms drift: they are exact in exact arithmetic, but they are
    computed in the Gram's squared space, so rounding moves the squared residual, not the
    residual.  Candidate j's leftover norm ``n_j = G_jj - sum p^2`` carries an absolute
    error of about ``k u G_jj`` after k steps (u = 2^-53), a relative error of
    ``k u G_jj / n_j``, which is as large as the chosen columns are close to dependent (up
    to ``k u kappa^2`` for columns of condition number kappa); ``|z_k|^2 = c_j^2 / n_j``
    inherits it, and the tracked ``|r|^2`` gathers every step's:
    ``|err(|r_m|^2)| <~ u sum_{k<=m} k |z_k|^2 G_jk / n_jk + m u |Y|^2``.  Measured on 30
    gaussian rows (sigma 2, kappa(K) = 3.9e4) at full rank: a true residual of 1.5e-8
    tracked as 0 (the squared one below zero, clipped) under OpenBLAS's Haswell kernels
    and as 1.2e-4 under SkylakeX's.  Residual norms below ``sqrt`` of that error are
    rounding, not fit; the estimators replace the last one by the model's own residual,
    computed from the rows (:func:`residual_sums`).
    """
    G = gram.G
    J = gram.c0.shape[1]
    M = G.shape[0]
    k_max = n_select + int(intercept)
    P = np.empty((M, k_max))
    R = np.zeros((k_max, k_max))
    z = np.empty((k_max, J))
    norm2_start = np.diagonal(G).copy()
    norm2 = norm2_start.copy()
    corr = np.array(gram.c0, dtype=np.float64, copy=True)
    active = norm2_start > 0
    r2 = float(np.sum(gram.y_sq))
    k = 0
    if intercept:  # q = 1 / sqrt(l): K'q = s / sqrt(l)
        root = np.sqrt(gram.n_rows)
        p = gram.s / root
        R[0, 0] = root
        z[0] = gram.y_sum / root
        corr -= np.outer(p, z[0])
        norm2 -= p * p
        P[:, 0] = p
        r2 -= float(z[0] @ z[0])
        k = 1
    residuals = [float(np.sqrt(max(r2, 0.0)))]
    selected: list[int] = []
    gain = np.empty(M)
    while len(selected) < n_select:
        active &= norm2 > tol * norm2_start
        if not active.any():
            break
        gain.fill(-np.inf)
        gain[active] = np.einsum("ij,ij->i", corr[active], corr[active]) / norm2[active]
        j = int(np.argmax(gain))
        active[j] = False
        norm = float(np.sqrt(norm2[j]))
        R[:k, k] = P[j, :k]
        R[k, k] = norm
        z[k] = corr[j] / norm
        p = (G[:, j] - P[:, :k] @ P[j, :k]) / norm
        corr -= np.outer(p, z[k])
        norm2 -= p * p
        P[:, k] = p
        k += 1
        selected.append(j)
        r2 -= float(z[k - 1] @ z[k - 1])
        residuals.append(float(np.sqrt(max(r2, 0.0))))
    return ForwardPath(
        np.asarray(selected, dtype=np.int64), R[:k, :k], z[:k], np.asarray(residuals), intercept
    )


def residual_sums(
    kernel: Kernel,
    X: np.ndarray,
    Y: np.ndarray,
    points: np.ndarray,
    coef: np.ndarray,
    intercept: np.ndarray,
) -> np.ndarray:
    """The squared residual of the model ``f(x) = K(x, points) coef + intercept`` on the
    rows ``X`` with targets ``Y`` (l x J), summed over the rows: (J,) values, float64 (the
    kernel product fused, :meth:`Kernel.block_matvec`, never stored).  Sums over blocks of
    rows, or Parquet units, add up."""
    Y = np.asarray(Y, dtype=np.float64).reshape(X.shape[0], -1)
    coef = np.asarray(coef, dtype=np.float64).reshape(points.shape[0], Y.shape[1])
    fitted = np.zeros_like(Y) if points.shape[0] == 0 else kernel.block_matvec(X, points, coef)
    residual = Y - fitted - np.asarray(intercept, dtype=np.float64)[None, :]
    return np.einsum("ij,ij->j", residual, residual)


def coefficients(path: ForwardPath, m: int) -> tuple[np.ndarray, np.ndarray]:
    """``(alpha, b)`` of the model with the first ``m`` chosen columns: ``alpha`` (m x J)
    their weights, ``b`` (J,) the constant column's (zeros without it), by back
    substitution on ``R``."""
    m = min(int(m), len(path.selected))
    k = m + int(path.intercept)
    J = path.z.shape[1]
    if k == 0:
        return np.zeros((0, J)), np.zeros(J)
    w = scipy.linalg.solve_triangular(path.R[:k, :k], path.z[:k], lower=False)
    if path.intercept:
        return w[1:], w[0]
    return w, np.zeros(J)
