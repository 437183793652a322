"""The kernel sparse ELM's dual by a large working set: the blocks of rows and the coordinator's
loop, with no cluster inside (``elmscale.distributed.working_set`` runs the blocks on Dask
workers or on this process's threads).

The problem of each one-vs-one pair is the paper's dual without bias, ``min 1/2 a'Qa - 1'a``
over ``0 <= a_i <= C``, ``Q = t t' K`` (eq. 17).  With no bias there is no equality
constraint, so a decomposition's working set is simply the largest violators of the
optimality conditions (PGPDT: Zanni, Serafini and Zanghirati, JMLR 2006; ThunderSVM: Wen et
al., JMLR 2018).  One iteration:

1. each block of rows (``RowBlock``) reports, per pair, its ``q`` largest KKT violators
   among its active rows: their row numbers, features, classes, alpha and gradient;
2. the coordinator keeps the ``q`` largest of all (ties by row number: the selection does
   not depend on how the rows are cut), and solves their subproblem, the others fixed,
   exactly (``solve_subproblem``: ``exact_tail.box_qp_signed`` on their q x q kernel in
   float64);
3. every block adds ``Q[its rows, B] dalpha_B`` to its gradient: Q's columns of the changed
   variables in float32, computed by the one-process solver's column kernel
   (``core.jit.q_segment_of``) and kept in a per-block LRU cache of ``cache_mb``, summed in
   float64 (``core.jit.add_weighted_columns``).  One exchange per iteration, whatever q;
4. shrinking: every ``SHRINK_EVERY`` iterations, rows at a bound whose gradient points out
   of the box by more than the largest violation the other way (LIBLINEAR's thresholds,
   as ``kernel_dual._shrink``) leave the active set;
5. when no active row violates by more than ``tol``, every row's gradient is recomputed
   (first at 10 ``tol`` from float32 values if rows were shrunk: LIBSVM's unshrinking), then
   exactly in float64 against the support rows (``exact``: the one-process solver's
   final check, ``Kernel.block_matvec``), every row active again.  A pair ends when that
   exact check passes: every row's KKT violation at most ``tol``, the one-process
   solver's rule, so the optimum is the same within ``tol``; otherwise it goes on from
   the exact gradient.

The iterates depend on q, not on the number of blocks: each row's gradient is summed in
the same order whichever block holds it, and each block reports enough candidates for
the global choice.  Every row with ``a > 0`` has been in a working set, so the
coordinator holds the support rows (``SeenRows``), from which a lost block is rebuilt:
its rows read again, alpha from the coordinator, the gradient exact.  The coordinator
writes a step's alpha there once every block has applied the step, so a block lost in a
call is rebuilt as it was before the call, which is then made on it once; and a pair ends
after a rebuild only on an exact check of every row.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import NamedTuple

import numpy as np

from elmscale.core.jit import add_weighted_columns, q_columns
from elmscale.core.threads import parallel_rows
from elmscale.features.kernels import Kernel
from elmscale.solvers.block_columns import BlockRows
from elmscale.solvers.exact_tail import box_greedy_steps, box_qp_signed

__all__ = [
    "DEFAULT_Q",
    "RowBlock",
    "SeenRows",
    "WorkingSetResult",
    "check_q",
    "column_error_bound",
    "solve_subproblem",
    "solve_working_set",
]

#: The working set's size by default (measured: see ``docs/performance.md``).
DEFAULT_Q = 512
#: The subproblem's one-variable steps per variable before ``box_qp`` takes over.
SUBPROBLEM_STEPS_PER_VARIABLE = 100
#: The subproblem is solved until its violations are at most this share of the working
#: set's largest (and tol / 10): early iterations take coarse steps, the last exact ones.
SUBPROBLEM_SHARE = 0.1
#: The share of the working set kept from the last one (its free variables).
KEEP_SHARE = 0.5
#: A bound on a float32 kernel column entry's error (``column_error_bound``).
COLUMN_ERROR = 1e-6
#: Kernel columns at a time in a float32 product (``_PairRows._float32_product``).
PRODUCT_COLUMNS = 64
#: Iterations between shrinking rounds.
SHRINK_EVERY = 5
#: A block shrinks a pair's rows only when at least 1 / this of its active rows go.
SHRINK_MIN_FRACTION = 8
#: Iterations when ``max_iter`` is negative.
DEFAULT_MAX_ITERATIONS = 100_000


def check_q(q) -> int:
    """``q`` as an int, or a ValueError naming it: an integer of at least 2."""
    if isinstance(q, bool) or not isinstance(q, (int, np.integer)) or int(q) < 2:
        raise ValueError(f"q (the working set's size) must be an integer >= 2; got {q!r}")
    return int(q)


def violations(alpha, g, C):
    """Each variable's KKT violation (the projected gradient's size; 0 at the optimum)."""
    return np.where(
        alpha <= 0.0, np.maximum(-g, 0.0), np.where(alpha >= C, np.maximum(g, 0.0), np.abs(g))
    )


def top_violators(v, ids, k):
    """Positions of the ``k`` largest of ``v`` (> 0 only), ties by the smaller id, in that
    order: the global choice is then the same however the rows are cut into blocks."""
    positive = np.flatnonzero(v > 0.0)
    if positive.size > k:
        vals = v[positive]
        thr = np.partition(vals, vals.size - k)[vals.size - k]
        above = positive[vals > thr]
        ties = positive[vals == thr]
        ties = ties[np.argsort(ids[ties], kind="stable")[: k - above.size]]
        positive = np.concatenate([above, ties])
    order = np.lexsort((ids[positive], -v[positive]))
    return positive[order]


class Candidates(NamedTuple):
    """A block's (or the merged) largest violators of one pair: row numbers, features
    (float32), classes, alpha, gradient and violation."""

    ids: np.ndarray
    X: np.ndarray
    cls: np.ndarray
    alpha: np.ndarray
    g: np.ndarray
    v: np.ndarray

    @staticmethod
    def merge(parts, k):
        """The ``k`` largest of the blocks' candidates, ties by row number."""
        joined = Candidates(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in Candidates._fields)
        )
        keep = top_violators(joined.v, joined.ids, k)
        return Candidates(*(a[keep] for a in joined))


