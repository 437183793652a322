"""Sparse rows in Parquet (issue 52 item 4): Spark ML's vector layout (a struct of type,
size, indices, values), written from CSR by ``write_parquet``, read back whole by
``load_parquet`` and per work unit by ``open_parquet`` as CSR blocks; a file written by
plain pyarrow in the layout is read; bad layouts are errors naming the file and column."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from elmscale.core.errors import DataError
from elmscale.data import load, load_parquet, open_parquet, write_parquet
from elmscale.data.sparse_rows import SPARK_ROW_METADATA, VECTOR_TYPE, spark_row_schema


def _csr(n_rows=500, width=2000, density=0.01, seed=0) -> sp.csr_matrix:
    X = sp.random(n_rows, width, density=density, format="csr", random_state=seed)
    X.data = np.round(X.data * 64 - 32) / 16 + 1 / 32  # float32-exact, never zero
    X.data = X.data.astype(np.float64)
    X = sp.diags((np.arange(n_rows) != 3).astype(np.float64)) @ X  # row 3 empty
    X.eliminate_zeros()
    return X


def _labels(n):
    return np.where(np.arange(n) % 3 == 0, 1.0, -1.0)


def test_csr_round_trips_exactly_whole_and_per_unit(tmp_path):
    X, y = _csr(), _labels(500)
    path = write_parquet(X, tmp_path / "rows.parquet", y=y)
    schema = pq.read_schema(path)
    assert schema.names == ["features", "label"] and schema.field(0).type == VECTOR_TYPE
    whole = load(path)  # whole, float64 as written
    assert sp.isspmatrix_csr(whole.X) and whole.X.has_sorted_indices
    assert whole.X.dtype == np.float64 and repr(whole).endswith("sparse)")
    assert (whole.X != X).nnz == 0 and np.array_equal(whole.y, y)
    dataset = open_parquet(path)
    assert dataset.n_features == 2000 and dataset.features == ("features",)
    assert "sparse rows" in repr(dataset)
    units = dataset.units(7)  # ranges that cut through the row group
    blocks = [unit.read() for unit in units]
    for unit, (block, labels) in zip(units, blocks):
        assert sp.isspmatrix_csr(block) and block.dtype == np.float32
        assert block.has_sorted_indices and block.shape == (unit.n_rows, 2000)
        assert unit.n_features == 2000
        rows = slice(unit.start, unit.start + unit.n_rows)
        assert (block != X[rows].astype(np.float32)).nnz == 0
        np.testing.assert_array_equal(labels, y[rows])
    head = units[2].head(5).read()[0]
    assert (head != X[units[2].start : units[2].start + 5].astype(np.float32)).nnz == 0
    X_read, y_read = dataset.read()
    assert (X_read != X.astype(np.float32)).nnz == 0 and np.array_equal(y_read, y)


def test_several_row_groups_and_files(tmp_path):
    X, y = _csr(n_rows=300_000, width=50, density=0.02), _labels(300_000)
    folder = tmp_path / "parts"
    write_parquet(X[:270_000], folder / "a.parquet", y=y[:270_000], row_group_size=131_072)
    write_parquet(X[270_000:], folder / "b.parquet", y=y[270_000:])
    dataset = open_parquet(folder)
    assert [len(g) for g in dataset.row_groups] == [2, 1]
    X_read, y_read = dataset.read()
    assert (X_read != X.astype(np.float32)).nnz == 0 and np.array_equal(y_read, y)


def _plain_pyarrow_file(path, rows, label=(1.0, -1.0, 1.0), size=6, with_type=True):
    """A file written by pyarrow alone in the layout, as Spark's VectorUDT stores rows."""
    fields = [
        ("size", pa.int32()),
        ("indices", pa.list_(pa.int32())),
        ("values", pa.list_(pa.float64())),
    ]
    if with_type:
        fields.insert(0, ("type", pa.int8()))
    records = []
    for indices, values in rows:
        record = {"size": size, "indices": indices, "values": values}
        if with_type:
            record["type"] = 0
        records.append(record)
    vectors = pa.array(records, type=pa.struct(fields))
    pq.write_table(pa.table({"label": list(label), "features": vectors}), path)
    return path


