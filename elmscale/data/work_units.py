"""What a work unit is: rows of a data set that one task reads where they live.

Every data-plane function (``elmscale.distributed.units``: Grams, column statistics,
kernel rows, fold scores, the Newton passes, the working set's blocks) takes a unit and
calls ``unit.read()``; nothing else of the unit is read but these fields:

* ``index`` (its number), ``start`` (its first row's number in the data set), ``n_rows``;
* ``features`` / ``label`` (column names), ``n_features`` (the width of ``X``: a Parquet
  unit of sparse rows has one column of them), ``scale`` / ``shift`` (an affine map of
  the features, or None);
* ``read(with_labels=True)`` -> ``(X float32 C-contiguous (n_rows, n_features), or a
  float32 CSR block for sparse rows, y or None)``, and ``head(n)``: the unit of its
  first ``n`` rows;
* ``pieces``: ``((what, part, offset, length), ...)``, whose first name an error names.

The kinds:

* :class:`~elmscale.data.parquet.WorkUnit`: row ranges of Parquet row groups, read from
  the files by whichever process runs it (``elmscale.data.parquet``);
* :class:`PartitionUnit`: a row range of one persisted partition of a Dask collection (X's
  and y's partition of the same rows, kept together on one worker).  Its rows are not in
  the unit: a task that runs it takes the partition as an input (its Dask key,
  :func:`partition_keys`), so Dask runs the task on the worker that holds it and no row
  moves, and the task attaches the rows (:func:`attach`) before the unit function reads
  them.  ``elmscale.distributed.collections`` makes these units and places their tasks.

Nothing here imports Dask: the units travel to workers that may not have
``dask.dataframe`` loaded, and a unit function runs the same on any kind.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from elmscale.core.errors import DataError

__all__ = ["PartitionUnit", "attach", "partition_keys"]


@dataclass(frozen=True)
class PartitionUnit:
    """Rows ``offset .. offset + n_rows`` of partition ``partition`` of a Dask collection:
    rows ``start .. start + n_rows`` of the data set.

    ``key`` is the Dask key of the persisted partition, whose value is ``(X part, y part)``
    (pandas or numpy, as the collections hold them); ``source`` names the collection in
    errors.  ``rows``: that value, once attached on the worker (:func:`attach`); it is
    never compared, hashed or shown.
    """

    index: int
    start: int
    n_rows: int
    key: str | tuple
    partition: int
    offset: int
    features: tuple[str, ...]
    label: str | None
    source: str
    scale: tuple[float, ...] | None = None
    shift: tuple[float, ...] | None = None
    rows: tuple | None = field(default=None, compare=False, repr=False)
    sparse_width: int | None = None  # sparse rows (X's chunks CSR or CSC) of this many features

    @property
    def n_features(self) -> int:
        """Columns of :meth:`read`'s ``X``."""
        return len(self.features) if self.sparse_width is None else self.sparse_width

    @property
    def pieces(self) -> tuple[tuple[str, int, int, int], ...]:
        return ((self._where(), self.partition, self.offset, self.n_rows),)

    def _where(self) -> str:
        return f"{self.source} partition {self.partition}"

    def head(self, n_rows: int) -> PartitionUnit:
        """The unit of this unit's first ``n_rows`` rows (all of them if it has fewer)."""
        return replace(self, n_rows=max(0, min(int(n_rows), self.n_rows)))

    def read(self, *, with_labels: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """``(X, y)`` as :meth:`WorkUnit.read` gives them: the features a C-contiguous
        float32 array (a float32 CSR block with sorted indices for sparse rows), scaled
        when ``scale`` is set, the labels as held (numbers, or an object array of str);
        ``y`` None without labels or when ``with_labels`` is False."""
        if self.rows is None:
            raise RuntimeError(
                f"{self._where()}: the unit's rows are not attached; a task that reads it "
                "takes its partition as an input (elmscale.distributed.collections)"
            )
        X_part, y_part = self.rows
        lo, hi = self.offset, self.offset + self.n_rows
        if self.sparse_width is not None:
            X = _csr32_rows(X_part, lo, hi, self._where())
            if self.scale is not None:  # no shift: DaskDataset.scaled refuses one
                X = X @ sp.diags(np.asarray(self.scale, dtype=np.float32), format="csr")
                X.sort_indices()
        else:
            X = _float32_rows(X_part, lo, hi, self._where())
            if self.scale is not None:
                X *= np.asarray(self.scale, dtype=np.float32)
                X += np.asarray(self.shift, dtype=np.float32)
        y = None
        if with_labels and self.label is not None and y_part is not None:
            y = _labels(y_part, lo, hi, self._where())
        return X, y


def _float32_rows(part, lo: int, hi: int, where: str) -> np.ndarray:
    """Rows ``lo .. hi`` of a pandas or numpy block as a fresh C-contiguous float32 array,
    checked finite (as a Parquet unit's)."""
    block = part.iloc[lo:hi] if hasattr(part, "iloc") else part[lo:hi]
    if hasattr(block, "to_numpy"):
        if block.isna().to_numpy().any():
            raise DataError(f"X: {where} has missing values; expected numbers")
        block = block.to_numpy(dtype=np.float32)
    # a copy always: scaling writes into it, and the partition itself is never changed
    X = np.array(block, dtype=np.float32, order="C", copy=True)
    if X.ndim != 2:
        raise DataError(f"X: {where} has {X.ndim} dimension(s); expected a 2-D block")
    if not np.isfinite(X).all():
        raise DataError(f"X: {where} has NaN or infinite values; expected finite numbers")
    return X


def _csr32_rows(part, lo: int, hi: int, where: str) -> sp.csr_matrix:
    """Rows ``lo .. hi`` of a CSR or CSC block as a fresh float32 CSR block with sorted
    indices, checked finite (as a Parquet unit's sparse rows)."""
    X = sp.csr_matrix(part[lo:hi], dtype=np.float32, copy=True)
    X.sort_indices()
    if not np.isfinite(X.data).all():
        raise DataError(f"X: {where} has NaN or infinite values; expected finite numbers")
    return X


def _labels(part, lo: int, hi: int, where: str) -> np.ndarray:
    """Labels ``lo .. hi``: numbers as numpy numbers, other values (str) as an object
    array, as a Parquet unit's label column reads."""
    block = part.iloc[lo:hi] if hasattr(part, "iloc") else part[lo:hi]
    if not hasattr(block, "to_numpy"):
        return np.asarray(block)
    if block.isna().to_numpy().any():
        raise DataError(f"y: {where} has missing labels; expected a label on every row")
    from pandas.api.types import is_numeric_dtype

    if block.ndim == 2:  # several outputs (a multi-output regressor's score): numbers
        return block.to_numpy(dtype=np.float64)
    if is_numeric_dtype(block.dtype):
        return block.to_numpy(dtype=getattr(block.dtype, "numpy_dtype", block.dtype))
    return np.array(block.tolist(), dtype=object)


def partition_keys(item) -> list:
    """The Dask keys of the partitions that ``item`` (a unit, or a list or tuple of
    units) reads, in order; empty for units that read files."""
    units = item if isinstance(item, (list, tuple)) else [item]
    return [u.key for u in units if isinstance(u, PartitionUnit)]


def attach(item, rows: list):
    """``item`` with its partition units' rows attached: ``rows`` the values of
    :func:`partition_keys`' keys, in their order (on the worker that runs the task)."""
    if not rows:
        return item
    values = iter(rows)

    def one(unit):
        return replace(unit, rows=next(values)) if isinstance(unit, PartitionUnit) else unit

    if isinstance(item, (list, tuple)):
        return type(item)(one(u) for u in item)
    return one(item)
