"""Scoring files larger than memory with a saved model (``elmscale score``).

Every input file (Parquet or CSV; a file or a directory of them) gives one output file
(Parquet, or CSV when the output is named ``*.csv``) with the pass-through id columns, the
prediction and optionally the decision values.  Rows are read, scored and written in
batches, so memory holds one batch.  Each output is written to a temporary name in its
folder and renamed when complete: an interrupted run leaves no partial file (stale
temporary files are removed by the next run) and a rerun skips the outputs already there.

Inputs and outputs may be fsspec URLs (``s3://bucket/in/`` to ``s3://bucket/scores/``, with
``storage_options``; :mod:`elmscale.data.storage`).  Each job's process reads its input
straight from the store and puts its output whole, in one request, when complete, then a
marker object (``.elmscale-done/<name>.json``, its size); a rerun skips only the outputs a
marker names with that size.  Local output folders are locked while written; an object
store has no lock: one writer per output folder, by design.

Before anything is written every input is checked: its feature columns (the model file's
``input.features`` when it has them, else ``features``, else every numeric column but the
id columns and ``label``) must exist, be numeric and match the model's feature count.

``score_jobs`` runs one job per file here, as Dask tasks (``client``) or as Ray tasks
(``ray_address``).  On a Dask or Ray cluster, local inputs and output folders are the
workers' own paths: the output folder's lock and the rerun's "already done" check are taken
here, the files written there by the workers.  That is one folder only on a shared file
system, so before anything is written every Dask worker, or every Ray node, is asked
whether it sees the same folder (a probe file written here, read back there) and each
local input with the same size (:func:`check_workers_see`); one that does not is a
``DataError`` naming the folder and the worker or node.  Object-store URLs need no such
probe.
"""

from __future__ import annotations

import fnmatch
import os
import queue
import threading
import uuid
from collections.abc import Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from elmscale.core.errors import DataError
from elmscale.core.pipelines import final_estimator
from elmscale.core.threads import thread_budget
from elmscale.data.columns import PARQUET_SUFFIXES, is_numeric_type, vector_column
from elmscale.data.parquet import read_footer
from elmscale.data.sparse_rows import csr_from_vectors, is_vector_type, vector_width
from elmscale.data.storage import (
    Location,
    locate,
    marked_done,
    output_lock,
    scrub,
    storage_errors,
    write_whole,
)

__all__ = ["ScoreJob", "check_workers_see", "plan_jobs", "score_file", "score_jobs"]

INPUT_SUFFIXES = (*PARQUET_SUFFIXES, ".csv")
DEFAULT_BATCH_ROWS = 262_144


@dataclass(frozen=True)
class ScoreJob:
    """Score ``source`` into ``target`` (one file or object each; their stores' options
    travel with the job, never shown)."""

    source: Location
    target: Location
    features: tuple[str, ...]
    id_columns: tuple[str, ...]
    decision: bool
    batch_rows: int
    n_rows: int | None
    #: a Parquet input's footer bytes and the input's size in a store, from the plan's own
    #: read: the job's process opens the object without asking its size and reads the
    #: footer in one request of exactly its bytes (None: unknown, asked and guessed)
    footer: int | None = None
    size: int | None = None
    #: None: feature columns; else ``features`` is one column of sparse rows (Spark ML's
    #: vector layout, :mod:`elmscale.data.sparse_rows`) of this width, scored as CSR
    sparse_width: int | None = None

    @property
    def input(self) -> str:
        return str(self.source)

    @property
    def output(self) -> str:
        return str(self.target)


def _is_input(name: str) -> bool:
    return os.path.splitext(name)[1] in INPUT_SUFFIXES and not name.startswith((".", "_"))


