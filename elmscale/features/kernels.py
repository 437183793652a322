"""Kernels (paper eqs. 29-31): kernel blocks ``K(A, B)`` (:class:`Kernel`) and a kernel
against a set of basis rows as a feature map (:class:`KernelFeatures`: ``h(x) = K(x, basis)``,
as the kernel ELM's scoring, kernel boosting and forward selection of basis rows use it)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp

from elmscale.core import bit_kernels as _bits
from elmscale.core import block_kernels as _blocks
from elmscale.core import jit as _jit
from elmscale.core import sparse_kernels as _sparse
from elmscale.core.memory import empty_huge
from elmscale.core.threads import parallel_rows
from elmscale.features.base import (
    _as_float32_rows,
    _check_out,
    check_width,
    register_feature_map,
)

#: the kernels an estimator's ``kernel`` parameter names
KERNELS = ("gaussian", "laplacian", "polynomial")
#: every kind a :class:`Kernel` takes: those and the memorization-generalization kernel
KERNEL_KINDS = (*KERNELS, "mg")
#: ``Kernel.block_matvec``'s precisions of kernel values (the sums are float64 in both)
SCORE_PRECISIONS = ("single", "double")
#: the kinds computed from the squared distance (the products by BLAS for wide rows)
DISTANCE_KINDS = ("gaussian", "laplacian", "mg")
#: the kinds whose values ``precision="single"`` computes in float32 (the others in float64)
FLOAT32_KINDS = ("gaussian", "laplacian")


def _sparse_operands(A, B) -> tuple | None:
    """``(a, b)`` as ``core.sparse_kernels.CsrRows`` when either block side is scipy sparse
    (the dense one converted to CSR: a kernel of sparse rows reads both sides' nonzeros),
    else None.  ``B is A`` gives the same rows twice."""
    if not (_sparse.is_sparse(A) or _sparse.is_sparse(B)):
        return None

    def rows(X):
        return _sparse.as_csr32(X) if _sparse.is_sparse(X) else sp.csr_matrix(_as_float32_rows(X))

    A, B = rows(A), (None if B is A else rows(B))
    # b's inverted index (its nonzeros by feature) where it is cheaper than direct products
    b = _sparse.csr_rows(A if B is None else B, by_column=_sparse.inverted_pays(A, B))
    return _sparse.csr_rows(A, by_column=False), b


def _both_packed(A, B) -> bool:
    """Whether both block sides are rows of 0s and 1s narrow enough to pack
    (``bits_pay``): their products are then exact from the packed rows."""
    return _bits.bits_pay(A) and (B is A or _bits.bits_pay(B))


def _packed_operands(A, B) -> tuple | None:
    """``(a, b)`` as ``core.bit_kernels.BitRows`` when both block sides are rows of 0s and
    1s narrow enough to pack (``bits_pay``), else None.  ``B is A``: the same rows twice."""
    if not _both_packed(A, B):
        return None
    a = _bits.bit_rows(A)
    return a, (a if B is A else _bits.bit_rows(B))


def _transposed32(B: np.ndarray) -> np.ndarray:
    """``B``'s rows as float32 columns, (d, m) C-contiguous: the kernel loops' layout."""
    return np.ascontiguousarray(_as_float32_rows(B).T)


@dataclass(frozen=True)
class Kernel:
    """A kernel function with its parameters (``sigma`` for gaussian / laplacian, ``degree``
    for polynomial; ``sigma``, ``sigma_star`` and ``tau`` for ``"mg"``).

    ``"mg"`` is the memorization-generalization kernel of Vapnik and Izmailov, as the FELM
    paper (eq. 8) uses it: ``(1 - tau) exp(-|u-v|^2 / (2 sigma^2)) + tau exp(-|u-v|^2 /
    (2 sigma_star^2))``, both widths in this library's gaussian convention.  The paper
    writes ``exp(-s^2 |u-v|^2)``, an inverse width: its ``s`` is ``1 / (sqrt(2) sigma)``
    here, and its ``s* = 2^-10 s`` is ``sigma_star = 2^10 sigma`` (a nearly constant
    second term); the text's memorizing ``s* >> s`` is ``sigma_star << sigma``.  With
    ``tau = 0`` it is the gaussian kernel of width ``sigma``.  It is solved like any kernel
    (``solve_kernel_dual``, ``KernelFeatures``); its diagonal is 1.
    """

    kind: str
    sigma: float = 1.0
    degree: int = 3
    sigma_star: float = 1.0
    tau: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KERNEL_KINDS:
            raise ValueError(f"kernel must be one of {KERNEL_KINDS}; got {self.kind!r}")
        if not self.sigma > 0:
            raise ValueError(f"sigma must be > 0; got {self.sigma}")
        if int(self.degree) < 1 or int(self.degree) != self.degree:
            raise ValueError(f"degree must be an integer >= 1; got {self.degree}")
        if not self.sigma_star > 0:
            raise ValueError(f"sigma_star must be > 0; got {self.sigma_star}")
        if not 0.0 <= self.tau <= 1.0:
            raise ValueError(f"tau must be in [0, 1]; got {self.tau}")

    def _params(self) -> tuple:
        """The numba kernels' parameters: kind code, sigma, degree, sigma_star, tau."""
        return (
            _jit.KERNEL_CODES[self.kind],
            float(self.sigma),
            int(self.degree),
            float(self.sigma_star),
            float(self.tau),
        )

    def block(
        self, A: np.ndarray, B: np.ndarray, dtype=np.float64, out: np.ndarray | None = None
    ) -> np.ndarray:
        """The kernel block ``K(A, B)``, ``(len(A), len(B))``, in ``dtype`` or written into
        ``out`` (C-contiguous, that shape).  ``B`` the same object as ``A``: K(A, A), its
        upper half computed and mirrored.  Caller bounds the size.  Either side scipy sparse
        (CSR or CSC): the values from sparse dot products and squared row norms
        (``core.sparse_kernels``), equal to the dense rows' to float64 rounding."""
        sparse = _sparse_operands(A, B)
        if sparse is not None:
            a, b = sparse
            shape = (a.sq_norms.shape[0], b.sq_norms.shape[0])
            out = empty_huge(shape, dtype) if out is None else _check_out(out, shape, dtype)
            params = self._params()
            parallel_rows(
                lambda start, stop: _sparse.sparse_kernel_rows(a, b, *params, out, start, stop),
                shape[0],
            )
            return out
        symmetric = B is A
        A32 = _as_float32_rows(A)
        Bt = _transposed32(B)
        shape = (A32.shape[0], Bt.shape[1])
        out = empty_huge(shape, dtype) if out is None else _check_out(out, shape, dtype)
        params = self._params()
        parallel_rows(
            lambda start, stop: _jit.kernel_rows(A32, Bt, *params, out, start, stop, symmetric),
            shape[0],
        )
        return out

    def block_matvec(
        self, A: np.ndarray, B: np.ndarray, coef: np.ndarray, precision: str = "double"
    ) -> np.ndarray:
        """``K(A, B) @ coef`` without storing the kernel block (fused, rows side by side on
        the thread budget), the sums in float64.  ``precision="double"``: every kernel value
        in float64; ``"single"``: gaussian and laplacian values in float32 (about twice as
        fast), within :func:`float32_error_bound` of the double ones.  Either side scipy
        sparse: float64 values in both precisions (from sparse dot products); both sides
        rows of 0s and 1s (``core.bit_kernels.bits_pay``): float64 values in both, each from
        the pair's shared ones by a table, exact as the sparse path's."""
        if precision not in SCORE_PRECISIONS:
            raise ValueError(f"precision must be one of {SCORE_PRECISIONS}; got {precision!r}")
        coef2 = np.ascontiguousarray(coef, dtype=np.float64)
        squeeze = coef2.ndim == 1
        if squeeze:
            coef2 = coef2[:, None]
        packed = _packed_operands(A, B)
        if packed is not None:  # rows of 0s and 1s: every value from one integer, exactly
            a, b = packed
            code, sigma, degree, sigma_star, tau = self._params()
            max_count = int(max(a.counts.max(initial=0), b.counts.max(initial=0)))
            table = _bits.value_table(max_count, code, sigma, degree, sigma_star, tau)
            out = np.empty((a.counts.shape[0], coef2.shape[1]), dtype=np.float64)
            coef_t = np.ascontiguousarray(coef2.T)
            poly = np.bool_(code == _jit.KERNEL_CODES["polynomial"])
            parallel_rows(
                lambda start, stop: _bits.bits_kernel_rows_matvec(
                    a, b, table, poly, coef_t, out, start, stop
                ),
                out.shape[0],
            )
            return out[:, 0] if squeeze else out
        sparse = _sparse_operands(A, B)
        if sparse is not None:
            a, b = sparse
            out = np.empty((a.sq_norms.shape[0], coef2.shape[1]), dtype=np.float64)
            params = self._params()
            coef_t = np.ascontiguousarray(coef2.T)
            parallel_rows(
                lambda start, stop: _sparse.sparse_kernel_rows_matvec(
                    a, b, *params, coef_t, out, start, stop
                ),
                out.shape[0],
            )
            return out[:, 0] if squeeze else out
        A32 = _as_float32_rows(A)
        if self.kind in DISTANCE_KINDS and A32.shape[1] >= _blocks.GEMM_MATVEC_MIN_FEATURES:
            # wide rows: the products by BLAS (an exact check's, a wide set's scores)
            wide = self._gemm_matvec(A32, B, B is A, coef2, precision)
            if wide is not None:
                return wide[:, 0] if squeeze else wide
        Bt = _transposed32(B)
        out = np.empty((A32.shape[0], coef2.shape[1]), dtype=np.float64)
        params = self._params()
        coef_t = np.ascontiguousarray(coef2.T)
        single = np.bool_(precision == "single")
        parallel_rows(
            lambda start, stop: _jit.kernel_rows_matvec(
                A32, Bt, *params, coef_t, out, start, stop, single
            ),
            A32.shape[0],
        )
        return out[:, 0] if squeeze else out

    def _gemm_matvec(self, A32, B, same, coef2, precision):
        """``block_matvec`` of wide dense rows by GEMMs (``core.block_kernels``): "double",
        float64 products and values; "single", a gaussian kernel's from float32 products
        where their error (``float32_products_error``, the rows' largest norm) is at most
        ``FLOAT32_PRODUCTS_MAX_ERROR`` (twice the speed of float64 ones), else None (the
        fused float32 kernel: ``float32_error_bound``'s own terms)."""
        code, sigma, _, sigma_star, tau = self._params()
        params = (code, sigma, sigma_star, tau)
        if precision == "single":
            B32 = A32 if same else _as_float32_rows(B)
            sq_a = np.einsum("ij,ij->i", A32, A32, dtype=np.float64)
            sq_b = sq_a if same else np.einsum("ij,ij->i", B32, B32, dtype=np.float64)
            if _single_products_error(self, A32.shape[1], sq_a, sq_b) is None:
                return None
            return _blocks.gemm_kernel_matvec32(A32, sq_a, B32, sq_b, params, coef2)
        A64 = A32.astype(np.float64)
        B64 = A64 if same else _as_float32_rows(B).astype(np.float64)
        sq_a = np.einsum("ij,ij->i", A64, A64)
        sq_b = sq_a if same else np.einsum("ij,ij->i", B64, B64)
        return _blocks.gemm_kernel_matvec(A64, sq_a, B64, sq_b, params, coef2)

    def block_matvec_bounded(
        self, A: np.ndarray, B: np.ndarray, coef: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """``(K(A, B) @ coef, bound)`` for a 1-D ``coef``: the single-precision product and,
        per row, a bound on its distance from the double one (:func:`float32_error_bound`'s
        terms, from the float32 values themselves), in one pass; None for the kernels
        computed in float64 either way (polynomial, mg) or past the bound's reach (a
        feature count whose float32 distances would be off by a third), or for sparse rows
        (whose values are float64 in both precisions: the exact product is the check), or
        for rows of 0s and 1s on both sides (their packed product is exact and cheaper:
        a9a's final check 0.9 s against 2.1 s bounded, alone)."""
        if _sparse.is_sparse(A) or _sparse.is_sparse(B):
            return None
        if _both_packed(A, B):
            return None
        A32 = _as_float32_rows(A)
        terms = _float32_bound_terms(self, A32.shape[1])
        if terms is None:
            return None
        Bt = _transposed32(B)
        coef1 = np.ascontiguousarray(coef, dtype=np.float64)
        out = np.empty(A32.shape[0])
        bound = np.empty(A32.shape[0])
        code, sigma = _jit.KERNEL_CODES[self.kind], float(self.sigma)
        parallel_rows(
            lambda start, stop: _jit.kernel_rows_matvec32_bounded(
                A32, Bt, code, sigma, *terms, coef1, out, bound, start, stop
            ),
            A32.shape[0],
        )
        return out, bound

    def from_sq_distances(self, d2: np.ndarray) -> np.ndarray:
        """The kernel's values from squared distances ``|u - v|^2`` computed elsewhere
        (float64, any 2-D shape), as :meth:`block` computes them from rows; for the
        kernels of the distance (gaussian, laplacian, mg), not polynomial."""
        if self.kind == "polynomial":
            raise ValueError("the polynomial kernel is not a function of distances")
        d2 = np.ascontiguousarray(d2, dtype=np.float64)
        if d2.ndim != 2:
            raise ValueError(f"squared distances must be 2-D; got shape {d2.shape}")
        code, sigma, _, sigma_star, tau = self._params()
        out = np.empty(d2.shape, dtype=np.float64)
        _jit.distance_kernel_block(d2, code, sigma, sigma_star, tau, out)
        return out

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "sigma": float(self.sigma), "degree": int(self.degree)}
        if self.kind == "mg":
            d.update(sigma_star=float(self.sigma_star), tau=float(self.tau))
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Kernel:
        return cls(
            kind=str(d["kind"]),
            sigma=float(d["sigma"]),
            degree=int(d["degree"]),
            sigma_star=float(d.get("sigma_star", 1.0)),
            tau=float(d.get("tau", 0.0)),
        )


# The single-precision scoring's error (``Kernel.block_matvec(precision="single")``): a
# gaussian or laplacian value K = exp(-z) computed in float32 (``core.jit._kernel_row32``)
# is within K (EXP32_RELATIVE + (1.25 d + 6) 2^-24 z) + FLOAT32_EXP_FLOOR of the exact one:
# z's float32 arithmetic (d rounded differences, their squares summed four at a time, the
# scale and its product; the square root for laplacian) is within (1.25 d + 6) 2^-24 of z
# relatively, which exp carries to K times z; the float32 exp itself is within 7.9e-8 of
# the exact exp (measured over 25 M arguments in [-87, 0]; 1.2e-7 allowed), and its argument
# is clamped at -87 (exp(-87) = 1.65e-38: the floor).  The sums are float64 (their
# rounding, 1e-16 relative per term, is in both precisions).
EXP32_RELATIVE = 1.2e-7
FLOAT32_EXP_FLOOR = 1.7e-38


def _float32_per_z(n_features: int) -> float:
    """The bound's term per unit of the exp's argument: ``(1.25 d + 6) 2^-24``."""
    return (1.25 * n_features + 6.0) * 2.0**-24


def _float32_bound_terms(kernel: Kernel, n_features: int) -> tuple[float, float, float] | None:
    """``(relative, per_z, floor)`` of the bound for ``Kernel.block_matvec_bounded``, which
    reads K and z from their float32 values: both terms raised by the float32 values' own
    largest relative error (arguments down to -87), or None when that passes a third."""
    if kernel.kind not in FLOAT32_KINDS:
        return None
    per_z = _float32_per_z(n_features)
    worst = EXP32_RELATIVE + 87.0 * per_z
    if worst > 1.0 / 3.0:
        return None
    factor = (1.0 + worst) / (1.0 - worst)
    return EXP32_RELATIVE * factor, per_z * factor, FLOAT32_EXP_FLOOR


def _single_products_error(kernel: Kernel, n_features: int, sq_a, sq_b) -> float | None:
    """What float32 products add to a single-precision value's error where
    ``block_matvec(precision="single")`` takes them (a gaussian kernel, at least
    ``GEMM_MATVEC_MIN_FEATURES`` features, ``float32_products_error`` of the rows' largest
    squared norm within ``FLOAT32_PRODUCTS_MAX_ERROR``), else None."""
    if kernel.kind not in DISTANCE_KINDS or n_features < _blocks.GEMM_MATVEC_MIN_FEATURES:
        return None
    largest = max(float(sq_a.max(initial=0.0)), float(sq_b.max(initial=0.0)))
    code, sigma = kernel._params()[:2]
    return _blocks.usable_float32_products_error(code, sigma, n_features, largest)


def float32_error_bound(kernel: Kernel, A: np.ndarray, B: np.ndarray, coef: np.ndarray):
    """A bound on ``|block_matvec(A, B, coef, "single") - block_matvec(A, B, coef)|``, entry
    by entry: ``sum_j |coef_j| (K_ij (EXP32_RELATIVE + (1.25 d + 6) 2^-24 z_ij) +
    FLOAT32_EXP_FLOOR)``, ``z_ij`` the exp's argument (``|a_i - b_j|^2 / (2 sigma^2)``, or
    ``|a_i - b_j| / sigma``), evaluated in float64 (it costs a float64 kernel block: for
    checks, not for scoring).  Zero for polynomial and mg kernels, whose values both
    precisions compute in float64 alike.  Since ``K z = z exp(-z) <= 1/e``, it is at most
    ``(EXP32_RELATIVE + (1.25 d + 6) 2^-24 / e + FLOAT32_EXP_FLOOR) sum_j |coef_j|``.
    Zero too where either side is scipy sparse: its values are float64 in both precisions.
    Where "single" computes wide rows' values from float32 products (``_single_products_
    error``), each value's bound adds ``K_ij`` times that error, and its float32 terms are
    taken at ``K_ij`` raised by it."""
    coef2 = np.asarray(coef, dtype=np.float64)
    squeeze = coef2.ndim == 1
    coef2 = coef2[:, None] if squeeze else coef2
    if _sparse.is_sparse(A) or _sparse.is_sparse(B):
        out = np.zeros((A.shape[0], coef2.shape[1]))
        return out[:, 0] if squeeze else out
    A64 = _as_float32_rows(A).astype(np.float64)
    B64 = _as_float32_rows(B).astype(np.float64)
    if kernel.kind not in FLOAT32_KINDS:
        out = np.zeros((A64.shape[0], coef2.shape[1]))
        return out[:, 0] if squeeze else out
    d2 = np.maximum(
        (A64**2).sum(axis=1)[:, None] + (B64**2).sum(axis=1)[None, :] - 2.0 * A64 @ B64.T, 0.0
    )
    sigma = float(kernel.sigma)
    z = d2 / (2.0 * sigma * sigma) if kernel.kind == "gaussian" else np.sqrt(d2) / sigma
    per_value = np.exp(-z) * (EXP32_RELATIVE + _float32_per_z(A64.shape[1]) * z)
    products = _single_products_error(
        kernel, A64.shape[1], np.einsum("ij,ij->i", A64, A64), np.einsum("ij,ij->i", B64, B64)
    )
    if products is not None:
        per_value = per_value * (1.0 + products) + np.exp(-z) * products
    out = (per_value + FLOAT32_EXP_FLOOR) @ np.abs(coef2)
    return out[:, 0] if squeeze else out


def mg_params(estimator) -> dict:
    """An estimator's ``Kernel`` keywords for the memorization-generalization kernel
    (``sigma_star = sigma_star_ratio * sigma``, ``tau``); none for the other kinds, whose
    kernels then equal those rebuilt from a model file.  Reads ``sigma_star_ratio`` and
    ``tau`` only for ``kernel="mg"``: estimators sharing the ELM base without them (KBRELM)
    never take that kernel."""
    if estimator.kernel != "mg":
        return {}
    return {
        "sigma_star": float(estimator.sigma_star_ratio) * float(estimator.sigma),
        "tau": float(estimator.tau),
    }


@register_feature_map("kernel")
@dataclass(frozen=True, eq=False)
class KernelFeatures:
    """A kernel against basis rows as a feature map: ``h(x) = [K(x, b_1), ..., K(x, b_m)]``.

    ``n_outputs`` is the number of basis rows (kept as float32, the precision kernels read
    their inputs in; a scipy sparse basis is kept as float32 CSR, and ``X`` may be sparse
    either way).  The kernel ELM's fitted model is ``KernelFeatures(kernel, X_fit_)``
    with the dual weights as output weights; kernel boosting and forward selection grow a
    basis of chosen rows.  ``to_dict()`` holds the basis rows themselves (a list per row):
    it is as large as the basis.
    """

    kernel: Kernel
    basis: np.ndarray = field(repr=False)

    def __post_init__(self) -> None:
        basis = _as_float32_rows(self.basis)
        if basis.ndim != 2 or basis.shape[0] < 1:
            raise ValueError(
                f"basis must be a 2-D array of at least one row; got shape {basis.shape}"
            )
        object.__setattr__(self, "basis", basis)

    @property
    def n_features(self) -> int:
        return int(self.basis.shape[1])

    @property
    def n_outputs(self) -> int:
        return int(self.basis.shape[0])

    def _check_X(self, X: np.ndarray) -> np.ndarray:
        return check_width(X, self.n_features, f"the basis rows have {self.n_features}")

    def transform(
        self, X: np.ndarray, dtype=np.float32, out: np.ndarray | None = None
    ) -> np.ndarray:
        """``K(X, basis)`` ``(len(X), n_outputs)`` (distances or products in float64 from
        float32 inputs, stored in ``dtype``)."""
        return self.kernel.block(self._check_X(X), self.basis, dtype=dtype, out=out)

    def scores(self, X: np.ndarray, coef: np.ndarray) -> np.ndarray:
        """``K(X, basis) @ coef`` without storing the kernel block."""
        return self.kernel.block_matvec(self._check_X(X), self.basis, coef)

    def to_dict(self) -> dict:
        """The kernel and the basis rows: a list per row, or, for a sparse basis (CSR), its
        shape and CSR arrays as lists (``"basis_csr"``), never densified."""
        out = {"type": "kernel", "kernel": self.kernel.to_dict()}
        if _sparse.is_sparse(self.basis):
            b = self.basis
            out["basis_csr"] = {
                "shape": [int(b.shape[0]), int(b.shape[1])],
                "indptr": b.indptr.astype(np.int64).tolist(),
                "indices": b.indices.astype(np.int64).tolist(),
                "data": b.data.astype(np.float64).tolist(),
            }
        else:
            out["basis"] = self.basis.astype(np.float64).tolist()
        return out

    @classmethod
    def from_dict(cls, d: dict) -> KernelFeatures:
        if "basis_csr" in d:
            c = d["basis_csr"]
            basis = sp.csr_matrix(
                (
                    np.asarray(c["data"], np.float32),
                    np.asarray(c["indices"], np.int32),
                    np.asarray(c["indptr"], np.int64),
                ),
                shape=tuple(c["shape"]),
            )
            return cls(Kernel.from_dict(d["kernel"]), basis)
        return cls(Kernel.from_dict(d["kernel"]), np.asarray(d["basis"], dtype=np.float32))
