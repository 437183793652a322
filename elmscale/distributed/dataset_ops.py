"""Whole-data-set operations on a :class:`~elmscale.data.parquet.ParquetDataset`.

Each takes ``client=None`` (run the units here, one after another, on this process's
cores) or a ``distributed.Client`` (one task per unit, partial results summed on the
workers); both paths call the same unit functions (``elmscale.distributed.units``).

* :func:`column_stats` / :func:`fit_scaler`: one pass for rows, classes and the [-1, 1]
  scaler.
* :func:`gram`: the :class:`~elmscale.linalg.gram.Gram` of a feature map (optionally per
  CV fold); :func:`fold_scores`: every fold's validation results of a C path, one pass.
* :func:`gather_rows`, :func:`kernel_matrix`: for the kernel ELM (the training rows are
  part of the model, so they come to the coordinator; the kernel matrix is computed in row
  blocks on the workers).
* :func:`predict`, :func:`decision_function`, :func:`evaluate`: score every row with a
  fitted model.

``ELMClassifier(...).fit(dataset, client=client)`` and
``elmscale.model_selection.cross_validate_path`` use these; the public ones are
``elmscale.dataplane`` (``from elmscale import dataplane``).  Nothing here knows an
estimator's internals: models are scored through their public methods.
"""

from __future__ import annotations

import numpy as np

from elmscale.core.sparse_kernels import float32_rows
from elmscale.data.parquet import ParquetDataset, stack_rows
from elmscale.distributed.breakdown import DaskPass
from elmscale.distributed.collections import is_dataset, model_for_tasks
from elmscale.distributed.executors import broadcast, map_units, reduce_units
from elmscale.distributed.units import (
    ColumnStats,
    add_arrays,
    metrics_from_sums,
    unit_candidate_gram,
    unit_column_stats,
    unit_fold_scores,
    unit_gram,
    unit_kernel_matvec,
    unit_kernel_rows,
    unit_method,
    unit_metric_sums,
    unit_residual_sums,
    unit_rows,
    unit_rows_at,
)
from elmscale.features.base import DEFAULT_BLOCK_ROWS, FeatureMap
from elmscale.features.kernels import Kernel
from elmscale.linalg.gram import Gram
from elmscale.linalg.targets import TargetEncoder
from elmscale.solvers.forward_selection import CandidateGram

__all__ = [
    "column_stats",
    "decision_function",
    "evaluate",
    "first_rows",
    "fit_scaler",
    "fold_scores",
    "gather_rows",
    "gram",
    "kernel_matrix",
    "residual_sums",
    "kernel_matvec",
    "predict",
]


#: Size of the kernel-matrix block one task returns.
KERNEL_BLOCK_BYTES = 64 * 2**20


def _check_dataset(dataset) -> ParquetDataset:
    if not is_dataset(dataset):
        raise TypeError(
            "expected a ParquetDataset (elmscale.open_parquet) or a DaskDataset "
            f"(elmscale.distributed.collections); got {type(dataset).__name__}"
        )
    return dataset


#: With a client and no unit count set, at least this many units per worker thread.
UNITS_PER_THREAD = 2


def _units(dataset, client, n_units: int | None = None):
    """The data set's units: ``n_units`` or the data set's own count if set; otherwise one
    per row group, cut finer when that leaves a cluster's threads idle, but not from an
    object store: each unit of a cut row group would fetch the group's whole column chunks
    (a pass would read the group once per unit)."""
    units = _check_dataset(dataset).units(n_units)
    in_store = getattr(dataset, "store", None) is not None
    if n_units is None and dataset.n_units is None and client is not None and not in_store:
        wanted = UNITS_PER_THREAD * sum(client.nthreads().values())
        if len(units) < wanted:
            units = dataset.units(wanted)
    return units


def _in_row_order(fn, dataset, *, client, n_threads, n_units=None, **kwargs) -> np.ndarray:
    """``fn``'s arrays over the data set's units (:func:`_units`), concatenated in row
    order; ``n_threads`` applies without a client (with one: a thread per task)."""
    parts = map_units(
        fn,
        _units(dataset, client, n_units),
        client=client,
        threads_per_task=None if client is not None else n_threads,
        **kwargs,
    )
    return np.concatenate(parts)


def column_stats(
    dataset: ParquetDataset, *, client=None, n_units: int | None = None
) -> ColumnStats:
    """Rows, raw per-column minima / maxima and class counts of the whole data set."""
    units = _units(dataset, client, n_units)
    return reduce_units(unit_column_stats, units, ColumnStats.combine, client=client)


