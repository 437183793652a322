"""The random-node sparse ELM by primal Newton passes over work units, finished on the exact
dual (``solvers.primal_newton``), on a Dask cluster or on this process's threads.

Each pass is one exact map-reduce over every row: the coordinator sends every unfinished
one-vs-one pair's request (a Newton point, or a phase-2 split), each block of work units
(a run of consecutive units pinned to one worker, whose cache keeps its hidden outputs)
adds its units' terms on the nodes of a **sum tree fixed by the number of units alone**
that it holds whole, and the coordinator adds the blocks' nodes on the same tree
(``_tree_total``): every sum has one shape, so the sums, hence the iterates and the
passes, are the same to the bit however the units are dealt into blocks and wherever the
blocks run, and one message per block comes back.  One read of a unit serves every
pair.  No row leaves its worker but the few near the margin that phase 2 gathers (their
hidden outputs).

A task's inputs are its units (where the rows are) and the requests (small): a task run
again after its worker died recomputes its units' outputs from the files and returns the
same numbers, so a lost worker changes nothing in the result.

Each process keeps the hidden outputs ``h(x)`` of its units in a cache of ``cache_mb`` MB,
filled in unit order and never evicted during a fit (a pass visits the units in the same
order every time: LRU over a cycle larger than the cache would miss every time), nor by
another fit running in the same process; units beyond it are computed again from their
rows at each pass.  No scikit-learn here: a fresh worker starts fast.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import io
import operator
import os
import sys
import tempfile
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from elmscale.core.errors import DataError
from elmscale.core.seeding import xorshift_state
from elmscale.core.threads import iter_in_threads, resolve_n_threads, thread_budget
from elmscale.data.storage import Location, is_url, locate, storage_errors, write_whole
from elmscale.distributed.breakdown import (  # (the pass records' columns: re-exported)
    PASS_COLUMNS,
    breakdown_table,
    payload_bytes,
    timings_array,
)
from elmscale.distributed.collections import holder_groups, submit_placed
from elmscale.distributed.worker_heap import workers_passes_heap
from elmscale.features.base import feature_map_from_dict
from elmscale.linalg.targets import TargetEncoder, one_vs_one_pairs
from elmscale.solvers import primal_newton as pn
from elmscale.solvers.dual_common import kkt_violation
from elmscale.solvers.explicit_dual import EXPLICIT_MAX_PASSES

__all__ = [
    "PASS_COLUMNS",
    "ArrayUnit",
    "NewtonResult",
    "array_units",
    "breakdown_table",
    "clear_cache",
    "fit_newton",
    "timings_array",
]

#: Rows of one unit at most (its hidden outputs are one float32 array: 262,144 rows x 200
#: nodes is 210 MB); larger row groups are cut into contiguous ranges.
MAX_UNIT_ROWS = 262_144
#: Passes at most when max_passes is -1 (1M rows x 200 nodes: 16)
DEFAULT_MAX_PASSES = 500
#: Phase 1's passes at most (1M rows x 200 nodes: 14); past them phase 2 starts from there
PHASE1_MAX_PASSES = 100


@dataclass(frozen=True)
class NewtonProblem:
    """What every task of one fit needs (small: sent with each task)."""

    layer: dict  # the random layer's to_dict()
    classes: tuple  # the label values, sorted (pair (a, b): t = +1 for classes[a])
    pairs: tuple  # ((a, b), ...) class indices of the one-vs-one pairs
    C: float
    fit_id: str  # names this fit's entries in the processes' caches
    cache_mb: float
    # the user's shared folder (a path or an fsspec URL, with its store's options) for the
    # units' support files; None: returned through the tasks' results instead
    state_dir: Location | None
    keep_duals: bool = False  # the last pass returns each unit's duals per pair too
    # every unit's index, ascending: a unit's place in the fixed sum tree (``_tree_total``)
    unit_order: tuple = ()


class NewtonRequest(NamedTuple):
    """Phase 1: the terms at ``point + direction`` under each smoothing of ``hs``."""

    point: np.ndarray
    direction: np.ndarray
    hs: tuple


class SplitRequest(NamedTuple):
    """Phase 2: the gap terms at ``beta_check`` and the rows that join the gathered set."""

    beta_fix: np.ndarray
    beta_check: np.ndarray
    h: float
    delta: float
    gathered: np.ndarray
    send_near: bool
    tol: float


class DualsRequest(NamedTuple):
    """The end: every row's dual variable (``primal_newton.unit_duals``)."""

    beta_fix: np.ndarray
    gathered: np.ndarray
    gathered_alpha: np.ndarray


class NewtonResult(NamedTuple):
    """``beta`` (n_pairs x L); per pair the dual objective ``dual`` (the single-process
    solver's ``objective_``), ``primal``, the relative duality ``gap``, the largest KKT
    violation ``kkt``, ``passes`` over the data, ``gathered`` (phase 2's rows) and
    ``converged``; ``support`` (global row numbers of the rows with a_i > 0 in any pair,
    sorted; a read-only memory map of a file of the coordinator's, unlinked, unless
    ``keep_duals``) with ``n_support`` per class; ``alpha`` (n_pairs x n, ``keep_duals``
    only, else None); the wall ``seconds`` of each pass, and each pass's breakdown
    ``timings`` (``pass_breakdown``)."""

    beta: np.ndarray
    dual: np.ndarray
    primal: np.ndarray
    gap: np.ndarray
    kkt: np.ndarray
    passes: np.ndarray
    gathered: np.ndarray
    converged: np.ndarray
    support: np.ndarray
    n_support: np.ndarray
    alpha: np.ndarray | None
    seconds: list
    timings: list = []


