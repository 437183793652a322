"""Dask collections as a data set: persisted partitions as work units, their tasks run
where the partitions live.

``fit(X, y)`` with ``X`` a ``dask.dataframe.DataFrame`` or ``dask.array.Array`` and ``y`` a
Dask Series or Array (as XGBoost's, LightGBM's and dask-ml's estimators take them; an Array's
chunks may be ``scipy.sparse`` CSR or CSC matrices, as theirs may, e.g.
``da.from_array(X_csr, chunks=(rows, n_features), asarray=False)``: sparse rows, read as
float32 CSR blocks by the units, as a Parquet column of sparse rows is):
:func:`as_source` turns them into a :class:`DaskDataset`, which every fit that takes a
:class:`~elmscale.data.parquet.ParquetDataset` takes the same way (``units()``,
``n_rows``, ``features``, ``label``, ``scaled``, ``read``).

* X's and y's partitions are persisted together: one task per partition holds both
  (``(X part, y part)``), so they are on one worker; two collections from one persisted
  DataFrame (``df[features]``, ``df[label]``) are already there and nothing moves.
* Each partition is a :class:`~elmscale.data.work_units.PartitionUnit` (finer units are
  row ranges inside a partition, never across two).  :func:`submit_placed` submits a task
  of such units with their partitions as inputs and restricted to the worker that holds
  them (``allow_other_workers=False``, as LightGBM's Dask training), so no row moves
  between workers during a fit.  Strict, because Dask's work stealing moves a task with a
  loose restriction to an idle worker, its partition with it (a worker that holds no
  partition is such a worker).  The price, LightGBM's too: a worker lost mid-fit takes
  its partitions with it, and their tasks could only wait for it; a scheduler plugin
  (:mod:`elmscale.distributed.lost_partitions`) fails them at once instead, and the fit
  raises its ``LostPartitionsError`` naming the worker and the partitions.
* The client defaults to ``distributed.default_client()``.  Partition lengths come from
  the partitions themselves (unknown chunk sizes are fine); a worker that holds no
  partition gets no unit.

Dask is imported only when a Dask collection is given: a worker that runs a unit imports
this module (for :func:`_attached`) without loading ``dask.dataframe``.
"""

from __future__ import annotations

import copy
import functools
import uuid
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from elmscale.core.threads import thread_budget
from elmscale.data.work_units import PartitionUnit, attach, partition_keys

__all__ = [
    "DaskDataset",
    "as_source",
    "from_collections",
    "group_holders",
    "holder_groups",
    "is_collection",
    "is_dataset",
    "lazy_on_collections",
    "map_method",
    "model_for_tasks",
    "submit_placed",
]


def is_collection(obj) -> bool:
    """Whether ``obj`` is a Dask DataFrame, Series or Array (Dask not imported otherwise)."""
    if not type(obj).__module__.startswith("dask"):
        return False
    import dask.array as da
    import dask.dataframe as dd

    return isinstance(obj, (da.Array, dd.DataFrame, dd.Series))


def is_dataset(obj) -> bool:
    """Whether ``obj`` is a data set whose units the data plane maps over."""
    # (pyarrow.parquet loaded only by a caller that has a Parquet data set)
    from elmscale.data.parquet import ParquetDataset

    return isinstance(obj, (ParquetDataset, DaskDataset))


