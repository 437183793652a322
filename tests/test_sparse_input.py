"""Sparse rows (scipy CSR / CSC) in every family: the same kernels, maps and models as the
dense rows give, never densified (issue 52 item 4).

Bounds, from the arithmetic each path does:

* Kernel values: the dense path sums ``|x - z|^2`` from float64 differences, the sparse one
  ``|x|^2 + |z|^2 - 2 x.z`` from exact float64 products; each sum of at most d + 2 terms is
  within (d + 2) u of the sum of the terms' magnitudes (u = 2^-53), so the two squared
  distances are within ``4 (d + 2) u (|x|^2 + |z|^2)`` and a gaussian value
  ``exp(-d2 / 2 sigma^2)`` within that over ``2 sigma^2`` (plus the exp's own 2 u).
* Random-node outputs: additive pre-activations ``a.x + b`` are float32 sums in both paths,
  in other orders, each within (d + 1) 2^-24 of ``sum |a_k x_k| + |b|``; a sigmoid's slope
  is at most 1/4, a sine's 1, and the float32 exp adds 1.2e-7.
* A kernel dual solved to ``tol`` (every KKT violation within it) is within ``n C tol`` of
  the optimum in objective (each term ``g_i (alpha_i - alpha*_i)`` is at most ``C tol``),
  hence within ``sqrt(2 n C tol)`` of it in the feature space (the objective is quadratic
  with Hessian Q), so two such solutions' decision values differ by at most
  ``2 sqrt(2 n C tol) sqrt(K(x, x))`` (gaussian: K(x, x) = 1).
* Ridge solves (ELM, boosting, FLSA-SVM) are direct: a perturbation of the Gram's entries
  by e moves the output weights by at most ``C n e |beta|`` (``(I/C + G)^-1`` has norm at
  most C); those tests use the kernel bound above for e.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from elmscale import SparseELMClassifier
from elmscale.core.sparse_kernels import as_csr32, csr_q_segment, csr_rows
from elmscale.features.kernels import Kernel, KernelFeatures
from elmscale.features.layers import HiddenLayer
from elmscale.models.boosting_ridge import (
    BRELMClassifier,
    GBRELMClassifier,
    GGBRELMClassifier,
    KBRELMClassifier,
    KBRELMRegressor,
)
from elmscale.models.elm import ELMClassifier, ELMRegressor
from elmscale.models.felm import DENSE_SELECTION_BYTES, FELMClassifier, FKELMClassifier
from elmscale.models.flsa_svm import FLSASVMClassifier, FLSASVMRegressor
from elmscale.models.sparse_elm_pairs import DENSE_ROWS
from elmscale.solvers.kernel_dual import solve_kernel_dual

U64 = 2.0**-53
U32 = 2.0**-24


def sparse_rows(n, d, density, seed, scale=1.0):
    """Random sparse rows (CSR float32) with values in [-scale, scale]."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, random_state=rng, format="csr", dtype=np.float32)
    X.data = (scale * (2.0 * X.data - 1.0)).astype(np.float32)
    return X


def labels(X, n_classes, seed):
    """Class labels from a random linear rule on ``X`` (learnable, not separable)."""
    rng = np.random.default_rng(seed)
    score = X @ rng.normal(size=X.shape[1]) + 0.1 * rng.normal(size=X.shape[0])
    return np.digitize(score, np.quantile(score, np.linspace(0, 1, n_classes + 1)[1:-1]))


def kernel_bound(A, B, sigma):
    """The gaussian values' bound between the dense and the sparse arithmetic (module
    docstring), entry by entry."""
    A64 = A.toarray().astype(np.float64)
    B64 = B.toarray().astype(np.float64)
    sq = (A64**2).sum(axis=1)[:, None] + (B64**2).sum(axis=1)[None, :]
    return 4 * (A.shape[1] + 2) * U64 * sq / (2 * sigma**2) + 2 * U64