def fit_scaler(dataset: ParquetDataset, *, client=None, feature_range=(-1, 1)):
    """The paper's scaler fitted on every row of ``dataset`` (one pass)."""
    from elmscale.data.scaling import Scaler

    stats = column_stats(dataset, client=client)
    return Scaler.from_stats(
        stats.col_min, stats.col_max, feature_range, n_samples_seen=stats.n_rows
    )


def gram(
    dataset: ParquetDataset,
    feature_map: FeatureMap,
    *,
    targets: str = "classes",
    n_folds: int = 1,
    fold_seed: int = 0,
    precision: str = "double",
    block_rows: int = DEFAULT_BLOCK_ROWS,
    client=None,
    n_threads: int | None = None,
    n_units: int | None = None,
    timings: list | None = None,
) -> Gram:
    """The :class:`~elmscale.linalg.gram.Gram` of ``feature_map`` (a ``HiddenLayer``,
    ``ConcatenatedLayers``, ...) over every row, per fold when ``n_folds`` > 1 (folds drawn
    per row from ``fold_seed``: ``units.fold_of_rows``).  ``targets``: "classes" (``Y``: the
    indicators of the classes, merged by value over the units) or "values".  ``n_threads``
    applies without a client.  ``timings``: a list the pass's record is appended to
    (``breakdown.PASS_COLUMNS``: the workers' compute from Dask's task stream, their thread
    CPU, the wait, the bytes each way)."""
    units = _units(dataset, client, n_units)
    with DaskPass(client, timings) as record:
        return reduce_units(
            unit_gram,
            units,
            Gram.combine,
            client=client,
            threads_per_task=None if client is not None else n_threads,
            record=record,
            layer=feature_map.to_dict(),
            targets=targets,
            n_folds=n_folds,
            fold_seed=fold_seed,
            precision=precision,
            block_rows=block_rows,
        )


def fold_scores(
    dataset: ParquetDataset,
    feature_map: FeatureMap,
    coefs: np.ndarray,
    encoder: TargetEncoder,
    *,
    n_folds: int,
    fold_seed: int = 0,
    block_rows: int = DEFAULT_BLOCK_ROWS,
    client=None,
    n_threads: int | None = None,
    n_units: int | None = None,
) -> np.ndarray:
    """Every fold's validation results of a C path in one pass: ``(n_folds, n_C)`` correct
    predictions (``encoder`` a class coding) or sums of squared errors (values).

    ``coefs`` ``(n_folds, n_C, L, n_outputs)``: the output weights of ``feature_map``
    trained without fold k; folds as in :func:`gram` (same ``n_folds`` and ``fold_seed``).
    """
    return reduce_units(
        unit_fold_scores,
        _units(dataset, client, n_units),
        add_arrays,
        client=client,
        threads_per_task=None if client is not None else n_threads,
        layer=feature_map.to_dict(),
        coefs=broadcast(coefs, client),
        encoder=encoder,
        n_folds=int(n_folds),
        fold_seed=fold_seed,
        block_rows=block_rows,
    )


