"""Scoring in single precision (issue 43, item 1): gaussian and laplacian kernel values in
float32, their sums in float64, within the documented bound of the float64 product; the
sparse ELM's ``precision`` option, its model files and its ONNX graph."""

import json

import numpy as np
import onnxruntime as ort
import pytest
from _reliability import zip_members, zip_of
from sklearn.datasets import make_classification

import elmscale
from elmscale import SparseELMClassifier
from elmscale.core.block_kernels import FLOAT32_PRODUCTS_MAX_ERROR, float32_products_error
from elmscale.features.kernels import (
    EXP32_RELATIVE,
    FLOAT32_EXP_FLOOR,
    Kernel,
    float32_error_bound,
)


def _rows(n, d, seed, spread=1.0):
    return (np.random.default_rng(seed).uniform(-1, 1, (n, d)) * spread).astype(np.float32)


@pytest.mark.parametrize("kind", ["gaussian", "laplacian"])
@pytest.mark.parametrize("d", [1, 3, 8, 61])
@pytest.mark.parametrize("sigma", [0.05, 0.5, 4.0])
def test_single_products_within_the_bound(kind, d, sigma):
    """Every entry of the single product is within ``float32_error_bound`` of the double
    one, rows near and far (some past float32 exp's clamp at -87), coefficients of both
    signs and several outputs; the bound is within its closed form; and the single path
    is a different computation (some entry differs)."""
    A = np.vstack([_rows(300, d, 1), _rows(20, d, 2, spread=30.0)])
    B = _rows(1500, d, 3)
    coef = np.random.default_rng(4).normal(size=(1500, 3)) * 10.0
    kernel = Kernel(kind, sigma=sigma)
    double = kernel.block_matvec(A, B, coef)
    single = kernel.block_matvec(A, B, coef, precision="single")
    bound = float32_error_bound(kernel, A, B, coef)
    assert bound.shape == double.shape
    assert np.all(np.abs(single - double) <= bound)
    closed_form = (EXP32_RELATIVE + (1.25 * d + 6) * 2.0**-24 / np.e + FLOAT32_EXP_FLOOR) * np.abs(
        coef
    ).sum(axis=0)
    assert np.all(bound <= closed_form[None, :] * (1 + 1e-12))
    if sigma < 4.0:  # at the widest kernel some settings round alike
        assert np.any(single != double)


@pytest.mark.parametrize("d", [48, 300])
def test_single_products_of_wide_rows_by_float32_gemms_within_the_bound(d):
    """Wide gaussian rows of small norms: "single" takes float32 products
    (``float32_products_error`` within ``FLOAT32_PRODUCTS_MAX_ERROR``), near-duplicate rows
    included, and stays within ``float32_error_bound``, which adds their term; rows of
    large norms keep the fused kernel and its closed form."""
    rng = np.random.default_rng(d)
    B = rng.uniform(0.0, 1.0, (1500, d)).astype(np.float32)
    A = np.vstack([B[:100] + rng.normal(0, 1e-4, (100, d)), rng.uniform(0, 1, (200, d))])
    A = A.astype(np.float32)
    coef = rng.normal(size=(1500, 2)) * 10.0
    kernel = Kernel("gaussian", sigma=float(np.sqrt(d / 3.0)))
    largest = float(max(np.sum(A.astype(np.float64) ** 2, 1).max(), np.sum(B**2.0, 1).max()))
    products = float32_products_error(0, kernel.sigma, d, largest)
    assert 0.0 < products <= FLOAT32_PRODUCTS_MAX_ERROR
    double = kernel.block_matvec(A, B, coef)
    single = kernel.block_matvec(A, B, coef, precision="single")
    bound = float32_error_bound(kernel, A, B, coef)
    assert np.all(np.abs(single - double) <= bound) and np.any(single != double)
    fused_form = (EXP32_RELATIVE + (1.25 * d + 6) * 2.0**-24 / np.e + FLOAT32_EXP_FLOOR) * np.abs(
        coef
    ).sum(axis=0)
    wide_form = fused_form * (1 + products) + products * np.abs(coef).sum(axis=0)
    assert np.all(bound <= wide_form[None, :] * (1 + 1e-12))
    # the rows moved far from 0 (the same distances, large norms): float32 products would
    # pass the limit, so the fused kernel
    big_A, big_B = A + np.float32(100.0), B + np.float32(100.0)
    big = kernel
    big_bound = float32_error_bound(big, big_A, big_B, coef)
    assert np.all(big_bound <= fused_form[None, :] * (1 + 1e-12))
    big_single = big.block_matvec(big_A, big_B, coef, precision="single")
    assert np.all(np.abs(big_single - big.block_matvec(big_A, big_B, coef)) <= big_bound)


