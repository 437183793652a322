"""The kernel solver on shared cores: its helper thread never holds the solver's thread
waiting on a core that another process has (``solvers/solver_helper.py``)."""

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from _problems import nonlinear_problem

from elmscale.features.kernels import Kernel
from elmscale.solvers.sparse_dual import HELPER_MIN_ROWS, solve_kernel_dual

ROOT = Path(__file__).resolve().parents[1]

# One child: a solve of 12,000 rows with the helper thread (forced: a CI runner may give
# one core), timed after a warm-up solve that loads the compiled code.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    sys.path.insert(0, "tests")
    from _problems import nonlinear_problem
    from elmscale.features.kernels import Kernel
    from elmscale.solvers.sparse_dual import solve_kernel_dual
    X, y = nonlinear_problem(12_000, d=6, seed=3)
    t = np.where(y == 1, 1.0, -1.0)
    kernel = Kernel("gaussian", sigma=0.3)
    solve_kernel_dual(X[:9_000], t[:9_000], kernel=kernel, C=1.0, helper=True)
    start = time.perf_counter()
    alpha, steps, converged, _ = solve_kernel_dual(X, t, kernel=kernel, C=1.0, helper=True)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, "steps": steps, "converged": bool(converged),
                      "checksum": float(alpha.sum())}))
    """
)


def _start_child():
    return subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(proc, timeout):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"a solve with the helper thread ran past {timeout} s (a hang?)")
    assert proc.returncode == 0, err[-2000:]
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.timeout(600)
def test_two_solves_at_once_in_two_processes_finish_near_their_time_alone():
    """Two processes, each solving with its helper thread, on the same cores at once: each
    within a generous bound of its time alone (before the helper yielded, 3.8-14x)."""
    alone = _result(_start_child(), timeout=300)
    first, second = _start_child(), _start_child()
    together = [_result(first, timeout=300), _result(second, timeout=300)]
    for result in together:
        assert result["converged"]
        assert result["steps"] == alone["steps"]
        assert result["checksum"] == alone["checksum"]  # the same solution to the bit
        # two solves share the cores: 2x is the fair share; 6x is a hang's or a spin's
        assert result["seconds"] <= 6.0 * alone["seconds"] + 2.0, (alone, together)


@pytest.mark.timeout(300)
def test_the_helper_gives_the_same_solution_when_its_core_is_taken():
    """With a busy process on every core, the helper is often not running when its half is
    posted: the solver's thread takes the job back or runs alone for a while; the solution
    stays the same to the bit, and the counters say so."""
    X, y = nonlinear_problem(HELPER_MIN_ROWS + 2_000, d=5, seed=11)
    t = np.where(y == 1, 1.0, -1.0)
    kernel = Kernel("gaussian", sigma=0.4)
    alone = solve_kernel_dual(X, t, kernel=kernel, C=10.0, helper=False)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        info = {}
        start = time.perf_counter()
        shared = solve_kernel_dual(X, t, kernel=kernel, C=10.0, helper=True, info=info)
        assert time.perf_counter() - start < 120
    finally:
        for proc in busy:
            proc.kill()
            proc.wait(timeout=10)
    np.testing.assert_array_equal(shared[0], alone[0])
    assert shared[1] == alone[1]
    assert info["helper"] == 1 and info["helper_jobs"] > 0
    assert info["helper_taken_back"] + info["helper_late"] + info["helper_solo_passes"] > 0
    assert info["helper_taken_back"] <= info["helper_jobs"]


@pytest.mark.timeout(120)
def test_a_phase_that_ends_before_the_helper_starts_still_stops_it():
    """A phase may post its stop job before the helper thread has read anything (here:
    ``max_iter=0``, no step taken): the helper must still see it, or the solve never
    returns (a hang found while building the spin-then-sleep helper)."""
    X, y = nonlinear_problem(HELPER_MIN_ROWS, d=3, seed=5)
    t = np.where(y == 1, 1.0, -1.0)
    kernel = Kernel("gaussian", sigma=0.5)
    for _ in range(200):
        alpha, steps, converged, _ = solve_kernel_dual(
            X, t, kernel=kernel, C=1.0, helper=True, max_iter=0
        )
        assert steps == 0 and not converged
