"""Forward selection of kernel columns with the candidates spread over Dask workers.

Each worker holds a Dask actor with the state of its share of the candidate rows
(:class:`elmscale.solvers.forward_selection.CandidateColumns`: their correlations with
the residual and their orthogonalised norms), computing its kernel columns next to that
state against the training rows (sent to every worker once).  A step is one round trip:
the coordinator sends the new basis vector q (and the candidate chosen last, to its
owner); every actor updates its candidates by one kernel product and returns only its
best candidate; the coordinator keeps the best of those.  Never a call per candidate.
:class:`DaskCandidates` has :class:`CandidateColumns`' interface, so
:func:`~elmscale.solvers.forward_selection.forward_select` runs unchanged on it and gives
the local run's selection.

When the candidates' Gram fits ``cache_mb``, :func:`dask_candidate_gram` computes it
instead: each worker the :func:`~elmscale.solvers.forward_selection.candidate_gram` of its
share of the rows (the function the local run calls), M x M numbers back from each, and
the selection runs in the candidates' space here (one round trip in all).
"""

from __future__ import annotations

import bisect

import numpy as np

from elmscale.core.threads import thread_budget
from elmscale.features.kernels import Kernel
from elmscale.solvers.forward_selection import CandidateColumns, CandidateGram, candidate_gram

__all__ = ["DaskCandidates", "dask_candidate_gram"]


def _share_gram(kernel: dict, X: np.ndarray, X_cand: np.ndarray, Y: np.ndarray) -> CandidateGram:
    with thread_budget(1):
        return candidate_gram(Kernel.from_dict(kernel), X, X_cand, Y)


def dask_candidate_gram(
    client, kernel: Kernel, X: np.ndarray, X_cand: np.ndarray, Y: np.ndarray
) -> CandidateGram:
    """:func:`~elmscale.solvers.forward_selection.candidate_gram` of the rows ``X`` (targets
    ``Y``) against ``X_cand``, the rows split in contiguous shares over the workers of a
    Dask ``client`` (each share sent to its worker once, the candidates to all), the
    shares' sums combined here."""
    workers = sorted(client.scheduler_info()["workers"])
    shares = np.array_split(np.arange(X.shape[0]), min(len(workers), X.shape[0]))
    futures = []
    for share, worker in zip(shares, workers):
        rows = slice(int(share[0]), int(share[-1]) + 1)
        # the candidates sent to each worker from here, under keys of its own: a broadcast
        # scatter copies them between the workers (Dask's replicate), and a copy under a
        # content key shared with an earlier fit's may be released while it is sent
        X_part, Y_part, cand = client.scatter(
            [X[rows], Y[rows], X_cand], workers=[worker], hash=False
        )
        futures.append(
            client.submit(
                _share_gram, kernel.to_dict(), X_part, cand, Y_part, workers=[worker], pure=False
            )
        )
    return CandidateGram.combine(*client.gather(futures))


class _CandidateActor:
    """One worker's candidates (a Dask actor): the state and its one-round-trip step."""

    def __init__(
        self, kernel: dict, X: np.ndarray, X_cand: np.ndarray, Y: np.ndarray, cache_mb: float
    ):
        with thread_budget(1):
            self.columns = CandidateColumns(Kernel.from_dict(kernel), X, X_cand, Y, cache_mb)

    def step(self, chosen, q, qr, tol: float) -> tuple[int, float]:
        """Mark ``chosen`` (a local index or None), apply the basis vector q (or None),
        return ``(local index, gain)`` of this worker's best candidate."""
        with thread_budget(1):
            if chosen is not None:
                self.columns.choose(int(chosen))
            if q is not None:
                self.columns.update(q, qr)
            return self.columns.best(tol)


class DaskCandidates:
    """The candidate rows ``X[pool]`` split over the workers of a Dask ``client``, in
    contiguous shares in pool order (one actor per worker, its share's kernel columns kept
    in float32 up to ``cache_mb`` as :class:`CandidateColumns` keeps them)."""

    def __init__(
        self,
        client,
        kernel: Kernel,
        X: np.ndarray,
        pool: np.ndarray,
        Y: np.ndarray,
        cache_mb: float = 0.0,
    ):
        self.kernel = kernel
        self.X = X
        self.X_cand = X[pool]
        workers = sorted(client.scheduler_info()["workers"])
        shares = np.array_split(np.arange(len(pool)), min(len(workers), len(pool)))
        self.offsets = [int(share[0]) for share in shares]
        X_on_workers = client.scatter(X, broadcast=True)
        Y_on_workers = client.scatter(Y, broadcast=True)
        futures = [
            client.submit(
                _CandidateActor,
                kernel.to_dict(),
                X_on_workers,
                self.X_cand[share],
                Y_on_workers,
                float(cache_mb),
                actor=True,
                workers=[worker],
                pure=False,
            )
            for share, worker in zip(shares, workers)
        ]
        self.actors = [f.result() for f in futures]
        self._futures = futures  # keep the actors alive
        self._chosen: int | None = None
        self._update: tuple | None = None

    def _owner(self, j: int) -> tuple[int, int]:
        """``(actor, local index)`` of candidate j."""
        a = bisect.bisect_right(self.offsets, j) - 1
        return a, j - self.offsets[a]

    def choose(self, j: int) -> None:
        self._chosen = int(j)

    def update(self, q: np.ndarray, qr: np.ndarray) -> None:
        self._update = (q, qr)

    def best(self, tol: float) -> tuple[int, float]:
        """The pending choice and basis vector go out in one call per actor; the best of
        the actors' bests comes back (ties to the lowest index, as ``np.argmax``)."""
        owner = self._owner(self._chosen) if self._chosen is not None else (-1, None)
        q, qr = self._update if self._update is not None else (None, None)
        calls = [
            actor.step(owner[1] if a == owner[0] else None, q, qr, float(tol))
            for a, actor in enumerate(self.actors)
        ]
        self._chosen = self._update = None
        best, best_gain = -1, -np.inf
        for a, call in enumerate(calls):
            j, gain = call.result()
            if j >= 0 and gain > best_gain:
                best, best_gain = self.offsets[a] + j, gain
        return (best, float(best_gain)) if best >= 0 else (-1, 0.0)

    def column(self, j: int) -> np.ndarray:
        return self.kernel.block(self.X, self.X_cand[j : j + 1])[:, 0]