@dataclass(frozen=True)
class DaskDataset:
    """Persisted Dask collections described as a data set (see :func:`from_collections`).

    ``parts``: ``(key, n_rows)`` of each persisted partition, in row order (the value of
    ``key`` is ``(X part, y part)``); ``futures`` keep them on the cluster as long as the
    data set lives.  ``source``, ``features``, ``label``, ``scale``, ``shift`` and
    ``n_units`` as a :class:`~elmscale.data.parquet.ParquetDataset`'s.
    """

    source: str
    features: tuple[str, ...]
    label: str | None
    parts: tuple[tuple[str | tuple, int], ...]
    client: object = field(compare=False, repr=False)
    futures: tuple = field(compare=False, repr=False)
    scale: tuple[float, ...] | None = None
    shift: tuple[float, ...] | None = None
    n_units: int | None = None
    n_outputs: int = 1  # y's columns: several only to score a multi-output regressor
    sparse_width: int | None = None  # sparse rows (X's chunks CSR / CSC) of this many features

    def scaled(self, scaler) -> DaskDataset:
        """The same rows with ``scaler`` applied, as :meth:`ParquetDataset.scaled`."""
        from elmscale.data.parquet import ParquetDataset

        return ParquetDataset.scaled(self, scaler)  # type: ignore[arg-type, return-value]

    def with_units(self, n_units: int | None) -> DaskDataset:
        """The same data set cut into ``n_units`` units by default (None: per partition)."""
        from elmscale.data.parquet import ParquetDataset

        return ParquetDataset.with_units(self, n_units)  # type: ignore[arg-type, return-value]

    @property
    def n_rows(self) -> int:
        return int(sum(n for _, n in self.parts))

    @property
    def n_features(self) -> int:
        return len(self.features) if self.sparse_width is None else self.sparse_width

    def __repr__(self) -> str:
        return (
            f"DaskDataset({self.source}, {self.n_rows:,} rows, {self.n_features} features, "
            f"label={self.label!r}{', sparse rows' if self.sparse_width is not None else ''}"
            f"{', scaled' if self.scale is not None else ''})"
        )

    def units(self, n_units: int | None = None) -> list[PartitionUnit]:
        """Units covering every row once, in order, none across two partitions.

        ``n_units`` None: the data set's own ``n_units``, or one per (non-empty) partition.
        Otherwise the rows are cut at ``n_units`` near-equal ranges and at every partition's
        end: at least ``n_units`` units (at most one per row), each within one partition.
        """
        n_units = self.n_units if n_units is None else n_units
        lengths = np.array([n for _, n in self.parts], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(lengths)])
        cuts = starts
        if n_units is not None:
            if int(n_units) < 1:
                raise ValueError(f"n_units must be >= 1; got {n_units}")
            k = min(int(n_units), self.n_rows)
            even = np.linspace(0, self.n_rows, k + 1).round().astype(np.int64)
            cuts = np.union1d(starts, even)
        units: list[PartitionUnit] = []
        for lo, hi in zip(cuts[:-1], cuts[1:]):
            if hi <= lo:
                continue
            p = int(np.searchsorted(starts, lo, side="right")) - 1
            units.append(
                PartitionUnit(
                    index=len(units),
                    start=int(lo),
                    n_rows=int(hi - lo),
                    key=self.parts[p][0],
                    partition=p,
                    offset=int(lo - starts[p]),
                    features=self.features,
                    label=self.label,
                    source=self.source,
                    scale=self.scale,
                    shift=self.shift,
                    sparse_width=self.sparse_width,
                )
            )
        return units

    def read(self) -> tuple[np.ndarray, np.ndarray | None]:
        """All rows here: ``(X float32, y)`` (X CSR for sparse rows; small sets and tests),
        through the client."""
        from elmscale.data.parquet import stack_rows

        units = self.units()
        values = self.client.gather([self.futures[u.partition] for u in units])  # type: ignore[attr-defined]
        parts = [attach(u, [v]).read() for u, v in zip(units, values)]
        y = None if self.label is None else np.concatenate([y for _, y in parts])
        return stack_rows([X for X, _ in parts]), y


# -- from collections -----------------------------------------------------------------------


def _client(client):
    if client is not None:
        return client
    from distributed import default_client

    try:
        return default_client()
    except ValueError:
        raise ValueError(
            "X is a Dask collection and no Dask client is running: pass client= (a "
            "distributed.Client), or create one first"
        ) from None


def _is_dataframe(obj) -> bool:
    import dask.dataframe as dd

    return isinstance(obj, (dd.DataFrame, dd.Series))