class PairReport(NamedTuple):
    """What a block reports of one pair: its candidates; the largest gradient of a variable
    that may decrease and the largest minus gradient of one that may increase (shrinking's
    thresholds); its active rows; after an exact check, its rows' largest violation and
    ``sum a (g - 1)`` (twice their part of the dual objective)."""

    candidates: Candidates
    up_max: float
    dn_max: float
    n_active: int
    exact_violation: float = np.nan
    objective_part: float = np.nan
    kept: Candidates | None = None


class Update(NamedTuple):
    """One pair's change of an iteration: the changed variables' row numbers, features,
    labels (float32 +-1), alpha's change and new value; ``keep``, the row numbers (sorted)
    of the working set's variables kept for the next one, reported as ``kept``."""

    ids: np.ndarray
    X: np.ndarray
    t: np.ndarray
    delta: np.ndarray
    alpha: np.ndarray
    keep: np.ndarray


class Support(NamedTuple):
    """The support rows of every pair (features float32) and, per pair, the positions of
    its own among them and their ``alpha t``: what an exact gradient is computed from;
    ``ids``, the rows' numbers (a block holding every support row of a pair among its own
    rows takes its product by symmetry: ``BlockRows.matvec_own``)."""

    X: np.ndarray
    members: list
    coef: list
    ids: np.ndarray | None = None


#: The most columns a pair's cache holds, whatever its budget
_MAX_SLOTS = 65_536


