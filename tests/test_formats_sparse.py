"""LIBSVM files stay sparse when they are (``load_libsvm(dense="auto")``): the density rule,
the memory bound, the forced choices, and the shared sets that stay dense."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from _datasets import shared_data
from sklearn.datasets import dump_svmlight_file

from elmscale.core.errors import DataError
from elmscale.data import load, load_libsvm, text_formats
from elmscale.data.text_formats import SPARSE_DENSITY_THRESHOLD, sparse_is_kept


def _write(path, density: float, n_rows: int = 200, n_features: int = 50, seed: int = 0):
    """A LIBSVM file of ``n_rows x n_features`` with ``density`` of the cells nonzero."""
    X = sp.random(n_rows, n_features, density=density, format="csr", random_state=seed)
    X.data = np.round(X.data * 16 - 8) / 8 + 1 / 16  # written exactly (%.16g), never zero
    y = np.where(np.arange(n_rows) % 2, 1.0, -1.0)
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return X.toarray(), y


def test_a_sparse_file_is_read_as_csr_and_a_dense_one_as_an_array(tmp_path):
    sparse_file, dense_file = tmp_path / "sparse.svm", tmp_path / "dense.svm"
    X_sparse, y = _write(sparse_file, density=0.03)
    X_dense, _ = _write(dense_file, density=0.5)
    # n_features: the file's last column may hold no nonzero
    sparse = load_libsvm(sparse_file, n_features=50)
    dense = load(dense_file, n_features=50)
    assert sp.isspmatrix_csr(sparse.X) and sparse.X.has_sorted_indices
    assert sparse.X.dtype == np.float64 and repr(sparse).endswith("sparse)")
    assert isinstance(dense.X, np.ndarray) and repr(dense).endswith("dense)")
    np.testing.assert_array_equal(sparse.X.toarray(), X_sparse)
    np.testing.assert_array_equal(dense.X, X_dense)
    np.testing.assert_array_equal(sparse.y, y)
    # forced either way
    assert isinstance(load_libsvm(sparse_file, n_features=50, dense=True).X, np.ndarray)
    assert sp.isspmatrix_csr(load(dense_file, n_features=50, dense=False).X)


def test_the_rule_is_the_documented_density_and_memory_bound(monkeypatch):
    cells = 1000 * 100
    below = int(SPARSE_DENSITY_THRESHOLD * cells) - 1
    assert sparse_is_kept(1000, 100, below)
    assert not sparse_is_kept(1000, 100, below + 1)  # exactly 10 %: dense
    assert not sparse_is_kept(0, 100, 0)
    # a dense array over the memory bound stays sparse at any density
    monkeypatch.setattr(text_formats, "DENSE_MAX_BYTES", 8 * cells - 1)
    assert sparse_is_kept(1000, 100, cells)


def test_the_memory_bound_keeps_a_dense_file_sparse(tmp_path, monkeypatch):
    path = tmp_path / "dense.svm"
    _write(path, density=0.5)
    monkeypatch.setattr(text_formats, "DENSE_MAX_BYTES", 200 * 50 * 8 - 1)
    assert sp.isspmatrix_csr(load_libsvm(path, n_features=50).X)


def test_a_bad_dense_parameter_is_named(tmp_path):
    path = tmp_path / "a.svm"
    _write(path, density=0.5)
    with pytest.raises(DataError, match=r"a\.svm: parameter dense='yes'; expected 'auto', True"):
        load_libsvm(path, dense="yes")


@pytest.mark.needs_shared
@pytest.mark.parametrize(
    "name", [("a9a", "a9a"), ("mushrooms", "mushrooms"), ("satimage", "satimage.scale")]
)
def test_the_shared_libsvm_sets_stay_dense(name):
    """The reference runs' LIBSVM sets are all above 10 % nonzero: their callers get the
    dense arrays they got before ``dense="auto"``."""
    data = load(shared_data(*name))
    assert isinstance(data.X, np.ndarray)