def _inputs(where: Location) -> list[tuple[Location, int | None]]:
    """The input files at ``where``, each with its size when a store's listing gave it."""
    if not where.exists():
        raise DataError(
            f"{where}: no such file or directory; expected a Parquet or CSV file or "
            "a directory of them"
        )
    if not where.is_dir():
        return [(where, None)]
    sizes: dict[str, int | None]
    if where.is_local:
        sizes = {f.name: None for f in where.local_path.iterdir() if f.is_file()}
    else:
        with storage_errors(where, "a folder of Parquet or CSV files"):
            listed = where.fs.ls(where.path, detail=True)
        sizes = {os.path.basename(i["name"]): i.get("size") for i in listed if i["type"] == "file"}
    files = sorted(name for name in sizes if _is_input(name))
    if not files:
        raise DataError(f"{where}: directory holds no .parquet or .csv file")
    return [(where.child(name), sizes[name]) for name in files]


@contextmanager
def _opened(file: Location, size: int | None = None):
    """What pyarrow reads ``file`` from: a local path, or a file object of the store's,
    opened without asking its size when ``size`` is known (an error opening it names the
    URL)."""
    if file.is_local:
        yield file.path
        return
    with storage_errors(file, "a Parquet or CSV file"):
        handle = file.store.open_input(file.url, size=size)
    with handle:
        yield handle


@dataclass(frozen=True)
class _Schema:
    """What the plan reads of an input: its columns, rows (Parquet), and in a store its
    footer's bytes and its size."""

    schema: pa.Schema
    n_rows: int | None = None
    footer: int | None = None
    size: int | None = None
    metadata: pq.FileMetaData | None = None


def _schema(file: Location, size: int | None = None) -> _Schema:
    try:
        with _opened(file, size) as source:
            if file.suffix == ".csv":
                with pacsv.open_csv(source) as reader:
                    found = _Schema(reader.schema)
            else:
                metadata = pq.ParquetFile(source).metadata
                found = _Schema(
                    metadata.schema.to_arrow_schema(),
                    metadata.num_rows,
                    None if file.is_local else int(metadata.serialized_size),
                    None if file.is_local else int(source.size),
                    metadata,
                )
        found.schema.names  # noqa: B018 - column names that are not UTF-8 fail here, named
        return found
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise _unreadable(file, exc) from exc


def _unreadable(file: Location, exc: Exception) -> DataError:
    return DataError(
        f"{file}: cannot be read ({scrub(str(exc), file.store.options)}); "
        "expected a Parquet or CSV file"
    )


def _feature_columns(
    file: Location, schema: pa.Schema, features, id_columns, n_expected: int
) -> tuple[str, ...]:
    names = list(schema.names)
    for column in id_columns:
        if column not in names:
            raise DataError(f"{file}: id column '{column}' not found; expected one of {names}")
    others = [n for n in names if n not in id_columns and n != "label"]
    vectors = [n for n in others if is_vector_type(schema.field(n).type)]
    if features is None and len(vectors) == 1:
        chosen = vectors  # a column of sparse rows holds the features (Spark ML's way)
    elif features is None:
        chosen = [n for n in others if is_numeric_type(schema.field(n).type)]
    elif isinstance(features, str):
        chosen = [n for n in names if fnmatch.fnmatchcase(n, features)]
    else:
        chosen = list(features)
    for column in chosen:
        if column not in names:
            raise DataError(
                f"{file}: feature column '{column}' not found; the model was "
                f"trained on {list(chosen)}"
            )
        kind = schema.field(column).type
        if not is_numeric_type(kind) and not (chosen == [column] and is_vector_type(kind)):
            raise DataError(
                f"{file}: feature column '{column}' has type {kind}; expected a numeric column"
                " (or one column of sparse rows alone)"
            )
    if vector_column(schema, chosen) is not None:
        return tuple(chosen)  # its width is checked against the model's by the plan
    if len(chosen) != n_expected:
        raise DataError(
            f"{file}: {len(chosen)} feature columns {chosen}; the model expects "
            f"{n_expected} features"
        )
    return tuple(chosen)


