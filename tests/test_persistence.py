"""Model files: round trips, no pickle, and clear errors for bad files."""

import hashlib
import io
import json
import zipfile

import numpy as np
import pytest
from _problems import nonlinear_problem
from sklearn.pipeline import make_pipeline

import elmscale
from elmscale import ELMClassifier, ELMRegressor, ModelFileError, SparseELMClassifier
from elmscale.data import Scaler
from elmscale.io.model_files import FORMAT_VERSION

MODELS = [
    ELMClassifier(n_hidden=40, random_state=0),
    ELMClassifier(hidden="gaussian", n_hidden=30, random_state=1),
    ELMClassifier(kernel="laplacian", sigma=0.7),
    ELMRegressor(n_hidden=30, random_state=2),
    ELMRegressor(kernel="polynomial", degree=2),
    SparseELMClassifier(sigma=0.5, C=10),
    SparseELMClassifier(hidden="sigmoid", n_hidden=30, random_state=3),
]


def _fitted(model):
    X, y = nonlinear_problem(150, d=4, n_classes=3, seed=0)
    if isinstance(model, ELMRegressor):
        y = X[:, 0] * 2 - X[:, 1]
    else:
        y = np.array(["low", "mid", "high"])[y]
    return model.fit(X, y), X


@pytest.mark.parametrize("model", MODELS, ids=repr)
def test_save_load_gives_identical_predictions(model, tmp_path):
    model, X = _fitted(model)
    path = tmp_path / "model.elm"
    model.save(path)
    loaded = elmscale.load(path)
    assert type(loaded) is type(model)
    assert loaded.get_params() == model.get_params()
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    if hasattr(model, "classes_"):
        np.testing.assert_array_equal(loaded.classes_, model.classes_)
    assert [p.name for p in tmp_path.iterdir()] == ["model.elm"]


def test_pipeline_with_scaler_round_trips(tmp_path):
    X, y = nonlinear_problem(200, d=3, seed=1)
    X = X * 50 + 7
    pipe = make_pipeline(Scaler(), ELMClassifier(n_hidden=50, random_state=0)).fit(X, y)
    elmscale.save(pipe, tmp_path / "pipe.elm")
    loaded = elmscale.load(tmp_path / "pipe.elm")
    np.testing.assert_array_equal(loaded.predict(X), pipe.predict(X))
    np.testing.assert_array_equal(loaded[0].data_min_, pipe[0].data_min_)


def test_a_bare_scaler_round_trips(tmp_path):
    """A transformer saved on its own loads (its check transforms a row; it has no
    ``predict``, which the check asked for before: the page listed it as savable)."""
    X = nonlinear_problem(200, d=3, seed=2)[0] * 50 + 7
    scaler = Scaler().fit(X)
    elmscale.save(scaler, tmp_path / "scaler.elm")
    loaded = elmscale.load(tmp_path / "scaler.elm")
    assert type(loaded) is Scaler
    np.testing.assert_array_equal(loaded.transform(X), scaler.transform(X))


def test_files_hold_json_and_npy_only(tmp_path):
    model, _ = _fitted(ELMClassifier(n_hidden=20, random_state=0))
    model.save(tmp_path / "m.elm")
    with zipfile.ZipFile(tmp_path / "m.elm") as zf:
        names = zf.namelist()
        meta = json.loads(zf.read("metadata.json"))
        for name in names:
            data = zf.read(name)
            if name.endswith(".npy"):
                # loads with pickle refused: no object arrays anywhere
                np.load(io.BytesIO(data), allow_pickle=False)
            else:
                assert name in ("metadata.json", "SHA256SUMS")
            assert b"\x80\x04\x95" not in data and b"\x80\x05\x95" not in data  # pickle frames
    assert meta["format"] == "elmscale-model" and meta["format_version"] == FORMAT_VERSION
    assert meta["library_version"] == elmscale.__version__
    assert meta["model"]["estimator"] == "ELMClassifier"
    assert meta["model"]["params"]["n_hidden"] == 20
    assert meta["model"]["layers"]["hidden_layer_"]["kind"] == "sigmoid"


def _rewrite(src, dst, edit):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, edit(info.filename, zin.read(info)))


def test_tampered_file_is_refused(tmp_path):
    model, _ = _fitted(ELMClassifier(n_hidden=20, random_state=0))
    model.save(tmp_path / "m.elm")

    def flip_coef(name, data):
        if name.endswith("coef_.npy"):
            data = data[:-1] + bytes([data[-1] ^ 0xFF])
        return data

    _rewrite(tmp_path / "m.elm", tmp_path / "bad.elm", flip_coef)
    with pytest.raises(ModelFileError, match=r"bad\.elm.*coef_.*checksum"):
        elmscale.load(tmp_path / "bad.elm")