def test_a_file_written_by_plain_pyarrow_is_read(tmp_path):
    rows = [([0, 4], [1.5, -2.0]), ([], []), ([1, 2, 5], [0.25, 3.0, -1.0])]
    expected = np.zeros((3, 6))
    for r, (indices, values) in enumerate(rows):
        expected[r, indices] = values
    for with_type in (True, False):
        path = _plain_pyarrow_file(
            tmp_path / f"spark{with_type}.parquet", rows, with_type=with_type
        )
        whole = load_parquet(path)
        np.testing.assert_array_equal(whole.X.toarray(), expected)
        np.testing.assert_array_equal(whole.y, [1.0, -1.0, 1.0])
        X, y = open_parquet(path).read()
        np.testing.assert_array_equal(X.toarray(), expected)


#: Spark's row schema of a ``features`` vector column and a double ``label``, as Spark
#: writes it to a Parquet footer under SPARK_ROW_METADATA: copied verbatim (its "features"
#: and "label" fields; the file's other two fields left out) from ``parquet-tools meta`` of a
#: Spark-written file (creator "parquet-mr version 1.10.0"), quoted in a public notes file
#: found with the search tool (code corpus, "org.apache.spark.sql.parquet.row.metadata
#: VectorUDT pyClass").  It is what Spark's source says: UserDefinedType.jsonValue (type,
#: class, pyClass, sqlType; apache/spark sql/catalyst/.../types/UserDefinedType.scala) of
#: VectorUDT (sqlType: type byte not null, size int, indices array<int>, values
#: array<double>, no null elements; mllib/.../ml/linalg/VectorUDT.scala).
SPARK_WRITTEN = (
    '{"type":"struct","fields":[{"name":"features","type":{"type":"udt",'
    '"class":"org.apache.spark.ml.linalg.VectorUDT","pyClass":"pyspark.ml.linalg.VectorUDT",'
    '"sqlType":{"type":"struct","fields":[{"name":"type","type":"byte","nullable":false,'
    '"metadata":{}},{"name":"size","type":"integer","nullable":true,"metadata":{}},'
    '{"name":"indices","type":{"type":"array","elementType":"integer","containsNull":false},'
    '"nullable":true,"metadata":{}},{"name":"values","type":{"type":"array",'
    '"elementType":"double","containsNull":false},"nullable":true,"metadata":{}}]}},'
    '"nullable":true,"metadata":{}},{"name":"label","type":"double","nullable":true,'
    '"metadata":{}}]}'
)


def _spark_metadata(path) -> str | None:
    found = pq.read_metadata(path).metadata or {}
    value = found.get(SPARK_ROW_METADATA.encode())
    return None if value is None else value.decode()


def test_sparse_rows_are_written_with_sparks_row_schema(tmp_path):
    """The footer names the column VectorUDT in Spark's own JSON (so Spark reads it back as
    a Vector), to the character; other label types by Spark's names; dense columns get
    none (nothing for Spark to know beyond the Parquet types)."""
    X, y = _csr(n_rows=50, width=40), _labels(50)
    path = write_parquet(X, tmp_path / "rows.parquet", y=y)
    assert _spark_metadata(path) == SPARK_WRITTEN
    assert load(path).X.shape == (50, 40)
    names = write_parquet(X, tmp_path / "names.parquet", y=np.array(["a", "b"] * 25))
    fields = json.loads(_spark_metadata(names))["fields"]
    assert [f["type"] for f in fields][1:] == ["string"]
    counts = write_parquet(X, tmp_path / "counts.parquet", y=np.arange(50))
    assert json.loads(_spark_metadata(counts))["fields"][1]["type"] == "long"
    unlabelled = write_parquet(X, tmp_path / "unlabelled.parquet")
    assert (
        json.loads(_spark_metadata(unlabelled))["fields"][0]
        == json.loads(SPARK_WRITTEN)["fields"][0]
    )
    dense = write_parquet(X.toarray(), tmp_path / "dense.parquet", y=y)
    assert _spark_metadata(dense) is None
    # a type Spark has no name for here: no metadata rather than a wrong one
    odd = pa.schema([pa.field("features", VECTOR_TYPE), pa.field("when", pa.date32())])
    assert spark_row_schema(odd) is None