FORMATS = [pytest.param(lambda X: X, id="csr"), pytest.param(lambda X: X.tocsc(), id="csc")]


# -- kernels -------------------------------------------------------------------------------
@pytest.mark.parametrize("to_format", FORMATS)
@pytest.mark.parametrize("inverted", [False, True])
def test_kernel_block_and_matvec_equal_dense(to_format, inverted):
    A = sparse_rows(120, 40, 0.25, 0)
    B = sparse_rows(50, 40, 0.25, 1)
    coef = np.random.default_rng(2).normal(size=(50, 3))
    sigma = 0.8
    kernel = Kernel("gaussian", sigma=sigma)
    bound = kernel_bound(A, B, sigma)
    K_dense = kernel.block(A.toarray(), B.toarray())
    assert np.all(np.abs(kernel.block(to_format(A), to_format(B)) - K_dense) <= bound)
    # mixed sides: a dense A against sparse B
    assert np.all(np.abs(kernel.block(A.toarray(), to_format(B)) - K_dense) <= bound)
    # the product, by direct dot products or through B's inverted index
    import elmscale.core.sparse_kernels as sk

    share = sk.INVERTED_SHARE
    sk.INVERTED_SHARE = 1e9 if inverted else 0.0
    try:
        got = kernel.block_matvec(to_format(A), to_format(B), coef)
    finally:
        sk.INVERTED_SHARE = share
    want = kernel.block_matvec(A.toarray(), B.toarray(), coef)
    assert np.all(np.abs(got - want) <= bound @ np.abs(coef) + 1e-15)


@pytest.mark.parametrize("kind", ["laplacian", "polynomial", "mg"])
def test_other_kernels_equal_dense(kind):
    A = sparse_rows(60, 30, 0.3, 3)
    kernel = Kernel(kind, sigma=1.5, degree=2, sigma_star=4.0, tau=0.25)
    got, want = kernel.block(A, A), kernel.block(A.toarray(), A.toarray())
    # polynomial: (1 + x.z)^2 from products summed in float64 both ways, |x.z| <= |x||z|;
    # the distance kernels: the gaussian bound (laplacian: sqrt halves the relative error
    # but divides by sigma, not 2 sigma^2; both within the bound taken with sigma^2 / 2)
    sq = (A.toarray().astype(np.float64) ** 2).sum(axis=1)
    scale = (1.0 + np.sqrt(sq[:, None] * sq[None, :])) ** 2
    bound = 8 * (A.shape[1] + 2) * U64 * scale + kernel_bound(A, A, 1.0)
    assert np.all(np.abs(got - want) <= bound)


def test_solver_column_from_csr_equals_kernel():
    """The solver's CSR column (``csr_q_segment``), direct and inverted, through a permuted
    order: ``t_i t_p K(x_perm[i], x_perm[p])`` in float32."""
    X = sparse_rows(200, 50, 0.2, 4)
    rng = np.random.default_rng(5)
    perm = rng.permutation(200)
    t32 = np.where(rng.random(200) < 0.5, -1.0, 1.0).astype(np.float32)
    K = Kernel("gaussian", sigma=1.0).block(X.toarray(), X.toarray())
    for by_column in (False, True):
        rows = csr_rows(X, by_column=by_column)
        for i in (0, 17, 199):
            out = np.full(200, np.nan, np.float32)
            csr_q_segment(rows, perm, t32, i, 30, 170, 0, 1.0, 3, 1.0, 0.0, out)
            want = t32[i] * t32[30:170] * K[perm[i], perm[30:170]]
            assert np.all(np.isnan(out[:30])) and np.all(np.isnan(out[170:]))
            np.testing.assert_allclose(out[30:170], want, rtol=U32, atol=U32)


def test_kernel_features_keep_a_sparse_basis():
    X = sparse_rows(40, 25, 0.3, 6)
    features = KernelFeatures(Kernel("gaussian", sigma=0.9), X)
    assert sp.issparse(features.basis)
    again = KernelFeatures.from_dict(features.to_dict())
    assert "basis" not in features.to_dict()
    Z = sparse_rows(10, 25, 0.3, 7)
    np.testing.assert_array_equal(again.transform(Z), features.transform(Z))


