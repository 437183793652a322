"""Parquet files of data sets, read and written whole (:func:`load_parquet`,
:func:`write_parquet`).

A data set is one file or a directory of ``*.parquet`` / ``*.pq`` files read in name order.
Files written here hold one float32 column per feature (no dictionary encoding, zstd), or
for sparse rows one column in Spark ML's vector layout (:mod:`elmscale.data.sparse_rows`),
then the label column in its own type; row groups of 128k-1M rows (work units for distributed
readers); written to a temporary name and renamed, so a failed write leaves nothing.  Paths
may be fsspec URLs with ``storage_options`` (:mod:`elmscale.data.storage`; an object is put
whole when complete).

Reading a Parquet data set piece by piece on workers is :mod:`elmscale.data.parquet`'s job.
"""

from __future__ import annotations

import math
import os
import posixpath
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from elmscale.core.errors import DataError
from elmscale.data.columns import (
    PARQUET_SUFFIXES,
    LabelSpec,
    PathLike,
    _describe,
    is_numeric_type,
    parquet_columns,
    vector_column,
)
from elmscale.data.dataset import Dataset, MissingPolicy, _assemble, _check_missing_policy
from elmscale.data.sparse_rows import (
    VECTOR_TYPE,
    csr_from_vectors,
    vector_array,
    vector_width,
    with_spark_metadata,
)
from elmscale.data.storage import Location, locate, storage_errors, write_whole

#: Row-group size bounds (rows) for :func:`write_parquet`.
MIN_ROW_GROUP = 131_072


MAX_ROW_GROUP = 1_048_576

#: Data page size (bytes, before compression) for :func:`write_parquet`: 16,384 float32
#: values.  A row group's first rows are then a few pages of each column: a sample of them
#: (the ELM's precision check) reads those from an object store, not the whole group.
DATA_PAGE_BYTES = 64 * 2**10


def _parquet_files(where: Location) -> list[str]:
    """The file, or the ``*.parquet`` / ``*.pq`` files of the folder (not below it), by
    name; names in ``where``'s store."""
    if not where.exists():
        raise DataError(
            f"{where}: no such file or directory; expected a Parquet file or a directory of them"
        )
    if not where.is_dir():
        return [where.path]
    if where.is_local:
        names = [os.fspath(f) for f in Path(where.path).iterdir() if f.is_file()]
    else:
        with storage_errors(where, "a folder of Parquet files"):
            listed = where.fs.ls(where.path, detail=True)
        names = [info["name"] for info in listed if info["type"] == "file"]
    files = sorted(
        f
        for f in names
        if posixpath.splitext(f)[1] in PARQUET_SUFFIXES
        and not os.path.basename(f).startswith((".", "_"))
    )
    if not files:
        raise DataError(
            f"{where}: directory holds no *.parquet or *.pq files; expected Parquet files"
        )
    return files


def _parquet_error(file: str, exc: Exception) -> DataError:
    return DataError(f"{file}: not a readable Parquet file ({exc}); expected a Parquet file")


