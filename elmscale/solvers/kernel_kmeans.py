"""Kernel k-means on a sample, and every row assigned to its nearest centre: the parts of a
divide-and-conquer kernel solve (Hsieh, Si and Dhillon, "A Divide-and-Conquer Solver for
Kernel SVMs", ICML 2014).

A centre is the mean of its sample rows in the kernel's feature space, so it is held as
weights over the sample (``1 / |S_c|`` on its members, 0 elsewhere) and its squared norm.
The squared distance of a row ``x`` to centre ``c`` is ``K(x, x) - 2 / |S_c| sum_j K(x,
s_j) + ||c||^2``; ``K(x, x)`` is the same for every centre, so the nearest centre is the
argmin of ``||c||^2 - 2 K(x, S) w_c`` (:func:`nearest_centre`), from ``K(x, S) @ W``, which
the kernel's fused ``block_matvec`` computes in row blocks without storing ``K(x, S)`` (on
the workers, for a fit on Parquet: ``dataset_ops.kernel_matvec``).  Pure numpy and the
kernels: no Dask.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from elmscale.features.kernels import Kernel

__all__ = ["KernelCentres", "kernel_kmeans", "nearest_centre", "sample_rows"]

#: Lloyd iterations of the sample's k-means at most (it stops when no label changes).
KMEANS_MAX_ITER = 50


class KernelCentres(NamedTuple):
    """Centres in the kernel's feature space, over a sample: ``sample`` (m, d) float32
    rows, ``weights`` (m, k) ``1 / |S_c|`` on centre c's members, ``centre_sq`` (k,) their
    squared norms ``||c||^2``."""

    sample: np.ndarray
    weights: np.ndarray
    centre_sq: np.ndarray

    @property
    def n_centres(self) -> int:
        return int(self.centre_sq.size)


def sample_rows(n_rows: int, n_sample: int, seed: int) -> np.ndarray:
    """Sorted row numbers of a seeded uniform sample of ``min(n_sample, n_rows)`` rows."""
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(n_rows, size=min(int(n_sample), int(n_rows)), replace=False))


def nearest_centre(cross: np.ndarray, centre_sq: np.ndarray) -> np.ndarray:
    """Index of each row's nearest centre from ``cross = K(rows, S) @ weights`` (n, k): the
    argmin of ``||c||^2 - 2 cross`` (``K(x, x)`` is the same for every centre); the first
    one on ties."""
    return np.argmin(centre_sq[None, :] - 2.0 * cross, axis=1)


def _centres_of(K_ss: np.ndarray, labels: np.ndarray, k: int):
    """``(weights, centre_sq, cross)`` of the sample's clusters ``labels``, ``cross = K_ss @
    weights``; an empty cluster gets zero weights and an infinite norm (never nearest)."""
    counts = np.bincount(labels, minlength=k).astype(np.float64)
    weights = np.zeros((labels.size, k))
    members = counts[labels] > 0
    weights[np.flatnonzero(members), labels[members]] = 1.0 / counts[labels[members]]
    cross = K_ss @ weights
    centre_sq = np.einsum("ic,ic->c", weights, cross)
    centre_sq[counts == 0] = np.inf
    return weights, centre_sq, cross


def _plus_plus(K_ss: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k-means++'s seeding in the kernel's space: the sample rows chosen as first centres."""
    m = K_ss.shape[0]
    diag = np.diag(K_ss)

    def sq_distances_to(c: int) -> np.ndarray:  # |phi(s) - phi(s_c)|^2 of every sample row
        return np.maximum(diag - 2.0 * K_ss[:, c] + diag[c], 0.0)

    chosen = [int(rng.integers(m))]
    d2 = sq_distances_to(chosen[0])
    for _ in range(1, k):
        total = d2.sum()
        if not total > 0:  # every row on a chosen one: no new centre can differ
            break
        nxt = int(np.searchsorted(np.cumsum(d2), rng.random() * total))
        nxt = min(nxt, m - 1)
        chosen.append(nxt)
        d2 = np.minimum(d2, sq_distances_to(nxt))
    return np.asarray(chosen)


def kernel_kmeans(
    kernel: Kernel, sample: np.ndarray, k: int, *, seed: int, max_iter: int = KMEANS_MAX_ITER
) -> tuple[KernelCentres, np.ndarray]:
    """Kernel k-means of the ``sample`` rows into at most ``k`` clusters: k-means++ seeding
    from ``seed``, then Lloyd's iterations on ``K(S, S)`` until no label changes (at most
    ``max_iter``).  Returns the non-empty clusters' :class:`KernelCentres` (numbered in
    order of their first member) and the sample's labels."""
    sample = np.ascontiguousarray(sample, dtype=np.float32)
    m = sample.shape[0]
    if m == 0:
        raise ValueError("kernel k-means needs at least one sample row")
    k = max(1, min(int(k), m))
    K_ss = kernel.block(sample, sample)
    rng = np.random.default_rng(seed)
    seeds = _plus_plus(K_ss, k, rng)
    k = seeds.size
    # the seeds as single-row centres: ||phi(s)||^2 = K(s, s)
    labels = nearest_centre(K_ss[:, seeds], np.diag(K_ss)[seeds])
    for _ in range(max_iter):
        _, centre_sq, cross = _centres_of(K_ss, labels, k)
        new = nearest_centre(cross, centre_sq)
        if np.array_equal(new, labels):
            break
        labels = new
    # the non-empty clusters, renumbered by their first member
    _, first = np.unique(labels, return_index=True)
    order = labels[np.sort(first)]
    renumber = np.full(k, -1)
    renumber[order] = np.arange(order.size)
    labels = renumber[labels]
    weights, centre_sq, _ = _centres_of(K_ss, labels, order.size)
    return KernelCentres(sample, weights, centre_sq), labels
