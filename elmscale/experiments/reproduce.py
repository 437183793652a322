"""``elmscale reproduce PAPER``: a paper's experiments by its own protocol.

:func:`reproduce` reads the protocol's data sets (a missing one is skipped with a line
saying so), runs every piece the output directory's journal lacks on the executor given
(local threads, Ray or Dask) within a memory budget and, for the baselines, a time budget
per piece (:func:`~elmscale.experiments.engine.run_pieces`), writes the raw tables, then
the report beside them (the pieces left out listed with their reasons).
"""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from elmscale.distributed.executors import Executor
from elmscale.experiments.datasets import (
    LoadedSet,
    dataset_from_path,
    load_dataset,
    missing_files,
    piece_split,
)
from elmscale.experiments.engine import (
    JOURNAL,
    Journal,
    collect_tables,
    run_pieces,
    write_tables,
)
from elmscale.experiments.papers import PAPERS
from elmscale.experiments.protocol import DEFAULT_PIECE_TIMEOUT, Piece, Protocol

if TYPE_CHECKING:
    from elmscale.experiments.report import Report

__all__ = [
    "DEFAULT_PIECE_TIMEOUT",
    "ReproduceResult",
    "default_data_dir",
    "load_protocol",
    "reproduce",
]


def _function(target: str) -> Callable:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def load_protocol(paper: str, *, quick: bool = False, trials: int | None = None) -> Protocol:
    """The protocol of ``paper`` (a name of :data:`~elmscale.experiments.papers.PAPERS`)."""
    if paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; expected one of {sorted(PAPERS)}")
    target = PAPERS[paper]
    if target is None:
        raise ValueError(
            f"paper {paper!r}: its model family is not built yet; "
            f"available: {sorted(k for k, v in PAPERS.items() if v)}"
        )
    if trials is not None and int(trials) < 1:
        raise ValueError(f"trials={trials!r}; expected a positive number")
    return _function(target)(quick=quick, trials=trials)


def default_data_dir() -> Path | None:
    """``../shared/data`` beside the working directory (or $ELMSCALE_SHARED/data) when
    present."""
    import os

    root = os.environ.get("ELMSCALE_SHARED")
    candidate = Path(root) / "data" if root else Path.cwd().parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def default_reference_dir(data_dir: Path | None) -> Path | None:
    if data_dir is None:
        return None
    candidate = Path(data_dir).parent / "reference"
    return candidate if candidate.is_dir() else None


@dataclass
class ReproduceResult:
    protocol: Protocol
    out_dir: Path
    n_pieces: int
    skipped: list[str]
    #: None after a dry run
    report: Report | None
    wall_time_s: float


def full_cv_where_small(pieces: list[Piece], loaded: dict[str, LoadedSet]) -> list[Piece]:
    """``pieces`` with the sampled CV (``Evaluation.cv_rows``) dropped where a trial's
    training part is no larger than the sample: those run the paper's protocol exactly,
    under its own key, so a journal of a run without ``--cv-rows`` serves them."""
    sizes: dict[tuple, int] = {}
    out = []
    for piece in pieces:
        evaluation = piece.evaluation
        if piece.kind == "trial" and evaluation.cv_rows is not None:
            trial = piece.trial if evaluation.split == "kfold" else 0  # holdout: one size
            key = (piece.dataset, evaluation, trial)
            if key not in sizes:
                sizes[key] = len(piece_split(loaded[piece.dataset], piece)[1])
            if sizes[key] <= evaluation.cv_rows:
                piece = replace(piece, evaluation=replace(evaluation, cv_rows=None))
        out.append(piece)
    return out


def select_datasets(protocol: Protocol, sets: list[str] | None) -> Protocol:
    """Run on the named sets only; a name that is not the protocol's is a path to a user's
    file.  Every table runs on every set named."""
    if not sets:
        return protocol
    known = {d.name: d for d in protocol.datasets}
    chosen = []
    for s in sets:
        if s in known:
            chosen.append(known[s])
        elif Path(s.split(",")[0]).exists():
            chosen.append(dataset_from_path(s))
        else:
            raise ValueError(
                f"--sets: {s!r} is neither a data set of {protocol.name} "
                f"({', '.join(known)}) nor an existing file"
            )
    return protocol.with_datasets(tuple(chosen))