# -- where the rows are: Parquet units, or row ranges of arrays here ------------------------


@dataclass(frozen=True)
class ArrayUnit:
    """Rows ``start .. start + n_rows`` of arrays held by this process (the one-process fit's
    units): ``read()`` as a Parquet unit's, labels as class indices."""

    index: int
    start: int
    n_rows: int
    X: np.ndarray
    y: np.ndarray

    def read(self):
        stop = self.start + self.n_rows
        return self.X[self.start : stop], self.y[self.start : stop]

    @property
    def pieces(self):  # (what a label error names)
        return (("the rows given to fit", 0, self.start, self.n_rows),)


def array_units(X: np.ndarray, y_idx: np.ndarray, n_units: int) -> list[ArrayUnit]:
    """``n_units`` contiguous row ranges of ``X`` (float32) and its class indices."""
    bounds = np.linspace(0, X.shape[0], max(1, min(n_units, X.shape[0])) + 1).astype(np.int64)
    return [
        ArrayUnit(i, int(a), int(b - a), X, y_idx)
        for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))
    ]


# -- the worker side ----------------------------------------------------------------------

_CACHE: OrderedDict = OrderedDict()
_CACHE_LOCK = threading.Lock()
_CACHE_BYTES = [0]
#: Each fit's last request for its units' rows in this process (time.monotonic())
_LAST_ASKED: dict[str, float] = {}
#: Seconds after which a fit that has not asked this process for its rows is taken as
#: ended without its clean-up (its coordinator killed, or cut off from the cluster): its
#: entries may then be dropped for another fit's.  A running fit asks for each of its units
#: at every pass, so only a pass longer than this could lose its entries.
STALE_FIT_S = 600.0


def clear_cache(fit_id: str | None = None) -> int:
    """Drop this process's cached hidden outputs (of one fit, or all); returns bytes freed."""
    with _CACHE_LOCK:
        return _drop_fits(lambda fit: fit_id is None or fit == fit_id)


def _drop_fits(chosen) -> int:
    """Drop the entries of the fits that ``chosen(fit_id)`` picks (with ``_CACHE_LOCK``
    held); returns the bytes freed."""
    freed = 0
    for key in [k for k in _CACHE if chosen(k[0])]:
        freed += _CACHE.pop(key).nbytes
    for fit in [f for f in _LAST_ASKED if chosen(f)]:
        del _LAST_ASKED[fit]
    _CACHE_BYTES[0] -= freed
    return freed


def _class_index(y, classes: tuple, unit) -> np.ndarray:
    values = np.asarray(classes, dtype=object if isinstance(classes[0], str) else None)
    index = TargetEncoder("one_of_j", values).index(y)
    if np.any(index < 0):
        raise ValueError(
            f"{unit.pieces[0][0]}: label {y[np.argmax(index < 0)]!r} is not among the "
            f"classes {list(classes)} seen when the fit started"
        )
    return index.astype(np.int64)


class UnitRows(NamedTuple):
    """A unit's rows as the passes read them, sorted by class so that a pair's rows are two
    slices of ``H`` (no copy per pair and pass: measured, those copies made 6-10 classes
    1.2-2.7x slower than dual coordinate descent): the hidden outputs ``H`` (float32), the
    class blocks' starts ``bounds`` (class c is rows ``bounds[c]:bounds[c + 1]``), and
    ``order``, each sorted row's place among the unit's rows."""

    H: np.ndarray
    bounds: np.ndarray
    order: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.H.nbytes + self.bounds.nbytes + self.order.nbytes


def _unit_outputs(unit, problem: NewtonProblem) -> UnitRows:
    """A unit's ``UnitRows``, from the cache or computed (and cached if it fits:
    ``_cache_put``)."""
    key = (problem.fit_id, unit.index)
    with _CACHE_LOCK:
        _LAST_ASKED[problem.fit_id] = time.monotonic()
        hit = _CACHE.get(key)
        if hit is not None:
            return hit
    X, y = unit.read()
    if y is None:
        raise ValueError(f"{unit.pieces[0][0]}: the data set has no label column")
    y_idx = _class_index(y, problem.classes, unit)
    order = np.argsort(y_idx, kind="stable")
    layer = feature_map_from_dict(problem.layer)
    rows = UnitRows(
        H=layer.transform(X[order]),
        bounds=np.searchsorted(y_idx[order], np.arange(len(problem.classes) + 1)),
        order=order,
    )
    _cache_put(key, rows, problem.cache_mb * 2**20)
    return rows


def _cache_put(key, rows: UnitRows, budget: float) -> None:
    """Keep ``rows`` if they fit in ``budget`` bytes, after dropping the entries of ended
    fits (``STALE_FIT_S``) if need be.  No running fit's entries are evicted, this one's or
    another's in the same process (see the module's docstring): a fit finding the cache
    full computes its other units at each pass."""
    with _CACHE_LOCK:
        if _CACHE_BYTES[0] + rows.nbytes > budget:
            now = time.monotonic()
            _drop_fits(lambda fit: now - _LAST_ASKED.get(fit, now) > STALE_FIT_S)
        if _CACHE_BYTES[0] + rows.nbytes <= budget:
            _CACHE[key] = rows
            _CACHE_BYTES[0] += rows.nbytes


