"""The :class:`Dataset` every reader returns, and what the readers share.

A :class:`Dataset` holds features ``X``, raw labels ``y``, feature names and the path
read.  Also here: :func:`check_finite`, :func:`encode_labels`, and the step the CSV, ARFF
and Parquet readers end with (``_assemble``: stack the feature columns, reject infinities,
report or drop rows with missing values).  Bad input raises
:class:`elmscale.core.errors.DataError` (a ``ValueError``) whose message names the file,
the column or parameter at fault, and what was expected; row numbers in messages count
data rows from 1, not counting a header line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from elmscale.core.errors import DataError

MissingPolicy = Literal["error", "drop"]


@dataclass
class Dataset:
    """A data set as read from a file (or generated).

    Attributes
    ----------
    X : ndarray of shape (n_samples, n_features), float64, or scipy.sparse.csr_matrix
        The features.  :func:`~elmscale.data.text_formats.load_libsvm` gives a CSR matrix
        for a sparse file (``dense="auto"``, under 10 % of the cells nonzero) or when asked
        (``dense=False``); the other readers give dense arrays.
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
