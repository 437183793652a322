"""The sparse-ELM dual solver (paper Section V, Algorithm 1), in numba.

Problem (eq. 17): minimise ``1/2 a'Qa - 1'a`` subject to ``0 <= a_i <= C``,
``Q_ij = t_i t_j K(x_i, x_j)``.  There is no equality constraint, so one
variable can move alone: ``a_i <- clip(a_i - g_i / Q_ii, 0, C)`` (Algorithm 1).

Three solvers, all pure functions of arrays (no Dask, no Ray), so that a
one-vs-one pair or a cross-validation fold can run anywhere.  None is the paper's
Algorithm 1 step for step: each takes better steps to the same optimum (two variables per
step, exact tails), as the docs of each say.

``solve_kernel_dual``
    LIBSVM-style: kernel columns (float32, see ``_jit.q_segment`` for their
    accuracy; float64 when Q's scale needs it, ``column_dtype``) in an LRU cache
    with a budget in MB and O(1) lookup (prev/next arrays of slots).  The active
    variables are kept first, in every per-variable array and in every cached
    column (LIBSVM's swap_index, done as one stable partition per shrinking
    round), so that the step's pass over them is contiguous and vectorises, and
    a column of a shrunk problem is computed only for the active part.  Each step
    takes i with the largest ``v_i^2 / Q_ii`` (``v_i`` its KKT violation; for the
    gaussian kernel ``Q_ii = 1`` and this is the paper's rule, eqs. 41-42), then by
    default a
    partner j with the largest gain of the joint exact step along Q's column i
    (second-order selection as in LIBSVM; without the equality constraint both
    move freely inside the box): at large C single steps need ten times more
    of them.  Shrinking of bounded variables every ``SHRINK_EVERY`` steps,
    with ``G_bar = sum_{a_j = C} C Q[:, j]`` kept so that the gradient of
    shrunk variables is rebuilt from the free ones only.  On exit the
    gradient is recomputed exactly in float64 from the support vectors and the
    solver continues if the largest violation exceeds ``tol``.  A small
    problem solved many times (a C path) may pass its float64 Gram matrix.
``solve_dense_dual`` (``dense_dual``)
    A small problem (up to ``DENSE_ROWS`` = 1,024 rows) on its kept float64 K: the
    kernel solver's steps, exact columns read from K, the whole solve in one compiled
    call (no cache, shrinking or helper), so that a fit on a few hundred rows costs
    what LIBSVM's does.
``solve_explicit_dual``
    For random hidden nodes (``Q = (t h)(t h)'``): dual coordinate descent of
    LIBLINEAR (Hsieh et al. 2008) on ``beta = sum_i a_i t_i h(x_i)``: O(L) per
    step, no kernel columns, random order per pass (rows prefetched ahead of
    it), shrinking.

Both accept a warm start ``alpha0`` (a path of increasing C reuses the last
solution).  Both end the same way when the steps stall on a small active set
(ill-conditioned Q: wide kernels, large C, or random nodes, where Q has rank at
most L): that reduced problem, the others fixed, is solved exactly by
``box_qp``, a dense primal active-set method, and the steps resume from its
solution; the exact final check is unchanged.  On a C path with K kept whole, a
warm start with few free variables (wide kernels) goes to ``box_qp``'s method over
every row before any step (``face_qp_max_free``).  With two cores a helper thread
takes the far half of each long pass of a step (``helper``), to the same result; it
never makes the solver's thread wait on a core another process holds
(``solver_helper``).

The modules, one seam each: ``kernel_dual`` (the kernel solver's phases, shrinking and
driver), ``kernel_passes`` (its vectorised passes and two-variable step), ``kernel_columns``
(where Q's columns come from), ``column_cache`` (the LRU cache and the state a C path
keeps), ``solver_helper`` (the helper thread), ``exact_tail`` (``box_qp``),
``dense_dual`` (small problems), ``explicit_dual`` (random nodes), ``dual_common`` (what
they share).  This module gathers
their public names.

Inside, the numba phases take their state in named groups, never by slot number: named
tuples of arrays and scalars (the kernel solver's ``_Settings``, ``QMatrix``, Q as a
column source with a ``SOURCE_*`` code, ``_Solution``, ``ColumnCache``, ``Helper``; the
explicit solver's ``ExplicitSettings``, ``ExplicitProblem``, ``ExplicitSolution``,
``PassOrder``), one record of integer state each (``KERNEL_STATE``,
``EXPLICIT_STATE``), and the bound flags ``LOWER_BOUND``, ``FREE``, ``UPPER_BOUND``.
"""

from __future__ import annotations

from elmscale.solvers.column_cache import KernelSolverState, kernel_key
from elmscale.solvers.dense_dual import solve_dense_dual
from elmscale.solvers.dual_common import DEFAULT_STEP_CAP, dual_objective, kkt_violation
from elmscale.solvers.exact_tail import box_qp
from elmscale.solvers.explicit_dual import (
    EXPLICIT_MAX_PASSES,
    EXPLICIT_TAIL_SIZE,
    explicit_passes,
    solve_explicit_dual,
)
from elmscale.solvers.kernel_columns import column_dtype
from elmscale.solvers.kernel_dual import (
    SHRINK_EVERY,
    TAIL_SIZE,
    ExactQ,
    exact_gradient,
    solve_kernel_dual,
)
from elmscale.solvers.solver_helper import HELPER_MIN_ROWS

__all__ = [
    "DEFAULT_STEP_CAP",
    "EXPLICIT_MAX_PASSES",
    "EXPLICIT_TAIL_SIZE",
    "HELPER_MIN_ROWS",
    "SHRINK_EVERY",
    "TAIL_SIZE",
    "ExactQ",
    "KernelSolverState",
    "box_qp",
    "column_dtype",
    "dual_objective",
    "exact_gradient",
    "explicit_passes",
    "kernel_key",
    "kkt_violation",
    "solve_dense_dual",
    "solve_explicit_dual",
    "solve_kernel_dual",
]
