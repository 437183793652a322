"""ONNX export (issue 29, item 2): every family exported, run in ONNX Runtime on test
rows, gives elmscale's decision values (1e-4 relative in float32) and identical labels."""

import numpy as np
import onnxruntime as ort
import pytest
from sklearn.datasets import make_classification
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import MinMaxScaler, SplineTransformer

import elmscale
from elmscale.io.onnx_export import UnsupportedModelError


@pytest.fixture(scope="module")
def data():
    X, y = make_classification(260, 6, n_informative=4, n_redundant=0, n_classes=3, random_state=0)
    X = (X / np.abs(X).max(axis=0)).astype(np.float32)
    return X[:200], y[:200], X[200:], y[200:]


def run_onnx(proto, X):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {session.get_inputs()[0].name: X})))


def assert_close(got, want):
    """1e-4 relative, entries near 0 measured against the largest magnitude."""
    want = np.asarray(want)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def check_classifier(model, data, binary=False):
    X, y, X_test, _ = data
    if binary:
        y = y % 2
    model.fit(X, y)
    out = run_onnx(elmscale.to_onnx(model), X_test)
    assert_close(out["decision"], model.decision_function(X_test))
    np.testing.assert_array_equal(out["label"], model.predict(X_test))
    return out


def check_regressor(model, data):
    X, _, X_test, _ = data
    model.fit(X, 0.5 * X[:, 0] - X[:, 1] + 0.3)
    out = run_onnx(elmscale.to_onnx(model), X_test)
    assert_close(out["prediction"], model.predict(X_test))


@pytest.mark.parametrize("hidden", ["sigmoid", "sinusoid", "multiquadric", "gaussian"])
@pytest.mark.parametrize("binary", [False, True])
def test_elm_classifier_random_nodes(data, hidden, binary):
    check_classifier(
        elmscale.ELMClassifier(hidden=hidden, n_hidden=40, C=10, random_state=0), data, binary
    )


@pytest.mark.parametrize("kernel", ["gaussian", "laplacian", "polynomial", "mg"])
def test_elm_classifier_kernel(data, kernel):
    check_classifier(elmscale.ELMClassifier(kernel=kernel, C=10, tau=0.3), data)


@pytest.mark.parametrize("kernel", [None, "gaussian"])
def test_elm_regressor(data, kernel):
    params = {"kernel": kernel} if kernel else {"hidden": "sigmoid", "random_state": 0}
    check_regressor(elmscale.ELMRegressor(n_hidden=40, C=10, **params), data)


def test_sparse_elm_kernel_binary_and_one_vs_one(data):
    out = check_classifier(elmscale.SparseELMClassifier(C=10), data, binary=True)
    assert out["decision"].ndim == 1
    out = check_classifier(elmscale.SparseELMClassifier(kernel="laplacian", C=10), data)
    assert out["decision"].shape[1] == 3


def test_sparse_elm_random_nodes(data):
    check_classifier(
        elmscale.SparseELMClassifier(hidden="multiquadric", n_hidden=30, C=10, random_state=0),
        data,
    )


def test_string_labels(data):
    X, y, X_test, _ = data
    model = elmscale.SparseELMClassifier(C=10).fit(X, np.array(["a", "b", "c"])[y])
    out = run_onnx(elmscale.to_onnx(model), X_test)
    assert out["label"].dtype == object
    np.testing.assert_array_equal(out["label"], model.predict(X_test))


@pytest.mark.parametrize("ensemble", ["BRELM", "GBRELM", "GGBRELM", "KBRELM"])
@pytest.mark.parametrize("binary", [False, True])
def test_boosting_ridge(data, ensemble, binary):
    params = {} if ensemble == "KBRELM" else {"random_state": 0, "n_hidden": 20}
    classifier = getattr(elmscale, f"{ensemble}Classifier")(n_estimators=3, **params)
    check_classifier(classifier, data, binary)
    if not binary:
        check_regressor(getattr(elmscale, f"{ensemble}Regressor")(n_estimators=3, **params), data)


@pytest.mark.parametrize("binary", [False, True])
def test_flsa_svm(data, binary):
    check_classifier(elmscale.FLSASVMClassifier(n_support=15), data, binary)
    if binary:
        check_regressor(elmscale.FLSASVMRegressor(n_support=15), data)


@pytest.mark.parametrize("binary", [False, True])
def test_felm_and_fkelm(data, binary):
    felm = elmscale.FELMClassifier(n_hidden=30, random_state=0)
    check_classifier(felm, data, binary)
    fkelm = elmscale.FKELMClassifier()
    check_classifier(fkelm, data, binary)
    # the masks matter: some pair keeps fewer than all features
    assert not np.asarray(fkelm.pair_masks_).all() or not np.asarray(felm.pair_masks_).all()


def test_pipeline_with_a_scaler_through_skl2onnx(data):
    import skl2onnx

    X, y, X_test, _ = data
    X_raw, X_test_raw = 3.0 * X + 1.0, 3.0 * X_test + 1.0
    sparse = elmscale.SparseELMClassifier(C=10, probability=True)
    pipe = make_pipeline(MinMaxScaler((-1, 1)), sparse).fit(X_raw, y)
    elmscale.to_onnx(pipe.steps[-1][1])  # registers the converters as a side effect too
    proto = skl2onnx.to_onnx(pipe, X_raw[:1].astype(np.float32))
    out = run_onnx(proto, X_test_raw)
    assert_close(out["decision"], pipe.decision_function(X_test_raw))
    np.testing.assert_array_equal(out["label"], pipe.predict(X_test_raw))
    np.testing.assert_allclose(
        out["probabilities"], pipe.predict_proba(X_test_raw), rtol=1e-4, atol=1e-6
    )
    out = run_onnx(elmscale.to_onnx(pipe), X_test_raw)  # the same through elmscale
    np.testing.assert_array_equal(out["label"], pipe.predict(X_test_raw))


