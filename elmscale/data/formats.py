"""Reading, writing, scaling and generating data sets.

Every loader returns a :class:`Dataset` (features ``X``, raw labels ``y``, feature names, the
path read).  Bad input raises :class:`elmscale._errors.DataError` (a ``ValueError``) whose
message names the file, the column or parameter at fault, and what was expected.

Formats
-------
LIBSVM / SVMlight (:func:`load_libsvm`)
    One sample per line: ``<label> <index>:<value> <index>:<value> ...`` with increasing
    integer indices, 1-based by LIBSVM's convention (``zero_based=False``).  Features left out
    are zero.  Read with :func:`sklearn.datasets.load_svmlight_file`; ``X`` is a dense float64
    array (``dense=True``) or a CSR matrix.  A test file may use fewer features than its
    training file (``a9a.t`` stops at index 122 of 123): pass ``n_features``.
Delimited text (:func:`load_csv`)
    ``.csv``, ``.data``, ``.dat``, ``.txt`` tables.  The separator is sniffed from the first
    lines (comma with optional spaces, tab with optional spaces, semicolon, else any run of
    whitespace, which also covers fixed-width numeric files); whether the first line is a
    header is detected (see :func:`load_csv`).  Missing values (``?`` and friends) are an
    error unless ``missing="drop"``.
ARFF (:func:`load_arff`)
    Weka's format, read with :func:`scipy.io.arff.loadarff`; numeric features, numeric or
    nominal label.
Parquet (:func:`load_parquet`, :func:`write_parquet`)
    One file or a directory of ``*.parquet`` / ``*.pq`` files read in name order.  Files
    written here hold one float32 column per feature (no dictionary encoding, zstd), then the
    label column in its own type; row groups of 128k-1M rows (work units for distributed
    readers); written to a temporary name and renamed, so a failed write leaves nothing.

:func:`load` picks the reader from the extension or, for names without a known extension
(LIBSVM sets such as ``a9a`` or ``heart_scale``), from the content (:func:`detect_format`).

Row numbers in messages count data rows from 1, not counting a header line.

Also here: :class:`Scaler` (the paper's [-1, 1] min-max scaling, fitted on training data
only), :func:`encode_labels`, :func:`check_finite`, and a deterministic synthetic problem
(:func:`generate_classification`, :func:`iter_classification_blocks`) for the quick start
and the benchmarks.
"""

from __future__ import annotations

import csv
import inspect
import math
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp
from scipy.io import arff
from sklearn.datasets import load_svmlight_file

from elmscale.core.errors import DataError
from elmscale.core.files import atomic_write
from elmscale.data.columns import (
    PARQUET_SUFFIXES,
    LabelSpec,
    PathLike,
    _describe,
    _resolve_column,
    _resolve_label,
    is_numeric_type,
    parquet_columns,
)

MissingPolicy = Literal["error", "drop"]


#: Markers read as a missing value by :func:`load_csv`.
DEFAULT_NA_VALUES: tuple[str, ...] = ("?", "", "NA", "NaN", "nan")


#: Row-group size bounds (rows) for :func:`write_parquet`.
MIN_ROW_GROUP = 131_072


MAX_ROW_GROUP = 1_048_576

_CSV_SUFFIXES = (".csv", ".data", ".dat", ".txt", ".tsv")

_LIBSVM_SUFFIXES = (".libsvm", ".svm", ".svmlight")

_LIBSVM_LINE = re.compile(r"^\S+(\s+\d+:\S+)+\s*$")

_LIBSVM_LABEL_ONLY = re.compile(r"^\S+\s*$")

_SNIFF_LINES = 20