def test_truncated_file_is_refused(tmp_path):
    model, _ = _fitted(ELMClassifier(n_hidden=20, random_state=0))
    model.save(tmp_path / "m.elm")
    data = (tmp_path / "m.elm").read_bytes()
    (tmp_path / "cut.elm").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelFileError, match=r"cut\.elm.*truncated"):
        elmscale.load(tmp_path / "cut.elm")
    (tmp_path / "text.elm").write_text("not a model")
    with pytest.raises(ModelFileError, match="text.elm"):
        elmscale.load(tmp_path / "text.elm")


def _members(path):
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


def _write_with_checksums(members, path):
    """A model file whose checksums are right: only the content check can refuse it."""
    members = dict(members)
    members["SHA256SUMS"] = "".join(
        f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in members.items() if n != "SHA256SUMS"
    ).encode()
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in members.items():
            zf.writestr(n, d)


def test_newer_format_is_refused_with_advice(tmp_path):
    model, _ = _fitted(ELMClassifier(n_hidden=20, random_state=0))
    model.save(tmp_path / "m.elm")
    members = _members(tmp_path / "m.elm")
    meta = json.loads(members["metadata.json"])
    meta["format_version"] = FORMAT_VERSION + 1
    members["metadata.json"] = json.dumps(meta).encode()
    _write_with_checksums(members, tmp_path / "new.elm")
    with pytest.raises(ModelFileError, match=r"format version 2.*upgrade elmscale"):
        elmscale.load(tmp_path / "new.elm")


def test_object_arrays_in_a_file_are_never_unpickled(tmp_path):
    model, _ = _fitted(ELMClassifier(n_hidden=20, random_state=0))
    model.save(tmp_path / "m.elm")
    members = _members(tmp_path / "m.elm")
    buf = io.BytesIO()
    np.save(buf, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    name = next(n for n in members if n.endswith("classes_.npy"))
    members[name] = buf.getvalue()
    _write_with_checksums(members, tmp_path / "obj.elm")
    with pytest.raises(ModelFileError, match="not a plain array"):
        elmscale.load(tmp_path / "obj.elm")


def test_unfitted_or_foreign_models_are_not_saved(tmp_path):
    from sklearn.exceptions import NotFittedError
    from sklearn.linear_model import LogisticRegression

    with pytest.raises(NotFittedError):
        ELMClassifier().save(tmp_path / "m.elm")
    X, y = nonlinear_problem(50, seed=2)
    with pytest.raises(TypeError, match="cannot save a LogisticRegression"):
        elmscale.save(LogisticRegression().fit(X, y), tmp_path / "m.elm")
    assert list(tmp_path.iterdir()) == []


SPARSE_MODELS = [
    SparseELMClassifier(sigma=0.5, C=10),
    ELMClassifier(kernel="gaussian", sigma=0.7),
]


def _sparse_problem():
    """A problem of sparse rows (about 30 % nonzero), as CSR."""
    import scipy.sparse as sp

    X, y = nonlinear_problem(150, d=12, n_classes=3, seed=4)
    X[np.random.default_rng(4).random(X.shape) < 0.7] = 0.0
    return sp.csr_matrix(X), y


@pytest.mark.parametrize("model", SPARSE_MODELS, ids=repr)
def test_a_model_fitted_on_sparse_rows_round_trips_with_its_rows_sparse(model, tmp_path):
    import scipy.sparse as sp

    X, y = _sparse_problem()
    model.fit(X, y)
    kept = [name for name, value in vars(model).items() if sp.issparse(value)]
    assert kept, "the fit on CSR rows keeps no sparse rows: this test checks nothing"
    model.save(tmp_path / "m.elm")
    meta = json.loads(_members(tmp_path / "m.elm")["metadata.json"])
    assert sorted(meta["model"]["sparse_arrays"]) == sorted(kept)
    loaded = elmscale.load(tmp_path / "m.elm")
    for name in kept:
        assert sp.issparse(getattr(loaded, name))
        assert (getattr(loaded, name) != getattr(model, name)).nnz == 0
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))


def test_sparse_parts_that_do_not_fit_their_shape_are_refused(tmp_path):
    X, y = _sparse_problem()
    SparseELMClassifier(sigma=0.5, C=10).fit(X, y).save(tmp_path / "m.elm")
    members = _members(tmp_path / "m.elm")
    name = next(n for n in members if n.endswith("support_vectors_.indices.npy"))
    indices = np.load(io.BytesIO(members[name]))
    indices[0] = 10_000  # a column far outside the 12 features: read out of range if built
    buf = io.BytesIO()
    np.save(buf, indices)
    members[name] = buf.getvalue()
    _write_with_checksums(members, tmp_path / "bad.elm")
    with pytest.raises(ModelFileError, match=r"bad\.elm.*support_vectors_.*CSR parts"):
        elmscale.load(tmp_path / "bad.elm")
