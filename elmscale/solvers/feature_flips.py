"""FELM / FKELM feature selection (Axioms 2022, Algorithms 1-2) as pure numerics.

A 0/1 mask ``E`` on the input columns sits inside the sparse ELM: for a fixed mask the
output weights solve the sparse ELM's dual (no bias, ``0 <= a_i <= C``) on the masked
inputs, and the mask's objective is that problem's primal value plus ``psi`` per kept
feature,

    f(E) = 1/2 |beta|^2 + C sum_i max(0, 1 - t_i g_E(x_i)) + psi |E|,

with ``g_E(x) = h(x E) beta`` for random nodes (FELM; ``|beta|^2`` the plain norm) and
``g_E(x) = sum_i a_i t_i K(x E, x_i E)`` for a kernel (FKELM, the memorization-generalization
kernel; ``|beta|^2 = u'Ku``, ``u = a t``, the norm the sparse ELM's kernel dual minimises;
the paper's ``|K beta|^2`` and its ``(K'K)^-1 K a`` output weights are read as this, the
problem its Lagrangian, eq. 14, comes from).

:func:`select_features` runs the paper's scheme: solve at ``E = I``; score each feature
(eq. 25-28, read as the objective with that feature suppressed and the output weights
fixed: the eq. 26 literal, the kernel on the feature alone, would drop the features
that classify best); drop those scoring under 1/n; then flip single entries of ``E`` in
cyclic order, each candidate's output weights re-solved by the sparse ELM solver
warm-started from the current dual (most dual variables stay when one feature moves),
keeping a flip only when ``f`` drops by more than ``tol``, until a whole cycle keeps
none.  The masked pre-activations move by a rank-1 term per flip (``X E W = X W -
x_j w_j'``; squared distances by ``(x_ij - x_kj)^2``), never recomputed.

Two things make the flips cheap without changing what they return:

* **A dual screen.**  The current dual ``a`` is feasible for every candidate (the box
  does not depend on E), so by weak duality the candidate's optimum is at least
  ``1'a - 1/2 |beta_E'(a)|^2 + psi |E'|``.  When that bound is already above
  ``f(E) - tol`` the flip cannot be kept and is rejected without a solve.
* **Speculative blocks.**  Candidates are evaluated in blocks against the current mask,
  side by side (threads, or Ray pieces: ``map_blocks``); the first kept one in cyclic
  order wins and the rest of its block is dropped, so the result is the sequential
  algorithm's whatever the block size.

A flip that would suppress the last kept feature is never taken.

**psi's scale.**  ``psi_scale="absolute"`` takes the problem's ``psi`` as the weight per
kept feature (the paper's).  ``"relative"`` reads it in units of :func:`relative_psi_unit`,
``f0 / sqrt(d)`` with ``f0`` the objective at ``E = I`` without the psi term and ``d`` the
number of features: psi = 1 prices ``sqrt(d)`` kept features (the geometric middle of
the walk from ``d`` features to 1) at ``f0``.  An absolute psi acts in the objective's
own units, which differ by orders of magnitude between problems (``f0`` is 0.4 on colon
and about 1,000 on 2,100 rows x 57 features), so that no fixed grid of absolute values
finds the trade-off (docs/guide/felm.md, for the measurements).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np

from elmscale.core import jit as _jit
from elmscale.features.kernels import Kernel
from elmscale.features.layers import HiddenLayer
from elmscale.solvers.sparse_dual import box_qp, solve_explicit_dual, solve_kernel_dual

#: up to this many rows a mask's dual is solved exactly as one dense box QP on the rows'
#: Gram matrix (``box_qp``): on sizes like the paper's (colon, 62 rows x 300 nodes)
#: 0.12-0.22 ms a solve against 1.0-1.7 ms for dual coordinate descent, and exact, which
#: the objective's 1e-6 tolerance wants; larger masks go to the iterative solvers,
#: warm-started from the current dual
DENSE_MAX_ROWS = 600
#: the dense solve's KKT tolerance (its steps are exact; this only decides when to stop)
DENSE_TOL = 1e-9


#: coordinate-ascent passes of the second screen (``_dense_dual``'s ``screen``): on
#: leukaemia's split 0 (FELM, paper's parameters) 0 / 4 / 32 / 128 passes left 9,880 /
#: 8,193 / 4,585 / 3,024 solves (2,961 kept) and the fit took 2.80 / 2.66 / 2.49 / 2.78 s,
#: measured while another job shared the cores
ASCENT_PASSES = 32
#: the second screen's margin, relative to the sizes of the dual's terms and the
#: threshold: far above the rounding of its sums and of the objective the exact solve
#: would compare (of order (rows + nodes) 2^-52 relative: about 1e-12 at 5,000)
ASCENT_MARGIN = 1e-9


def _dense_dual(K, t, C, screen=None):
    """The sparse ELM's dual on the Gram ``K`` exactly (``box_qp``), or None if it does not
    finish (the caller falls back to the iterative solver).  It starts from zero, never
    from the current dual: started there, ``box_qp`` took 1.3-1.5x longer (colon and
    leukaemia, 5 splits each, ``benchmarks/felm.py``), its active set rebuilt either way.

    ``screen = (alpha, psi_term, threshold)``: first ``ASCENT_PASSES`` passes of coordinate
    ascent on the dual from ``alpha`` (a feasible point: the current mask's dual); when
    that dual's value plus ``psi_term`` is above ``threshold`` by more than the rounding
    margin, the mask's optimum is too (weak duality), so no solve could keep it: returns
    ``False`` without solving."""
    Q = K * np.multiply.outer(t, t)
    if screen is not None:
        alpha, psi_term, threshold = screen
        value, scale = _jit.box_dual_ascent(Q, alpha, float(C), ASCENT_PASSES)
        margin = ASCENT_MARGIN * (abs(value) + scale + abs(psi_term) + abs(threshold))
        if value + psi_term >= threshold + margin:
            return False
    return box_qp(Q, -np.ones(t.size), C, np.zeros(t.size), DENSE_TOL)


__all__ = [
    "PSI_SCALES",
    "ExplicitMaskProblem",
    "FlipResult",
    "KernelMaskProblem",
    "MaskPoint",
    "MaskProblem",
    "evaluate_block",
    "relative_psi_unit",
    "select_features",
]

#: how :func:`select_features` reads a problem's ``psi``
PSI_SCALES = ("relative", "absolute")


def relative_psi_unit(f0: float, n_features: int) -> float:
    """The weight per kept feature of psi = 1 on the relative scale: ``f0 / sqrt(d)``,
    ``f0`` the objective at ``E = I`` without the psi term (> 0: at zero weights the hinge
    is 1 on every row), ``d`` the number of features."""
    return float(f0) / float(np.sqrt(n_features))


class MaskPoint(NamedTuple):
    """A mask with its solved output weights: ``pre`` the masked pre-activations
    (random nodes) or squared distances (kernel), ``alpha`` the dual, ``objective``
    ``f(E)`` (psi term included)."""

    mask: np.ndarray
    pre: np.ndarray
    alpha: np.ndarray
    objective: float


class MaskProblem(Protocol):
    """What :func:`select_features` asks of a problem (:class:`ExplicitMaskProblem`,
    :class:`KernelMaskProblem`): ``X`` the training rows; the kept quantity of a mask
    (``pre``) and its rank-1 move when feature ``j`` goes on or off (``moved``); the node
    or kernel values of a kept quantity (``values``: H, or K), which a candidate's
    screen computes and its solve reuses (``values=``; computed when None); a mask's
    solve, warm-started from a dual (``solve``), or None where a few passes of dual ascent
    from ``screen = (alpha, threshold)`` show its optimum is at least ``threshold``
    (``solve_below``, exact masks only); the weak-duality bound of a mask at a
    dual (``dual_bound``), and that of a flip of ``current`` at its dual computed in one
    pass without storing the moved quantity or its values, with a bound on how far
    rounding can put it from ``dual_bound``'s (``screen_bound``: ``(bound, margin)``,
    ``n_kept`` the flipped mask's size); a mask's output weights (``weights_of``) and the objective
    with them fixed (``fixed_weights_value``, eq. 25-26)."""

    X: np.ndarray
    psi: float

    def pre(self, mask: np.ndarray) -> np.ndarray: ...

    def moved(self, pre: np.ndarray, j: int, on: bool) -> np.ndarray: ...

    def values(self, pre: np.ndarray) -> np.ndarray: ...

    def solve(
        self,
        mask: np.ndarray,
        pre: np.ndarray,
        alpha0: np.ndarray | None,
        values: np.ndarray | None = None,
    ) -> MaskPoint: ...

    def solve_below(
        self,
        mask: np.ndarray,
        pre: np.ndarray,
        alpha0: np.ndarray | None,
        values: np.ndarray | None,
        screen: tuple[np.ndarray, float] | None,
    ) -> MaskPoint | None: ...

    def dual_bound(
        self,
        mask: np.ndarray,
        pre: np.ndarray,
        alpha: np.ndarray,
        values: np.ndarray | None = None,
    ) -> float: ...

    def screen_bound(
        self, current: MaskPoint, j: int, on: bool, n_kept: int
    ) -> tuple[float, float]: ...

    def weights_of(self, point: MaskPoint) -> np.ndarray: ...

    def fixed_weights_value(self, pre: np.ndarray, weights: np.ndarray) -> float: ...


class Candidate(NamedTuple):
    """One evaluated flip: ``kept`` whether it lowers f by more than tol; ``point`` its
    solved mask (None when screened out); ``screened`` rejected by the dual bound."""

    feature: int
    kept: bool
    screened: bool
    point: MaskPoint | None
    solve_seconds: float


#: the screen's margin, relative to the bound's terms, beside the rounding bound the fused
#: kernels return: it covers the bound's last additions and any last-bit difference
#: between the fused node / kernel values and the stored ones
SCREEN_MARGIN = 1e-12


def _bound_and_margin(alpha_sum, quad, err, psi_term) -> tuple[float, float]:
    """A weak-duality bound ``sum(a) - quad / 2 + psi |E|`` with its margin: four times
    the rounding bound of ``quad`` halved, plus ``SCREEN_MARGIN`` of the terms' sizes."""
    bound = alpha_sum - 0.5 * quad + psi_term
    margin = 2.0 * err + SCREEN_MARGIN * (abs(alpha_sum) + 0.5 * abs(quad) + abs(psi_term))
    return bound, margin


class _Dual(NamedTuple):
    """What every screen of one current point reads: its dual ``alpha`` (the key: the
    same object), ``u = alpha t``, the rows where ``alpha != 0`` and ``sum(alpha)``."""

    alpha: np.ndarray
    u: np.ndarray
    rows: np.ndarray
    alpha_sum: float


def _dual_of(problem, alpha: np.ndarray) -> _Dual:
    """``problem``'s last ``_Dual``, or a new one when ``alpha`` is another array (a tuple
    read and written whole: threads screening blocks side by side may replace it, never
    see half of it)."""
    last = problem._last_dual
    if last is not None and last.alpha is alpha:
        return last
    last = _Dual(alpha, alpha * problem.t, np.flatnonzero(alpha), float(alpha.sum()))
    problem._last_dual = last
    return last


def _screen_of(screen, psi, mask):
    """``_dense_dual``'s ``screen`` from ``solve_below``'s ``(alpha, threshold)``."""
    if screen is None:
        return None
    alpha, threshold = screen
    return alpha, psi * int(mask.sum()), threshold


def _hinge_sum(t: np.ndarray, decision: np.ndarray) -> float:
    return float(np.maximum(0.0, 1.0 - t * decision).sum())


class _SolvedBelow:
    """``solve`` as ``solve_below`` without a threshold (which then always solves), shared
    by the mask problems."""

    def solve_below(self, mask, pre, alpha0, values, screen) -> MaskPoint | None:
        raise NotImplementedError

    def solve(self, mask, pre, alpha0, values=None) -> MaskPoint:
        point = self.solve_below(mask, pre, alpha0, values, None)
        assert point is not None  # (no threshold: always solved)
        return point


@dataclass(eq=False)
class ExplicitMaskProblem(_SolvedBelow):
    """FELM: random hidden nodes on the masked inputs.

    ``X`` (n, d) and ``t`` (+-1) the training rows; ``layer`` the hidden layer.  Additive
    nodes keep ``X E W + b``; RBF nodes keep ``|x E - a|^2`` (a suppressed input is 0,
    as ``h(x E)`` reads it); the node values are the layer's (``HiddenLayer.activate``),
    the ones its scoring computes.
    """

    X: np.ndarray
    t: np.ndarray
    layer: HiddenLayer
    C: float
    psi: float
    kkt_tol: float = 1e-3
    seed: int = 0
    max_iter: int = -1
    weights: np.ndarray = field(init=False)
    biases: np.ndarray = field(init=False)
    additive: bool = field(init=False)
    code: int = field(init=False)
    _last_dual: _Dual | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        self.t = np.ascontiguousarray(self.t, dtype=np.float64)
        self.weights = np.ascontiguousarray(self.layer.weights, dtype=np.float64)
        self.biases = np.asarray(self.layer.biases, dtype=np.float64)
        self.additive = self.layer.kind in ("sigmoid", "sinusoid")
        self.code = _jit.NODE_CODES[self.layer.kind]

    def pre(self, mask: np.ndarray) -> np.ndarray:
        Xm, Wm = self.X[:, mask], self.weights[mask]
        if self.additive:
            return Xm @ Wm + self.biases
        # |x E - a|^2: kept inputs against their centres, suppressed ones (0) against a
        off = ~mask
        d2 = (Xm**2).sum(1)[:, None] - 2.0 * Xm @ Wm + (Wm**2).sum(0)[None, :]
        return d2 + (self.weights[off] ** 2).sum(0)[None, :]

    def moved(self, pre: np.ndarray, j: int, on: bool) -> np.ndarray:
        x, w = self.X[:, j], self.weights[j]
        if self.additive:
            delta = np.multiply.outer(x, w)
        else:  # (x - a)^2 - a^2 = x^2 - 2 x a
            delta = (x * x)[:, None] - 2.0 * np.multiply.outer(x, w)
        # into delta's memory: pre + delta (pre - delta) to the bit, one array fewer
        return np.add(pre, delta, out=delta) if on else np.subtract(pre, delta, out=delta)

    def features(self, pre: np.ndarray) -> np.ndarray:
        if not self.additive:  # rank-1 moves can leave rounding below 0
            pre = np.maximum(pre, 0.0)
        return self.layer.activate(pre)

    def values(self, pre: np.ndarray) -> np.ndarray:
        return self.features(pre)

    def solve_below(self, mask, pre, alpha0, values, screen) -> MaskPoint | None:
        H = self.features(pre) if values is None else values
        if H.shape[0] > DENSE_MAX_ROWS:
            alpha = None
        else:
            alpha = _dense_dual(H @ H.T, self.t, self.C, _screen_of(screen, self.psi, mask))
            if alpha is False:
                return None
        if alpha is not None:
            return MaskPoint(mask, pre, alpha, self._objective(H, alpha, mask))
        alpha, _, _, _ = solve_explicit_dual(
            H,
            self.t,
            C=self.C,
            tol=self.kkt_tol,
            max_iter=self.max_iter,
            alpha0=alpha0,
            random_state=self.seed,
        )
        return MaskPoint(mask, pre, alpha, self._objective(H, alpha, mask))

    def beta(self, H: np.ndarray, alpha: np.ndarray) -> np.ndarray:
        return H.T @ (alpha * self.t)

    def _objective(self, H, alpha, mask) -> float:
        beta = self.beta(H, alpha)
        primal = 0.5 * float(beta @ beta) + self.C * _hinge_sum(self.t, H @ beta)
        return primal + self.psi * int(mask.sum())

    def dual_bound(self, mask, pre, alpha, values=None) -> float:
        beta = self.beta(self.features(pre) if values is None else values, alpha)
        return float(alpha.sum()) - 0.5 * float(beta @ beta) + self.psi * int(mask.sum())

    def screen_bound(self, current, j, on, n_kept) -> tuple[float, float]:
        dual = _dual_of(self, current.alpha)
        bb, err = _jit.moved_nodes_beta_sq(
            current.pre,
            self.X[:, j],
            self.weights[j],
            on,
            self.biases,
            self.code,
            dual.u,
            dual.rows,
        )
        return _bound_and_margin(dual.alpha_sum, bb, err, self.psi * n_kept)

    def fixed_weights_value(self, pre, weights) -> float:
        """Eq. 25: ``1/2 |beta|^2 + C e'(e - t h beta)_+`` with the output weights ``beta``
        fixed."""
        beta = weights
        H = self.features(pre)
        return 0.5 * float(beta @ beta) + self.C * _hinge_sum(self.t, H @ beta)

    def weights_of(self, point: MaskPoint) -> np.ndarray:
        return self.beta(self.features(point.pre), point.alpha)


@dataclass(eq=False)
class KernelMaskProblem(_SolvedBelow):
    """FKELM: a kernel (any :class:`Kernel` of squared distances: gaussian or ``"mg"``)
    on the masked inputs; the kept quantity is the squared-distance matrix of the rows."""

    X: np.ndarray
    t: np.ndarray
    kernel: Kernel
    C: float
    psi: float
    kkt_tol: float = 1e-3
    max_iter: int = -1
    _last_dual: _Dual | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        if self.kernel.kind not in ("gaussian", "mg"):
            raise ValueError(
                f"feature flips need a kernel of squared distances (gaussian or mg); "
                f"got {self.kernel.kind!r}"
            )
        self.X = np.ascontiguousarray(self.X, dtype=np.float64)
        self.t = np.ascontiguousarray(self.t, dtype=np.float64)

    def pre(self, mask: np.ndarray) -> np.ndarray:
        Xm = self.X[:, mask]
        sq = (Xm**2).sum(1)
        return np.maximum(sq[:, None] + sq[None, :] - 2.0 * Xm @ Xm.T, 0.0)

    def moved(self, pre: np.ndarray, j: int, on: bool) -> np.ndarray:
        x = self.X[:, j]
        # one (n, n) array, written in place: (x_i - x_k)^2, then pre + it (or max(pre -
        # it, 0)), the same values to the bit as the expressions with temporaries
        delta = np.subtract.outer(x, x)
        np.square(delta, out=delta)
        if on:
            return np.add(pre, delta, out=delta)
        np.subtract(pre, delta, out=delta)
        return np.maximum(delta, 0.0, out=delta)

    def gram(self, pre: np.ndarray) -> np.ndarray:
        return self.kernel.from_sq_distances(pre)

    def values(self, pre: np.ndarray) -> np.ndarray:
        return self.gram(pre)

    def solve_below(self, mask, pre, alpha0, values, screen) -> MaskPoint | None:
        K = self.gram(pre) if values is None else values
        if K.shape[0] > DENSE_MAX_ROWS:
            alpha = None
        else:
            alpha = _dense_dual(K, self.t, self.C, _screen_of(screen, self.psi, mask))
            if alpha is False:
                return None
        if alpha is not None:
            return MaskPoint(mask, pre, alpha, self._objective(K, alpha, mask))
        alpha, _, _, _ = solve_kernel_dual(
            self.X[:, mask],
            self.t,
            kernel=self.kernel,
            C=self.C,
            tol=self.kkt_tol,
            max_iter=self.max_iter,
            alpha0=alpha0,
            gram=K,
        )
        return MaskPoint(mask, pre, alpha, self._objective(K, alpha, mask))

    def _objective(self, K, alpha, mask) -> float:
        u = alpha * self.t
        decision = K @ u
        primal = 0.5 * float(u @ decision) + self.C * _hinge_sum(self.t, decision)
        return primal + self.psi * int(mask.sum())

    def dual_bound(self, mask, pre, alpha, values=None) -> float:
        u = alpha * self.t
        K = self.gram(pre) if values is None else values
        return float(alpha.sum()) - 0.5 * float(u @ (K @ u)) + self.psi * int(mask.sum())

    def screen_bound(self, current, j, on, n_kept) -> tuple[float, float]:
        dual = _dual_of(self, current.alpha)
        code, sigma, _, sigma_star, tau = self.kernel._params()
        quad, err = _jit.moved_kernel_quad(
            current.pre, self.X[:, j], on, code, sigma, sigma_star, tau, dual.u, dual.rows
        )
        return _bound_and_margin(dual.alpha_sum, quad, err, self.psi * n_kept)

    def fixed_weights_value(self, pre, weights) -> float:
        """Eq. 26 (read as for FELM): the objective with the dual coefficients ``u = a t``
        (``weights_of``) fixed."""
        u = weights
        K = self.gram(pre)
        decision = K @ u
        return 0.5 * float(u @ decision) + self.C * _hinge_sum(self.t, decision)

    def weights_of(self, point: MaskPoint) -> np.ndarray:
        return point.alpha * self.t


def evaluate_block(
    features, *, problem: MaskProblem, current: MaskPoint, tol: float, warm: bool = True
) -> list[Candidate]:
    """Evaluate the flips of ``features`` (in order) against ``current``; stops after the
    first kept one.  A pure function of its arguments: a thread or a Ray task runs it.

    Each flip's dual screen is first computed in one pass (``screen_bound``); only a
    flip it cannot reject has its moved quantity and values stored (then solved, or
    rejected by ``dual_bound`` when the fused bound lies within its rounding margin of
    the threshold: the decision is ``dual_bound``'s, to the bit).
    """
    out = []
    threshold = current.objective - tol
    n_kept = int(current.mask.sum())
    for j in features:
        j = int(j)
        on = not current.mask[j]
        if not on and n_kept == 1:
            out.append(Candidate(j, False, True, None, 0.0))
            continue
        bound, margin = problem.screen_bound(current, j, on, n_kept + (1 if on else -1))
        if bound >= threshold + margin:
            out.append(Candidate(j, False, True, None, 0.0))
            continue
        mask = current.mask.copy()
        mask[j] = on
        pre = problem.moved(current.pre, j, on)
        values = problem.values(pre)  # computed once: the tie's screen, then the solve's
        if bound > threshold - margin and (
            problem.dual_bound(mask, pre, current.alpha, values) >= threshold
        ):
            out.append(Candidate(j, False, True, None, 0.0))
            continue
        start = time.perf_counter()
        point = problem.solve_below(
            mask, pre, current.alpha if warm else None, values, (current.alpha, threshold)
        )
        seconds = time.perf_counter() - start
        if point is None:  # the second screen: dual ascent from the current dual
            out.append(Candidate(j, False, True, None, seconds))
            continue
        kept = point.objective < threshold
        out.append(Candidate(j, kept, False, point if kept else None, seconds))
        if kept:
            break
    return out


class FlipResult(NamedTuple):
    """What :func:`select_features` returns: the final ``point``; ``scores`` (eq. 27-28)
    at ``E = I`` (NaN without the initial selection, which alone uses them);
    ``objective_path`` f after the initial selection and after each kept flip;
    ``n_sweeps`` cycles started through the features; ``converged`` whether the
    last cycle kept no flip; ``stats`` counts and seconds (candidates, screened, solves,
    kept, solve_seconds, total_seconds); ``psi_effective`` the weight per kept feature
    that the objectives include (the problem's psi, or its relative value times
    :func:`relative_psi_unit`)."""

    point: MaskPoint
    scores: np.ndarray
    objective_path: np.ndarray
    n_sweeps: int
    converged: bool
    stats: dict
    psi_effective: float = float("nan")


def _serial_blocks(blocks, **kwargs):
    return [evaluate_block(block, **kwargs) for block in blocks]


class _Counts:
    """What a selection counts (``FlipResult.stats``)."""

    def __init__(self) -> None:
        self.stats: dict[str, float] = {"candidates": 0, "screened": 0, "solves": 0, "kept": 0}
        self.stats["solve_seconds"] = 0.0

    def solve(self, problem: MaskProblem, mask, alpha0) -> MaskPoint:
        """A solve of ``mask`` outside the flips, counted."""
        t0 = time.perf_counter()
        point = problem.solve(mask, problem.pre(mask), alpha0)
        self.stats["solve_seconds"] += time.perf_counter() - t0
        self.stats["solves"] += 1
        return point

    def first_kept(self, results: list[list[Candidate]]) -> tuple[Candidate | None, int]:
        """The first kept candidate of the blocks' results in order, counting every one
        evaluated up to it; ``(candidate or None, rejections before it)``."""
        rejected = 0
        for block in results:
            for candidate in block:
                self.stats["candidates"] += 1
                self.stats["screened"] += candidate.screened
                self.stats["solves"] += not candidate.screened
                self.stats["solve_seconds"] += candidate.solve_seconds
                if candidate.kept:
                    return candidate, rejected
                rejected += 1
        return None, rejected


def _initial_point(
    problem: MaskProblem, counts: _Counts, warm: bool, initial_selection: bool, relative: bool
):
    """The solve at ``E = I`` and, with ``initial_selection``, the drop of the features
    scoring under 1/n (eq. 25-28: each feature suppressed, the output weights fixed; n
    objective evaluations, only when the drop uses them).  ``relative``: the problem's
    psi is relative; it becomes ``psi * relative_psi_unit(f0, n)`` once the solve at
    ``E = I`` (its psi term left out) has measured ``f0`` (``problem`` is the caller's
    copy: its psi is set here).  ``(point, scores)``."""
    n = problem.X.shape[1]
    if relative:
        psi, problem.psi = float(problem.psi), 0.0
    current = counts.solve(problem, np.ones(n, dtype=bool), None)
    if relative:
        problem.psi = psi * relative_psi_unit(current.objective, n)
        current = current._replace(objective=current.objective + problem.psi * n)
    if not initial_selection:
        return current, np.full(n, np.nan)
    weights = problem.weights_of(current)
    values = np.array(
        [
            problem.fixed_weights_value(problem.moved(current.pre, j, False), weights)
            for j in range(n)
        ]
    )
    total = values.sum()
    scores = values / total if total > 0 else np.full(n, 1.0 / n)
    keep = scores >= 1.0 / n
    if not keep.all() and keep.any():
        current = counts.solve(problem, keep, current.alpha if warm else None)
    return current, scores


def _window(position: int, width: int, n: int, n_blocks: int) -> list[list[int]]:
    """The next ``width`` features in cyclic order from ``position``, cut into ``n_blocks``
    blocks evaluated side by side."""
    order = [(position + k) % n for k in range(width)]
    size = max(1, -(-width // n_blocks))
    return [order[k : k + size] for k in range(0, width, size)]


def select_features(
    problem: MaskProblem,
    *,
    tol: float = 1e-6,
    max_sweeps: int = 20,
    block_size: int = 8,
    n_blocks: int = 1,
    map_blocks: Callable | None = None,
    warm: bool = True,
    initial_selection: bool = True,
    psi_scale: str = "absolute",
) -> FlipResult:
    """The paper's Algorithms 1-2 on ``problem`` (see the module's docstring).

    ``map_blocks(blocks, problem=, current=, tol=, warm=)`` evaluates ``n_blocks`` blocks of
    ``block_size`` candidate features side by side and returns their
    :func:`evaluate_block` lists in order (default: one after another here).  ``warm``:
    start each re-solve from the current dual (False: from zero, to measure what the
    warm start saves).  ``initial_selection=False`` skips the score-based drop.
    ``psi_scale``: ``"absolute"`` (the problem's psi per kept feature) or ``"relative"``
    (psi in units of :func:`relative_psi_unit`; the flips run on a shallow copy of the
    problem that carries the effective weight, which the result's ``psi_effective``
    reports: ``problem`` itself is left as given, so a second call reads the same psi).
    """
    if psi_scale not in PSI_SCALES:
        raise ValueError(f"psi_scale must be one of {PSI_SCALES}; got {psi_scale!r}")
    if psi_scale == "relative":
        problem = copy.copy(problem)
    started = time.perf_counter()
    n = problem.X.shape[1]
    map_blocks = map_blocks or _serial_blocks
    counts = _Counts()
    current, scores = _initial_point(
        problem, counts, warm, initial_selection, psi_scale == "relative"
    )
    path = [current.objective]
    position, since_kept, processed = 0, 0, 0
    budget = max_sweeps * n
    converged = False
    while processed < budget:
        # speculate (blocks side by side) only once a run of rejections as long as the
        # blocks has been seen: right after a kept flip, the next is often near, and the
        # blocks evaluated past it would be thrown away
        side_by_side = n_blocks > 1 and since_kept >= block_size * n_blocks
        blocks_now = n_blocks if side_by_side else 1
        width = min(block_size * blocks_now, budget - processed, n - since_kept)
        blocks = _window(position, width, n, blocks_now)
        if side_by_side:
            results = map_blocks(blocks, problem=problem, current=current, tol=tol, warm=warm)
        else:
            results = [
                evaluate_block(blocks[0], problem=problem, current=current, tol=tol, warm=warm)
            ]
        accepted, rejected = counts.first_kept(results)
        since_kept += rejected
        if accepted is None or accepted.point is None:  # (a kept candidate has its point)
            processed += width
            position = (position + width) % n
        else:
            processed += (accepted.feature - position) % n + 1
            position = (accepted.feature + 1) % n
            since_kept = 0
            current = accepted.point
            path.append(current.objective)
            counts.stats["kept"] += 1
        if since_kept >= n:
            converged = True
            break
    counts.stats["total_seconds"] = time.perf_counter() - started
    n_sweeps = max(1, -(-processed // n))
    return FlipResult(
        current, scores, np.array(path), n_sweeps, converged, counts.stats, float(problem.psi)
    )
