"""Pieces in child processes: stopped at their time budget, their peak memory measured,
and a piece the kernel kills for memory takes only itself down.

A :class:`PieceWorker` is a child process (forked from a forkserver that has imported
the library once) that runs pieces one after another, keeping the data set it was last
sent and numba's loaded kernels between them (a fresh process per piece cost about a
second each: loading the compiled kernels from the on-disk cache).  The set is known by
its content (:attr:`~elmscale.experiments.datasets.LoadedSet.identity`), not its name:
a pool outlives a run on Ray or Dask, and two runs' ``train.csv`` differ.  The parent
waits up to a piece's time budget and kills the worker there; the piece is then left out
(``status="timeout"``, no rows) and the next piece gets a new worker.  A
:class:`WorkerPool` keeps the idle workers; a worker whose piece was interrupted (a
cancelled task, an interrupt) is killed, never kept: its reply would be read as the
next piece's.  Where this process may not have children
of ``multiprocessing`` (a daemonic Dask worker process) a fresh interpreter runs each
piece instead (``python -m elmscale.experiments.isolation``: seconds of imports each).

Like every ``multiprocessing`` user with the forkserver, a script that runs pieces
must keep its top-level code under ``if __name__ == "__main__":`` (the workers import
the main module).

:class:`HostLedger` admits pieces by memory where the engine does not place them itself
(Ray tasks, Dask tasks): a small JSON file per run and machine, locked with ``flock``,
holds the estimates of the pieces running there; a piece waits until its estimate fits
the machine's budget beside them, and a piece larger than the whole budget is refused
without starting.  The file is replaced whole (written under another name, then
renamed), so a kill mid-write leaves the previous one.  It lives in the run's folder on
that machine (:attr:`HostLedger.folder`), with the files of the pieces that run in a
fresh interpreter there; the engine removes that folder on every machine at the end,
so a worker killed mid-piece leaves nothing behind once the run is over.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from dataclasses import dataclass
from pathlib import Path

from elmscale.core.lifeline import die_with_parent, exit_when_closed
from elmscale.experiments.memory import default_budget, format_bytes
from elmscale.experiments.pieces import PieceResult, run_piece
from elmscale.experiments.protocol import Piece

__all__ = [
    "HostLedger",
    "PieceWorker",
    "Stopper",
    "WorkerPool",
    "is_baseline",
    "left_out_result",
    "piece_time_limit",
    "run_admitted",
    "run_bounded",
]

MB = 2**20

#: the modules every piece's process needs, imported once by the forkserver
BASE_PRELOAD = ("elmscale.experiments.pieces",)
#: imported first by the forkserver: it ends with the command
LIFELINE = "elmscale.experiments.forkserver_lifeline"

_context_lock = threading.Lock()
_context = None


def is_baseline(piece: Piece) -> bool:
    """Whether the piece's method is a scikit-learn baseline (SVC, the l1 selector with
    SVC, any ``sklearn`` estimator), not one of the library's models."""
    module = piece.method.estimator.partition(":")[0]
    return module == "elmscale.experiments.pieces" or module.split(".")[0] == "sklearn"


def piece_time_limit(piece: Piece, timeout: float | None, every_piece: bool = False):
    """The piece's time budget in seconds: ``timeout`` for a baseline's piece (every
    piece's with ``every_piece``), None (no limit) otherwise or when ``timeout`` is None
    or 0."""
    if not timeout or timeout <= 0:
        return None
    return float(timeout) if every_piece or is_baseline(piece) else None


def left_out_result(piece: Piece, status: str, reason: str, seconds: float = 0.0, **kw):
    """The record of a piece that gave no result: ``status`` ("timeout", "killed",
    "memory") and the reason in words."""
    if seconds and "started_at" not in kw:
        kw["started_at"] = time.time() - seconds
    return PieceResult(piece.key, piece.kind, [], [], seconds, status=status, left_out=reason, **kw)


# -- stopping every child at once ---------------------------------------------------------