# -- random-node maps ------------------------------------------------------------------------
@pytest.mark.parametrize("to_format", FORMATS)
@pytest.mark.parametrize("kind", ["sigmoid", "sinusoid", "multiquadric", "gaussian"])
def test_hidden_layer_equals_dense(to_format, kind):
    X = sparse_rows(300, 40, 0.2, 8)
    layer = HiddenLayer(kind, 40, 30, seed=3)
    H_dense = layer.transform(X.toarray()).astype(np.float64)
    H_sparse = layer.transform(to_format(X)).astype(np.float64)
    if kind in ("sigmoid", "sinusoid"):
        magnitude = np.abs(X.toarray()) @ np.abs(layer.weights) + np.abs(layer.biases)
        slope = 0.25 if kind == "sigmoid" else 1.0
        bound = 2 * (40 + 1) * U32 * magnitude * slope + 2 * 1.2e-7 + 2 * U32
    else:  # float64 distances both ways: the float32 result's rounding
        bound = 2 * U32 * np.abs(H_dense) + 1e-12
    assert np.all(np.abs(H_sparse - H_dense) <= bound)


# -- models --------------------------------------------------------------------------------
def dual_bound(n, C, tol):
    """Two kernel duals within ``tol``: decision values within this (gaussian)."""
    return 2.0 * np.sqrt(2.0 * n * C * tol)


@pytest.mark.parametrize("to_format", FORMATS)
@pytest.mark.parametrize("n_classes", [2, 3])
def test_sparse_elm_kernel_equals_dense(to_format, n_classes):
    """Pairs of more than ``DENSE_ROWS`` rows: the column-cache solver with the CSR source."""
    n, C, tol = 2400 if n_classes == 3 else 1500, 1.0, 1e-6
    X = sparse_rows(n, 80, 0.1, 9)
    y = labels(X, n_classes, 10)
    Z = sparse_rows(200, 80, 0.1, 11)
    params = dict(kernel="gaussian", sigma=1.0, C=C, tol=tol)
    dense = SparseELMClassifier(**params).fit(X.toarray(), y)
    model = SparseELMClassifier(**params).fit(to_format(X), y)
    assert sp.issparse(model.support_vectors_) and model.converged_.all()
    f, g = model.decision_function(Z), dense.decision_function(Z.toarray())
    pair_rows = n if n_classes == 2 else n  # a pair's rows are at most all of them
    bound = dual_bound(pair_rows, C, tol)
    assert np.abs(f - g).max() <= bound
    # the objective: each within n C tol of the optimum
    assert np.all(np.abs(model.objective_ - dense.objective_) <= 2 * pair_rows * C * tol)
    # dense rows scored by the sparse model: the same values, to the kernel's rounding
    np.testing.assert_allclose(model.decision_function(Z.toarray()), f, rtol=0, atol=1e-12)


@pytest.mark.parametrize("hidden_solver", ["dual", "newton"])
def test_sparse_elm_random_nodes_equal_dense(hidden_solver):
    n, C, tol = 1200, 1.0, 1e-6
    X = sparse_rows(n, 60, 0.1, 12)
    y = labels(X, 3, 13)
    Z = sparse_rows(100, 60, 0.1, 14)
    params = dict(hidden="sigmoid", n_hidden=40, C=C, tol=tol, solver=hidden_solver)
    dense = SparseELMClassifier(random_state=0, **params).fit(X.toarray(), y)
    model = SparseELMClassifier(random_state=0, **params).fit(X, y)
    # the duals' bound with |h(x)| <= sqrt(40) (sigmoid values in (0, 1)), plus the maps'
    # float32 difference carried by |beta|
    bound = dual_bound(n, C, tol) * np.sqrt(40) + 1e-4 * np.abs(dense.coef_).sum(axis=0).max()
    assert np.abs(model.decision_function(Z) - dense.decision_function(Z.toarray())).max() <= (
        bound
    )


