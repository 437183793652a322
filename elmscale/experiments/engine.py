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
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from elmscale.core.errors import DataError
from elmscale.core.files import atomic_write
from elmscale.distributed.executors import Executor, LocalExecutor
from elmscale.experiments.datasets import LoadedSet
from elmscale.experiments.pieces import PieceResult, run_piece
from elmscale.experiments.protocol import Piece, piece_key

__all__ = ["Journal", "RunTables", "collect_tables", "run_pieces", "trial_keys", "write_tables"]

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
) -> dict[str, PieceResult]:
    """Run the pieces the journal in ``out_dir`` lacks; return every piece's result.

    ``on_progress(done, total)`` is called at the start and after each piece.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    journal = Journal(out_dir)
    done = journal.read()
    wanted = {p.key for p in pieces}
    todo = [p for p in pieces if p.key not in done]
    if len({p.key for p in pieces}) != len(pieces):
        raise ValueError("the protocol names two pieces alike; every piece key must differ")
    n_done = len(wanted & set(done))
    if on_progress:
        on_progress(n_done, len(pieces))
    if todo:
        executor = executor or LocalExecutor()
        # the data sets a piece needs travel once (Ray: the object store; Dask: scattered)
        needed = {p.dataset for p in todo}
        shared = {"datasets": {name: datasets[name] for name in needed}}
        for _, result in executor.as_completed(
            run_piece, todo, shared=shared, describe=Piece.describe
        ):
            journal.append(result)
            done[result.key] = result
            n_done += 1
            if on_progress:
                on_progress(n_done, len(pieces))
    return {key: done[key] for key in (p.key for p in pieces)}


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
