"""Readers of text data files: LIBSVM, delimited text (CSV) and ARFF.

Each returns a :class:`~elmscale.data.dataset.Dataset`; bad input raises
:class:`elmscale.core.errors.DataError` naming the file, the line or column, and what was
expected.  A path may be an fsspec URL (``s3://bucket/train.csv``, with
``storage_options``): the file is fetched whole into a temporary local copy and read there
(:func:`elmscale.data.storage.local_copy`; these readers read it whole into memory anyway).

LIBSVM / SVMlight (:func:`load_libsvm`)
    One sample per line: ``<label> <index>:<value> <index>:<value> ...`` with increasing
    integer indices, 1-based by LIBSVM's convention (``zero_based=False``).  Features left out
    are zero.  Read with :func:`sklearn.datasets.load_svmlight_file`; ``X`` stays a CSR
    matrix when the file is sparse and is a dense float64 array otherwise (``dense="auto"``,
    the rule in :func:`sparse_is_kept`); ``dense=True`` / ``False`` force one or the other.
    A test file may use fewer features than its training file (``a9a.t`` stops at index 122
    of 123): pass ``n_features``.
Delimited text (:func:`load_csv`)
    ``.csv``, ``.data``, ``.dat``, ``.txt`` tables.  The separator is sniffed from the first
    lines (comma with optional spaces, tab with optional spaces, semicolon, else any run of
    whitespace, which also covers fixed-width numeric files); whether the first line is a
    header is detected (see :func:`load_csv`).  Missing values (``?`` and friends) are an
    error unless ``missing="drop"``.
ARFF (:func:`load_arff`)
    Weka's format, read with :func:`scipy.io.arff.loadarff`; numeric features, numeric or
    nominal label.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.io import arff
from sklearn.datasets import load_svmlight_file

from elmscale.core.errors import DataError
from elmscale.data.columns import (
    LabelSpec,
    PathLike,
    _describe,
    _resolve_column,
    _resolve_label,
)
from elmscale.data.dataset import (
    Dataset,
    MissingPolicy,
    _assemble,
    _check_missing_policy,
    check_finite,
)
from elmscale.data.storage import local_copy, locate

#: Markers read as a missing value by :func:`load_csv`.
DEFAULT_NA_VALUES: tuple[str, ...] = ("?", "", "NA", "NaN", "nan")

_SNIFF_LINES = 20


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


#: ``dense="auto"`` keeps a LIBSVM file's rows sparse (CSR) when fewer than this fraction
#: of its cells are nonzero.  Below it the CSR matrix (8 bytes per value, 4 per column
#: index) is at most 0.15x the dense array's size, and sparse dot products skip at least
#: 90 % of the work; above it a dense array is small enough and BLAS is faster.  The
#: LIBSVM-format sets in ``../shared/data`` are all above it (a9a 11.3 %, mushrooms
#: 18.8 %, the others 88-100 %); rcv1 (0.16 %) and news20 (0.03 %) are far below.
SPARSE_DENSITY_THRESHOLD = 0.10

#: ``dense="auto"`` also keeps the rows sparse when the dense float64 array would take more
#: than this many bytes (2 GiB), whatever the density: densifying must not be what
#: exhausts a machine's memory.
DENSE_MAX_BYTES = 2 * 2**30


def sparse_is_kept(n_rows: int, n_features: int, nnz: int) -> bool:
    """``dense="auto"``'s rule: True (keep CSR) when under :data:`SPARSE_DENSITY_THRESHOLD`
    of the ``n_rows x n_features`` cells are nonzero, or when the dense float64 array would
    exceed :data:`DENSE_MAX_BYTES`; False (densify) otherwise."""
    cells = int(n_rows) * int(n_features)
    if cells == 0:
        return False
    return nnz < SPARSE_DENSITY_THRESHOLD * cells or 8 * cells > DENSE_MAX_BYTES


def load_libsvm(
    path: PathLike,
    n_features: int | None = None,
    zero_based: bool | Literal["auto"] = False,
    dense: bool | Literal["auto"] = "auto",
    storage_options: dict | None = None,
) -> Dataset:
    """Read a LIBSVM / SVMlight file.

    Parameters
    ----------
    path : path or URL of the file.
    n_features : width of the feature space; needed when a test file does not use its last
        features (``a9a.t`` needs ``n_features=123``).  Default: the largest index present.
    zero_based : whether indices start at 0; LIBSVM files start at 1 (the default, False);
        "auto" lets scikit-learn guess.
    dense : "auto" (default): ``X`` as a CSR matrix (float64, sorted indices) when the file
        is sparse (under 10 % of the cells nonzero, :data:`SPARSE_DENSITY_THRESHOLD`, or
        a dense array over 2 GiB, :data:`DENSE_MAX_BYTES`), else a dense float64 array;
        True: always dense; False: always CSR.  Every elmscale estimator takes either;
        ``Dataset``'s repr says which it is.

    storage_options : the store's options for a URL (:mod:`elmscale.data.storage`).

    Labels may be any numbers (-1/+1, 0/1, 1..k); they come back as float64.  Feature names
    are "f1".."fd".
    """
    where = locate(path, storage_options)
    with local_copy(where) as p:
        return _read_libsvm(p, str(where), n_features, zero_based, dense)


def _read_libsvm(
    p: Path,
    src: str,
    n_features: int | None,
    zero_based: bool | Literal["auto"],
    dense: bool | Literal["auto"],
) -> Dataset:
    """:func:`load_libsvm` of the local file ``p``, named ``src`` in errors and the result."""
    if dense not in (True, False, "auto"):
        raise DataError(f"{src}: parameter dense={dense!r}; expected 'auto', True or False")
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
    X.sort_indices()
    names = [f"f{j + 1}" for j in range(X.shape[1])]
    check_finite(X, src, names)
    if dense == "auto":
        dense = not sparse_is_kept(X.shape[0], X.shape[1], X.nnz)
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
    storage_options: dict | None = None,
) -> Dataset:
    """Read a delimited text table: numeric feature columns and one label column.

    Parameters
    ----------
    path : path or URL of the file.
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
    storage_options : the store's options for a URL (:mod:`elmscale.data.storage`).

    Every other column must be numeric; infinite values are rejected.
    """
    where = locate(path, storage_options)
    with local_copy(where) as p:
        return _read_csv(p, str(where), label, header, sep, missing, na_values, drop_columns)


def _read_csv(
    p: Path,
    src: str,
    label: LabelSpec,
    header: Literal["auto"] | bool | None,
    sep: str | None,
    missing: MissingPolicy,
    na_values: Sequence[str],
    drop_columns: Iterable[int | str],
) -> Dataset:
    """:func:`load_csv` of the local file ``p``, named ``src`` in errors and the result."""
    _check_missing_policy(missing, src)
    lines = _head_lines(p)
    if not lines:
        raise DataError(f"{src}: file is empty; expected a table of numbers")
    sep = _normalise_sep(sep, lines)
    na = list(na_values)
    has_header = _has_header(p, src, sep, header, na)
    df, names = _read_frame(p, src, sep, has_header, na)
    fpos, ypos = _choose_columns(names, label, drop_columns, src)
    columns = [_numeric_column(df, j, names, src) for j in fpos]
    if ypos is None:
        y, y_missing, label_desc = None, np.zeros(df.shape[0], bool), "(none)"
    else:
        y, y_missing = _label_values(df.iloc[:, ypos])
        label_desc = _describe(names[ypos], ypos)
    return _assemble(
        source=src,
        columns=columns,
        names=[names[j] for j in fpos],
        y=y,
        y_missing=y_missing,
        label_desc=label_desc,
        missing=missing,
        na_note=f" (written as one of {tuple(na)!r})" if na else "",
    )


def _has_header(
    path: Path, src: str, sep: str, header: Literal["auto"] | bool | None, na: list[str]
) -> bool:
    """Whether the first line is a header: ``header`` as given, or detected when "auto"."""
    if header == "auto":
        sample = _read_table(
            path,
            src,
            sep,
            header=None,
            nrows=_SNIFF_LINES,
            dtype=str,
            keep_default_na=False,
            na_filter=False,
        )
        rows = [[str(v) for v in row] for row in sample.itertuples(index=False)]
        return _detect_header(rows, na)
    if header in (True, False, None):
        return bool(header)
    raise DataError(f"{src}: parameter header={header!r}; expected 'auto', True, False or None")


def _read_frame(
    path: Path, src: str, sep: str, has_header: bool, na: list[str]
) -> tuple[pd.DataFrame, list[str]]:
    """The whole table (missing values as NaN) and its column names, "col0".. without a
    header; a table without data rows is an error."""
    df = _read_table(
        path, src, sep, header=0 if has_header else None, na_values=na, keep_default_na=False
    )
    if has_header:
        names = [str(c).strip() for c in df.columns]
    else:
        names = [f"col{j}" for j in range(df.shape[1])]
    if df.shape[0] == 0:
        raise DataError(f"{src}: no data rows; expected at least one row after the header")
    return df, names


def _choose_columns(
    names: list[str], label: LabelSpec, drop_columns: Iterable[int | str], src: str
) -> tuple[list[int], int | None]:
    """Positions of the feature columns and of the label (None: no label), after
    ``drop_columns``; at least one feature must be left."""
    drops = {_resolve_column(c, names, src, "drop_columns") for c in drop_columns}
    available = [j for j in range(len(names)) if j not in drops]
    if not available:
        raise DataError(f"{src}: drop_columns leaves no column; expected features and a label")
    ypos = _resolve_label(label, names, available, src)
    fpos = [j for j in available if j != ypos]
    if not fpos:
        raise DataError(
            f"{src}: only the label {_describe(names[ypos], ypos)} is left; "
            "expected feature columns"
        )
    return fpos, ypos


def _label_values(ycol: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The label column as read (numbers kept, strings stripped) and where it is missing."""
    y_missing = ycol.isna().to_numpy()
    if pd.api.types.is_bool_dtype(ycol) or pd.api.types.is_numeric_dtype(ycol):
        y = ycol.to_numpy()
    else:
        y = np.array([v.strip() if isinstance(v, str) else v for v in ycol.tolist()], dtype=object)
    return y, y_missing


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
    path: PathLike,
    label: LabelSpec = "last",
    missing: MissingPolicy = "error",
    storage_options: dict | None = None,
) -> Dataset:
    """Read a Weka ARFF file with :func:`scipy.io.arff.loadarff`.

    Features must be numeric attributes; the label (``"last"``, ``"first"``, a name or a
    position) may be numeric or nominal (nominal values come back as str).  Missing values
    (``?``) follow ``missing`` as in :func:`load_csv`.  ``path`` may be a URL, with
    ``storage_options`` (:mod:`elmscale.data.storage`).
    """
    where = locate(path, storage_options)
    with local_copy(where) as p:
        return _read_arff(p, str(where), label, missing)


def _read_arff(p: Path, src: str, label: LabelSpec, missing: MissingPolicy) -> Dataset:
    """:func:`load_arff` of the local file ``p``, named ``src`` in errors and the result."""
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
