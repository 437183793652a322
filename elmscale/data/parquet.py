"""Parquet data sets on disk or in an object store, cut into work units for Dask or Ray
workers.

:func:`open_parquet` reads only the footers of a Parquet file, a directory of them
(searched recursively) or a glob pattern, local or at an fsspec URL (``s3://bucket/data/``,
:mod:`elmscale.data.storage`), once, here: exact row counts per row group, and the
schema, checked up front for every file (a missing column, a non-numeric feature, an
empty or corrupt file is a :class:`~elmscale._errors.DataError` naming the file and
column).  No data are read.

:meth:`ParquetDataset.units` cuts the rows into :class:`WorkUnit` s: by default one per
row group; with ``n_units`` into that many contiguous, near-equal row ranges (pieces of
row groups).  A unit is a small, self-contained description (files, row-group numbers,
row ranges, column names, an optional affine scaling, and for an object store the
:class:`~elmscale.data.storage.Store` and its options): pickled it is a few hundred bytes,
the same unit runs on a Dask worker, a Ray task or in the calling process, and
:meth:`WorkUnit.read` gives its rows as a float32 matrix and its labels, read by the
process that runs it straight from the file or the store.
"""

from __future__ import annotations

import glob
import os
from contextlib import ExitStack
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import scipy.sparse as sp

from elmscale.core.errors import DataError
from elmscale.data.columns import (
    PARQUET_SUFFIXES,
    is_numeric_type,
    parquet_columns,
    vector_column,
)
from elmscale.data.sparse_rows import csr_from_vectors, vector_width
from elmscale.data.storage import Location, Store, locate, scrub, storage_errors

__all__ = ["ParquetDataset", "WorkUnit", "open_parquet"]


def _is_data_file(relative: str) -> bool:
    """A Parquet file of a directory: a Parquet suffix, and no part of its name below the
    directory starting with ``.`` or ``_`` (Spark's and Dask's metadata, temporaries)."""
    parts = relative.replace(os.sep, "/").split("/")
    return os.path.splitext(parts[-1])[1] in PARQUET_SUFFIXES and not any(
        part.startswith((".", "_")) for part in parts
    )


def _find_files(where: Location) -> list[str]:
    """The Parquet files at ``where``: absolute local paths, or URLs of its store."""
    if not where.is_local:
        return _find_objects(where)
    src = where.path
    if glob.has_magic(src):
        files = sorted(Path(p) for p in glob.glob(src, recursive=True) if Path(p).is_file())
        if not files:
            raise DataError(f"{where}: the pattern matches no file; expected Parquet files")
    else:
        p = Path(src)
        if not p.exists():
            raise DataError(
                f"{where}: no such file or directory; expected a Parquet file or a "
                "directory of them"
            )
        files = (
            [p]
            if p.is_file()
            else sorted(
                f for f in p.rglob("*") if f.is_file() and _is_data_file(str(f.relative_to(p)))
            )
        )
    if not files:
        raise DataError(
            f"{where}: directory holds no *.parquet or *.pq files; expected Parquet files"
        )
    # absolute names: a Dask or Ray worker may run in another working directory
    return [os.path.abspath(f) for f in files]


def _find_objects(where: Location) -> list[str]:
    """:func:`_find_files` in an object store: a pattern, an object or a prefix (folder)."""
    fs = where.fs
    expected = "a Parquet file, a folder of them or a pattern"
    with storage_errors(where, expected):
        if glob.has_magic(where.path):
            found = fs.glob(where.path, detail=True)
            files = sorted(name for name, info in found.items() if info.get("type") == "file")
            if not files:
                raise DataError(f"{where}: the pattern matches no object; expected Parquet files")
            return [where.url_of(f) for f in files]
        if fs.isfile(where.path):
            return [where.url_of(where.path)]
        root = where.path.rstrip("/")
        listed = fs.find(root)
    files = sorted(f for f in listed if _is_data_file(f[len(root) :].lstrip("/")))
    if not listed:
        raise DataError(f"{where}: no such object or folder; expected {expected}")
    if not files:
        raise DataError(f"{where}: folder holds no *.parquet or *.pq objects; expected {expected}")
    return [where.url_of(f) for f in files]


