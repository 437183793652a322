"""The kernel solver's helper thread: a second thread that takes the far half of each long
pass of a step (a kernel column, the partner's selection, the gradient's update, G_bar's),
to the same result to the bit as one thread."""

from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np
from numba import njit

from elmscale.core.jit import (
    atomic_cas,
    atomic_load_acquire,
    atomic_store_release,
    cpu_relax,
    sleep_us,
    yield_cpu,
)
from elmscale.core.sparse_kernels import csr_scatter_block
from elmscale.solvers.kernel_columns import (
    SOURCE_CSR,
    block_segment,
    column_segment,
    step_scratch,
)
from elmscale.solvers.kernel_passes import (
    BLOCK,
    add_column,
    select_partner_range,
    update_select_range,
)

# The helper thread.  With two cores, a second thread takes the far half of each long
# pass of a step (the kernel columns, the partner's selection, the gradient's update,
# G_bar's update) while the solver's thread does the near half: the halves touch
# disjoint entries, and every decision stays on the solver's thread, so the result is
# the same to the bit as on one thread (a helper's best counts only when strictly
# better, as the first maximum would in one pass).  The two meet through ``Helper``'s
# ``ctrl`` (int64, slots _CTRL_*) and ``fargs`` (float64, slots _F_*); no helper: both
# empty.  A hand-over measured 0.2-0.85 us (a bare round trip between two threads 0.06
# us), so passes shorter than ``SPLIT_MIN`` stay whole.
#
# Shared cores.  The solver's thread never waits for a helper that is not running: a job
# is claimed by compare-and-swap of ``_CTRL_CLAIMED``, by the helper when it sees it, or
# by the solver's thread itself once its own half is done, which then does the far half
# too (a job taken back).  Only a job the helper has claimed is waited for, spinning
# ``WAIT_SPINS`` polls and then yielding the core (``sched_yield``).  The helper spins
# ``IDLE_SPINS`` polls for the next job and then sleeps ``IDLE_SLEEP_US`` at a time, so
# that between phases, or while the solver's thread runs alone, it holds no core.  When
# more than ``MISS_SHARE`` of a window of ``WINDOW`` jobs were taken back or waited for
# past ``LATE_SPINS`` (another process has the second core), the solver's thread runs its
# passes whole for ``SOLO_PASSES`` of them (doubling while it keeps failing, halving
# back after each window that pays), and the helper goes to sleep; then it tries again.
# Beside one busy process (COD-RNA half, C = 1): 1.77 s against 1.18-1.26 s alone and
# 1.63-1.70 s on one thread there; with 4,096 wait spins and the stretch reset after a
# good window, 1.96 s.  Before, both threads spun without ever
# yielding: two fits at once on two cores took 3.8-14x their time alone.  A wait past
# ``WAIT_SPINS`` counted as a miss until a helper waking from its idle sleep was seen to
# cause most of them alone (60,000 rows: 0.25-2.1 passes run whole per pass split;
# 0.01-0.19 with ``LATE_SPINS``, the busy neighbour's time the same).
Helper = namedtuple("Helper", ["ctrl", "fargs"])
_CTRL_POSTED = 0  # the number of the job posted (the solver's thread writes it)
_CTRL_DONE = 1  # of the job the helper has done
_CTRL_JOB = 2  # its kind (_JOB_*)
# the variable whose column is computed; for an update, 1 if two columns; for a block
# fetch, its number of columns
_CTRL_VAR = 3
_CTRL_START = 4  # the helper's part of the pass: [start, end)
_CTRL_END = 5
_CTRL_SLOT = 6  # the cache slot of the (first) column
_CTRL_SLOT2 = 7  # of the second column (an update's)
_CTRL_RESULT = 8  # an index found (partner, selected variable)
_CTRL_CLAIMED = 9  # the number of the last job claimed, by either thread
# the solver's thread's own bookkeeping of whether the helper pays
_CTRL_WINDOW = 10  # jobs posted in the current window
_CTRL_MISSES = 11  # of them, taken back or waited for past WAIT_SPINS
_CTRL_SOLO = 12  # split passes still to run whole
_CTRL_BACKOFF = 13  # the next solo stretch
# counters for ``info``
_CTRL_N_POSTED = 14  # jobs posted
_CTRL_N_TAKEN_BACK = 15  # done by the solver's thread itself
_CTRL_N_LATE = 16  # waited for past LATE_SPINS
_CTRL_N_SOLO = 17  # passes run whole because the helper did not pay
_CTRL_SIZE = 18
_F_ARG = 0  # the float arguments: gi (partner), the step's di (update), w (G_bar)
_F_ARG2 = 1  # qii (partner), dj (update)
_F_BEST = 2  # the best score found in the helper's part
_F_MAX_V = 3  # the largest squared violation there (update)
_FARGS_SIZE = 4
_JOB_STOP = 0
_JOB_COLUMN = 1
_JOB_PARTNER = 2
_JOB_UPDATE = 3
_JOB_G_BAR = 4
_JOB_BLOCK = 5
SPLIT_MIN = 4096
HELPER_MIN_ROWS = 2 * SPLIT_MIN  # problems smaller than this never start a helper
NO_HELPER = Helper(np.zeros(0, np.int64), np.zeros(0))
WAIT_SPINS = 512  # polls (with a pause) before the solver's thread yields its core
# polls (the last ones yields) past which a wait for the helper counts as a miss: about a
# millisecond, longer than the helper's wake-up from its idle sleep (IDLE_SLEEP_US, then
# the scheduler's latency), shorter than the time slice another process takes its core for
LATE_SPINS = 4 * WAIT_SPINS
IDLE_SPINS = 4096  # polls before an idle helper sleeps
IDLE_SLEEP_US = 200
WINDOW = 64
MISS_SHARE = 0.25
SOLO_PASSES = 1024  # the first solo stretch; doubled while the helper keeps missing
SOLO_PASSES_MAX = 65536


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _post(ctrl, job, var, start, end, slot, slot2):
    """Hand the helper a job (arguments first, then the job number, with release)."""
    ctrl[_CTRL_JOB] = job
    ctrl[_CTRL_VAR] = var
    ctrl[_CTRL_START] = start
    ctrl[_CTRL_END] = end
    ctrl[_CTRL_SLOT] = slot
    ctrl[_CTRL_SLOT2] = slot2
    ctrl[_CTRL_N_POSTED] += 1
    atomic_store_release(ctrl, _CTRL_POSTED, ctrl[_CTRL_POSTED] + 1)