def _pair_blocks(rows: UnitRows, pair):
    """A pair's rows: its first class's block (t = +1) and its second's (t = -1), each as
    ``(rows of H, target)``."""
    return [
        (slice(rows.bounds[c], rows.bounds[c + 1]), target) for c, target in zip(pair, (1.0, -1.0))
    ]


def _block_answer(rows: UnitRows, unit, block: slice, target: float, request, C: float):
    """One request's answer over one class block of a unit's rows."""
    H = rows.H[block]
    t = np.full(H.shape[0], target)
    if isinstance(request, NewtonRequest):
        return pn.unit_newton_terms(H, t, request.point, request.direction, request.hs)
    local = rows.order[block]
    if isinstance(request, SplitRequest):
        return pn.unit_split_terms(
            H,
            t,
            unit.start + local,
            request.beta_fix,
            request.beta_check,
            C=C,
            h=request.h,
            delta=request.delta,
            gathered=request.gathered,
            send_near=request.send_near,
            tol=request.tol,
        )
    alpha = pn.unit_duals(
        H,
        t,
        unit.start + local,
        request.beta_fix,
        C=C,
        gathered=request.gathered,
        gathered_alpha=request.gathered_alpha,
    )
    return local, alpha


def _joined(parts: list):
    """Answers of row sets in order (a unit's class blocks, or the units) as one: Newton
    terms added left to right (so the bits follow the order alone), split terms joined,
    duals concatenated."""
    if isinstance(parts[0], tuple) and isinstance(parts[0][0], pn.NewtonTerms):
        return tuple(functools.reduce(operator.add, terms) for terms in zip(*parts))
    if isinstance(parts[0], pn.SplitTerms):
        return pn.join_split_terms(parts)
    return tuple(np.concatenate(column) for column in zip(*parts))


def _unit_terms(unit, rows: UnitRows, requests, problem: NewtonProblem):
    """One unit's answer (its ``rows``) to every pair's request (None for a pair with
    none)."""
    answers = []
    for pair, request in zip(problem.pairs, requests):
        if request is None:
            answers.append(None)
            continue
        answers.append(
            _joined(
                [
                    _block_answer(rows, unit, block, target, request, problem.C)
                    for block, target in _pair_blocks(rows, pair)
                ]
            )
        )
    return answers


def _combined(left: list, right: list) -> list:
    """Two row sets' answers per pair (the left's rows first) as one."""
    return [None if a is None else _joined([a, b]) for a, b in zip(left, right)]


def _tree_total(node: tuple, n_units: int, have: dict):
    """The answers of tree node ``node`` = (level, j), units ``j * 2**level`` up to
    ``(j + 1) * 2**level`` (places in unit order; fewer at the right edge): ``have[node]``
    if known, else its halves' totals combined, the left's first.  Every sum of every
    run takes this one shape, fixed by the number of units alone, so where the partial sums
    are made (on the worker holding a node's units, or here) changes no bit."""
    if node in have:
        return have[node]
    level, j = node
    left = _tree_total((level - 1, 2 * j), n_units, have)
    if (2 * j + 1) << (level - 1) >= n_units:
        return left
    return _combined(left, _tree_total((level - 1, 2 * j + 1), n_units, have))


def _tree_root(n_units: int) -> tuple:
    return (max(0, int(n_units - 1).bit_length()), 0)


def _own_nodes(places: set, n_units: int) -> list:
    """The largest tree nodes whose units are all in ``places`` (a block's places in unit
    order), left to right: the partial sums a block can make alone."""
    out = []

    def visit(level, j):
        lo = j << level
        hi = min((j + 1) << level, n_units)
        if lo >= n_units:
            return
        inside = sum(1 for p in range(lo, hi) if p in places) if level else int(lo in places)
        if inside == hi - lo:
            out.append((level, j))
        elif inside:
            visit(level - 1, 2 * j)
            visit(level - 1, 2 * j + 1)

    visit(*_tree_root(n_units))
    return out


def block_pass(units, requests, problem: NewtonProblem, *, n_threads: int = 1) -> tuple:
    """One pass over a block's units: ``(partials, cpu_seconds)``, its units' answers summed
    on the sum tree's largest nodes that the block holds whole (``{node: answers per
    pair}``: one message of a few sums, not one answer per unit), and the thread CPU time
    the block took."""
    started = time.thread_time()
    order = problem.unit_order
    with thread_budget(n_threads):
        leaves = {
            (0, bisect.bisect_left(order, unit.index)): _unit_terms(
                unit, _unit_outputs(unit, problem), requests, problem
            )
            for unit in units
        }
        n_units = len(order)
        partials = {
            node: _tree_total(node, n_units, leaves)
            for node in _own_nodes({node[1] for node in leaves}, n_units)
        }
    return partials, time.thread_time() - started


def block_support(units, requests, problem: NewtonProblem, *, n_threads: int = 1) -> list:
    """The last pass: per unit ``(counts, rows)``, its support count per class and its
    support rows (a_i > 0 in any pair; global row numbers, int64, ascending), returned
    through the task's result; with ``problem.state_dir`` the rows are written to the
    unit's file there instead (``rows`` None), and with ``problem.keep_duals`` ``rows`` is
    ``(rows, answers)``, the unit's duals per pair too."""
    out = []
    with thread_budget(n_threads):
        for unit in units:
            sorted_rows = _unit_outputs(unit, problem)  # (once: not cached, it is computed)
            answers = _unit_terms(unit, sorted_rows, requests, problem)
            positive = np.zeros(unit.n_rows, dtype=bool)
            for rows, alpha in answers:
                positive[rows[alpha > 0]] = True
            local = np.flatnonzero(positive)
            class_of = np.empty(unit.n_rows, dtype=np.int64)
            class_of[sorted_rows.order] = np.repeat(
                np.arange(len(problem.classes)), np.diff(sorted_rows.bounds)
            )
            counts = np.bincount(class_of[local], minlength=len(problem.classes))
            rows = (unit.start + local).astype(np.int64, copy=False)
            if problem.state_dir is not None:
                _write_support(problem, unit, rows)
                out.append((counts, None))
            elif problem.keep_duals:
                out.append((counts, (rows, answers)))
            else:
                out.append((counts, rows))
    return out


