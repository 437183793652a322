"""``score`` of the rows where they live: every estimator's ``score(X, y)`` also takes a
:class:`~elmscale.data.parquet.ParquetDataset` (labels from its label column) or Dask
collections (``X`` a Dask DataFrame or Array, ``y`` a Dask Series or Array of the same
partitions), as its ``fit`` does.

The metric is scikit-learn's (accuracy for classifiers, R^2 for regressors), computed
from sums that add up over the units (``elmscale.distributed.units.metric_sums``): each
unit's rows are scored where they are read (a Parquet unit on any worker, a persisted
partition on the worker that holds it), the model sent once, and only the sums come back.
Accuracy is then the arrays' value to the bit (a count over a count); R^2 to rounding (its
spread is ``sum y^2 - (sum y)^2 / n``, not the sum of squared deviations).  A multi-output
regressor (Dask collections with ``y`` of several columns) gets the sums per output and
scikit-learn's default ``multioutput="uniform_average"``: the outputs' R^2, averaged.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SourceScoreMixin", "score_dataset"]


def score_dataset(model, dataset, *, client=None, n_threads: int | None = None) -> float:
    """Accuracy (classifiers) or R^2 (regressors; several outputs' averaged) of ``model``
    on every row of a labelled data set (a ParquetDataset or a ``DaskDataset``), reduced
    on the Dask cluster of ``client`` (here without one)."""
    from elmscale.distributed.collections import model_for_tasks
    from elmscale.distributed.executors import broadcast, reduce_units
    from elmscale.distributed.units import add_arrays, unit_metric_sums

    if dataset.label is None:
        raise ValueError(f"{dataset.source}: no label column; expected labels to score")
    expected = getattr(model, "n_features_in_", dataset.n_features)
    if dataset.n_features != expected:
        raise ValueError(
            f"{dataset.source}: {dataset.n_features} feature columns; the model expects {expected}"
        )
    outputs = int(getattr(model, "n_outputs_", 1))
    if outputs != getattr(dataset, "n_outputs", 1):
        raise ValueError(
            f"{dataset.source}: {getattr(dataset, 'n_outputs', 1)} label column(s); the model "
            f"has {outputs} output(s)"
        )
    threads = 1 if client is not None else n_threads
    sums = reduce_units(
        unit_metric_sums,
        dataset.units(),
        add_arrays,
        client=client,
        threads_per_task=threads,
        model=broadcast(model_for_tasks(model, threads), client),
    )
    if sums.size == 2:  # [correct, rows]
        return float(sums[0] / sums[1])
    # per output: [squared errors, sums, sums of squares], then the row count
    sse, total, squares = sums[:-1].reshape(3, -1)
    n = sums[-1]
    spread = squares - total**2 / n
    if not np.all(spread > 0):
        raise ValueError(f"{dataset.source}: R^2 is undefined: the targets are constant")
    # scikit-learn's multioutput="uniform_average": the outputs' R^2, averaged
    return float(np.mean(1 - sse / spread))


class SourceScoreMixin:
    """``score(X, y=None, sample_weight=None, *, client=None)``: scikit-learn's ``score``
    for arrays; for a ParquetDataset or Dask collections, :func:`score_dataset` (on the
    Dask cluster of ``client``; collections default to Dask's default client).  Placed
    before ``ClassifierMixin`` / ``RegressorMixin`` in the bases."""

    def score(self, X, y=None, sample_weight=None, *, client=None):
        """The mean accuracy (classifiers) or R^2 (regressors) of the model on ``X``, ``y``.

        ``X`` may also be a :class:`~elmscale.data.parquet.ParquetDataset` (``y`` None: its
        label column) or a Dask DataFrame / Array with ``y`` a Dask Series / Array of the
        same partitions: each unit or partition is scored where its rows are (``client``:
        a ``distributed.Client``; collections default to Dask's default client), and only
        sums come back.
        """
        from elmscale.distributed.collections import is_collection, is_dataset, labelled_source

        in_rows_elsewhere = is_dataset(X) or is_collection(X) or is_collection(y)
        if sample_weight is not None and in_rows_elsewhere:
            raise ValueError("sample_weight is not taken with a ParquetDataset or Dask collections")
        dataset, y, client = labelled_source(X, y, client, done="scored", purpose="to score")
        if not in_rows_elsewhere:
            return super().score(X, y, sample_weight=sample_weight)  # type: ignore[misc]
        return score_dataset(
            self, dataset, client=client, n_threads=getattr(self, "n_threads", None)
        )