class Stopper:
    """The children started for one run: :meth:`stop` kills them (a failed piece, an
    interrupt) and refuses new ones."""

    def __init__(self):
        self._lock = threading.Lock()
        self._children: set = set()
        self.stopped = False

    def add(self, child) -> bool:
        with self._lock:
            if self.stopped:
                return False
            self._children.add(child)
            return True

    def discard(self, child) -> None:
        with self._lock:
            self._children.discard(child)

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            children = list(self._children)
        for child in children:
            _kill(child)


def _kill(child) -> None:
    with contextlib.suppress(ProcessLookupError, OSError, ValueError, AttributeError):
        child.kill()


# -- the child's side ---------------------------------------------------------------------


def _proc_status_bytes(field: str) -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _start_measuring() -> int:
    """Reset the peak resident size to the current one (Linux: ``clear_refs`` 5) and
    return the current one; 0 where the kernel does not offer it."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return 0
    return _proc_status_bytes("VmRSS")


def _die_with_parent(conn=None) -> None:
    """The child ends with its parent (Linux: the forkserver, or the process that started
    the interpreter) and, given ``conn``, its pipe to the command, whose other end closes
    when the command ends, SIGKILL included: no piece outlives a stopped or killed run
    (the forkserver ends with the command too: ``forkserver_lifeline``)."""
    die_with_parent()
    if conn is not None:
        exit_when_closed(conn.fileno())


def _measured_run(piece: Piece, data) -> PieceResult:
    start = _start_measuring()
    result = run_piece(piece, datasets={piece.dataset: data})
    peak = _proc_status_bytes("VmHWM") - start if start else 0
    return result._replace(peak_mb=round(max(peak, 0) / MB, 1))


def _failure(exc: BaseException):
    """The child's exception as it can cross to the parent, its traceback as a note."""
    text = "".join(traceback.format_exception(exc))
    try:
        pickle.loads(pickle.dumps(exc))
        return exc, text
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}"), text


def _data_key(data) -> str | None:
    """What a worker knows its data set by: the set's content hash (a ``LoadedSet``'s
    ``identity``); None for other data (sent with every piece)."""
    return getattr(data, "identity", None)


def _serve(conn) -> None:
    """A worker's loop: ``("run", piece, key, data or None)`` -> ``("ok", result)`` or
    ``("error", (exception, traceback))``; ``("stop",)`` or a closed pipe ends it.  Data
    None: the piece runs on the set held, which must be the one ``key`` names."""
    _die_with_parent(conn)
    held_key, held = None, None  # one set at a time
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] != "run":
            return
        _, piece, key, data = message
        if data is not None:
            held_key, held = key, data
        try:
            if data is None and (key is None or key != held_key):
                raise RuntimeError(f"the worker holds no data set {key} for {piece.key}")
            reply = ("ok", _measured_run(piece, held))
        except BaseException as exc:  # noqa: BLE001 - every failure goes to the parent
            reply = ("error", _failure(exc))
        conn.send(reply)


# -- the parent's side --------------------------------------------------------------------


def _forkserver(preload) -> multiprocessing.context.BaseContext:
    """The process's forkserver context (its server started on the first worker, with
    ``preload`` imported); "spawn" where there is no forkserver."""
    global _context
    with _context_lock:
        if _context is None:
            if "forkserver" in multiprocessing.get_all_start_methods():
                ctx = multiprocessing.get_context("forkserver")
                ctx.set_forkserver_preload([LIFELINE, *sorted({*BASE_PRELOAD, *preload})])
            else:  # pragma: no cover - not POSIX
                ctx = multiprocessing.get_context("spawn")
            _context = ctx
        return _context


def _may_have_children() -> bool:
    """multiprocessing refuses children to a daemonic process (a Dask worker process)."""
    return not multiprocessing.current_process().daemon


def _raise_child_error(payload, piece: Piece):
    exc, text = payload
    with contextlib.suppress(Exception):
        exc.add_note(f"in the child process running {piece.key}:\n{text}")
    raise exc


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(code).name
    except ValueError:
        return f"signal {code}"


def _killed(piece: Piece, exitcode, seconds: float, estimate_mb: float) -> PieceResult:
    if exitcode is not None and exitcode < 0:
        how = f"killed by {_signal_name(-exitcode)}"
        if -exitcode == signal.SIGKILL:
            how += " (out of memory?"
            how += f" its estimate was {format_bytes(estimate_mb * MB)})" if estimate_mb else ")"
    else:
        how = f"its process ended with code {exitcode} and no result"
    return left_out_result(
        piece, "killed", f"{how} after {seconds:.0f} s", seconds, estimate_mb=estimate_mb
    )


