"""Which format a data file is in, and reading it with that format's reader.

:func:`load` picks the reader (:mod:`~elmscale.data.text_formats` for LIBSVM, CSV and ARFF,
:mod:`~elmscale.data.parquet_io` for Parquet) from the extension or, for names without a
known extension (LIBSVM sets such as ``a9a`` or ``heart_scale``), from the content
(:func:`detect_format`).
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from elmscale.core.errors import DataError
from elmscale.data.columns import PARQUET_SUFFIXES, LabelSpec, PathLike
from elmscale.data.dataset import Dataset
from elmscale.data.parquet_io import load_parquet
from elmscale.data.text_formats import _head_lines, load_arff, load_csv, load_libsvm

_CSV_SUFFIXES = (".csv", ".data", ".dat", ".txt", ".tsv")

_LIBSVM_SUFFIXES = (".libsvm", ".svm", ".svmlight")

_LIBSVM_LINE = re.compile(r"^\S+(\s+\d+:\S+)+\s*$")

_LIBSVM_LABEL_ONLY = re.compile(r"^\S+\s*$")


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
