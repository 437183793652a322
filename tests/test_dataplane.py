"""The Dask data plane on a real LocalCluster: cluster fits equal local fits, faults, CV."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _datasets import shared_data
from _faults import run_killing_a_worker
from sklearn.base import clone

from elmscale import (
    ConcatenatedLayers,
    DataError,
    ELMClassifier,
    ELMRegressor,
    HiddenLayer,
    SparseELMClassifier,
    dataplane,
    open_parquet,
)
from elmscale.data import Scaler, generate_classification, load, write_parquet
from elmscale.distributed.units import fold_of_rows
from elmscale.linalg.gram import accumulate_gram
from elmscale.linalg.ridge import solve_ridge
from elmscale.model_selection import cross_validate_path


def _to_parquet_dir(data, directory, n_files=3):
    """Write ``data`` as ``n_files`` Parquet files (the label in its own type)."""
    X = data.X.toarray() if hasattr(data.X, "toarray") else data.X
    bounds = np.linspace(0, len(X), n_files + 1).astype(int)
    for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        write_parquet(X[a:b], directory / f"part-{i}.parquet", y=data.y[a:b])
    return directory


@pytest.fixture(scope="session")
def real_sets(tmp_path_factory):
    """COD-RNA and a9a from ../shared/data, converted to Parquet directories."""
    sets = {}
    for name, rel in (("cod-rna", ("cod-rna", "codrna.csv")), ("a9a", ("a9a", "a9a"))):
        data = load(shared_data(*rel))
        sets[name] = _to_parquet_dir(data, tmp_path_factory.mktemp(name))
    return sets


@pytest.fixture(scope="session")
def generated(tmp_path_factory):
    data = generate_classification(200_000, n_features=8, random_state=0)
    return _to_parquet_dir(data, tmp_path_factory.mktemp("generated"), n_files=2)


def _rel(a, b):
    return np.abs(a - b).max() / np.abs(b).max()


@pytest.mark.needs_shared
@pytest.mark.parametrize("name", ["cod-rna", "a9a"])
def test_cluster_fit_equals_local_fit(real_sets, dask_client, name):
    raw = open_parquet(real_sets[name])
    scaler = dataplane.fit_scaler(raw, client=dask_client)
    X_raw, y = raw.read()
    local_scaler = Scaler().fit(X_raw.astype(np.float64))
    np.testing.assert_allclose(scaler.scale_, local_scaler.scale_, rtol=1e-12)
    ds = raw.scaled(scaler)
    X, _ = ds.read()
    model = ELMClassifier(n_hidden=300, precision="double", random_state=0)
    local = clone(model).fit(X, y)
    expected = local.predict(X)
    for units_per_worker in (1, 4):
        on_cluster = clone(model).fit(ds.with_units(2 * units_per_worker), client=dask_client)
        assert _rel(on_cluster.coef_, local.coef_) <= 1e-6
        np.testing.assert_array_equal(on_cluster.classes_, local.classes_)
        np.testing.assert_array_equal(
            dataplane.predict(on_cluster, ds, client=dask_client), expected
        )
    in_process = clone(model).fit(ds)  # no client: the same unit functions, here
    assert _rel(in_process.coef_, local.coef_) <= 1e-6


def test_single_precision_and_regression_on_a_dataset(generated, dask_client):
    ds = open_parquet(generated)
    X, y = ds.read()
    auto = ELMClassifier(n_hidden=100, random_state=1).fit(ds.with_units(4), client=dask_client)
    assert auto.precision_ == ELMClassifier(n_hidden=100, random_state=1).fit(X, y).precision_
    assert auto.score(X, y) > 0.85
    reg = ELMRegressor(n_hidden=100, precision="double", random_state=2)
    on_cluster = clone(reg).fit(ds, client=dask_client)
    local = clone(reg).fit(X, y.astype(float))
    assert _rel(on_cluster.coef_, local.coef_) <= 1e-6


def test_kernel_elm_and_sparse_elm_scoring_on_workers(tmp_path, dask_client):
    data = generate_classification(3_000, n_features=6, n_classes=3, random_state=4)
    ds = open_parquet(_to_parquet_dir(data, tmp_path, n_files=2))
    X, y = ds.read()
    kernel = ELMClassifier(kernel="gaussian", sigma=1.0, C=10.0)
    on_cluster = clone(kernel).fit(ds, client=dask_client)
    local = clone(kernel).fit(X, y)
    assert _rel(on_cluster.dual_coef_, local.dual_coef_) <= 1e-6
    np.testing.assert_allclose(
        dataplane.decision_function(on_cluster, ds, client=dask_client),
        local.decision_function(X),
        rtol=1e-9,
        atol=1e-9,
    )
    sparse = SparseELMClassifier(sigma=1.0, C=5.0).fit(X, y)
    np.testing.assert_array_equal(
        dataplane.predict(sparse, ds, client=dask_client), sparse.predict(X)
    )
    np.testing.assert_allclose(
        dataplane.decision_function(sparse, ds.with_units(5)),
        sparse.decision_function(X),
        rtol=1e-12,
    )


def test_concatenated_layers_gram_is_the_gram_of_stacked_outputs():
    data = generate_classification(2_000, random_state=5)
    layers = ConcatenatedLayers(tuple(HiddenLayer("sigmoid", 8, 40, seed) for seed in (1, 2, 3)))
    H = np.hstack([layer.transform(data.X).astype(np.float64) for layer in layers.layers])
    HtH, _, _ = accumulate_gram(
        layers, data.X, data.y[:, None].astype(float), block_rows=300
    ).ridge_terms()
    np.testing.assert_allclose(HtH, H.T @ H, rtol=1e-10)
    coef = np.random.default_rng(0).normal(size=120)
    np.testing.assert_allclose(layers.scores(data.X, coef), H @ coef, rtol=1e-5, atol=1e-6)


def test_folds_do_not_depend_on_units():
    whole = fold_of_rows(0, 10_000, 5, seed=3)
    parts = np.concatenate([fold_of_rows(a, 1_000, 5, seed=3) for a in range(0, 10_000, 1_000)])
    np.testing.assert_array_equal(whole, parts)
    assert np.all(np.abs(np.bincount(whole) - 2_000) < 150)
    assert not np.array_equal(whole, fold_of_rows(0, 10_000, 5, seed=4))


def test_one_pass_cv_equals_fold_by_fold_fits(generated, dask_client):
    ds = open_parquet(generated).with_units(6)
    X, y = ds.read()
    Cs = [0.1, 10.0, 1000.0]
    model = ELMClassifier(n_hidden=120, precision="double", random_state=7)
    result = cross_validate_path(model, ds, Cs, n_folds=3, fold_seed=2, client=dask_client)
    folds = fold_of_rows(0, len(y), 3, seed=2)
    for k in range(3):
        train, test = folds != k, folds == k
        fitted = clone(model).fit_path(X[train], y[train], Cs)
        expected = [est.score(X[test], y[test]) for est in fitted]
        np.testing.assert_allclose(result.split_scores[k], expected, atol=1e-12)
    assert result.best_C == Cs[int(np.argmax(result.mean_scores))]
    refit = clone(model).set_params(C=result.best_C).fit(X, y)
    assert _rel(result.best_estimator.coef_, refit.coef_) <= 1e-6
    local = cross_validate_path(model, ds, Cs, n_folds=3, fold_seed=2)
    np.testing.assert_allclose(local.split_scores, result.split_scores, atol=1e-12)
    # the Gram-only score is the mean squared error of the +1 / -1 targets
    mse = cross_validate_path(
        model, ds, Cs, n_folds=3, fold_seed=2, scoring="neg_mean_squared_error", client=dask_client
    )
    for k in range(3):
        fitted = clone(model).fit_path(X[folds != k], y[folds != k], Cs)
        t = np.where(y[folds == k] == 1, 1.0, -1.0)
        expected = [-np.mean((est.decision_function(X[folds == k]) - t) ** 2) for est in fitted]
        np.testing.assert_allclose(mse.split_scores[k], expected, rtol=1e-6)
    assert set(result.cv_results()) >= {
        "param_C",
        "mean_test_score",
        "rank_test_score",
        "split2_test_score",
    }


def test_dataset_gram_then_set_solution_is_the_fit(generated):
    ds = open_parquet(generated).with_units(3)
    model = ELMClassifier(n_hidden=50, C=3.0, precision="double", random_state=4)
    est = clone(model)
    layer, gram = est.dataset_gram(ds)
    assert est.classes_.tolist() == gram.classes.tolist() and est.n_features_in_ == 8
    HtH, HtT, _ = gram.ridge_terms(est.target_encoder_)
    assert est.set_solution(layer, solve_ridge(HtH, HtT, 3.0)) is est
    fitted = clone(model).fit(ds)
    np.testing.assert_array_equal(est.coef_, fitted.coef_)
    assert est.feature_map_ == fitted.hidden_layer_ == layer
    with pytest.raises(ValueError, match="random hidden nodes"):
        ELMClassifier(kernel="gaussian").dataset_gram(ds)
    with pytest.raises(TypeError, match="expected a ParquetDataset"):
        ELMClassifier().dataset_gram(np.zeros((3, 8)))


def test_worker_killed_during_a_reduction_does_not_change_the_fit(generated, dask_client):
    ds = open_parquet(generated).with_units(16)
    model = ELMClassifier(n_hidden=1000, precision="double", random_state=0)
    reference = clone(model).fit(ds, client=dask_client)
    # some units done, others running
    fitted = run_killing_a_worker(
        dask_client, lambda: clone(model).fit(ds, client=dask_client), settle=0.5
    )
    np.testing.assert_array_equal(fitted.coef_, reference.coef_)


def test_bad_input_on_the_cluster_is_named(tmp_path, dask_client):
    pq.write_table(
        pa.table({"a": [1.0, 2.0, None, 4.0], "b": [1.0, 2.0, 3.0, 4.0], "label": [0, 1, 0, 1]}),
        tmp_path / "nulls.parquet",
    )
    ds = open_parquet(tmp_path / "nulls.parquet")
    with pytest.raises(DataError, match=r"nulls\.parquet: column 'a' has 1 null"):
        ELMClassifier(n_hidden=5).fit(ds, client=dask_client)
    with pytest.raises(ValueError, match="y must be None when X is a ParquetDataset"):
        ELMClassifier(n_hidden=5).fit(ds, np.zeros(4))
    with pytest.raises(ValueError, match="client is used with a ParquetDataset"):
        ELMClassifier(n_hidden=5).fit(np.zeros((4, 2)), [0, 1, 0, 1], client=dask_client)
    pq.write_table(pa.table({"a": [1.0, 2.0], "label": [1, 1]}), tmp_path / "one.parquet")
    with pytest.raises(ValueError, match="needs at least 2 classes"):
        ELMClassifier(n_hidden=5).fit(open_parquet(tmp_path / "one.parquet"))
    unlabelled = open_parquet(tmp_path / "one.parquet", label=False)
    with pytest.raises(ValueError, match="has no label column"):
        ELMClassifier(n_hidden=5).fit(unlabelled)
    fitted = ELMClassifier(n_hidden=5).fit(np.zeros((4, 3)), [0, 1, 0, 1])
    with pytest.raises(ValueError, match="2 feature columns; the model expects 3"):
        dataplane.predict(fitted, unlabelled)


def test_the_same_units_run_as_ray_tasks(generated, ray_session):
    from elmscale.distributed.ray_tasks import run_tasks
    from elmscale.distributed.units import unit_gram
    from elmscale.linalg.gram import Gram

    ds = open_parquet(generated).with_units(5)
    layer = HiddenLayer("sigmoid", 8, 40, 3).to_dict()
    parts = run_tasks(unit_gram, ds.units(), ray_address="auto", layer=layer, n_folds=3)
    on_ray = Gram.combine(*parts)
    here = dataplane.gram(ds, HiddenLayer("sigmoid", 8, 40, 3), n_folds=3)
    np.testing.assert_allclose(on_ray.HtH, here.HtH, rtol=1e-12)
    np.testing.assert_allclose(on_ray.HtY, here.HtY, rtol=1e-12)
    np.testing.assert_array_equal(on_ray.n_rows, here.n_rows)


def _needed_bytes(files, columns) -> tuple[int, int]:
    """The compressed bytes (page headers included) of ``columns``' chunks in every row
    group of ``files``, and the bytes of the files' footers (with length and magic)."""
    chunks = footers = 0
    for file in files:
        meta = pq.ParquetFile(file).metadata
        footers += meta.serialized_size + 8
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in range(group.num_columns):
                if group.column(c).path_in_schema in columns:
                    chunks += group.column(c).total_compressed_size
    return chunks, footers


