"""`elmscale reproduce` schedules by memory and time: each piece's memory estimate (pure,
monotone, n^2 for kernel pieces, above the measured peak), admission (a piece larger than
the budget refused without running; two that do not fit together never overlap), the
baselines' time budget (a piece stopped, journaled and reported as left out, not retried
unless asked), on this machine and on Dask, and the plan printed before the run.

Every piece here is a real one (the library's estimators, scikit-learn's SVC) on generated
data, run in the engine's worker processes; nothing reads ../shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from elmscale.app.cli import main
from elmscale.distributed.executors import DaskExecutor, LocalExecutor
from elmscale.experiments.datasets import dataset_from_path, load_dataset
from elmscale.experiments.engine import Journal, run_pieces
from elmscale.experiments.isolation import HostLedger, WorkerPool, run_bounded
from elmscale.experiments.memory import (
    MB,
    PieceShape,
    estimate_memory,
    estimate_piece,
    piece_shape,
)
from elmscale.experiments.protocol import DataSet, Method, Piece
from elmscale.experiments.reproduce import load_protocol

SVC = Method(
    "SVM",
    "gaussian",
    "elmscale.experiments.pieces:PaperSVC",
    (("kernel", "gaussian"),),
    (("C", (1.0, 10.0)), ("sigma", (0.5, 2.0))),
)
#: an SVC search slow enough to outlast a short time budget (many C, sigma pairs)
SLOW_SVC = replace(
    SVC,
    grid=(("C", (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)), ("sigma", (0.1, 0.3, 1.0, 3.0, 10.0))),
)
KERNEL_ELM = Method(
    "unified_elm",
    "gaussian",
    "elmscale.models.elm:ELMClassifier",
    (("kernel", "gaussian"),),
    (("C", (1.0, 10.0)), ("sigma", (1.0, 2.0))),
    c_path=True,
)
SPARSE_ELM = Method(
    "sparse_elm",
    "gaussian",
    "elmscale.models.sparse_elm:SparseELMClassifier",
    (("kernel", "gaussian"),),
    (("C", (1.0, 10.0)), ("sigma", (1.0,))),
    c_path=True,
)


def _generated(n_rows: int, name: str | None = None):
    spec = DataSet(
        name or f"generated{n_rows}",
        (),
        source="sklearn.datasets:make_classification",
        source_kw=(("n_samples", n_rows), ("n_features", 8), ("random_state", 0)),
    )
    return load_dataset(spec, None)


def _piece(method: Method, data, trial: int = 0, folds: int = 5) -> Piece:
    return Piece("trial", data.spec.name, method, trial, trial, folds, "T")


def _shape(n: int, d: int = 10, classes: int = 2) -> PieceShape:
    return PieceShape(2 * n, n, n, d, classes, n, n - n // 5)


# -- the estimate ---------------------------------------------------------------------


def _every_paper_method():
    for paper in ("sparse-elm", "flsa-svm", "felm", "boosting-ridge"):
        for quick in (True, False):
            protocol = load_protocol(paper, quick=quick)
            for table in protocol.tables:
                for method in table.methods:
                    yield Piece("trial", "set", method, 0, 0, table.folds, table.name)
            for figure in (*protocol.curves, *protocol.grids):
                kind = "curve" if hasattr(figure, "n_hidden") else "grid"
                point = (figure.n_hidden[-1], figure.Cs) if kind == "curve" else ()
                yield Piece(kind, "set", figure.method, 0, 0, 5, figure.name, point)


def test_every_papers_estimate_is_monotone_in_the_data():
    pieces = list(_every_paper_method())
    assert len(pieces) > 30
    for piece in pieces:
        sizes = [estimate_memory(piece, _shape(n)).total for n in (100, 1000, 10_000, 40_000)]
        assert sizes == sorted(sizes), piece.key
        wider = estimate_memory(piece, _shape(1000, d=100)).total
        assert wider >= sizes[1], piece.key
        assert estimate_memory(piece, _shape(1000, classes=5)).total >= sizes[1], piece.key


def test_a_kernel_pieces_estimate_grows_as_n_squared_times_8_bytes():
    piece = Piece("trial", "set", KERNEL_ELM, 0, 0, 5, "T")
    small = estimate_memory(piece, _shape(10_000)).terms["kernel matrices"]
    large = estimate_memory(piece, _shape(20_000)).terms["kernel matrices"]
    assert large / small == pytest.approx(4.0, rel=1e-3)
    # the final fit on every training row holds K, I/C + K and LAPACK's copy (3 n^2 x 8,
    # and half an n^2 for scoring); the CV's C path at 8,000 rows 4.5 x 8,000^2 x 8 less
    assert small >= 3 * 10_000**2 * 8
    assert small == pytest.approx(3.5 * 10_000**2 * 8, rel=0.01)
    # COD-RNA's unified kernel ELM (29,768 training rows): 23 GB, above the whole budget
    # of a 24 GB machine (80 % of its memory), refused there instead of started to die
    cod_rna = estimate_memory(piece, PieceShape(59_535, 29_768, 29_767, 8, 2, 29_768, 23_816))
    assert cod_rna.total > 0.8 * 24 * 2**30


def test_the_shape_comes_from_the_set_without_splitting_it():
    data = _generated(600)
    piece = _piece(SVC, data)
    shape = piece_shape(piece, data)
    assert (shape.n_rows, shape.n_train, shape.n_test, shape.n_features) == (600, 300, 300, 8)
    assert (shape.n_cv, shape.n_fold) == (300, 300 - 60 + 2)
    assert estimate_piece(piece, data).total == estimate_memory(piece, shape).total


@pytest.mark.timeout(240)
def test_the_estimates_cover_the_measured_peaks():
    """Each piece in a worker of its own (a fresh heap): its measured peak (resident
    memory above the worker's start) is below the estimate; the kernel piece's n^2 terms
    are within 2.5x of it."""
    big = _generated(5000, "big")
    small = _generated(800, "small")
    cases = [
        (_piece(KERNEL_ELM, big, folds=2), big),
        (_piece(SVC, small), small),
        (_piece(SPARSE_ELM, small), small),
    ]
    for piece, data in cases:
        estimate = estimate_piece(piece, data)
        pool = WorkerPool((piece.method.estimator.partition(":")[0],))
        try:
            result = run_bounded(piece, data=data, pool=pool)
        finally:
            pool.close()
        assert result.status == "done" and result.peak_mb > 0, piece.key
        assert result.peak_mb * MB < estimate.total, (piece.key, result.peak_mb, estimate)
        if piece.method is KERNEL_ELM:
            kernel = estimate.terms["kernel matrices"]
            assert result.peak_mb * MB > kernel / 2.5, (result.peak_mb, estimate)


# -- admission ------------------------------------------------------------------------


def test_a_piece_larger_than_the_budget_is_refused_before_it_starts(tmp_path):
    data = _generated(2000, "set")
    small, large = _piece(SVC, data), _piece(KERNEL_ELM, data)
    sizes = {p.key: estimate_piece(p, data).total for p in (small, large)}
    assert sizes[large.key] > sizes[small.key]
    budget = (sizes[small.key] + sizes[large.key]) / 2
    lines: list[str] = []
    results = run_pieces(
        [small, large],
        {"set": data},
        tmp_path,
        executor=LocalExecutor(2),
        memory_budget=budget,
        log=lines.append,
    )
    refused = results[large.key]
    assert refused.status == "memory" and refused.rows == [] and refused.seconds == 0
    assert refused.left_out == (
        f"memory estimate {sizes[large.key] / 2**20:.0f} MB exceeds the budget "
        f"{budget / 2**20:.0f} MB"
    )
    assert results[small.key].status == "done" and results[small.key].rows
    # not journaled: a later run with more memory runs it
    assert set(Journal(tmp_path).read()) == {small.key}
    plan = "\n".join(lines)
    assert f"budget {budget / 2**20:.0f} MB on this machine (--memory-gb)" in plan
    assert "set unified_elm (gaussian)" in plan and "refused: larger than the budget" in plan
    assert "refused before starting: 1 piece larger than the budget" in plan


def _intervals(results):
    spans = sorted((r.started_at, r.started_at + r.seconds) for r in results.values())
    assert all(start > 0 for start, _ in spans)
    return spans


@pytest.mark.timeout(240)
def test_pieces_that_do_not_fit_together_never_overlap(tmp_path):
    data = _generated(2400, "set")
    pieces = [_piece(KERNEL_ELM, data, trial=t) for t in range(3)]
    largest = max(estimate_piece(p, data).total for p in pieces)
    lines: list[str] = []
    one_at_a_time = run_pieces(
        pieces,
        {"set": data},
        tmp_path / "tight",
        executor=LocalExecutor(2),
        memory_budget=1.5 * largest,  # room for one
        log=lines.append,
    )
    spans = _intervals(one_at_a_time)
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert start >= end - 0.01, spans
    assert "1 at once" in "\n".join(lines)
    side_by_side = run_pieces(
        pieces,
        {"set": data},
        tmp_path / "roomy",
        executor=LocalExecutor(2),
        memory_budget=3.5 * largest,
    )
    spans = _intervals(side_by_side)
    assert spans[1][0] < spans[0][1], "two slots and room for both: they overlap"
    rows = [r.rows[0]["test_accuracy"] for r in one_at_a_time.values()]
    assert rows == [r.rows[0]["test_accuracy"] for r in side_by_side.values()]


def test_the_host_ledger_holds_a_piece_back_until_it_fits(tmp_path):
    ledger = HostLedger("test-" + os.urandom(4).hex(), budget=100, poll_s=0.02)
    try:
        events = []

        def second():
            with ledger.reserve("b", 60) as refused:
                assert refused is None
                events.append(("b starts", time.monotonic()))

        with ledger.reserve("a", 60) as refused:
            assert refused is None
            thread = threading.Thread(target=second)
            thread.start()
            time.sleep(0.3)
            events.append(("a ends", time.monotonic()))
        thread.join(timeout=10)
        assert [e for e, _ in events] == ["a ends", "b starts"]
        with ledger.reserve("c", 101) as refused:
            assert refused.startswith("memory estimate 0 MB exceeds the budget 0 MB on ")
        # a reservation of a process that died is dropped
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        state = {"budget": 100, "entries": {"x": {"pid": int(dead.stdout), "bytes": 90}}}
        ledger.path.write_text(json.dumps(state))
        with ledger.reserve("d", 60) as refused:
            assert refused is None
    finally:
        ledger.remove()


# -- the piece pool ----------------------------------------------------------------------


def _csv_set(folder, random_state: int):
    """``folder/train.csv`` of generated rows, loaded as the command loads a user's file
    (the set is named by the file's stem: "train")."""
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=600, n_features=8, random_state=random_state)
    folder.mkdir()
    path = folder / "train.csv"
    pd.DataFrame(np.column_stack([X, y])).to_csv(path, header=False, index=False)
    return load_dataset(dataset_from_path(str(path)), None)


@pytest.mark.timeout(120)
def test_a_pooled_worker_runs_each_piece_on_its_own_rows_not_a_namesakes(tmp_path):
    """A pool outlives a run on Ray or Dask: /a/train.csv, then /b/train.csv, in one pool;
    the second piece runs on /b's rows (the result a fresh pool gives)."""
    first, second = _csv_set(tmp_path / "a", 0), _csv_set(tmp_path / "b", 1)
    assert first.spec.name == second.spec.name == "train"
    piece = _piece(KERNEL_ELM, first)
    pool, fresh = WorkerPool(), WorkerPool()
    try:
        on_first = run_bounded(piece, data=first, pool=pool)
        on_second = run_bounded(piece, data=second, pool=pool)
        alone = run_bounded(piece, data=second, pool=fresh)
    finally:
        pool.close()
        fresh.close()
    assert on_second.rows == alone.rows
    assert on_second.rows != on_first.rows


class Cancelled(Exception):
    """What a cancelled Ray task raises in its thread."""


def _raise_in(thread: threading.Thread, exc_type) -> None:
    """Raise ``exc_type`` in ``thread`` at its next Python instruction (as ``ray.cancel``
    interrupts a running task)."""
    import ctypes

    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread.ident), ctypes.py_object(exc_type)
    )


