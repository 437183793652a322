"""The kernel solver's helper thread: a second thread that takes the far half of each long
pass of a step (a kernel column, the partner's selection, the gradient's update, G_bar's),
to the same result to the bit as one thread."""

from __future__ import annotations

import threading
from collections import namedtuple

import numpy as np
from numba import njit

from elmscale.core.jit import atomic_load_acquire, atomic_store_release
from elmscale.solvers.kernel_columns import column_segment, step_scratch
from elmscale.solvers.kernel_passes import (
    BLOCK,
    add_column,
    select_partner_range,
    update_select,
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
Helper = namedtuple("Helper", ["ctrl", "fargs"])
_CTRL_POSTED = 0  # the number of the job posted (the solver's thread writes it)
_CTRL_DONE = 1  # of the job done (the helper's)
_CTRL_JOB = 2  # its kind (_JOB_*)
_CTRL_VAR = 3  # the variable whose column is computed; for an update, 1 if two columns
_CTRL_START = 4  # the helper's part of the pass: [start, end)
_CTRL_END = 5
_CTRL_SLOT = 6  # the cache slot of the (first) column
_CTRL_SLOT2 = 7  # of the second column (an update's)
_CTRL_RESULT = 8  # an index found (partner, selected variable)
_CTRL_SIZE = 9
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
SPLIT_MIN = 4096
HELPER_MIN_ROWS = 2 * SPLIT_MIN  # problems smaller than this never start a helper
NO_HELPER = Helper(np.zeros(0, np.int64), np.zeros(0))


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _post(ctrl, job, var, start, end, slot, slot2):
    """Hand the helper a job (arguments first, then the job number, with release)."""
    ctrl[_CTRL_JOB] = job
    ctrl[_CTRL_VAR] = var
    ctrl[_CTRL_START] = start
    ctrl[_CTRL_END] = end
    ctrl[_CTRL_SLOT] = slot
    ctrl[_CTRL_SLOT2] = slot2
    atomic_store_release(ctrl, _CTRL_POSTED, ctrl[_CTRL_POSTED] + 1)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _wait(ctrl):
    """Spin until the helper has done the last job posted."""
    posted = ctrl[_CTRL_POSTED]
    while atomic_load_acquire(ctrl, _CTRL_DONE) != posted:
        pass


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def _split_point(helper, start, end):
    """Where a pass over ``[start, end)`` is cut (a multiple of ``BLOCK`` from ``start``);
    ``start`` when there is no helper or the pass is short."""
    if helper.ctrl.shape[0] == 0 or end - start < SPLIT_MIN:
        return start
    return start + (end - start) // 2 // BLOCK * BLOCK


@njit(cache=True, nogil=True, error_model="numpy")
def _helper_loop(helper, q, sol, cache):
    """The helper thread's body: do the jobs posted in ``helper.ctrl`` until ``_JOB_STOP``.
    It spins between jobs; it runs only while a phase of steps runs (see ``_run_phase``)."""
    ctrl, fargs = helper.ctrl, helper.fargs
    cols = cache.cols
    scratch = step_scratch(q.Xt.shape[0])
    done = atomic_load_acquire(ctrl, _CTRL_DONE)
    while True:
        posted = atomic_load_acquire(ctrl, _CTRL_POSTED)
        if posted == done:
            continue
        job = ctrl[_CTRL_JOB]
        if job == _JOB_STOP:
            atomic_store_release(ctrl, _CTRL_DONE, posted)
            return
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
        done = posted
        atomic_store_release(ctrl, _CTRL_DONE, posted)


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def column_fill(i, start, end, s, q, cols, scratch, helper):
    """``cols[s][start:end]`` = Q's column i there, the far half on the helper if any."""
    mid = _split_point(helper, start, end)
    if mid > start:
        _post(helper.ctrl, _JOB_COLUMN, i, mid, end, s, 0)
        column_segment(q, i, start, mid, scratch, cols[s])
        _wait(helper.ctrl)
    else:
        column_segment(q, i, start, end, scratch, cols[s])


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def select_partner(i, n_active, sol, q, cols, s, scratch, helper):
    """``select_partner_range`` over the active variables (column i in slot ``s``)."""
    g, bound, diag = sol.g, sol.bound, q.diag
    gi = g[i]
    qii = diag[i]
    mid = _split_point(helper, 0, n_active)
    if mid == 0:
        return select_partner_range(
            gi, qii, np.int64(0), n_active, g, bound, diag, cols[s], scratch.score
        )[0]
    ctrl, fargs = helper.ctrl, helper.fargs
    fargs[_F_ARG] = gi
    fargs[_F_ARG2] = qii
    _post(ctrl, _JOB_PARTNER, 0, mid, n_active, s, 0)
    j, best = select_partner_range(
        gi, qii, np.int64(0), mid, g, bound, diag, cols[s], scratch.score
    )
    _wait(ctrl)
    return ctrl[_CTRL_RESULT] if fargs[_F_BEST] > best else j


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def update_select_split(n_active, sol, q, cols, s, di, s2, dj, two, scratch, helper):
    """``update_select`` with Q's columns in slots ``s`` and ``s2``, the far half of the
    active variables on the helper if any."""
    g, bound, dinv, unit_diag = sol.g, sol.bound, q.dinv, q.unit_diag
    mid = _split_point(helper, 0, n_active)
    if mid == 0:
        return update_select(
            n_active,
            g,
            bound,
            dinv,
            cols[s],
            di,
            cols[s2],
            dj,
            two,
            unit_diag,
            scratch.score,
            scratch.viol,
        )
    ctrl, fargs = helper.ctrl, helper.fargs
    fargs[_F_ARG] = di
    fargs[_F_ARG2] = dj
    _post(ctrl, _JOB_UPDATE, 1 if two else 0, mid, n_active, s, s2)
    i_sel, best, max_v = update_select_range(
        np.int64(0),
        mid,
        g,
        bound,
        dinv,
        cols[s],
        di,
        cols[s2],
        dj,
        two,
        unit_diag,
        scratch.score,
        scratch.viol,
    )
    _wait(ctrl)
    if fargs[_F_BEST] > best:
        i_sel = ctrl[_CTRL_RESULT]
    return i_sel, np.sqrt(max(max_v, fargs[_F_MAX_V]))


@njit(cache=True, nogil=True, inline="always", error_model="numpy")
def update_g_bar(g_bar, w, cols, s, n, helper):
    """``g_bar[:n] += w * cols[s][:n]``, the far half on the helper if any."""
    mid = _split_point(helper, 0, n)
    if mid == 0:
        add_column(g_bar, w, cols[s], 0, n)
        return
    helper.fargs[_F_ARG] = w
    _post(helper.ctrl, _JOB_G_BAR, 0, mid, n, s, 0)
    add_column(g_bar, w, cols[s], 0, mid)
    _wait(helper.ctrl)


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
    """End the helper's loop and wait for its thread."""
    _post(control.ctrl, _JOB_STOP, 0, 0, 0, 0, 0)
    thread.join()