@pytest.mark.timeout(180)
def test_a_pass_from_s3_reads_the_needed_column_chunks_once(s3_server, dask_client, tmp_path):
    """Issue 51: a Gram pass from s3:// reads each row group's feature and label chunks
    once, and each file's footer exactly (no speculative 64 KiB tail, no row group cut
    into units that each fetch it whole, no unused column); the ELM's fit reads on top only
    its precision sample's first pages.  Before: 1.135x the data per pass."""
    data = generate_classification(2 * 131_072, n_features=8, random_state=5)
    local = tmp_path / "data"
    local.mkdir()
    X = np.column_stack([data.X, np.zeros(len(data.X))])  # a column the fit never reads
    names = [f"f{j}" for j in range(1, 9)] + ["unused"]
    for i in range(2):
        rows = slice(i * 131_072, (i + 1) * 131_072)
        write_parquet(X[rows], local / f"part-{i}.parquet", y=data.y[rows], feature_names=names)
    bucket = s3_server.new_bucket()
    s3_server.filesystem().put(f"{local}/", f"{bucket}/data/", recursive=True)
    ds = open_parquet(
        f"s3://{bucket}/data/",
        features=names[:8],
        label="label",
        storage_options=s3_server.storage_options,
    )
    files = sorted(local.glob("*.parquet"))
    chunks, footers = _needed_bytes(files, {*names[:8], "label"})
    layer = HiddenLayer("sigmoid", 8, 20, 0)

    before = s3_server.bytes_sent()
    dataplane.gram(ds, layer, client=dask_client)
    one_pass = s3_server.bytes_sent() - before
    # one unit per row group (2 workers' 4 threads' worth would cut them): each file read
    # by one unit, its footer once; pyarrow's range coalescing may read a gap under 8 KiB
    # between two needed chunks (here the unused column's) rather than make two requests
    assert chunks + footers <= one_pass <= chunks + footers + 2 * 8192, (one_pass, chunks)

    before = s3_server.bytes_sent()
    ELMClassifier(n_hidden=20, random_state=0).fit(ds, client=dask_client)
    fit = s3_server.bytes_sent() - before
    # the precision sample: the first file's footer and the first 64 KiB pages of 8 columns
    sample = 8 * (64 * 2**10 + 1024) + footers
    assert fit <= chunks + footers + sample, (fit, chunks)
    assert fit / chunks <= 1.07