class _ColumnLRU:
    """Q's columns over a pair's active rows (float32), keyed by row number, least recently
    used out first; a budget in bytes (at least 2 columns)."""

    def __init__(self, n_rows: int, budget: float):
        self.budget = budget
        self.n_slots = self._slots_for(n_rows)
        self.cols = None
        self.clear()

    def _slots_for(self, n_rows, most=_MAX_SLOTS):
        """The slots of ``n_rows`` float32 entries the budget holds: at least 2, at most
        ``most``."""
        return int(max(2, min(most, self.budget // max(4 * n_rows, 1))))

    def clear(self):
        self.slot_of: OrderedDict = OrderedDict()
        self.free = list(range(self.n_slots - 1, -1, -1))

    def ensure(self, n_rows):
        """Slots of ``n_rows`` entries at least (new, empty ones if shorter)."""
        if self.cols is None or self.cols.shape[1] < n_rows:
            self.n_slots = self._slots_for(n_rows)
            self.cols = np.empty((self.n_slots, n_rows), np.float32)
            self.clear()

    def take(self, ids):
        """``(slots, missing)`` for ``ids`` (at most ``n_slots`` of them): their slots, the
        ones not cached given fresh slots; ``missing`` the positions in ``ids`` to compute
        (``ensure`` first)."""
        slots = np.empty(ids.size, np.int64)
        missing = []
        wanted = set(ids.tolist())
        for k, i in enumerate(ids.tolist()):
            s = self.slot_of.get(i)
            if s is None:
                missing.append(k)
            else:
                self.slot_of.move_to_end(i)
                slots[k] = s
        for k in missing:
            if self.free:
                s = self.free.pop()
            else:
                for old in self.slot_of:  # least recently used, not wanted now
                    if old not in wanted:
                        break
                s = self.slot_of.pop(old)
            self.slot_of[int(ids[k])] = s
            slots[k] = s
        return slots, np.asarray(missing, dtype=np.int64)

    def fit_rows(self, n_rows):
        """More, shorter slots when the active rows are at most half the slots' length (the
        budget then holds more columns), the cached columns kept.

        In the same memory, not a new array: a new one is fresh pages, which each column
        written into it faults in (a 200 MB cache made anew at each of a fit's shrinks cost
        a Dask block 0.32 s of its 1.7 s, against 0.08 s for a 100 MB one)."""
        if self.cols is None or 2 * n_rows > self.cols.shape[1]:
            return
        old_rows = self.cols.shape[1]
        flat = self.cols.reshape(-1)
        n_slots = self._slots_for(n_rows, most=min(_MAX_SLOTS, flat.size // n_rows))
        kept = list(self.slot_of.items())[-n_slots:]
        # the kept columns move down in the order of their old slots: the k-th smallest
        # old slot is at least k, and a slot's row is at least twice as long as the new
        # one, so no column is overwritten before it has moved
        moved = {}
        for j, (i, s) in enumerate(sorted(kept, key=lambda item: item[1])):
            if s * old_rows != j * n_rows:
                flat[j * n_rows : (j + 1) * n_rows] = flat[s * old_rows : s * old_rows + n_rows]
            moved[i] = j
        self.cols = flat[: n_slots * n_rows].reshape(n_slots, n_rows)
        self.n_slots = n_slots
        self.slot_of = OrderedDict((i, moved[i]) for i, _ in kept)  # least recent first
        self.free = list(range(n_slots - 1, len(kept) - 1, -1))

    def compact(self, keep):
        """Every cached column keeps only the entries ``keep`` (the rows still active, in
        their new order)."""
        if self.cols is None:
            return
        for s in self.slot_of.values():
            self.cols[s, : keep.size] = self.cols[s, keep]


class _PairRows:
    """One pair's rows of a block, the active ones first (positions ``[0, n_active)``):
    row numbers, classes, features (transposed, d x n float32, for the per-column kernel;
    with a kernel, as ``BlockRows`` keeps them instead: no second copy), labels, alpha,
    gradient."""

    def __init__(self, X32, ids, cls, pair, budget, kernel=None):
        a, b = pair
        pick = (cls == a) | (cls == b)
        self.ids = ids[pick]
        self.cls = cls[pick]
        self.Xt = None if kernel is not None else np.ascontiguousarray(X32[pick].T)
        self.t = np.where(self.cls == a, 1.0, -1.0).astype(np.float32)
        n = self.ids.size
        self.alpha = np.zeros(n)
        self.g = np.full(n, -1.0)
        self.n_active = n
        self.cache = _ColumnLRU(n, budget)
        # kernel columns in blocks (one GEMM each: ``block_columns``) when given a kernel
        self.block = None if kernel is None else BlockRows(kernel, X32[pick], self.t)
        self._index()

    def _index(self):
        self.sorter = np.argsort(self.ids, kind="stable")

    def positions(self, ids):
        """Positions of the rows numbered ``ids`` that this block holds, and which of
        ``ids`` they are."""
        if self.ids.size == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64)
        at = np.searchsorted(self.ids, ids, sorter=self.sorter)
        at = np.minimum(at, self.ids.size - 1)
        pos = self.sorter[at]
        mine = np.flatnonzero(self.ids[pos] == ids)
        return pos[mine], mine

    def permute(self, order):
        for name in ("ids", "cls", "t", "alpha", "g"):
            setattr(self, name, getattr(self, name)[order])
        if self.Xt is not None:
            self.Xt = np.ascontiguousarray(self.Xt[:, order])
        if self.block is not None:
            self.block.permute(order)
        self._index()

    def _rows32(self, at) -> np.ndarray:
        """The features of the rows at positions ``at``, (len(at), d) float32."""
        if self.block is not None:
            return self.block.rows32(at)
        return np.ascontiguousarray(self.Xt[:, at].T)

    def _candidates(self, at, v) -> Candidates:
        return Candidates(
            self.ids[at],
            self._rows32(at),
            self.cls[at],
            self.alpha[at],
            self.g[at],
            v[at],
        )

    def report(self, q, C, keep=None) -> PairReport:
        """The pair's ``q`` largest violators among the active rows, and the active rows
        among ``keep`` (row numbers) as ``kept``."""
        na = self.n_active
        alpha, g = self.alpha[:na], self.g[:na]
        v = violations(alpha, g, C)
        top = top_violators(v, self.ids[:na], q)
        kept = None
        if keep is not None:
            pos, _ = self.positions(keep)
            kept = self._candidates(np.sort(pos[pos < na]), v)
        may_down = alpha > 0.0
        may_up = alpha < C
        return PairReport(
            self._candidates(top, v),
            float(g[may_down].max(initial=-np.inf)),
            float((-g[may_up]).max(initial=-np.inf)),
            int(na),
            kept=kept,
        )

    def apply(self, update: Update, params, n_threads):
        """Alpha of this block's rows among the changed ones, and every active row's
        gradient plus ``Q[rows, changed] delta``."""
        pos, mine = self.positions(update.ids)
        self.alpha[pos] = update.alpha[mine]
        na = self.n_active
        if na == 0 or update.ids.size == 0:
            return
        self.cache.ensure(na)
        for start in range(0, update.ids.size, self.cache.n_slots):
            self._apply_part(update, slice(start, start + self.cache.n_slots), params, n_threads)

    def _apply_part(self, update: Update, part, params, n_threads):
        """``apply`` for the changed variables ``part`` (as many as the cache's slots)."""
        na = self.n_active
        slots, missing = self.cache.take(update.ids[part])
        cols = self.cache.cols
        if missing.size:
            XB = np.ascontiguousarray(update.X[part][missing])
            tB = np.ascontiguousarray(update.t[part][missing])
            sB = np.ascontiguousarray(slots[missing])
            if self.block is not None:
                self.block.columns(XB, tB, na, cols, sB, n_threads)
            else:
                parallel_rows(
                    lambda lo, hi: q_columns(
                        self.Xt, self.t, na, XB, tB, sB, lo, hi, *params, cols
                    ),
                    missing.size,
                    n_threads,
                    min_rows=1,
                )
        delta = np.ascontiguousarray(update.delta[part])
        parallel_rows(
            lambda lo, hi: add_weighted_columns(cols, slots, delta, self.g, lo, hi),
            na,
            n_threads,
        )

    def shrink(self, low_thr, up_thr, C):
        """Active rows at 0 whose gradient passes ``low_thr``, or at C whose minus gradient
        passes ``up_thr``, go behind the active ones (a stable partition)."""
        na = self.n_active
        alpha, g = self.alpha[:na], self.g[:na]
        out = ((alpha <= 0.0) & (g > low_thr)) | ((alpha >= C) & (-g > up_thr))
        if np.count_nonzero(out) < max(1, na // SHRINK_MIN_FRACTION):
            return  # (each round permutes the rows and every cached column: worth it for many)
        keep = np.flatnonzero(~out)
        order = np.concatenate([keep, np.flatnonzero(out), np.arange(na, self.ids.size)])
        self.permute(order)
        self.cache.compact(keep)
        self.n_active = int(keep.size)
        self.cache.fit_rows(self.n_active)

    def exact(self, kernel: Kernel, support: Support, p, C, params, n_threads, precise=True):
        """Every row's gradient again (``Q a - 1`` against the support rows), every row active
        again; returns the rows' largest violation and ``sum a (g - 1)``.  ``precise``: in
        float64 (``Kernel.block_matvec``, the one-process solver's final check); else from
        float32 kernel values summed in float64 (the columns' own arithmetic, 2.5x faster:
        the unshrinking at 10 tol, whose gradients the float32 columns update anyway)."""
        coef = support.coef[p]
        n = self.ids.size
        self.n_active = n
        self.cache.clear()
        f = np.zeros(n)
        if coef.size and n:
            sv = support.X[support.members[p]]
            own = self._own_positions(support, p) if precise and self.block is not None else None
            if own is not None:  # every support row is one of these: half the products
                f = self.block.matvec_own(own, coef, n_threads=n_threads)
            elif self.block is not None:
                f = self.block.matvec(sv, coef, precise=precise, n_threads=n_threads)
            elif precise:
                f = kernel.block_matvec(np.ascontiguousarray(self.Xt.T), sv, coef)
            else:
                self._float32_product(sv, coef, params, n_threads, f)
        self.g = self.t.astype(np.float64) * f - 1.0
        v = violations(self.alpha, self.g, C)
        return float(v.max(initial=0.0)), float(self.alpha @ (self.g - 1.0))

    def _own_positions(self, support: Support, p):
        """The positions of pair ``p``'s support rows among these rows, in the support's
        order, when every one of them is here (one block of all the rows), else None."""
        if support.ids is None:
            return None
        ids = support.ids[support.members[p]]
        pos, mine = self.positions(ids)
        return pos if mine.size == ids.size else None

    def _float32_product(self, sv, coef, params, n_threads, out):
        """``out += K(rows, sv) @ coef``, the kernel values float32 (``q_columns``, unsigned),
        summed in float64 (``add_weighted_columns``), ``PRODUCT_COLUMNS`` at a time."""
        n = self.ids.size
        width = int(min(sv.shape[0], PRODUCT_COLUMNS))
        cols = np.empty((width, n), np.float32)
        ones_rows = np.ones(n, np.float32)
        for start in range(0, sv.shape[0], width):
            XB = np.ascontiguousarray(sv[start : start + width], dtype=np.float32)
            m = XB.shape[0]
            ones = np.ones(m, np.float32)
            slots = np.arange(m, dtype=np.int64)
            c = np.ascontiguousarray(coef[start : start + m])
            parallel_rows(
                lambda lo, hi, XB=XB, ones=ones, slots=slots: q_columns(
                    self.Xt, ones_rows, n, XB, ones, slots, lo, hi, *params, cols
                ),
                m,
                n_threads,
                min_rows=1,
            )
            parallel_rows(
                lambda lo, hi, slots=slots, c=c: add_weighted_columns(cols, slots, c, out, lo, hi),
                n,
                n_threads,
            )


class RowBlock:
    """A block's rows and, per one-vs-one pair, their alpha, gradient, active set and
    column cache: the state a worker keeps for the whole fit (``step``, ``exact``).

    ``X32`` (n, d) float32 rows numbered ``ids`` (sorted), ``cls`` their class indices,
    ``pairs`` the one-vs-one pairs (class indices; the first is t = +1), ``kernel`` its
    ``to_dict()``, ``cache_mb`` the column caches' budget (split over the pairs by rows),
    ``n_threads`` the threads its products run on; ``block_columns``: Q's columns and the
    exact checks' products computed in blocks, one GEMM each (``block_columns.BlockRows``,
    the one-process working-set mode's: ``solvers.thunder``), else column by column.
    """

    def __init__(
        self, X32, ids, cls, pairs, kernel: dict, C, cache_mb, n_threads=1, block_columns=False
    ):
        self.kernel = Kernel.from_dict(kernel)
        self.params = self.kernel._params()
        self.C = float(C)
        self.n_threads = int(n_threads)
        X32 = np.ascontiguousarray(X32, dtype=np.float32)
        ids = np.asarray(ids, dtype=np.int64)
        cls = np.asarray(cls, dtype=np.int64)
        picks = [np.count_nonzero((cls == a) | (cls == b)) for a, b in pairs]
        total = max(sum(picks), 1)
        self.pairs = [
            _PairRows(
                X32,
                ids,
                cls,
                pair,
                cache_mb * 2**20 * n / total,
                self.kernel if block_columns else None,
            )
            for pair, n in zip(pairs, picks)
        ]
        self.n_rows = int(ids.size)
        # what the columns' float32 products add to their error (``BlockRows``), at most
        self.products_error = max(
            (pair.block.products_error for pair in self.pairs if pair.block is not None),
            default=0.0,
        )

    def set_alpha(self, alphas):
        """Alpha of this block's rows from ``alphas[p] = (row numbers, values)`` (a rebuilt
        block: its gradient is then made exact by ``exact``)."""
        for pair, (ids, values) in zip(self.pairs, alphas):
            pos, mine = pair.positions(np.asarray(ids, np.int64))
            pair.alpha[:] = 0.0
            pair.alpha[pos] = np.asarray(values, np.float64)[mine]

    def step(self, updates, shrink, q):
        """Apply each pair's ``Update`` (None: unchanged), then shrink the pairs given
        thresholds (``shrink[p] = (low_thr, up_thr)`` or None), and report every pair
        (``PairReport``; None for a pair whose update is ``False``: finished)."""
        out = []
        for p, pair in enumerate(self.pairs):
            update = updates[p]
            if update is False:
                out.append(None)
                continue
            if update is not None:
                pair.apply(update, self.params, self.n_threads)
            if shrink is not None and shrink[p] is not None:
                pair.shrink(*shrink[p], self.C)
            out.append(pair.report(q, self.C, None if update is None else update.keep))
        return out

    def exact(self, support: Support, which, q, precise=True):
        """The gradient of the pairs ``which`` again (every row active again: in float64 if
        ``precise``, see ``_PairRows.exact``), and their reports with the rows' largest
        violation and objective part."""
        out = []
        for p in which:
            pair = self.pairs[p]
            worst, part = pair.exact(
                self.kernel, support, p, self.C, self.params, self.n_threads, precise
            )
            report = pair.report(q, self.C)
            out.append(report._replace(exact_violation=worst, objective_part=part))
        return out


class SeenRows:
    """The rows that have been in a working set (every support row among them): their
    numbers, features, classes and each pair's alpha, kept by the coordinator."""

    def __init__(self, n_features, n_pairs):
        self.slot: dict = {}
        self.n = 0
        # buffers grown by doubling (a copy per added working set cost O(iterations x rows));
        # ``ids``, ``X``, ``cls`` and ``alpha`` are views of their first ``n`` rows
        self._ids = np.empty(0, np.int64)
        self._X = np.empty((0, n_features), np.float32)
        self._cls = np.empty(0, np.int64)
        self._alpha = np.empty((0, n_pairs))

    ids = property(lambda self: self._ids[: self.n])
    X = property(lambda self: self._X[: self.n])
    cls = property(lambda self: self._cls[: self.n])
    alpha = property(lambda self: self._alpha[: self.n])

    def _grow(self, size):
        if size <= self._ids.size:
            return
        cap = max(size, 2 * self._ids.size, 1024)
        for name in ("_ids", "_X", "_cls", "_alpha"):
            old = getattr(self, name)
            new = np.zeros((cap,) + old.shape[1:], old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)

    def add(self, c: Candidates) -> np.ndarray:
        """Slots of the candidates' rows, new ones added."""
        new = [k for k, i in enumerate(c.ids.tolist()) if i not in self.slot]
        if new:
            start, stop = self.n, self.n + len(new)
            for j, k in enumerate(new):
                self.slot[int(c.ids[k])] = start + j
            self._grow(stop)
            self._ids[start:stop] = c.ids[new]
            self._X[start:stop] = c.X[new]
            self._cls[start:stop] = c.cls[new]
            self._alpha[start:stop] = 0.0
            self.n = stop
        return np.fromiter((self.slot[i] for i in c.ids.tolist()), np.int64, c.ids.size)

    def support(self, pairs) -> Support:
        """``Support`` of every pair: its rows with ``a > 0`` and their ``alpha t``."""
        members, coef = [], []
        for p, (a, _) in enumerate(pairs):
            m = np.flatnonzero(self.alpha[:, p] > 0.0)
            members.append(m)
            coef.append(self.alpha[m, p] * np.where(self.cls[m] == a, 1.0, -1.0))
        return Support(self.X, members, coef, self.ids)


class WorkingSetResult(NamedTuple):
    """The fit: ``seen`` (``SeenRows``: the support rows and every pair's alpha);
    per pair ``n_iter`` (iterations), ``converged`` (its exact check passed),
    ``objective`` (the dual, from the exact gradient), ``kkt`` (every row's largest
    violation at the last exact check); ``exact_checks``; ``seconds`` of each exchange;
    ``rebuilt`` blocks rebuilt after a lost worker."""

    seen: SeenRows
    n_iter: np.ndarray
    converged: np.ndarray
    objective: np.ndarray
    kkt: np.ndarray
    exact_checks: int
    seconds: list
    rebuilt: int


def subproblem_kernel(kernel: Kernel, X, block_columns=False):
    """``K(X, X)`` of the working set's rows in float64 from the float32 values the blocks'
    columns hold (``q_columns``, 2.5x faster than float64 kernel values), so that the
    subproblem and the gradients it updates see the same Q; ``block_columns``: as
    ``BlockRows`` computes them (the blocks' columns then are)."""
    m = X.shape[0]
    X = np.ascontiguousarray(X, dtype=np.float32)
    if block_columns:
        K32 = np.empty((m, m), np.float32)
        BlockRows(kernel, X).columns(X, np.ones(m, np.float32), m, K32)
        return K32.astype(np.float64)
    Xt = np.ascontiguousarray(X.T)
    ones = np.ones(m, np.float32)
    slots = np.arange(m, dtype=np.int64)
    K32 = np.empty((m, m), np.float32)
    params = kernel._params()
    parallel_rows(
        lambda lo, hi: q_columns(Xt, ones, m, X, ones, slots, lo, hi, *params, K32),
        m,
        min_rows=16,
    )
    return K32.astype(np.float64)


def solve_subproblem(kernel: Kernel, c: Candidates, t, C, tol, block_columns=False):
    """The working set's variables minimising the dual, the others fixed, to ``tol / 10``:
    exact one-variable steps on the largest violation (``box_greedy_steps``, on their q x q
    block of Q), from their alpha and gradient; ``box_qp`` (the exact tail's active-set
    method) from there if the steps run past ``SUBPROBLEM_STEPS_PER_VARIABLE`` per variable.
    Measured on 30,000 generated rows, q = 512: the steps 0.73 s in all, ``box_qp`` from
    the start 8.4 s, to the same optimum within tol."""
    m = c.ids.size
    K = subproblem_kernel(kernel, c.X, block_columns)
    t = np.asarray(t, np.float64)
    new = c.alpha.copy()
    grad = c.g.copy()
    cap = SUBPROBLEM_STEPS_PER_VARIABLE * m
    inner = max(0.1 * tol, SUBPROBLEM_SHARE * float(c.v[0]))
    if box_greedy_steps(K, t, float(C), new, grad, inner, cap) >= cap:
        # (an ill-conditioned block the steps crawl on: the active-set method from there)
        exact = box_qp_signed(K, t, C, new, grad, inner, 4 * m + 20)
        new = new if exact is None else exact
    d = (new - c.alpha) * t
    return new, float((new - c.alpha) @ c.g + 0.5 * d @ K @ d)


def solve_working_set(
    blocks,
    pairs,
    n_features,
    *,
    kernel: Kernel,
    C,
    tol,
    q=DEFAULT_Q,
    max_iter=-1,
    shrink_every=SHRINK_EVERY,
    on_iteration=None,
    block_columns=False,
    column_error=None,
) -> WorkingSetResult:
    """Solve every one-vs-one pair of ``pairs`` on ``blocks``: an object with
    ``step(updates, shrink, q)`` and ``exact(support, which, q)``, each returning the list
    of every block's answer in block order (``RowBlock``'s methods, run where the blocks
    live), and ``rebuilt`` (blocks rebuilt so far).  See the module's docstring.
    ``max_iter`` caps the iterations per pair (< 0: ``DEFAULT_MAX_ITERATIONS``);
    ``shrink_every``: iterations between shrinking rounds (None: no shrinking);
    ``on_iteration(iteration, seconds)`` is called after each exchange; ``block_columns``:
    the subproblems' kernels as the blocks' ``BlockRows`` compute Q (the blocks built
    with ``block_columns=True``); ``column_error``: a bound on a column entry's error, the
    certificate's (None: ``column_error_bound``)."""
    C, tol, q = float(C), float(tol), check_q(q)
    cap = DEFAULT_MAX_ITERATIONS if max_iter < 0 else int(max_iter)
    n_pairs = len(pairs)
    seen = SeenRows(n_features, n_pairs)
    blocks.attach(seen, pairs)
    n_iter = np.zeros(n_pairs, np.int64)
    converged = np.zeros(n_pairs, bool)
    objective = np.full(n_pairs, np.nan)
    kkt = np.full(n_pairs, np.nan)
    exact_checks = 0
    # the certificate after an exact check (see the loop): whether a pair is in it, the bound
    # on its gradient's float32 error since, and that error per unit of |change| (0: none)
    certifying = np.zeros(n_pairs, bool)
    drift = np.zeros(n_pairs)
    eps_column = column_error_bound(kernel) if column_error is None else float(column_error)
    seconds: list = []
    rebuilt = int(blocks.rebuilt)

    def call(method, *args):
        """``blocks.method(*args)``, timed.  A block rebuilt meanwhile ends every certificate:
        the drift bounds a gradient that is the exact check's plus the steps since, and a
        rebuilt block's is not that; the pair then ends on an exact check of every row."""
        nonlocal rebuilt
        answers = _timed(seconds, getattr(blocks, method), *args)
        if blocks.rebuilt != rebuilt:
            rebuilt = int(blocks.rebuilt)
            certifying[:] = False
        return answers

    pending = list(range(n_pairs))

    def whole(p):
        """Whether every row of pair ``p`` has its gradient kept since its last
        recomputation: unshrunk since, or never shrunk."""
        return bool(unshrunk[p] or not shrunk[p])

    unshrunk = np.zeros(n_pairs, bool)  # every row's gradient made again since a shrink
    shrunk = np.zeros(n_pairs, bool)  # rows of the pair shrunk at some point
    # every pair's reports, block by block
    reports = call("step", [None] * n_pairs, None, q)
    # each pair's rows (all active at first): a pair none of whose rows was ever shrunk has
    # every row's gradient kept by the steps, so it needs no unshrinking check at 10 tol
    n_rows = [sum(r[p].n_active for r in reports) for p in range(n_pairs)]
    thresholds = [None] * n_pairs
    since_shrink = 0
    while pending:
        merged, working = {}, {}
        for p in pending:
            parts = [r[p] for r in reports]
            if sum(r.n_active for r in parts) < n_rows[p]:
                shrunk[p] = True
            merged[p] = Candidates.merge([r.candidates for r in parts], q)
            working[p] = _working_set(merged[p], [r.kept for r in parts if r.kept is not None], q)
            thresholds[p] = (
                max(r.up_max for r in parts),
                max(r.dn_max for r in parts),
            )
        # certified: after an exact check, every row active and none shrunk, the gradient
        # differs from the exact one by at most ``drift`` (float32 columns), so a violation
        # within tol - drift is one within tol, with no second pass over the support rows
        for p in pending:
            if certifying[p] and merged[p].v.size and merged[p].v[0] + drift[p] <= tol:
                kkt[p] = merged[p].v[0] + drift[p]
                converged[p] = True
        pending = [p for p in pending if not converged[p]]
        if not pending:
            break
        # every row brought back, its gradient recomputed, once at 10 tol (LIBSVM's
        # unshrinking: rows shrunk early may violate again), and exactly in float64 when the
        # active rows are within tol (or the drift since the last exact check reaches tol/2)
        done_here = [
            p
            for p in pending
            if merged[p].v.size == 0
            or (not certifying[p] and merged[p].v[0] <= (tol if whole(p) else 10.0 * tol))
            or (certifying[p] and drift[p] >= 0.5 * tol)
        ]
        if done_here:
            support = seen.support(pairs)
            precise = bool(all(whole(p) for p in done_here))
            answers = call("exact", support, done_here, q, precise)
            exact_checks += 1
            for j, p in enumerate(done_here):
                parts = [a[j] for a in answers]
                kkt[p] = max(r.exact_violation for r in parts)
                objective[p] = 0.5 * sum(r.objective_part for r in parts)
                for r_all, r in zip(reports, parts):
                    r_all[p] = r
                unshrunk[p] = True
                if precise and kkt[p] <= tol:
                    converged[p] = True
                elif precise and eps_column > 0.0:
                    certifying[p] = True
                    drift[p] = 0.0
            pending = [p for p in pending if not converged[p]]
            if not pending:
                break
            if all(p in done_here for p in pending):
                continue
        if all(n_iter[p] >= cap for p in pending):
            break
        updates: list = [False] * n_pairs
        stepped = []  # (pair, slots in seen, new alpha) of the variables the step changes
        for p in pending:
            c = working[p]
            if p in done_here or merged[p].v.size == 0 or n_iter[p] >= cap:
                updates[p] = None  # waits for its exact check's news
                continue
            a = pairs[p][0]
            t = np.where(c.cls == a, 1.0, -1.0)
            new, gain = solve_subproblem(kernel, c, t, C, tol, block_columns)
            objective[p] += gain  # (exact at each exact check; NaN before the first)
            slots = seen.add(c)
            changed = np.flatnonzero(new != c.alpha)
            stepped.append((p, slots[changed], new[changed]))
            if certifying[p]:
                drift[p] += eps_column * float(np.abs(new - c.alpha).sum())
            order = changed[np.argsort(c.ids[changed], kind="stable")]
            # the free ones kept for the next working set, as ThunderSVM keeps half: their
            # columns are cached, and they are optimised again with the new violators
            free = np.flatnonzero((new > 0.0) & (new < C))
            free = free[np.lexsort((c.ids[free], -c.v[free]))][: int(KEEP_SHARE * q)]
            updates[p] = Update(
                c.ids[order],
                c.X[order],
                t[order].astype(np.float32),
                new[order] - c.alpha[order],
                new[order],
                np.sort(c.ids[free]),
            )
            n_iter[p] += 1
        since_shrink += 1
        shrink = None
        if shrink_every is not None and since_shrink >= shrink_every:
            since_shrink = 0
            shrink = [
                None
                if updates[p] is False or certifying[p]
                else (
                    thresholds[p][0] if thresholds[p][0] > 0 else np.inf,
                    thresholds[p][1] if thresholds[p][1] > 0 else np.inf,
                )
                for p in range(n_pairs)
            ]
        reports = call("step", updates, shrink, q)
        # seen's alpha is the blocks' between calls, written once every block has applied the
        # step: a block lost in it is rebuilt from the alpha before it, then steps once
        for p, slots, values in stepped:
            seen.alpha[slots, p] = values
        if on_iteration is not None:
            on_iteration(int(n_iter.max()), seconds[-1])
    unfinished = [p for p in range(n_pairs) if not converged[p]]
    if unfinished:  # stopped by max_iter: its KKT violation and objective measured exactly
        answers = call("exact", seen.support(pairs), unfinished, q, True)
        exact_checks += 1
        for j, p in enumerate(unfinished):
            parts = [a[j] for a in answers]
            kkt[p] = max(r.exact_violation for r in parts)
            objective[p] = 0.5 * sum(r.objective_part for r in parts)
            converged[p] = kkt[p] <= tol
    return WorkingSetResult(
        seen, n_iter, converged, objective, kkt, exact_checks, seconds, int(blocks.rebuilt)
    )


def column_error_bound(kernel: Kernel) -> float:
    """A bound on ``|Q32_ij - Q_ij|``, the error of a float32 kernel column's entry, for the
    kernels bounded by 1 (gaussian, laplacian, mg); 0 (no bound used) for polynomial ones.

    ``q_segment_of`` computes gaussian and laplacian values in float32: the squared
    distance of 8-100 features to a relative 2^-24 per feature and step, the exp to 1.2e-7
    relative; with ``K x <= 1/e`` (``x`` the exponent) that is below 4e-7 for 8 features
    (measured: within 5e-8).  mg values are float64 rounded to float32 (6e-8).  The bound
    used, 1e-6, keeps a margin for more features (``d`` up to 100 at 2^-24 (d + 3) / e)."""
    return 0.0 if kernel.kind == "polynomial" else COLUMN_ERROR


def _working_set(top: Candidates, kept_parts, q) -> Candidates:
    """The kept variables (the blocks' ``kept``, by row number) and the largest violators
    not among them, ``q`` in all."""
    if not kept_parts:
        return top
    kept = Candidates(
        *(np.concatenate([getattr(k, f) for k in kept_parts]) for f in Candidates._fields)
    )
    fresh = ~np.isin(top.ids, kept.ids)
    room = max(q - kept.ids.size, 0)
    pick = np.flatnonzero(fresh)[:room]
    return Candidates(*(np.concatenate([a, b[pick]]) for a, b in zip(kept, top)))


def _timed(seconds, fn, *args):
    started = time.perf_counter()
    out = fn(*args)
    seconds.append(time.perf_counter() - started)
    return out
