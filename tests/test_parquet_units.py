"""Parquet data sets: footers, work units, reading, and bad input named by file and column."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elmscale import DataError, open_parquet
from elmscale.data import Scaler, generate_classification, write_parquet


@pytest.fixture
def three_files(tmp_path):
    data = generate_classification(30_000, n_features=5, n_classes=3, random_state=1)
    for i in range(3):
        rows = slice(i * 10_000, (i + 1) * 10_000)
        table = pa.table(
            {
                **{f"f{j}": data.X[rows, j].astype(np.float32) for j in range(5)},
                "id": np.arange(rows.start, rows.stop),
                "label": data.y[rows],
            }
        )
        pq.write_table(table, tmp_path / f"part-{i}.parquet", row_group_size=3_000)
    return tmp_path, data


def test_footers_give_rows_and_units_cover_every_row_once(three_files):
    path, data = three_files
    ds = open_parquet(path, features="f*")
    assert ds.n_rows == 30_000 and ds.features == tuple(f"f{j}" for j in range(5))
    assert ds.row_groups == ((3000, 3000, 3000, 1000),) * 3
    assert len(ds.units()) == 12  # one per row group
    for n_units in (None, 1, 2, 7, 40):
        units = ds.units(n_units)
        assert [u.index for u in units] == list(range(len(units)))
        starts = [u.start for u in units]
        assert starts[0] == 0 and sum(u.n_rows for u in units) == 30_000
        assert all(a.start + a.n_rows == b.start for a, b in zip(units, units[1:]))
        X = np.concatenate([u.read()[0] for u in units])
        y = np.concatenate([u.read()[1] for u in units])
        np.testing.assert_array_equal(X, data.X.astype(np.float32))
        np.testing.assert_array_equal(y, data.y)
    assert len(ds.with_units(4).units()) == 4


def test_glob_and_single_file_and_scaling(three_files):
    path, data = three_files
    ds = open_parquet(str(path / "part-[01].parquet"), features=["f0", "f3"], label="label")
    assert ds.n_rows == 20_000 and ds.features == ("f0", "f3")
    one = open_parquet(path / "part-2.parquet", features="f*")
    X, y = one.read()
    np.testing.assert_array_equal(y, data.y[20_000:])
    scaler = Scaler(feature_range=(-1, 1)).fit(X)
    Xs, _ = one.scaled(scaler).read()
    np.testing.assert_allclose(Xs, scaler.transform(X), atol=1e-6)
    with pytest.raises(DataError, match="the scaler has 3 columns; expected 5"):
        one.scaled(Scaler().fit(X[:, :3]))


def test_units_pickle_small(three_files):
    import pickle

    ds = open_parquet(three_files[0], features="f*")
    assert max(len(pickle.dumps(u)) for u in ds.units()) < 1500


def test_missing_feature_column_is_named(three_files):
    path, _ = three_files
    with pytest.raises(DataError, match=r"part-0\.parquet: feature column 'f9' not found"):
        open_parquet(path, features=["f0", "f9"])
    with pytest.raises(DataError, match=r"label column 'target' not found"):
        open_parquet(path, label="target")


def test_a_file_lacking_a_column_is_named(three_files):
    path, _ = three_files
    pq.write_table(pa.table({"f0": [1.0], "label": [1]}), path / "part-3.parquet")
    with pytest.raises(DataError, match=r"part-3\.parquet: column 'f1' not found"):
        open_parquet(path, features="f*")


def test_string_feature_column_is_named(tmp_path):
    pq.write_table(
        pa.table({"a": [1.0, 2.0], "b": ["x", "y"], "label": [0, 1]}), tmp_path / "s.parquet"
    )
    with pytest.raises(DataError, match=r"s\.parquet: column 'b' \(position 1\) has type string"):
        open_parquet(tmp_path / "s.parquet", features=["a", "b"])
    # by default only numeric columns are features
    assert open_parquet(tmp_path / "s.parquet").features == ("a",)


def test_empty_and_corrupt_files_are_named(three_files):
    path, _ = three_files
    (path / "part-9.parquet").write_bytes(b"")
    with pytest.raises(DataError, match=r"part-9\.parquet: empty file"):
        open_parquet(path)
    (path / "part-9.parquet").write_bytes(b"PAR1 this is not parquet at all PAR1")
    with pytest.raises(DataError, match=r"part-9\.parquet: not a readable Parquet file"):
        open_parquet(path)
    good = (path / "part-0.parquet").read_bytes()
    (path / "part-9.parquet").write_bytes(good[: len(good) // 2])
    with pytest.raises(DataError, match=r"part-9\.parquet: not a readable Parquet file"):
        open_parquet(path)
    pq.write_table(
        pa.table(
            {f"f{j}": pa.array([], pa.float32()) for j in range(5)}
            | {"id": pa.array([], pa.int64()), "label": pa.array([], pa.int64())}
        ),
        path / "part-9.parquet",
    )
    with pytest.raises(DataError, match=r"part-9\.parquet: holds no rows"):
        open_parquet(path)


def test_nulls_and_nan_are_named_when_read(tmp_path):
    pq.write_table(pa.table({"a": [1.0, None], "label": [0, 1]}), tmp_path / "n.parquet")
    with pytest.raises(DataError, match=r"n\.parquet: column 'a' has 1 null"):
        open_parquet(tmp_path / "n.parquet").read()
    pq.write_table(pa.table({"a": [1.0, float("nan")], "label": [0, 1]}), tmp_path / "m.parquet")
    with pytest.raises(DataError, match=r"m\.parquet: column 'a' has NaN"):
        open_parquet(tmp_path / "m.parquet").read()
    pq.write_table(pa.table({"a": [1.0, 2.0], "label": [0, None]}), tmp_path / "l.parquet")
    with pytest.raises(DataError, match=r"l\.parquet: label column 'label' has 1 null"):
        open_parquet(tmp_path / "l.parquet").read()


def test_missing_paths(tmp_path):
    with pytest.raises(DataError, match="no such file or directory"):
        open_parquet(tmp_path / "nope")
    with pytest.raises(DataError, match="holds no"):
        open_parquet(tmp_path)
    with pytest.raises(DataError, match="matches no file"):
        open_parquet(str(tmp_path / "*.parquet"))


def test_written_files_round_trip(tmp_path):
    data = generate_classification(1000, random_state=3)
    write_parquet(data, tmp_path / "d.parquet")
    X, y = open_parquet(tmp_path / "d.parquet").read()
    np.testing.assert_array_equal(X, data.X.astype(np.float32))
    np.testing.assert_array_equal(y, data.y)
