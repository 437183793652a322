"""The random-node sparse ELM over Parquet work units, by CoCoA+ rounds (Smith et al.,
JMLR 2018) on a Dask cluster or in this process.

The rows are dealt into K blocks of work units (K: the cluster's worker threads by
default).  A round: every block, pinned to one worker so that its hidden outputs stay in
that worker's cache, runs a few passes of the single-process dual coordinate descent on
its rows against the shared output weights ``beta`` (``solvers.cocoa_local``) and returns
only its change to beta (``n_pairs x L`` numbers) and its terms of the duality gap; the
coordinator adds the changes (CoCoA+'s "adding", with ``sigma' = K``) and sends the new
beta with the next round.  Rounds end when every one-vs-one pair's relative duality gap is
at most ``tol``; no row ever leaves its worker.

A unit's dual variables live in ``state_dir``, one file per unit and round, written to a
temporary name and renamed: a task run again after its worker died reads the same inputs
and writes the same output, so a lost worker changes nothing in the result.  With a
LocalCluster (or any cluster on one file system) the default temporary folder works; on
machines without a shared file system, ``state_dir`` must be a path every worker sees.

Each process keeps the hidden outputs ``h(x)`` of its blocks in a cache of ``cache_mb`` MB:
the whole blocks when all it holds fit together (then each local subproblem is solved
over all its block's rows at once), else as many units as fit, the others computed again
from their rows each round; so a process's memory is bounded whatever the number of rows
(the cache, and beside it the units its threads are working on).  No scikit-learn here: a
fresh worker starts fast.
"""

from __future__ import annotations

import dataclasses
import numbers
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from elmscale.core.threads import map_in_threads, resolve_n_threads, thread_budget
from elmscale.data.parquet import ParquetDataset, WorkUnit
from elmscale.features.base import feature_map_from_dict
from elmscale.linalg.targets import one_vs_one_pairs
from elmscale.solvers.cocoa_local import (
    block_vector,
    duality_gap,
    implied_duals,
    local_passes,
    pass_seed,
    sample_beta,
    scale_rows,
    start_terms,
)

__all__ = ["CocoaProblem", "CocoaResult", "block_round", "clear_cache", "fit_cocoa"]

#: Rows of one unit at most (its hidden outputs are one float32 array: 262,144 rows x 200
#: nodes is 210 MB); larger row groups are cut into contiguous ranges.
MAX_UNIT_ROWS = 262_144
#: The warm start's sample (rows per hidden node, and at most this share of the rows).
WARM_ROWS_PER_NODE = 100
WARM_FRACTION = 0.2


@dataclass(frozen=True)
class CocoaProblem:
    """What every task of one fit needs (small: sent with each task)."""

    layer: dict  # the random layer's to_dict()
    classes: tuple  # the label values, sorted (pair (a, b): t = +1 for classes[a])
    pairs: tuple  # ((a, b), ...) class indices of the one-vs-one pairs
    C: float
    sigma_prime: float  # CoCoA+'s subproblem scaling: the number of blocks
    local_passes: int
    local_tol: float
    seed: int
    state_dir: str
    fit_id: str  # names this fit's entries in the workers' caches
    cache_mb: float
    whole_blocks: bool  # the plan: each block solved over all its rows (else unit by unit)
    warm: bool = False  # round 0 starts from the duals block_start wrote (else from zero)
    start_scale: tuple = ()  # per pair, the factor on those duals (_warm_start's line search)


class BlockResult(NamedTuple):
    """A block's round: its change to beta (n_pairs x L) and, per pair, the gap terms at
    the round's starting beta (arrays of n_pairs), and its passes (the largest)."""

    delta_beta: np.ndarray
    hinge: np.ndarray
    alpha_sum: np.ndarray
    passes: int


class CocoaResult(NamedTuple):
    """``beta`` (n_pairs x L), per pair ``primal`` / ``dual`` objectives and ``gap``
    (relative), ``rounds``, ``converged``, ``support`` (global row numbers of the rows with
    a_i > 0 in any pair, sorted: a read-only memory map of a file, never held in memory
    whole), ``n_support`` (their count per class), the wall ``seconds`` of each round, and
    ``whole_blocks`` (the plan: see ``fit_cocoa``)."""

    beta: np.ndarray
    primal: np.ndarray
    dual: np.ndarray
    gap: np.ndarray
    rounds: int
    converged: bool
    support: np.ndarray
    n_support: np.ndarray
    seconds: list
    whole_blocks: bool