@pytest.mark.parametrize(
    ("make", "classify"),
    [
        (lambda: ELMClassifier(hidden="sigmoid", n_hidden=40, random_state=0), True),
        (lambda: ELMClassifier(kernel="gaussian", sigma=1.0, C=10.0), True),
        (lambda: ELMRegressor(kernel="polynomial", degree=2, C=1.0), False),
        (lambda: BRELMClassifier(random_state=0), True),
        (lambda: GBRELMClassifier(random_state=0), True),
        (lambda: GGBRELMClassifier(random_state=0), True),
        (lambda: KBRELMClassifier(), True),
        (lambda: KBRELMRegressor(), False),
        (lambda: FLSASVMClassifier(n_support=30), True),
        (lambda: FLSASVMRegressor(n_support=30), False),
        (lambda: FELMClassifier(n_hidden=20, random_state=0), True),
        (lambda: FKELMClassifier(), True),
    ],
    ids=[
        "elm-random",
        "elm-kernel",
        "elm-regressor-kernel",
        "brelm",
        "gbrelm",
        "ggbrelm",
        "kbrelm",
        "kbrelm-regressor",
        "flsa-svm",
        "flsa-svm-regressor",
        "felm",
        "fkelm",
    ],
)
@pytest.mark.parametrize("to_format", FORMATS)
def test_ridge_families_equal_dense(make, classify, to_format):
    X = sparse_rows(300, 30, 0.2, 15)
    y = labels(X, 3, 16) if classify else X @ np.random.default_rng(17).normal(size=30)
    Z = sparse_rows(80, 30, 0.2, 18)
    dense, model = make().fit(X.toarray(), y), make().fit(to_format(X), y)
    score = "decision_function" if classify else "predict"
    got = np.asarray(getattr(model, score)(Z))
    want = np.asarray(getattr(dense, score)(Z.toarray()))
    # the Gram's entries within the kernel bound (d = 30, |x|^2 <= 30 * 0.2 * 2 here: e <=
    # 4 * 32 * u * 12 / 2 = 1.7e-13) or float32 rounding of random nodes (2e-7 relative);
    # C n e |beta| with C <= 10, n = 300 and the outputs' own scale
    scale = 1.0 + np.abs(want).max()
    assert np.abs(got - want).max() <= 10 * 300 * 2e-7 * scale


@pytest.mark.parametrize(
    "make",
    [
        lambda: ELMClassifier(hidden="sigmoid", n_hidden=20, random_state=0),
        lambda: ELMClassifier(kernel="gaussian", sigma=1.0),
        lambda: SparseELMClassifier(kernel="gaussian", sigma=1.0),
        lambda: FLSASVMClassifier(n_support=20),
    ],
    ids=["elm-random", "elm-kernel", "sparse-elm-kernel", "flsa-svm"],
)
def test_onnx_export_of_a_sparse_fit_equals_the_dense_fits(make):
    """The model of sparse rows is the model of dense rows, so is its ONNX graph (its
    sparse support rows written as dense constants)."""
    ort = pytest.importorskip("onnxruntime")
    from elmscale.io.onnx_export import to_onnx

    X = sparse_rows(300, 30, 0.2, 19)
    y = labels(X, 2, 20)
    Z = sparse_rows(50, 30, 0.2, 21).toarray()
    outputs = []
    for rows in (X, X.toarray()):
        session = ort.InferenceSession(
            to_onnx(make().fit(rows, y)).SerializeToString(),
            providers=["CPUExecutionProvider"],
        )
        outputs.append(session.run(None, {session.get_inputs()[0].name: Z.astype(np.float32)}))
    for got, want in zip(*outputs):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())