def _support_path(problem: NewtonProblem, unit_index: int) -> Location:
    assert problem.state_dir is not None
    return problem.state_dir.child(f"{problem.fit_id}.unit{unit_index:06d}.support.npy")


def _write_support(problem: NewtonProblem, unit, rows: np.ndarray) -> None:
    """(On a worker) the unit's support rows as an .npy file of the state folder, which
    appears only when complete (``storage.write_whole``: a local file by a rename, an
    object by one put of the whole)."""
    rows = rows.astype(np.int64)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # (a name given to np.save would get ".npy" added)
            np.save(f, rows, allow_pickle=False)

    write_whole(_support_path(problem, unit.index), write, make_dirs=False)


def _read_support(part: Location) -> np.ndarray:
    """(On the coordinator) a unit's support rows from its file in the state folder."""
    if part.is_local:
        return np.load(part.local_path, allow_pickle=False)
    return np.load(io.BytesIO(part.read_bytes()), allow_pickle=False)


def _state_location(state_dir, units: list) -> Location:
    """The state folder named by the user: a :class:`~elmscale.data.storage.Location`
    (``storage.locate(url, storage_options)``) as given; a local path or ``file://`` URL;
    or an fsspec URL (``s3://bucket/state/``), which takes the storage options of the data
    set's store when that store has the same protocol (a fit from ``s3://`` data writes its
    state with the same endpoint and credentials), else the environment's."""
    if isinstance(state_dir, Location):
        return state_dir
    url = os.fspath(state_dir)
    if not is_url(url):
        return locate(url)
    protocol = locate(url).store.protocol
    stores = {getattr(u, "store", None) for u in units}
    same = [s for s in stores if s is not None and s.protocol == protocol]
    return locate(url, same[0].options if len(same) == 1 else None)


def _prepare_state(where: Location, fit_id: str) -> None:
    """The state folder made (a local one), or checked writable (an object store's, by
    putting and removing one small object of the fit's): a missing bucket, refused
    credentials or a bad endpoint are an error naming the URL before any pass runs."""
    expected = "a folder every worker may write and this process read and delete in"
    if where.is_local:
        try:
            Path(where.path).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise DataError(
                f"state_dir {where}: cannot be made ({exc}); expected {expected}"
            ) from exc
        return
    probe = where.child(f"{fit_id}.probe")
    with storage_errors(where, expected):
        probe.fs.pipe_file(probe.path, b"")
        probe.fs.rm_file(probe.path)


def _fit_files(problem: NewtonProblem) -> list[Location]:
    """This fit's files in its state folder: the units' support files, and the temporary
    ones (``atomic_write``'s ``.<name>.<hex>.tmp``) that a worker killed mid-write left (an
    object store has none: an object is put whole).  The fit's id, fresh for each fit,
    begins every name: another fit's files in the same folder are not among them."""
    where = problem.state_dir
    if where is None:
        return []
    if where.is_local:
        with contextlib.suppress(FileNotFoundError):
            return [
                where.child(path.name)
                for path in Path(where.path).iterdir()
                if path.name.removeprefix(".").startswith(f"{problem.fit_id}.")
            ]
        return []
    with storage_errors(where, "a folder it may list"):
        where.fs.invalidate_cache(where.path)  # (the workers' objects are new here)
    return where.glob(f"{problem.fit_id}.*")


# -- the coordinator ----------------------------------------------------------------------