def _footer(file: str, store: Store | None) -> tuple[pq.FileMetaData, int]:
    """``file``'s footer and its size in bytes."""
    if store is None:
        size = Path(file).stat().st_size
        if size == 0:
            raise DataError(f"{file}: empty file (0 bytes); expected a Parquet file")
        try:
            return pq.ParquetFile(file).metadata, size
        except (pa.ArrowException, OSError) as exc:
            raise DataError(
                f"{file}: not a readable Parquet file ({exc}); expected a Parquet file"
            ) from exc
    with storage_errors(file, "a readable Parquet object", store.options):
        with store.open_input(file) as handle:
            if handle.size == 0:
                raise DataError(f"{file}: empty object (0 bytes); expected a Parquet file")
            try:
                return pq.ParquetFile(handle).metadata, int(handle.size)
            except pa.ArrowException as exc:
                raise DataError(
                    f"{file}: not a readable Parquet file ({scrub(str(exc), store.options)}); "
                    "expected a Parquet file"
                ) from None


#: A Parquet file's bytes after its footer: the footer's length (4) and the magic "PAR1".
_FOOTER_TRAILER = 8


def read_footer(handle, length: int) -> pq.FileMetaData:
    """The footer of the Parquet file open as ``handle`` (a store's file object), whose
    footer is ``length`` bytes (``FileMetaData.serialized_size``, read earlier): its last
    ``length + 8`` bytes (the footer, its length and the magic) in one request, rather
    than pyarrow's speculative read of the file's last 64 KiB."""
    tail = length + _FOOTER_TRAILER
    handle.seek(handle.size - tail)
    return pq.read_metadata(pa.BufferReader(handle.read(tail)))


#: A piece of a row group's first rows, fewer than this fraction of them, is read page by
#: page (:func:`_head_of_group`) rather than as the group's whole column chunks.
_HEAD_FRACTION = 0.25

#: The read size of a head's column streams (a head reads about this much per column, at
#: least its pages).
_HEAD_BUFFER = 64 * 2**10


def _is_head(parquet: pq.ParquetFile, group: int, offset: int, length: int) -> bool:
    return offset == 0 and length < _HEAD_FRACTION * parquet.metadata.row_group(group).num_rows


def _head_of_group(
    handle, parquet: pq.ParquetFile, group: int, columns: list[str], length: int
) -> pa.Table:
    """The first ``length`` rows of row group ``group``, each column read as a stream of
    :data:`_HEAD_BUFFER` requests up to the pages that hold them (a sample of an object's
    first rows need not fetch its whole row group); the table may hold more rows."""
    streamed = pq.ParquetFile(
        handle,
        metadata=parquet.metadata,
        pre_buffer=False,
        buffer_size=_HEAD_BUFFER,
    )
    batches = streamed.iter_batches(batch_size=length, row_groups=[group], columns=columns)
    return pa.Table.from_batches([next(batches)])