def test_files_with_and_without_sparks_row_schema_read_the_same(tmp_path):
    """elmscale's own file, the same table without the footer's metadata (as other
    writers leave it), and one with Spark's metadata as Spark writes it, next to other
    keys: the same rows."""
    X, y = _csr(n_rows=300, width=120), _labels(300)
    ours = write_parquet(X, tmp_path / "ours.parquet", y=y)
    table = pq.read_table(ours)
    bare = tmp_path / "bare.parquet"
    pq.write_table(table.replace_schema_metadata(None), bare)
    assert _spark_metadata(bare) is None
    spark = tmp_path / "spark.parquet"
    metadata = {SPARK_ROW_METADATA: SPARK_WRITTEN, "org.apache.spark.version": "3.5.1"}
    pq.write_table(table.replace_schema_metadata(metadata), spark)
    assert _spark_metadata(spark) == SPARK_WRITTEN
    for path in (ours, bare, spark):
        whole = load(path)
        assert (whole.X != X).nnz == 0 and np.array_equal(whole.y, y), path
        rows, labels = open_parquet(path).with_units(3).read()
        assert (rows != X.astype(np.float32)).nnz == 0 and np.array_equal(labels, y), path


def test_dense_rows_of_the_layout_are_read(tmp_path):
    """Spark writes a DenseVector as type 1, no size or indices, every value."""
    vectors = pa.array(
        [
            {"type": 0, "size": 3, "indices": [2], "values": [4.0]},
            {"type": 1, "size": None, "indices": None, "values": [1.0, 0.0, -1.0]},
        ],
        type=VECTOR_TYPE,
    )
    path = tmp_path / "mixed.parquet"
    pq.write_table(pa.table({"features": vectors, "label": [0, 1]}), path)
    X, _ = open_parquet(path).read()
    np.testing.assert_array_equal(X.toarray(), [[0, 0, 4], [1, 0, -1]])


@pytest.mark.parametrize(
    "rows, message",
    [
        ([([0, 6], [1.0, 2.0])], r"row 1: index 6 out of range 0\.\.5"),
        ([([0], [1.0]), ([3, 1], [1.0, 2.0])], r"row 2: indices not strictly increasing"),
        ([([2, 2], [1.0, 2.0])], r"row 1: indices not strictly increasing \(2 then 2\)"),
        ([([0, 1], [1.0])], r"row 1: 2 indices but 1 values"),
        ([([0], [float("nan")])], r"row 1: NaN or inf"),
    ],
)
def test_bad_layouts_name_the_file_and_column(tmp_path, rows, message):
    path = _plain_pyarrow_file(tmp_path / "bad.parquet", rows, label=[1.0] * len(rows))
    for read in (lambda: open_parquet(path).read(), lambda: load_parquet(path)):
        with pytest.raises(DataError, match=message) as caught:
            read()
        assert str(path) in str(caught.value) and "column 'features'" in str(caught.value)


def test_rows_of_different_widths_are_refused(tmp_path):
    vectors = pa.array(
        [
            {"type": 0, "size": 4, "indices": [0], "values": [1.0]},
            {"type": 0, "size": 5, "indices": [0], "values": [1.0]},
        ],
        type=VECTOR_TYPE,
    )
    path = tmp_path / "widths.parquet"
    pq.write_table(pa.table({"features": vectors, "label": [0, 1]}), path)
    with pytest.raises(
        DataError, match=r"widths\.parquet: column 'features': rows of widths 4 to 5"
    ):
        open_parquet(path)


def test_a_sparse_column_mixed_with_numeric_features_is_refused(tmp_path):
    path = write_parquet(_csr(20, 10, 0.2), tmp_path / "r.parquet", y=_labels(20))
    table = pq.read_table(path).append_column("x", pa.array(np.ones(20)))
    pq.write_table(table, path)
    assert open_parquet(path).n_features == 10  # the vector column by default
    with pytest.raises(DataError, match="mix the sparse-row column 'features'"):
        open_parquet(path, features=["features", "x"])
    assert open_parquet(path, features=["x"]).n_features == 1  # numeric columns still chosen