# -- high-dimensional sparse rows ----------------------------------------------------------
def test_high_dimensional_sparse_fit_stays_within_the_csr_and_the_cache():
    """30,000 features, 0.3 % dense, 3,000 rows: dense float32 they would be 360 MB; the fit
    allocates (numpy, tracemalloc) at most twice the CSR's own size plus the column cache,
    so no dense n x d array is ever made."""
    rng = np.random.default_rng(22)
    n, d, per_row = 3000, 30_000, 90
    # Zipf-like features (a few common, most rare), nonnegative, unit rows: text-like
    p = 1.0 / np.arange(1, d + 1) ** 1.1
    cols = rng.choice(d, size=n * per_row, p=p / p.sum())
    rows = np.repeat(np.arange(n), per_row)
    X = sp.csr_matrix((rng.random(n * per_row) + 0.1, (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    X = sp.csr_matrix(sp.diags(1.0 / np.sqrt(X.multiply(X).sum(axis=1).A1)) @ X, dtype=np.float32)
    X.sum_duplicates()
    y = (X @ rng.normal(size=d) > 0).astype(int)
    csr_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    cache_mb = 8.0

    def model():
        return SparseELMClassifier(kernel="gaussian", sigma=1.0, C=1.0, cache_size=cache_mb)

    # compiled before the count: a pair past DENSE_ROWS takes the column-cache solver
    model().fit(X[: DENSE_ROWS + 100], y[: DENSE_ROWS + 100])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        fitted = model().fit(X, y)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert fitted.converged_.all() and sp.issparse(fitted.support_vectors_)
    assert peak <= 2 * csr_bytes + cache_mb * 2**20, (peak, csr_bytes)
    assert fitted.score(X, y) > 0.9


# -- bad input -------------------------------------------------------------------------------
def test_sparse_rows_with_nan_are_refused():
    X = sparse_rows(50, 10, 0.3, 23)
    X.data[0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        SparseELMClassifier().fit(X, np.arange(50) % 2)
    with pytest.raises(ValueError, match="NaN or infinite"):
        Kernel("gaussian").block(X, X)


def test_unsupported_sparse_format_is_refused_by_the_kernels():
    X = sparse_rows(20, 10, 0.3, 24).todia()
    with pytest.raises(ValueError, match=r"'dia' format; expected one of \('csr', 'csc'\)"):
        as_csr32(X)


def test_feature_selection_refuses_sparse_rows_too_large_to_densify():
    n = 2
    d = DENSE_SELECTION_BYTES // (8 * n) + 1
    X = sp.csr_matrix((np.ones(2), ([0, 1], [0, d - 1])), shape=(n, d))
    with pytest.raises(ValueError, match="feature selection .* dense feature columns"):
        FELMClassifier().fit(X, [0, 1])


def test_working_set_solver_refuses_sparse_rows():
    X = sparse_rows(50, 10, 0.3, 25)
    with pytest.raises(ValueError, match="solver='working_set' reads dense rows"):
        SparseELMClassifier(solver="working_set").fit(X, np.arange(50) % 2)


def test_solve_kernel_dual_from_csr_equals_dense():
    X = sparse_rows(1500, 60, 0.1, 26)
    t = np.where(labels(X, 2, 27) == 1, 1.0, -1.0)
    C, tol = 1.0, 1e-6
    kw = dict(kernel=Kernel("gaussian", sigma=1.0), C=C, tol=tol, cache_size=20, shrinking=True)
    a_s, _, conv_s, g_s = solve_kernel_dual(X, t, max_iter=-1, **kw)
    # the dense rows' own source (at 10 % nonzeros "auto" would read them as CSR too)
    a_d, _, conv_d, g_d = solve_kernel_dual(X.toarray(), t, max_iter=-1, column_source="rows", **kw)
    assert conv_s and conv_d
    # the objectives 0.5 a'(g - 1) ... within n C tol of the optimum each
    obj = [0.5 * a @ (g + 1.0) - a.sum() for a, g in ((a_s, g_s), (a_d, g_d))]
    assert abs(obj[0] - obj[1]) <= 2 * X.shape[0] * C * tol