def gather_rows(
    dataset: ParquetDataset, *, client=None, n_threads: int | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Every row on the coordinator: ``(X float32, y)`` (for small sets: kernel models)."""
    units = _units(dataset, client)
    parts = map_units(
        unit_rows, units, client=client, threads_per_task=None if client is not None else n_threads
    )
    X = stack_rows([p[0] for p in parts])  # CSR for a data set of sparse rows
    y = None if dataset.label is None else np.concatenate([p[1] for p in parts])
    return X, y


def first_rows(dataset: ParquetDataset, n_rows: int, *, client=None) -> np.ndarray:
    """The data set's first ``n_rows`` rows (at most: its first unit's), float32, read
    where they live (a sample for choosing a precision): their features only, and from an
    object store only the first pages of the row group that holds them."""
    head = _check_dataset(dataset).units()[0].head(n_rows)
    rows = np.arange(head.start, head.start + head.n_rows)
    return map_units(unit_rows_at, [head], client=client, threads_per_task=1, rows=rows)[0]


def rows_at(
    dataset: ParquetDataset, rows: np.ndarray, *, client=None, n_threads: int | None = None
) -> np.ndarray:
    """The rows numbered ``rows`` (sorted, unique), float32, read where they live."""
    rows = np.asarray(rows, dtype=np.int64)
    return _in_row_order(
        unit_rows_at, dataset, client=client, n_threads=n_threads, rows=broadcast(rows, client)
    )


def candidate_gram(
    dataset: ParquetDataset,
    points: np.ndarray,
    kernel: Kernel,
    encoder: TargetEncoder,
    *,
    client=None,
    n_threads: int | None = None,
) -> CandidateGram:
    """The candidates' Gram of forward selection (``K'K``, ``K'Y``, ``K'1`` and the
    targets' sums, ``K = K(rows, points)``) over every row, each unit's on its worker: one
    pass, and only M x M numbers back from each unit."""
    points = float32_rows(points)  # a CSR basis (sparse rows) stays CSR
    return reduce_units(
        unit_candidate_gram,
        _units(dataset, client),
        CandidateGram.combine,
        client=client,
        threads_per_task=None if client is not None else n_threads,
        points=broadcast(points, client),
        kernel=kernel.to_dict(),
        encoder=encoder,
    )


def residual_sums(
    dataset: ParquetDataset,
    points: np.ndarray,
    coef: np.ndarray,
    intercept: np.ndarray,
    kernel: Kernel,
    encoder: TargetEncoder,
    *,
    client=None,
    n_threads: int | None = None,
) -> np.ndarray:
    """The squared training residual of the kernel model ``K(x, points) coef + intercept``
    against the labels coded by ``encoder``, per target column, over every row: one pass,
    J numbers back from each unit."""
    return reduce_units(
        unit_residual_sums,
        _units(dataset, client),
        add_arrays,
        client=client,
        threads_per_task=None if client is not None else n_threads,
        points=broadcast(float32_rows(points), client),
        coef=broadcast(np.ascontiguousarray(coef, dtype=np.float64), client),
        intercept=np.asarray(intercept, dtype=np.float64),
        kernel=kernel.to_dict(),
        encoder=encoder,
    )


def kernel_matrix(
    dataset: ParquetDataset,
    points: np.ndarray,
    kernel: Kernel,
    *,
    client=None,
    n_threads: int | None = None,
) -> np.ndarray:
    """``K(every row of dataset, points)``, float64, computed on row blocks of at most
    ``KERNEL_BLOCK_BYTES`` each (so a task's result stays small)."""
    points = float32_rows(points)  # a CSR basis (sparse rows) stays CSR
    block_rows = max(1, KERNEL_BLOCK_BYTES // (8 * max(points.shape[0], 1)))
    n_units = max(len(_check_dataset(dataset).units()), -(-dataset.n_rows // block_rows))
    return _in_row_order(
        unit_kernel_rows,
        dataset,
        client=client,
        n_threads=n_threads,
        n_units=n_units,
        points=broadcast(points, client),
        kernel=kernel.to_dict(),
    )


def kernel_matvec(
    dataset: ParquetDataset,
    points: np.ndarray,
    coef: np.ndarray,
    kernel: Kernel,
    *,
    client=None,
    n_threads: int | None = None,
) -> np.ndarray:
    """``K(every row of dataset, points) @ coef``, float64, in row order: each unit's
    product on its worker, fused (the kernel block is never stored), only the product back
    (the divide-and-conquer kernel solve's partition and starting gradient)."""
    points = float32_rows(points)  # a CSR basis (sparse rows) stays CSR
    return _in_row_order(
        unit_kernel_matvec,
        dataset,
        client=client,
        n_threads=n_threads,
        points=broadcast(points, client),
        coef=broadcast(np.ascontiguousarray(coef, dtype=np.float64), client),
        kernel=kernel.to_dict(),
    )


def evaluate(model, dataset: ParquetDataset, *, client=None, n_threads: int | None = None) -> dict:
    """Accuracy (classifiers) or R^2 (regressors) of ``model`` on every labelled row."""
    _check_dataset(dataset)
    if dataset.label is None:
        raise ValueError(f"{dataset.source}: no label column; expected labels to evaluate")
    threads = 1 if client is not None else n_threads
    sums = reduce_units(
        unit_metric_sums,
        _units(dataset, client),
        add_arrays,
        client=client,
        threads_per_task=threads,
        model=broadcast(model_for_tasks(model, threads), client),
    )
    return metrics_from_sums(sums)


def _score(model, dataset, method: str, client, n_threads) -> np.ndarray:
    units = _units(dataset, client)
    if dataset.n_features != getattr(model, "n_features_in_", dataset.n_features):
        raise ValueError(
            f"{dataset.source}: {dataset.n_features} feature columns; the model "
            f"expects {model.n_features_in_}"
        )
    threads = 1 if client is not None else n_threads
    parts = map_units(
        unit_method,
        units,
        client=client,
        threads_per_task=threads,
        model=broadcast(model_for_tasks(model, threads), client),
        method=method,
    )
    return np.concatenate(parts)


def predict(
    model, dataset: ParquetDataset, *, client=None, n_threads: int | None = None
) -> np.ndarray:
    """``model.predict`` of every row of ``dataset``, in row order."""
    return _score(model, dataset, "predict", client, n_threads)


def decision_function(
    model, dataset: ParquetDataset, *, client=None, n_threads: int | None = None
) -> np.ndarray:
    """``model.decision_function`` of every row of ``dataset``, in row order."""
    return _score(model, dataset, "decision_function", client, n_threads)
