"""Which format a data file is in, and reading it with that format's reader.

:func:`load` picks the reader (:mod:`~elmscale.data.text_formats` for LIBSVM, CSV and ARFF,
:mod:`~elmscale.data.parquet_io` for Parquet) from the extension or, for names without a
known extension (LIBSVM sets such as ``a9a`` or ``heart_scale``), from the content
(:func:`detect_format`).  A path may be a URL of any fsspec file system, with
``storage_options`` (:mod:`elmscale.data.storage`).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from typing import Any, Literal

from elmscale.core.errors import DataError
from elmscale.data.columns import PARQUET_SUFFIXES, LabelSpec, PathLike
from elmscale.data.dataset import Dataset
from elmscale.data.parquet_io import load_parquet
from elmscale.data.storage import Location, locate, storage_errors
from elmscale.data.text_formats import _SNIFF_LINES, _head_lines, load_arff, load_csv, load_libsvm

_CSV_SUFFIXES = (".csv", ".data", ".dat", ".txt", ".tsv")

_LIBSVM_SUFFIXES = (".libsvm", ".svm", ".svmlight")

_LIBSVM_LINE = re.compile(r"^\S+(\s+\d+:\S+)+\s*$")

_LIBSVM_LABEL_ONLY = re.compile(r"^\S+\s*$")

#: Bytes of an object's head fetched to sniff its format (one range request).
_HEAD_BYTES = 1 << 16


def _looks_like_libsvm(lines: Sequence[str]) -> bool:
    full = [bool(_LIBSVM_LINE.match(s)) for s in lines]
    label_only = [bool(_LIBSVM_LABEL_ONLY.match(s)) for s in lines]
    return any(full) and all(f or lo for f, lo in zip(full, label_only))


def detect_format(
    path: PathLike, storage_options: dict | None = None
) -> Literal["libsvm", "csv", "arff", "parquet"]:
    """The format of ``path``: "parquet" for a directory or a .parquet/.pq file, "arff" for
    .arff, "csv" for .csv/.data/.dat/.txt/.tsv unless the lines look like LIBSVM; other names
    are sniffed (Parquet magic bytes, ``@relation``, LIBSVM lines ``label idx:val ...``)."""
    where = locate(path, storage_options)
    if not where.exists():
        raise DataError(f"{where}: no such file or directory; expected a data file")
    if where.is_dir():
        return "parquet"
    suffix = where.suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix == ".arff":
        return "arff"
    if suffix in _LIBSVM_SUFFIXES:
        return "libsvm"
    magic, lines = _head(where)
    if magic == b"PAR1":
        return "parquet"
    if suffix not in _CSV_SUFFIXES:
        content = [s.strip() for s in lines if not s.lstrip().startswith("%")]
        if content and content[0].lower().startswith("@relation"):
            return "arff"
    if lines and _looks_like_libsvm(lines):
        return "libsvm"
    return "csv"


def _head(where: Location) -> tuple[bytes, list[str]]:
    """A file's first 4 bytes and first non-blank lines (an object's from one range
    request of its head, not the whole object)."""
    if where.is_local:
        with open(where.local_path, "rb") as fh:
            magic = fh.read(4)
        return magic, _head_lines(where.local_path)
    with storage_errors(where, "a readable data file"):
        head = where.fs.cat_file(where.path, start=0, end=_HEAD_BYTES)
    lines = head.decode("utf-8", errors="replace").splitlines()
    if len(head) == _HEAD_BYTES:
        lines = lines[:-1]  # cut off by the range
    return head[:4], [line for line in lines if line.strip()][:_SNIFF_LINES]


def load(
    path: PathLike,
    label: LabelSpec | None = None,
    format: Literal["auto", "libsvm", "csv", "arff", "parquet"] = "auto",
    storage_options: dict | None = None,
    **kw: Any,
) -> Dataset:
    """Read ``path`` with the loader for its format (:func:`detect_format` when "auto").

    ``label`` goes to the CSV, ARFF and Parquet loaders (None: their default); LIBSVM files
    carry the label first on every line and take none.  ``path`` may be an fsspec URL
    (``s3://bucket/train.csv``) with ``storage_options`` (:mod:`elmscale.data.storage`).
    Other keywords go to the loader.
    """
    where = locate(path, storage_options)
    fmt = detect_format(where) if format == "auto" else format
    src = str(where)
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
    accepted = set(inspect.signature(loaders[fmt]).parameters) - {"path", "storage_options"}
    unknown = sorted(set(kw) - accepted)
    if unknown:
        raise DataError(
            f"{src}: parameter(s) {unknown} do not apply to {fmt} files; "
            f"expected some of {sorted(accepted)}"
        )
    return loaders[fmt](where, **kw)