# -- the worker side ----------------------------------------------------------------------

_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_BYTES = [0]


def clear_cache(fit_id: str | None = None) -> int:
    """Drop this process's cached hidden outputs (of one fit, or all); returns bytes freed."""
    freed = 0
    with _CACHE_LOCK:
        for key in [k for k in _CACHE if fit_id is None or k[0] == fit_id]:
            H, y_idx = _CACHE.pop(key)
            freed += H.nbytes + y_idx.nbytes
        _CACHE_BYTES[0] -= freed
    return freed


def _class_index(y, classes: tuple, unit: WorkUnit) -> np.ndarray:
    values = np.asarray(classes, dtype=object if isinstance(classes[0], str) else None)
    index = np.searchsorted(values, y)
    index = np.minimum(index, len(values) - 1)
    bad = values[index] != y
    if np.any(bad):
        raise ValueError(
            f"{unit.pieces[0][0]}: label {y[np.argmax(bad)]!r} is not among the classes "
            f"{list(classes)} seen when the fit started"
        )
    return index.astype(np.int64)


def _state_path(problem: CocoaProblem, unit_index: int, round_index: int) -> Path:
    return Path(problem.state_dir) / f"unit{unit_index:06d}.round{round_index:06d}.npy"


def _load_alpha(problem: CocoaProblem, unit: WorkUnit, round_index: int) -> np.ndarray:
    if round_index == 0 and not problem.warm:
        return np.zeros((len(problem.pairs), unit.n_rows))
    path = _state_path(problem, unit.index, round_index)
    try:
        alpha = np.load(path, allow_pickle=False)
        if round_index == 0 and problem.start_scale:
            alpha *= np.asarray(problem.start_scale)[:, None]
    except OSError as exc:
        raise RuntimeError(
            f"{path}: the dual variables of unit {unit.index} after round {round_index} "
            f"cannot be read ({exc}); state_dir must be a folder every worker can read"
        ) from exc
    if alpha.shape != (len(problem.pairs), unit.n_rows):
        raise RuntimeError(
            f"{path}: shape {alpha.shape}, expected {(len(problem.pairs), unit.n_rows)}"
        )
    return alpha


def _save_alpha(problem: CocoaProblem, unit: WorkUnit, round_index: int, alpha) -> None:
    path = _state_path(problem, unit.index, round_index)
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, alpha, allow_pickle=False)
    os.replace(tmp, path)


def _block_outputs(units: list[WorkUnit], problem: CocoaProblem):
    """``(sqrt(sigma') h(X), class index)`` of these units' rows as one array, from the
    cache or computed (and cached as a whole if it fits): a whole block, or one unit."""
    key = (problem.fit_id, tuple(u.index for u in units))
    with _CACHE_LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    layer = feature_map_from_dict(problem.layer)
    n = sum(u.n_rows for u in units)
    H = np.empty((n, layer.n_hidden), dtype=np.float32)
    y_idx = np.empty(n, dtype=np.int64)
    at = 0
    for unit in units:
        X, y = unit.read()
        if y is None:
            raise ValueError(f"{unit.pieces[0][0]}: the data set has no label column")
        layer.transform(X, out=H[at : at + unit.n_rows])
        y_idx[at : at + unit.n_rows] = _class_index(y, problem.classes, unit)
        at += unit.n_rows
    scale_rows(H, problem.sigma_prime)
    _cache_put(key, H, y_idx, problem.cache_mb * 2**20)
    return H, y_idx


def _cache_put(key, H, y_idx, budget: float) -> None:
    """Keep ``(H, y_idx)`` if it fits in ``budget`` bytes after dropping other fits'
    entries.  This fit's entries are never evicted: a round visits the units in the same
    order every time, and LRU over a cycle larger than the cache would miss every time;
    keeping the first ones makes a fraction budget / total of the visits hits."""
    size = H.nbytes + y_idx.nbytes
    with _CACHE_LOCK:
        for old in [k for k in _CACHE if k[0] != key[0]]:
            if _CACHE_BYTES[0] + size <= budget:
                break
            old_H, old_y = _CACHE.pop(old)
            _CACHE_BYTES[0] -= old_H.nbytes + old_y.nbytes
        if _CACHE_BYTES[0] + size <= budget:
            _CACHE[key] = (H, y_idx)
            _CACHE_BYTES[0] += size