def _is_sparse(X) -> bool:
    """Whether ``X`` is a Dask Array whose chunks are ``scipy.sparse`` matrices (its meta)."""
    import dask.array as da
    import scipy.sparse as sp

    return isinstance(X, da.Array) and sp.issparse(getattr(X, "_meta", None))


def _columns(X) -> tuple[tuple[str, ...], int | None]:
    """``(features, sparse_width)`` of a data set of ``X``: its feature names (numeric
    columns checked), and None; or for an Array of sparse chunks one name for the rows and
    their width (a name per feature would travel with every unit: a million of them)."""
    if not _is_sparse(X):
        return _feature_names(X), None
    _check_array(X)
    if X.numblocks[1] > 1:
        raise ValueError(
            f"X: a Dask Array of sparse chunks split along its features into "
            f"{X.numblocks[1]} column blocks; expected every chunk to hold whole rows "
            f"(chunks=(rows, {X.shape[1]}), e.g. da.from_array(X_csr, chunks=(rows, "
            f"{X.shape[1]}), asarray=False))"
        )
    return ("X",), int(X.shape[1])


def _feature_names(X) -> tuple[str, ...]:
    """X's feature names, checked numeric (2-D, one block of columns for an array)."""
    import dask.dataframe as dd

    if isinstance(X, dd.Series):
        raise ValueError("X is a Dask Series; expected a Dask DataFrame or a 2-D Dask Array")
    if isinstance(X, dd.DataFrame):
        for name, dtype in X.dtypes.items():
            if dtype.kind not in "biuf":
                raise ValueError(
                    f"X: column {name!r} has dtype {dtype}; expected numeric feature columns "
                    "(select them first, e.g. X = df[feature_columns])"
                )
        return tuple(str(c) for c in X.columns)
    _check_array(X)
    return tuple(f"x{j}" for j in range(X.shape[1]))


def _check_array(X) -> None:
    """A Dask Array of features: 2-D, numbers."""
    if X.ndim != 2:
        raise ValueError(f"X: a Dask Array of {X.ndim} dimension(s); expected 2 (rows, features)")
    if X.dtype.kind not in "biuf":
        raise ValueError(f"X: a Dask Array of dtype {X.dtype}; expected numbers")


def _label_name(y) -> str:
    import dask.array as da
    import dask.dataframe as dd

    if isinstance(y, dd.Series):
        return "y" if y.name is None else str(y.name)
    if isinstance(y, dd.DataFrame):  # several columns: the outputs of a regressor's score
        return str(y.columns[0]) if len(y.columns) == 1 else str([str(c) for c in y.columns])
    if isinstance(y, da.Array) and y.ndim in (1, 2):
        return "y"
    raise ValueError(
        f"y: {type(y).__name__} of shape {getattr(y, 'shape', None)}; expected a Dask Series "
        "or a 1-D Dask Array"
    )


def _blocks(obj) -> list:
    """The collection's partitions (row blocks) as Delayed objects, in row order."""
    import dask.array as da

    if isinstance(obj, da.Array):
        if obj.ndim == 2 and obj.numblocks[1] > 1:
            obj = obj.rechunk({1: -1})  # one block of columns a partition
        blocks = obj.to_delayed()
        return list(blocks.ravel()) if blocks.ndim == 1 else list(blocks[:, 0])
    return list(obj.to_delayed())


def _held_on(client, blocks) -> list[list]:
    """For each block (a Delayed), the worker holding most of the persisted data it is
    computed from (``[]``: none of it is persisted), found by walking its graph down to
    the keys held on the cluster."""
    from dask.core import get_dependencies

    in_memory = client.who_has()
    graphs: dict = {}  # (a DataFrame's blocks share one graph: materialised once)
    where = []
    for block in blocks:
        graph = block.__dask_graph__()
        tasks = graphs.setdefault(id(graph), (graph, dict(graph)))[1]
        todo, seen, held = [block.key], set(), Counter[str]()
        while todo:
            key = todo.pop()
            if key in seen:
                continue
            seen.add(key)
            if key in in_memory:
                held.update(in_memory[key])
            elif key in tasks:
                todo.extend(get_dependencies(tasks, key))
        where.append([held.most_common(1)[0][0]] if held else [])
    return where