@pytest.mark.timeout(120)
def test_a_worker_whose_piece_was_interrupted_is_not_pooled(tmp_path):
    """A piece interrupted by an exception here while its worker runs it: that worker is
    killed, not kept, so the next piece gets its own reply, not the interrupted one's."""
    data = _generated(3000, "set")
    slow, fast = _piece(SLOW_SVC, data), _piece(SPARSE_ELM, data)
    pool = WorkerPool()
    outcome: dict = {}

    def interrupted():
        try:
            run_bounded(slow, data=data, pool=pool)
        except Cancelled:
            outcome["cancelled"] = True

    try:
        assert run_bounded(fast, data=data, pool=pool).key == fast.key  # a warm worker
        worker = pool.acquire()  # the warm one, given back: the slow piece gets it
        pool.release(worker)
        thread = threading.Thread(target=interrupted)
        thread.start()
        time.sleep(1.0)  # the slow piece is running in the worker
        _raise_in(thread, Cancelled)
        thread.join(timeout=30)
        assert outcome == {"cancelled": True}
        worker.process.join(timeout=10)
        assert not worker.alive
        again = run_bounded(replace(fast, trial=1, seed=1), data=data, pool=pool)
        assert again.key == replace(fast, trial=1, seed=1).key and again.status == "done"
    finally:
        pool.close()