class _Totals:
    """A block's running gap terms and passes."""

    def __init__(self, n_pairs: int):
        self.hinge = np.zeros(n_pairs)
        self.alpha_sum = np.zeros(n_pairs)
        self.passes = 0


def _pair_rows(y_idx, pair, n_pairs):
    """A pair's rows among these (all of them for a single pair) and their +1 / -1 targets
    (+1: the pair's first class)."""
    a, b = pair
    rows = slice(None) if n_pairs == 1 else np.flatnonzero((y_idx == a) | (y_idx == b))
    return rows, np.where(y_idx[rows] == a, 1.0, -1.0)


def _pair_steps(H, y_idx, alpha, beta, v, problem, round_index, seed_key, totals):
    """Every pair's gap terms at ``beta`` and local solve on these rows (``alpha``
    (n_pairs, n) and ``v`` (n_pairs, L) updated in place)."""
    n_pairs = len(problem.pairs)
    for p, pair in enumerate(problem.pairs):
        rows, t = _pair_rows(y_idx, pair, n_pairs)
        if t.size == 0:
            continue
        # one pair: every row, its duals updated in place; else copies, written back below
        Hp, ap = (H, alpha[0]) if n_pairs == 1 else (H[rows], alpha[p, rows])
        terms = start_terms(Hp, t, ap, beta[p], problem.sigma_prime)
        totals.hinge[p] += terms.hinge
        totals.alpha_sum[p] += terms.alpha_sum
        done = local_passes(
            Hp,
            t,
            ap,
            v[p],
            C=problem.C,
            passes=problem.local_passes,
            tol=problem.local_tol,
            seed=pass_seed(problem.seed, round_index, seed_key * n_pairs + p),
        )
        totals.passes = max(totals.passes, done)
        if n_pairs > 1:
            alpha[p, rows] = ap


def block_round(
    units: list[WorkUnit],
    beta: np.ndarray,
    round_index: int,
    problem: CocoaProblem,
    *,
    n_threads: int = 1,
) -> BlockResult:
    """One block's share of round ``round_index``: reads its units' dual variables of that
    round, solves its local subproblem from ``beta`` (n_pairs x L), writes the next
    round's.

    With ``problem.whole_blocks`` (the fit's plan, ``fit_cocoa``) the subproblem is solved
    over all the block's rows at once, its hidden outputs kept in the cache from round to
    round; otherwise unit after unit, the units' outputs kept while the cache has room and
    computed again when not, and more rounds (measured on 40,000 rows in 8 units: per
    unit, 20 rounds left the dual 1.6e-3 above the optimum).
    """
    n_pairs = beta.shape[0]
    root = np.sqrt(problem.sigma_prime)
    v = beta / root  # (n_pairs, L): the local subproblem's vector, rows contiguous
    v_start = v.copy()
    totals = _Totals(n_pairs)
    with thread_budget(n_threads):
        if problem.whole_blocks:
            H, y_idx = _block_outputs(units, problem)
            alpha = np.concatenate([_load_alpha(problem, u, round_index) for u in units], axis=1)
            _pair_steps(H, y_idx, alpha, beta, v, problem, round_index, units[0].index, totals)
            at = 0
            for unit in units:
                _save_alpha(problem, unit, round_index + 1, alpha[:, at : at + unit.n_rows])
                at += unit.n_rows
        else:
            for unit in units:
                H, y_idx = _block_outputs([unit], problem)
                alpha = _load_alpha(problem, unit, round_index)
                _pair_steps(H, y_idx, alpha, beta, v, problem, round_index, unit.index, totals)
                _save_alpha(problem, unit, round_index + 1, alpha)
                del H, y_idx  # before the next unit's: one unit's outputs at a time
    return BlockResult((v - v_start) / root, totals.hinge, totals.alpha_sum, totals.passes)


def unit_sample(unit: WorkUnit, fraction: float, problem: CocoaProblem, *, n_threads: int = 1):
    """``(X, class index)`` of a seeded uniform sample of the unit's rows (each row kept
    with probability ``fraction``): the warm start's rows, sent to the coordinator."""
    del n_threads
    X, y = unit.read()
    rng = np.random.default_rng([problem.seed, unit.index])
    keep = np.flatnonzero(rng.random(unit.n_rows) < fraction)
    return np.ascontiguousarray(X[keep], dtype=np.float32), _class_index(
        y[keep], problem.classes, unit
    )