@njit(cache=True, nogil=True, error_model="numpy")
def _run_job(ctrl, fargs, q, sol, cols, scratch):
    """Do the job posted in ``ctrl`` (either thread: the helper, or the solver's thread
    taking it back), its results written to ``ctrl`` / ``fargs``."""
    job = ctrl[_CTRL_JOB]
    var, start, end = ctrl[_CTRL_VAR], ctrl[_CTRL_START], ctrl[_CTRL_END]
    s, s2 = ctrl[_CTRL_SLOT], ctrl[_CTRL_SLOT2]
    if job == _JOB_COLUMN:
        column_segment(q, var, start, end, scratch, cols[s])
    elif job == _JOB_PARTNER:
        j, best = select_partner_range(
            fargs[_F_ARG],
            fargs[_F_ARG2],
            start,
            end,
            sol.g,
            sol.bound,
            q.diag,
            cols[s],
            scratch.score,
        )
        ctrl[_CTRL_RESULT] = j
        fargs[_F_BEST] = best
    elif job == _JOB_UPDATE:
        i_sel, best, max_v = update_select_range(
            start,
            end,
            sol.g,
            sol.bound,
            q.dinv,
            cols[s],
            fargs[_F_ARG],
            cols[s2],
            fargs[_F_ARG2],
            var != 0,
            q.unit_diag,
            scratch.score,
            scratch.viol,
        )
        ctrl[_CTRL_RESULT] = i_sel
        fargs[_F_BEST] = best
        fargs[_F_MAX_V] = max_v
    elif job == _JOB_G_BAR:
        add_column(sol.g_bar, fargs[_F_ARG], cols[s], start, end)
    elif job == _JOB_BLOCK:
        block_segment(q, var, start, end, cols)