def test_a_shifting_scaler_is_refused_and_a_pure_scale_applied(tmp_path):
    from sklearn.preprocessing import MaxAbsScaler

    from elmscale.data import Scaler

    X, y = _csr(50, 8, 0.3), _labels(50)
    dataset = open_parquet(write_parquet(X, tmp_path / "s.parquet", y=y))
    with pytest.raises(DataError, match="fills a sparse row's zeros"):
        dataset.scaled(Scaler().fit(X))
    scaler = MaxAbsScaler().fit(X)
    scaled, _ = dataset.scaled(scaler).read()
    np.testing.assert_allclose(
        scaled.toarray(), scaler.transform(X).toarray().astype(np.float32), rtol=1e-6
    )


# -- fits from a ParquetDataset of sparse rows equal the in-memory CSR fits ----------------


@pytest.fixture(scope="module")
def sparse_set(tmp_path_factory):
    """1,500 rows x 400 features, 2 % nonzero (float32-exact values), labels from a linear
    rule, written in 4 units."""
    X = _csr(1500, 400, 0.02, seed=1)
    y = (X @ np.random.default_rng(1).normal(size=400) > 0).astype(np.int64)
    path = write_parquet(X, tmp_path_factory.mktemp("sparse") / "train.parquet", y=y)
    return X.astype(np.float32), y, open_parquet(path).with_units(4)


def _fits(make, X, y, dataset, **fit_kw):
    return make().fit(X, y), make().fit(dataset, **fit_kw)


@pytest.mark.timeout(900)  # the sparse kernels' first compile: 100-300 s under load
def test_kernel_fits_from_sparse_parquet_equal_the_csr_fits(sparse_set):
    """Kernel models gather the rows (CSR) and solve the same problem: the same model."""
    from elmscale import ELMClassifier, SparseELMClassifier

    X, y, dataset = sparse_set
    for make in (
        lambda: ELMClassifier(kernel="gaussian", C=1.0),
        lambda: SparseELMClassifier(kernel="gaussian", C=1.0),
    ):
        here, there = _fits(make, X, y, dataset)
        np.testing.assert_array_equal(here.decision_function(X), there.decision_function(X))
        assert there.score(dataset) == here.score(X, y)


@pytest.mark.timeout(300)
def test_random_node_fits_from_sparse_parquet_equal_the_csr_fits(sparse_set):
    """Random nodes: the units' Grams (ELM) and Newton passes (sparse ELM) are summed per
    unit, in another order than the in-memory fit's blocks: equal within float32 rounding
    of sums over the n rows, n u |f|_max (u the float32 unit roundoff)."""
    from elmscale import ELMClassifier, SparseELMClassifier

    X, y, dataset = sparse_set
    for make in (
        lambda: ELMClassifier(hidden="sigmoid", n_hidden=60, C=1.0, random_state=0),
        lambda: SparseELMClassifier(
            hidden="sigmoid", n_hidden=60, C=1.0, random_state=0, solver="newton"
        ),
    ):
        here, there = _fits(make, X, y, dataset)
        assert getattr(here, "solver_", "newton") == getattr(there, "solver_", "newton")
        f_here, f_there = here.decision_function(X), there.decision_function(X)
        bound = X.shape[0] * np.finfo(np.float32).eps / 2 * np.abs(f_here).max()
        assert np.abs(f_here - f_there).max() <= bound, type(here).__name__


@pytest.mark.timeout(300)
def test_a_dask_worker_reads_sparse_units(sparse_set):
    """On a real LocalCluster the units travel pickled to a worker process and come back
    as the same CSR blocks; the Newton fit there equals the one here."""
    from distributed import Client, LocalCluster

    from elmscale import SparseELMClassifier
    from elmscale.distributed.executors import map_units
    from elmscale.distributed.units import unit_rows

    X, y, dataset = sparse_set
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True) as cluster:
        with Client(cluster) as client:
            parts = map_units(unit_rows, dataset.units(), client=client)
            make = lambda: SparseELMClassifier(  # noqa: E731
                hidden="sigmoid", n_hidden=40, C=1.0, random_state=0
            )
            there = make().fit(dataset, client=client)
    for unit, (block, labels) in zip(dataset.units(), parts):
        rows = slice(unit.start, unit.start + unit.n_rows)
        assert sp.isspmatrix_csr(block) and (block != X[rows]).nnz == 0
        np.testing.assert_array_equal(labels, y[rows])
    here = make().fit(dataset)
    np.testing.assert_array_equal(here.decision_function(X), there.decision_function(X))