def plan_jobs(
    model,
    input_path,
    output_path,
    *,
    features=None,
    id_columns: Sequence[str] = (),
    decision: bool = False,
    batch_rows: int = DEFAULT_BATCH_ROWS,
    storage_options=None,
) -> list[ScoreJob]:
    """One job per input file, every input checked.  Paths may be fsspec URLs, with
    ``storage_options`` for their stores."""
    input_path = locate(input_path, storage_options)
    output_path = locate(output_path, storage_options)
    files = _inputs(input_path)
    to_dir = input_path.is_dir() or output_path.suffix.lower() not in INPUT_SUFFIXES
    if to_dir and output_path.suffix.lower() in INPUT_SUFFIXES:
        raise DataError(f"{output_path}: the input is a directory; expected an output directory")
    if decision and not hasattr(final_estimator(model), "decision_function"):
        raise DataError("decision values: the model is not a classifier")
    n_expected = int(final_estimator(model).n_features_in_)
    jobs = []
    for file, size in files:
        found = _schema(file, size)
        chosen = _feature_columns(file, found.schema, features, tuple(id_columns), n_expected)
        out = output_path.child(f"{file.stem}.parquet") if to_dir else output_path
        width = _sparse_width(file, found, chosen, n_expected)
        jobs.append(
            ScoreJob(
                file,
                out,
                chosen,
                tuple(id_columns),
                bool(decision),
                int(batch_rows),
                found.n_rows,
                footer=found.footer,
                size=found.size,
                sparse_width=width,
            )
        )
    return jobs


def _sparse_width(file: Location, found: _Schema, chosen, n_expected: int) -> int | None:
    """The width of the input's column of sparse rows (None: feature columns), which must
    be the model's feature count."""
    if found.metadata is None or vector_column(found.schema, chosen) is None:
        return None
    fs = None if file.is_local else file.fs
    width = vector_width(found.metadata, chosen[0], str(file), fs=fs, path=file.path)
    if width != n_expected:
        raise DataError(
            f"{file}: column '{chosen[0]}' holds rows of {width} features; the model expects "
            f"{n_expected} features"
        )
    return width


def _batches(job: ScoreJob):
    try:
        yield from _read_batches(job)
    # damage met past the footer; an object that vanished or a store that failed mid-read
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise _unreadable(job.source, exc) from exc


def _read_batches(job: ScoreJob):
    columns = list(dict.fromkeys(job.id_columns + job.features))
    with _opened(job.source, job.size) as source:
        if job.source.suffix == ".csv":
            options = pacsv.ReadOptions(block_size=1 << 24)
            with pacsv.open_csv(
                source,
                read_options=options,
                convert_options=pacsv.ConvertOptions(include_columns=columns),
            ) as r:
                yield from r
            return
        # an object's footer in one request of its bytes (known from the plan), its row
        # groups each in one request (pre_buffer), not a column at a time
        footer = None
        if not job.source.is_local and job.footer is not None:
            footer = read_footer(source, job.footer)
        parquet = pq.ParquetFile(source, metadata=footer, pre_buffer=not job.source.is_local)
        yield from parquet.iter_batches(batch_size=job.batch_rows, columns=columns)


_DONE = object()


def _prefetched(batches, depth: int = 2):
    """The items of ``batches``, read ahead on a helper thread while the caller scores the
    ones before (pyarrow reads and decompresses without the GIL: reading overlaps scoring).

    An exception raised while reading is raised here, at the item it replaced; when the
    caller stops early the helper stops after the item it is reading.
    """
    ahead: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def read():
        try:
            for batch in batches:
                if not put((batch, None)):
                    return
        except BaseException as exc:  # handed to the caller, raised there
            put((None, exc))
            return
        finally:
            close = getattr(batches, "close", None)
            if close is not None:
                close()
        put((_DONE, None))

    reader = threading.Thread(target=read, name="elmscale-score-reader", daemon=True)
    reader.start()
    try:
        while True:
            batch, exc = ahead.get()
            if exc is not None:
                raise exc
            if batch is _DONE:
                return
            yield batch
    finally:
        stop.set()
        reader.join()