class Killed(Exception):
    """A process killed while it writes."""


def test_a_ledger_write_cut_short_leaves_the_previous_ledger(monkeypatch):
    ledger = HostLedger("test-" + os.urandom(4).hex(), budget=100, poll_s=0.02)
    try:
        with ledger.reserve("a", 60) as refused:
            assert refused is None
        written = Path.write_text

        def cut_short(path, text, *args, **kwargs):
            written(path, text[: len(text) // 2], *args, **kwargs)
            raise Killed

        with monkeypatch.context() as patched:
            patched.setattr(Path, "write_text", cut_short)
            with pytest.raises(Killed), ledger.reserve("b", 60):
                pass
        assert json.loads(ledger.path.read_text()) == {"budget": 100, "entries": {}}
        with ledger.reserve("c", 60) as refused:
            assert refused is None
    finally:
        ledger.remove()


def _run_files(folder: Path, run_id: str) -> list[str]:
    return sorted(str(p) for p in Path(folder).iterdir() if run_id in p.name)


@pytest.mark.timeout(300)
def test_on_dask_the_run_leaves_no_ledger_on_any_worker(tmp_path, dask_client, monkeypatch):
    """The workers' ledgers are removed at the end, not only the engine's (here the
    engine's temporary folder is another, as on another machine)."""
    import tempfile

    from elmscale.experiments import isolation

    made: list[HostLedger] = []
    new = HostLedger.new.__func__

    def recorded(cls, *args):
        made.append(new(cls, *args))
        return made[-1]

    monkeypatch.setattr(isolation.HostLedger, "new", classmethod(recorded))
    (tmp_path / "engine-tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "engine-tmp"))
    data = _generated(600, "set")
    results = run_pieces(
        [_piece(SPARSE_ELM, data)],
        {"set": data},
        tmp_path / "run",
        executor=DaskExecutor(dask_client),
    )
    assert [r.status for r in results.values()] == ["done"]
    (ledger,) = made
    left = dask_client.run(lambda: _run_files(tempfile.gettempdir(), ledger.run_id))
    assert left and all(files == [] for files in left.values()), left
    assert _run_files(tmp_path / "engine-tmp", ledger.run_id) == []


KILLED_MID_PIECE = """
import multiprocessing, sys
from dataclasses import replace
from pathlib import Path
from elmscale.experiments.datasets import load_dataset
from elmscale.experiments.isolation import HostLedger, run_admitted
from elmscale.experiments.protocol import DataSet, Method, Piece

multiprocessing.current_process().daemon = True  # as a Dask worker's: no forkserver
slow = Method("SVM", "gaussian", "elmscale.experiments.pieces:PaperSVC",
              (("kernel", "gaussian"),),
              (("C", (0.01, 0.1, 1.0, 10.0, 100.0, 1000.0)), ("sigma", (0.1, 0.3, 1.0, 3.0))))
spec = DataSet("set", (), source="sklearn.datasets:make_classification",
               source_kw=(("n_samples", 3000), ("n_features", 8), ("random_state", 0)))
run_admitted(Piece("trial", "set", slow, 0, 0, 5, "T"), datasets={"set": load_dataset(spec, None)},
             ledger=HostLedger(sys.argv[1], budget=2**40))
"""


@pytest.mark.timeout(180)
def test_a_piece_killed_with_its_worker_leaves_no_file_once_the_run_is_removed(
    tmp_path, monkeypatch
):
    """A Dask nanny kills its worker mid-piece: the piece's pickled data set, in the
    run's folder, goes with that folder."""
    import signal
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    run_id = "test-" + os.urandom(4).hex()
    worker = subprocess.Popen(
        [sys.executable, "-c", KILLED_MID_PIECE, run_id],
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    try:
        deadline = time.monotonic() + 120
        while not list(scratch.rglob("*.started")):  # the piece is running
            assert worker.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=60)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    HostLedger(run_id).remove()
    deadline = time.monotonic() + 30  # the piece's interpreter dies with its parent
    while list(scratch.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(scratch.iterdir()) == []


# -- time budgets -----------------------------------------------------------------------


@pytest.mark.timeout(240)
def test_a_baseline_over_its_time_budget_is_stopped_and_left_out(tmp_path):
    data = _generated(3000, "set")
    slow, fast = _piece(SLOW_SVC, data), _piece(SPARSE_ELM, data)
    start = time.monotonic()
    results = run_pieces(
        [slow, fast], {"set": data}, tmp_path, executor=LocalExecutor(2), piece_timeout=0.5
    )
    assert time.monotonic() - start < 60
    stopped = results[slow.key]
    assert stopped.status == "timeout" and stopped.rows == [] and stopped.timings == []
    assert stopped.left_out == "time budget of 0.5 s hit"
    assert 0.5 <= stopped.seconds < 10
    # the library's own model has no time budget by default: it ran
    assert results[fast.key].status == "done"
    journal = Journal(tmp_path).read()
    assert journal[slow.key].status == "timeout"
    before = (tmp_path / "pieces.jsonl").read_bytes()
    # resumed: not retried
    again = run_pieces([slow, fast], {"set": data}, tmp_path, piece_timeout=0.5)
    assert again[slow.key].status == "timeout"
    assert (tmp_path / "pieces.jsonl").read_bytes() == before
    # asked: retried (here without a time budget: it finishes)
    retried = run_pieces([slow, fast], {"set": data}, tmp_path, retry_left_out=True)
    assert retried[slow.key].status == "done" and retried[slow.key].rows
    assert Journal(tmp_path).read()[slow.key].status == "done"


@pytest.mark.timeout(300)
def test_on_dask_a_piece_is_admitted_and_stopped_the_same_way(tmp_path, dask_client):
    """Dask's process workers are daemonic: each piece runs in a fresh interpreter there,
    its time budget counted from the piece's start."""
    data = _generated(3000, "set")
    slow, fast = _piece(SLOW_SVC, data), _piece(SPARSE_ELM, data)
    results = run_pieces(
        [slow, fast],
        {"set": data},
        tmp_path,
        executor=DaskExecutor(dask_client),
        piece_timeout=0.5,
    )
    assert results[slow.key].status == "timeout"
    assert results[slow.key].left_out == "time budget of 0.5 s hit"
    assert results[fast.key].status == "done" and results[fast.key].peak_mb > 0
    # an explicit budget below a piece refuses it here, before it is submitted
    fast_size = estimate_piece(fast, data).total
    refused = run_pieces(
        [replace(fast, trial=1, seed=1)],
        {"set": data},
        tmp_path,
        executor=DaskExecutor(dask_client),
        memory_budget=fast_size / 2,
    )
    assert [r.status for r in refused.values()] == ["memory"]


# -- the command ------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_the_command_prints_the_plan_and_reports_what_it_left_out(tmp_path, capsys):
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=1200, n_features=8, random_state=0)
    path = tmp_path / "mine.csv"
    pd.DataFrame(np.column_stack([X, y])).to_csv(path, header=False, index=False)
    out = tmp_path / "run"
    argv = ["reproduce", "flsa-svm", "--quick", "--sets", str(path), "--out", str(out)]
    argv += ["--quiet", "--threads", "2", "--memory-gb", "2", "--piece-timeout", "0.05"]
    # a dry run: the plan, nothing run, nothing written
    assert main([*argv, "--dry-run"]) == 0
    printed = capsys.readouterr()
    assert "dry run of flsa-svm: 3 pieces planned above; none run" in printed.out
    assert "memory plan: budget 2.0 GB" in printed.err and not out.exists()
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "memory plan: budget 2.0 GB on this machine (--memory-gb); 2 pieces at once" in err
    assert "mine SVM (gaussian)" in err and "stopped at 0.05 s" in err
    assert "mine FLSA-SVM (gaussian)" in err
    report = (out / "report.md").read_text()
    assert "## Pieces left out (1): no result, not counted" in report
    assert "trial/flsa/mine/SVM/gaussian/trial0 | time budget of 0.05 s hit" in report
    results = pd.read_csv(out / "results.csv")
    assert set(results["method"]) == {"unified_elm", "FLSA-SVM"}  # no number made up
    # resumed: said, not retried; asked: retried
    assert main(argv) == 0
    assert "(1 of them left out: time budget hit or killed; --retry-left-out" in (
        capsys.readouterr().err
    )
    assert main([*argv[:-2], "--piece-timeout", "0", "--retry-left-out"]) == 0
    assert set(pd.read_csv(out / "results.csv")["method"]) == {"SVM", "unified_elm", "FLSA-SVM"}
    assert "Pieces left out" not in (out / "report.md").read_text()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--memory-gb", "0"], "argument --memory-gb: 0: expected a number above 0"),
        (["--piece-timeout", "-1"], "argument --piece-timeout: -1: expected a number 0 or more"),
        (["--piece-timeout", "inf"], "argument --piece-timeout: inf: expected a number 0 or"),
    ],
)
def test_bad_budgets_are_refused_naming_the_flag(flags, message, capsys):
    assert main(["reproduce", "sparse-elm", *flags]) == 2
    assert message in capsys.readouterr().err