def block_start(
    units: list[WorkUnit], betas: np.ndarray, problem: CocoaProblem, *, n_threads: int = 1
) -> np.ndarray:
    """The warm start of a block: each pair's duals implied by ``betas`` (n_pairs x L, the
    sample's solutions) on the block's rows, written as round 0's; returns the block's
    ``A_k a`` (n_pairs x L) and, per pair, its sum of ``a``."""
    n_pairs = len(problem.pairs)
    total = np.zeros_like(betas)
    alpha_sum = np.zeros(n_pairs)
    groups = [units] if problem.whole_blocks else [[unit] for unit in units]
    with thread_budget(n_threads):
        for group in groups:
            H, y_idx = _block_outputs(group, problem)
            alpha = np.zeros((n_pairs, H.shape[0]))
            for p, pair in enumerate(problem.pairs):
                rows, t = _pair_rows(y_idx, pair, n_pairs)
                Hp = H if n_pairs == 1 else H[rows]
                alpha[p, rows] = implied_duals(Hp, t, betas[p], problem.sigma_prime, problem.C)
                total[p] += block_vector(Hp, t, alpha[p, rows], problem.sigma_prime)
                alpha_sum[p] += alpha[p, rows].sum()
            at = 0
            for unit in group:
                _save_alpha(problem, unit, 0, alpha[:, at : at + unit.n_rows])
                at += unit.n_rows
            del H, y_idx
    return total, alpha_sum


def unit_support(unit: WorkUnit, round_index: int, problem: CocoaProblem, *, n_threads: int = 1):
    """Support vectors per class of the unit's rows (a_i > 0 in any pair); their global row
    numbers are written to the unit's support file in the state folder
    (:func:`_support_path`), not returned, so that the coordinator receives counts only.
    (``n_threads``: ``map_units`` gives every unit function its budget; this reads.)"""
    del n_threads
    alpha = _load_alpha(problem, unit, round_index)
    local = np.flatnonzero((alpha > 0).any(axis=0))
    _, y = unit.read()
    y_idx = _class_index(y[local], problem.classes, unit)
    path = _support_path(problem, unit.index)
    tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, (unit.start + local).astype(np.int64), allow_pickle=False)
    os.replace(tmp, path)
    return np.bincount(y_idx, minlength=len(problem.classes))


def _support_path(problem: CocoaProblem, unit_index: int) -> Path:
    return Path(problem.state_dir) / f"unit{unit_index:06d}.support.npy"


# -- the coordinator ----------------------------------------------------------------------


def _blocks(units: list[WorkUnit], n_blocks: int) -> list[list[WorkUnit]]:
    """Units dealt round-robin into ``n_blocks`` blocks (near-equal rows for equal units)."""
    return [units[b::n_blocks] for b in range(n_blocks) if units[b::n_blocks]]


def _hidden_bytes(block: list[WorkUnit], n_hidden: int) -> int:
    """A block's cache entry: float32 hidden outputs and int64 class indices per row."""
    return sum(u.n_rows for u in block) * (4 * n_hidden + 8)


def _blocks_per_process(client, workers, blocks) -> int:
    """The most blocks one process holds in a round: all of them here; on a cluster, those
    ``_run_round`` sends to one worker (block i to ``workers[i % len(workers)]``)."""
    if client is None:
        return len(blocks)
    return max(len(blocks[w :: len(workers)]) for w in range(min(len(workers), len(blocks))))


