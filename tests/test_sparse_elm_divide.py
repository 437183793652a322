"""The kernel sparse ELM on Parquet by divide and conquer on Dask (kernel k-means parts,
sub-solves on the workers, the global solve here from their duals)."""

from __future__ import annotations

import _datasets
import numpy as np
import pytest

from elmscale import SparseELMClassifier, open_parquet
from elmscale.data import (
    Scaler,
    generate_classification,
    load,
    write_generated_parquet,
    write_parquet,
)
from elmscale.distributed import dataplane
from elmscale.distributed.divide_conquer import PHASES, partition
from elmscale.features.kernels import Kernel
from elmscale.solvers.kernel_kmeans import kernel_kmeans, nearest_centre

pytestmark = pytest.mark.timeout(120)

TOL = 1e-3


@pytest.fixture(scope="module")
def binary_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("divide") / "binary"
    write_generated_parquet(out, 5_000, 4, 2, random_state=5, rows_per_file=2_500)
    return open_parquet(out, label="label")


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory):
    out = tmp_path_factory.mktemp("divide") / "three"
    write_generated_parquet(out, 4_500, 4, 3, random_state=6, rows_per_file=1_500)
    return open_parquet(out, label="label")


def _model(**kw):
    params = {"sigma": 0.5, "C": 1.0, "tol": TOL, "random_state": 0}
    params.update(kw)
    return SparseELMClassifier(**params)


def _same_optimum(divided, single, held_out):
    """The objectives within tol (relative) and the predictions on held-out rows alike."""
    rel = np.abs(divided.objective_ - single.objective_) / np.abs(single.objective_)
    assert np.all(rel <= TOL), rel
    assert divided.converged_.all() and np.all(divided.kkt_violation_ <= TOL)
    agree = np.mean(divided.predict(held_out) == single.predict(held_out))
    assert agree >= 0.995, agree


def _status(model, n_rows, n_pairs):
    assert model.n_iter_.shape == (n_pairs,) and np.all(model.n_iter_ >= 0)
    assert model.sub_iter_.shape == (model.n_parts_, n_pairs)
    assert model.part_sizes_.sum() == n_rows and np.all(model.part_sizes_ > 0)
    assert model.phase_seconds_.shape == (len(PHASES),) and np.all(model.phase_seconds_ >= 0)


@pytest.mark.parametrize(
    ("data", "n_classes", "n_parts"), [("binary_set", 2, 3), ("three_classes", 3, 2)]
)
def test_divide_and_conquer_is_the_single_process_optimum(
    request, dask_client, data, n_classes, n_parts
):
    dataset = request.getfixturevalue(data)
    X, y = dataset.read()
    single = _model().fit(X, y)
    divided = _model().fit(dataset, client=dask_client, n_parts=n_parts)
    assert divided.n_parts_ == n_parts
    n_pairs = n_classes * (n_classes - 1) // 2
    _status(divided, X.shape[0], n_pairs)
    np.testing.assert_array_equal(divided.classes_, single.classes_)
    held_out = generate_classification(2_000, 4, n_classes, random_state=50 + n_classes).X
    _same_optimum(divided, single, held_out)


@pytest.mark.needs_shared
def test_cod_rna(dask_client, tmp_path):
    data = load(_datasets.shared_data("cod-rna", "codrna.csv"))
    order = np.random.default_rng(0).permutation(data.n_samples)
    train, test = order[:6_000], order[6_000:10_000]
    scaler = Scaler().fit(data.X[train])
    X_tr, X_te = scaler.transform(data.X[train]), scaler.transform(data.X[test])
    path = write_parquet(X_tr, tmp_path / "codrna.parquet", y=data.y[train], row_group_size=1_500)
    single = _model().fit(X_tr, data.y[train])
    divided = _model().fit(open_parquet(path, label="label"), client=dask_client, n_parts=4)
    _same_optimum(divided, single, X_te)


def test_parts_are_a_function_of_the_rows_and_the_seed(binary_set, dask_client):
    X, _ = binary_set.read()
    kernel = Kernel("gaussian", sigma=0.5)
    parts, n = partition(X, kernel, 4, seed=11, n_sample=500)
    again, _ = partition(X, kernel, 4, seed=11, n_sample=500)
    np.testing.assert_array_equal(parts, again)
    assert n == 4 and set(np.unique(parts)) == set(range(4))
    other, _ = partition(X, kernel, 4, seed=12, n_sample=500)
    assert not np.array_equal(parts, other)
    # the assignment computed on the workers is the one computed here
    centres, labels = kernel_kmeans(kernel, X[:500], 3, seed=1)
    here = kernel.block_matvec(X, centres.sample, centres.weights)
    there = dataplane.kernel_matvec(
        binary_set, centres.sample, centres.weights, kernel, client=dask_client
    )
    np.testing.assert_array_equal(
        nearest_centre(there, centres.centre_sq), nearest_centre(here, centres.centre_sq)
    )
    # the sample's own labels are its nearest centres: a fixed point of Lloyd's step
    np.testing.assert_array_equal(nearest_centre(here[:500], centres.centre_sq), labels)
    # a whole fit on the cluster: the same parts and model each time
    first = _model(random_state=3).fit(binary_set, client=dask_client, n_parts=2)
    second = _model(random_state=3).fit(binary_set, client=dask_client, n_parts=2)
    np.testing.assert_array_equal(first.part_sizes_, second.part_sizes_)
    np.testing.assert_array_equal(first.dual_coef_, second.dual_coef_)


@pytest.mark.parametrize("bad", [-1, 2.5, "many", True, None])
def test_bad_n_parts_is_named(binary_set, dask_client, bad):
    with pytest.raises(ValueError, match="n_parts"):
        _model().fit(binary_set, client=dask_client, n_parts=bad)


def test_more_parts_only_where_divide_and_conquer_runs(binary_set, dask_client):
    X, y = binary_set.read()
    with pytest.raises(ValueError, match="n_parts=3.*Dask"):
        _model().fit(X, y, n_parts=3)
    with pytest.raises(ValueError, match="n_parts=3.*Dask"):
        _model().fit(binary_set, n_parts=3)
    with pytest.raises(ValueError, match="n_parts=2.*hidden"):
        _model(hidden="sigmoid").fit(binary_set, client=dask_client, n_parts=2)


@pytest.mark.parametrize("n_parts", [0, 1])
def test_one_part_is_the_plain_path(binary_set, dask_client, n_parts):
    X, y = binary_set.read()
    single = _model().fit(X, y)
    plain = _model().fit(binary_set, client=dask_client, n_parts=n_parts)
    np.testing.assert_array_equal(plain.support_, single.support_)
    np.testing.assert_array_equal(plain.dual_coef_, single.dual_coef_)
    np.testing.assert_array_equal(plain.n_iter_, single.n_iter_)
    assert plain.n_parts_ == 1 and not hasattr(plain, "phase_seconds_")


def test_auto_is_the_workers_threads_above_a_part_of_rows(binary_set, dask_client):
    # 5,000 rows: one AUTO_PART_ROWS part, so gathered and solved here
    auto = _model().fit(binary_set, client=dask_client)
    assert auto.n_parts_ == 1
    # refitting forgets the status of an earlier divided fit
    divided = _model().fit(binary_set, client=dask_client, n_parts=2)
    assert hasattr(divided, "phase_seconds_")
    divided.fit(binary_set, client=dask_client, n_parts=1)
    assert divided.n_parts_ == 1 and not hasattr(divided, "sub_iter_")