@pytest.mark.parametrize("kind", ["gaussian", "laplacian", "mg"])
def test_wide_single_scores_weight_the_solver_columns_own_values(kind):
    """``gemm_kernel_matvec32`` weights each value as it is made (``weighted_values32``):
    the same float32 values as the solver's columns (``signed_columns32``, unit labels),
    summed in float64, so only the order of the sums differs from the columns times
    ``coef`` (past more rows of ``B`` than one GEMM's, and threads on A's rows)."""
    from elmscale.core.block_kernels import GEMM_ROWS, gemm_kernel_matvec32, signed_columns32

    rng = np.random.default_rng(7)
    A = rng.uniform(0, 1, (700, 64)).astype(np.float32)
    B = rng.uniform(0, 1, (2 * GEMM_ROWS + 37, 64)).astype(np.float32)
    coef = rng.normal(size=(B.shape[0], 3))
    code, sigma, _, sigma_star, tau = Kernel(kind, sigma=3.0)._params()
    params = (code, sigma, sigma_star, tau)
    sq_a = np.einsum("ij,ij->i", A, A, dtype=np.float64)
    sq_b = np.einsum("ij,ij->i", B, B, dtype=np.float64)
    got = gemm_kernel_matvec32(A, sq_a, B, sq_b, params, coef, n_threads=2)
    values = np.empty((B.shape[0], A.shape[0]), np.float32)
    ones_a, ones_b = np.ones(A.shape[0], np.float32), np.ones(B.shape[0], np.float32)
    slots = np.arange(B.shape[0], dtype=np.int64)
    for lo in range(0, B.shape[0], GEMM_ROWS):  # the same float32 GEMMs, block by block
        hi = min(lo + GEMM_ROWS, B.shape[0])
        dots = B[lo:hi] @ A.T
        signed_columns32(
            dots, sq_b[lo:hi], sq_a, ones_b, ones_a, *params, values[lo:], slots, 0, hi - lo
        )
    expected = values.T.astype(np.float64) @ coef
    # float64 sums of the same terms in another order: a few units of 2^-53 of sum |terms|
    scale = values.T.astype(np.float64) @ np.abs(coef)
    assert np.all(np.abs(got - expected) <= 1e-13 * scale)


@pytest.mark.parametrize("kind", ["polynomial", "mg"])
def test_single_products_of_float64_kernels_are_the_double_ones(kind):
    A, B = _rows(50, 5, 1), _rows(400, 5, 2)
    coef = np.random.default_rng(3).normal(size=400)
    kernel = Kernel(kind, sigma=0.7, degree=2, sigma_star=3.0, tau=0.25)
    np.testing.assert_array_equal(
        kernel.block_matvec(A, B, coef, precision="single"), kernel.block_matvec(A, B, coef)
    )
    assert not float32_error_bound(kernel, A, B, coef).any()


def test_block_matvec_names_a_bad_precision():
    with pytest.raises(ValueError, match="precision must be one of"):
        Kernel("gaussian").block_matvec(_rows(2, 2, 0), _rows(3, 2, 1), np.ones(3), "half")


@pytest.fixture(scope="module")
def problem():
    X, y = make_classification(1600, 8, n_informative=6, n_redundant=0, n_classes=3, random_state=0)
    X = (X / np.abs(X).max(axis=0)).astype(np.float32)
    return X[:1000], y[:1000], X[1000:]


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian"])
def test_sparse_elm_single_scores_within_the_bound(problem, kernel):
    """The default scores in single precision: each pair's expansion within the bound of
    "double"'s, the same labels; the fitted model is the same (precision is scoring's)."""
    X, y, X_test = problem
    single = SparseELMClassifier(kernel=kernel, sigma=0.5, C=10).fit(X, y)
    assert single.precision == "single"
    double = SparseELMClassifier(kernel=kernel, sigma=0.5, C=10, precision="double").fit(X, y)
    np.testing.assert_array_equal(single.dual_coef_, double.dual_coef_)
    got, want = single._pair_scores(X_test), double._pair_scores(X_test)
    bound = float32_error_bound(
        single._kernel_obj(), X_test, single.support_vectors_, single.dual_coef_.T
    )
    assert np.all(np.abs(got - want) <= bound)
    assert np.any(got != want)
    np.testing.assert_array_equal(single.predict(X_test), double.predict(X_test))