def _timed_out(piece: Piece, limit: float, seconds: float, estimate_mb: float) -> PieceResult:
    return left_out_result(
        piece, "timeout", f"time budget of {limit:g} s hit", seconds, estimate_mb=estimate_mb
    )


class PieceWorker:
    """A child process running pieces one at a time (see the module's docstring)."""

    def __init__(self, ctx):
        self._conn, child_conn = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_serve, args=(child_conn,), daemon=True)
        self.process.start()
        child_conn.close()
        #: the key of the data set the worker holds (sent with its first piece)
        self.dataset: str | None = None
        #: a piece was sent and its reply not read: the worker must not run another
        self.busy = False

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        _kill(self.process)

    def close(self) -> None:
        """Ask the worker to end; kill it if it does not within a second."""
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(("stop",))
        self.process.join(timeout=1.0)
        if self.process.is_alive():
            self.kill()
            self.process.join()
        self._conn.close()

    def run(self, piece: Piece, data, time_limit, stopper, estimate_mb) -> PieceResult:
        """The piece's result; a left-out one when its time budget is hit (the worker is
        killed) or the worker dies under it; the piece's own exception is raised."""
        if stopper is not None and not stopper.add(self.process):
            raise InterruptedError("the run is stopping")
        start = time.monotonic()
        try:
            key = _data_key(data)
            send = None if key is not None and key == self.dataset else data
            self.busy = True
            self._conn.send(("run", piece, key, send))
            self.dataset = key
            deadline = None if time_limit is None else start + time_limit
            while True:
                wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
                if self._conn.poll(wait):
                    try:
                        status, payload = self._conn.recv()
                        self.busy = False
                    except (EOFError, OSError):  # died without a word: killed
                        self.process.join()
                        seconds = time.monotonic() - start
                        return _killed(piece, self.process.exitcode, seconds, estimate_mb)
                    if status == "error":
                        _raise_child_error(payload, piece)
                    return payload._replace(estimate_mb=estimate_mb)
                if stopper is not None and stopper.stopped:
                    raise InterruptedError("the run is stopping")
                if deadline is not None and time.monotonic() >= deadline:
                    self.kill()
                    self.process.join()
                    return _timed_out(piece, time_limit, time.monotonic() - start, estimate_mb)
        except (BrokenPipeError, ConnectionResetError):  # died between two pieces
            self.process.join()
            return _killed(piece, self.process.exitcode, time.monotonic() - start, estimate_mb)
        finally:
            if stopper is not None:
                stopper.discard(self.process)


class WorkerPool:
    """Idle :class:`PieceWorker` s, started as needed (``preload``: the modules the
    forkserver imports once, for every worker)."""

    def __init__(self, preload: tuple[str, ...] = ()):
        self.preload = tuple(preload)
        self._idle: list[PieceWorker] = []
        self._lock = threading.Lock()

    def acquire(self) -> PieceWorker:
        with self._lock:
            while self._idle:
                worker = self._idle.pop()
                if worker.alive:
                    return worker
        return PieceWorker(_forkserver(self.preload))

    def release(self, worker: PieceWorker) -> None:
        """Keep an idle worker; kill one still running a piece (its piece was
        interrupted here: a cancelled task, a stopped run)."""
        if worker.busy:
            worker.kill()
            worker.close()
        elif worker.alive:
            with self._lock:
                self._idle.append(worker)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.close()


_shared_pool: WorkerPool | None = None


def shared_pool(preload: tuple[str, ...] = ()) -> WorkerPool:
    """This process's pool (a Ray or Dask worker's: kept between its tasks)."""
    global _shared_pool
    with _context_lock:
        if _shared_pool is None:
            _shared_pool = WorkerPool(preload)
        return _shared_pool