def test_a_multi_output_regressors_score_from_dask_collections_is_r2_averaged(dask_client):
    """The units' sums per output give scikit-learn's R^2 with its default
    multioutput="uniform_average", within rounding (the spread is sum y^2 - (sum y)^2 / n);
    a fit from collections still takes one label column."""
    import dask.array as da
    import dask.dataframe as dd
    import pandas as pd
    from sklearn.metrics import r2_score

    from elmscale import ELMRegressor

    rng = np.random.default_rng(7)
    X = rng.normal(size=(3_000, 5))
    Y = np.column_stack([np.sin(X[:, 0]) + X[:, 1], X[:, 2] * X[:, 3], 10 + 0.1 * X[:, 4]])
    Y += 0.05 * rng.normal(size=Y.shape)
    model = ELMRegressor(hidden="sigmoid", n_hidden=40, C=10.0, random_state=0).fit(X, Y)
    expected = r2_score(Y, model.predict(X))
    frame = dd.from_pandas(pd.DataFrame(np.column_stack([X, Y])), npartitions=4)
    frame.columns = [*(f"x{j}" for j in range(5)), "a", "b", "c"]
    for X_dask, Y_dask in (
        (frame[[f"x{j}" for j in range(5)]], frame[["a", "b", "c"]]),
        (da.from_array(X, chunks=(700, 5)), da.from_array(Y, chunks=(700, 3))),
    ):
        score = model.score(X_dask, Y_dask, client=dask_client)
        # the sums' rounding: n u relative to sum y^2 over the spread, per output
        spread = ((Y - Y.mean(0)) ** 2).sum(0)
        bound = len(Y) * np.finfo(float).eps * np.max(np.square(Y).sum(0) / spread)
        assert abs(score - expected) <= bound, (score, expected)
        with pytest.raises(ValueError, match="3 columns; expected a Dask Series"):
            ELMRegressor(hidden="sigmoid", n_hidden=10).fit(X_dask, Y_dask, client=dask_client)
    with pytest.raises(ValueError, match=r"1 label column\(s\); the model has 3 output\(s\)"):
        model.score(frame[[f"x{j}" for j in range(5)]], frame["a"], client=dask_client)


def test_small_arrays_travel_with_the_tasks_and_large_ones_are_scattered_once(dask_client):
    """``broadcast``: a NumPy array of at most ``INLINE_BROADCAST_BYTES`` goes inside each
    task's message (no scatter, no copy from worker to worker, which a broadcast scatter
    makes); a larger one, or any other object, is scattered to every worker once."""
    import scipy.sparse as sp
    from distributed import Future

    from elmscale.distributed.executors import INLINE_BROADCAST_BYTES, broadcast

    small = np.arange(INLINE_BROADCAST_BYTES // 8, dtype=np.float64)
    assert broadcast(small, dask_client) is small
    assert broadcast(small, None) is small
    for value in (np.zeros(INLINE_BROADCAST_BYTES // 8 + 1), sp.csr_matrix(small[:10])):
        future = broadcast(value, dask_client)
        assert isinstance(future, Future)
        held = dask_client.who_has([future])[future.key]
        assert set(held) == set(dask_client.nthreads()), held