class _Pair:
    """One pair's solve across passes: phase 1 (smoothed Newton), phase 2 (the split and the
    gathered rows' exact solve), done."""

    def __init__(self, n_hidden: int, C: float, tol: float, seed: int):
        self.C = C
        self.tol = tol
        self.seed = seed
        self.beta = np.zeros(n_hidden)
        self.direction = np.zeros(n_hidden)
        self.decrement = 0.0
        self.h = pn.H_START
        self.phase = "newton"
        self.passes = 0
        # phase 2
        self.beta_fix = None
        self.rows = np.empty(0, dtype=np.int64)
        self.H_rows = np.empty((0, n_hidden), dtype=np.float32)
        self.t_rows = np.empty(0)
        self.alpha = np.empty(0)
        self.first_split = True
        self.solved = False
        self.primal = self.dual = self.gap = np.nan
        self.kkt = np.nan

    def request(self):
        if self.phase == "newton":
            return NewtonRequest(self.beta, self.direction, (self.h, self.h / pn.H_FACTOR))
        if self.phase == "split":
            return SplitRequest(
                self.beta_fix,
                self.beta,
                self.h,
                pn.DELTA_FACTOR * self.h,
                self.rows,
                self.first_split,
                self.tol,
            )
        return None

    def take(self, answer) -> None:
        self.passes += 1
        if self.phase == "newton":
            self._newton(answer)
        else:
            self._split(answer)

    def _newton(self, terms) -> None:
        now, after = terms
        if np.any(self.direction):
            objectives = pn.smoothed_objective(self.beta, self.direction, now.loss, self.C)
            step = pn.accept_step(objectives, self.decrement)
            if step == 0.0 or self.passes > PHASE1_MAX_PASSES:
                # no step of STEPS lowers the smoothed objective: a direction too stiff for
                # the smoothing (rows repeated on the margin); phase 2 takes the rows within
                # this smoothing's reach from here
                self._begin_split()
                return
            if step != 1.0:  # cut back: the next pass computes the terms there
                self.beta = self.beta + step * self.direction
                self.direction = np.zeros_like(self.beta)
                self.decrement = 0.0
                return
            self.beta = self.beta + self.direction
            objective = objectives[1]
        else:
            objective = pn.smoothed_objective(self.beta, self.direction, now.loss, self.C)[0]
        self.direction, self.decrement = pn.newton_direction(self.beta, now, self.C, self.h)
        if self.decrement > pn.H_LEVEL_DECREMENT * max(objective, 1e-300):
            return
        if self.h <= pn.H_MIN or (self.h <= pn.H_FINAL and now.n_zone <= pn.ZONE_ROWS):
            self._begin_split()  # phase 1 done: split the rows by their margins here
            return
        # the next smoothing's terms at this point came with this pass
        self.h /= pn.H_FACTOR
        self.direction, self.decrement = pn.newton_direction(self.beta, after, self.C, self.h)

    def _begin_split(self) -> None:
        self.phase = "split"
        self.direction = np.zeros_like(self.beta)
        self.beta_fix = self.beta.copy()

    def _split(self, terms: pn.SplitTerms) -> None:
        if not self.first_split:
            alpha_sum = self.C * terms.n_upper + float(self.alpha.sum())
            self.primal, self.dual, self.gap = pn.relative_gap(
                self.beta, self.C, terms.hinge, alpha_sum
            )
            self.kkt = max(terms.worst, self._gathered_kkt())
            if terms.rows.size == 0 and self.solved:
                self.phase = "done"
                return
        self.first_split = False
        fixed_part = self.C * terms.upper_sum  # (the joining rows' share left out)
        rows = np.concatenate([self.rows, terms.rows])
        order = np.argsort(rows, kind="stable")
        self.rows = rows[order]
        self.H_rows = np.ascontiguousarray(np.concatenate([self.H_rows, terms.H_rows])[order])
        self.t_rows = np.concatenate([self.t_rows, terms.t_rows])[order]
        self.alpha = np.concatenate([self.alpha, terms.a_rows])[order]
        self.beta, self.solved, _ = pn.solve_gathered(
            self.H_rows,
            self.t_rows,
            self.alpha,
            fixed_part,
            C=self.C,
            tol=self.tol,
            max_passes=EXPLICIT_MAX_PASSES,
            rng_state=xorshift_state(self.seed),
        )

    def _gathered_kkt(self) -> float:
        grad = pn.exact_margins(self.H_rows, self.t_rows, self.beta) - 1.0
        return kkt_violation(self.alpha, grad, self.C)


def _layout(client, n_blocks: int | None) -> tuple[list, int]:
    """``(workers, blocks)``: the cluster's workers in name order (none here) and the number
    of blocks (default: the cluster's worker threads; here, the threads of ``n_threads``)."""
    workers: list = []
    if client is not None:
        from elmscale.distributed.executors import DaskExecutor

        DaskExecutor(client)  # checks the client
        nthreads = client.nthreads()
        workers = sorted(nthreads)
        if n_blocks is None:
            n_blocks = sum(nthreads.values())
    if n_blocks is not None and (isinstance(n_blocks, bool) or int(n_blocks) < 1):
        raise ValueError(f"n_blocks must be >= 1; got {n_blocks!r}")
    return workers, n_blocks


def _blocks(units: list, n_blocks: int) -> list[list]:
    """Units in ``n_blocks`` runs of consecutive units (in index order) of about equal rows:
    a block holding whole nodes of the sum tree sums them itself (``block_pass``)."""
    return group_units(sorted(units, key=lambda u: u.index), n_blocks)