def _check_chunk(X_part, partition: int, sparse: bool) -> None:
    """An Array's chunk is what its meta said: a numpy array, or a CSR / CSC matrix for
    an Array of sparse chunks (a chunk is only seen once computed)."""
    import scipy.sparse as sp

    if sparse:
        if sp.issparse(X_part) and X_part.format in ("csr", "csc"):
            return
        expected = "a scipy.sparse CSR or CSC matrix (the Array's meta is sparse)"
    else:
        if isinstance(X_part, np.ndarray) or hasattr(X_part, "iloc"):
            return
        expected = "a numpy array, or scipy.sparse CSR / CSC chunks with a sparse meta (e.g. "
        expected += "da.from_array(X_csr, chunks=(rows, n_features), asarray=False))"
    kind = f"{type(X_part).__module__}.{type(X_part).__name__}"
    if sp.issparse(X_part):
        kind += f" ({X_part.format})"
    raise ValueError(f"X: chunk {partition} is a {kind}; expected {expected}")


def _pack(X_part, y_part, partition: int, sparse: bool = False):
    """A persisted partition: X's and y's rows together, checked to be the same rows."""
    _check_chunk(X_part, partition, sparse)
    if y_part is not None:
        if X_part.shape[0] != len(y_part):
            raise ValueError(
                f"X and y differ in partition {partition}: {X_part.shape[0]} rows of X, "
                f"{len(y_part)} of y; expected the same rows (e.g. X = df[features], "
                "y = df[label] of one DataFrame)"
            )
        if getattr(y_part, "ndim", 1) == 2 and y_part.shape[1] == 1:
            y_part = y_part.iloc[:, 0] if hasattr(y_part, "iloc") else y_part[:, 0]
    return X_part, y_part


def _rows_of(pack) -> int:
    return pack[0].shape[0]


def from_collections(X, y, client=None, *, name: str = "X") -> DaskDataset:
    """Persist ``X`` (a Dask DataFrame of numeric columns or a 2-D Dask Array, of numpy or
    of scipy.sparse CSR / CSC chunks holding whole rows) and ``y``
    (a Dask Series or 1-D Array with the same partitions; None for scoring) together, one
    task per partition, and describe them as a :class:`DaskDataset`.

    ``client``: default ``distributed.default_client()``.  Raises ``ValueError`` naming
    ``X`` or ``y`` for strings in X, other shapes, sparse chunks split along the features,
    a chunk of another kind than numpy or CSR / CSC, or partitions that differ in number
    or length.
    """
    import dask
    from distributed import wait

    client = _client(client)
    features, sparse_width = _columns(X)
    label = None if y is None else _label_name(y)
    X_blocks = _blocks(X)
    y_blocks = [None] * len(X_blocks) if y is None else _blocks(y)
    if len(X_blocks) != len(y_blocks):
        raise ValueError(
            f"X has {len(X_blocks)} partitions and y {len(y_blocks)}; expected the same "
            "partitions (e.g. X = df[features], y = df[label] of one DataFrame)"
        )
    _check_known_lengths(X, y)
    from dask.base import tokenize

    from elmscale.distributed import lost_partitions

    lost_partitions.watch(client)
    # keys that name the partition (a lost worker's error names them), each data set's own:
    # a pack that failed with its worker stays failed while its futures live, and a fit of
    # the same collections again must not meet it
    fit_token = uuid.uuid4().hex
    packs = [
        dask.delayed(_pack, pure=True)(
            x,
            yb,
            i,
            sparse_width is not None,
            dask_key_name=f"_pack-{i}-{tokenize(x, yb, i, fit_token)}",
        )
        for i, (x, yb) in enumerate(zip(X_blocks, y_blocks))
    ]
    # each pack computed where X's rows of it are held, if persisted: left to choose, Dask
    # balances the packs over the workers, and a partition would move to an idle one
    futures = [
        client.compute(pack, workers=where or None, allow_other_workers=False)
        for pack, where in zip(packs, _held_on(client, X_blocks))
    ]
    wait(futures)
    for f in futures:
        if f.status == "error":
            f.result()  # raises the partition's error (X and y of different lengths)
    holders = _holders(client, [f.key for f in futures])
    lengths = client.gather(
        [
            client.submit(
                _rows_of, f, workers=_home(holders, f.key), allow_other_workers=False, pure=False
            )
            for f in futures
        ]
    )
    kind = "DataFrame" if _is_dataframe(X) else "Array"
    if sparse_width is not None:
        kind += " of sparse rows"
    source = f"{name} (a Dask {kind} of {len(futures)} partitions)"
    return DaskDataset(
        source=source,
        features=features,
        label=label,
        parts=tuple((f.key, int(n)) for f, n in zip(futures, lengths)),
        client=client,
        futures=tuple(futures),
        n_outputs=1 if y is None or y.ndim == 1 else int(y.shape[1]),
        sparse_width=sparse_width,
    )


