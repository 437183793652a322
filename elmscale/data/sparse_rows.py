"""Sparse rows in Parquet: one struct column per data set in Spark ML's vector layout.

The convention is the one Spark ML's ``VectorUDT`` writes to Parquet for a ``features``
column (``org.apache.spark.ml.linalg.VectorUDT.sqlType``), the most common way sparse
rows are stored in Parquet files; any writer can produce it (pyarrow, Spark, Polars)::

    features: struct<
        type: int8,              # 0: a sparse row, 1: a dense row
        size: int32,             # the row's width (the data set's number of features)
        indices: list<int32>,    # 0-based, strictly increasing column numbers
        values: list<double>     # one value per index (a dense row: every value)
    >

``type`` may be left out (every row sparse); a dense row (``type`` 1) has a null ``size``
and ``indices`` and ``size`` values.  Every row of a data set has the same width.

Spark also names the column's type in the file's key-value metadata: under
:data:`SPARK_ROW_METADATA` the whole row schema as JSON (Spark's ``StructType.json``),
the column's type a ``udt`` of class ``org.apache.spark.ml.linalg.VectorUDT``, so that
Spark reads it back as a ``Vector``, not a struct.  :func:`with_spark_metadata` adds it to
a schema with vector columns (``write_parquet`` writes it); readers here need it not:
files with or without it read the same.
:func:`vector_array` writes a CSR matrix in this layout; :func:`csr_from_vectors` reads a
column back as a float32 CSR block, checking it (a bad row is a
:class:`~elmscale.core.errors.DataError` naming the file, the column, the row group and
the row).  No scikit-learn here: Parquet work units read on workers use it.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from elmscale.core.errors import DataError

__all__ = [
    "SPARK_ROW_METADATA",
    "VECTOR_TYPE",
    "csr_from_vectors",
    "is_vector_type",
    "spark_row_schema",
    "vector_array",
    "vector_width",
    "with_spark_metadata",
]

#: Spark ML's ``VectorUDT.sqlType``, as elmscale writes it.
VECTOR_TYPE = pa.struct(
    [
        pa.field("type", pa.int8(), nullable=False),
        pa.field("size", pa.int32()),
        pa.field("indices", pa.list_(pa.field("element", pa.int32(), nullable=False))),
        pa.field("values", pa.list_(pa.field("element", pa.float64(), nullable=False))),
    ]
)

_SPARSE, _DENSE = 0, 1

#: The Parquet key-value metadata key under which Spark stores a file's row schema
#: (``ParquetReadSupport.SPARK_METADATA_KEY``).
SPARK_ROW_METADATA = "org.apache.spark.sql.parquet.row.metadata"

#: Spark SQL's JSON names of the Arrow types elmscale writes (``DataType.typeName``)
_SPARK_TYPE_NAMES = {
    pa.int8(): "byte",
    pa.int16(): "short",
    pa.int32(): "integer",
    pa.int64(): "long",
    pa.float32(): "float",
    pa.float64(): "double",
    pa.bool_(): "boolean",
    pa.string(): "string",
    pa.large_string(): "string",
}


def _spark_type(t: pa.DataType, *, udt: bool = True):
    """Spark's JSON of ``t`` (``DataType.jsonValue``), or None for a type without one
    here; with ``udt``, elmscale's :data:`VECTOR_TYPE` is VectorUDT (whose ``sqlType`` is
    that struct)."""
    if t in _SPARK_TYPE_NAMES:
        return _SPARK_TYPE_NAMES[t]
    if udt and t == VECTOR_TYPE:
        return {
            "type": "udt",
            "class": "org.apache.spark.ml.linalg.VectorUDT",
            "pyClass": "pyspark.ml.linalg.VectorUDT",
            "sqlType": _spark_type(VECTOR_TYPE, udt=False),
        }
    if pa.types.is_list(t):
        element = _spark_type(t.value_type)
        return (
            None
            if element is None
            else {
                "type": "array",
                "elementType": element,
                "containsNull": t.value_field.nullable,
            }
        )
    if pa.types.is_struct(t):
        fields = [_spark_field(t.field(i)) for i in range(t.num_fields)]
        return None if None in fields else {"type": "struct", "fields": fields}
    return None


def _spark_field(f: pa.Field):
    kind = _spark_type(f.type)
    if kind is None:
        return None
    return {"name": f.name, "type": kind, "nullable": f.nullable, "metadata": {}}


def spark_row_schema(schema: pa.Schema) -> str | None:
    """``schema`` as Spark's row schema JSON (compact, as ``StructType.json`` writes it),
    vector columns as VectorUDT; None if a field has a type not mapped here."""
    fields = [_spark_field(f) for f in schema]
    if None in fields:
        return None
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


def with_spark_metadata(schema: pa.Schema) -> pa.Schema:
    """``schema`` with Spark's row schema in its metadata (:data:`SPARK_ROW_METADATA`)
    when it has a vector column, so Spark reads that column as a Vector; as it was
    otherwise (no vector column, or a type without a Spark name here)."""
    if not any(f.type == VECTOR_TYPE for f in schema):
        return schema
    row_schema = spark_row_schema(schema)
    if row_schema is None:
        return schema
    return schema.with_metadata({**(schema.metadata or {}), SPARK_ROW_METADATA: row_schema})


EXPECTED = (
    "expected sparse rows in Spark ML's vector layout: struct<type: int8 (0 sparse, "
    "1 dense), size: int32, indices: list<int32> (0-based, increasing), values: list<double>>"
)


def _is_list_of(t: pa.DataType, kind) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and kind(t.value_type)


def _is_number(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def is_vector_type(t: pa.DataType) -> bool:
    """Whether ``t`` is a struct in the vector layout (``type`` optional)."""
    if not pa.types.is_struct(t):
        return False
    fields = {t.field(i).name: t.field(i).type for i in range(t.num_fields)}
    return (
        set(fields) - {"type"} == {"size", "indices", "values"}
        and pa.types.is_integer(fields["size"])
        and _is_list_of(fields["indices"], pa.types.is_integer)
        and _is_list_of(fields["values"], _is_number)
        and ("type" not in fields or pa.types.is_integer(fields["type"]))
    )


def vector_array(X: sp.spmatrix) -> pa.StructArray:
    """The rows of ``X`` (any scipy sparse matrix) as a struct array in the vector layout:
    every row sparse (``type`` 0), ``size`` the width, indices sorted, values float64."""
    csr = sp.csr_matrix(X, dtype=np.float64, copy=True)
    csr.sum_duplicates()  # also sorts the indices
    n, d = csr.shape
    if d > np.iinfo(np.int32).max or csr.nnz > np.iinfo(np.int32).max:
        raise DataError(
            f"X: {n} x {d} with {csr.nnz} nonzeros; expected under 2^31 columns and nonzeros "
            "(the layout's int32 sizes, indices and list offsets)"
        )
    offsets = pa.array(csr.indptr.astype(np.int32))
    indices = pa.ListArray.from_arrays(
        offsets, pa.array(csr.indices.astype(np.int32)), type=VECTOR_TYPE.field("indices").type
    )
    values = pa.ListArray.from_arrays(
        offsets, pa.array(csr.data), type=VECTOR_TYPE.field("values").type
    )
    return pa.StructArray.from_arrays(
        [
            pa.array(np.full(n, _SPARSE, dtype=np.int8)),
            pa.array(np.full(n, d, dtype=np.int32)),
            indices,
            values,
        ],
        fields=list(VECTOR_TYPE),
    )


def vector_width(
    footer: pq.FileMetaData, column: str, file: str, fs=None, path: str | None = None
) -> int:
    """The width of the rows of ``column`` in one file (``file`` its name in errors,
    ``path`` its name in ``fs``), from the footer's statistics of its ``size`` (one width
    for every row); a file without them (or of dense rows only) has the column read
    here."""
    leaf = f"{column}.size"
    low, high, known = None, None, footer.num_row_groups > 0
    for g in range(footer.num_row_groups):
        group = footer.row_group(g)
        chunk = next(
            (
                group.column(i)
                for i in range(group.num_columns)
                if group.column(i).path_in_schema == leaf
            ),
            None,
        )
        stats = None if chunk is None else chunk.statistics
        if stats is None or not stats.has_min_max or stats.null_count:
            known = False
            break
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    if not known:
        table = pq.read_table(path or file, columns=[column], filesystem=fs)
        return _width_of_rows(table.column(column), file, column)
    if low != high:
        raise DataError(
            f"{file}: column '{column}': rows of widths {low} to {high} (its 'size'); "
            "expected every row of the same width"
        )
    if high is None or high < 1:
        raise DataError(f"{file}: column '{column}': width {high}; {EXPECTED}")
    return int(high)


def _width_of_rows(column: pa.ChunkedArray, file: str, name: str) -> int:
    """The one width of a column's rows: sparse rows' ``size``, dense rows' value count."""
    arr = column.combine_chunks()
    kinds, sizes, _, values = _fields(arr)
    widths = np.where(
        kinds == _DENSE,
        pc.list_value_length(values).to_numpy(zero_copy_only=False),
        pc.fill_null(sizes, -1).to_numpy(zero_copy_only=False),
    )
    found = np.unique(widths[~np.asarray(arr.is_null().to_numpy(zero_copy_only=False))])
    if found.size != 1 or found[0] < 1:
        raise DataError(
            f"{file}: column '{name}': row widths {found.tolist()[:5]}; expected every row "
            "of one positive width"
        )
    return int(found[0])


