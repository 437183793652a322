"""The kernel sparse ELM's dual in one process by a working set in the Thunder style
(issue 52 item 3): ``q`` Q-columns as one block (``block_columns``: a GEMM), local steps on
the q x q block (``working_set.solve_subproblem``), one batched update of every active
row's gradient, repeated until the KKT violation is within ``tol``; then the dual
solver's exact float64 check (``working_set.solve_working_set``'s loop, one block of rows
here, in this process).

What oneDAL's Thunder SVM does (``cpp/daal/src/algorithms/svm/svm_train_thunder_impl.i``,
``svm_train_thunder_workset.h``, ``svm_train_thunder_cache.h``; read for this design):

- q = min(the largest power of two <= the rows of non-zero weight, 2048)
  (``maxBlockSize``); each iteration keeps the last q/2 of the previous working set
  (``copyLastToFirst``) and picks q/2 new ones from the rows sorted by ``-y grad``,
  alternately from the top of I_up and the bottom of I_low;
- the working set's kernel rows come from an LRU cache of ``cacheSize / (n * 8)``
  lines (at least q); the missing ones are computed together in one ``matrixMatrix``
  kernel call (a GEMM of X against the block's rows, then the exp);
- local SMO on the q x q block (LIBSVM's second-order pair choice), at most ``100 q``
  steps (``cInnerIterations``), stopped once the local gap is below ``max(tol, 0.1 x the
  first local gap)``;
- the gradient update: every row, ``grad += K[:, ws] dalpha`` (axpy per column over
  64-row blocks, threaded: one batched update per iteration);
- the outer loop stops when the working set's first local gap is below ``tol`` or has
  changed by less than ``tol x 1e-2`` five iterations running (``nNoChanges``); no
  shrinking, no final exact check.

Here: the same choice of q (``DEFAULT_Q``: measured, ``working_set_size``), half the set
kept (its free variables), local steps to 0.1 x the set's largest violation
(``SUBPROBLEM_SHARE``, with ``tol / 10`` floor and ``box_qp`` past 100 steps per variable),
the same LRU-cached columns computed in blocks (a gaussian kernel's by float32 GEMMs where
their error bound allows: ``block_columns``), no shrinking, and the dual solver's stopping
rule: every row's violation within ``tol`` at an exact float64 check.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from elmscale.core.threads import resolve_n_threads, thread_budget
from elmscale.features.kernels import Kernel
from elmscale.solvers.block_columns import BLOCK_KINDS, blocks_pay
from elmscale.solvers.working_set import (
    DEFAULT_Q,
    RowBlock,
    WorkingSetResult,
    check_q,
    column_error_bound,
    solve_working_set,
)

__all__ = ["THUNDER_MIN_C", "THUNDER_MIN_FEATURES", "solve_thunder", "thunder_wins"]

#: Features from which the one-process working set beats the dual solver on dense rows that
#: are not 0/1 (``benchmarks/results/working_set_thunder_wide.txt``, alone, 20,000
#: generated rows, gaussian, C = 1, q = 512: 0.90x the dual's speed at 32 features, 1.17x
#: at 64, 1.72x at 128, 3.6x at 200 and 300).  Its columns come by GEMMs (float32 ones for
#: a gaussian kernel: ``block_columns``) with no shrinking, so one exact product ends it;
#: the dual's come one fused pass over the features each.  0/1 rows go to the dual, whose
#: packed columns (``bit_kernels``) are cheaper still (all of a9a, 123 features: the dual
#: 5.5 s, the working set 7.8 s).
THUNDER_MIN_FEATURES: int | None = 64
#: C from which it beats the dual solver on narrow rows; None: it did not (the same file:
#: COD-RNA's first 8,000 rows, 8 features, C = 100, 0.20-0.33x).
THUNDER_MIN_C: float | None = None
#: The kernels "auto" gives it, whose crossovers were measured: the gaussian (its columns by
#: float32 GEMMs) and the laplacian (float64 products: still 1.16x the dual at 32 features,
#: 1.30x at 64, 3.41x at 300, ``benchmarks/results/working_set_thunder_wide_laplacian.txt``);
#: mg not measured.
THUNDER_KINDS = ("gaussian", "laplacian")
#: Rows below which the dual solver's per-fit overheads are smaller (the working set's
#: exchanges and q x q subproblems cost more than a small problem's steps).
THUNDER_MIN_ROWS = 4096


def thunder_wins(
    kernel: Kernel,
    n_features: int,
    C: float,
    n_rows: int,
    *,
    min_features=THUNDER_MIN_FEATURES,
    min_C=THUNDER_MIN_C,
) -> bool:
    """Whether "auto" takes the one-process working set over the dual solver: a kernel of
    ``THUNDER_KINDS``, at least ``THUNDER_MIN_ROWS`` rows, and either ``min_features`` features
    (where columns in blocks pay too: ``blocks_pay``) or C of at least ``min_C``; a None
    threshold is never reached (the measured crossovers: the constants above)."""
    if kernel.kind not in THUNDER_KINDS or int(n_rows) < THUNDER_MIN_ROWS:
        return False
    if min_features is not None and int(n_features) >= min_features:
        return blocks_pay(kernel, n_features)
    return min_C is not None and float(C) >= min_C


class _OneBlock:
    """The blocks ``solve_working_set`` drives: one ``RowBlock`` of every row, here."""

    def __init__(self, block: RowBlock, n_threads: int):
        self.block = block
        self.n_threads = n_threads
        self.rebuilt = 0

    def attach(self, seen, pairs):
        """(Nothing is lost in one process: no rebuilds.)"""

    def step(self, updates, shrink, q):
        with thread_budget(self.n_threads):
            return [self.block.step(updates, shrink, q)]

    def exact(self, support, which, q, precise=True):
        with thread_budget(self.n_threads):
            return [self.block.exact(support, which, q, precise)]


def solve_thunder(
    X,
    y_idx,
    n_classes: int,
    kernel: Kernel,
    *,
    C,
    tol,
    q=DEFAULT_Q,
    cache_mb=200.0,
    max_iter=-1,
    n_threads=None,
    block_columns=None,
) -> WorkingSetResult:
    """Every one-vs-one pair of ``n_classes`` on the rows ``X`` (n, d), classes ``y_idx``
    (0 .. n_classes - 1), by the working set in one process (see the module's docstring);
    ``block_columns`` None: columns in blocks where they pay (``blocks_pay``), else one by
    one (and always one by one for the polynomial kernel)."""
    q = check_q(q)
    X32 = np.ascontiguousarray(X, dtype=np.float32)
    y_idx = np.asarray(y_idx, dtype=np.int64)
    if X32.ndim != 2 or y_idx.shape != (X32.shape[0],):
        raise ValueError(
            f"X must be 2-D with one class index per row; got X {X32.shape}, y {y_idx.shape}"
        )
    if block_columns is None:
        block_columns = blocks_pay(kernel, X32.shape[1])
    block_columns = bool(block_columns) and kernel.kind in BLOCK_KINDS
    threads = resolve_n_threads(n_threads)
    # (linalg.targets.one_vs_one_pairs's order, which the estimator reads the pairs in)
    pairs = list(combinations(range(int(n_classes)), 2))
    ids = np.arange(X32.shape[0], dtype=np.int64)
    block = RowBlock(
        X32,
        ids,
        y_idx,
        pairs,
        kernel.to_dict(),
        float(C),
        float(cache_mb),
        threads,
        block_columns=block_columns,
    )
    return solve_working_set(
        _OneBlock(block, threads),
        pairs,
        X32.shape[1],
        kernel=kernel,
        C=C,
        tol=tol,
        q=q,
        max_iter=max_iter,
        # no shrinking, as oneDAL's: the unshrinking's product of every row against the
        # support rows cost more than the shorter columns saved (the wide set of
        # sparse_elm_field.py, q = 1,024: 9.99 s shrinking every 5 iterations, 7.98 s not)
        shrink_every=None,
        block_columns=block_columns,
        # (column_error_bound is 0 for the polynomial kernel, which takes no blocks)
        column_error=column_error_bound(kernel) + block.products_error,
    )