def test_unsupported_models_are_clear_errors(data):
    X, y, _, _ = data
    with pytest.raises(UnsupportedModelError, match="LogisticRegression has no ONNX export"):
        elmscale.to_onnx(LogisticRegression().fit(X, y))
    with pytest.raises(UnsupportedModelError, match="ELMClassifier is not a fitted"):
        elmscale.to_onnx(elmscale.ELMClassifier())
    pipe = make_pipeline(SplineTransformer(), elmscale.SparseELMClassifier()).fit(X, y)
    with pytest.raises(UnsupportedModelError, match="SplineTransformer"):
        elmscale.to_onnx(pipe)


def test_export_command_writes_the_onnx_of_a_model_file(tmp_path, data):
    """`elmscale train` (its model file holds the paper's Scaler and the estimator), then
    `elmscale export`: ONNX Runtime gives the loaded model's labels and decision values."""
    from elmscale.app.cli import main

    X, y, X_test, _ = data
    names = ["a", "b", "c", "d", "e", "f"]
    rows = [",".join([*names, "target"])] + [
        ",".join([*(f"{10 * v:.6f}" for v in x), ["no", "yes", "maybe"][t]]) for x, t in zip(X, y)
    ]
    (tmp_path / "train.csv").write_text("\n".join(rows) + "\n")
    model_file, out = tmp_path / "m.elm", tmp_path / "onnx" / "m.onnx"
    args = ["train", str(tmp_path / "train.csv"), str(model_file), "--label", "target"]
    assert main([*args, "-p", "n_hidden=30", "-p", "random_state=0"]) == 0
    assert main(["export", str(model_file), str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.onnx"]  # no temporary left
    model = elmscale.load(model_file)
    X_rows = (10 * X_test).astype(np.float32)
    result = run_onnx(__import__("onnx").load(str(out)), X_rows)
    np.testing.assert_array_equal(result["label"], model.predict(X_rows))
    assert_close(result["decision"], model.decision_function(X_rows))


def test_export_command_errors_name_the_file(tmp_path, capsys):
    from elmscale.app.cli import main

    assert main(["export", str(tmp_path / "missing.elm"), str(tmp_path / "m.onnx")]) != 0
    assert "missing.elm" in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()


CALIBRATED = {
    "ELM (one_vs_rest)": lambda: elmscale.ELMClassifier(n_hidden=30, C=10, random_state=0),
    "SparseELM (pairwise)": lambda: elmscale.SparseELMClassifier(C=10),
    "FLSA-SVM (one_vs_rest)": lambda: elmscale.FLSASVMClassifier(n_support=15),
    "BRELM (one_vs_rest)": lambda: elmscale.BRELMClassifier(n_estimators=3, random_state=0),
    "FKELM (pairwise)": lambda: elmscale.FKELMClassifier(),
}


@pytest.mark.parametrize("name", sorted(CALIBRATED))
@pytest.mark.parametrize("binary", [False, True])
def test_calibrated_probabilities(data, name, binary):
    """probability=True: a third output, predict_proba's values (1e-4 relative)."""
    model = CALIBRATED[name]().set_params(probability=True)
    out = check_classifier(model, data, binary)
    want = model.predict_proba(data[2])
    assert out["probabilities"].dtype == np.float32 and out["probabilities"].shape == want.shape
    np.testing.assert_allclose(out["probabilities"], want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(out["probabilities"].sum(axis=1), 1.0, rtol=1e-5)


@pytest.mark.parametrize("binary", [False, True])
def test_far_rows_probabilities_are_clipped_as_elmscales(data, binary):
    """A far row's sigmoids round to 0 or 1; both clip them to [1e-7, 1 - 1e-7] (LIBSVM's),
    binary (sparse ELM) and one-vs-rest (ELM) alike."""
    X, y, _, _ = data
    make = elmscale.SparseELMClassifier if binary else elmscale.ELMClassifier
    model = make(kernel="polynomial", C=10, probability=True).fit(X, y % 2 if binary else y)
    far = np.stack([np.full(X.shape[1], 50.0), np.full(X.shape[1], -50.0)]).astype(np.float32)
    want = model.predict_proba(far)
    assert want.min() == pytest.approx(1e-7, rel=0.5)
    got = run_onnx(elmscale.to_onnx(model), far)["probabilities"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-12)
    assert got.min() > 0


def test_regressor_pipeline_through_skl2onnx(data):
    import skl2onnx

    X, _, X_test, _ = data
    y = 0.5 * X[:, 0] - X[:, 1] + 0.3
    pipe = make_pipeline(MinMaxScaler((-1, 1)), elmscale.FLSASVMRegressor(n_support=15))
    pipe.fit(3.0 * X, y)
    elmscale.to_onnx(pipe)
    out = run_onnx(skl2onnx.to_onnx(pipe, X[:1]), 3.0 * X_test)
    assert_close(out["prediction"], pipe.predict(3.0 * X_test))