def _check_known_lengths(X, y) -> None:
    """X's and y's partition lengths, where both are known without computing, agree."""
    if y is None:
        return
    x_chunks, y_chunks = _known_chunks(X), _known_chunks(y)
    if x_chunks is None or y_chunks is None:
        return
    for i, (a, b) in enumerate(zip(x_chunks, y_chunks)):
        if a != b:
            raise ValueError(
                f"X and y differ in partition {i}: {a} rows of X, {b} of y; expected the same rows"
            )


def _known_chunks(obj) -> tuple | None:
    import dask.array as da

    if isinstance(obj, da.Array) and not any(np.isnan(c) for c in obj.chunks[0]):
        return tuple(int(c) for c in obj.chunks[0])
    return None


def as_source(X, y, client, *, name: str = "X"):
    """``(X, y, client)`` of a fit: Dask collections become a :class:`DaskDataset` (``y``
    None: its labels are in it) with their client (default: ``default_client()``);
    anything else comes back as given."""
    if not (is_collection(X) or is_collection(y)):
        return X, y, client
    if not is_collection(X):
        raise ValueError(
            f"y is a Dask collection and X a {type(X).__name__}; expected both Dask "
            "collections (X a DataFrame or Array, y a Series or Array), or neither"
        )
    if y is None:
        raise ValueError("X is a Dask collection and y is None; expected y a Dask Series or Array")
    if not is_collection(y):
        raise ValueError(
            f"X is a Dask collection and y a {type(y).__name__}; expected y a Dask Series or "
            "Array with X's partitions"
        )
    dataset = from_collections(X, y, client, name=name)
    return dataset, None, dataset.client


def check_labels_in(dataset, y, *, purpose: str = "for fitting") -> None:
    """A ParquetDataset's (or Dask collections') labels are its label column: ``y`` must
    be None, and the column must be there."""
    if y is not None:
        raise ValueError(
            "y must be None when X is a ParquetDataset: the labels come from its label "
            f"column {dataset.label!r}"
        )
    if dataset.label is None:
        raise ValueError(
            f"{dataset.source}: the data set has no label column; expected labels {purpose}"
        )
    if getattr(dataset, "n_outputs", 1) > 1 and purpose != "to score":
        raise ValueError(
            f"y: {dataset.n_outputs} columns; expected a Dask Series or a 1-D Dask Array "
            f"{purpose} (several outputs are taken to score a multi-output regressor)"
        )


def labelled_source(X, y, client, *, done: str = "fitted", purpose: str = "for fitting"):
    """``(X, y, client)`` of a fit or a score: :func:`as_source`'s, a data set's labels
    checked (:func:`check_labels_in`), and ``client`` refused with in-memory arrays, which
    are ``done`` in this process."""
    X, y, client = as_source(X, y, client)
    if is_dataset(X):
        check_labels_in(X, y, purpose=purpose)
    elif client is not None:
        raise ValueError(
            "client is used with a ParquetDataset (elmscale.open_parquet) or Dask "
            f"collections; in-memory arrays are {done} in this process"
        )
    return X, y, client