@dataclass
class Dataset:
    """A data set as read from a file (or generated).

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features), float64, or scipy.sparse.csr_matrix
        The features.  Only :func:`load_libsvm` with ``dense=False`` gives a sparse matrix.
    y : ndarray of shape (n_samples,) or None
        The labels as read: numbers as float64 or int64, strings as an object array of str;
        None when the file was read without a label column (``label=False``).
    feature_names : list of str
        One name per column of ``X``.
    source : str
        The path read (or a description of how the data were generated).
    n_dropped : int
        Rows dropped because of missing values (``missing="drop"``); 0 otherwise.
    """

    X: np.ndarray | sp.csr_matrix = field(repr=False)
    y: np.ndarray | None = field(repr=False)
    feature_names: list[str] = field(repr=False)
    source: str
    n_dropped: int = 0

    def __post_init__(self) -> None:
        if self.X.ndim != 2:
            raise DataError(
                f"{self.source}: X has {self.X.ndim} dimension(s); expected a 2-D array"
            )
        if self.y is not None and (self.y.ndim != 1 or self.y.shape[0] != self.X.shape[0]):
            raise DataError(
                f"{self.source}: y has shape {self.y.shape} but X has {self.X.shape[0]} rows; "
                "expected one label per row"
            )
        if len(self.feature_names) != self.X.shape[1]:
            raise DataError(
                f"{self.source}: {len(self.feature_names)} feature names for {self.X.shape[1]} "
                "columns of X; expected one name per column"
            )

    @property
    def n_samples(self) -> int:
        """Number of rows."""
        return int(self.X.shape[0])

    @property
    def n_features(self) -> int:
        """Number of feature columns."""
        return int(self.X.shape[1])

    def __repr__(self) -> str:
        kind = "sparse" if sp.issparse(self.X) else "dense"
        dropped = f", n_dropped={self.n_dropped}" if self.n_dropped else ""
        return (
            f"Dataset(source={self.source!r}, n_samples={self.n_samples}, "
            f"n_features={self.n_features}, {kind}{dropped})"
        )


