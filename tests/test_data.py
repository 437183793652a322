"""Tests for elmscale.data: loaders on the shared benchmark sets, bad input, Parquet writing,
the [-1, 1] scaler, label encoding and the synthetic problem."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
from _datasets import shared_data
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression

from elmscale.core.errors import DataError
from elmscale.data import (
    MAX_ROW_GROUP,
    MIN_ROW_GROUP,
    Dataset,
    Scaler,
    check_finite,
    detect_format,
    encode_labels,
    generate_classification,
    iter_classification_blocks,
    load,
    load_arff,
    load_csv,
    load_libsvm,
    load_parquet,
    write_parquet,
)


def counts(y: np.ndarray) -> dict:
    return {k: v for k, v in Counter(y.tolist()).items()}


# --------------------------------------------------------------------------- shared sets
# Expected values are those of ../shared/data/README.md (classification) and
# ../shared/data/regression/README.md.

# (path, load keywords, format, rows, features, {label: count} or None)
CLASSIFICATION = [
    ("cod-rna/codrna.csv", {}, "csv", 59_535, 8, {-1: 39_690, 1: 19_845}),
    ("a9a/a9a", {}, "libsvm", 32_561, 123, {-1: 24_720, 1: 7_841}),
    ("a9a/a9a.t", {"n_features": 123}, "libsvm", 16_281, 123, {0: 12_435, 1: 3_846}),
    ("svmguide1/svmguide1", {}, "libsvm", 3_089, 4, {0: 1_089, 1: 2_000}),
    ("svmguide1/svmguide1.t", {}, "libsvm", 4_000, 4, {0: 2_000, 1: 2_000}),
    ("satimage/satimage.scale", {}, "libsvm", 4_435, 36, None),
    ("satimage/satimage.scale.t", {"n_features": 36}, "libsvm", 2_000, 36, None),
    ("mushrooms/mushrooms", {}, "libsvm", 8_124, 112, {1: 3_916, 2: 4_208}),
    ("heart/heart_scale", {}, "libsvm", 270, 13, {-1: 150, 1: 120}),
    ("australian/australian.dat", {}, "csv", 690, 14, {0: 383, 1: 307}),
    ("sonar/sonar_scale", {}, "libsvm", 208, 60, {-1: 111, 1: 97}),
    ("svmguide2/svmguide2.txt", {}, "libsvm", 391, 20, {1: 221, 2: 117, 3: 53}),
    # The README gives these two pairs of counts without saying which label has which:
    # ionosphere +1: 225, -1: 126; diabetes +1: 500, -1: 268 in the files.
    ("ionosphere/ionosphere_scale", {}, "libsvm", 351, 34, None),
    ("diabetes/diabetes_scale", {}, "libsvm", 768, 8, None),
]
UNORDERED_COUNTS = {
    "ionosphere/ionosphere_scale": [126, 225],
    "diabetes/diabetes_scale": [268, 500],
    "satimage/satimage.scale": [415, 470, 479, 961, 1_038, 1_072],
    "satimage/satimage.scale.t": [211, 224, 237, 397, 461, 470],
}


@pytest.mark.needs_shared
@pytest.mark.parametrize(
    "rel, kw, fmt, rows, cols, expected", CLASSIFICATION, ids=[c[0] for c in CLASSIFICATION]
)
def test_classification_sets_match_readme(rel, kw, fmt, rows, cols, expected):
    path = shared_data(*rel.split("/"))
    assert detect_format(path) == fmt
    ds = load(path, **kw)
    assert (ds.n_samples, ds.n_features) == (rows, cols)
    assert ds.X.dtype == np.float64 and isinstance(ds.X, np.ndarray)
    assert np.isfinite(ds.X).all()
    assert len(ds.feature_names) == cols and ds.source == os.fspath(path)
    if expected is not None:
        assert counts(ds.y) == expected
    else:
        assert sorted(counts(ds.y).values()) == UNORDERED_COUNTS[rel]
    if rel.startswith("satimage"):
        assert sorted(counts(ds.y)) == [1, 2, 3, 4, 5, 6]


@pytest.mark.needs_shared
def test_libsvm_sparse_and_feature_space():
    path = shared_data("a9a", "a9a.t")
    ds = load_libsvm(path, n_features=123, dense=False)
    assert sp.isspmatrix_csr(ds.X) and ds.X.dtype == np.float64 and ds.X.shape == (16_281, 123)
    assert ds.feature_names[0] == "f1" and ds.feature_names[-1] == "f123"
    assert load_libsvm(path).n_features == 122  # the largest index present
    with pytest.raises(DataError, match=r"a9a\.t.*n_features=100"):
        load_libsvm(path, n_features=100)


@pytest.mark.needs_shared
def test_svmguide1_crlf_and_no_final_newline():
    ds = load_libsvm(shared_data("svmguide1", "svmguide1"))
    assert ds.X.shape == (3_089, 4)
    assert ds.X[0, 0] == pytest.approx(26.173)


@pytest.mark.needs_shared
def test_breast_cancer_missing_values():
    path = shared_data("breast-cancer", "breast-cancer-wisconsin.data")
    with pytest.raises(DataError) as err:
        load_csv(path, drop_columns=[0])
    msg = str(err.value)
    assert "breast-cancer-wisconsin.data" in msg and "16 missing" in msg and "'?'" in msg
    assert "'col6'" in msg and "row 24" in msg
    ds = load_csv(path, drop_columns=[0], missing="drop")
    assert (ds.n_samples, ds.n_features, ds.n_dropped) == (683, 9, 16)
    assert ds.n_samples + ds.n_dropped == 699
    # the README's class counts are for all 699 rows: drop the column with the '?' values
    full = load_csv(path, drop_columns=[0, 6])
    assert (full.n_samples, full.n_features) == (699, 8)
    assert counts(full.y) == {2: 458, 4: 241}


@pytest.mark.needs_shared
def test_headers_are_detected():
    cod = load_csv(shared_data("cod-rna", "codrna.csv"))
    assert cod.feature_names == [str(i) for i in range(8)]  # "0,...,8" is a header
    aus = load_csv(shared_data("australian", "australian.dat"))
    assert aus.feature_names == [f"A{i}" for i in range(1, 15)]
    assert aus.X[0, 1] == pytest.approx(22.08)


# (file, load keywords, rows, inputs, label column value check (row 0) or None)
REGRESSION = [
    ("airfoil_self_noise.dat", {}, 1_503, 5, 126.201),
    ("concrete.txt", {}, 1_030, 8, 79.99),
    ("energy-heating.txt", {}, 768, 8, 15.55),
    ("yacht_hydrodynamics.data", {}, 308, 6, 0.11),
    ("housing.data", {}, 506, 13, 24.0),
    ("winequality-red.csv", {}, 1_599, 11, 5),
    ("winequality-white.csv", {}, 4_898, 11, 6),
    ("ccpp.csv", {"label": "PE"}, 9_568, 4, 480.48),
    ("cpu_small.arff", {}, 8_192, 12, None),
    ("delta_ailerons.arff", {}, 7_129, 5, None),
    # categorical / string columns dropped (abalone's sex leaves 7 numeric inputs of 8)
    ("abalone.csv", {"drop_columns": [0]}, 4_177, 7, 15),
    (
        "bike-hour.csv",
        {"label": "cnt", "drop_columns": ["instant", "dteday", "casual", "registered"]},
        17_379,
        12,
        16,
    ),
]


@pytest.mark.needs_shared
@pytest.mark.parametrize("name, kw, rows, cols, y0", REGRESSION, ids=[r[0] for r in REGRESSION])
def test_regression_sets_match_readme(name, kw, rows, cols, y0):
    ds = load(shared_data("regression", name), **kw)
    assert (ds.n_samples, ds.n_features) == (rows, cols)
    assert ds.y.dtype.kind in "if" and np.isfinite(ds.y).all() and np.isfinite(ds.X).all()
    if y0 is not None:
        assert ds.y[0] == pytest.approx(y0)


@pytest.mark.needs_shared
def test_regression_sets_with_categorical_columns():
    folder = "regression"
    msg = r"abalone\.csv: column 'col0' \(position 0\) is not numeric \(found 'M'"
    with pytest.raises(DataError, match=msg):
        load_csv(shared_data(folder, "abalone.csv"))
    with pytest.raises(DataError, match=r"bike-hour\.csv: column 'dteday'"):
        load_csv(shared_data(folder, "bike-hour.csv"), label="cnt")
    mpg = shared_data(folder, "auto-mpg.data")
    with pytest.raises(DataError, match=r"auto-mpg\.data: 6 missing.*'horsepower'"):
        load_csv(mpg, label="mpg", drop_columns=["car_name"])
    ds = load_csv(mpg, label="mpg", drop_columns=["car_name"], missing="drop")
    assert (ds.n_samples, ds.n_features, ds.n_dropped) == (392, 7, 6)
    assert ds.feature_names[0] == "cylinders" and ds.y[0] == 18.0
    names = load_csv(mpg, label="car_name", drop_columns=["horsepower"])
    assert names.y.dtype == object and names.y[0] == "chevrolet chevelle malibu"


# --------------------------------------------------------------------------- bad input


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_csv_nan_is_reported(tmp_path):
    p = write(tmp_path, "nan.csv", "a,b,label\n1,2,0\n3,nan,1\n")
    with pytest.raises(DataError, match=r"nan\.csv: 1 missing.*column 'b' \(first in row 2\)"):
        load_csv(p)
    assert load_csv(p, missing="drop").n_samples == 1


def test_csv_inf_is_reported(tmp_path):
    p = write(tmp_path, "inf.csv", "a,b,label\n1,2,0\n3,-inf,1\n")
    with pytest.raises(DataError, match=r"inf\.csv: column 'b' has 1 infinite.*row 2"):
        load_csv(p, missing="drop")


def test_csv_non_numeric_feature(tmp_path):
    p = write(tmp_path, "text.csv", "a,b,label\n1,2,0\n3,abc,1\n")
    msg = r"text\.csv: column 'b' \(position 1\) is not numeric \(found 'abc' in row 2\)"
    with pytest.raises(DataError, match=msg):
        load_csv(p)


def test_csv_missing_label_column(tmp_path):
    p = write(tmp_path, "cols.csv", "a,b,label\n1,2,0\n3,4,1\n")
    msg = r"cols\.csv: label column 'target' not found.*\['a', 'b', 'label'\]"
    with pytest.raises(DataError, match=msg):
        load_csv(p, label="target")
    with pytest.raises(DataError, match=r"cols\.csv: label column position 7"):
        load_csv(p, label=7)


def test_empty_files(tmp_path):
    p = write(tmp_path, "empty.csv", "")
    with pytest.raises(DataError, match=r"empty\.csv: file is empty"):
        load_csv(p)
    with pytest.raises(DataError, match=r"empty\.csv: file is empty"):
        load(p)
    blank = write(tmp_path, "blank", "\n\n")
    with pytest.raises(DataError, match="blank: file is empty"):
        load_libsvm(blank)
    header = write(tmp_path, "header.csv", "a,b,label\n")
    with pytest.raises(DataError, match=r"header\.csv: no data rows"):
        load_csv(header)


def test_ragged_csv(tmp_path):
    p = write(tmp_path, "ragged.csv", "1,2,0\n3,4,1\n5,6,7,1\n")
    with pytest.raises(DataError, match=r"ragged\.csv: cannot be read.*line 3"):
        load_csv(p)


def test_corrupted_parquet(tmp_path):
    p = tmp_path / "broken.parquet"
    p.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(DataError, match=r"broken\.parquet: not a readable Parquet file"):
        load_parquet(p)
    with pytest.raises(DataError, match=r"broken\.parquet"):
        load(p)


@pytest.mark.parametrize(
    "line, what",
    [
        ("-1 2:abc", r"value 'abc' of feature 2"),
        ("-1 x:1", r"index 'x'"),
        ("-1 3:1 2:1", r"index 2 is not increasing"),
        ("-1 0:1", r"index 0 is below 1"),
        ("foo 1:1", r"label 'foo'"),
        ("1 2", r"token '2' has no ':'"),
    ],
)
def test_libsvm_bad_line(tmp_path, line, what):
    p = write(tmp_path, "bad_svm", f"1 1:0.5 2:1\n\n{line}\n")
    with pytest.raises(DataError, match=rf"bad_svm: not valid LIBSVM \(line 3: .*{what}"):
        load_libsvm(p)


def test_libsvm_nan_value(tmp_path):
    p = write(tmp_path, "nan_svm", "1 1:0.5 2:1\n-1 2:nan\n")
    msg = r"nan_svm: column 'f2' has 1 non-finite value\(s\) \(first nan in row 2\)"
    with pytest.raises(DataError, match=msg):
        load_libsvm(p)


def test_missing_file_and_bad_parameters(tmp_path):
    with pytest.raises(DataError, match="nothere.csv: no such file"):
        load(tmp_path / "nothere.csv")
    p = write(tmp_path, "ok.csv", "1,2,0\n3,4,1\n")
    with pytest.raises(DataError, match=r"ok\.csv: parameter missing='skip'"):
        load_csv(p, missing="skip")
    with pytest.raises(DataError, match=r"ok\.csv: drop_columns column 'zz' not found"):
        load_csv(p, drop_columns=["zz"])
    with pytest.raises(DataError, match=r"ok\.csv: parameter label=.*LIBSVM"):
        load(p, label="last", format="libsvm")


# --------------------------------------------------------------------------- CSV options


def test_csv_label_positions_and_strings(tmp_path):
    p = write(tmp_path, "s.csv", "id, x1 , x2, kind \n7, 1.5, 2, cat \n8, 3, 4, dog\n")
    ds = load_csv(p, label="kind", drop_columns=["id"])
    assert ds.feature_names == ["x1", "x2"]
    assert ds.y.dtype == object and list(ds.y) == ["cat", "dog"]
    np.testing.assert_array_equal(ds.X, [[1.5, 2.0], [3.0, 4.0]])
    first = load_csv(p, label="first", drop_columns=["kind"])
    assert list(first.y) == [7, 8] and first.feature_names == ["x1", "x2"]
    assert list(load_csv(p, label=0, drop_columns=[3]).y) == [7, 8]


def test_csv_separators(tmp_path):
    tab = write(tmp_path, "t.txt", "1.0 \t2.0 \t3 \n4.0 \t5.0 \t6 \n\n")
    ws = write(tmp_path, "w.data", "  1.0   2.0  3\n  4.0   5.0  6")
    semi = write(tmp_path, "s.csv", "a;b;y\n1;2;3\n4;5;6\n")
    for p in (tab, ws, semi):
        ds = load(p)
        np.testing.assert_array_equal(ds.X, [[1.0, 2.0], [4.0, 5.0]])
        np.testing.assert_array_equal(ds.y, [3, 6])
    forced = load_csv(write(tmp_path, "h.csv", "1,2,3\n4,5,6\n"), header=True)
    assert forced.feature_names == ["1", "2"] and forced.n_samples == 1


# --------------------------------------------------------------------------- ARFF


def test_arff_nominal_label_and_errors(tmp_path):
    text = (
        "@relation t\n@attribute a numeric\n@attribute b numeric\n"
        "@attribute cls {yes,no}\n@data\n1,2,yes\n3,?,no\n5,6,no\n"
    )
    p = write(tmp_path, "t.arff", text)
    with pytest.raises(DataError, match=r"t\.arff: 1 missing.*column 'b'"):
        load_arff(p)
    ds = load(p, missing="drop")
    assert list(ds.y) == ["yes", "no"] and ds.n_dropped == 1
    msg = r"t\.arff: attribute column 'cls' \(position 2\) is nominal"
    with pytest.raises(DataError, match=msg):
        load_arff(p, label="a")
    bad = write(tmp_path, "bad.arff", "@relation x\n@attribute a nonsense\n@data\n1\n")
    with pytest.raises(DataError, match=r"bad\.arff: not a readable ARFF"):
        load_arff(bad)


# --------------------------------------------------------------------------- Parquet


def small_dataset(n: int = 1_000, labels: str = "int") -> Dataset:
    rng = np.random.default_rng(3)
    X = rng.normal(size=(n, 3))
    y = rng.integers(0, 3, size=n)
    if labels == "str":
        y = np.array(["a", "b", "c"], dtype=object)[y]
    return Dataset(X=X, y=y, feature_names=["u", "v", "w"], source="mem")


def dictionary_encoded(path: Path) -> bool:
    meta = pq.ParquetFile(path).metadata
    return any(
        "DICTIONARY" in enc
        for g in range(meta.num_row_groups)
        for c in range(meta.num_columns)
        for enc in meta.row_group(g).column(c).encodings
    )


@pytest.mark.parametrize("labels", ["int", "str"])
def test_parquet_round_trip(tmp_path, labels):
    ds = small_dataset(labels=labels)
    p = write_parquet(ds, tmp_path / "d.parquet")
    schema = pq.read_schema(p)
    assert [f.type for f in schema][:3] == [pa.float32()] * 3
    assert schema.names == ["u", "v", "w", "label"]
    assert schema.field("label").type == (pa.int64() if labels == "int" else pa.string())
    assert not dictionary_encoded(p)
    meta = pq.ParquetFile(p).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD"
    back = load_parquet(p)
    np.testing.assert_array_equal(back.X, ds.X.astype(np.float32).astype(np.float64))
    np.testing.assert_array_equal(back.y, ds.y)
    assert back.feature_names == ["u", "v", "w"]
    assert load(p).n_samples == ds.n_samples and detect_format(p) == "parquet"


def test_parquet_feature_selection_and_directory(tmp_path):
    ds = small_dataset(10)
    folder = tmp_path / "parts"
    write_parquet(ds.X[:4], folder / "part-0.parquet", y=ds.y[:4], feature_names=["f1", "f2", "g"])
    write_parquet(ds.X[4:], folder / "part-1.parquet", y=ds.y[4:], feature_names=["f1", "f2", "g"])
    whole = load(folder)
    np.testing.assert_array_equal(whole.y, ds.y)
    assert load_parquet(folder, features="f*").feature_names == ["f1", "f2"]
    assert load_parquet(folder, features=["g"], label="label").feature_names == ["g"]
    with pytest.raises(DataError, match=r"parts: feature column 'h' not found"):
        load_parquet(folder, features=["h"])
    with pytest.raises(DataError, match=r"parts: parameter features='z\*' matches no column"):
        load_parquet(folder, features="z*")
    with pytest.raises(DataError, match=r"parts: label column 'target' not found"):
        load_parquet(folder, label="target")
    unlabeled = write_parquet(ds.X, tmp_path / "x.parquet")
    assert pq.read_schema(unlabeled).names == ["f1", "f2", "f3"]


def test_parquet_string_column_and_nulls(tmp_path):
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"a": [1.0, None, 3.0], "s": ["x", "y", "z"], "y": [0, 1, 1]}), p)
    msg = r"t\.parquet: 1 missing value\(s\) \(null or NaN\): 1 in column 'a'"
    with pytest.raises(DataError, match=msg):
        load_parquet(p)
    ds = load_parquet(p, missing="drop")  # the string column is not a feature by default
    assert ds.feature_names == ["a"] and list(ds.y) == [0, 1] and ds.n_dropped == 1
    with pytest.raises(DataError, match=r"t\.parquet: column 's' \(position 1\) has type string"):
        load_parquet(p, features=["a", "s"])


def test_row_group_sizes(tmp_path):
    small = write_parquet(small_dataset(1_000), tmp_path / "small.parquet", row_group_size=100)
    assert pq.ParquetFile(small).metadata.num_row_groups == 1
    n = 300_000
    X = np.arange(2 * n, dtype=np.float64).reshape(n, 2)
    big = write_parquet(X, tmp_path / "big.parquet", y=np.zeros(n), row_group_size=1_000)
    meta = pq.ParquetFile(big).metadata
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    assert sizes == [150_000, 150_000]
    assert all(MIN_ROW_GROUP <= s <= MAX_ROW_GROUP for s in sizes)
    assert not dictionary_encoded(big)
    np.testing.assert_array_equal(load_parquet(big).X[-1], X[-1])


def test_failed_write_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "out.parquet"
    X = np.ones((10, 2))
    with pytest.raises(DataError, match=r"out\.parquet: parameter y has shape \(9,\)"):
        write_parquet(X, target, y=np.zeros(9))
    assert list(tmp_path.iterdir()) == []
    # a failure after the first row group: no file, no temporary file, old file untouched
    target.write_bytes(b"old")
    calls = {"n": 0}
    real = pq.ParquetWriter.write_table

    def failing(self, table, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise OSError("disk full")
        return real(self, table, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", failing)
    n = 300_000
    with pytest.raises(OSError, match="disk full"):
        write_parquet(np.zeros((n, 1)), target, y=np.zeros(n), row_group_size=MIN_ROW_GROUP)
    assert calls["n"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.parquet"]
    assert target.read_bytes() == b"old"


# --------------------------------------------------------------------------- checks, labels


def test_check_finite_dense_and_sparse():
    X = np.zeros((4, 3))
    check_finite(X, "f.csv", ["a", "b", "c"])
    X[2, 1] = np.inf
    msg = r"f\.csv: column 'b' has 1 non-finite value\(s\) \(first inf in row 3\)"
    with pytest.raises(DataError, match=msg):
        check_finite(X, "f.csv", ["a", "b", "c"])
    S = sp.csr_matrix(([1.0, np.nan], ([0, 3], [2, 2])), shape=(4, 3))
    with pytest.raises(DataError, match=r"s\.svm: column 'c' has 1 non-finite.*row 4"):
        check_finite(S, "s.svm", ["a", "b", "c"])
    check_finite(np.full((2, 2), 1e308), "big", None)  # overflowing sums are not an error


def test_encode_labels():
    classes, idx = encode_labels(np.array([1.0, -1.0, 1.0]))
    np.testing.assert_array_equal(classes, [-1.0, 1.0])
    np.testing.assert_array_equal(idx, [1, 0, 1])
    classes, idx = encode_labels(np.array(["b", "a", "c", "a"], dtype=object))
    assert list(classes) == ["a", "b", "c"] and list(classes[idx]) == ["b", "a", "c", "a"]
    with pytest.raises(DataError, match="parameter y contains NaN"):
        encode_labels([1.0, np.nan])
    with pytest.raises(DataError, match="parameter y mixes types"):
        encode_labels(np.array([1, "a"], dtype=object))


# --------------------------------------------------------------------------- Scaler


def test_scaler_fitted_on_train_only():
    rng = np.random.default_rng(0)
    train, test = rng.normal(size=(200, 4)) * [1, 10, 100, 0.1], rng.normal(size=(50, 4))
    s = Scaler().fit(train)
    t = s.transform(train)
    np.testing.assert_allclose(t.min(axis=0), -1)
    np.testing.assert_allclose(t.max(axis=0), 1)
    lo, hi = train.min(axis=0), train.max(axis=0)
    np.testing.assert_allclose(s.transform(test), 2 * (test - lo) / (hi - lo) - 1)
    np.testing.assert_allclose(s.inverse_transform(s.transform(test)), test)
    assert s.get_params() == {"feature_range": (-1, 1), "copy": True, "clip": False}
    assert clone(s).get_params() == s.get_params()


def test_scaler_from_stats_equals_fit():
    rng = np.random.default_rng(1)
    X = rng.uniform(-5, 7, size=(100, 3))
    X[:, 2] = 4.0  # a constant column
    fitted = Scaler().fit(X)
    built = Scaler.from_stats(X.min(axis=0), X.max(axis=0), n_samples_seen=100)
    for attr in ("scale_", "min_", "data_min_", "data_max_", "data_range_"):
        np.testing.assert_allclose(getattr(built, attr), getattr(fitted, attr))
    assert built.n_features_in_ == 3 and built.n_samples_seen_ == 100
    Z = rng.uniform(-9, 9, size=(20, 3))
    np.testing.assert_allclose(built.transform(Z), fitted.transform(Z))
    with pytest.raises(DataError, match="data_max < data_min in column 1"):
        Scaler.from_stats([0, 1], [1, 0])


def test_scaler_sparse_input():
    X = sp.random(50, 6, density=0.3, format="csr", random_state=0)
    dense = Scaler().fit(X.toarray())
    sparse = Scaler().fit(X)
    np.testing.assert_allclose(sparse.transform(X), dense.transform(X.toarray()))
    s = Scaler()
    s.partial_fit(X[:25])
    s.partial_fit(X[25:])
    np.testing.assert_allclose(s.scale_, dense.scale_)


# --------------------------------------------------------------------------- synthetic


def test_generate_classification_is_deterministic():
    a = generate_classification(5_000)
    b = generate_classification(5_000)
    np.testing.assert_array_equal(a.X, b.X)
    np.testing.assert_array_equal(a.y, b.y)
    assert a.X.shape == (5_000, 8) and a.X.dtype == np.float64 and a.y.dtype == np.int64
    assert a.X.min() >= -1 and a.X.max() <= 1
    assert set(np.unique(a.y)) == {0, 1} and 0.4 < a.y.mean() < 0.6
    c = generate_classification(5_000, random_state=1)
    assert not np.array_equal(a.X, c.X)
    np.testing.assert_array_equal(generate_classification(1_000).X, a.X[:1_000])
    multi = generate_classification(3_000, n_features=5, n_classes=4, random_state=2)
    assert multi.X.shape == (3_000, 5) and set(np.unique(multi.y)) == {0, 1, 2, 3}


@pytest.mark.parametrize("block_rows", [999, 65_536, 100_000, 200_000])
def test_blocks_equal_whole_generation(block_rows):
    n = 140_000  # spans three internal chunks
    whole = generate_classification(n, n_features=3, n_classes=3, random_state=7)
    blocks = list(
        iter_classification_blocks(n, block_rows, n_features=3, n_classes=3, random_state=7)
    )
    assert [len(b[1]) for b in blocks[:-1]] == [block_rows] * (len(blocks) - 1)
    np.testing.assert_array_equal(np.concatenate([b[0] for b in blocks]), whole.X)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in blocks]), whole.y)


def test_generated_problem_is_nonlinear():
    """A small random-sigmoid model beats a linear one by a clear margin."""
    train = generate_classification(10_000, random_state=0)
    test = generate_classification(5_000, random_state=1)
    linear = LogisticRegression().fit(train.X, train.y).score(test.X, test.y)
    rng = np.random.default_rng(0)
    W, b = rng.normal(size=(8, 300)), rng.normal(size=300)

    def hidden(X):
        return 1 / (1 + np.exp(-(X @ W + b)))

    H = hidden(train.X)
    T = np.where(train.y[:, None] == [0, 1], 1.0, -1.0)
    beta = np.linalg.solve(H.T @ H + np.eye(300) / 10, H.T @ T)
    elm = (hidden(test.X) @ beta).argmax(axis=1) == test.y
    assert elm.mean() > 0.9
    assert linear < 0.82


def test_generator_parameters_are_checked():
    with pytest.raises(DataError, match="parameter n_classes=1"):
        generate_classification(10, n_classes=1)
    with pytest.raises(DataError, match="parameter block_rows=0"):
        next(iter_classification_blocks(10, 0))


def test_load_rejects_keywords_of_other_formats(tmp_path):
    p = write(tmp_path, "x_svm", "1 1:0.5\n-1 2:1\n")
    msg = r"x_svm: parameter\(s\) \['missing'\] do not apply to libsvm"
    with pytest.raises(DataError, match=msg):
        load(p, missing="drop")
    assert load(p, n_features=3).n_features == 3


def test_parquet_directory_with_mismatched_files(tmp_path):
    folder = tmp_path / "mixed"
    write_parquet(np.ones((3, 2)), folder / "a.parquet", y=np.zeros(3))
    write_parquet(np.ones((3, 1)), folder / "b.parquet", y=np.zeros(3))
    with pytest.raises(DataError, match=r"b\.parquet: lacks the column\(s\) \['f2'\]"):
        load_parquet(folder)
    (folder / "c.parquet").write_bytes(b"PAR1 not really")
    (folder / "b.parquet").unlink()
    with pytest.raises(DataError, match=r"c\.parquet: not a readable Parquet file"):
        load_parquet(folder)
    empty = tmp_path / "none"
    empty.mkdir()
    with pytest.raises(DataError, match=r"none: directory holds no \*\.parquet"):
        load(empty)


def test_sparse_features_written_dense(tmp_path):
    X = sp.csr_matrix(np.array([[0.0, 1.5], [2.0, 0.0], [0.0, 0.0]]))
    ds = Dataset(X=X, y=np.array([1.0, -1.0, 1.0]), feature_names=["f1", "f2"], source="mem")
    back = load_parquet(write_parquet(ds, tmp_path / "s.parquet", layout="columns"))
    np.testing.assert_array_equal(back.X, X.toarray())  # asked for columns: read dense
    assert back.y.dtype == np.float64 and list(back.y) == [1.0, -1.0, 1.0]


def test_label_false_reads_every_column_as_a_feature(tmp_path):
    from elmscale.data import load_csv, load_parquet, write_parquet

    csv = tmp_path / "features.csv"
    csv.write_text("a,b,c\n1,2,3\n4,5,6\n")
    ds = load_csv(csv, label=False)
    assert ds.y is None and ds.feature_names == ["a", "b", "c"]
    np.testing.assert_array_equal(ds.X, [[1, 2, 3], [4, 5, 6]])
    pq_path = tmp_path / "features.parquet"
    write_parquet(ds.X, pq_path, feature_names=ds.feature_names)
    back = load_parquet(pq_path, label=False)
    assert back.y is None and back.X.shape == (2, 3)