@dataclass(frozen=True)
class WorkUnit:
    """Rows ``start .. start + n_rows`` of a data set: where they are and how to read them.

    ``pieces`` are ``(file, row_group, offset, length)``: rows ``offset .. offset + length``
    of that row group.  ``scale`` / ``shift``, when set, map each feature to
    ``x * scale + shift`` (a fitted :class:`~elmscale.data.Scaler`).  ``store``: None for
    local files; else the object store the files' URLs name, with the options the worker
    opens it with (its repr shows no secret).  ``footers``: ``(file, bytes)``, the length
    of each of its files' footers as :func:`open_parquet` read them, so that a worker reads
    a footer from a store in one request of exactly its bytes (without: pyarrow's
    speculative read of the file's last 64 KiB).  ``sizes``: ``(file, bytes)``, each of
    its files' size, so that a worker opens an object without asking its size (a HEAD
    request per unit saved).  ``sparse_width``: None for numeric feature columns; else
    ``features`` is one column of sparse rows of that many features
    (:mod:`elmscale.data.sparse_rows`), and :meth:`read` gives a CSR block.
    """

    index: int
    start: int
    n_rows: int
    pieces: tuple[tuple[str, int, int, int], ...]
    features: tuple[str, ...]
    label: str | None
    scale: tuple[float, ...] | None = None
    shift: tuple[float, ...] | None = None
    store: Store | None = None
    footers: tuple[tuple[str, int], ...] | None = None
    sizes: tuple[tuple[str, int], ...] | None = None
    sparse_width: int | None = None

    @property
    def n_features(self) -> int:
        """Columns of :meth:`read`'s ``X``."""
        return len(self.features) if self.sparse_width is None else self.sparse_width

    def read(self, *, with_labels: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """``(X, y)``: features as a C-contiguous float32 ``(n_rows, n_features)`` array (a
        float32 CSR matrix with sorted indices for a column of sparse rows), and the labels
        as stored (numbers, or an object array of str); ``y`` is None without a label
        column or when ``with_labels`` is False.
        """
        sparse = self.sparse_width is not None
        X = None if sparse else np.empty((self.n_rows, len(self.features)), dtype=np.float32)
        blocks = []
        labels = []
        want_labels = with_labels and self.label is not None
        columns = list(self.features) + ([self.label] if want_labels else [])
        row = 0
        with ExitStack() as opened:
            files: dict[str, tuple[pq.ParquetFile, object]] = {}
            for file, group, offset, length in self.pieces:
                table = self._row_group(file, group, offset, length, columns, files, opened)
                table = table.slice(offset, length)
                if sparse:
                    blocks.append(self._sparse_rows(table, file, group, offset))
                else:
                    self._put_features(table, X, row, file, group)
                if want_labels:
                    labels.append(self._labels(table.column(self.label), file, group))
                row += length
        if sparse:
            X = _stacked(blocks, self.sparse_width)
            if self.scale is not None:  # no shift: ParquetDataset.scaled refuses one
                X = X @ sp.diags(np.asarray(self.scale, dtype=np.float32), format="csr")
                X.sort_indices()
        elif self.scale is not None:
            X *= np.asarray(self.scale, dtype=np.float32)
            X += np.asarray(self.shift, dtype=np.float32)
        y = None
        if want_labels:
            y = np.concatenate(labels) if labels else np.empty(0)
        return X, y

    def _row_group(
        self, file, group, offset, length, columns, files: dict, opened: ExitStack
    ) -> pa.Table:
        """Row group ``group`` of ``file`` (each file opened once per read: a local file
        by pyarrow; an object through the store, its footer read in one request of its
        length when known, then the row group's column chunks fetched together: one
        ranged request, pyarrow's ``pre_buffer`` coalescing adjacent chunks; a small head
        of the group only its first pages: :func:`_head_of_group`)."""
        try:
            if file not in files:
                if self.store is None:
                    files[file] = (pq.ParquetFile(file), None)
                else:
                    size = dict(self.sizes or ()).get(file)
                    handle = opened.enter_context(self.store.open_input(file, size=size))
                    footer = self._footer(file, handle)
                    parquet = pq.ParquetFile(handle, metadata=footer, pre_buffer=True)
                    files[file] = (parquet, handle)
            parquet, handle = files[file]
            if handle is not None and _is_head(parquet, group, offset, length):
                return _head_of_group(handle, parquet, group, columns, length)
            return parquet.read_row_group(group, columns=columns)
        except (pa.ArrowException, OSError) as exc:
            options = None if self.store is None else self.store.options
            error = DataError(
                f"{file}: row group {group} cannot be read ({scrub(str(exc), options)}); "
                "expected a readable Parquet file"
            )
            # a store's own exception is not chained: its text could quote an option
            raise error from (exc if self.store is None else None)

    def _footer(self, file: str, handle) -> pq.FileMetaData | None:
        """``file``'s footer, read as its last ``bytes + 8`` bytes (the footer, its length
        and the magic) in one request, when the unit knows its length; else None (pyarrow
        reads it)."""
        length = dict(self.footers or ()).get(file)
        return None if length is None else read_footer(handle, length)

    def _put_features(self, table: pa.Table, X: np.ndarray, row: int, file, group) -> None:
        """The table's feature columns, checked, into rows ``row ..`` of ``X``."""
        length = table.num_rows
        for j, name in enumerate(self.features):
            column = table.column(name)
            if column.null_count:
                raise DataError(
                    f"{file}: column '{name}' has {column.null_count} null "
                    f"value(s) in row group {group}; expected numbers"
                )
            values = pc.cast(column, pa.float32()).to_numpy(zero_copy_only=False)
            if not np.isfinite(values).all():
                raise DataError(
                    f"{file}: column '{name}' has NaN or infinite values in "
                    f"row group {group}; expected finite numbers"
                )
            X[row : row + length, j] = values

    def _sparse_rows(self, table: pa.Table, file, group: int, offset: int) -> sp.csr_matrix:
        """The table's column of sparse rows as a checked float32 CSR block."""
        (name,) = self.features
        where = f"{file}: column '{name}', row group {group}"
        return csr_from_vectors(table.column(name), self.sparse_width, where, first_row=offset)

    def head(self, n_rows: int) -> WorkUnit:
        """The unit of this unit's first ``n_rows`` rows (all of them if it has fewer)."""
        n_rows = max(0, min(int(n_rows), self.n_rows))
        pieces, left = [], n_rows
        for file, group, offset, length in self.pieces:
            if left == 0:
                break
            pieces.append((file, group, offset, min(length, left)))
            left -= pieces[-1][3]
        return replace(self, n_rows=n_rows, pieces=tuple(pieces))

    def _labels(self, column: pa.ChunkedArray, file: str, group: int) -> np.ndarray:
        if column.null_count:
            raise DataError(
                f"{file}: label column '{self.label}' has {column.null_count} null "
                f"value(s) in row group {group}; expected a label on every row"
            )
        if pa.types.is_dictionary(column.type):
            column = pc.cast(column, column.type.value_type)
        if is_numeric_type(column.type):
            return column.to_numpy()
        return np.array(column.to_pylist(), dtype=object)


@dataclass(frozen=True)
class ParquetDataset:
    """A Parquet data set described by its footers (see :func:`open_parquet`).

    Attributes
    ----------
    source : the path or pattern given.
    files : the files, in name order.
    row_groups : for each file, the row count of each row group.
    features : feature column names (in the files' order).
    label : the label column, or None.
    scale, shift : an affine map applied to the features when units are read (see
        :meth:`scaled`), or None.
    n_units : how many units :meth:`units` makes by default (see :meth:`with_units`);
        None: one per row group.
    store : None for local files; else the object store of the files' URLs and its
        options (:class:`~elmscale.data.storage.Store`), handed to every unit.
    footer_sizes : for each file, the bytes of its footer (from :func:`open_parquet`),
        handed to the units that read it; None: unknown (pyarrow finds them).
    file_sizes : for each file, its bytes (from :func:`open_parquet`), handed to the units
        that read it; None: unknown (a store is asked).
    sparse_width : None for numeric feature columns; else ``features`` is one column of
        sparse rows (Spark ML's vector layout, :mod:`elmscale.data.sparse_rows`) of this
        many features, and every unit reads a float32 CSR block.
    """

    source: str
    files: tuple[str, ...]
    row_groups: tuple[tuple[int, ...], ...]
    features: tuple[str, ...]
    label: str | None
    scale: tuple[float, ...] | None = None
    shift: tuple[float, ...] | None = None
    n_units: int | None = None
    store: Store | None = None
    footer_sizes: tuple[int, ...] | None = None
    file_sizes: tuple[int, ...] | None = None
    sparse_width: int | None = None

    @property
    def n_rows(self) -> int:
        return int(sum(sum(groups) for groups in self.row_groups))

    @property
    def n_features(self) -> int:
        return len(self.features) if self.sparse_width is None else self.sparse_width

    def __repr__(self) -> str:
        return (
            f"ParquetDataset({self.source!r}, {len(self.files)} file(s), "
            f"{self.n_rows:,} rows, {self.n_features} features, label={self.label!r}"
            f"{', sparse rows' if self.sparse_width is not None else ''}"
            f"{', scaled' if self.scale is not None else ''})"
        )

    def scaled(self, scaler) -> ParquetDataset:
        """The same rows with ``scaler`` (a fitted ``Scaler`` / ``MinMaxScaler``, or for
        sparse rows a ``MaxAbsScaler``, which keeps their zeros) applied."""
        scale = np.asarray(scaler.scale_, dtype=np.float64)
        if hasattr(scaler, "max_abs_") and not hasattr(scaler, "min_"):
            scale = 1.0 / scale  # MaxAbsScaler divides by its scale_
        if scale.shape != (self.n_features,):
            raise DataError(
                f"{self.source}: the scaler has {scale.size} columns; expected "
                f"{self.n_features} (the data set's features)"
            )
        shift = np.asarray(getattr(scaler, "min_", np.zeros_like(scale)), dtype=np.float64)
        if self.sparse_width is not None and np.any(shift != 0):
            raise DataError(
                f"{self.source}: the scaler shifts the features (min-max scaling with an "
                "offset), which fills a sparse row's zeros; expected a scaler without shift "
                "(sklearn's MaxAbsScaler) for sparse rows"
            )
        return replace(self, scale=tuple(scale.tolist()), shift=tuple(shift.tolist()))

    def with_units(self, n_units: int | None) -> ParquetDataset:
        """The same data set cut into ``n_units`` units by default (None: per row group)."""
        if n_units is not None and int(n_units) < 1:
            raise ValueError(f"n_units must be >= 1 or None; got {n_units}")
        return replace(self, n_units=None if n_units is None else int(n_units))

    def _group_list(self) -> list[tuple[str, int, int]]:
        return [
            (file, g, n)
            for file, groups in zip(self.files, self.row_groups)
            for g, n in enumerate(groups)
            if n > 0
        ]

    def units(self, n_units: int | None = None) -> list[WorkUnit]:
        """Work units covering every row once, in order.

        ``n_units`` None: the data set's own ``n_units``, or one unit per row group.
        Otherwise that many contiguous row ranges of near-equal size (at most one per row);
        a range may span row groups and files.
        """
        n_units = self.n_units if n_units is None else n_units
        groups = self._group_list()
        if n_units is None:
            bounds = np.cumsum([0] + [n for _, _, n in groups])
        else:
            if int(n_units) < 1:
                raise ValueError(f"n_units must be >= 1; got {n_units}")
            k = min(int(n_units), self.n_rows)
            bounds = np.linspace(0, self.n_rows, k + 1).round().astype(np.int64)
        group_starts = np.cumsum([0] + [n for _, _, n in groups])
        footer_of = dict(zip(self.files, self.footer_sizes or ()))
        size_of = dict(zip(self.files, self.file_sizes or ()))
        units = []
        for index, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            pieces = []
            first = int(np.searchsorted(group_starts, lo, side="right")) - 1
            for gi in range(first, len(groups)):
                g_lo = int(group_starts[gi])
                if g_lo >= hi:
                    break
                file, g, n = groups[gi]
                a, b = max(int(lo), g_lo), min(int(hi), g_lo + n)
                if b > a:
                    pieces.append((file, g, a - g_lo, b - a))
            units.append(
                WorkUnit(
                    index=index,
                    start=int(lo),
                    n_rows=int(hi - lo),
                    pieces=tuple(pieces),
                    features=self.features,
                    label=self.label,
                    scale=self.scale,
                    shift=self.shift,
                    store=self.store,
                    footers=_footers_of(pieces, footer_of),
                    sizes=_footers_of(pieces, size_of),
                    sparse_width=self.sparse_width,
                )
            )
        return units

    def read(self) -> tuple[np.ndarray, np.ndarray | None]:
        """All rows in memory (for small sets and tests): ``(X float32, y)``, read unit by
        unit here (:func:`elmscale.dataplane.gather_rows` reads them on a cluster)."""
        parts = [unit.read() for unit in self.units()]
        if self.sparse_width is not None:
            X = _stacked([p[0] for p in parts], self.sparse_width)
        else:
            X = np.concatenate([p[0] for p in parts])
        y = None if self.label is None else np.concatenate([p[1] for p in parts])
        return X, y


def stack_rows(blocks: list) -> np.ndarray | sp.csr_matrix:
    """Units' row blocks one under the other: dense arrays concatenated, CSR blocks (a
    data set of sparse rows) stacked as CSR."""
    if any(sp.issparse(block) for block in blocks):
        return _stacked(
            [sp.csr_matrix(block, dtype=np.float32) for block in blocks], blocks[0].shape[1]
        )
    return np.concatenate(blocks)


def column_extremes(X) -> tuple[np.ndarray, np.ndarray]:
    """Each column's minimum and maximum (float64) of a dense or sparse block (a sparse
    column's zeros count)."""
    lo, hi = X.min(axis=0), X.max(axis=0)
    if sp.issparse(lo):
        lo, hi = lo.toarray().ravel(), hi.toarray().ravel()
    return np.asarray(lo, dtype=np.float64).ravel(), np.asarray(hi, dtype=np.float64).ravel()


def _stacked(blocks: list[sp.csr_matrix], width: int) -> sp.csr_matrix:
    """CSR blocks one under the other (none: an empty block of ``width`` columns)."""
    if not blocks:
        return sp.csr_matrix((0, width), dtype=np.float32)
    X = blocks[0] if len(blocks) == 1 else sp.vstack(blocks, format="csr", dtype=np.float32)
    X.has_sorted_indices = True  # each block's are, and vstack keeps them
    return X


def _footers_of(pieces, footer_of: dict[str, int]) -> tuple[tuple[str, int], ...] | None:
    """``(file, footer_of[file])`` (its footer's bytes, or its size) for each file of
    ``pieces``, in order; None if unknown."""
    files = dict.fromkeys(file for file, *_ in pieces)
    if not footer_of or any(f not in footer_of for f in files):
        return None
    return tuple((f, footer_of[f]) for f in files)


def open_parquet(
    path: str | os.PathLike, *, features=None, label=None, storage_options=None
) -> ParquetDataset:
    """Describe a Parquet data set from its footers, checking every file's schema.

    Parameters
    ----------
    path : a file, a directory (its ``*.parquet`` / ``*.pq`` files, recursively, skipping
        names that start with ``.`` or ``_``) or a glob pattern (``data/part-*.parquet``);
        local, or an fsspec URL of the same (``s3://bucket/data/``, ``gs://...``,
        ``abfs://...``): the footers are read here, once, and each work unit reads its
        row groups on the worker that runs it, straight from the store.
    features : None (every numeric column but the label), a list of names, or a pattern
        matched against the column names (``"f*"``).
    label : the label column: a name, a position, "first" or "last"; None: "label" if
        present, else the last column; False: no label column (for scoring).
    storage_options : the store's options for a URL (fsspec's, as Dask and pandas take
        them: ``{"client_kwargs": {"endpoint_url": ...}}``, ``{"profile": ...}``); None:
        the environment's and the credential files'.  The work units carry them to the
        workers (never shown in a repr or an error).
    """
    where = locate(path, storage_options)
    store = None if where.is_local else where.store
    files = _find_files(where)
    footers, sizes = zip(*(_footer(f, store) for f in files))
    schema = footers[0].schema.to_arrow_schema()
    chosen, label_name, _ = parquet_columns(schema, label, features, files[0], files[0])
    vector = vector_column(schema, chosen)
    wanted = chosen + ([label_name] if label_name is not None else [])
    row_groups = []
    for file, footer in zip(files, footers):
        file_schema = footer.schema.to_arrow_schema()
        for name in wanted:
            if name not in file_schema.names:
                raise DataError(
                    f"{file}: column '{name}' not found; expected the columns "
                    f"{wanted} in every file (it has {file_schema.names})"
                )
        for name in chosen:
            kind = file_schema.field(name).type
            if vector is not None:
                if vector_column(file_schema, [name]) is None:
                    raise DataError(
                        f"{file}: column '{name}' has type {kind}; expected the sparse rows "
                        f"that {files[0]} holds in it"
                    )
            elif not is_numeric_type(kind):
                raise DataError(
                    f"{file}: feature column '{name}' has type {kind}; expected a numeric column"
                )
        if footer.num_rows == 0:
            raise DataError(f"{file}: holds no rows; expected at least one row per file")
        row_groups.append(tuple(footer.row_group(g).num_rows for g in range(footer.num_row_groups)))
    width = None if vector is None else _one_width(files, footers, vector, where)
    return ParquetDataset(
        source=str(where),
        files=tuple(files),
        row_groups=tuple(row_groups),
        features=tuple(chosen),
        label=label_name,
        store=store,
        footer_sizes=tuple(int(footer.serialized_size) for footer in footers),
        file_sizes=tuple(int(size) for size in sizes),
        sparse_width=width,
    )


def _one_width(files, footers, column: str, where: Location) -> int:
    """The width of the sparse rows of ``column``, the same in every file (from the
    footers' statistics; a file without them has the column read here)."""
    fs = None if where.is_local else where.fs
    widths = {}
    for file, footer in zip(files, footers):
        path = file if where.is_local else where.fs._strip_protocol(file)
        widths[file] = vector_width(footer, column, file, fs=fs, path=path)
    if len(set(widths.values())) > 1:
        raise DataError(
            f"{where}: column '{column}' holds rows of different widths in different files "
            f"({widths}); expected one width"
        )
    return next(iter(widths.values()))