# -- tasks where the partitions are -----------------------------------------------------------


def _holders(client, keys) -> dict:
    """``{key: the workers holding it}`` of persisted partitions (one scheduler round trip;
    asked at each submission, not kept: Dask may have computed a lost one again elsewhere)."""
    from distributed import Future

    keys = set(keys)
    return client.who_has([Future(key, client) for key in keys]) if keys else {}


def _home(holders: dict, key) -> list:
    """The restriction of a task reading partition ``key``: one worker holding it."""
    return sorted(holders.get(key, ()))[:1]


def _attached(item, _partitions, *args, _placed_fn, **kwargs):
    """``_placed_fn(item with its partitions' rows attached, *args, **kwargs)``: on a worker
    (the names start with _: a unit function's own keywords, ``rows`` among them, pass)."""
    return _placed_fn(attach(item, _partitions), *args, **kwargs)


def submit_placed(client, fn, items, *args, workers=None, **kwargs) -> list:
    """``[client.submit(fn, item, *args, **kwargs) for item in items]``, each task of
    partition units (``item``: a unit or a list of them) given their partitions as inputs
    and restricted to the worker holding them (the first of them, for a list: see
    :func:`holder_groups`).  Items of file units run as before: on ``workers[i]`` when
    ``workers`` is given, loosely (the files are readable anywhere)."""
    from distributed import Future

    items = list(items)
    keys_of = [partition_keys(item) for item in items]
    holders = _holders(client, [key for keys in keys_of for key in keys])
    futures = []
    for i, (item, keys) in enumerate(zip(items, keys_of)):
        if not keys:
            where = {} if workers is None else {"workers": [workers[i]]}
            loose = {"allow_other_workers": True} if where else {}
            futures.append(client.submit(fn, item, *args, **where, **loose, **kwargs))
            continue
        futures.append(
            client.submit(
                _attached,
                item,
                [Future(key, client) for key in keys],
                *args,
                _placed_fn=fn,
                workers=_home(holders, keys[0]) or None,
                allow_other_workers=False,
                **kwargs,
            )
        )
    return futures


def group_holders(client, groups: list[list]) -> list:
    """For each group of units, the worker holding its first partition, or None (a group of
    file units)."""
    holders = _holders(client, [key for g in groups for key in partition_keys(g)])
    return [
        (_home(holders, partition_keys(g)[0]) or [None])[0] if partition_keys(g) else None
        for g in groups
    ]


def holder_groups(client, groups: list[list]) -> list[list]:
    """Groups of units (the blocks of a solver) regrouped so that each holds one worker's
    partitions only (as many groups per worker as its share of the units asks, at least
    one; units in their order); groups of file units come back as given."""
    units = sorted((u for g in groups for u in g), key=lambda u: u.index)
    keys = partition_keys(units)
    if not keys:
        return groups
    holders = _holders(client, keys)
    by_worker: dict = {}
    for unit in units:
        by_worker.setdefault(tuple(_home(holders, unit.key)), []).append(unit)
    out: list[list] = []
    for mine in by_worker.values():
        n = max(1, round(len(groups) * len(mine) / len(units)))
        out.extend(mine[b::n] for b in range(n) if mine[b::n])
    return out


# -- predictions of a collection: lazy, partition by partition ----------------------------------


def model_for_tasks(model, n_threads: int | None):
    """A copy whose estimators' own thread counts are the task's (a model's methods set
    their own budget; left at "all cores" inside every task, they would oversubscribe)."""
    task_model = copy.deepcopy(model)
    for step in task_model.steps if hasattr(task_model, "steps") else [(None, task_model)]:
        if "n_threads" in step[1].get_params(deep=False):
            step[1].n_threads = n_threads
    return task_model