def _batch_rows(job: ScoreJob, batch: pa.RecordBatch):
    """The batch's features: a float32 array, or a float32 CSR block (sparse rows)."""
    if job.sparse_width is not None:
        (name,) = job.features
        where = f"{job.input}: column '{name}'"
        return csr_from_vectors(batch.column(name), job.sparse_width, where)
    X = np.empty((batch.num_rows, len(job.features)), dtype=np.float32)
    for j, name in enumerate(job.features):
        column = batch.column(name)
        if column.null_count:
            raise DataError(
                f"{job.input}: feature column '{name}' has null values; expected numbers"
            )
        X[:, j] = pc.cast(column, pa.float32()).to_numpy(zero_copy_only=False)
    return X


def _score_batch(model, job: ScoreJob, batch: pa.RecordBatch) -> pa.Table:
    X = _batch_rows(job, batch)
    out = {name: batch.column(name) for name in job.id_columns}
    scores = np.asarray(model.decision_function(X)) if job.decision else None
    # an estimator that maps its decision values to its labels (the sparse ELM): one
    # kernel expansion for both
    labels_of = getattr(final_estimator(model), "_labels_from_decision", None)
    if scores is not None and labels_of is not None:
        prediction = labels_of(scores)
    else:
        prediction = model.predict(X)
    out["prediction"] = pa.array(prediction)
    if scores is not None:
        if scores.ndim == 1:
            out["decision"] = pa.array(scores)
        else:
            for j, cls in enumerate(final_estimator(model).classes_):
                out[f"decision_{cls}"] = pa.array(scores[:, j])
    return pa.table(out)


def score_file(job: ScoreJob, *, model, n_threads: int | None = None, on_rows=None) -> int:
    """Score one file, streamed; returns the rows written.  ``on_rows(k)`` after each batch.
    An output in an object store is put whole when complete, then its marker."""
    out = job.target
    rows = 0

    def write(tmp):
        nonlocal rows
        writer = None
        try:
            with thread_budget(n_threads):
                for batch in _prefetched(_batches(job)):
                    table = _score_batch(model, job, batch)
                    if writer is None:
                        writer = (
                            pacsv.CSVWriter(tmp, table.schema)
                            if out.suffix == ".csv"
                            else pq.ParquetWriter(
                                tmp,
                                table.schema,
                                compression="zstd",
                                # predictions repeat (a few classes); ids and
                                # decision values rarely do
                                use_dictionary=["prediction"],
                            )
                        )
                    writer.write_table(table)
                    rows += table.num_rows
                    if on_rows is not None:
                        on_rows(table.num_rows)
            if writer is None:
                raise DataError(f"{job.input}: no rows; expected rows to score")
        finally:
            if writer is not None:
                writer.close()

    # in an object store a marker after the object: a rerun trusts only what markers name
    write_whole(out, write, marker=lambda: {"input": job.input, "rows": rows})
    return rows


def _done(job: ScoreJob) -> bool:
    """Whether a rerun skips the job: its output file is there (written whole, renamed), or
    for an object store, a marker names its output object as it is."""
    return job.target.local_path.exists() if job.target.is_local else marked_done(job.target)


def remove_stale_temporaries(jobs: Sequence[ScoreJob]) -> int:
    """Delete temporary files an interrupted run left next to the local outputs (an object
    store's outputs are written locally first: it holds none)."""
    removed = 0
    for folder in {job.target.local_path.parent for job in jobs if job.target.is_local}:
        for stale in folder.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
            removed += 1
    return removed


#: The probe file's name in a local output folder (a dot name: no reader takes it for data).
PROBE_PREFIX = ".elmscale-probe-"


