"""The reliability matrix (issue 20): faults, load, bad input and security, each case tried
N times, with a table of what was tried and what held.

    python benchmarks/stress.py                  # the full matrix (minutes)
    python benchmarks/stress.py --quick          # CI size (about a minute)
    python benchmarks/stress.py --only faults --repeat 5
    python benchmarks/stress.py --only fuzz --examples 1000

Sections:

* ``faults``: a Dask worker killed (SIGKILL on its real pid) during a Gram reduction, and
  during a Newton pass of the random-node sparse ELM on Dask, and during a kernel sparse
  ELM's divide and conquer (its sub-solves' rows are tasks' results, read again); a Ray
  worker killed while it runs a grid piece, and while it runs a one-vs-one pair;
  ``elmscale score`` killed
  midway and run again; ``elmscale run`` interrupted by Ctrl-C (SIGINT to its process
  group, as a terminal sends it). Each try's result must equal the undisturbed run's
  exactly; after Ctrl-C the command exits with 130, every process it started is gone and
  no partial file is left.
* ``load``: ``elmscale score`` over 100M generated rows against 10M (``--quick``: 3M against 1M)
  rows: peak RSS of the process tree (sampled) flat within 1.3x, rows in = rows out
  (Parquet footers); two ``elmscale score`` runs into one folder at once (one scores, the
  other is refused naming the folder, every file written once); a grid of 5,000 pieces on
  Ray (``--quick``: 500): every piece's result back exactly once, equal to the pieces run
  here.
* ``fuzz``: the property-based cases of ``tests/_reliability.py`` (model files,
  pipeline files, Parquet / CSV files) with ``--examples`` examples each.
* ``security``: the local Dask cluster and Ray that ``elmscale run`` starts: the addresses
  they listen on, Ray's token authentication (on, and a client without the token
  refused); model files pointing outside themselves.
* ``kill``: each long-running command (``reproduce``, ``run`` in its Ray phase and in its
  Dask phase, ``score``, ``train``, ``warmup``) x {SIGINT, SIGTERM, SIGKILL} x {during
  start-up, mid-work}, started in a session of its own on small generated inputs: SIGINT
  goes to its process group (a terminal's Ctrl-C), SIGTERM and SIGKILL to the command
  alone (``kill PID``); the processes of its session (and any carrying its environment
  tag) left 10 s later are counted (none may be), its exit code checked (130, 143, -9),
  no half-written file may be left, then it is rerun: reproduce resumes from its journal,
  score does only the files not done, the others complete.  ``--quick``: two cases.

Prints one row per case: tries, passed, identical results (where a result is compared),
seconds.  Exit status 1 if any case failed.  ``--out FILE`` writes the table there too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

SECTIONS = ("faults", "load", "fuzz", "security", "kill")
CLEAN_ENV = {
    k: v for k, v in os.environ.items() if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS")
}
ELMSCALE = [sys.executable, "-m", "elmscale"]


@dataclass
class Case:
    name: str
    section: str
    tries: int = 0
    passed: int = 0
    identical: int | None = None  # tries whose result equals the reference (None: no result)
    seconds: float = 0.0
    status: str = ""  # "", "pending", "limit", "error"
    notes: list = field(default_factory=list)

    def ok(self) -> bool:
        """Every try passed and, where results are compared, equal to the reference."""
        return self.status in ("pending", "limit") or (
            self.status == ""
            and self.tries > 0
            and self.passed == self.tries
            and self.identical in (None, self.passed)
        )

    def same(self, equal: bool) -> None:
        self.identical = (self.identical or 0) + bool(equal)


def _wait_for(predicate, timeout: float, every: float = 0.01) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return False


def _in_thread(fn):
    """Run ``fn`` in a daemon thread; returns (thread, outcome dict)."""
    outcome: dict = {}

    def run():
        try:
            outcome["value"] = fn()
        except BaseException as exc:  # reported by the caller
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


# -- faults -----------------------------------------------------------------------------------


def fault_dask_gram(case: Case, args, work: Path) -> None:
    from distributed import Client
    from sklearn.base import clone
    from two_workers import two_worker_cluster

    from elmscale import ELMClassifier, open_parquet
    from elmscale.data import write_generated_parquet

    rows = 100_000 if args.quick else 1_000_000
    data = write_generated_parquet(work / "gram", rows, rows_per_file=rows // 2)
    ds = open_parquet(data).with_units(16)
    model = ELMClassifier(n_hidden=500 if args.quick else 1000, precision="double", random_state=0)
    with (
        two_worker_cluster() as cluster,
        Client(cluster) as client,
    ):
        _kill_a_dask_worker(case, client, lambda: clone(model).fit(ds, client=client), args)


def _kill_a_dask_worker(
    case: Case, client, fit, args, settle: float = 0.3, coef: str = "coef_", during: str = ""
) -> None:
    """``fit()`` once undisturbed, then ``args.repeat`` times with SIGKILL sent to one
    worker's process ``settle`` s into its tasks (those whose key starts with ``during``);
    each result's ``coef`` compared with the first's."""
    reference = fit()
    for _ in range(args.repeat):
        case.tries += 1
        pids = client.run(os.getpid)
        thread, outcome = _in_thread(fit)
        _wait_for(lambda: _processing(client, during), 60)
        time.sleep(settle)  # some units done, others running
        os.kill(next(iter(pids.values())), signal.SIGKILL)
        mid_run = thread.is_alive()
        thread.join(600)
        if "error" in outcome or thread.is_alive() or not mid_run:
            case.notes.append(
                f"try {case.tries}: {outcome.get('error', 'not killed mid-run or hung')}"
            )
        else:
            case.passed += 1
            _compare_coef(case, outcome["value"], reference, coef)
        _wait_for_replacement(client, pids)
    same = np.array_equal(getattr(fit(), coef), getattr(reference, coef))
    case.notes.append(f"an undisturbed second fit equals the first: {same}")


def _processing(client, prefix: str) -> bool:
    """Whether a task whose key starts with ``prefix`` is running on a worker."""
    return any(str(key).startswith(prefix) for keys in client.processing().values() for key in keys)


def _wait_for_replacement(client, pids: dict) -> None:
    """Until the cluster has as many workers as before and none of them is a killed one
    (``wait_for_workers`` may count the dead worker before the scheduler drops it)."""

    def replaced() -> bool:
        try:
            now = client.run(os.getpid)
        except Exception:  # a worker leaving while asked
            return False
        # as many workers as before, one of them new (the killed one's replacement)
        return len(now) == len(pids) and set(now.values()) != set(pids.values())

    _wait_for(replaced, 120, every=0.2)


def fault_dask_newton(case: Case, args, work: Path) -> None:
    """A worker killed during a pass of the random-node sparse ELM's Newton solver on Dask:
    the pass's lost task runs again from the Parquet units and the model is unchanged."""
    from distributed import Client
    from sklearn.base import clone
    from two_workers import two_worker_cluster

    from elmscale import SparseELMClassifier, open_parquet
    from elmscale.data import write_generated_parquet

    rows = args.newton_rows or (50_000 if args.quick else 1_000_000)
    data = write_generated_parquet(work / "newton", rows, rows_per_file=rows // 2)
    ds = open_parquet(data).with_units(8)
    model = SparseELMClassifier(hidden="sigmoid", n_hidden=200, C=1.0, random_state=0)
    with (
        two_worker_cluster() as cluster,
        Client(cluster) as client,
    ):
        # no cache: every pass reads its units, so the fit lasts long enough to be hit
        _kill_a_dask_worker(
            case,
            client,
            lambda: clone(model).fit(ds, client=client, n_blocks=2, cache_mb=0),
            args,
            settle=0.2,
            during="block_pass",
        )


def fault_dask_divide(case: Case, args, work: Path) -> None:
    """A worker killed during a kernel sparse ELM fit by divide and conquer (2 parts):
    Dask reruns its sub-solve and reads the part's rows it held again."""
    from distributed import Client
    from sklearn.base import clone
    from two_workers import two_worker_cluster

    from elmscale import SparseELMClassifier, open_parquet
    from elmscale.data import write_generated_parquet

    rows = 10_000 if args.quick else 20_000
    data = write_generated_parquet(work / "divide", rows, rows_per_file=rows // 2)
    ds = open_parquet(data)
    model = SparseELMClassifier(sigma=0.5, C=1.0, random_state=0)
    with (
        two_worker_cluster() as cluster,
        Client(cluster) as client,
    ):
        _kill_a_dask_worker(
            case,
            client,
            lambda: clone(model).fit(ds, client=client, n_parts=2),
            args,
            settle=0.1,
            coef="dual_coef_",
            during="_sub_solve",
        )


def _compare_coef(case: Case, fitted, reference, coef: str = "coef_") -> None:
    """Same coefficients (``coef``) to the bit; otherwise how far apart (and the rounds
    taken)."""
    mine, theirs = getattr(fitted, coef), getattr(reference, coef)
    equal = np.array_equal(mine, theirs)
    case.same(equal)
    if not equal:
        gap = np.abs(mine - theirs).max() / np.abs(theirs).max()
        case.notes.append(
            f"try {case.tries}: {coef} differs from the undisturbed fit's by {gap:.2e} "
            f"(relative max); n_iter_ {getattr(fitted, 'n_iter_', '?')} against "
            f"{getattr(reference, 'n_iter_', '?')}"
        )


def _ray_piece_processes() -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if " ".join(proc.info["cmdline"] or []).startswith("ray::_run_piece"):
                found.append(proc.info["pid"])
    return found


def _kill_a_ray_piece(case: Case, run, reference, compare, repeat: int) -> None:
    """``run()`` ``repeat`` times, SIGKILL to a worker process running one of its pieces."""
    for _ in range(repeat):
        case.tries += 1
        thread, outcome = _in_thread(run)
        victims: list = []
        _wait_for(lambda: victims.extend(_ray_piece_processes()) or victims, 60, every=0.02)
        time.sleep(0.2)
        if victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victims[0], signal.SIGKILL)
        mid_run = bool(victims) and thread.is_alive()
        thread.join(600)
        if "error" in outcome or thread.is_alive() or not mid_run:
            case.notes.append(f"try {case.tries}: {outcome.get('error', 'not killed mid-run')}")
        else:
            case.passed += 1
            case.same(compare(outcome["value"], reference))


def fault_ray_grid(case: Case, args, work: Path) -> None:
    from sklearn.base import clone

    from elmscale import SparseELMClassifier
    from elmscale.data import generate_classification
    from elmscale.model_selection import GridSearchCV

    _ray()
    data = generate_classification(3000 if args.quick else 6000, n_features=8, random_state=12)
    search = GridSearchCV(
        SparseELMClassifier(),
        {"C": [1.0, 10.0, 100.0], "sigma": [0.3, 0.5, 1.0]},
        cv=4,
        random_state=1,
        ray_address="auto",
        refit=False,
    )
    reference = clone(search).fit(data.X, data.y)
    _kill_a_ray_piece(
        case,
        lambda: clone(search).fit(data.X, data.y),
        reference,
        lambda a, b: np.array_equal(
            a.cv_results_["mean_test_score"], b.cv_results_["mean_test_score"]
        ),
        args.repeat,
    )


def fault_ray_pairs(case: Case, args, work: Path) -> None:
    from sklearn.base import clone

    from elmscale import SparseELMClassifier
    from elmscale.data import generate_classification

    _ray()
    data = generate_classification(
        4000 if args.quick else 8000, n_features=8, n_classes=4, random_state=3
    )
    model = SparseELMClassifier(sigma=0.5, C=10.0)
    reference = clone(model).fit(data.X, data.y, ray_address="auto")
    local = clone(model).fit(data.X, data.y)
    case.notes.append(
        "Ray = local: "
        + str(np.array_equal(reference.decision_function(data.X), local.decision_function(data.X)))
    )
    _kill_a_ray_piece(
        case,
        lambda: clone(model).fit(data.X, data.y, ray_address="auto"),
        reference,
        lambda a, b: np.array_equal(a.decision_function(data.X), b.decision_function(data.X)),
        args.repeat,
    )


def _scoring_inputs(work: Path, n_files: int, rows: int):
    """A 60-node ELM model file and ``n_files`` Parquet inputs of ``rows`` rows each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from elmscale import ELMClassifier
    from elmscale.data import generate_classification
    from elmscale.io.model_files import save

    train = generate_classification(3000, n_features=6, random_state=1)
    model = ELMClassifier(n_hidden=60, random_state=0).fit(train.X, train.y)
    path = save(model, work / "model.elm", features=[f"f{j + 1}" for j in range(6)])
    inputs = work / "inputs"
    inputs.mkdir(exist_ok=True)
    for i in range(n_files):
        X = generate_classification(rows, n_features=6, random_state=100 + i).X
        table = pa.table(
            {
                "id": np.arange(rows) + i * rows,
                **{f"f{j + 1}": X[:, j].astype(np.float32) for j in range(6)},
            }
        )
        pq.write_table(table, inputs / f"part-{i:02d}.parquet", row_group_size=5_000)
    return path, inputs


def _score_argv(model, inputs, outputs, *extra):
    return [*ELMSCALE, "score", model, inputs, outputs, "--id", "id", "--quiet", *extra]


def _same_outputs(a: Path, b: Path) -> bool:
    import pyarrow.parquet as pq

    names = sorted(p.name for p in a.glob("*.parquet"))
    if names != sorted(p.name for p in b.glob("*.parquet")):
        return False
    return all(pq.read_table(a / n).equals(pq.read_table(b / n)) for n in names)


def _reference_scores(model, inputs, reference) -> None:
    subprocess.run(
        _score_argv(model, inputs, reference),
        check=True,
        env=CLEAN_ENV,
        timeout=300,
        capture_output=True,
    )


def fault_score_killed(case: Case, args, work: Path) -> None:
    n_files = 4 if args.quick else 12
    model, inputs = _scoring_inputs(work, n_files, 60_000)
    reference = work / "reference"
    _reference_scores(model, inputs, reference)
    for k in range(args.repeat):
        case.tries += 1
        outputs = work / f"killed-{k}"
        process = subprocess.Popen(
            _score_argv(model, inputs, outputs, "--batch-rows", "5000"), env=CLEAN_ENV
        )
        try:
            _wait_for(lambda: list(outputs.glob("*.parquet")), 300, every=0.005)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(60)
        finished = len(list(outputs.glob("*.parquet")))
        rerun = subprocess.run(
            _score_argv(model, inputs, outputs),
            env=CLEAN_ENV,
            timeout=300,
            capture_output=True,
            text=True,
        )
        leftovers = [p.name for p in outputs.glob(".*")]
        if (
            rerun.returncode == 0
            and 1 <= finished < n_files
            and f"({finished} already done)" in rerun.stdout
            and not leftovers
        ):
            case.passed += 1
            case.same(_same_outputs(outputs, reference))
        else:
            case.notes.append(
                f"try {case.tries}: rc {rerun.returncode}, {finished} done at the kill, "
                f"leftovers {leftovers}, {rerun.stderr[-300:]}"
            )


def _ctrl_c_pipeline() -> str:
    """The kill cases' pipeline (``tests/_reliability.KILL_PIPELINE``: a small grid on
    Ray, then Dask), named for this case."""
    import _reliability as rel

    return rel.KILL_PIPELINE.replace('name = "kill"', 'name = "ctrl-c"')


def _session_processes(sid: int) -> list:
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        with contextlib.suppress(psutil.Error, ProcessLookupError, OSError):
            if os.getsid(proc.info["pid"]) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.info["pid"])
    return found


def fault_ctrl_c(case: Case, args, work: Path) -> None:
    """``elmscale run`` (local Ray for the grid's pairs, local Dask for scoring) interrupted
    in the Ray phase or in the Dask phase, alternately."""
    import pyarrow.parquet as pq

    from elmscale.data import write_generated_parquet

    score = write_generated_parquet(work / "score", 2_000_000, rows_per_file=500_000)
    pipeline = work / "ctrl-c.toml"
    pipeline.write_text(
        _ctrl_c_pipeline().format(train=work / "train", score=score, rows=3000, runs=work / "runs")
    )
    phases = ["started a local Ray", "started a local Dask cluster"]
    for k in range(args.repeat):
        case.tries += 1
        phase = phases[k % 2]
        runs = work / "runs"
        before = set(runs.glob("*")) if runs.exists() else set()
        process = subprocess.Popen(
            [*ELMSCALE, "run", pipeline],
            env=CLEAN_ENV,
            start_new_session=True,  # its own process group, as a terminal's job
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:

            def in_phase():
                new = set(runs.glob("*")) - before if runs.exists() else set()
                logs = [d / "run.log" for d in new if (d / "run.log").exists()]
                return any(phase in log.read_text() for log in logs)

            reached = _wait_for(in_phase, 300, every=0.05)
            time.sleep(1.0)  # into the phase's work
            started = _session_processes(process.pid)
            os.killpg(process.pid, signal.SIGINT)
            out, err = process.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            out, err = process.communicate(timeout=60)
            case.notes.append(f"try {case.tries}: no exit within 120 s of Ctrl-C")
            continue
        gone = _wait_for(lambda: not _session_processes(process.pid), 60, every=0.2)
        left = _session_processes(process.pid)
        for pid in left:  # orphans: reported, then ended
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run_dir = next(iter(set(runs.glob("*")) - before), None)
        partial = []
        if run_dir is not None:
            partial = [p.name for p in run_dir.rglob(".*")]
            if (run_dir / "metrics.json").exists():
                partial.append("metrics.json (the run did not stop)")
            for scored in (run_dir / "scores").glob("*.parquet"):
                source = score / scored.name
                if (
                    pq.ParquetFile(scored).metadata.num_rows
                    != pq.ParquetFile(source).metadata.num_rows
                ):
                    partial.append(scored.name)
        # elmscale's own last word; Dask may log errors of operations in flight at shutdown
        last = (err.strip().splitlines() or [""])[-1]
        if "Traceback" in err:
            case.notes.append(f"try {case.tries}: Dask logged errors of work in flight at shutdown")
        ok = (
            reached
            and process.returncode == 130
            and last == "elmscale: interrupted"
            and gone
            and not partial
            and len(started) > 3
        )
        if ok:
            case.passed += 1
        else:
            case.notes.append(
                f"try {case.tries} ({phase}): phase reached {reached}, rc {process.returncode}, "
                f"{len(started)} processes at the signal, left {left}, partial {partial}, "
                f"stderr {err.strip()[-300:]!r}"
            )
        case.notes.append(
            f"try {case.tries}: {len(started)} processes in the run's group at Ctrl-C ({phase})"
        )


# -- load -------------------------------------------------------------------------------------


def _peak_tree_rss(process, every: float = 0.1) -> float:
    """Peak summed RSS (MB) of ``process`` and its descendants until it exits."""
    import psutil

    root = psutil.Process(process.pid)
    peak = 0.0
    while process.poll() is None:
        total = 0
        with contextlib.suppress(psutil.Error):
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += proc.memory_info().rss
        peak = max(peak, total / 2**20)
        time.sleep(every)
    return peak


def _rows(folder: Path) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in sorted(folder.glob("*.parquet")))


def load_score_rows(case: Case, args, work: Path) -> None:
    from elmscale import ELMClassifier
    from elmscale.data import generate_classification, write_generated_parquet
    from elmscale.io.model_files import save

    # the reference is a tenth (CI: a third; below ~1M rows the allocator's pools are still
    # growing: 345 MB at 300k rows, 401 at 1M, 439-471 at 3M-10M, measured here)
    small, big = (1_000_000, 3_000_000) if args.quick else (10_000_000, 100_000_000)
    train = generate_classification(20_000, n_features=8, random_state=0)
    model = ELMClassifier(hidden="sigmoid", n_hidden=64, random_state=0).fit(train.X, train.y)
    model_path = save(model, work / "model.elm", features=[f"f{j + 1}" for j in range(8)])
    runs = []
    for rows in (small, big):
        start = time.perf_counter()
        data = write_generated_parquet(
            work / f"rows-{rows}", rows, rows_per_file=min(rows, 1_000_000)
        )
        made = time.perf_counter() - start
        out = work / f"scored-{rows}"
        case.tries += 1
        start = time.perf_counter()
        process = subprocess.Popen(
            [*ELMSCALE, "score", model_path, data, out, "--quiet"],
            env=CLEAN_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        peak = _peak_tree_rss(process)
        _, err = process.communicate(timeout=60)
        seconds = time.perf_counter() - start
        rows_in, rows_out = _rows(data), _rows(out)
        runs.append((rows, peak, seconds))
        ok = process.returncode == 0 and rows_in == rows_out == rows
        case.passed += ok
        case.notes.append(
            f"{rows:,} rows: generated in {made:.0f} s, scored in {seconds:.1f} s "
            f"({rows / seconds / 1e6:.2f} M rows/s), peak RSS {peak:.0f} MB, "
            f"rows in {rows_in:,} = out {rows_out:,}" + ("" if ok else f"; FAILED {err[-300:]}")
        )
        for path in (data, out):  # disk back before the next size
            for f in path.glob("*"):
                f.unlink()
            path.rmdir()
    ratio = runs[1][1] / runs[0][1]
    case.notes.append(f"peak RSS {runs[1][0]:,} rows / {runs[0][0]:,} rows = {ratio:.2f}x")
    if ratio > 1.3:
        case.passed -= 1
        case.notes.append("memory not flat (> 1.3x)")


def load_two_scores(case: Case, args, work: Path) -> None:
    """Two ``elmscale score`` runs into one folder: started together (whichever takes the
    folder scores; the other is refused, or finds every file done), or the second started
    once the first has written a file (it must be refused while the first runs).  Either
    way every file is scored by exactly one run and equals the reference."""
    n_files = 8
    # the first must outlast the second's start (its imports take seconds): with 250,000
    # rows a file, a CI-size run on 2026-12-02 found the first done before the second
    # started (codes [0, 0]); 1,000,000 rows a file: the case takes 28 s
    model, inputs = _scoring_inputs(work, n_files, 1_000_000)
    reference = work / "reference"
    _reference_scores(model, inputs, reference)

    def start(outputs):
        return subprocess.Popen(
            _score_argv(model, inputs, outputs, "--batch-rows", "2000"),
            env=CLEAN_ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    for k in range(args.repeat):
        case.tries += 1
        outputs = work / f"both-{k}"
        staggered = k % 2 == 0
        first = start(outputs)
        first_running = None
        if staggered:
            _wait_for(lambda: list(outputs.glob("*.parquet")), 300, every=0.005)
            second = start(outputs)
            second.wait(300)
            first_running = first.poll() is None
        else:
            second = start(outputs)
        results = [(*p.communicate(timeout=300), p.returncode) for p in (first, second)]
        codes = [code for _, _, code in results]
        scored = sum(
            int(out.split(" into ")[1].split()[0]) for out, _, code in results if code == 0
        )
        refused = [err for _, err, code in results if code != 0]
        clear = all(
            str(outputs) in err and "writing into this folder now" in err and "Traceback" not in err
            for err in refused
        )
        expected = [[0, 1]] if staggered else [[0, 1], [1, 0], [0, 0]]
        ok = (
            codes in expected
            and scored == n_files
            and clear
            and not list(outputs.glob(".*"))
            and first_running is not False
        )
        how = "second started after the first's first file" if staggered else "started together"
        if ok:
            case.passed += 1
            case.same(_same_outputs(outputs, reference))
            case.notes.append(
                f"try {case.tries} ({how}): exit codes {codes}, {scored} files, each scored once"
            )
        else:
            case.notes.append(
                f"try {case.tries} ({how}): codes {codes}, scored {scored}, first still running "
                f"{first_running}, {refused}"
            )


def load_ray_grid(case: Case, args, work: Path) -> None:
    from elmscale import ELMClassifier
    from elmscale.data import generate_classification
    from elmscale.distributed import ray_tasks
    from elmscale.model_selection import GridSearchCV

    _ray()
    n_pieces = 500 if args.quick else 5000
    folds = 5
    data = generate_classification(100, n_features=4, random_state=0)
    grid = {"C": [1.0], "random_state": list(range(n_pieces // folds))}
    seen: list = []
    real = ray_tasks.iter_tasks

    def counted(*a, **k):  # the real generator, each result's index noted
        for index, result in real(*a, **k):
            seen.append(index)
            yield index, result

    def search(ray_address):
        return GridSearchCV(
            ELMClassifier(n_hidden=5), grid, cv=folds, ray_address=ray_address, refit=False
        ).fit(data.X, data.y)

    here = search(None)
    for _ in range(1):  # one long run: the pieces are its tries
        case.tries += 1
        seen.clear()
        ray_tasks.iter_tasks = counted
        try:
            start = time.perf_counter()
            on_ray = search("auto")
            seconds = time.perf_counter() - start
        finally:
            ray_tasks.iter_tasks = real
        once = sorted(seen) == list(range(n_pieces)) and on_ray.n_pieces_ == n_pieces
        splits = [on_ray.cv_results_[f"split{k}_test_score"] for k in range(folds)]
        complete = all(np.isfinite(s).all() and len(s) == n_pieces // folds for s in splits)
        case.passed += once and complete
        case.same(
            all(
                np.array_equal(
                    on_ray.cv_results_[f"split{k}_test_score"],
                    here.cv_results_[f"split{k}_test_score"],
                )
                for k in range(folds)
            )
        )
        case.notes.append(
            f"try {case.tries}: {len(seen):,} results for {n_pieces:,} pieces "
            f"({len(set(seen)):,} distinct) in {seconds:.1f} s"
        )


# -- bad input (hypothesis) ----------------------------------------------------------------------


def _fuzz_cases(examples: int):
    """(name, property) pairs: each property runs ``examples`` hypothesis examples and
    returns a list of the outcomes."""
    import _reliability as rel
    import test_reliability as t
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    fuzz = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    folder = Path(tempfile.mkdtemp(prefix="elmscale-fuzz-"))
    model = rel.make_model_case(folder / "model")
    pipelines = folder / "pipelines"
    pipelines.mkdir()
    rel.pipeline_folder(pipelines, model)

    def model_files(outcomes):
        @fuzz
        @given(
            kind=st.sampled_from(["truncated", "bit-flipped", "outside", "huge", "newer", "meta"]),
            data=st.data(),
        )
        def prop(kind, data):
            raw = model.raw
            if kind == "truncated":
                damaged = rel.truncated(raw, data.draw(st.integers(0, 10**6)))
            elif kind == "bit-flipped":
                flips = data.draw(
                    st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1)
                )
                damaged = rel.bit_flipped(raw, flips)
            elif kind == "outside":
                name = data.draw(st.sampled_from(["../e", "/tmp/e", "a/../../e", "..\\e", "C:/e"]))
                damaged = rel.with_outside_member(raw, name, data.draw(st.booleans()))
            elif kind == "huge":
                shape = data.draw(st.lists(st.integers(10**3, 10**12), min_size=1, max_size=3))
                if int(np.prod(shape, dtype=object)) < 10**9:
                    shape = [10**12]
                damaged = rel.with_huge_array(raw, tuple(shape))
            elif kind == "newer":
                damaged = rel.newer_version(raw, data.draw(st.integers(2, 10**9)))
            else:
                metadata = json.loads(rel.zip_members(raw)["metadata.json"])
                where = data.draw(st.sampled_from(rel.metadata_paths(metadata)))
                value = data.draw(t.JSON_VALUES)
                damaged = rel.with_metadata(raw, lambda m: rel.replaced_at(m, where, value))
            outcomes.append(f"{kind}: {rel.check_model_file(model, damaged, 'fuzz')}")

        prop()

    def pipeline_files(outcomes):
        @fuzz
        @given(
            changes=st.lists(st.tuples(t.KEYS, t.TOML_VALUES), min_size=1, max_size=4),
            text=st.one_of(st.none(), st.text(max_size=200)),
        )
        def prop(changes, text):
            if text is None:
                text = rel.mutated_pipeline(pipelines, changes)
            outcomes.append(rel.check_pipeline_file(pipelines, text, "fuzz"))

        prop()

    def data_files(outcomes):
        @fuzz
        @given(
            kinds=st.lists(st.sampled_from(rel.COLUMN_KINDS), min_size=4, max_size=4),
            n_rows=st.sampled_from([0, 1, 7, 40, 500]),
            corruption=st.sampled_from(rel.CORRUPTIONS),
            where=st.integers(0, 10**6),
            csv=st.booleans(),
        )
        def prop(kinds, n_rows, corruption, where, csv):
            verdict = rel.check_scoring_input(model, kinds, n_rows, corruption, where, csv, "fz")
            outcomes.append(f"{'csv' if csv else 'parquet'} {corruption}: {verdict}")

        prop()

    return [
        ("model files (cut, flipped, outside, huge, newer, crafted)", model_files),
        ("pipeline files (random keys / values, random text)", pipeline_files),
        ("Parquet / CSV files (types, nulls, empty, corrupt)", data_files),
    ]


def fuzz_section(args, cases: list) -> None:
    import collections

    for name, prop in _fuzz_cases(args.examples):
        case = Case(f"fuzz: {name}", "fuzz")
        cases.append(case)
        outcomes: list = []
        start = time.perf_counter()
        try:
            prop(outcomes)
            case.passed = len(outcomes)
        except BaseException as exc:  # the falsifying example: reported, the run goes on
            case.notes.append("".join(traceback.format_exception_only(exc))[-600:])
            case.passed = len(outcomes) - 1
        case.tries = len(outcomes)
        case.seconds = time.perf_counter() - start
        counts = collections.Counter(o.split(":")[-1].strip() for o in outcomes)
        case.notes.append(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
        _print_row(case)


# -- security ---------------------------------------------------------------------------------


def security_section(args, cases: list) -> None:
    import _reliability as rel

    start = time.perf_counter()
    report = rel.probe_local_clusters(ray=True, try_unauthenticated=not args.quick)
    seconds = time.perf_counter() - start
    dask = Case("security: local Dask cluster listens on 127.0.0.1 only", "security")
    dask.tries = len(report["dask"])
    dask.passed = sum(rel.is_loopback(entry[2]) for entry in report["dask"])
    dask.seconds = seconds
    dask.notes.append(f"{dask.tries} listening sockets, {dask.passed} on loopback")
    # every listening socket of the local Ray's processes (GCS, raylet, core workers,
    # dashboard agent, runtime env agent), started by elmscale's start_local_ray
    ray_listen = Case("security: local Ray listens on 127.0.0.1 only", "security")
    ray_listen.tries = len(report["ray"])
    ray_listen.passed = sum(rel.is_loopback(entry[2]) for entry in report["ray"])
    ray_listen.seconds = seconds
    beyond = rel.ray_beyond_loopback(report)
    servers = sorted({rel.ray_server_name(report, entry) for entry in report["ray"]})
    ray_listen.notes.append(
        f"{ray_listen.tries} listening sockets, {ray_listen.passed} on loopback "
        f"(node address {report.get('ray_node_ip')}): {', '.join(servers)}"
    )
    if beyond and all(known for _, known in beyond):
        # only servers Ray's options cannot narrow (rel.RAY_LOOPBACK_LIMITS, each with
        # why): a known limit, guarded by the token below
        ray_listen.status = "limit"
    for line, known in beyond:
        ray_listen.notes.append(("limit: " if known else "beyond loopback: ") + line)
    auth = Case("security: Ray token authentication on", "security")
    auth.tries = 1 + ("unauthenticated_client_refused" in report)
    auth.passed = int(report["ray_token_auth"]) + int(
        report.get("unauthenticated_client_refused", False)
    )
    if "unauthenticated_client_refused" in report:
        auth.notes.append(
            "a client with a wrong token refused: "
            f"{report['unauthenticated_client_refused']} ({report['unauthenticated_client_error']})"
        )
    files = Case("security: a model file reads / writes nothing outside itself", "security")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        case = rel.make_model_case(Path(folder))
        try:
            files.tries = rel.model_file_touches_only_itself(case)
            files.passed = files.tries
        except AssertionError as exc:
            files.tries, files.notes = 6, [str(exc)[:300]]
    files.seconds = time.perf_counter() - start
    for c in (dask, ray_listen, auth, files):
        cases.append(c)
        _print_row(c)


# -- kill: a command stopped or killed, and what it leaves -----------------------------------

KILL_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
KILL_CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGKILL: -9}
#: seconds after launch that count as start-up (imports, data loading, clusters starting)
STARTUP_DELAY = 1.0
#: processes known to outlive a SIGKILLed command by more than 10 s, and why
KILL_LIMITS = {
    "ray::DashboardAgent": "Ray's agents see the raylet gone within 2 s, then wait up to "
    "60 s (hard-coded) to report it to the GCS, which is gone too",
    "ray::RuntimeEnvAgent": "as the dashboard agent",
}
KILL_QUICK = {("reproduce", signal.SIGKILL, "mid-work"), ("score", signal.SIGTERM, "mid-work")}
KILL_HEADER = (
    f"{'command':<10} {'signal':<8} {'when':<9} {'at signal':>9} {'left 10 s':>9} "
    f"{'gone (s)':>8} {'exit':>5}  rerun"
)


@dataclass
class KillRow:
    command: str
    signal: str
    when: str
    at_signal: int = 0
    left: int = 0
    gone_s: float | None = None
    code: int | None = None
    rerun: str = ""

    def line(self) -> str:
        gone = "-" if self.gone_s is None else f"{self.gone_s:.1f}"
        return (
            f"{self.command:<10} {self.signal:<8} {self.when:<9} {self.at_signal:>9} "
            f"{self.left:>9} {gone:>8} {str(self.code):>5}  {self.rerun}"
        )


def _kill_try(case: Case, row: KillRow, name: str, sig, when: str, folder: Path, args) -> None:
    import _reliability as rel

    command = rel.kill_commands(folder, full_rerun=not args.quick)[name]
    startup = when == "start-up"
    stopped = rel.stop_command(
        command.argv,
        sig,
        ready=None if startup else command.ready,
        delay=STARTUP_DELAY if startup else command.delay,
        env=command.env,
        wait_gone=0 if args.quick else 70,
    )
    row.at_signal, row.left, row.code = len(stopped.at_signal), len(stopped.left), stopped.code
    row.gone_s = stopped.gone_s
    partial = command.partial()
    # a signal before the command's handler is in place ends it as the default action does
    codes = {KILL_CODES[sig]} | ({-int(sig)} if startup else set())
    finished = stopped.code == 0  # it ended before the signal (start-up: a fast command)
    problems = []
    if not stopped.ready:
        problems.append("never reached its work")
    if stopped.code not in codes and not (startup and finished):
        problems.append(f"exit {stopped.code}, expected {sorted(codes)}: {stopped.err[-300:]!r}")
    if partial:
        problems.append(f"half-written: {partial}")
    said = {"elmscale: interrupted", "elmscale: terminated"} & set(stopped.err.splitlines())
    if sig != signal.SIGKILL and stopped.code in (130, 143) and not said:
        problems.append("no 'elmscale: interrupted / terminated': " + stopped.err[-400:])
    if "Traceback" in stopped.err and sig != signal.SIGKILL:
        # as in the Ctrl-C fault case: Dask may log errors of its tasks in flight at
        # shutdown, and Python reports an interrupt raised in a ctypes callback (numba's
        # compiler) as ignored; any other traceback is the command's own
        dask_only = "distributed" in stopped.err and said
        ignored = "Exception ignored on calling ctypes callback" in stopped.err and said
        if dask_only or ignored:
            case.notes.append(
                "Dask logged errors of tasks in flight at shutdown"
                if dask_only
                else "the interrupt landed in a ctypes callback of numba's compiler (reported)"
            )
        else:
            problems.append("a traceback: " + stopped.err[-400:])
    lingering = stopped.left
    known = lingering and all(
        any(line.startswith(k) for k in KILL_LIMITS) for line in lingering.values()
    )
    if lingering:
        how = f"gone {stopped.gone_s:.0f} s after" if stopped.gone_s else "still there"
        problems.append(f"{len(lingering)} left after 10 s ({how}): {sorted(lingering.values())}")
    again = rel.rerun(command)
    verdict = command.check(again)
    row.rerun = verdict[:60]
    rerun_ok = again.code == 0 and not verdict.startswith("failed:")
    if not rerun_ok:
        problems.append(f"rerun: {verdict}")
    if known and len(problems) == 1:  # only processes Ray's options cannot tie
        case.status = "limit"
        for line in sorted(set(lingering.values())):
            why = next(v for k, v in KILL_LIMITS.items() if line.startswith(k))
            case.notes.append(f"limit: {line.split()[0]}: {why}")
    elif not problems:
        case.passed += 1
    case.notes.extend(problems)
    case.notes.append(
        f"{row.at_signal} processes at the signal, {row.left} left after 10 s, exit {row.code}; "
        f"rerun: {verdict}"
    )


def kill_section(args, cases: list) -> list:
    """The kill matrix; returns its table's lines."""
    import _reliability as rel

    rows = []
    names = ["reproduce", "run", "run-dask", "score", "train", "warmup"]
    with tempfile.TemporaryDirectory(prefix="elmscale-kill-") as work:
        for name in names:
            for sig in KILL_SIGNALS:
                for when in ("start-up", "mid-work"):
                    if args.quick and (name, sig, when) not in KILL_QUICK:
                        continue
                    title = f"kill: {name} {sig.name} {when}"
                    if args.match and args.match not in title:
                        continue
                    case = Case(title, "kill")
                    row = KillRow(name, sig.name, when)
                    cases.append(case)
                    rows.append(row)
                    start = time.perf_counter()
                    for _ in range(args.repeat if not args.quick else 1):
                        case.tries += 1
                        try:
                            _kill_try(case, row, name, sig, when, Path(work), args)
                        except Exception as exc:  # a broken try fails the case, not the run
                            case.status = "error"
                            case.notes.append(f"{type(exc).__name__}: {exc}"[:600])
                            traceback.print_exc()
                    case.seconds = time.perf_counter() - start
                    _print_row(case)
    lines = [
        f"processes left {rel.GRACE_S:g} s after the signal (session of the command):",
        KILL_HEADER,
        *(r.line() for r in rows),
    ]
    print("\n".join(lines), flush=True)
    return lines


# -- running --------------------------------------------------------------------------------


_RAY: dict = {}


def _ray():
    from elmscale.distributed.connect import connect_ray

    connect_ray("local", num_cpus=2, include_dashboard=False, log_to_driver=False)


FAULTS = [
    ("fault: Dask worker killed during a Gram reduction", fault_dask_gram),
    ("fault: Dask worker killed during a Newton pass", fault_dask_newton),
    ("fault: Dask worker killed during divide and conquer", fault_dask_divide),
    ("fault: Ray worker killed during a grid", fault_ray_grid),
    ("fault: Ray worker killed during one-vs-one pairs", fault_ray_pairs),
    ("fault: elmscale score killed, then rerun", fault_score_killed),
    ("fault: elmscale run interrupted by Ctrl-C", fault_ctrl_c),
]
LOAD = [
    ("load: elmscale score over many rows", load_score_rows),
    ("load: two elmscale score runs into one folder", load_two_scores),
    ("load: a grid of many pieces on Ray", load_ray_grid),
]


def _run_cases(section: str, table, args, cases: list) -> None:
    for name, fn in table:
        case = Case(name, section)
        cases.append(case)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="elmscale-stress-") as work:
            try:
                fn(case, args, Path(work))
            except BaseException as exc:  # a case that breaks is a failed case, not a stop
                if isinstance(exc, KeyboardInterrupt):
                    raise
                case.status = "error"
                case.notes.append(f"{type(exc).__name__}: {exc}"[:600])
                traceback.print_exc()
        case.seconds = time.perf_counter() - start
        _print_row(case)


