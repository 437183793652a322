"""How much memory a piece needs, before it starts: a pure function of its method, the
method's parameters and the data's shape.

Each estimate is a sum of named terms, counted from what the method holds at once
(8 bytes a float64, 4 a float32):

* the unified kernel ELM (``ELMClassifier(kernel=...)``, KBRELM): the n x n kernel matrix
  K and what LAPACK works in beside it.  A C path (``fit_path``: one eigendecomposition,
  ``scipy.linalg.eigh(driver="evd")``) holds K, its copy in Fortran order that becomes the
  eigenvectors and dsyevd's workspace of 2 n^2: 4 n^2 x 8 bytes.  One C (a Cholesky)
  holds K, ``I/C + K`` and LAPACK's Fortran copy of it: 3 n^2 x 8.  Measured (peak RSS
  less the start, n = 4,000-6,000): 3.8-4.2 n^2 x 8 and 2.9-3.2 n^2 x 8;
* random hidden nodes (the ELM, the boosting ensembles' Gram form): ``H'H`` (L x L) and
  its eigendecomposition, 4 L^2 x 8, and a block of hidden outputs (up to 16,384 rows x
  L, float32 and float64); the ensembles' row-space form holds H (n x S D) and n x n
  solves instead;
* the sparse ELM: its kernel-column cache (``cache_size`` MB) and the whole K of a small
  problem (64 MB at most), or H (n x L) of random nodes; per-pair vectors;
* LIBSVM (SVC): its kernel cache (``cache_size`` MB, 200 by default) and its copies of
  the rows; liblinear (the l1 selector) its sparse copy of X (16 bytes a value);
* FLSA-SVM: the candidates' Gram (M x M, and its copy) when it fits ``cache_mb``, else
  the cached kernel columns (``cache_mb``);
* FELM / FKELM: the kept n x L (FELM) or n x n (FKELM) matrices of the current mask and
  of a block of candidate flips;

plus the piece's data (the set, its split, scaled and float32 copies, CV folds) and a
fixed 200 MB for the process that runs it.  The largest fit of the piece counts: the
cross-validation's (on a fold's training rows, along the C path where the method has
one) or the final fit on every training row.

Estimates are kept conservative: an underestimate lets two pieces that do not fit start
together; ``tests/test_reproduce_scheduling.py`` checks them against measured peaks.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field

from elmscale.experiments.protocol import Method, Piece

__all__ = [
    "DEFAULT_MEMORY_FRACTION",
    "MemoryEstimate",
    "PieceShape",
    "available_memory",
    "default_budget",
    "estimate_memory",
    "format_bytes",
    "piece_shape",
]

MB = 2**20
GB = 2**30
F64 = 8
F32 = 4

#: the share of the machine's available memory the pieces may take together by default
DEFAULT_MEMORY_FRACTION = 0.8
#: what the process running a piece takes beyond its arrays: its copy-on-write pages of
#: the loaded modules, numba's compiled kernels, the interpreter (measured: 60-150 MB)
PROCESS_BYTES = 200 * MB
#: rows of the hidden outputs held at once (``block_rows``'s default, 16,384)
BLOCK_ROWS = 16_384
#: kernel scoring's blocks stay near this (``elmscale.models.elm``)
KERNEL_BLOCK_BYTES = 32 * MB
#: the sparse ELM keeps a small problem's whole kernel matrix up to this
SPARSE_GRAM_BYTES = 64 * MB
#: FLSA-SVM's Gram is accumulated over row blocks of this many bytes
FLSA_BLOCK_BYTES = 64 * MB
#: FELM / FKELM evaluate this many candidate flips at once (one thread)
FLIP_BLOCK = 4


@dataclass(frozen=True)
class PieceShape:
    """The sizes a piece works on.

    ``n_rows``: every row of the data set (all its files); ``n_train`` / ``n_test``: the
    piece's split; ``n_cv``: the rows its cross-validation searches on (0: no search, a
    figure's point); ``n_fold``: the training rows of a CV fold's fit."""

    n_rows: int
    n_train: int
    n_test: int
    n_features: int
    n_classes: int
    n_cv: int
    n_fold: int


@dataclass(frozen=True)
class MemoryEstimate:
    """The bytes a piece needs at its peak, and the terms they add up from."""

    total: int
    terms: dict[str, int] = field(default_factory=dict)
    #: what the estimate assumed where the method is not known
    note: str = ""

    def describe(self) -> str:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in self.terms.items() if v)
        return f"{format_bytes(self.total)} ({parts})"


def format_bytes(n: float) -> str:
    """``1.2 GB``, ``340 MB``."""
    if n >= GB:
        return f"{n / GB:.1f} GB"
    return f"{n / MB:.0f} MB"


# -- the machine ----------------------------------------------------------------------


def available_memory() -> int | None:
    """The memory the machine can give without swapping, in bytes: ``MemAvailable`` of
    /proc/meminfo (Linux), else psutil's ``available``; None where neither says."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        import psutil
    except ImportError:  # pragma: no cover - not Linux and no psutil
        return None
    return int(psutil.virtual_memory().available)  # pragma: no cover - not Linux