def _fields(arr: pa.StructArray):
    """``(kinds, size, indices, values)`` of a struct array (its slice offset applied;
    ``kinds`` an int8 ndarray, 0 where ``type`` is absent)."""
    children = dict(
        zip((arr.type.field(i).name for i in range(arr.type.num_fields)), arr.flatten())
    )
    if "type" in children:
        kinds = pc.fill_null(children["type"], _SPARSE).to_numpy(zero_copy_only=False)
    else:
        kinds = np.zeros(len(arr), dtype=np.int8)
    return kinds, children["size"], children["indices"], children["values"]


def _list_parts(lists: pa.Array) -> tuple[np.ndarray, pa.Array]:
    """A list array's offsets (from 0, one per row and one more) and its elements."""
    offsets = lists.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    elements = lists.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    return offsets - offsets[0], elements


def csr_from_vectors(
    column: pa.ChunkedArray | pa.Array,
    width: int,
    where: str,
    first_row: int = 0,
    dtype: type = np.float32,
) -> sp.csr_matrix:
    """The rows of a vector-layout column as a CSR matrix (``dtype``) of ``width`` columns
    (indices sorted), each row checked: not null, its ``size`` the width, as many indices
    as values, indices in ``0 .. width - 1`` and strictly increasing, values finite.
    ``where`` names the file, column and row group in errors; ``first_row`` is the
    column's first row's number there (rows are counted from 1 in messages)."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(arr)

    def bad(row: int, what: str) -> DataError:
        return DataError(f"{where}: row {first_row + row + 1}: {what}; {EXPECTED}")

    if arr.null_count:
        row = int(np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[0])
        raise DataError(
            f"{where}: {arr.null_count} null row(s) (first row {first_row + row + 1}); "
            "expected a vector on every row"
        )
    kinds, sizes, indices, values = _fields(arr)
    if np.any((kinds != _SPARSE) & (kinds != _DENSE)):
        row = int(np.flatnonzero((kinds != _SPARSE) & (kinds != _DENSE))[0])
        raise bad(row, f"type {int(kinds[row])}")
    if np.any(kinds == _DENSE):
        indices, values, sizes = _dense_rows_as_sparse(kinds, indices, values, sizes, width, bad)
    size_rows = pc.fill_null(sizes, -1).to_numpy(zero_copy_only=False)
    if np.any(size_rows != width):
        row = int(np.flatnonzero(size_rows != width)[0])
        raise bad(row, f"size {int(size_rows[row])} (null: -1), not the data set's width {width}")
    index_nulls = indices.is_null().to_numpy(zero_copy_only=False)
    if index_nulls.any():
        raise bad(int(np.flatnonzero(index_nulls)[0]), "a sparse row without indices")
    index_offsets, index_elements = _list_parts(indices)
    value_offsets, value_elements = _list_parts(values)
    if not np.array_equal(index_offsets, value_offsets):
        lengths = np.diff(index_offsets), np.diff(value_offsets)
        row = int(np.flatnonzero(lengths[0] != lengths[1])[0])
        raise bad(row, f"{int(lengths[0][row])} indices but {int(lengths[1][row])} values")
    if index_elements.null_count or value_elements.null_count:
        nulls = (index_elements if index_elements.null_count else value_elements).is_null()
        k = int(np.flatnonzero(nulls.to_numpy(zero_copy_only=False))[0])
        raise bad(_row_of(index_offsets, k), "a null index or value")
    cols = index_elements.to_numpy(zero_copy_only=False).astype(np.int64)
    _check_indices(cols, index_offsets, width, bad)
    data = pc.cast(value_elements, pa.from_numpy_dtype(dtype)).to_numpy(zero_copy_only=False)
    if not np.isfinite(data).all():
        raise bad(_row_of(index_offsets, int(np.flatnonzero(~np.isfinite(data))[0])), "NaN or inf")
    index_type = np.int32 if max(width, cols.size) < np.iinfo(np.int32).max else np.int64
    csr = sp.csr_matrix(
        (data, cols.astype(index_type), index_offsets.astype(index_type)), shape=(n, width)
    )
    csr.has_sorted_indices = True  # checked strictly increasing above
    return csr


def _row_of(offsets: np.ndarray, k: int) -> int:
    """The row that holds element ``k`` of a list array with these offsets."""
    return int(np.searchsorted(offsets, k, side="right")) - 1


def _check_indices(cols: np.ndarray, offsets: np.ndarray, width: int, bad) -> None:
    """Every index in ``0 .. width - 1``, strictly increasing within its row."""
    out = (cols < 0) | (cols >= width)
    if out.any():
        k = int(np.flatnonzero(out)[0])
        raise bad(_row_of(offsets, k), f"index {int(cols[k])} out of range 0..{width - 1}")
    if cols.size > 1:
        steps = np.diff(cols)
        starts = offsets[1:-1]
        starts = starts[(starts > 0) & (starts < cols.size)]
        steps[starts - 1] = 1  # a new row may start lower
        if np.any(steps <= 0):
            k = int(np.flatnonzero(steps <= 0)[0]) + 1
            raise bad(
                _row_of(offsets, k),
                f"indices not strictly increasing ({int(cols[k - 1])} then {int(cols[k])})",
            )


def _dense_rows_as_sparse(kinds, indices, values, sizes, width: int, bad):
    """The column with its dense rows (``type`` 1: every value, no indices) rewritten as
    sparse rows of ``width`` (a rare layout: Spark writes a DenseVector so), row by row."""
    index_rows, value_rows, size_rows = [], [], []
    for row, (kind, idx, vals, size) in enumerate(
        zip(kinds, indices.to_pylist(), values.to_pylist(), sizes.to_pylist())
    ):
        if kind == _DENSE:
            if vals is None or len(vals) != width:
                count = None if vals is None else len(vals)
                raise bad(row, f"a dense row of {count} values, not the width {width}")
            idx, size = list(range(width)), width
        index_rows.append(idx)
        value_rows.append(vals)
        size_rows.append(size)
    return (
        pa.array(index_rows, type=pa.list_(pa.int64())),
        pa.array(value_rows, type=pa.list_(pa.float64())),
        pa.array(size_rows, type=pa.int64()),
    )