def load_parquet(
    path: PathLike,
    label: LabelSpec | None = None,
    features: Sequence[str] | str | None = None,
    missing: MissingPolicy = "error",
    storage_options: dict | None = None,
) -> Dataset:
    """Read a Parquet file, or every ``*.parquet`` / ``*.pq`` file of a directory in name order.

    Parameters
    ----------
    path : a file or a directory, local or an fsspec URL (with ``storage_options``).
    label : the label column: a name, a position, "first" or "last"; None (default) takes the
        column "label" if there is one, else the last column; False: no label column.
    features : None: every other numeric column, or the column of sparse rows if there is
        one; a list of names; or a glob pattern such as "f*" matched against the column
        names (in file order).
    missing : nulls / NaN: "error" or "drop", as in :func:`load_csv`.

    A column of sparse rows (Spark ML's vector layout, :mod:`elmscale.data.sparse_rows`)
    gives ``X`` as a CSR matrix (float64 values as stored, sorted indices) with feature
    names "f1".."fd"; a bad row is an error naming the file, the column and the row (no
    row is dropped for it).
    """
    where = locate(path, storage_options)
    files = _parquet_files(where)
    src = str(where)
    fs = None if where.is_local else where.fs
    _check_missing_policy(missing, src)
    first = where.url_of(files[0])
    try:
        schema = pq.read_schema(files[0], filesystem=fs)
    except (pa.ArrowException, OSError) as exc:
        raise _parquet_error(first, exc) from exc
    names = list(schema.names)
    fnames, yname, ypos = parquet_columns(schema, label, features, src, first)
    wanted = [*fnames] if yname is None else [*fnames, yname]
    tables = []
    for f in files:
        try:
            file_names = pq.read_schema(f, filesystem=fs).names if f != files[0] else names
            lacking = [c for c in wanted if c not in file_names]
            if lacking:
                raise DataError(
                    f"{where.url_of(f)}: lacks the column(s) {lacking}; "
                    "expected every file of the directory to have the same columns"
                )
            tables.append(pq.read_table(f, columns=wanted, filesystem=fs))
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(where.url_of(f), exc) from exc
    try:
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    except pa.ArrowInvalid as exc:
        raise DataError(f"{src}: the files' schemas differ ({exc}); expected one schema") from exc
    if table.num_rows == 0:
        raise DataError(f"{src}: no rows; expected at least one row")
    vector = vector_column(schema, fnames)
    if vector is not None:
        return _sparse_dataset(files, tables, where, vector, yname, ypos, missing)
    columns = [
        pc.cast(table.column(n), pa.float64()).to_numpy(zero_copy_only=False) for n in fnames
    ]
    if yname is None:
        return _assemble(
            source=src,
            columns=columns,
            names=fnames,
            y=None,
            y_missing=np.zeros(table.num_rows, bool),
            label_desc="(none)",
            missing=missing,
            na_note=" (null or NaN)",
        )
    y, y_missing = _label_values(table.column(yname))
    return _assemble(
        source=src,
        columns=columns,
        names=fnames,
        y=y,
        y_missing=y_missing,
        label_desc=_describe(yname, ypos),
        missing=missing,
        na_note=" (null or NaN)",
    )


