"""``elmscale run``: carry out a pipeline file on this machine or on a cluster.

Where the work goes (first found wins, for Dask and for Ray separately): the command's
flag (``--scheduler`` / ``--scheduler-file``, ``--ray-address``), then the environment
(``DASK_SCHEDULER_ADDRESS``, ``RAY_ADDRESS``), then the file's ``[compute]`` section.
With neither a Dask nor a Ray address, a local Dask cluster and a local Ray sized to the
machine are started when the run first needs them, and shut down at the end (runs in
threads of one process share the local Ray: the last to end shuts it down, and only the
processes that Ray started are ended).  Given only one of the two, the other's work runs in
this process.

* Dask does the Parquet data plane: the scaler's statistics, the unified ELM's Grams and
  its one-pass C path (random nodes on Parquet data), and scoring files.
* Ray does the grid search pieces and the sparse ELM's one-vs-one pairs.

Each run writes ``<output.dir>/<run.name>-<UTC time>/``: ``pipeline.json`` (the resolved
configuration), ``metrics.json``, ``model.elm``, ``cv_results.csv`` / ``.json`` and
``cv_results.png`` (task cv: the mean CV score over the grid, a curve against C, a line per
value of a second parameter or a heatmap), ``scores/`` (when ``data.score`` is set) and
``run.log``.

Data and output paths may be fsspec URLs (``s3://bucket/runs``), with the options of the
file's ``[storage]`` (``elmscale.app.pipeline.storage_options``).  A run whose
``output.dir`` is a URL writes its files in a local folder and puts them into the store when
it ends (failed or not); its scores go to the store as they are written.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import glob
import json
import logging
import os
import queue
import re
import signal
import threading
import time
from pathlib import Path

import numpy as np

from elmscale import registry
from elmscale.app.pipeline import GENERATE, SCHEMA, Pipeline, make_estimator, storage_options
from elmscale.core.files import atomic_write
from elmscale.core.pipelines import final_estimator
from elmscale.data.columns import PARQUET_SUFFIXES
from elmscale.data.storage import Location, locate

__all__ = ["Compute", "resolve_compute", "run_pipeline"]

log = logging.getLogger("elmscale.run")


def resolve_compute(
    pipeline: Pipeline | None,
    *,
    scheduler=None,
    scheduler_file=None,
    ray_address=None,
    tls: dict | None = None,
) -> dict:
    """Dask and Ray targets after precedence: flag > environment > file > local.

    ``pipeline`` None (``elmscale score``, which has no file): flag > environment > none.
    ``tls``: the ``--tls-ca-file`` / ``--tls-cert`` / ``--tls-key`` flags (``ca_file``,
    ``cert``, ``key``), each before the file's ``tls_*`` key; unset, Dask's own
    configuration gives them (its ``DASK_DISTRIBUTED__COMM__TLS__...`` variables).
    """
    compute = pipeline["compute"] if pipeline is not None else SCHEMA["compute"]
    flags = tls or {}
    tls_files = {
        name: flags.get(name) or compute[f"tls_{name}"] for name in ("ca_file", "cert", "key")
    }
    dask_address = scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or compute["scheduler"]
    dask_file = scheduler_file or (None if dask_address else compute["scheduler_file"])
    ray = ray_address or os.environ.get("RAY_ADDRESS") or compute["ray_address"]
    local = not (dask_address or dask_file or ray)
    return {
        "dask": dask_address or (f"scheduler file {dask_file}" if dask_file else None),
        "dask_address": dask_address,
        "dask_file": dask_file,
        "ray": ray,
        "local": local,
        "tls": tls_files,
    }


@contextlib.contextmanager
def _sigint_ignored():
    """SIGINT ignored while processes are started (they inherit it: a Ctrl-C sent to the
    terminal's whole process group then stops only this process, which shuts them down in
    order instead of each dying with a traceback).  A no-op off the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class Compute:
    """Dask client and Ray address for a run, connected or started on first use."""

    def __init__(self, target: dict, workers: int | None, threads_per_worker: int):
        from elmscale.core.threads import available_cores

        self.target = target
        self.workers = workers or max(1, available_cores() // threads_per_worker)
        self.threads_per_worker = threads_per_worker
        self._client = None
        self._cluster = None
        self._holds_local_ray = False
        self.progress = False  # progress bars for the run's steps (run_pipeline sets it)

    def dask(self):
        """A ``distributed.Client``, or None when this run has no Dask."""
        if self._client is not None:
            return self._client
        from distributed import Client

        from elmscale.distributed.connect import connect_dask, tls_security
        from elmscale.distributed.local_cluster import start_local_cluster

        # a checked target carries its security (the command line built it, once)
        security = self.target.get("security") or tls_security(**self.target["tls"])
        if self.target["dask_address"]:
            self._client = connect_dask(self.target["dask_address"], security=security)
        elif self.target["dask_file"]:
            self._client = connect_dask(scheduler_file=self.target["dask_file"], security=security)
        elif self.target["local"]:
            with _sigint_ignored():  # Ctrl-C reaches the whole terminal job: the workers
                # leave it to this process, which closes the cluster on its way out
                self._cluster = start_local_cluster(
                    self.workers, self.threads_per_worker, dashboard_address=None
                )
            self._client = Client(self._cluster)
            log.info(
                "started a local Dask cluster: %d workers x %d thread(s)",
                self.workers,
                self.threads_per_worker,
            )
        return self._client

    def ray(self) -> str | None:
        """A Ray address for ``ray_address=`` arguments, or None when this run has no Ray."""
        from elmscale.distributed.connect import connect_ray

        if self.target["ray"]:
            connect_ray(self.target["ray"])
            return "auto"
        if self.target["local"]:
            if not self._holds_local_ray:
                self._holds_local_ray = _LOCAL_RAY.hold(self.workers * self.threads_per_worker)
            return "auto"
        return None

    def close(self):
        if self._client is not None:
            self._client.close()
        if self._cluster is not None:
            self._cluster.close()
        if self._holds_local_ray:
            self._holds_local_ray = False
            _LOCAL_RAY.release()


class _LocalRay:
    """The local Ray of this process's runs.  Ray is one per process (``ray.init``): runs
    in threads of one process share the one that the first of them started, and the last
    of them to close shuts it down (the first to close would shut it down under the
    others).  A Ray that the caller started is used as it is and left running."""

    def __init__(self):
        self._lock = threading.Lock()
        self._users = 0
        self._session = ""  # its session folder: what names its processes (_session_processes)
        self._keeper: threading.Event | None = None  # set: the thread that started it ends

    def hold(self, num_cpus: int) -> bool:
        """Start the local Ray, or join the one a run here started; False when Ray is the
        caller's own (not ours to shut down)."""
        import ray

        with self._lock:
            if self._users:
                self._users += 1
                return True
            if ray.is_initialized():
                return False
            self._session = self._start(num_cpus)
            self._users = 1
        log.info("started a local Ray with %d CPUs (%s)", num_cpus, self._session)
        return True

    def _start(self, num_cpus: int) -> str:
        """``start_local_ray`` on a thread that lives until the Ray is shut down: Ray's
        servers are killed when the thread that started them ends (Linux's parent-death
        signal, which Ray sets, follows the starting thread, not the process), and a run's
        thread may end before the others' runs do.  The caller waits for it in Python, so
        a Ctrl-C during the start-up (``ray.init`` waits in C++ for its node, seconds to
        minutes) is raised at once: the Ray processes started so far are ended here
        (:func:`_abandon_start`) before the interrupt goes up."""
        from elmscale.core.lifeline import sigterm_kept
        from elmscale.distributed.connect import start_local_ray

        started: queue.Queue = queue.Queue()
        self._keeper = stop = threading.Event()
        before = {proc.pid for proc in _ray_processes()}

        def keep():
            try:
                started.put(
                    start_local_ray(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
                )
            except BaseException as exc:  # raised in the run's thread
                started.put(exc)
                return
            stop.wait()

        keeper = threading.Thread(target=keep, name="elmscale-local-ray", daemon=True)
        # (ray.init puts its C++ failure handler over SIGTERM's, in whichever thread it runs)
        with sigterm_kept():
            keeper.start()
            try:
                outcome = started.get()
            except BaseException:  # Ctrl-C or SIGTERM while Ray starts
                self._keeper = None
                stop.set()
                _abandon_start(keeper, before)
                raise
        if isinstance(outcome, BaseException):
            self._keeper = None
            raise outcome
        return outcome

    def release(self) -> None:
        """One run fewer; the last one shuts the Ray down and ends its leftover processes."""
        import ray

        with self._lock:  # (held throughout: a run starting meanwhile then starts a new one)
            self._users -= 1
            if self._users:
                return
            started = _session_processes(self._session)
            try:
                ray.shutdown()
                _end_leftovers(started)
            finally:
                if self._keeper is not None:
                    self._keeper.set()
                    self._keeper = None


_LOCAL_RAY = _LocalRay()


# seconds the Ray processes this run started get after ``ray.shutdown()`` before they are
# ended: its raylet's agents (DashboardAgent, RuntimeEnvAgent) notice their raylet's end by
# polling, and one still starting (its imports, on busy cores) noticed it only after 10 s or
# more (tests/test_signals.py, in full-suite runs)
RAY_LEFTOVER_GRACE_S = 2.0


def _session_processes(session: str) -> list:
    """The processes of the Ray session whose folder is ``session`` (``psutil.Process``
    objects): this process's descendants whose command line names the folder or a path in
    it (GCS, raylet, monitors, dashboard: the servers ``ray.init`` started here), and their
    descendants (the raylet's agents and workers, titled ``ray::``, whose command lines
    name nothing).  Another Ray's processes, though they too may descend from this process
    (a ``ray start`` it ran), name their own session's folder."""
    import psutil

    names = re.compile(rf"(?:^|[\s=]){re.escape(session.rstrip(os.sep))}(?:$|[\s{os.sep}])")
    found: dict = {}
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if proc.pid not in found and names.search(" ".join(proc.cmdline())):
                    found[proc.pid] = proc
                    found.update((child.pid, child) for child in proc.children(recursive=True))
    return list(found.values())


def _ray_processes() -> list:
    """This process's descendants that are Ray's (``ray::`` titles, or a program or script
    under the ``ray`` package: GCS, raylet, agents, monitors, workers), with their own
    descendants."""
    import psutil
    import ray

    package = os.path.dirname(ray.__file__) + os.sep
    found: dict = {}
    with contextlib.suppress(psutil.Error):
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                command = " ".join(proc.cmdline())
                if proc.pid not in found and (command.startswith("ray::") or package in command):
                    found[proc.pid] = proc
                    found.update((child.pid, child) for child in proc.children(recursive=True))
    return list(found.values())


# seconds a start-up given up (Ctrl-C during ``ray.init``) is watched for Ray processes still
# being started by the abandoned ``ray.init``, and those it started ended
RAY_ABANDON_S = 3.0


def _abandon_start(keeper: threading.Thread, before: set, watch: float = RAY_ABANDON_S) -> None:
    """A local Ray's start-up given up: SIGKILL the Ray processes started since (those not
    in ``before``: the GCS, the raylet and the raylet's agents, which would notice their
    raylet's end only a minute later), as long as ``keeper``'s ``ray.init`` may start more,
    up to ``watch`` s; then, if it got as far as initialising Ray here, shut it down."""
    import psutil
    import ray

    deadline = time.monotonic() + watch
    while True:
        for proc in _ray_processes():
            if proc.pid not in before:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        if not keeper.is_alive() or time.monotonic() >= deadline:
            break
        keeper.join(0.1)
    if not keeper.is_alive() and ray.is_initialized():
        with contextlib.suppress(Exception):
            ray.shutdown()


def _end_leftovers(processes, grace: float = RAY_LEFTOVER_GRACE_S) -> None:
    """End those of ``processes`` still alive ``grace`` s after a shutdown: SIGTERM, then
    SIGKILL for any alive after ``grace`` more (no local Ray process outlives the run)."""
    import psutil

    if not processes:
        return
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(alive, timeout=grace)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


# -- data ------------------------------------------------------------------------------


def _data_path(pipeline: Pipeline, key: str) -> str:
    """The path ``data.<key>`` is read from: a registered public file's URL becomes its
    cached copy (downloaded and checked the first time: :mod:`elmscale.data.public_data`),
    any other path or URL is read as it is.  The pipeline's config keeps the URL."""
    from elmscale.data.public_data import resolve

    return str(resolve(str(pipeline["data"][key])))


def _is_parquet(path: str, options: dict) -> bool:
    where = locate(path, options)
    if glob.has_magic(where.path):
        found = glob.glob(where.path) if where.is_local else where.fs.glob(where.path)
        return all(os.path.splitext(f)[1] in PARQUET_SUFFIXES for f in found)
    return where.suffix in PARQUET_SUFFIXES or where.is_dir()


def _generate(pipeline: Pipeline) -> None:
    from elmscale.data.synthetic import write_generated_parquet

    data, seed = pipeline["data"], pipeline["run"]["seed"]
    if not data["generate"]:
        return
    # the sub-keys' defaults are the pipeline schema's (test_rows unset: no test file)
    spec = {**{name: key.default for name, key in GENERATE.items()}, **data["generate"]}
    shape = {"n_features": spec["features"], "n_classes": spec["classes"]}
    for key, rows, offset in (
        ("train", spec["rows"], 0),
        ("test", spec["test_rows"] or 0, 1),
    ):
        if data[key] and rows:
            options = storage_options(pipeline, data[key])
            write_generated_parquet(
                data[key], rows, random_state=seed + offset, storage_options=options, **shape
            )


def _load_arrays(path: str, data: dict, options: dict, n_features=None):
    """``(X, y, feature names)`` of a whole file in memory (any format ``load`` reads)."""
    from elmscale.data.formats import detect_format, load
    from elmscale.data.parquet import open_parquet

    if _is_parquet(path, options):
        dataset = open_parquet(
            path, features=data["features"], label=data["label"], storage_options=options
        )
        X, y = dataset.read()
        return X, y, list(dataset.features)
    kw = {}
    where = locate(path, options)
    fmt = detect_format(where)
    if fmt == "libsvm":
        if n_features is not None:
            kw["n_features"] = n_features
    elif data["label"] is not None:
        kw["label"] = data["label"]
    loaded = load(where, **kw)
    X = loaded.X.toarray() if hasattr(loaded.X, "toarray") else loaded.X
    if fmt == "libsvm":
        return X, loaded.y, None
    names = list(loaded.feature_names)
    if data["features"] is not None:
        # the Parquet rule (a list of names, or a pattern) on a CSV / ARFF file's columns
        keep = _chosen_columns(names, data["features"], path)
        X, names = X[:, keep], [names[i] for i in keep]
    return X, loaded.y, names


def _chosen_columns(names: list[str], features, path: str) -> list[int]:
    """Positions of ``features`` (a list of names, or an ``fnmatch`` pattern) in ``names``;
    errors name the file and the column."""
    import fnmatch

    from elmscale.core.errors import DataError

    if isinstance(features, str):
        keep = [i for i, n in enumerate(names) if fnmatch.fnmatchcase(n, features)]
        if not keep:
            raise DataError(
                f"{path}: data.features={features!r} matches no feature column; expected a "
                f"pattern matching some of {names[:10]}{' ...' if len(names) > 10 else ''}"
            )
        return keep
    missing = [n for n in features if n not in names]
    if missing:
        raise DataError(f"{path}: feature column(s) {missing} not found among {names[:10]} ...")
    return [names.index(n) for n in features]


def _capabilities(estimator):
    """The registry's capabilities of ``estimator`` (a registered class, as every pipeline's
    is)."""
    found = registry.entry_for(estimator)
    if found is None:
        raise TypeError(f"{type(estimator).__name__} is not a registered estimator")
    return found.capabilities


def _uses_data_plane(path: str, estimator, options: dict) -> bool:
    """Whether ``estimator`` fits the Parquet data set ``path`` on Dask (random nodes), or
    the rows come into this process."""
    return _is_parquet(path, options) and _capabilities(estimator).fits_parquet(
        estimator.get_params(deep=False)
    )


def _metric(model, X, y) -> dict:
    from elmscale.distributed.units import metric_sums, metrics_from_sums

    return metrics_from_sums(metric_sums(model, X, y))


def _grid(pipeline: Pipeline) -> dict:
    grid = pipeline["search"]["grid"]
    if grid != "paper":
        return dict(grid)
    model = pipeline["model"]
    found = registry.entry(model["estimator"])
    paper = found.paper_grid(dict(model["params"]))
    if paper is None:
        raise ValueError(
            f'search.grid = "paper": {found.name} has no paper grid; give the '
            "grid as a table of lists"
        )
    return paper


# -- tasks -----------------------------------------------------------------------------


def _fit(pipeline: Pipeline, compute: Compute, run_dir: Path, metrics: dict):
    """Train (task train) or cross-validate then refit (task cv); returns the model and
    the feature names it was trained on."""
    from sklearn.pipeline import make_pipeline

    from elmscale.data.parquet import open_parquet
    from elmscale.data.scaling import Scaler
    from elmscale.distributed import dataset_ops
    from elmscale.model_selection.search import GridSearchCV

    data, run = pipeline["data"], pipeline["run"]
    estimator = make_estimator(pipeline["model"]["estimator"], pipeline["model"]["params"])
    if "random_state" in estimator.get_params() and estimator.random_state is None:
        estimator.set_params(random_state=run["seed"])
    task, train = run["task"], _data_path(pipeline, "train")
    options = storage_options(pipeline, train)
    start = time.perf_counter()
    # a cv task stays on the data plane only with a one-pass cross-validation there (the
    # random-node sparse ELM fits Parquet by Newton passes, but its grid search runs in memory)
    on_data_plane = _uses_data_plane(train, estimator, options) and (
        task != "cv"
        or _capabilities(estimator).cross_validates_parquet(estimator.get_params(deep=False))
    )
    if on_data_plane:
        client = compute.dask()
        dataset = open_parquet(
            train, features=data["features"], label=data["label"], storage_options=options
        )
        scaler = None
        if data["scale"]:
            scaler = dataset_ops.fit_scaler(dataset, client=client)
            dataset = dataset.scaled(scaler)
        if task == "cv":
            grid = _grid(pipeline)
            params = estimator.get_params(deep=False)
            if not _capabilities(estimator).cross_validates_parquet(params):
                raise ValueError(
                    f"{pipeline['model']['estimator']} has no one-pass "
                    "cross-validation on Parquet data; give in-memory data"
                )
            if set(grid) - {"C"}:
                raise ValueError(
                    f"search.grid {sorted(grid)}: on Parquet data the one-pass search varies C only"
                )
            from elmscale.model_selection import cross_validate_path

            result = cross_validate_path(
                estimator,
                dataset,
                grid["C"],
                n_folds=pipeline["search"]["folds"],
                scoring=pipeline["search"]["scoring"],
                fold_seed=run["seed"],
                client=client,
            )
            _write_cv(
                result.cv_results(),
                run_dir,
                metrics,
                {"C": result.best_C},
                float(result.mean_scores.max()),
            )
            model = result.best_estimator
        else:
            model = estimator.fit(dataset, client=client)
        metrics["train_rows"] = dataset.n_rows
        features = list(dataset.features)
        model = make_pipeline(scaler, model) if scaler is not None else model
    else:
        X, y, features = _load_arrays(train, data, options)
        if data["test_size"] is not None:
            X, y, held_out = _hold_out(X, y, data["test_size"], run["seed"])
            metrics["held_out"] = held_out
        scaler = Scaler().fit(X) if data["scale"] else None
        Xs = scaler.transform(X) if scaler is not None else X
        ray_address = compute.ray()
        if task == "cv":
            search = GridSearchCV(
                estimator,
                _grid(pipeline),
                cv=pipeline["search"]["folds"],
                scoring=pipeline["search"]["scoring"],
                random_state=run["seed"],
                ray_address=ray_address,
                progress=False,
            ).fit(Xs, y)  # the run's bars show it
            _write_cv(search.cv_results_, run_dir, metrics, search.best_params_, search.best_score_)
            model = search.best_estimator_
        elif ray_address and _capabilities(estimator).ray_fit:
            model = estimator.fit(Xs, y, ray_address=ray_address)
        else:
            model = estimator.fit(Xs, y)
        metrics["train_rows"] = int(len(y))
        model = make_pipeline(scaler, model) if scaler is not None else model
    metrics["seconds"]["fit"] = round(time.perf_counter() - start, 3)
    return model, features


def _hold_out(X, y, test_size, seed: int):
    """Split off ``test_size`` rows (a count or a fraction) at random; returns the
    training part and ``(X_test, y_test)``."""
    n = len(y)
    n_test = int(round(test_size * n)) if isinstance(test_size, float) else int(test_size)
    if not 1 <= n_test < n:
        raise ValueError(
            f"data.test_size = {test_size!r} leaves no training or test rows out of {n}"
        )
    order = np.random.default_rng(seed).permutation(n)
    train, test = order[: n - n_test], order[n - n_test :]
    return X[train], y[train], (X[test], y[test])


def _write_cv(cv_results: dict, run_dir: Path, metrics: dict, best_params, best_score):
    """``cv_results.csv`` / ``.json`` and, next to them, ``cv_results.png`` (the picture
    :func:`elmscale.io.reports.plot_cv_results` draws for the grid's shape); the files are
    listed in ``metrics["cv"]["files"]``."""
    from elmscale.io.reports import plot_cv_results, write_cv_results

    stem = run_dir / "cv_results"
    written = [
        write_cv_results(cv_results, stem.with_suffix(".csv")),
        write_cv_results(cv_results, stem.with_suffix(".json")),
        plot_cv_results(cv_results, stem.with_suffix(".png")),
    ]
    metrics["cv"] = {
        "best_params": {k: (v.item() if hasattr(v, "item") else v) for k, v in best_params.items()},
        "best_score": round(float(best_score), 6),
        "candidates": len(cv_results["mean_test_score"]),
        "files": [path.name for path in written],
    }
    log.info("cv results: %s", ", ".join(str(path) for path in written))


def _evaluate(pipeline: Pipeline, model, features, compute: Compute, metrics: dict):
    """Test metrics; a Parquet test set is scored where it lies (one task per unit)."""
    from elmscale.data.parquet import open_parquet
    from elmscale.distributed import dataset_ops

    data = pipeline["data"]
    if "held_out" in metrics:
        X, y = metrics.pop("held_out")
        metrics["test"] = _metric(model, X, y)
        return
    if not data["test"]:
        return
    test = _data_path(pipeline, "test")
    options = storage_options(pipeline, test)
    final = final_estimator(model)
    if _is_parquet(test, options):
        dataset = open_parquet(
            test,
            features=features or data["features"],
            label=data["label"],
            storage_options=options,
        )
        client = compute.dask() if _uses_data_plane(test, final, options) else None
        metrics["test"] = dataset_ops.evaluate(model, dataset, client=client)
    else:
        X, y, _ = _load_arrays(test, data, options, n_features=final.n_features_in_)
        metrics["test"] = _metric(model, X, y)


def _score(pipeline: Pipeline, model, features, compute: Compute, out_dir: Location, metrics: dict):
    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    data = pipeline["data"]
    if not data["score"]:
        return
    score = str(data["score"])
    jobs = plan_jobs(
        model,
        locate(score, storage_options(pipeline, score)),
        out_dir,
        features=features,
        id_columns=data["id_columns"],
        decision=pipeline["output"]["decision"],
    )
    client = compute.dask()
    ray_address = None if client is not None else compute.ray()
    summary = score_jobs(
        model, jobs, client=client, ray_address=ray_address, progress=compute.progress
    )
    metrics["scored"] = {k: summary[k] for k in ("files", "rows")}
    metrics["seconds"]["score"] = summary["seconds"]


def _new_run_dir(pipeline: Pipeline) -> tuple[Path, Location]:
    """``(the local folder the run writes in, where its files are kept)``: the same folder,
    or for an ``output.dir`` URL a new local folder and the run's folder in the store."""
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    output = str(pipeline["output"]["dir"])
    parent = locate(output, storage_options(pipeline, output))
    name, k = f"{pipeline['run']['name']}-{stamp}", 1
    while parent.child(name if k == 1 else f"{name}-{k}").exists():
        k += 1
    kept = parent.child(name if k == 1 else f"{name}-{k}")
    if kept.is_local:
        kept.local_path.mkdir(parents=True)
        return kept.local_path, kept
    import tempfile

    staging = Path(tempfile.mkdtemp(prefix="elmscale-run-")) / kept.name
    staging.mkdir()
    return staging, kept


def _keep_run_files(run_dir: Path, kept: Location) -> None:
    """A run in the store: put its local files there (the scores are there already) and
    remove the local folder."""
    import shutil

    from elmscale.data.storage import put_folder

    if kept.is_local:
        return
    try:
        put_folder(run_dir, kept)
    finally:
        shutil.rmtree(run_dir.parent, ignore_errors=True)


def _write_json(path: Path, value) -> None:
    text = json.dumps(value, indent=2, default=str) + "\n"
    atomic_write(path, lambda tmp: tmp.write_text(text))


def run_pipeline(
    pipeline: Pipeline,
    *,
    scheduler=None,
    scheduler_file=None,
    ray_address=None,
    tls: dict | None = None,
    target: dict | None = None,
    dry_run=False,
    echo=print,
    progress: bool = True,
) -> tuple[dict, Path | Location | None]:
    """Run a checked pipeline; returns ``(metrics, run directory)`` (a URL's
    :class:`~elmscale.data.storage.Location` when ``output.dir`` is one).

    ``progress``: a progress bar on stderr for every long step (pieces of the data plane's
    passes, grid pieces, one-vs-one pairs, rows scored).  ``tls``: the TLS files for a
    ``tls://`` scheduler (:func:`resolve_compute`).  ``target``: the compute target
    already resolved (and checked) by the caller, :func:`resolve_compute`'s, with its
    ``distributed.Security`` under ``"security"`` if it built one: used as it is, in place
    of ``scheduler``, ``scheduler_file``, ``ray_address`` and ``tls`` (give one or the
    other).
    """
    from elmscale.app.selection import describe_kept, kept_features
    from elmscale.distributed.executors import progress_bars
    from elmscale.io.model_files import load, save

    pipeline.check()
    if target is None:
        target = resolve_compute(
            pipeline,
            scheduler=scheduler,
            scheduler_file=scheduler_file,
            ray_address=ray_address,
            tls=tls,
        )
    elif scheduler or scheduler_file or ray_address or tls:
        raise TypeError(
            "run_pipeline: give a resolved target, or scheduler / scheduler_file / "
            "ray_address / tls, not both"
        )
    plan = {
        "pipeline": pipeline.path,
        "task": pipeline["run"]["task"],
        "dask": target["dask"] or ("local cluster" if target["local"] else "in process"),
        "ray": target["ray"] or ("local Ray" if target["local"] else "in process"),
    }
    if dry_run:
        echo(json.dumps({"plan": plan, "config": pipeline.config}, indent=2, default=str))
        return {"plan": plan}, None
    _generate(pipeline)
    run_dir, run_home = _new_run_dir(pipeline)
    handler = logging.FileHandler(run_dir / "run.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger("elmscale")
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    _write_json(run_dir / "pipeline.json", {"plan": plan, "config": pipeline.config})
    metrics = {
        "task": pipeline["run"]["task"],
        "estimator": pipeline["model"]["estimator"],
        "compute": plan,
        "seconds": {},
    }
    compute = Compute(
        target, pipeline["compute"]["workers"], pipeline["compute"]["threads_per_worker"]
    )
    start = time.perf_counter()
    compute.progress = progress
    try:
        with progress_bars(progress):
            log.info("run %s: %s", run_dir, plan)
            if pipeline["run"]["task"] == "score":
                from elmscale.io.model_files import saved_features

                model_path = str(pipeline["output"]["model"])
                options = storage_options(pipeline, model_path)
                model = load(model_path, storage_options=options)
                features = (
                    saved_features(model_path, storage_options=options)
                    or pipeline["data"]["features"]
                )
            else:
                model, features = _fit(pipeline, compute, run_dir, metrics)
                kept = kept_features(model, features)
                if kept is not None:
                    metrics["kept_features"] = kept
                    echo(describe_kept(kept, len(features)))
                _evaluate(pipeline, model, features, compute, metrics)
                save(
                    model, run_dir / "model.elm", features=features, label=pipeline["data"]["label"]
                )
            scores = (
                run_home.child("scores") if not run_home.is_local else locate(run_dir / "scores")
            )
            _score(pipeline, model, features, compute, scores, metrics)
            metrics["seconds"]["total"] = round(time.perf_counter() - start, 3)
            _write_json(run_dir / "metrics.json", metrics)
            log.info("metrics: %s", metrics)
    except BaseException as exc:
        from elmscale.data.storage import scrub

        # (the --storage-option flags' secrets never reach the run's log)
        reason = scrub(str(exc), pipeline.extra_storage_options)
        log.error("run failed: %s: %s", type(exc).__name__, reason)
        raise
    finally:
        compute.close()
        root.removeHandler(handler)
        handler.close()
        _keep_run_files(run_dir, run_home)
    return metrics, (run_dir if run_home.is_local else run_home)