def _cut_units(dataset: ParquetDataset) -> list[WorkUnit]:
    units = dataset.units()
    if max(u.n_rows for u in units) > MAX_UNIT_ROWS:
        units = dataset.units(-(-dataset.n_rows // MAX_UNIT_ROWS))
    return units


def _on_blocks(client, workers, blocks, fn, *args, n_threads=None):
    """``[fn(block, *args, n_threads=1) for block in blocks]``: side by side on this
    process's cores, one BLAS / numba thread each as on workers (so the sums, hence the
    bits, are the cluster's); or each block on its worker (block i on ``workers[i %
    len(workers)]``, where its hidden outputs are cached)."""
    if client is None:
        # map_in_threads holds BLAS at one thread around the whole pool: BLAS limits are
        # process-wide, and a block's own thread_budget(1), left while another block still
        # ran, restored the caller's limit under it (its sums, hence bits, then differed)
        return map_in_threads(
            lambda b: fn(b, *args, n_threads=1), blocks, resolve_n_threads(n_threads)
        )
    futures = [
        client.submit(
            fn,
            block,
            *args,
            n_threads=1,
            pure=False,
            workers=[workers[i % len(workers)]],
            allow_other_workers=True,
            retries=3,
        )
        for i, block in enumerate(blocks)
    ]
    return client.gather(futures)


def _run_round(client, workers, blocks, beta, round_index, problem, n_threads):
    return _on_blocks(
        client, workers, blocks, block_round, beta, round_index, problem, n_threads=n_threads
    )


def _warm_start(client, workers, blocks, units, problem, n_rows, sample_rows, n_threads):
    """Round 0's beta from a sample: ``sample_rows`` rows drawn uniformly on the workers,
    each pair solved here with ``C * n / m`` (the sample's primal estimating the whole
    one's), and every block starting from the duals that solution implies on its rows
    (``block_start``)."""
    from elmscale.distributed.executors import map_units

    fraction = min(1.0, sample_rows / n_rows)
    parts = map_units(unit_sample, units, client=client, fraction=fraction, problem=problem)
    X = np.concatenate([part[0] for part in parts])
    y_idx = np.concatenate([part[1] for part in parts])
    layer = feature_map_from_dict(problem.layer)
    H = np.empty((X.shape[0], layer.n_hidden), dtype=np.float32)
    layer.transform(X, out=H)
    n_pairs = len(problem.pairs)
    betas = np.zeros((n_pairs, layer.n_hidden))
    with thread_budget(n_threads):
        for p, pair in enumerate(problem.pairs):
            rows, t = _pair_rows(y_idx, pair, n_pairs)
            if t.size:
                betas[p] = sample_beta(
                    H[rows],
                    t,
                    C=problem.C * n_rows / max(X.shape[0], 1),
                    tol=problem.local_tol,
                    seed=pass_seed(problem.seed, 0, p),
                )
    del H, X
    starts = _on_blocks(client, workers, blocks, block_start, betas, problem, n_threads=n_threads)
    beta = np.sum([start[0] for start in starts], axis=0)
    alpha_sum = np.sum([start[1] for start in starts], axis=0)
    # the implied duals overshoot (every row inside the margin at C): scale each pair's by
    # the exact line search of the dual 1/2 s^2 |beta|^2 - s sum a on s in [0, 1], so the
    # start is never worse than zero
    norms = np.einsum("pl,pl->p", beta, beta)
    scale = np.clip(alpha_sum / np.maximum(norms, 1e-300), 0.0, 1.0)
    return beta * scale[:, None], tuple(float(x) for x in scale)


def fit_cocoa(
    dataset: ParquetDataset,
    layer: dict,
    classes,
    *,
    C: float,
    tol: float,
    client=None,
    n_blocks: int | None = None,
    local_passes: int = 100,
    cache_mb: float = 1024.0,
    state_dir=None,
    max_rounds: int = 500,
    seed: int = 0,
    n_threads: int | None = None,
    on_round=None,
    warm_rows: int | str = 0,
) -> CocoaResult:
    """Solve every one-vs-one pair of the random-node sparse ELM on ``dataset`` by CoCoA+.

    ``layer``: the random layer's ``to_dict()``; ``classes``: the sorted label values;
    ``tol``: the relative duality gap at which a pair is solved; ``n_blocks``: the blocks
    updated in parallel (default: the cluster's worker threads; 2 without a client);
    ``local_passes``: passes per round at most; ``cache_mb``: each process's cache of
    hidden outputs; ``state_dir``: where the dual variables live (a fresh temporary
    folder by default, removed at the end); ``on_round(round, gaps)`` is called after each
    round; ``warm_rows``: the rows of the warm start's sample (``_warm_start``; "auto":
    ``WARM_ROWS_PER_NODE`` per hidden node, at most a ``WARM_FRACTION`` of the rows; 0,
    the default, starts every dual at zero: measured on 1M rows x 200 nodes, the warm
    start took as many rounds for K = 2 and 4 blocks, one more for K = 1, and left a
    larger gap after 40 rounds for K = 8; on 15,000-50,000 rows it saved 0-17 rounds).

    The plan (``CocoaResult.whole_blocks``): when every block one process holds fits in
    its ``cache_mb`` together, each block is solved over all its rows, its outputs cached
    from round to round; otherwise unit by unit, the cache filled with units while it
    has room (each process then holds at most ``cache_mb`` of cached outputs and, beside
    them, the unit each of its threads is working on).  Given the plan, the result does
    not depend on where the blocks run; the plan itself counts the blocks per process,
    all of them here and ``ceil(blocks / workers)`` on a cluster, so near the budget a
    cluster may solve whole blocks where one process would go unit by unit.
    """
    _check_round_cap(max_rounds)
    _warm_rows(warm_rows, 1, 1)  # checked before any work
    workers, n_blocks = _layout(client, n_blocks)
    units = _cut_units(dataset)
    blocks = _blocks(units, n_blocks)
    own_dir = state_dir is None
    state = Path(tempfile.mkdtemp(prefix="elmscale-cocoa-")) if own_dir else Path(state_dir)
    state.mkdir(parents=True, exist_ok=True)
    classes = tuple(np.asarray(classes).tolist())
    n_hidden = int(layer["n_hidden"])
    warm_rows = _warm_rows(warm_rows, dataset.n_rows, n_hidden)
    held = _blocks_per_process(client, workers, blocks)
    block_bytes = max(_hidden_bytes(block, n_hidden) for block in blocks)
    problem = CocoaProblem(
        layer=dict(layer),
        classes=classes,
        pairs=tuple(one_vs_one_pairs(len(classes))),
        C=float(C),
        sigma_prime=float(len(blocks)),
        local_passes=int(local_passes),
        local_tol=float(tol),
        seed=int(seed),
        state_dir=str(state),
        fit_id=uuid.uuid4().hex,
        cache_mb=float(cache_mb),
        whole_blocks=held * block_bytes <= float(cache_mb) * 2**20,
        warm=warm_rows > 0,
    )
    rounds = _Rounds(np.zeros((len(problem.pairs), n_hidden)))
    try:
        if problem.warm:
            rounds.beta, scale = _warm_start(
                client, workers, blocks, units, problem, dataset.n_rows, warm_rows, n_threads
            )
            problem = dataclasses.replace(problem, start_scale=scale)
        _run_rounds(
            rounds, client, workers, blocks, units, problem, tol, max_rounds, n_threads, on_round
        )
        n_support = _count_support(client, units, rounds.r, problem)
        support = _support_rows(units, problem, int(n_support.sum()))
    finally:
        _clean_up(client, units, problem, rounds.r, state if own_dir else None)
    gaps = rounds.gaps
    return CocoaResult(
        beta=rounds.beta,
        primal=np.array([g[0] for g in gaps]),
        dual=np.array([g[1] for g in gaps]),
        gap=np.array([g[2] for g in gaps]),
        rounds=rounds.r,
        converged=rounds.converged,
        support=support,
        n_support=n_support,
        seconds=rounds.seconds,
        whole_blocks=problem.whole_blocks,
    )


def _warm_rows(warm_rows, n_rows: int, n_hidden: int) -> int:
    if isinstance(warm_rows, str) and warm_rows == "auto":
        return min(WARM_ROWS_PER_NODE * n_hidden, int(WARM_FRACTION * n_rows))
    if isinstance(warm_rows, bool) or not isinstance(warm_rows, numbers.Integral) or warm_rows < 0:
        raise ValueError(f"warm_rows must be 'auto' or an integer >= 0; got {warm_rows!r}")
    return min(int(warm_rows), n_rows)


def _check_round_cap(max_rounds) -> None:
    # round 0 always runs; a negative cap would run none
    if (
        isinstance(max_rounds, bool)
        or not isinstance(max_rounds, numbers.Integral)
        or max_rounds < 0
    ):
        raise ValueError(f"max_rounds must be an integer >= 0; got {max_rounds!r}")


def _layout(client, n_blocks: int | None) -> tuple[list, int]:
    """``(workers, blocks)``: the cluster's workers in name order (none here) and the number
    of blocks (default: the cluster's worker threads; 2 here)."""
    workers: list = []
    if client is not None:
        from elmscale.distributed.executors import DaskExecutor

        DaskExecutor(client)  # checks the client
        nthreads = client.nthreads()
        workers = sorted(nthreads)
        if n_blocks is None:
            n_blocks = sum(nthreads.values())
    n_blocks = 2 if n_blocks is None else int(n_blocks)
    if n_blocks < 1:
        raise ValueError(f"n_blocks must be >= 1; got {n_blocks}")
    return workers, n_blocks


class _Rounds:
    """The coordinator's state: ``beta``, the last round ``r`` with its per-pair ``gaps``
    (primal, dual, relative gap), whether it ``converged``, each round's ``seconds``."""

    def __init__(self, beta: np.ndarray):
        self.beta = beta
        self.r = 0
        self.gaps: list = []
        self.converged = False
        self.seconds: list = []


def _run_rounds(
    rounds, client, workers, blocks, units, problem, tol, max_rounds, n_threads, on_round
):
    """Rounds until every pair's relative gap is at most ``tol`` or ``max_rounds`` have run:
    the model is then beta and the dual variables of the last round."""
    for r in range(max_rounds + 1):
        rounds.r = r
        started = time.perf_counter()
        results = _run_round(client, workers, blocks, rounds.beta, r, problem, n_threads)
        rounds.gaps = [
            duality_gap(
                rounds.beta[p],
                problem.C,
                sum(res.hinge[p] for res in results),
                sum(res.alpha_sum[p] for res in results),
            )
            for p in range(len(problem.pairs))
        ]
        rounds.seconds.append(time.perf_counter() - started)
        if on_round is not None:
            on_round(r, [g[2] for g in rounds.gaps])
        rounds.converged = all(g[2] <= tol for g in rounds.gaps)
        if rounds.converged or r == max_rounds:
            return
        _remove_round(problem, units, r)  # round r's inputs: no task reads them again
        for res in results:  # the blocks' changes, added in block order
            rounds.beta += res.delta_beta


def _clean_up(client, units, problem: CocoaProblem, last_round: int, own_dir) -> None:
    """The fit's cache entries dropped everywhere; its state folder removed (``own_dir``)
    or emptied of the rounds left in it."""
    if client is not None:
        try:
            client.run(clear_cache, problem.fit_id)
        except Exception:  # a cluster going away must not hide the fit's own error
            pass
    clear_cache(problem.fit_id)
    if own_dir is not None:
        shutil.rmtree(own_dir, ignore_errors=True)
    else:
        for done in (last_round, last_round + 1):
            _remove_round(problem, units, done)
        for unit in units:  # left by a fit that failed before joining them
            _support_path(problem, unit.index).unlink(missing_ok=True)


def _remove_round(problem: CocoaProblem, units, round_index: int) -> None:
    for unit in units:
        try:
            _state_path(problem, unit.index, round_index).unlink()
        except FileNotFoundError:
            pass


def _count_support(client, units, round_index, problem) -> np.ndarray:
    """Support vectors per class, summed from the units' counts (the rows stay in files)."""
    from elmscale.distributed.executors import map_units

    counts = map_units(unit_support, units, client=client, round_index=round_index, problem=problem)
    return np.sum(counts, axis=0, dtype=np.int64)


def _support_rows(units, problem: CocoaProblem, n_rows: int) -> np.ndarray:
    """The units' support files (in unit order: their rows ascend) joined into one .npy
    file, streamed a unit at a time, and returned as a read-only memory map of it.  The
    file is unlinked once mapped (its pages live as long as the map), so the coordinator's
    memory does not grow with the support vectors (issue 31: 787 MB at 20M rows) and
    nothing is left on disk."""
    parts = [_support_path(problem, unit.index) for unit in units]
    fd, name = tempfile.mkstemp(prefix="elmscale-support-", suffix=".npy")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            # n_rows: the units' counts summed (_count_support), checked against the files
            header = {"descr": "<i8", "fortran_order": False, "shape": (n_rows,)}
            np.lib.format.write_array_header_1_0(f, header)
            written = 0
            for part in parts:
                rows = np.load(part, allow_pickle=False)
                rows.tofile(f)
                written += rows.size
                del rows  # before the next unit's: one unit's rows at a time
                part.unlink()
        if written != n_rows:
            raise RuntimeError(
                f"{problem.state_dir}: the units' support files hold {written} rows, their "
                f"counts {n_rows}"
            )
        return np.load(path, mmap_mode="r")
    finally:
        path.unlink(missing_ok=True)