def _method_on_block(block, model, method: str, width: int | None, columns):
    """``model.method`` of one partition (pandas, numpy, or a sparse chunk, passed as it is
    to a model that takes sparse rows), on one thread; an empty partition gives an empty
    result of the right shape (a model refuses 0 rows)."""
    import scipy.sparse as sp

    if sp.issparse(block):
        values = block
    else:
        values = np.asarray(block.to_numpy() if hasattr(block, "to_numpy") else block)
    with thread_budget(1):
        if values.shape[0]:
            out = np.asarray(getattr(model, method)(values))
        else:
            one_row = sp.csr_matrix if sp.issparse(values) else np.zeros
            out = np.asarray(
                getattr(model, method)(one_row((1, values.shape[1]), dtype=values.dtype))
            )
            out = out[:0]
    if not hasattr(block, "index"):
        return out
    import pandas as pd

    if width is None:
        return pd.Series(out, index=block.index, name=method)
    return pd.DataFrame(out, index=block.index, columns=columns)


def map_method(model, X, method: str):
    """``model.method(X)`` of a Dask DataFrame or Array, lazily: a Dask Series (or
    DataFrame, for 2-D results) with X's partitions and index, or a Dask Array with X's row
    chunks.  The fitted model is one node of the graph, sent once to each worker that uses
    it (as dask-ml's ``ParallelPostFit``); each partition is scored on one thread."""
    import dask
    import dask.array as da
    import dask.dataframe as dd

    if isinstance(X, dd.Series) or getattr(X, "ndim", 2) != 2:
        raise ValueError(
            f"X: {type(X).__name__} of {getattr(X, 'ndim', 1)} dimension(s); expected a Dask "
            "DataFrame or a 2-D Dask Array"
        )
    features, sparse_width = _columns(X)  # numeric columns, or a clear error
    n_features = len(features) if sparse_width is None else sparse_width
    dtype = np.result_type(*X.dtypes) if isinstance(X, dd.DataFrame) else X.dtype
    expected = getattr(model, "n_features_in_", n_features)
    if n_features != expected:
        raise ValueError(f"X has {n_features} features; the model expects {expected}")
    # the result's type and width from one row (this also checks that the model is fitted,
    # and that it takes sparse rows if X's are)
    if sparse_width is None:
        one_row = np.zeros((1, n_features), dtype=dtype)
    else:
        import scipy.sparse as sp

        one_row = sp.csr_matrix((1, n_features), dtype=dtype)
    sample = np.asarray(getattr(model, method)(one_row))
    width = None if sample.ndim == 1 else int(sample.shape[1])
    classes = getattr(model, "classes_", None)
    columns = (
        [str(c) for c in classes]
        if classes is not None and width == len(classes)
        else [str(j) for j in range(width or 0)]
    )
    task_model = dask.delayed(model_for_tasks(model, 1), pure=False, traverse=False)
    score = functools.partial(_method_on_block, method=method, width=width, columns=columns)
    if isinstance(X, dd.DataFrame):
        import pandas as pd

        meta = (
            pd.Series(sample[:0], name=method)
            if width is None
            else pd.DataFrame(sample[:0], columns=columns)
        )
        return X.map_partitions(score, task_model, meta=meta)
    if X.numblocks[1] > 1:
        X = X.rechunk({1: -1})
    if width is None:
        return da.map_blocks(score, X, task_model, drop_axis=1, dtype=sample.dtype, meta=sample[:0])
    return da.map_blocks(
        score, X, task_model, chunks=(X.chunks[0], (width,)), dtype=sample.dtype, meta=sample[:0]
    )


def lazy_on_collections(method):
    """Decorates an estimator's ``predict`` / ``decision_function`` / ``predict_proba``:
    given a Dask collection, it returns :func:`map_method`'s lazy result; otherwise it
    runs as written."""

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if is_collection(X):
            return map_method(self, X, method.__name__)
        return method(self, X, *args, **kwargs)

    return wrapper