@njit(cache=True, nogil=True, error_model="numpy")
def _finish(helper, q, sol, cols, scratch):
    """Wait until the far half of the job posted is done: done here if the helper has not
    claimed it, else waited for (spinning, then yielding the core).  Counts the misses
    that decide whether the helper pays (see the comment above ``Helper``)."""
    ctrl = helper.ctrl
    posted = ctrl[_CTRL_POSTED]
    miss = False
    if atomic_cas(ctrl, _CTRL_CLAIMED, posted - 1, posted):
        _run_job(ctrl, helper.fargs, q, sol, cols, scratch)
        ctrl[_CTRL_N_TAKEN_BACK] += 1
        miss = True
    else:
        spins = 0
        while atomic_load_acquire(ctrl, _CTRL_DONE) != posted:
            spins += 1
            if spins < WAIT_SPINS:
                cpu_relax()
            else:
                yield_cpu()
        if spins >= LATE_SPINS:
            ctrl[_CTRL_N_LATE] += 1
            miss = True
    ctrl[_CTRL_WINDOW] += 1
    if miss:
        ctrl[_CTRL_MISSES] += 1
    if ctrl[_CTRL_WINDOW] >= WINDOW:
        if ctrl[_CTRL_MISSES] > MISS_SHARE * WINDOW:
            backoff = max(ctrl[_CTRL_BACKOFF], SOLO_PASSES)
            ctrl[_CTRL_SOLO] = backoff
            ctrl[_CTRL_BACKOFF] = min(2 * backoff, SOLO_PASSES_MAX)
        else:
            ctrl[_CTRL_BACKOFF] = max(ctrl[_CTRL_BACKOFF] // 2, SOLO_PASSES)
        ctrl[_CTRL_WINDOW] = 0
        ctrl[_CTRL_MISSES] = 0


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _split_point(helper, start, end):
    """Where a pass over ``[start, end)`` is cut (a multiple of ``BLOCK`` from ``start``);
    ``start`` when there is no helper, the pass is short, or the helper does not pay now."""
    ctrl = helper.ctrl
    if ctrl.shape[0] == 0 or end - start < SPLIT_MIN:
        return start
    if ctrl[_CTRL_SOLO] > 0:
        ctrl[_CTRL_SOLO] -= 1
        ctrl[_CTRL_N_SOLO] += 1
        return start
    return start + (end - start) // 2 // BLOCK * BLOCK


@njit(cache=True, nogil=True, error_model="numpy")
def _helper_loop(helper, q, sol, cache):
    """The helper thread's body: do the jobs posted in ``helper.ctrl`` until ``_JOB_STOP``,
    spinning ``IDLE_SPINS`` polls between jobs, then sleeping ``IDLE_SLEEP_US`` at a time.
    It runs only while a phase of steps runs (see ``kernel_dual._run_phase``)."""
    ctrl, fargs = helper.ctrl, helper.fargs
    cols = cache.cols
    scratch = step_scratch(q.Xt.shape[0])
    # 0, not the number posted now: the solver's thread may have posted before this
    # thread started, the stop job included (a job already taken back fails its claim)
    seen = 0
    idle = 0
    while True:
        posted = atomic_load_acquire(ctrl, _CTRL_POSTED)
        if posted == seen:
            idle += 1
            if idle < IDLE_SPINS:
                cpu_relax()
            else:
                sleep_us(IDLE_SLEEP_US)
            continue
        seen = posted
        idle = 0
        if not atomic_cas(ctrl, _CTRL_CLAIMED, posted - 1, posted):
            continue  # the solver's thread took it back
        if ctrl[_CTRL_JOB] == _JOB_STOP:
            atomic_store_release(ctrl, _CTRL_DONE, posted)
            return
        _run_job(ctrl, fargs, q, sol, cols, scratch)
        atomic_store_release(ctrl, _CTRL_DONE, posted)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def column_fill(i, start, end, s, q, sol, cols, scratch, helper):
    """``cols[s][start:end]`` = Q's column i there, the far half on the helper if any."""
    mid = _split_point(helper, start, end)
    split = mid > start
    if split:
        _post(helper.ctrl, _JOB_COLUMN, i, mid, end, s, 0)
    else:
        mid = end
    column_segment(q, i, start, mid, scratch, cols[s])
    if split:
        _finish(helper, q, sol, cols, scratch)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def block_fill(m, end, q, sol, cols, scratch, helper):
    """A block fetch's ``m`` columns (``q.fetch``) over positions ``[0, end)``, the far half
    on the helper if any; sparse rows' block scattered into ``q.fetch.rows`` first and
    cleared after."""
    sparse = q.source == SOURCE_CSR
    if sparse:
        csr_scatter_block(q.csr, q.perm, q.fetch.positions, m, q.fetch.rows, None)
    mid = _split_point(helper, 0, end)
    split = mid > 0
    if split:
        _post(helper.ctrl, _JOB_BLOCK, m, mid, end, 0, 0)
    else:
        mid = end
    block_segment(q, m, 0, mid, cols)
    if split:
        _finish(helper, q, sol, cols, scratch)
    if sparse:
        csr_scatter_block(q.csr, q.perm, q.fetch.positions, m, q.fetch.rows, 0.0)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def select_partner(i, n_active, sol, q, cols, s, scratch, helper):
    """``select_partner_range`` over the active variables (column i in slot ``s``)."""
    g, bound, diag = sol.g, sol.bound, q.diag
    gi = g[i]
    qii = diag[i]
    ctrl, fargs = helper.ctrl, helper.fargs
    mid = _split_point(helper, 0, n_active)
    split = mid > 0
    if split:
        fargs[_F_ARG] = gi
        fargs[_F_ARG2] = qii
        _post(ctrl, _JOB_PARTNER, 0, mid, n_active, s, 0)
    else:
        mid = n_active
    j, best = select_partner_range(
        gi, qii, np.int64(0), mid, g, bound, diag, cols[s], scratch.score
    )
    if split:
        _finish(helper, q, sol, cols, scratch)
        if fargs[_F_BEST] > best:
            j = ctrl[_CTRL_RESULT]
    return j


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def update_select_split(n_active, sol, q, cols, s, di, s2, dj, two, scratch, helper):
    """``update_select`` with Q's columns in slots ``s`` and ``s2``, the far half of the
    active variables on the helper if any."""
    ctrl, fargs = helper.ctrl, helper.fargs
    mid = _split_point(helper, 0, n_active)
    split = mid > 0
    if split:
        fargs[_F_ARG] = di
        fargs[_F_ARG2] = dj
        _post(ctrl, _JOB_UPDATE, 1 if two else 0, mid, n_active, s, s2)
    else:
        mid = n_active
    i_sel, best, max_v = update_select_range(
        np.int64(0),
        mid,
        sol.g,
        sol.bound,
        q.dinv,
        cols[s],
        di,
        cols[s2],
        dj,
        two,
        q.unit_diag,
        scratch.score,
        scratch.viol,
    )
    if split:
        _finish(helper, q, sol, cols, scratch)
        if fargs[_F_BEST] > best:
            i_sel = ctrl[_CTRL_RESULT]
        max_v = max(max_v, fargs[_F_MAX_V])
    return i_sel, np.sqrt(max_v)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def update_g_bar(w, s, n, q, sol, cols, scratch, helper):
    """``g_bar[:n] += w * cols[s][:n]``, the far half on the helper if any."""
    mid = _split_point(helper, 0, n)
    split = mid > 0
    if split:
        helper.fargs[_F_ARG] = w
        _post(helper.ctrl, _JOB_G_BAR, 0, mid, n, s, 0)
    else:
        mid = n
    add_column(sol.g_bar, w, cols[s], 0, mid)
    if split:
        _finish(helper, q, sol, cols, scratch)


def start_helper(q, sol, cache):
    """A helper thread for a phase on ``q``, ``sol``, ``cache``: ``(control, thread)``."""
    control = Helper(np.zeros(_CTRL_SIZE, np.int64), np.zeros(_FARGS_SIZE))
    thread = threading.Thread(
        target=_helper_loop,
        daemon=True,
        name="elmscale-solver-helper",
        args=(control, q, sol, cache),
    )
    thread.start()
    return control, thread


def stop_helper(control, thread):
    """End the helper's loop and wait for its thread (the stop job is never taken back)."""
    _post(control.ctrl, _JOB_STOP, 0, 0, 0, 0, 0)
    thread.join()


def helper_counts(control) -> dict:
    """What the helper did in a phase: jobs posted, taken back by the solver's thread,
    waited for past the spins, and passes run whole because it did not pay."""
    ctrl = control.ctrl
    return {
        "helper_jobs": int(ctrl[_CTRL_N_POSTED]),
        "helper_taken_back": int(ctrl[_CTRL_N_TAKEN_BACK]),
        "helper_late": int(ctrl[_CTRL_N_LATE]),
        "helper_solo_passes": int(ctrl[_CTRL_N_SOLO]),
    }