def reproduce(
    paper: str,
    *,
    out_dir,
    sets: list[str] | None = None,
    trials: int | None = None,
    cv_rows: int | None = None,
    quick: bool = False,
    data_dir=None,
    reference_dir=None,
    executor: Executor | None = None,
    quiet: bool = False,
    command: str | None = None,
    log: Callable[[str], None] | None = None,
    memory_gb: float | None = None,
    piece_timeout: float | None = DEFAULT_PIECE_TIMEOUT,
    timeout_every_piece: bool = False,
    retry_left_out: bool = False,
    dry_run: bool = False,
) -> ReproduceResult:
    """Run ``paper``'s protocol into ``out_dir`` (resuming a run found there); ``cv_rows``:
    each trial's parameter search on at most that many training rows
    (:meth:`~elmscale.experiments.protocol.Protocol.with_cv_rows`).

    ``memory_gb``: the memory the pieces in flight may hold together (default: 80 % of
    the available memory); ``piece_timeout``: seconds a baseline's piece (SVC) may run,
    every piece's with ``timeout_every_piece`` (None: no limit); ``retry_left_out``: run
    again the pieces an earlier run left out (:func:`~elmscale.experiments.engine.
    run_pieces`); ``dry_run``: log the memory plan and stop there (``report`` None)."""
    start = time.perf_counter()
    log = log or (lambda line: print(line, file=sys.stderr))
    protocol = load_protocol(paper, quick=quick, trials=trials).with_cv_rows(cv_rows)
    protocol = select_datasets(protocol, sets)
    data_dir = Path(data_dir) if data_dir is not None else default_data_dir()
    out_dir = Path(out_dir)
    skipped: list[str] = []
    loaded: dict[str, LoadedSet] = {}
    for spec in protocol.datasets:
        missing = missing_files(spec, data_dir)
        if missing:
            line = f"{spec.name}: skipped, no file {missing[0]}"
            skipped.append(line)
            log(f"elmscale reproduce: {line}")
            continue
        loaded[spec.name] = load_dataset(spec, data_dir)
    pieces = full_cv_where_small([p for p in protocol.pieces() if p.dataset in loaded], loaded)
    if not pieces:
        raise FileNotFoundError(
            f"{paper}: none of its data sets was found under {data_dir} "
            "(give --data-dir, or --sets with your own files)"
        )
    if (out_dir / JOURNAL).exists():
        journaled = Journal(out_dir).read()
        finished = {p.key for p in pieces} & set(journaled)
        left = sorted(k for k in finished if journaled[k].status != "done")
        if retry_left_out:
            finished -= set(left)
        log(
            f"elmscale reproduce: resuming in {out_dir}: "
            f"{len(finished)} of {len(pieces)} pieces already done"
            + (
                f" ({len(left)} of them left out: time budget hit or killed; "
                "--retry-left-out runs them again)"
                if left and not retry_left_out
                else ""
            )
            + (f"; {len(left)} left out earlier run again" if left and retry_left_out else "")
        )
    bar = None
    if not quiet and not dry_run:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(pieces), desc=f"reproduce {paper}", unit="piece")

    def progress(done: int, total: int) -> None:
        if bar is not None:
            bar.update(done - bar.n)

    try:
        results = run_pieces(
            pieces,
            loaded,
            out_dir,
            executor=executor,
            on_progress=progress,
            memory_budget=None if memory_gb is None else float(memory_gb) * 2**30,
            piece_timeout=piece_timeout,
            timeout_every_piece=timeout_every_piece,
            retry_left_out=retry_left_out,
            log=lambda line: log(f"elmscale reproduce: {line}"),
            dry_run=dry_run,
        )
    finally:
        if bar is not None:
            bar.close()
    if dry_run:
        wall = time.perf_counter() - start
        return ReproduceResult(protocol, out_dir, len(pieces), skipped, None, wall)
    tables = collect_tables(results)
    write_tables(tables, out_dir)
    reference_dir = (
        Path(reference_dir) if reference_dir is not None else default_reference_dir(data_dir)
    )
    paper_frame = None
    if protocol.reference and reference_dir is not None:
        paper_frame = _function(protocol.reference)(reference_dir)
    # the report (matplotlib, statistics) loads only when there is one to write
    from elmscale.experiments.report import build_report, summarise

    summary = summarise(tables)
    claims = None
    if protocol.claims and not summary.empty:
        claims = _function(protocol.claims)(
            summary, tables.results, tables.timings, reference_dir=reference_dir
        )
    wall = time.perf_counter() - start
    report = build_report(
        protocol,
        tables,
        summary,
        out_dir,
        paper=paper_frame,
        claims=claims,
        command=command or f"elmscale reproduce {paper}",
        wall_time_s=wall,
        skipped=skipped,
        piece_time_s=sum(r.seconds for r in results.values()),
        n_pieces=len(results),
        left_out=[(r.key, r.left_out) for r in results.values() if r.status != "done"],
    )
    return ReproduceResult(protocol, out_dir, len(pieces), skipped, report, wall)