def _label_values(ycol: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """A label column's values (numbers as numbers, else an object array) and where they
    are missing (null or NaN)."""
    y_missing = ycol.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_dictionary(ycol.type):
        ycol = pc.cast(ycol, ycol.type.value_type)
    if is_numeric_type(ycol.type):
        if ycol.null_count:
            y = pc.cast(ycol, pa.float64()).to_numpy(zero_copy_only=False)
        else:
            y = ycol.to_numpy()
        if y.dtype.kind == "f":
            y_missing = y_missing | np.isnan(y)
    else:
        y = np.array(ycol.to_pylist(), dtype=object)
    return y, y_missing


def _sparse_dataset(
    files: list[str],
    tables: list[pa.Table],
    where: Location,
    column: str,
    yname: str | None,
    ypos: int | None,
    missing: MissingPolicy,
) -> Dataset:
    """:func:`load_parquet` of a column of sparse rows: a float64 CSR ``X``, each file's
    rows checked against the width they all share."""
    src = str(where)
    fs = None if where.is_local else where.fs
    widths = []
    for f in files:
        try:
            footer = pq.read_metadata(f, filesystem=fs)
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(where.url_of(f), exc) from exc
        widths.append(vector_width(footer, column, where.url_of(f), fs=fs, path=f))
    if len(set(widths)) > 1:
        raise DataError(
            f"{src}: column '{column}' holds rows of widths {sorted(set(widths))} in different "
            "files; expected one width"
        )
    width = widths[0]
    blocks = [
        csr_from_vectors(
            t.column(column), width, f"{where.url_of(f)}: column '{column}'", dtype=np.float64
        )
        for f, t in zip(files, tables)
    ]
    X = sp.vstack(blocks, format="csr", dtype=np.float64)
    names = [f"f{j + 1}" for j in range(width)]
    if yname is None:
        return Dataset(X=X, y=None, feature_names=names, source=src)
    ycols = [t.column(yname) for t in tables]
    y, y_missing = _label_values(pa.chunked_array([c for col in ycols for c in col.chunks]))
    n_missing = int(y_missing.sum())
    if n_missing and missing == "error":
        row = int(np.flatnonzero(y_missing)[0])
        raise DataError(
            f"{src}: {n_missing} missing value(s) (null or NaN) in label "
            f"{_describe(yname, ypos)} (first in row {row + 1}); expected numbers, or pass "
            "missing='drop' to drop those rows"
        )
    if n_missing:
        keep = ~y_missing
        X, y = X[keep], y[keep]
        if X.shape[0] == 0:
            raise DataError(f"{src}: no data rows left; expected at least one complete row")
    return Dataset(X=X, y=y, feature_names=names, source=src, n_dropped=n_missing)


def _row_group_sizes(n_rows: int, row_group_size: int) -> list[int]:
    """Split ``n_rows`` into near-equal row groups within [MIN_ROW_GROUP, MAX_ROW_GROUP].

    The requested size is clipped to that range; data smaller than it go in one group.
    """
    target = min(max(int(row_group_size), MIN_ROW_GROUP), MAX_ROW_GROUP)
    if n_rows <= target:
        return [n_rows] if n_rows else []
    k_min = math.ceil(n_rows / MAX_ROW_GROUP)
    k_max = n_rows // MIN_ROW_GROUP
    k = min(max(round(n_rows / target), k_min), k_max)
    base, extra = divmod(n_rows, k)
    return [base + 1] * extra + [base] * (k - extra)


def _label_array(y: np.ndarray, src: str) -> pa.Array:
    if y.dtype.kind in "biuf":
        return pa.array(y)
    if y.dtype.kind in "US" or y.dtype == object:
        values = y.tolist()
        if all(isinstance(v, str) for v in values):
            return pa.array(values, type=pa.string())
        numbers = (int, float, np.integer, np.floating)
        if all(isinstance(v, numbers) and not isinstance(v, bool) for v in values):
            return pa.array(np.asarray(values, dtype=np.float64))
    raise DataError(
        f"{src}: parameter y has values of mixed or unsupported types (dtype {y.dtype}); "
        "expected numbers or strings"
    )


def write_parquet(
    dataset_or_X: Dataset | np.ndarray | sp.spmatrix,
    path: PathLike,
    y: np.ndarray | Sequence[Any] | None = None,
    feature_names: Sequence[str] | None = None,
    label_name: str = "label",
    row_group_size: int = 262_144,
    compression: str = "zstd",
    storage_options: dict | None = None,
    layout: str = "auto",
    sparse_column: str = "features",
) -> Path | Location:
    """Write features (float32 columns, or one column of sparse rows) and labels to one
    Parquet file, atomically.

    Parameters
    ----------
    dataset_or_X : a :class:`Dataset`, or a 2-D array / sparse matrix of features.
    path : the file to write (its directory is created if needed), or an fsspec URL
        (with ``storage_options``: the object is put whole when written).
    y : labels, one per row (overrides the Dataset's); None writes no label column when
        ``dataset_or_X`` is an array.  Written in their own type: numbers or strings.
    feature_names : column names; default the Dataset's, else "f1".."fd".
    label_name : name of the label column.
    row_group_size : rows per row group, clipped to [131072, 1048576]; the rows are split into
        near-equal groups within that range (one group when the data are smaller).
    compression : Parquet codec.
    layout : "auto" (default): a sparse ``X`` as one column of sparse rows, a dense one as
        a column per feature; "columns" or "sparse" force one.  Sparse rows are Spark ML's
        vector layout (:mod:`elmscale.data.sparse_rows`: a struct of type, size,
        indices, values; float64 values, indices sorted), which :func:`load_parquet` and
        :func:`~elmscale.data.parquet.open_parquet` read back as CSR.
    sparse_column : the name of that column (Spark ML's default ``features``); the feature
        names are not written then.

    Feature columns are float32 without dictionary encoding.  The file is written under a temporary
    name in the same directory and renamed at the end: on any error nothing is left behind
    (and an existing file at ``path`` is untouched).  Returns the path written (a URL's
    :class:`~elmscale.data.storage.Location`).
    """
    where = locate(path, storage_options)
    src = str(where)
    X, y, feature_names = _unpack(dataset_or_X, y, feature_names)
    X = _feature_matrix(X, src)
    if layout not in ("auto", "columns", "sparse"):
        raise DataError(
            f"{src}: parameter layout={layout!r}; expected 'auto', 'columns' or 'sparse'"
        )
    sparse_rows = layout == "sparse" or (layout == "auto" and sp.issparse(X))
    if sparse_rows:
        X = sp.csr_matrix(X)
        names = [str(sparse_column)]
    else:
        names = _column_names(feature_names, X.shape[1], src)
    y_arr = None if y is None else _label_column(y, X.shape[0], label_name, names, src)
    if int(row_group_size) < 1:
        raise DataError(
            f"{src}: parameter row_group_size={row_group_size}; expected a positive integer"
        )
    schema = _schema(names, label_name, y_arr, sparse_rows)
    return write_whole(
        where, lambda tmp: _write_row_groups(tmp, X, y_arr, schema, row_group_size, compression)
    )


def _unpack(
    dataset_or_X: Dataset | np.ndarray | sp.spmatrix,
    y: np.ndarray | Sequence[Any] | None,
    feature_names: Sequence[str] | None,
) -> tuple[Any, np.ndarray | Sequence[Any] | None, Sequence[str] | None]:
    """The features, and the labels and names given, else a Dataset's own."""
    if not isinstance(dataset_or_X, Dataset):
        return dataset_or_X, y, feature_names
    if y is None:
        y = dataset_or_X.y
    if feature_names is None:
        feature_names = dataset_or_X.feature_names
    return dataset_or_X.X, y, feature_names


def _feature_matrix(X: Any, src: str) -> np.ndarray | sp.spmatrix:
    """``X`` as a 2-D numeric array (a sparse matrix kept as it is)."""
    if not sp.issparse(X):
        X = np.asarray(X)
        if X.dtype.kind not in "biuf":
            raise DataError(f"{src}: parameter X has dtype {X.dtype}; expected numbers")
    if X.ndim != 2:
        raise DataError(f"{src}: parameter X has {X.ndim} dimension(s); expected a 2-D array")
    return X


def _column_names(feature_names: Sequence[str] | None, d: int, src: str) -> list[str]:
    """``d`` distinct feature column names: those given, else "f1".."fd"."""
    if feature_names is None:
        names = [f"f{j + 1}" for j in range(d)]
    else:
        names = [str(s) for s in feature_names]
    if len(names) != d:
        raise DataError(
            f"{src}: parameter feature_names has {len(names)} names for {d} columns; "
            "expected one per column"
        )
    if len(set(names)) != d:
        raise DataError(f"{src}: parameter feature_names has duplicates; expected unique names")
    return names


def _label_column(
    y: np.ndarray | Sequence[Any], n: int, label_name: str, names: list[str], src: str
) -> pa.Array:
    """The labels as an Arrow array (one per row, under a name no feature has)."""
    y_np = np.asarray(y)
    if y_np.ndim != 1 or y_np.shape[0] != n:
        raise DataError(
            f"{src}: parameter y has shape {y_np.shape} but X has {n} rows; "
            "expected one label per row"
        )
    if label_name in names:
        raise DataError(
            f"{src}: parameter label_name '{label_name}' is also a feature name; "
            "expected a distinct name"
        )
    return _label_array(y_np, src)


def _schema(
    names: list[str], label_name: str, y_arr: pa.Array | None, sparse_rows: bool = False
) -> pa.Schema:
    """One float32 field per feature (or one field of sparse rows, with Spark's row schema
    in the metadata: Spark reads it as a Vector), then the label's field in its own type."""
    if sparse_rows:
        fields = [pa.field(names[0], VECTOR_TYPE)]
    else:
        fields = [pa.field(nm, pa.float32()) for nm in names]
    if y_arr is not None:
        fields.append(pa.field(label_name, y_arr.type))
    return with_spark_metadata(pa.schema(fields))


def _write_row_groups(
    tmp: Path,
    X: np.ndarray | sp.spmatrix,
    y_arr: pa.Array | None,
    schema: pa.Schema,
    row_group_size: int,
    compression: str,
) -> None:
    """Write the rows to ``tmp`` in near-equal row groups (:func:`_row_group_sizes`), the
    features as float32 without dictionary encoding in pages of :data:`DATA_PAGE_BYTES`;
    no rows: an empty table."""
    n, d = X.shape
    with pq.ParquetWriter(
        tmp,
        schema,
        compression=compression,
        use_dictionary=False,
        write_statistics=True,
        data_page_size=DATA_PAGE_BYTES,
    ) as writer:
        start = 0
        for size in _row_group_sizes(n, row_group_size):
            block = X[start : start + size]
            if pa.types.is_struct(schema.field(0).type):
                arrays = [vector_array(block)]
            else:
                block = block.toarray() if sp.issparse(block) else block
                cols = np.ascontiguousarray(np.asarray(block, dtype=np.float32).T)
                arrays = [pa.array(cols[j]) for j in range(d)]
            if y_arr is not None:
                arrays.append(y_arr.slice(start, size))
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema), row_group_size=size)
            start += size
        if n == 0:
            writer.write_table(schema.empty_table())
