"""The engine: run a protocol's pieces on an executor, keeping each result as it comes.

Results go to a journal, ``pieces.jsonl`` in the output directory: one JSON line per
finished piece, written and flushed as the piece finishes.  A run that is interrupted
(killed, a machine lost) leaves every finished piece there; the next run with the same
output directory reads the journal and runs only the pieces it lacks.  A line cut short
by a kill is dropped (and its piece run again); any other line that cannot be read stops the
run with an error naming it, and the journal is kept whole.

Once every piece is in, the raw tables are written from the journal, sorted by piece, so
they do not depend on the order the pieces finished in: ``results.csv`` (one row per
trial: accuracies, chosen parameters, support vectors), ``timings.csv`` (the times,
apart, because they differ from run to run), ``curves.csv`` and ``grids.csv`` (the
figures' points) and ``results.parquet`` (results and timings joined).

Scheduling.  Before a piece starts its memory is estimated
(:mod:`elmscale.experiments.memory`) and the run keeps the pieces in flight within a
memory budget (by default 80 % of the machine's available memory): a piece waits while
those running would exceed it with it, and a piece larger than the whole budget is
refused before it starts (the report lists it as left out, with its estimate).  Locally
the engine places the pieces itself: up to the executor's threads at once, in the
protocol's order, a later piece starting first when it fits and the next does not.  On
Ray or Dask every piece is submitted and admitted on the machine it reaches
(:class:`~elmscale.experiments.isolation.HostLedger`; its folder removed from every
machine at the end).  Each piece runs in a child
process (:func:`~elmscale.experiments.isolation.run_bounded`): a baseline's piece
(scikit-learn's SVC) is stopped at its time budget and journaled as left out
(``status="timeout"``, no rows); a resumed run does not retry it unless asked
(``retry_left_out``).  The plan (estimates, budget, pieces at once, refusals) is logged
before the run.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from elmscale.core.errors import DataError, PieceFailed
from elmscale.core.files import atomic_write
from elmscale.core.threads import blas_limits, resolve_n_threads
from elmscale.distributed.executors import Executor
from elmscale.experiments.datasets import LoadedSet
from elmscale.experiments.isolation import (
    HostLedger,
    Stopper,
    WorkerPool,
    left_out_result,
    piece_time_limit,
    run_admitted,
    run_bounded,
)
from elmscale.experiments.memory import (
    DEFAULT_MEMORY_FRACTION,
    MemoryPlan,
    available_memory,
    estimate_piece,
    format_bytes,
)
from elmscale.experiments.pieces import PieceResult
from elmscale.experiments.protocol import Piece, piece_key

__all__ = [
    "Journal",
    "RunTables",
    "collect_tables",
    "run_pieces",
    "trial_keys",
    "write_tables",
]

MB = 2**20
#: journaled statuses of pieces that ran but gave no rows (not retried unless asked)
LEFT_OUT = ("timeout", "killed")

JOURNAL = "pieces.jsonl"


class Journal:
    """The append-only record of finished pieces in ``directory``."""

    def __init__(self, directory: Path):
        self.path = Path(directory) / JOURNAL

    def read(self) -> dict[str, PieceResult]:
        """The finished pieces by key.  A torn last line (a kill mid-write: no newline at
        its end) is dropped and the file cut back to its last whole line; any other line
        that is not a piece's record (a damaged file, a record of another version) raises
        a ``DataError`` naming it, the file left as it is: its other pieces are results."""
        if not self.path.exists():
            return {}
        done: dict[str, PieceResult] = {}
        good_bytes = 0
        with open(self.path, "rb") as fh:
            lines = fh.readlines()
        for number, line in enumerate(lines, start=1):
            if not line.endswith(b"\n"):  # only the last line can lack it: torn
                break
            try:
                record = json.loads(line)
                result = PieceResult(
                    record["key"],
                    record["kind"],
                    record["rows"],
                    record["timings"],
                    float(record.get("seconds", 0.0)),
                    str(record.get("status", "done")),
                    str(record.get("left_out", "")),
                    float(record.get("peak_mb", 0.0)),
                    float(record.get("estimate_mb", 0.0)),
                    float(record.get("started_at", 0.0)),
                )
            except (ValueError, KeyError, TypeError) as exc:
                raise DataError(
                    f"{self.path}: line {number} of {len(lines)} is not a finished piece's "
                    f"record ({type(exc).__name__}: {exc}); the journal is left as it is: "
                    "mend or remove that line, or use another output folder"
                ) from None
            done[result.key] = result
            good_bytes += len(line)
        if good_bytes != self.path.stat().st_size:
            with open(self.path, "r+b") as fh:
                fh.truncate(good_bytes)
        return done

    def append(self, result: PieceResult) -> None:
        line = json.dumps(result._asdict(), separators=(",", ":")) + "\n"
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())


def run_pieces(
    pieces: list[Piece],
    datasets: dict[str, LoadedSet],
    out_dir: Path,
    *,
    executor: Executor | None = None,
    on_progress: Callable[[int, int], None] | None = None,
    memory_budget: float | None = None,
    memory_fraction: float = DEFAULT_MEMORY_FRACTION,
    piece_timeout: float | None = None,
    timeout_every_piece: bool = False,
    retry_left_out: bool = False,
    isolate: bool = True,
    log: Callable[[str], None] | None = None,
    dry_run: bool = False,
) -> dict[str, PieceResult]:
    """Run the pieces the journal in ``out_dir`` lacks; return every piece's result
    (a piece left out: no rows, its ``status`` and ``left_out`` reason).

    ``memory_budget``: bytes the pieces in flight may hold together (None:
    ``memory_fraction`` of the machine's available memory; on Ray / Dask, of each worker
    machine's).  ``piece_timeout``: seconds a baseline's piece may run (every piece's with
    ``timeout_every_piece``; None: no limit).  ``retry_left_out``: run again the pieces
    the journal holds as left out (time budget hit, killed).  ``isolate=False`` runs the
    pieces in this process's threads (no time budget then).  ``log`` gets the memory plan,
    line by line.  ``on_progress(done, total)`` is called at the start and after each
    piece.  ``dry_run``: log the plan and return the pieces already done, running
    nothing and writing nothing.
    """
    out_dir = Path(out_dir)
    if not dry_run:
        out_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(out_dir)
    done = journal.read()
    if retry_left_out:
        done = {k: r for k, r in done.items() if r.status not in LEFT_OUT}
    wanted = {p.key for p in pieces}
    todo = [p for p in pieces if p.key not in done]
    if len({p.key for p in pieces}) != len(pieces):
        raise ValueError("the protocol names two pieces alike; every piece key must differ")
    n_done = len(wanted & set(done))
    if on_progress:
        on_progress(n_done, len(pieces))
    if todo:
        local = executor is None or executor.in_process
        estimates = {p.key: estimate_piece(p, datasets[p.dataset]).total for p in todo}
        available = available_memory()
        budget = memory_budget
        if budget is None and available is not None:
            budget = available * memory_fraction
        slots = _local_slots(executor) if local else None
        timed = {p.key: piece_time_limit(p, piece_timeout, timeout_every_piece) for p in todo}
        if not isolate and any(t is not None for t in timed.values()):
            raise ValueError("a time budget needs the pieces in child processes (isolate=True)")
        # where the budget is each worker machine's own, those machines refuse
        refuse_here = budget is not None and (local or memory_budget is not None)
        plan = MemoryPlan.make(
            todo,
            estimates,
            budget=budget,
            available=available,
            fraction=None if memory_budget is not None else memory_fraction,
            slots=slots,
            refuse=refuse_here,
            time_limits=timed,
            where="this machine" if local else "each worker machine",
        )
        if log:
            for line in plan.lines():
                log(line)
        if dry_run:
            return {key: done[key] for key in (p.key for p in pieces) if key in done}
        refused = set(plan.refused)
        for piece in todo:
            if piece.key in refused:
                reason = (
                    f"memory estimate {format_bytes(estimates[piece.key])} exceeds the "
                    f"budget {format_bytes(budget)}"
                )
                done[piece.key] = left_out_result(
                    piece, "memory", reason, estimate_mb=round(estimates[piece.key] / MB, 1)
                )
                n_done += 1
        if refused and on_progress:
            on_progress(n_done, len(pieces))
        runnable = [p for p in todo if p.key not in refused]
        preload = tuple(sorted({p.method.estimator.partition(":")[0] for p in runnable}))
        if not runnable:
            finished = iter(())
        elif local:
            finished = _run_here(
                runnable, datasets, estimates, budget, slots, timed, isolate, preload
            )
        else:
            finished = _run_on(
                executor,
                runnable,
                datasets,
                budget=memory_budget,
                home_budget=budget,
                fraction=memory_fraction,
                timeout=piece_timeout,
                timeout_every_piece=timeout_every_piece,
                isolate=isolate,
                preload=preload,
            )
        for result in finished:
            if result.status != "memory":  # a later run with more memory runs it
                journal.append(result)
            done[result.key] = result
            n_done += 1
            if on_progress:
                on_progress(n_done, len(pieces))
    return {key: done[key] for key in (p.key for p in pieces)}


def _local_slots(executor: Executor | None) -> int:
    """Pieces side by side here: the local executor's threads (all cores by default), one
    with ``side_by_side=False``."""
    if executor is not None and not getattr(executor, "side_by_side", True):
        return 1
    return resolve_n_threads(getattr(executor, "n_threads", None))


def _run_here(pieces, datasets, estimates, budget, slots, time_limits, isolate, preload):
    """Run ``pieces`` on ``slots`` threads, each waiting on its piece's worker process
    (kept for the next piece, closed at the end), keeping the estimates in flight within
    ``budget``; yields each result as it comes.  A piece's failure stops the others
    (their processes killed) and is raised."""
    pending = list(pieces)
    running: dict = {}
    used = 0
    stopper = Stopper()
    workers = WorkerPool(preload)
    quiet_blas = contextlib.nullcontext() if isolate else blas_limits(1)
    with (
        contextlib.closing(workers),
        quiet_blas,
        ThreadPoolExecutor(slots, thread_name_prefix="elmscale-piece") as pool,
    ):
        try:
            while pending or running:
                index = 0
                while len(running) < slots and index < len(pending):
                    piece = pending[index]
                    need = estimates[piece.key]
                    if budget is not None and running and used + need > budget:
                        index += 1  # waits; a later piece that fits goes first
                        continue
                    pending.pop(index)
                    future = pool.submit(
                        run_bounded,
                        piece,
                        data=datasets[piece.dataset],
                        time_limit=time_limits[piece.key],
                        isolate=isolate,
                        stopper=stopper,
                        pool=workers,
                        estimate_mb=round(need / MB, 1),
                    )
                    running[future] = piece
                    used += need
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in finished:
                    piece = running.pop(future)
                    used -= estimates[piece.key]
                    try:
                        result = future.result()
                    except Exception as exc:
                        raise PieceFailed(
                            f"{piece.describe()} failed: {type(exc).__name__}: {exc}"
                        ) from exc
                    yield result
        except BaseException:
            stopper.stop()
            for future in running:
                future.cancel()
            raise


def _run_on(executor, pieces, datasets, *, budget, home_budget, fraction, **kwargs):
    """Submit every piece to a Ray or Dask ``executor``; each is admitted by memory on the
    machine that runs it (:class:`HostLedger`) and runs in a child process there."""
    ledger = HostLedger.new(budget, home_budget, fraction)
    needed = {p.dataset for p in pieces}
    # the data sets a piece needs travel once (Ray: the object store; Dask: scattered)
    shared = {"datasets": {name: datasets[name] for name in needed}}
    try:
        for _, result in executor.as_completed(
            run_admitted,
            pieces,
            shared=shared,
            describe=Piece.describe,
            ledger=ledger,
            **kwargs,
        ):
            yield result
    finally:
        # the ledgers and pieces' files of every machine (a killed worker leaves its own)
        try:
            executor.on_every_machine(ledger.remove)
        except Exception:  # the cluster unreachable: this machine's, at least
            ledger.remove()


@dataclass
class RunTables:
    """The raw tables of a run."""

    results: pd.DataFrame
    timings: pd.DataFrame
    curves: pd.DataFrame
    grids: pd.DataFrame


def _frame(results, kind: str, sort: list[str]) -> pd.DataFrame:
    rows = [row for r in results if r.kind == kind for row in r.rows]
    frame = pd.DataFrame(rows)
    if frame.empty:
        return frame
    return frame.sort_values(sort, kind="stable").reset_index(drop=True)


def collect_tables(results: dict[str, PieceResult]) -> RunTables:
    values = list(results.values())
    trials = _frame(values, "trial", ["table", "dataset", "method", "trial"])
    timings = pd.DataFrame([t for r in values for t in r.timings])
    if not timings.empty:
        timings = timings.sort_values("key", kind="stable").reset_index(drop=True)
    curves = _frame(values, "curve", ["figure", "dataset", "n_hidden", "C", "trial"])
    grids = _frame(values, "grid", ["figure", "dataset", "method", "value", "C", "trial"])
    return RunTables(trials, timings, curves, grids)


def trial_keys(results: pd.DataFrame) -> list[str]:
    """The piece key of each row of ``results`` (joins it to ``timings``)."""
    cv_rows = results["cv_rows"] if "cv_rows" in results else [None] * len(results)
    return [
        piece_key("trial", t, d, m, p, k, cv_rows=None if pd.isna(n) else n)
        for t, d, m, p, k, n in zip(
            results["table"],
            results["dataset"],
            results["method"],
            results["mapping"],
            results["trial"],
            cv_rows,
        )
    ]


def write_tables(tables: RunTables, out_dir: Path) -> list[Path]:
    """Write the raw tables (each atomically); return the paths written."""
    out_dir = Path(out_dir)
    written = []
    for name, frame in (
        ("results.csv", tables.results),
        ("timings.csv", tables.timings),
        ("curves.csv", tables.curves),
        ("grids.csv", tables.grids),
    ):
        if frame.empty:
            continue
        written.append(
            atomic_write(out_dir / name, lambda tmp, f=frame: f.to_csv(tmp, index=False))
        )
    if not tables.results.empty:
        joined = tables.results.assign(key=trial_keys(tables.results)).merge(
            tables.timings, on="key", how="left"
        )
        written.append(
            atomic_write(
                out_dir / "results.parquet", lambda tmp: joined.to_parquet(tmp, index=False)
            )
        )
    return written