HEADER = f"{'case':<62} {'tries':>6} {'passed':>6} {'identical':>9} {'seconds':>8}  status"


def _row(case: Case) -> str:
    identical = "-" if case.identical is None else str(case.identical)
    status = case.status or ("ok" if case.ok() else "FAILED")
    return (
        f"{case.name:<62} {case.tries:>6} {case.passed:>6} {identical:>9} "
        f"{case.seconds:>8.1f}  {status}"
    )


def _print_row(case: Case) -> None:
    print(_row(case), flush=True)
    for note in case.notes:
        print(f"    {note}", flush=True)


def _matching(table, text):
    return [entry for entry in table if text is None or text in entry[0]]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI size")
    parser.add_argument("--only", choices=SECTIONS, action="append", help="a section (repeatable)")
    parser.add_argument("--repeat", type=int, default=None, help="tries per fault / load case")
    parser.add_argument(
        "--examples", type=int, default=None, help="hypothesis examples per fuzz case"
    )
    parser.add_argument("--out", type=Path, help="write the table to this file too")
    parser.add_argument(
        "--match", help="only the fault / load / kill cases whose name contains this"
    )
    parser.add_argument("--newton-rows", type=int, help="rows of the Newton fault case")
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.examples is None:
        args.examples = 25 if args.quick else 500
    sections = args.only or list(SECTIONS)
    # CI size: the cases that need no Ray of their own (the security probe starts one)
    quick = {
        "fault: Dask worker killed during a Gram reduction",
        "fault: elmscale score killed, then rerun",
        "load: elmscale score over many rows",
        "load: two elmscale score runs into one folder",
    }
    cases: list[Case] = []
    kill_lines: list[str] = []
    start = time.perf_counter()
    print(
        f"reliability matrix ({'quick' if args.quick else 'full'}): {', '.join(sections)}; "
        f"{args.repeat} tries per fault / load case, {args.examples} examples per fuzz case"
    )
    print(HEADER, flush=True)
    try:
        if "fuzz" in sections:
            fuzz_section(args, cases)
        if "security" in sections:
            security_section(args, cases)
        if "faults" in sections:
            faults = [f for f in FAULTS if not args.quick or f[0] in quick]
            _run_cases("faults", _matching(faults, args.match), args, cases)
        if "load" in sections:
            load = [f for f in LOAD if not args.quick or f[0] in quick]
            _run_cases("load", _matching(load, args.match), args, cases)
        if "kill" in sections:
            kill_lines = kill_section(args, cases)
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    total = time.perf_counter() - start
    failed = [c for c in cases if not c.ok()]
    lines = [HEADER, *(_row(c) for c in cases)]
    summary = (
        f"{len(cases)} cases, {sum(c.tries for c in cases):,} tries, {len(failed)} failed, "
        f"{total:.0f} s"
    )
    print(summary)
    if args.out:
        notes = [f"{c.name}: {n}" for c in cases for n in c.notes]
        text = [" ".join(sys.argv), *lines, summary, "", *kill_lines, "", *notes]
        args.out.write_text("\n".join(text) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
