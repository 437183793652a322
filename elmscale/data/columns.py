"""Choosing feature and label columns in a table's schema, shared by every reader (no
scikit-learn here: Parquet work units read on workers use it)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from typing import Literal

import numpy as np
import pyarrow as pa

from elmscale.core.errors import DataError
from elmscale.data.sparse_rows import is_vector_type

PathLike = str | os.PathLike[str]

LabelSpec = Literal["last", "first"] | int | str

PARQUET_SUFFIXES = (".parquet", ".pq")


def _describe(name: str, position: int) -> str:
    return f"column '{name}' (position {position})"


def _resolve_column(spec: int | str, names: Sequence[str], source: str, what: str) -> int:
    """Position of the column given by name or (possibly negative) position."""
    n = len(names)
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        pos = int(spec)
        if not -n <= pos < n:
            raise DataError(
                f"{source}: {what} column position {pos} is out of range; "
                f"expected -{n} <= position < {n} (the file has {n} columns)"
            )
        return pos % n
    if isinstance(spec, str):
        if spec in names:
            return list(names).index(spec)
        raise DataError(
            f"{source}: {what} column '{spec}' not found; expected one of the columns {list(names)}"
        )
    raise DataError(
        f"{source}: {what} column {spec!r} has type {type(spec).__name__}; "
        "expected a column name or an integer position"
    )


def _resolve_label(
    label: LabelSpec, names: Sequence[str], available: Sequence[int], source: str
) -> int | None:
    """Column position of the label: 'first'/'last' among ``available``, else name/position.

    ``False`` means the file has no label column (for scoring): None is returned.
    """
    if label is False:
        return None
    if label == "last":
        return available[-1]
    if label == "first":
        return available[0]
    pos = _resolve_column(label, names, source, "label")
    if pos not in available:
        raise DataError(
            f"{source}: label {_describe(names[pos], pos)} is also listed in drop_columns; "
            "expected a label column that is kept"
        )
    return pos


def is_numeric_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def vector_column(schema: pa.Schema, features: Sequence[str]) -> str | None:
    """The column of sparse rows among the chosen ``features`` (then the only one), or
    None for numeric columns (:mod:`elmscale.data.sparse_rows`)."""
    if len(features) == 1 and is_vector_type(schema.field(features[0]).type):
        return features[0]
    return None


def parquet_columns(
    schema: pa.Schema,
    label: LabelSpec | None,
    features: Sequence[str] | str | None,
    src: str,
    first_file: str,
) -> tuple[list[str], str | None, int | None]:
    """Feature names, label name and label position chosen in a Parquet schema (see
    :func:`load_parquet` for ``label`` and ``features``); errors name ``src``.  A column of
    sparse rows (:mod:`elmscale.data.sparse_rows`) is the features when ``features`` is
    None (one such column only), or when named alone."""
    names = list(schema.names)
    if not names:
        raise DataError(f"{first_file}: no columns; expected feature and label columns")
    if label is None:
        label = "label" if "label" in names else "last"
    ypos = _resolve_label(label, names, list(range(len(names))), src)
    yname = None if ypos is None else names[ypos]
    others = [n for n in names if n != yname]
    vectors = [n for n in others if is_vector_type(schema.field(n).type)]
    if features is None and len(vectors) > 1:
        raise DataError(
            f"{src}: columns {vectors} all hold sparse rows; expected features= naming one"
        )
    if features is None and vectors:
        fnames = vectors  # Spark ML's convention: one vector column holds the features
    elif features is None:
        fnames = [n for n in others if is_numeric_type(schema.field(n).type)]
    elif isinstance(features, str):
        fnames = [n for n in others if fnmatch.fnmatchcase(n, features)]
        if not fnames:
            raise DataError(
                f"{src}: parameter features={features!r} matches no column; expected a pattern "
                f"matching some of {others}"
            )
    else:
        fnames = list(features)
        for n in fnames:
            if n not in names:
                raise DataError(f"{src}: feature column '{n}' not found; expected one of {names}")
            if n == yname:
                raise DataError(
                    f"{src}: column '{n}' is both a feature and the label; "
                    "expected distinct columns"
                )
    if not fnames:
        raise DataError(
            f"{src}: no numeric feature column besides the label '{yname}'; "
            "expected numeric features"
        )
    chosen_vectors = [n for n in fnames if n in vectors]
    if chosen_vectors and len(fnames) > 1:
        raise DataError(
            f"{src}: features {fnames} mix the sparse-row column '{chosen_vectors[0]}' with "
            "other columns; expected the vector column alone"
        )
    for n in fnames:
        t = schema.field(n).type
        if not is_numeric_type(t) and n not in vectors:
            raise DataError(
                f"{src}: {_describe(n, names.index(n))} has type {t}; "
                "expected a numeric feature column"
            )
    return fnames, yname, ypos
