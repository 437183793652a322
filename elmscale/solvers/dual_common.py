"""What the sparse ELM's two dual solvers share: the phases' return codes, the diagonal guard,
their integer-state records, the final KKT measure and the objective."""

from __future__ import annotations

import numpy as np

# numba loads scipy's BLAS, an OpenBLAS of its own, on its first compiled call (to serve
# matrix products in njit code, which the solvers no longer make): loaded here, so that
# it exists before a Ray task sets its thread limits, which would otherwise miss it
import scipy.linalg  # noqa: F401

TAU = 1e-12  # guard for a non-positive diagonal
DEFAULT_STEP_CAP = 10_000_000  # kernel solvers' steps when max_iter < 0 (LIBSVM's cap)


def kernel_step_cap(max_iter, n_rows) -> int:
    """The kernel solvers' step cap: ``max_iter``, or LIBSVM's max(1e7, 100 n) when it is
    negative (a problem whose scale puts tol below the float32 columns' resolution, say a
    polynomial kernel on unscaled features with Q near 1e13, would otherwise step for ever;
    the caller reports it as not converged)."""
    return max(DEFAULT_STEP_CAP, 100 * int(n_rows)) if max_iter < 0 else int(max_iter)


# What a phase returns (the kernel solver's all four, the explicit solver's 0, 1 and 3)
PHASE_OPTIMAL = 0  # every variable within tol (the kernel's: a candidate, checked exactly)
PHASE_MAX_ITER = 1  # the step (pass) cap reached
PHASE_UNSHRINK = 2  # the caller rebuilds the shrunk variables' gradient, then calls again
PHASE_TAIL = 3  # the caller solves the small active set exactly, then calls again


def new_record(dtype, **fields):
    """One record of ``dtype`` (a view of a one-element array: numba writes through it),
    its fields zero but those given."""
    record = np.zeros(1, dtype)[0]
    for name, value in fields.items():
        record[name] = value
    return record


def kkt_violations(alpha, g, C, slack=None):
    """Each variable's KKT violation (0 at the optimum), vectorised.  ``slack``: per
    variable, how far ``g`` may be from the true gradient; then the largest violation any
    gradient within it could have (a certificate from an approximate gradient)."""
    if slack is None:
        slack = 0.0
    return np.where(
        alpha <= 0.0,
        np.maximum(slack - g, 0.0),
        np.where(alpha >= C, np.maximum(g + slack, 0.0), np.abs(g) + slack),
    )


def kkt_violation(alpha, g, C, slack=None):
    """Largest KKT violation (0 at the optimum); ``slack`` as in :func:`kkt_violations`."""
    return float(kkt_violations(alpha, g, C, slack).max(initial=0.0))


def dual_objective(Q, alpha):
    """``1/2 a'Qa - 1'a`` (for tests and reports)."""
    return 0.5 * alpha @ Q @ alpha - alpha.sum()