def group_units(units, n_blocks: int) -> list[list]:
    """``units`` in ``n_blocks`` contiguous groups of about equal rows (none empty)."""
    n_blocks = max(1, min(int(n_blocks), len(units)))
    rows = np.cumsum([u.n_rows for u in units])
    cuts = np.searchsorted(rows, rows[-1] * np.arange(1, n_blocks) / n_blocks, side="left") + 1
    cuts = np.unique(np.clip(cuts, 1, len(units) - 1)) if len(units) > 1 else np.empty(0, int)
    bounds = [0, *cuts.tolist(), len(units)]
    return [list(units[a:b]) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def _on_blocks(client, workers, blocks, fn, *args, n_threads, take=None, keys=None):
    """``[fn(block, *args, n_threads=1) for block in blocks]``: side by side on this
    process's threads, one BLAS thread each as on workers (so the sums, hence the bits, are
    the cluster's); or each block on its worker (block i on ``workers[i % len(workers)]``,
    where its hidden outputs are cached), retried elsewhere if the worker is lost.

    ``take``: each block's result is handed to ``take(i, result)`` as it comes instead of
    kept (the list returned holds None for it): on Dask the blocks' futures are gathered in
    turn, one at a time, each released once taken, so this process holds one block's
    result at a time (here, as each block's thread ends).  A block that fails, or a
    ``take`` that raises, ends the gather as one failed block does.  ``keys``: a list the
    blocks' task keys are appended to (Dask: to find their task-stream records)."""
    results: list = [None] * len(blocks)
    if client is None:
        done = iter_in_threads(lambda b: fn(b, *args, n_threads=1), blocks, n_threads)
        for i, result in done:
            if take is None:
                results[i] = result
            else:
                take(i, result)
            del result  # (before the next block's)
        return results
    # (a block of a Dask collection's units runs where its partitions are, given as inputs)
    futures: list = submit_placed(
        client,
        fn,
        blocks,
        *args,
        workers=[workers[i % len(workers)] for i in range(len(blocks))],
        n_threads=1,
        pure=False,
        retries=3,
    )
    if keys is not None:
        keys.extend(f.key for f in futures)
    try:
        if take is None:
            return client.gather(futures)
        for i in range(len(futures)):
            result = futures[i].result()
            futures[i] = None  # released: the worker drops its copy
            take(i, result)
            del result  # (before the next block's)
        return results
    except BaseException as exc:
        from distributed import wait

        # one block failed: the others' tasks run on (a cancel does not stop a task that
        # has started: Dask cannot interrupt its thread), and the last pass's would write
        # support files after the fit's clean-up had removed its files; so each is waited
        # for before the error goes up (not on an interrupt: a pass can be long)
        live = [f for f in futures if f is not None]
        with contextlib.suppress(Exception):  # a cluster going away: the fit's error stands
            if isinstance(exc, Exception):
                wait(live)
            client.cancel(live)
        raise


def pass_breakdown(records: list, task_stream: list | None) -> list[dict]:
    """Each pass's time and traffic, one dict per pass:

    * ``seconds``: the pass's wall time here (``pass_seconds_``);
    * ``coordinator_s``: this process's own work (the requests, the tree's last sums, the
      L x L steps);
    * ``map_s``: from the first task sent to the last answer in hand;
    * ``compute_s``: each block's compute on its worker (Dask's task stream: the task's
      ``compute`` interval; without a client, None);
    * ``cpu_s``: each block's thread CPU time (measured in the task: Dask records none per
      task);
    * ``wait_s``: ``map_s`` less the slowest block's compute (with Dask's: the scheduler's
      round trip, the messages and their (de)serialization; here, the threads' start);
    * ``transfer_s``: inputs fetched from other workers (task stream ``transfer``);
    * ``bytes_sent``: the requests' arrays sent to the blocks; ``bytes_returned``: the
      blocks' answers (Dask's ``nbytes`` of each result, else their arrays' bytes).
    """
    by_key = {}
    for record in task_stream or []:
        by_key[record["key"]] = record
    out = []
    for record in records:
        row = {k: v for k, v in record.items() if k not in ("keys", "bytes_returned")}
        found = [by_key[k] for k in record["keys"] if k in by_key]
        if task_stream is not None and found:
            spans = [[s for s in r["startstops"] if s["action"] == "compute"] for r in found]
            row["compute_s"] = [sum(s["stop"] - s["start"] for s in sp) for sp in spans]
            row["transfer_s"] = sum(
                s["stop"] - s["start"]
                for r in found
                for s in r["startstops"]
                if s["action"] == "transfer"
            )
            row["bytes_returned"] = int(sum(r.get("nbytes", 0) for r in found))
            slowest = max(row["compute_s"])
        else:
            row["compute_s"] = None
            row["transfer_s"] = 0.0
            row["bytes_returned"] = int(sum(record["bytes_returned"]))
            slowest = max(record["cpu_s"], default=0.0)
        row["wait_s"] = max(0.0, record["map_s"] - slowest)
        out.append(row)
    return out


def _the_problem(problem: NewtonProblem) -> NewtonProblem:
    """The fit's problem, as the task whose result the passes' tasks take."""
    return problem


def _in_unit_order(blocks, per_block: list) -> list:
    """The blocks' per-unit answers put back in unit order."""
    by_unit = {}
    for block, answers in zip(blocks, per_block):
        for unit, answer in zip(block, answers):
            by_unit[unit.index] = answer
    return [by_unit[i] for i in sorted(by_unit)]


def fit_newton(
    units: list,
    layer: dict,
    classes,
    *,
    C: float,
    tol: float,
    client=None,
    n_blocks: int | None = None,
    cache_mb: float = 1024.0,
    state_dir=None,
    max_passes: int = -1,
    seed: int = 0,
    n_threads: int | None = None,
    on_pass=None,
    keep_duals: bool = False,
) -> NewtonResult:
    """Solve every one-vs-one pair of the random-node sparse ELM on ``units`` (a
    ParquetDataset's work units, or ``array_units``) by primal Newton passes finished on
    the exact dual (``solvers.primal_newton``).

    ``layer``: the random layer's ``to_dict()``; ``classes``: the sorted label values;
    ``tol``: every row's KKT violation at the end, as the single-process solver's;
    ``n_blocks``: the blocks of units run side by side (default: the cluster's worker
    threads, or the threads of ``n_threads`` here; the result does not depend on it);
    ``cache_mb``: each process's cache of hidden outputs; ``max_passes``: passes over the
    data at most (-1: ``DEFAULT_MAX_PASSES``); ``on_pass(pass, phases)`` is called after
    each pass; ``keep_duals``: return every row's duals (arrays only) and the support as an
    array.

    The support rows (``support``) are a read-only memory map of a file of this process's,
    unlinked once mapped, so they never sit in its memory whole.  By default
    (``state_dir`` None) the last pass returns each unit's support rows through the tasks'
    results (Dask's, on a cluster: no disk is shared with the workers), and this process
    writes them to its own temporary file as each block's result comes, one block at a
    time.  ``state_dir``: a folder every worker can write and this process read, named by
    the user: a shared file system's path, a ``file://`` URL, or an object store's URL
    (``s3://bucket/state/``; its options as in ``_state_location``, or a
    ``storage.locate(url, storage_options)`` given instead).  The workers write the units'
    support files there instead, each appearing only when complete
    (``storage.write_whole``), and this process joins them (each removed once read); a
    folder that cannot be made or written is an error naming it (never a secret) before
    any pass.
    """
    if isinstance(max_passes, bool) or not isinstance(max_passes, (int, np.integer)):
        raise ValueError(f"max_passes must be an integer; got {max_passes!r}")
    workers, n_blocks = _layout(client, n_blocks)
    threads = resolve_n_threads(n_threads)
    blocks = _blocks(units, n_blocks or threads)
    if client is not None:
        blocks = holder_groups(client, blocks)  # a Dask collection's: one worker's units each
    classes = tuple(np.asarray(classes).tolist())
    pairs = tuple(one_vs_one_pairs(len(classes)))
    n_hidden = int(layer["n_hidden"])
    fit_id = uuid.uuid4().hex
    state = None
    if state_dir is not None and not keep_duals:
        state = _state_location(state_dir, units)
        _prepare_state(state, fit_id)
    problem = NewtonProblem(
        layer=dict(layer),
        classes=classes,
        pairs=pairs,
        C=float(C),
        fit_id=fit_id,
        cache_mb=float(cache_mb),
        state_dir=state,
        keep_duals=bool(keep_duals),
        unit_order=tuple(sorted(u.index for u in units)),
    )
    cap = DEFAULT_MAX_PASSES if max_passes < 0 else int(max_passes)
    solves = [_Pair(n_hidden, float(C), float(tol), seed + p) for p in range(len(pairs))]
    seconds: list = []
    timings: list = []
    n_units = len(problem.unit_order)
    stream = contextlib.nullcontext(None)
    task_problem = problem
    if client is not None:
        from distributed import get_task_stream

        # the workers' compute per task, from Dask's own records (``_from_task_stream``)
        stream = get_task_stream(client=client)
        # sent once, as a task's result that each task then names (its unit order alone
        # is thousands of numbers at a billion rows); not scattered: scattered data that
        # a lost worker took with it (one killed while they were being copied) are gone
        # for good, and every task of the fit fails on a cancelled future, where a task's
        # result is computed again
        task_problem = client.submit(_the_problem, problem, pure=False)
        # the workers' pass temporaries from their heaps, not fresh pages (worker_heap)
        workers_passes_heap(client, True)
    try:
        with stream as task_stream:
            for index in range(cap):
                started = time.perf_counter()
                requests = [s.request() for s in solves]
                if all(r is None for r in requests):
                    break
                asked = time.perf_counter()
                keys: list = []
                per_block = _on_blocks(
                    client,
                    workers,
                    blocks,
                    block_pass,
                    requests,
                    task_problem,
                    n_threads=threads,
                    keys=keys,
                )
                answered = time.perf_counter()
                have = {}
                for partials, _ in per_block:
                    have.update(partials)
                total = _tree_total(_tree_root(n_units), n_units, have)
                # the coordinator's steps (L x L systems, the gathered rows' solve) on one
                # BLAS thread: a 200 x 200 Cholesky on two contended threads took 140 ms
                with thread_budget(1):
                    for p, solve in enumerate(solves):
                        if requests[p] is not None:
                            solve.take(total[p])
                ended = time.perf_counter()
                seconds.append(ended - started)
                timings.append(
                    {
                        "pass": index,
                        "seconds": ended - started,
                        "coordinator_s": (asked - started) + (ended - answered),
                        "map_s": answered - asked,
                        "keys": keys,
                        "cpu_s": [cpu for _, cpu in per_block],
                        "bytes_sent": len(blocks) * payload_bytes(requests) if client else 0,
                        "bytes_returned": [payload_bytes(p) for p, _ in per_block],
                    }
                )
                del per_block, have, total
                if on_pass is not None:
                    on_pass(index, [s.phase for s in solves])
        timings = pass_breakdown(timings, task_stream.data if task_stream is not None else None)
        final = [
            DualsRequest(s.beta_fix if s.beta_fix is not None else s.beta, s.rows, s.alpha)
            for s in solves
        ]
        alpha = None
        if not keep_duals and state is None:  # the rows come back through the results
            with _SupportFile(len(classes)) as gathered:
                _on_blocks(
                    client,
                    workers,
                    blocks,
                    block_support,
                    final,
                    task_problem,
                    n_threads=threads,
                    take=gathered.take,
                )
                n_support, support = gathered.counts, gathered.mapped()
        else:
            per_unit = _in_unit_order(
                blocks,
                _on_blocks(
                    client, workers, blocks, block_support, final, task_problem, n_threads=threads
                ),
            )
            n_support = np.sum([counts for counts, _ in per_unit], axis=0, dtype=np.int64)
            in_order = sorted(units, key=lambda u: u.index)  # (per_unit's order)
            if keep_duals:
                support = np.concatenate([rows for _, (rows, _) in per_unit])
                n_rows = sum(u.n_rows for u in units)
                alpha = np.zeros((len(pairs), n_rows))
                for unit, (_, (_, answers)) in zip(in_order, per_unit):
                    for p, (rows, a) in enumerate(answers):
                        alpha[p, unit.start + rows] = a
            else:
                support = _support_rows(in_order, problem, int(n_support.sum()))
    finally:
        _clean_up(client, problem)
        if client is not None:
            workers_passes_heap(client, False)
    return NewtonResult(
        beta=np.array([s.beta for s in solves]),
        dual=np.array([s.dual for s in solves]),
        primal=np.array([s.primal for s in solves]),
        gap=np.array([s.gap for s in solves]),
        kkt=np.array([s.kkt for s in solves]),
        passes=np.array([s.passes for s in solves]),
        gathered=np.array([s.rows.size for s in solves]),
        converged=np.array([s.phase == "done" and s.kkt <= tol for s in solves]),
        support=support,
        n_support=n_support,
        alpha=alpha,
        seconds=seconds,
        timings=timings,
    )


def _clean_up(client, problem: NewtonProblem) -> None:
    """The fit's cache entries dropped everywhere; its files in the state folder (support
    files, and temporary ones) removed."""
    if client is not None:
        try:
            client.run(clear_cache, problem.fit_id)
        except Exception:  # a cluster going away must not hide the fit's own error
            pass
    clear_cache(problem.fit_id)
    if problem.state_dir is None:
        return
    failing = sys.exc_info()[0] is not None
    try:
        for part in _fit_files(problem):  # left by a fit that failed, or a killed worker
            part.remove()
    except DataError:
        if not failing:  # (the fit's own error stands)
            raise


def _support_rows(units, problem: NewtonProblem, n_rows: int) -> np.ndarray:
    """The units' support files (in unit order: their rows ascend) joined into one .npy
    file, streamed a unit at a time, and returned as a read-only memory map of it.  The
    file is unlinked once mapped (its pages live as long as the map), so the coordinator's
    memory does not grow with the support vectors and nothing is left on disk."""
    parts = [_support_path(problem, unit.index) for unit in units]
    fd, name = tempfile.mkstemp(prefix="elmscale-support-", suffix=".npy")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_npy_header(n_rows))
            written = 0
            for part in parts:
                rows = _read_support(part)
                rows.tofile(f)
                written += rows.size
                del rows  # before the next unit's: one unit's rows at a time
                part.remove()
        if written != n_rows:
            raise RuntimeError(
                f"{problem.state_dir}: the units' support files hold {written} rows, their "
                f"counts {n_rows}"
            )
        return np.load(path, mmap_mode="r")
    finally:
        path.unlink(missing_ok=True)