def default_budget(fraction: float = DEFAULT_MEMORY_FRACTION) -> int | None:
    """``fraction`` of :func:`available_memory` (None where it is unknown)."""
    available = available_memory()
    return None if available is None else int(available * fraction)


# -- shapes ---------------------------------------------------------------------------


def split_sizes(piece: Piece, part_rows: tuple[int, ...], n_classes: int, spec) -> tuple:
    """``(n_train, n_test)`` of ``piece`` on a set whose files hold ``part_rows`` rows,
    as :func:`elmscale.experiments.datasets.piece_split` splits it (a stratified k-fold
    part may differ from n / k by a row per class: counted up)."""
    evaluation = piece.evaluation
    if piece.kind == "trial" and evaluation.split == "kfold":
        n, k = sum(part_rows), int(evaluation.outer_folds)
        spread = max(n_classes, 1)
        return min(n, n - n // k + spread), min(n, -(-n // k) + spread)
    if len(part_rows) == 2:
        n_train = part_rows[0] if spec.n_train is None else min(spec.n_train, part_rows[0])
        n_test = part_rows[1] if spec.n_test is None else min(spec.n_test, part_rows[1])
        return n_train, n_test
    n = part_rows[0]
    n_train = spec.n_train if spec.n_train is not None else n // 2
    n_test = spec.n_test if spec.n_test is not None else n - n_train
    return n_train, n_test


def piece_shape(piece: Piece, data) -> PieceShape:
    """The :class:`PieceShape` of ``piece`` on the loaded set ``data`` (a
    :class:`~elmscale.experiments.datasets.LoadedSet`): sizes only, no split made."""
    part_rows = tuple(int(len(y)) for _, y in data.parts)
    n_classes = int(data.n_classes)
    n_train, n_test = split_sizes(piece, part_rows, n_classes, data.spec)
    n_cv = n_fold = 0
    if piece.kind == "trial":
        rows = piece.evaluation.cv_rows
        n_cv = n_train if rows is None else min(n_train, int(rows))
        folds = max(2, int(piece.folds))
        n_fold = min(n_cv, n_cv - n_cv // folds + max(n_classes, 1))
    return PieceShape(
        n_rows=sum(part_rows),
        n_train=n_train,
        n_test=n_test,
        n_features=int(data.n_features),
        n_classes=n_classes,
        n_cv=n_cv,
        n_fold=n_fold,
    )


# -- the methods ------------------------------------------------------------------------


def _class_defaults(estimator: str) -> tuple[str, dict]:
    """The class name of ``"module:Class"`` and its default parameters (empty where the
    class cannot be imported or made without arguments)."""
    module, _, name = estimator.partition(":")
    try:
        return name, dict(getattr(importlib.import_module(module), name)().get_params())
    except Exception:  # a user's estimator we cannot look into: its name only
        return name, {}


def method_params(method: Method, shape: PieceShape, piece: Piece | None = None) -> dict:
    """The parameters the piece's estimator runs with: the class's defaults, the method's,
    its multiclass ones on a multiclass set, a figure's point (``n_hidden``, a kernel
    parameter), and for each grid parameter its largest value (memory grows with
    ``n_support``, ``n_hidden``, never falls)."""
    _, params = _class_defaults(method.estimator)
    params.update(dict(method.params))
    if shape.n_classes > 2:
        params.update(dict(method.multiclass_params))
    for name, values in (*method.grid, *method.first_stage):
        numeric = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if numeric and name in ("n_hidden", "n_support", "n_estimators", "cache_size"):
            params[name] = max(numeric)
    if piece is not None and piece.kind == "curve" and piece.point:
        params["n_hidden"] = int(piece.point[0])
    return params


def _kernel_fit(n: int, path: bool) -> int:
    """Dual ridge on n rows: K with a C path's eigendecomposition (4 n^2) or one
    Cholesky (3 n^2), float64, and half an n^2 more for what scores beside them."""
    return int((4.5 if path else 3.5) * n * n * F64)


def _fits(piece: Piece, shape: PieceShape, method: Method):
    """``[(rows, along_a_path)]`` of the piece's fits: the CV's fold fits, the final fit;
    a figure's point fits the C path on the training rows."""
    path = bool(method.c_path)
    if piece.kind != "trial":
        return [(shape.n_train, path)]
    return [(shape.n_fold, path), (shape.n_train, False)]


def _unified_kernel(fits, params, shape) -> dict:
    n_out = max(1, shape.n_classes)
    worst = max(_kernel_fit(n, path) + 4 * n * n_out * F64 for n, path in fits)
    return {"kernel matrices": worst, "scoring blocks": KERNEL_BLOCK_BYTES}


def _random_nodes(fits, params, shape) -> dict:
    L = int(params.get("n_hidden") or 500)
    n = max(n for n, _ in fits)
    block = min(n, int(params.get("block_rows") or BLOCK_ROWS), BLOCK_ROWS)
    return {
        "H'H and its eigenvectors": 4 * L * L * F64,
        "hidden-output blocks": 2 * block * L * (F32 + F64),
    }


def _boosting_nodes(fits, params, shape, ensemble: str) -> dict:
    """GBRELM (sequential) and GGBRELM (global): S layers of D nodes, solved on their
    (S D)^2 Gram, or on the n x n row space where that pays
    (``_RandomEnsemble._row_space_pays``)."""
    S, D = int(params.get("n_estimators") or 10), int(params.get("n_hidden") or 500)
    worst: dict = {}
    for n, _ in fits:
        if ensemble == "global":
            row_space = n < S * D
        else:
            row_space = S * (n * n * D + 5 * n**3 / 3) < n * (S * D) ** 2
        if row_space:
            terms = {"hidden outputs (n x S D)": n * S * D * F64, "n x n solves": 5 * n * n * F64}
        else:
            W = S * D
            block = min(n, BLOCK_ROWS)
            terms = {
                "(S D)^2 Gram and its solves": 4 * W * W * F64,
                "hidden-output blocks": 2 * block * W * (F32 + F64),
            }
        if sum(terms.values()) > sum(worst.values()):
            worst = terms
    return worst


def _sparse_elm(fits, params, shape) -> dict:
    n = max(n for n, _ in fits)
    if params.get("hidden"):
        L = int(params.get("n_hidden") or 200)
        block = min(n, BLOCK_ROWS)
        return {
            "hidden outputs (n x L)": n * L * (F32 + F64),
            "scoring blocks": block * L * (F32 + F64),
            "solver vectors": 24 * n * F64,
        }
    cache = float(params.get("cache_size") or 200) * MB
    return {
        # filled as columns are computed: n columns of n at most (float64 at most)
        "kernel-column cache": int(min(cache, n * n * F64)),
        "small problems' K": min(n * n * F64, SPARSE_GRAM_BYTES),
        "solver vectors": 24 * n * F64,
    }


def _libsvm(fits, params, shape) -> dict:
    n = max(n for n, _ in fits)
    cache = float(params.get("cache_size") or 200) * MB
    return {
        # filled as columns are computed: n float32 columns of n at most, and their heads
        "LIBSVM cache": int(min(cache, n * n * 1.5 * F32)),
        "LIBSVM's rows": 3 * n * (shape.n_features + 2) * F64,
        "solver vectors": 16 * n * F64,
    }


def _l1_select_svc(fits, params, shape) -> dict:
    n = max(n for n, _ in fits)
    return {
        **_libsvm(fits, params, shape),
        "liblinear's copy": 2 * n * (shape.n_features + 1) * 16,
    }


def _flsa(fits, params, shape) -> dict:
    n = max(n for n, _ in fits)
    m = int(params.get("n_support") or 100)
    cache = float(params.get("cache_mb") or 1024) * MB
    pool = params.get("candidates", "all")
    if isinstance(pool, bool) or not isinstance(pool, (int, float)):
        M = n  # "all": every training row is a candidate
    elif isinstance(pool, int):
        M = min(n, pool)
    else:
        M = max(1, math.ceil(n * float(pool)))
    gram = F64 * M * (M + m + 1)
    if gram <= cache:
        return {"candidates' Gram": 2 * gram, "kernel blocks": 2 * FLSA_BLOCK_BYTES}
    return {
        "cached kernel columns": int(min(cache, F32 * M * n)) + n * F64,
        "candidate blocks": 2 * 1024 * n * F64,
        "basis": n * m * F64,
    }


def _felm(fits, params, shape, kernel: bool) -> dict:
    n = max(n for n, _ in fits)
    if kernel:
        # the current mask's squared distances and K, a block of candidates' (each
        # its own pair), and the temporaries of a fresh n x n distance matrix
        return {"n x n matrices": (2 + 2 * FLIP_BLOCK + 3) * n * n * F64}
    L = int(params.get("n_hidden") or 300)
    dense = n * n * F64 * 2 if n <= 600 else 0  # H H' and its dense dual below 600 rows
    return {"n x L matrices": (2 + 2 * FLIP_BLOCK + 2) * n * L * F64, "n x n dual": dense}


def _model_terms(method: Method, piece: Piece, shape: PieceShape) -> tuple[dict, str]:
    name, _ = _class_defaults(method.estimator)
    params = method_params(method, shape, piece)
    fits = _fits(piece, shape, method)
    if name in ("ELMClassifier", "ELMRegressor"):
        if params.get("kernel"):
            return _unified_kernel(fits, params, shape), ""
        return _random_nodes(fits, params, shape), ""
    if name.startswith("KBRELM"):
        # S kernel learners from one eigendecomposition of K, with or without a C path
        return _unified_kernel([(n, True) for n, _ in fits], params, shape), ""
    if name.startswith("GGBRELM"):
        return _boosting_nodes(fits, params, shape, "global"), ""
    if name.startswith("GBRELM"):
        return _boosting_nodes(fits, params, shape, "sequential"), ""
    if name.startswith("BRELM"):
        return _random_nodes(fits, params, shape), ""
    if name == "SparseELMClassifier":
        return _sparse_elm(fits, params, shape), ""
    if name in ("PaperSVC", "SVC", "SVR", "NuSVC"):
        return _libsvm(fits, params, shape), ""
    if name == "L1SelectSVC":
        return _l1_select_svc(fits, params, shape), ""
    if name.startswith("FLSASVM"):
        return _flsa(fits, params, shape), ""
    if name == "FKELMClassifier":
        return _felm(fits, params, shape, kernel=True), ""
    if name == "FELMClassifier":
        return _felm(fits, params, shape, kernel=False), ""
    # a method this module does not know: a kernel method's worst case (K along a path)
    terms = _unified_kernel([(n, True) for n, _ in fits], params, shape)
    return terms, f"{method.estimator} unknown: counted as a kernel method's C path"


def _data_terms(shape: PieceShape) -> int:
    """The set (received whole), the split and its scaled copy, the float32 copies the
    estimators make, and the CV's sample and fold copies."""
    row = (shape.n_features + 1) * F64
    return row * (
        2 * shape.n_rows + 3 * (shape.n_train + shape.n_test) + 2 * (shape.n_cv + shape.n_fold)
    )


def estimate_memory(piece: Piece, shape: PieceShape) -> MemoryEstimate:
    """The bytes ``piece`` needs at its peak on data of ``shape`` (see the module's
    docstring for what is counted)."""
    model, note = _model_terms(piece.method, piece, shape)
    terms = {"process": PROCESS_BYTES, "data": _data_terms(shape), **model}
    return MemoryEstimate(int(sum(terms.values())), terms, note)


def estimate_piece(piece: Piece, data) -> MemoryEstimate:
    """:func:`estimate_memory` of ``piece`` on the loaded set ``data``."""
    return estimate_memory(piece, piece_shape(piece, data))


# -- the plan -------------------------------------------------------------------------------


#: groups the plan shows one by one (the largest); the rest in one line
PLAN_GROUPS = 20


@dataclass
class MemoryPlan:
    """What a run will hold: per group of pieces (a method on a data set) the largest
    estimate, how many of them fit the budget at once, the pieces refused."""

    budget: float | None
    available: int | None
    fraction: float | None
    slots: int | None
    where: str
    groups: list[dict]
    refused: list[str]

    @classmethod
    def make(
        cls,
        pieces,
        estimates: dict[str, int],
        *,
        budget: float | None,
        available: int | None = None,
        fraction: float | None = None,
        slots: int | None = None,
        refuse: bool = True,
        time_limits: dict | None = None,
        where: str = "this machine",
    ) -> MemoryPlan:
        """The plan of ``pieces`` (``estimates``: bytes by piece key); ``refuse``: the
        pieces above ``budget`` are refused here (else on the machines that run them)."""
        time_limits = time_limits or {}
        groups: dict[tuple, dict] = {}
        for piece in pieces:
            key = (piece.dataset, piece.method.label, piece.kind)
            group = groups.setdefault(
                key,
                {
                    "dataset": piece.dataset,
                    "method": piece.method.label,
                    "kind": piece.kind,
                    "pieces": 0,
                    "estimate": 0,
                    "time_limit": time_limits.get(piece.key),
                },
            )
            group["pieces"] += 1
            group["estimate"] = max(group["estimate"], int(estimates[piece.key]))
        for group in groups.values():
            fits = None if budget is None else int(budget // max(group["estimate"], 1))
            group["at_once"] = fits if slots is None or fits is None else min(slots, fits)
            if fits is None:
                group["at_once"] = slots
        refused = []
        if refuse and budget is not None:
            refused = [p.key for p in pieces if estimates[p.key] > budget]
        ordered = sorted(groups.values(), key=lambda g: (-g["estimate"], g["dataset"]))
        return cls(budget, available, fraction, slots, where, ordered, refused)

    def lines(self) -> list[str]:
        """The plan in words, a line each (the run logs them before it starts)."""
        if self.budget is None:
            head = "memory plan: no budget (the available memory is unknown; --memory-gb)"
        elif self.fraction is not None and self.available is not None:
            head = (
                f"memory plan: budget {format_bytes(self.budget)} on {self.where} "
                f"({self.fraction:.0%} of {format_bytes(self.available)} available here; "
                "--memory-gb to set it)"
            )
        else:
            head = f"memory plan: budget {format_bytes(self.budget)} on {self.where} (--memory-gb)"
        if self.slots is not None:
            head += f"; {self.slots} piece{'s' if self.slots != 1 else ''} at once at most"
        out = [head]
        width = max((len(f"{g['dataset']} {g['method']}") for g in self.groups), default=0)
        refused = set(self.refused)
        shown = self.groups[:PLAN_GROUPS]
        for g in shown:
            label = f"{g['dataset']} {g['method']}".ljust(width)
            what = f"{g['pieces']} {g['kind']}{'s' if g['pieces'] != 1 else ''}"
            if self.budget is not None and g["estimate"] > self.budget:
                fit = "refused: larger than the budget" if refused else "over this machine's budget"
            elif g["at_once"] is None:
                fit = "no limit"
            else:
                fit = f"{g['at_once']} at once"
            limit = f", stopped at {g['time_limit']:g} s" if g["time_limit"] else ""
            size = format_bytes(g["estimate"])
            out.append(f"  {label}  {what:>10}  {size:>8} each  {fit}{limit}")
        rest = self.groups[PLAN_GROUPS:]
        if rest:
            largest = max(g["estimate"] for g in rest)
            fewest = min((g["at_once"] for g in rest if g["at_once"] is not None), default=None)
            out.append(
                f"  ... {len(rest)} more groups ({sum(g['pieces'] for g in rest)} pieces), "
                f"each at most {format_bytes(largest)}"
                + (f": {fewest} at once or more" if fewest is not None else "")
            )
        if self.refused:
            over = [g for g in self.groups if g["estimate"] > self.budget]
            names = [f"{g['dataset']} {g['method']} {format_bytes(g['estimate'])}" for g in over]
            out.append(
                f"  refused before starting: {len(self.refused)} piece"
                f"{'s' if len(self.refused) != 1 else ''} larger than the budget ("
                + "; ".join(names[:6])
                + ("; ..." if len(names) > 6 else "")
                + "): the report lists them as left out"
            )
        return out