def _wait_subprocess(piece, data, time_limit, stopper, estimate_mb, scratch) -> PieceResult:
    """The piece in a fresh interpreter (``python -m elmscale.experiments.isolation IN
    OUT``): for a process that may not fork children of multiprocessing.  Its time
    budget counts from the piece's start (the child touches ``OUT.started`` once its
    imports are done), not from the interpreter's.  Its files go in a folder in
    ``scratch``: removed here, or with the run's folder when this process is killed."""
    if scratch is not None:
        Path(scratch).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="elmscale-piece-", dir=scratch) as folder:
        given, taken = Path(folder) / "piece.pkl", Path(folder) / "result.pkl"
        started = taken.with_suffix(".started")
        given.write_bytes(pickle.dumps((piece, data), protocol=pickle.HIGHEST_PROTOCOL))
        command = [sys.executable, "-m", "elmscale.experiments.isolation", str(given), str(taken)]
        launched = time.monotonic()
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL)
        if stopper is not None and not stopper.add(child):
            _kill(child)
            child.wait()
            raise InterruptedError("the run is stopping")
        begun = None
        try:
            while child.poll() is None:
                if begun is None and started.exists():
                    begun = time.monotonic()
                if stopper is not None and stopper.stopped:
                    raise InterruptedError("the run is stopping")
                if time_limit is not None and begun is not None:
                    if time.monotonic() - begun >= time_limit:
                        _kill(child)
                        child.wait()
                        return _timed_out(piece, time_limit, time.monotonic() - begun, estimate_mb)
                time.sleep(0.05)
        finally:
            if child.poll() is None:
                _kill(child)
                child.wait()
            if stopper is not None:
                stopper.discard(child)
        seconds = time.monotonic() - (begun or launched)
        if child.returncode != 0 or not taken.exists():
            return _killed(piece, child.returncode, seconds, estimate_mb)
        status, payload = pickle.loads(taken.read_bytes())
        if status == "error":
            _raise_child_error(payload, piece)
        return payload._replace(estimate_mb=estimate_mb)


def run_bounded(
    piece: Piece,
    *,
    data,
    time_limit: float | None = None,
    isolate: bool = True,
    stopper: Stopper | None = None,
    pool: WorkerPool | None = None,
    preload: tuple[str, ...] = (),
    estimate_mb: float = 0.0,
    scratch: Path | None = None,
) -> PieceResult:
    """Run ``piece`` on ``data`` (its loaded set): in a worker process of ``pool`` (this
    process's shared pool by default) when ``isolate``, stopped after ``time_limit``
    seconds; else here (no time budget can be kept: a thread cannot be stopped).  A
    piece's own exception is raised here.  ``scratch``: the folder of the files of a
    piece run in a fresh interpreter (the run's, removed with it; None: the system's)."""
    if not isolate:
        if time_limit is not None:
            raise ValueError("a time budget needs the piece in a child process (isolate=True)")
        return run_piece(piece, datasets={piece.dataset: data})._replace(estimate_mb=estimate_mb)
    if not _may_have_children():
        return _wait_subprocess(piece, data, time_limit, stopper, estimate_mb, scratch)
    pool = pool or shared_pool(preload)
    worker = pool.acquire()
    try:
        return worker.run(piece, data, time_limit, stopper, estimate_mb)
    finally:
        pool.release(worker)


# -- admission on a worker's machine (Ray, Dask) -------------------------------------------