def test_sparse_elm_names_a_bad_precision(problem):
    X, y, _ = problem
    with pytest.raises(ValueError, match="'precision' parameter"):
        SparseELMClassifier(precision="float16").fit(X, y)


def test_model_files_keep_the_precision(problem, tmp_path):
    """A saved model scores in its own precision; a file written before the option existed
    (no ``precision`` among its parameters) in float64, as it did then."""
    X, y, X_test = problem
    model = SparseELMClassifier(sigma=0.5, C=10).fit(X, y)
    elmscale.save(model, tmp_path / "single.elm")
    loaded = elmscale.load(tmp_path / "single.elm")
    assert loaded.precision == "single"
    np.testing.assert_array_equal(loaded.decision_function(X_test), model.decision_function(X_test))

    members = zip_members((tmp_path / "single.elm").read_bytes())
    meta = json.loads(members["metadata.json"])
    del meta["model"]["params"]["precision"]
    members["metadata.json"] = json.dumps(meta).encode()
    old = tmp_path / "old.elm"
    old.write_bytes(zip_of(members))
    reloaded = elmscale.load(old)
    assert reloaded.precision == "double"
    model.set_params(precision="double")
    np.testing.assert_array_equal(
        reloaded.decision_function(X_test), model.decision_function(X_test)
    )


@pytest.mark.parametrize("precision", ["single", "double"])
def test_onnx_graph_follows_the_precision(problem, precision):
    """ONNX Runtime gives the model's decision values in either precision (float32 output:
    1e-4 relative) and its labels."""
    X, y, X_test = problem
    model = SparseELMClassifier(sigma=0.5, C=10, precision=precision).fit(X, y)
    proto = elmscale.to_onnx(model)
    exps = [n for n in proto.graph.node if n.op_type == "Exp"]
    casts_to_float = [n for n in proto.graph.node if n.op_type == "Cast" and n.attribute[0].i == 1]
    assert exps
    assert (len(casts_to_float) > 1) == (precision == "single")  # the output's cast is one
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    label, decision = session.run(["label", "decision"], {"X": X_test})
    want = model.decision_function(X_test)
    np.testing.assert_allclose(decision, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    np.testing.assert_array_equal(label, model.predict(X_test))


@pytest.mark.parametrize("C", [0.3, 30.0])
def test_single_final_check_same_solution(C):
    """``check_precision="single"``: the final check certified from float32 values (the
    unsure rows' gradients exact), the same alpha as the exact check's to the bit, the
    gradient within the bound of the exact one and the KKT violation within tol."""
    from elmscale.solvers.dual_common import kkt_violation
    from elmscale.solvers.kernel_dual import ExactQ, solve_kernel_dual

    X = _rows(3000, 6, 7)
    t = np.where(np.sin(3 * X[:, 0]) + X[:, 1] ** 2 > 0.3, 1.0, -1.0)
    kernel = Kernel("gaussian", sigma=0.4)
    double_info, single_info = {}, {}
    alpha, _, converged, g = solve_kernel_dual(X, t, kernel=kernel, C=C, info=double_info)
    alpha_s, _, converged_s, g_s = solve_kernel_dual(
        X, t, kernel=kernel, C=C, check_precision="single", info=single_info
    )
    assert converged and converged_s
    np.testing.assert_array_equal(alpha_s, alpha)
    assert single_info["single_checks"] == 1 and double_info["single_checks"] == 0
    _, bound = ExactQ(X, t, kernel).gradient_single(alpha)
    assert np.all(np.abs(g_s - g) <= bound)
    assert kkt_violation(alpha, g_s, C) <= 1e-3


def test_single_final_check_gives_up_for_the_exact_one(monkeypatch):
    """When too many rows are unsure the exact float64 check decides, as with "double"."""
    from elmscale.solvers import kernel_dual

    X = _rows(2000, 6, 8)
    t = np.where(X[:, 0] * X[:, 1] > 0, 1.0, -1.0)
    kernel = Kernel("gaussian", sigma=0.4)
    monkeypatch.setattr(kernel_dual, "SINGLE_CHECK_UNSURE", 0.0)
    info = {}
    alpha, _, converged, g = kernel_dual.solve_kernel_dual(
        X, t, kernel=kernel, C=10.0, check_precision="single", info=info
    )
    exact = kernel_dual.solve_kernel_dual(X, t, kernel=kernel, C=10.0)
    assert converged and info["single_checks"] == 0
    np.testing.assert_array_equal(alpha, exact[0])
    np.testing.assert_array_equal(g, exact[3])