def _seen(probes: list[tuple[str, str, bytes | None, int | None]]) -> list[tuple[str, str]]:
    """(On a worker) ``(kind, path)`` of each probe this process does not see as the client
    does: a ``"folder"`` probe file with other bytes or none, an ``"input"`` file with
    another size or none."""
    unseen = []
    for kind, path, content, size in probes:
        try:
            if kind == "folder":
                with open(path, "rb") as f:
                    ok = f.read() == content
            else:
                ok = os.path.getsize(path) == size
        except OSError:
            ok = False
        if not ok:
            unseen.append((kind, path))
    return unseen


#: Seconds every Ray node has to answer the probe (it runs no model, only file checks).
RAY_PROBE_TIMEOUT = 120.0


def _on_every_ray_node(fn, *args, ray_address: str | None) -> dict[str, list]:
    """``fn(*args)`` once on every live Ray node, a task pinned to each (no CPU held):
    ``{"ray node <ip> (<id>)": result}``.  A node whose task fails or does not answer in
    :data:`RAY_PROBE_TIMEOUT` seconds is an error naming it (its disk is then unknown)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from elmscale.distributed.ray_tasks import connect

    connect(ray_address)
    remote = ray.remote(num_cpus=0, max_retries=0)(fn)
    refs = {}
    for node in ray.nodes():
        if node["Alive"]:
            name = f"ray node {node['NodeManagerAddress']} ({node['NodeID'][:8]})"
            strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            refs[name] = remote.options(scheduling_strategy=strategy).remote(*args)
    if not refs:
        raise DataError("the Ray cluster has no live node; expected nodes to score on")
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=RAY_PROBE_TIMEOUT)
    results = {}
    for name, ref in refs.items():
        if ref not in ready:
            raise DataError(
                f"{name}: did not answer the shared-folder probe within {RAY_PROBE_TIMEOUT:.0f} "
                "s; expected every Ray node to run a task (is it busy or unreachable?)"
            )
        try:
            results[name] = ray.get(ref)
        except ray.exceptions.RayError as exc:
            raise DataError(
                f"{name}: the shared-folder probe failed there ({type(exc).__name__}); expected "
                "every Ray node to run a task"
            ) from exc
    return results


def check_workers_see(client, jobs: Sequence[ScoreJob], *, ray_address: str | None = None) -> None:
    """Check that every worker of the Dask ``client`` (``client`` None: every node of the
    Ray cluster at ``ray_address``) sees the jobs' local output folders and local inputs
    as this process does, before anything is written: a probe file of random bytes
    written in each output folder (made if missing) must be there with the same bytes,
    each input with the same size, on every worker (``client.run``; on Ray, one task
    pinned to each live node, which is where its workers write).  The
    probes and the folders made for them are removed after, on error too.  Otherwise a
    :class:`DataError` names the folder or file and the worker: without a shared file
    system the workers would write the outputs onto their own disks (and the lock and the
    rerun's check, taken here, would not see them).  Object-store URLs need no probe."""
    inputs = {job.input: job.source for job in jobs if job.source.is_local}
    folders = {str(job.target.parent): job.target.parent for job in jobs if job.target.is_local}
    if not inputs and not folders:
        return
    probes: list[tuple[str, str, bytes | None, int | None]] = [
        ("input", source.path, None, source.local_path.stat().st_size) for source in inputs.values()
    ]
    made: list = []
    written: list = []
    shown = {source.path: str(source) for source in inputs.values()}
    try:
        for name in sorted(folders):
            folder = folders[name].local_path
            missing = [p for p in (folder, *folder.parents) if not p.exists()]
            folder.mkdir(parents=True, exist_ok=True)
            made += missing  # the deepest first
            content = uuid.uuid4().hex.encode()
            probe = folder / f"{PROBE_PREFIX}{content.decode()}"
            probe.write_bytes(content)
            written.append(probe)
            path = folders[name].child(probe.name).path
            probes.append(("folder", path, content, None))
            shown[path] = str(folders[name])
        if client is not None:
            unseen = client.run(_seen, probes)  # {worker address: what it did not see}
        else:
            unseen = _on_every_ray_node(_seen, probes, ray_address=ray_address)
    finally:
        for probe in written:
            probe.unlink(missing_ok=True)
        for folder in made:
            with suppress(OSError):
                folder.rmdir()
    for address, missed in sorted(unseen.items()):
        who = address if address.startswith("ray node") else f"worker {address}"
        for kind, path in missed:
            if kind == "folder":
                raise DataError(
                    f"{shown[path]}: {who} does not see this output folder "
                    "(a probe file written in it here is not there); the workers would write "
                    "the outputs onto their own disks. Score into a folder on a shared file "
                    "system that every worker mounts at the same path, or into an object "
                    "store's URL (s3://bucket/scores/)"
                )
            raise DataError(
                f"{shown[path]}: {who} does not see this input file (missing there or "
                "of another size); the workers read the inputs from their own disks. Put the "
                "inputs on a shared file system that every worker mounts at the same path, "
                "or in an object store (s3://bucket/data/)"
            )


def _score_task(job, *, model, n_threads=1, on_rows=None):
    return score_file(job, model=model, n_threads=n_threads, on_rows=on_rows)


def score_jobs(
    model, jobs: Sequence[ScoreJob], *, client=None, ray_address=None, progress: bool = False
) -> dict:
    """Run the jobs whose outputs do not exist yet, one per file: here (``client`` and
    ``ray_address`` None), as Dask tasks or as Ray tasks; returns a summary.  Local output
    folders are locked while it runs: a second run into one of them is a ``DataError``
    naming it (rather than two runs writing the same files and removing each other's
    temporary files).  An object store has no lock: one run per output folder, by design
    (each object is put whole, so two runs would only score the same files twice).  With a
    Dask ``client``, every worker must see the local inputs and output folders as this
    process does (:func:`check_workers_see`), checked before anything is written; with
    ``ray_address``, every Ray node."""
    from contextlib import ExitStack

    if client is not None or ray_address is not None:
        check_workers_see(client, jobs, ray_address=ray_address)
    with ExitStack() as locks:
        folders = {str(job.target.parent): job.target.parent for job in jobs}
        for name in sorted(folders):
            locks.enter_context(output_lock(folders[name], "another elmscale score"))
        return _score_jobs(model, jobs, client=client, ray_address=ray_address, progress=progress)


def _score_jobs(model, jobs, *, client, ray_address, progress):
    import time

    from elmscale.distributed.executors import make_executor, progress_bars, report_progress

    todo = [job for job in jobs if not _done(job)]
    remove_stale_temporaries(jobs)
    executor = make_executor(client=client, ray_address=ray_address, side_by_side=False)
    start = time.perf_counter()
    if executor.in_process:
        # one file after another here: the bar counts rows, moving with every batch
        bar = None
        if progress:
            from tqdm.auto import tqdm

            total = sum(job.n_rows or 0 for job in todo) or None
            bar = tqdm(total=total, unit="row", unit_scale=True, desc="scoring")
        try:
            with report_progress(None):  # the rows bar says it all
                counts = executor.map(
                    _score_task,
                    todo,
                    model=model,
                    n_threads=None,
                    on_rows=None if bar is None else bar.update,
                )
        finally:
            if bar is not None:
                bar.close()
    else:
        # a task per file on the cluster: the bar counts files
        with progress_bars(progress):
            counts = executor.map(
                _score_task,
                todo,
                shared={"model": model},
                label="scoring (files)",
                n_threads=1,
                describe=lambda job: f"scoring {job.input}",
            )
    rows = sum(counts)
    seconds = time.perf_counter() - start
    return {
        "files": len(jobs),
        "scored": len(todo),
        "skipped": len(jobs) - len(todo),
        "rows": rows,
        "seconds": round(seconds, 3),
        "rows_per_second": round(rows / seconds, 1) if seconds > 0 else None,
    }