def _npy_header(n_rows: int) -> bytes:
    """The .npy header of ``n_rows`` int64 numbers (numpy pads it to the same length
    for every count: room for the shape to grow in place)."""
    out = io.BytesIO()
    header = {"descr": "<i8", "fortran_order": False, "shape": (int(n_rows),)}
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue()


class _SupportFile:
    """The last pass's support rows as they come back through the blocks' results
    (``take``), written to a temporary .npy file of this process as each block's comes (one
    block's rows in memory at a time), then ``mapped()``: a read-only memory map of the
    file, the rows ascending, the file unlinked (its pages live as long as the map: nothing
    is left on disk, and the rows never sit in this process's memory whole).  The blocks'
    rows ascend within each block; blocks dealt round-robin, or regrouped by the worker
    holding their partitions (``holder_groups``), interleave, and the file is then sorted
    in place (every row number is distinct).  ``counts``: the support per class."""

    def __init__(self, n_classes: int):
        self.counts = np.zeros(n_classes, dtype=np.int64)
        self._written = 0
        self._last = -1  # the last row written
        self._ascending = True
        self._header = _npy_header(0)
        fd, name = tempfile.mkstemp(prefix="elmscale-support-", suffix=".npy")
        self.path = Path(name)
        self._file = os.fdopen(fd, "wb")
        self._file.write(self._header)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)

    def take(self, _block: int, per_unit: list) -> None:
        """One block's ``[(counts, rows) per unit]`` (``block_support``), written."""
        for counts, rows in per_unit:
            self.counts += counts
            if rows.size == 0:
                continue
            rows = np.asarray(rows, dtype="<i8")
            if self._ascending:
                self._ascending = bool(rows[0] > self._last and np.all(rows[1:] > rows[:-1]))
            self._last = int(rows[-1])
            rows.tofile(self._file)
            self._written += rows.size

    def mapped(self) -> np.ndarray:
        """The rows, ascending, as a read-only memory map of the file (then unlinked)."""
        if self._written != int(self.counts.sum()):
            raise RuntimeError(
                f"the blocks returned {self._written} support rows, their counts "
                f"{int(self.counts.sum())}"
            )
        header = _npy_header(self._written)
        if len(header) != len(self._header):  # (numpy pads every count's to one length)
            raise RuntimeError("the .npy header of the support rows changed length")
        self._file.seek(0)
        self._file.write(header)
        self._file.close()
        if not self._ascending:
            rows = np.load(self.path, mmap_mode="r+")
            rows.sort()  # in place, in the file's pages
            rows.flush()
            del rows
        try:
            return np.load(self.path, mmap_mode="r")
        finally:
            self.path.unlink(missing_ok=True)


def parquet_units(dataset) -> list:
    """A ParquetDataset's work units, those over ``MAX_UNIT_ROWS`` rows cut into ranges."""
    units = dataset.units()
    if max(u.n_rows for u in units) > MAX_UNIT_ROWS:
        units = dataset.units(-(-dataset.n_rows // MAX_UNIT_ROWS))
    return units