@dataclass(frozen=True)
class HostLedger:
    """The memory admission of one run on every machine its pieces reach.

    ``budget``: bytes a machine's pieces may hold together (the same on every machine);
    None: each machine's own, :func:`~elmscale.experiments.memory.default_budget` of its
    available memory when its first piece arrives, except on ``home`` (the engine's
    machine, its ``home_budget``)."""

    run_id: str
    budget: int | None = None
    home: str = ""
    home_budget: int | None = None
    fraction: float = 0.8
    poll_s: float = 0.25

    @classmethod
    def new(cls, budget, home_budget, fraction) -> HostLedger:
        return cls(uuid.uuid4().hex, budget, socket.gethostname(), home_budget, fraction)

    @property
    def folder(self) -> Path:
        """The run's folder on this machine: the ledger and the pieces' files."""
        return Path(tempfile.gettempdir()) / f"elmscale-run-{self.run_id}"

    @property
    def path(self) -> Path:
        return self.folder / "memory.json"

    def _machine_budget(self) -> int | None:
        if self.budget is not None:
            return int(self.budget)
        if self.home_budget is not None and socket.gethostname() == self.home:
            return int(self.home_budget)
        return default_budget(self.fraction)

    @contextlib.contextmanager
    def _locked(self):
        import fcntl

        self.folder.mkdir(exist_ok=True)
        lock = self.path.with_suffix(".lock")
        with open(lock, "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                state = json.loads(self.path.read_text()) if self.path.exists() else None
                if state is None:
                    state = {"budget": self._machine_budget(), "entries": {}}
                holder = {"state": state}
                yield holder
                _replace_whole(self.path, json.dumps(holder["state"]))
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    @contextlib.contextmanager
    def reserve(self, key: str, need: int):
        """Wait until ``need`` bytes fit beside the pieces running on this machine, hold
        them in the block; yields None, or the reason the piece is refused (larger than
        the machine's whole budget) without holding anything."""
        if sys.platform == "win32":  # pragma: no cover - no flock: no admission
            yield None
            return
        token = f"{os.getpid()}-{uuid.uuid4().hex}"
        while True:
            with self._locked() as holder:
                state = holder["state"]
                budget = state["budget"]
                entries = {t: e for t, e in state["entries"].items() if self._alive(int(e["pid"]))}
                state["entries"] = entries
                if budget is not None and need > budget:
                    refused = (
                        f"memory estimate {format_bytes(need)} exceeds the budget "
                        f"{format_bytes(budget)} on {socket.gethostname()}"
                    )
                    break
                used = sum(int(e["bytes"]) for e in entries.values())
                if budget is None or used + need <= budget:
                    entries[token] = {"pid": os.getpid(), "bytes": int(need), "key": key}
                    refused = None
                    break
            time.sleep(self.poll_s)
        if refused is not None:
            yield refused
            return
        try:
            yield None
        finally:
            if self.folder.exists():  # else the run is over and its folder removed
                with self._locked() as holder:
                    holder["state"]["entries"].pop(token, None)

    def remove(self) -> None:
        """Delete this machine's folder of the run (on every machine, once it is over)."""
        shutil.rmtree(self.folder, ignore_errors=True)


def _replace_whole(path: Path, text: str) -> None:
    """``path`` holds ``text``, or its previous content if this is cut short."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(text)
    os.replace(partial, path)


def run_admitted(
    piece: Piece,
    *,
    datasets: dict,
    ledger: HostLedger | None = None,
    timeout: float | None = None,
    timeout_every_piece: bool = False,
    isolate: bool = True,
    preload: tuple[str, ...] = (),
) -> PieceResult:
    """A Ray or Dask task's piece: admitted by memory on its machine (``ledger``), then
    :func:`run_bounded` with the piece's time budget, its files in the run's folder."""
    from elmscale.experiments.memory import estimate_piece

    data = datasets[piece.dataset]
    need = estimate_piece(piece, data).total
    limit = piece_time_limit(piece, timeout, timeout_every_piece)
    run = dict(data=data, time_limit=limit, isolate=isolate, preload=preload)
    run["estimate_mb"] = round(need / MB, 1)
    run["scratch"] = None if ledger is None else ledger.folder
    if ledger is None:
        return run_bounded(piece, **run)
    with ledger.reserve(piece.key, need) as refused:
        if refused is not None:
            return left_out_result(piece, "memory", refused, estimate_mb=run["estimate_mb"])
        return run_bounded(piece, **run)


run_admitted.progress_label = "reproduce"


def _main(argv: list[str]) -> int:
    """``python -m elmscale.experiments.isolation IN OUT``: the piece pickled in IN, its
    result (or its exception) pickled to OUT."""
    given, taken = Path(argv[0]), Path(argv[1])
    piece, data = pickle.loads(given.read_bytes())
    given.unlink()  # read: the largest file gone even if this process is killed
    importlib.import_module(piece.method.estimator.partition(":")[0])
    taken.with_suffix(".started").touch()  # the time budget counts from here
    try:
        message = ("ok", _measured_run(piece, data))
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the parent
        message = ("error", _failure(exc))
    taken.write_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
    return 0


if __name__ == "__main__":
    _die_with_parent()
    sys.exit(_main(sys.argv[1:]))