def _require_file(path: PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise DataError(f"{os.fspath(path)}: no such file; expected an existing data file")
    if p.is_dir():
        raise DataError(f"{os.fspath(path)}: is a directory; expected a data file")
    return p


def _head_lines(path: Path, n: int = _SNIFF_LINES) -> list[str]:
    """The first ``n`` non-blank lines of a text file (line endings removed)."""
    lines: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for raw in fh:
            line = raw.rstrip("\r\n")
            if line.strip():
                lines.append(line)
                if len(lines) >= n:
                    break
    return lines


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _check_missing_policy(missing: str, source: str) -> None:
    if missing not in ("error", "drop"):
        raise DataError(f"{source}: parameter missing={missing!r}; expected 'error' or 'drop'")


def _assemble(
    *,
    source: str,
    columns: list[np.ndarray],
    names: list[str],
    y: np.ndarray | None,
    y_missing: np.ndarray,
    label_desc: str,
    missing: MissingPolicy,
    na_note: str,
) -> Dataset:
    """Stack float64 feature columns, reject infinities, handle missing values."""
    n = y_missing.shape[0]
    X = np.empty((n, len(columns)), dtype=np.float64)
    for j, col in enumerate(columns):
        X[:, j] = col
    for j in range(X.shape[1]):
        inf_rows = np.flatnonzero(np.isinf(X[:, j]))
        if inf_rows.size:
            r = int(inf_rows[0])
            raise DataError(
                f"{source}: column '{names[j]}' has {inf_rows.size} infinite value(s) "
                f"(first {X[r, j]} in row {r + 1}); expected finite numbers"
            )
    nan_mask = np.isnan(X)
    row_missing = nan_mask.any(axis=1) | y_missing
    n_missing = int(row_missing.sum())
    if n_missing and missing == "error":
        parts = []
        for j in np.flatnonzero(nan_mask.any(axis=0)):
            rows = np.flatnonzero(nan_mask[:, j])
            parts.append(f"{rows.size} in column '{names[j]}' (first in row {int(rows[0]) + 1})")
        if y_missing.any():
            rows = np.flatnonzero(y_missing)
            parts.append(f"{rows.size} in label {label_desc} (first in row {int(rows[0]) + 1})")
        total = int(nan_mask.sum() + y_missing.sum())
        raise DataError(
            f"{source}: {total} missing value(s){na_note}: {'; '.join(parts)}; "
            "expected numbers, or pass missing='drop' to drop those rows"
        )
    if n_missing:
        keep = ~row_missing
        X = X[keep]
        y = None if y is None else y[keep]
    if X.shape[0] == 0:
        raise DataError(f"{source}: no data rows left; expected at least one complete row")
    return Dataset(X=X, y=y, feature_names=list(names), source=source, n_dropped=n_missing)


def _find_bad_libsvm_line(path: Path, zero_based: bool | str) -> str | None:
    """Describe the first line that is not valid LIBSVM, or None if all parse."""
    min_index = 0 if zero_based in (True, "auto") else 1
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, raw in enumerate(fh, start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            tokens = line.split()
            if not _is_number(tokens[0]):
                return f"line {lineno}: label {tokens[0]!r} is not a number"
            last = min_index - 1
            for tok in tokens[1:]:
                if tok.startswith("qid:"):
                    continue
                idx, colon, val = tok.partition(":")
                if not colon:
                    return f"line {lineno}: token {tok!r} has no ':'"
                try:
                    index = int(idx)
                except ValueError:
                    return f"line {lineno}: token {tok!r}: index {idx!r} is not an integer"
                if not _is_number(val):
                    return (
                        f"line {lineno}: token {tok!r}: value {val!r} of feature {idx} "
                        "is not a number"
                    )
                if index < min_index:
                    return f"line {lineno}: token {tok!r}: index {index} is below {min_index}"
                if index <= last:
                    return f"line {lineno}: token {tok!r}: index {index} is not increasing"
                last = index
    return None


def load_libsvm(
    path: PathLike,
    n_features: int | None = None,
    zero_based: bool | Literal["auto"] = False,
    dense: bool = True,
) -> Dataset:
    """Read a LIBSVM / SVMlight file.

    Parameters
    ----------
    path : path of the file.
    n_features : width of the feature space; needed when a test file does not use its last
        features (``a9a.t`` needs ``n_features=123``).  Default: the largest index present.
    zero_based : whether indices start at 0; LIBSVM files start at 1 (the default, False);
        "auto" lets scikit-learn guess.
    dense : return ``X`` as a dense float64 array (default) or as a CSR matrix.

    Labels may be any numbers (-1/+1, 0/1, 1..k); they come back as float64.  Feature names
    are "f1".."fd".
    """
    p = _require_file(path)
    src = os.fspath(path)
    if not _head_lines(p, 1):
        raise DataError(
            f"{src}: file is empty; expected LIBSVM lines '<label> <index>:<value> ...'"
        )
    if n_features is not None and (not isinstance(n_features, (int, np.integer)) or n_features < 1):
        raise DataError(f"{src}: parameter n_features={n_features!r}; expected a positive integer")
    try:
        X, y = load_svmlight_file(
            str(p), n_features=n_features, zero_based=zero_based, dtype=np.float64
        )
    except ValueError as exc:
        if n_features is not None and "n_features" in str(exc):
            raise DataError(
                f"{src}: parameter n_features={n_features} is too small ({exc}); "
                "expected at least the largest feature index in the file"
            ) from exc
        where = _find_bad_libsvm_line(p, zero_based)
        base = 0 if zero_based is True else 1
        raise DataError(
            f"{src}: not valid LIBSVM ({where or exc}); expected "
            f"'<label> <index>:<value> ...' lines with increasing {base}-based integer indices"
        ) from exc
    X = sp.csr_matrix(X, dtype=np.float64)
    names = [f"f{j + 1}" for j in range(X.shape[1])]
    check_finite(X, src, names)
    return Dataset(
        X=X.toarray() if dense else X,
        y=np.asarray(y, dtype=np.float64),
        feature_names=names,
        source=src,
    )


def _sniff_sep(lines: Sequence[str]) -> str:
    """A pandas separator for the sample: comma, tab, semicolon, else whitespace runs."""
    for sep in (",", "\t", ";"):
        if all(sep in line for line in lines):
            return sep
    return r"\s+"


def _normalise_sep(sep: str | None, lines: Sequence[str]) -> str:
    if sep is None:
        return _sniff_sep(lines)
    if sep in (" ", "whitespace", r"\s+"):
        return r"\s+"
    return sep


def _detect_header(rows: list[list[str]], na_values: Sequence[str]) -> bool:
    """True if the first row looks like a header.

    It is one if a field of the first row is not a number while the same column holds
    numbers in the rows below, or if the first row is exactly the column positions
    ``0..n-1`` or ``1..n`` (a header written by pandas, as in ``codrna.csv``).
    """
    first, rest = rows[0], rows[1:]
    na = set(na_values)
    if all(_is_number(tok) or tok in na for tok in first):
        if len(first) >= 2 and all(tok.strip().isdigit() for tok in first):
            ints = [int(tok) for tok in first]
            return ints in (list(range(len(first))), list(range(1, len(first) + 1)))
        return False
    if not rest:
        return True
    for j, tok in enumerate(first):
        if _is_number(tok) or tok in na:
            continue
        below = [r[j].strip() for r in rest if j < len(r)]
        if any(_is_number(v) for v in below) and all(_is_number(v) or v in na for v in below):
            return True
    return False


def _read_table(path: Path, src: str, sep: str, **kw: Any) -> pd.DataFrame:
    engine = "c" if sep in (",", "\t", ";", r"\s+") or len(sep) == 1 else "python"
    try:
        return pd.read_csv(
            path, sep=sep, engine=engine, skipinitialspace=True, skip_blank_lines=True, **kw
        )
    except pd.errors.EmptyDataError as exc:
        raise DataError(f"{src}: file is empty; expected a table of numbers") from exc
    except (pd.errors.ParserError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(
            f"{src}: cannot be read as a table with separator {sep!r} ({exc}); expected the "
            "same number of fields on every line"
        ) from exc


def load_csv(
    path: PathLike,
    label: LabelSpec = "last",
    header: Literal["auto"] | bool | None = "auto",
    sep: str | None = None,
    missing: MissingPolicy = "error",
    na_values: Sequence[str] = DEFAULT_NA_VALUES,
    drop_columns: Iterable[int | str] = (),
) -> Dataset:
    """Read a delimited text table: numeric feature columns and one label column.

    Parameters
    ----------
    path : path of the file.
    label : the label column: "last", "first" (among the columns left after
        ``drop_columns``), a column name, or a 0-based position in the file.  It may hold
        strings, kept as str.  False: no label column (every column is a feature; y is None).
    header : "auto": the first line is a header if one of its fields is not a number while
        that column holds numbers below, or if it is exactly "0..n-1" or "1..n" (a header
        written by pandas, as in ``codrna.csv``); True: it is a header; False or None: there
        is none and the columns are named "col0", "col1", ... by position.
    sep : separator; None sniffs it (comma, comma + spaces, tab, semicolon, else runs of
        whitespace); " " or "whitespace" means runs of whitespace.
    missing : "error" raises on missing values, naming the columns; "drop" drops those rows
        and counts them in ``Dataset.n_dropped``.
    na_values : the text read as a missing value.
    drop_columns : columns to ignore, by name or 0-based position (an id, a car name, a date).

    Every other column must be numeric; infinite values are rejected.
    """
    p = _require_file(path)
    src = os.fspath(path)
    _check_missing_policy(missing, src)
    lines = _head_lines(p)
    if not lines:
        raise DataError(f"{src}: file is empty; expected a table of numbers")
    sep = _normalise_sep(sep, lines)
    na = list(na_values)
    if header == "auto":
        sample = _read_table(
            p,
            src,
            sep,
            header=None,
            nrows=_SNIFF_LINES,
            dtype=str,
            keep_default_na=False,
            na_filter=False,
        )
        rows = [[str(v) for v in row] for row in sample.itertuples(index=False)]
        has_header = _detect_header(rows, na)
    elif header in (True, False, None):
        has_header = bool(header)
    else:
        raise DataError(f"{src}: parameter header={header!r}; expected 'auto', True, False or None")
    df = _read_table(
        p, src, sep, header=0 if has_header else None, na_values=na, keep_default_na=False
    )
    if has_header:
        names = [str(c).strip() for c in df.columns]
    else:
        names = [f"col{j}" for j in range(df.shape[1])]
    if df.shape[0] == 0:
        raise DataError(f"{src}: no data rows; expected at least one row after the header")
    n_cols = df.shape[1]
    drops = {_resolve_column(c, names, src, "drop_columns") for c in drop_columns}
    available = [j for j in range(n_cols) if j not in drops]
    if not available:
        raise DataError(f"{src}: drop_columns leaves no column; expected features and a label")
    ypos = _resolve_label(label, names, available, src)
    fpos = [j for j in available if j != ypos]
    if not fpos:
        raise DataError(
            f"{src}: only the label {_describe(names[ypos], ypos)} is left; "
            "expected feature columns"
        )
    if ypos is None:
        return _assemble(
            source=src,
            columns=[_numeric_column(df, j, names, src) for j in fpos],
            names=[names[j] for j in fpos],
            y=None,
            y_missing=np.zeros(df.shape[0], bool),
            label_desc="(none)",
            missing=missing,
            na_note=f" (written as one of {tuple(na)!r})" if na else "",
        )

    columns = [_numeric_column(df, j, names, src) for j in fpos]

    ycol = df.iloc[:, ypos]
    y_missing = ycol.isna().to_numpy()
    if pd.api.types.is_bool_dtype(ycol) or pd.api.types.is_numeric_dtype(ycol):
        y = ycol.to_numpy()
    else:
        y = np.array([v.strip() if isinstance(v, str) else v for v in ycol.tolist()], dtype=object)
    na_note = f" (written as one of {tuple(na)!r})" if na else ""
    return _assemble(
        source=src,
        columns=columns,
        names=[names[j] for j in fpos],
        y=y,
        y_missing=y_missing,
        label_desc=_describe(names[ypos], ypos),
        missing=missing,
        na_note=na_note,
    )


def _numeric_column(df: pd.DataFrame, j: int, names: Sequence[str], src: str) -> np.ndarray:
    """Column ``j`` of ``df`` as float64 (NaN for missing), or a DataError naming it."""
    col = df.iloc[:, j]
    if not pd.api.types.is_numeric_dtype(col):
        conv = pd.to_numeric(col, errors="coerce")
        bad = np.flatnonzero(conv.isna().to_numpy() & col.notna().to_numpy())
        if bad.size:
            r = int(bad[0])
            raise DataError(
                f"{src}: {_describe(names[j], j)} is not numeric (found {col.iloc[r]!r} "
                f"in row {r + 1}); expected numbers (pass drop_columns=[{names[j]!r}] "
                "to ignore it, or use it as the label)"
            )
        col = conv
    return col.to_numpy(dtype=np.float64, na_value=np.nan)


def load_arff(
    path: PathLike, label: LabelSpec = "last", missing: MissingPolicy = "error"
) -> Dataset:
    """Read a Weka ARFF file with :func:`scipy.io.arff.loadarff`.

    Features must be numeric attributes; the label (``"last"``, ``"first"``, a name or a
    position) may be numeric or nominal (nominal values come back as str).  Missing values
    (``?``) follow ``missing`` as in :func:`load_csv`.
    """
    p = _require_file(path)
    src = os.fspath(path)
    _check_missing_policy(missing, src)
    if not _head_lines(p, 1):
        raise DataError(
            f"{src}: file is empty; expected an ARFF file (@relation, @attribute, @data)"
        )
    try:
        data, meta = arff.loadarff(str(p))
    except (arff.ArffError, ValueError, NotImplementedError, UnicodeDecodeError) as exc:
        raise DataError(
            f"{src}: not a readable ARFF file ({exc}); "
            "expected an ARFF file with numeric attributes"
        ) from exc
    names = list(meta.names())
    types = list(meta.types())
    ypos = _resolve_label(label, names, list(range(len(names))), src)
    fpos = [j for j in range(len(names)) if j != ypos]
    if not fpos:
        raise DataError(
            f"{src}: only the label {_describe(names[ypos], ypos)}; expected feature attributes"
        )
    for j in fpos:
        if types[j] != "numeric":
            raise DataError(
                f"{src}: attribute {_describe(names[j], j)} is {types[j]}; "
                "expected numeric features"
            )
    columns = [np.asarray(data[names[j]], dtype=np.float64) for j in fpos]
    raw = data[names[ypos]]
    if types[ypos] == "numeric":
        y = np.asarray(raw, dtype=np.float64)
        y_missing = np.isnan(y)
    else:
        decoded = [v.decode() if isinstance(v, bytes) else str(v) for v in raw]
        y = np.array(decoded, dtype=object)
        y_missing = np.array([v == "?" for v in decoded], dtype=bool)
    return _assemble(
        source=src,
        columns=columns,
        names=[names[j] for j in fpos],
        y=y,
        y_missing=y_missing,
        label_desc=_describe(names[ypos], ypos),
        missing=missing,
        na_note=" (written '?')",
    )


def _parquet_files(path: PathLike) -> list[Path]:
    p = Path(path)
    src = os.fspath(path)
    if not p.exists():
        raise DataError(
            f"{src}: no such file or directory; expected a Parquet file or a directory of them"
        )
    if p.is_file():
        return [p]
    files = sorted(
        f
        for f in p.iterdir()
        if f.is_file() and f.suffix in PARQUET_SUFFIXES and not f.name.startswith((".", "_"))
    )
    if not files:
        raise DataError(
            f"{src}: directory holds no *.parquet or *.pq files; expected Parquet files"
        )
    return files


def _parquet_error(file: Path, exc: Exception) -> DataError:
    return DataError(
        f"{os.fspath(file)}: not a readable Parquet file ({exc}); expected a Parquet file"
    )


def load_parquet(
    path: PathLike,
    label: LabelSpec | None = None,
    features: Sequence[str] | str | None = None,
    missing: MissingPolicy = "error",
) -> Dataset:
    """Read a Parquet file, or every ``*.parquet`` / ``*.pq`` file of a directory in name order.

    Parameters
    ----------
    path : a file or a directory.
    label : the label column: a name, a position, "first" or "last"; None (default) takes the
        column "label" if there is one, else the last column; False: no label column.
    features : None: every other numeric column; a list of names; or a glob pattern such as
        "f*" matched against the column names (in file order).
    missing : nulls / NaN: "error" or "drop", as in :func:`load_csv`.
    """
    files = _parquet_files(path)
    src = os.fspath(path)
    _check_missing_policy(missing, src)
    try:
        schema = pq.read_schema(files[0])
    except (pa.ArrowException, OSError) as exc:
        raise _parquet_error(files[0], exc) from exc
    names = list(schema.names)
    fnames, yname, ypos = parquet_columns(schema, label, features, src, os.fspath(files[0]))
    wanted = [*fnames] if yname is None else [*fnames, yname]
    tables = []
    for f in files:
        try:
            file_names = pq.read_schema(f).names if f != files[0] else names
            lacking = [c for c in wanted if c not in file_names]
            if lacking:
                raise DataError(
                    f"{os.fspath(f)}: lacks the column(s) {lacking}; "
                    "expected every file of the directory to have the same columns"
                )
            tables.append(pq.read_table(f, columns=wanted))
        except (pa.ArrowException, OSError) as exc:
            raise _parquet_error(f, exc) from exc
    try:
        table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    except pa.ArrowInvalid as exc:
        raise DataError(f"{src}: the files' schemas differ ({exc}); expected one schema") from exc
    columns = [
        pc.cast(table.column(n), pa.float64()).to_numpy(zero_copy_only=False) for n in fnames
    ]
    if table.num_rows == 0:
        raise DataError(f"{src}: no rows; expected at least one row")
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
    ycol = table.column(yname)
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
    if table.num_rows == 0:
        raise DataError(f"{src}: no rows; expected at least one row")
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
) -> Path:
    """Write features (float32 columns) and labels to one Parquet file, atomically.

    Parameters
    ----------
    dataset_or_X : a :class:`Dataset`, or a 2-D array / sparse matrix of features.
    path : the file to write (its directory is created if needed).
    y : labels, one per row (overrides the Dataset's); None writes no label column when
        ``dataset_or_X`` is an array.  Written in their own type: numbers or strings.
    feature_names : column names; default the Dataset's, else "f1".."fd".
    label_name : name of the label column.
    row_group_size : rows per row group, clipped to [131072, 1048576]; the rows are split into
        near-equal groups within that range (one group when the data are smaller).
    compression : Parquet codec.

    Features are float32 without dictionary encoding.  The file is written under a temporary
    name in the same directory and renamed at the end: on any error nothing is left behind
    (and an existing file at ``path`` is untouched).  Returns the path written.
    """
    dest = Path(path)
    src = os.fspath(path)
    if isinstance(dataset_or_X, Dataset):
        X = dataset_or_X.X
        if y is None:
            y = dataset_or_X.y
        if feature_names is None:
            feature_names = dataset_or_X.feature_names
    else:
        X = dataset_or_X
    if not sp.issparse(X):
        X = np.asarray(X)
        if X.dtype.kind not in "biuf":
            raise DataError(f"{src}: parameter X has dtype {X.dtype}; expected numbers")
    if X.ndim != 2:
        raise DataError(f"{src}: parameter X has {X.ndim} dimension(s); expected a 2-D array")
    n, d = X.shape
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
    fields = [pa.field(nm, pa.float32()) for nm in names]
    y_arr: pa.Array | None = None
    if y is not None:
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
        y_arr = _label_array(y_np, src)
        fields.append(pa.field(label_name, y_arr.type))
    if int(row_group_size) < 1:
        raise DataError(
            f"{src}: parameter row_group_size={row_group_size}; expected a positive integer"
        )
    schema = pa.schema(fields)

    def write(tmp):
        with pq.ParquetWriter(
            tmp, schema, compression=compression, use_dictionary=False, write_statistics=True
        ) as writer:
            start = 0
            for size in _row_group_sizes(n, row_group_size):
                block = X[start : start + size]
                block = block.toarray() if sp.issparse(block) else block
                cols = np.ascontiguousarray(np.asarray(block, dtype=np.float32).T)
                arrays = [pa.array(cols[j]) for j in range(d)]
                if y_arr is not None:
                    arrays.append(y_arr.slice(start, size))
                writer.write_table(pa.Table.from_arrays(arrays, schema=schema), row_group_size=size)
                start += size
            if n == 0:
                writer.write_table(schema.empty_table())

    return atomic_write(dest, write)


def _looks_like_libsvm(lines: Sequence[str]) -> bool:
    full = [bool(_LIBSVM_LINE.match(s)) for s in lines]
    label_only = [bool(_LIBSVM_LABEL_ONLY.match(s)) for s in lines]
    return any(full) and all(f or lo for f, lo in zip(full, label_only))


def detect_format(path: PathLike) -> Literal["libsvm", "csv", "arff", "parquet"]:
    """The format of ``path``: "parquet" for a directory or a .parquet/.pq file, "arff" for
    .arff, "csv" for .csv/.data/.dat/.txt/.tsv unless the lines look like LIBSVM; other names
    are sniffed (Parquet magic bytes, ``@relation``, LIBSVM lines ``label idx:val ...``)."""
    p = Path(path)
    src = os.fspath(path)
    if not p.exists():
        raise DataError(f"{src}: no such file or directory; expected a data file")
    if p.is_dir():
        return "parquet"
    suffix = p.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix == ".arff":
        return "arff"
    if suffix in _LIBSVM_SUFFIXES:
        return "libsvm"
    with open(p, "rb") as fh:
        magic = fh.read(4)
    if magic == b"PAR1":
        return "parquet"
    lines = _head_lines(p)
    if suffix not in _CSV_SUFFIXES:
        content = [s.strip() for s in lines if not s.lstrip().startswith("%")]
        if content and content[0].lower().startswith("@relation"):
            return "arff"
    if lines and _looks_like_libsvm(lines):
        return "libsvm"
    return "csv"


def load(
    path: PathLike,
    label: LabelSpec | None = None,
    format: Literal["auto", "libsvm", "csv", "arff", "parquet"] = "auto",
    **kw: Any,
) -> Dataset:
    """Read ``path`` with the loader for its format (:func:`detect_format` when "auto").

    ``label`` goes to the CSV, ARFF and Parquet loaders (None: their default); LIBSVM files
    carry the label first on every line and take none.  Other keywords go to the loader.
    """
    fmt = detect_format(path) if format == "auto" else format
    src = os.fspath(path)
    loaders: dict[str, Any] = {
        "libsvm": load_libsvm,
        "csv": load_csv,
        "arff": load_arff,
        "parquet": load_parquet,
    }
    if fmt not in loaders:
        raise DataError(
            f"{src}: parameter format={format!r}; "
            "expected 'auto', 'libsvm', 'csv', 'arff' or 'parquet'"
        )
    if label is not None:
        if fmt == "libsvm":
            raise DataError(
                f"{src}: parameter label={label!r} does not apply to LIBSVM files; expected None"
            )
        kw["label"] = label
    accepted = set(inspect.signature(loaders[fmt]).parameters) - {"path"}
    unknown = sorted(set(kw) - accepted)
    if unknown:
        raise DataError(
            f"{src}: parameter(s) {unknown} do not apply to {fmt} files; "
            f"expected some of {sorted(accepted)}"
        )
    return loaders[fmt](path, **kw)


def check_finite(
    X: np.ndarray | sp.spmatrix, source: str, feature_names: Sequence[str] | None = None
) -> None:
    """Raise DataError naming ``source`` and the first column holding NaN or +-inf."""
    if sp.issparse(X):
        csr = sp.csr_matrix(X)
        if np.isfinite(csr.data).all():
            return
        coo = csr.tocoo()
        bad = ~np.isfinite(coo.data)
        cols, rows, vals = coo.col[bad], coo.row[bad], coo.data[bad]
        j = int(cols.min())
        in_j = cols == j
        r = int(rows[in_j].min())
        value = vals[in_j][np.argmin(rows[in_j])]
        count = int(in_j.sum())
        bad_cols = np.unique(cols)
    else:
        A = np.asarray(X)
        if A.dtype.kind not in "fc":
            return
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(A.sum(axis=0)).all():
                return
        finite = np.isfinite(A)
        bad_cols = np.flatnonzero(~finite.all(axis=0))
        if bad_cols.size == 0:
            return  # the sums overflowed, the values are finite
        j = int(bad_cols[0])
        rows_j = np.flatnonzero(~finite[:, j])
        r, count, value = int(rows_j[0]), rows_j.size, A[rows_j[0], j]
    name = feature_names[j] if feature_names is not None else f"col{j}"
    more = f" (columns with such values: {bad_cols.size})" if bad_cols.size > 1 else ""
    raise DataError(
        f"{source}: column '{name}' has {count} non-finite value(s) (first {value} in row "
        f"{r + 1}){more}; expected finite numbers"
    )


def encode_labels(y: np.ndarray | Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct labels and each sample's index into them (``np.unique`` based).

    Works for any label kind (numbers, strings); ``classes_[y_index]`` gives ``y`` back.
    """
    arr = np.asarray(y)
    if arr.ndim == 2 and arr.shape[1] == 1:
        arr = arr.ravel()
    if arr.ndim != 1:
        raise DataError(f"labels: parameter y has shape {arr.shape}; expected a 1-D array")
    if arr.dtype.kind == "f" and np.isnan(arr).any():
        raise DataError("labels: parameter y contains NaN; expected no missing labels")
    if arr.dtype == object and any(v is None for v in arr):
        raise DataError("labels: parameter y contains None; expected no missing labels")
    try:
        classes, index = np.unique(arr, return_inverse=True)
    except TypeError as exc:
        raise DataError(
            f"labels: parameter y mixes types ({exc}); expected labels of one kind"
        ) from exc
    return classes, index.astype(np.int64).ravel()
