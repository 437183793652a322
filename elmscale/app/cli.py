"""The ``elmscale`` command line.

Sub-commands: ``run`` and ``validate`` (pipeline files, ``elmscale.pipeline``),
``score`` (files larger than memory, ``elmscale.batch_scoring``), ``demo`` (generate
data, train, evaluate, save, reload and score), ``convert``, ``train``, ``predict``,
``info`` and ``warmup`` (compile every numba kernel into the cache, ``app/warmup.py``).

Exit codes: 0 success; 1 runtime error (bad data in a file, a bad model file);
2 usage error (unknown option, invalid parameter value, missing input file); 130
interrupted (Ctrl-C, SIGINT) and 143 terminated (SIGTERM): what the command started (piece
workers, the local Dask cluster and Ray) is shut down first, finished results are kept
(a rerun resumes), and no file is left half-written.  Killed (SIGKILL), the command's
children end within seconds by themselves (``elmscale.core.lifeline``).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np

from elmscale import registry
from elmscale.core.pipelines import final_estimator

EXIT_OK, EXIT_RUNTIME, EXIT_USAGE = 0, 1, 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report a job ended by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM


class UsageError(Exception):
    """A command-line mistake: reported with exit code 2."""


# -- helpers -------------------------------------------------------------------


def _parse_value(text: str):
    """``--param`` values: JSON numbers / true / false / null, else the string."""
    lowered = text.strip().lower()
    if lowered in ("none", "null"):
        return None
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def _parse_params(items: list[str]) -> dict:
    params = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param expects KEY=VALUE; got {item!r}")
        params[key.strip()] = _parse_value(value)
    return params


def _positive_float(zero: bool = False):
    """An argparse type: a finite number above 0 (or 0 too, with ``zero``); argparse's
    message names the flag."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a number") from None
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
            least = "0 or more" if zero else "above 0"
            raise argparse.ArgumentTypeError(f"{text}: expected a number {least}")
        return value

    return parse


def _label_spec(text: str | None):
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return text


def _storage_flags(items: list[str] | None) -> dict:
    """``--storage-option KEY=VALUE`` flags as fsspec ``storage_options`` (as Dask's and
    pandas'): each VALUE JSON (a number, true / false / null, an object), else the string
    as given; a dotted KEY sets a nested option (``client_kwargs.endpoint_url=URL``); a
    secret-named option (key, secret, token, ...) keeps its value as a string.  Errors name
    the option, never its value."""
    from elmscale.data.storage import SECRET_WORDS

    options: dict = {}
    for item in items or []:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or "" in key.split("."):
            raise UsageError(
                "--storage-option expects KEY=VALUE (fsspec's storage options, for "
                "example endpoint_url=http://host:9000, profile=NAME, anon=true, "
                "client_kwargs.region_name=eu-west-1)"
            )
        *parents, leaf = key.split(".")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        if any(word in leaf.lower() for word in SECRET_WORDS) and not isinstance(value, str | dict):
            value = text  # a numeric-looking secret stays what was typed
        table = options
        for part in parents:
            table = table.setdefault(part, {})
            if not isinstance(table, dict):
                raise UsageError(f"--storage-option {key}: {part} is given a value and options")
        if isinstance(value, dict) and isinstance(table.get(leaf), dict):
            table[leaf].update(value)
        else:
            table[leaf] = value
    return options


def _options(args, *paths) -> dict | None:
    """The ``--storage-option`` flags for ``paths`` if one of them is a URL (a local path
    takes none), else None."""
    from elmscale.data.storage import is_url

    options = getattr(args, "storage_options", None)
    return options if options and any(p and is_url(str(p)) for p in paths) else None


def _require_input(path: str, what: str, options: dict | None = None) -> None:
    """A missing input is a usage error; ``path`` may be a URL of a store, with
    ``options`` (``--storage-option``), else its credentials and endpoint from the
    environment (``AWS_PROFILE``, ``AWS_ENDPOINT_URL``, ...)."""
    from elmscale.data.storage import locate

    where = locate(path, options)
    if not where.exists():
        raise UsageError(f"{what} {where}: no such file or directory")


def _load(path: str, label, what: str, options: dict | None = None, **kw):
    from elmscale.data.formats import load

    _require_input(path, what, options)
    return load(path, label=label, storage_options=options, **kw)


def _make_estimator(name: str, params: dict, scale: bool):
    from sklearn.pipeline import make_pipeline

    from elmscale.app.pipeline import make_estimator
    from elmscale.data.scaling import Scaler

    if name not in registry.names():
        raise UsageError(f"--estimator must be one of {', '.join(registry.names())}; got {name!r}")
    valid = registry.entry(name).load()().get_params(deep=False)
    unknown = sorted(set(params) - set(valid))
    if unknown:
        raise UsageError(f"unknown parameter(s) {unknown} for {name}; valid: {sorted(valid)}")
    # parameter errors are usage errors: make_estimator validates them before data are read
    est = make_estimator(name, params)
    return make_pipeline(Scaler(), est) if scale else est


def _write_table_atomically(columns: dict, path: str, options: dict | None = None) -> None:
    """Write ``columns`` to ``path`` (.csv or .parquet; a file, or an object put whole) via
    a temporary name."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from elmscale.data.columns import PARQUET_SUFFIXES
    from elmscale.data.storage import locate, write_whole

    table = pa.table(columns)
    where = locate(path, options)
    suffix = where.suffix.lower()
    if suffix not in (".csv", *PARQUET_SUFFIXES):
        raise UsageError(f"output {where}: expected a .csv or .parquet file name")

    def write(tmp: Path) -> None:
        if suffix == ".csv":
            pacsv.write_csv(table, tmp)
        else:
            pq.write_table(table, tmp, compression="zstd", use_dictionary=False)

    write_whole(where, write, make_dirs=False)


def _evaluate(model, X, y) -> dict:
    from sklearn.metrics import accuracy_score, r2_score

    pred = model.predict(X)
    if hasattr(final_estimator(model), "classes_"):
        return {"accuracy": float(accuracy_score(y, pred))}
    return {"r2": float(r2_score(y, pred))}


def _fmt_metrics(metrics: dict) -> str:
    return ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())


# -- sub-commands ----------------------------------------------------------------


def cmd_convert(args) -> int:
    from elmscale.data.parquet_io import write_parquet

    kw = {}
    if args.n_features is not None:
        kw["n_features"] = args.n_features
    if args.missing is not None:
        kw["missing"] = args.missing
    ds = _load(args.input, _label_spec(args.label), "input", format=args.format, **kw)
    out = args.output
    write_parquet(ds, out, row_group_size=args.row_group_size)
    dropped = f", {ds.n_dropped} rows with missing values dropped" if ds.n_dropped else ""
    print(f"wrote {out}: {ds.n_samples} rows x {ds.n_features} features{dropped}")
    return EXIT_OK


def cmd_train(args) -> int:
    from elmscale.app.selection import describe_kept, kept_features
    from elmscale.io.model_files import save

    params = _parse_params(args.param)
    model = _make_estimator(args.estimator, params, scale=not args.no_scale)
    train = _load(args.data, _label_spec(args.label), "training data", _options(args, args.data))
    start = time.perf_counter()
    try:
        model.fit(train.X, train.y)
    except ValueError as exc:
        raise RuntimeError(f"{args.data}: {exc}") from exc
    seconds = time.perf_counter() - start
    report = {"fit_seconds": round(seconds, 4), "train": _evaluate(model, train.X, train.y)}
    print(
        f"trained {args.estimator} on {train.n_samples} rows x {train.n_features} features "
        f"in {seconds:.2f} s; training {_fmt_metrics(report['train'])}"
    )
    kept = kept_features(model, train.feature_names)
    if kept is not None:
        report["kept_features"] = kept
        print(describe_kept(kept, train.n_features))
    if args.test:
        options = _options(args, args.test)
        test = _load(
            args.test,
            _label_spec(args.label),
            "test data",
            options,
            **({"n_features": train.n_features} if _is_libsvm(args.test, options) else {}),
        )
        report["test"] = _evaluate(model, test.X, test.y)
        print(f"test ({test.n_samples} rows): {_fmt_metrics(report['test'])}")
    save(model, args.model, storage_options=_options(args, args.model))
    print(f"saved {args.model}")
    if args.metrics:
        Path(args.metrics).write_text(json.dumps(report, indent=2) + "\n")
    return EXIT_OK


def _scoring_label(path: str, label: str | None, options: dict | None = None):
    """The label column to leave out when scoring: as given; else Parquet's "label"
    column if there is one; else none (every column is a feature).  LIBSVM: None."""
    if label is not None:
        return _label_spec(label)
    from elmscale.data.formats import detect_format

    _require_input(path, "data", options)
    fmt = detect_format(path, options)
    if fmt == "libsvm":
        return None
    if fmt == "parquet":
        import pyarrow.dataset as pads

        from elmscale.data.storage import locate

        where = locate(path, options)
        fs = None if where.is_local else where.fs
        names = pads.dataset(where.path, format="parquet", filesystem=fs).schema.names
        return "label" if "label" in names else False
    return False


def _is_libsvm(path: str, options: dict | None = None) -> bool:
    from elmscale.data.formats import detect_format
    from elmscale.data.storage import locate

    return locate(path, options).exists() and detect_format(path, options) == "libsvm"


def cmd_predict(args) -> int:
    from elmscale.io.model_files import load

    model_options, data_options = _options(args, args.model), _options(args, args.data)
    _require_input(args.model, "model", model_options)
    model = load(args.model, storage_options=model_options)
    n_features = getattr(final_estimator(model), "n_features_in_", None)
    data = _load(
        args.data,
        _scoring_label(args.data, args.label, data_options),
        "data",
        data_options,
        **({"n_features": n_features} if _is_libsvm(args.data, data_options) else {}),
    )
    try:
        pred = model.predict(data.X)
        columns = {"prediction": pred}
        if args.decision:
            est = final_estimator(model)
            if not hasattr(est, "decision_function"):
                raise UsageError("--decision applies to classifiers only")
            scores = np.asarray(model.decision_function(data.X))
            if scores.ndim == 1:
                columns["decision"] = scores
            else:
                for j, cls in enumerate(est.classes_):
                    columns[f"decision_{cls}"] = scores[:, j]
    except ValueError as exc:
        raise RuntimeError(f"{args.data}: {exc}") from exc
    _write_table_atomically(columns, args.output, _options(args, args.output))
    print(f"wrote {args.output}: {len(pred)} predictions")
    return EXIT_OK


def cmd_export(args) -> int:
    from elmscale.io.model_files import load
    from elmscale.io.onnx_export import UnsupportedModelError, save_onnx

    options = _options(args, args.model)
    _require_input(args.model, "model", options)
    model = load(args.model, storage_options=options)
    try:
        path = save_onnx(model, args.output, storage_options=_options(args, args.output))
    except UnsupportedModelError as exc:
        raise RuntimeError(f"{args.model}: {exc}") from exc
    est = final_estimator(model)
    outputs = "label, decision" if hasattr(est, "classes_") else "prediction"
    print(
        f"wrote {path}: input X float32 (n, {est.n_features_in_}), outputs {outputs} "
        "(score it with ONNX Runtime)"
    )
    return EXIT_OK


def cmd_info(args) -> int:
    from threadpoolctl import threadpool_info

    from elmscale import __version__
    from elmscale.core.threads import available_cores

    lines = [
        f"elmscale {__version__}",
        f"python {platform.python_version()} "
        f"({platform.machine()}, {available_cores()} cores available)",
    ]
    for name in ("numpy", "scipy", "numba", "pyarrow", "sklearn", "dask", "distributed", "ray"):
        try:
            module = __import__(name)
            lines.append(f"{name} {getattr(module, '__version__', '?')}")
        except Exception as exc:  # noqa: BLE001 - report what is broken, do not fail
            lines.append(f"{name} unavailable ({exc.__class__.__name__})")
    import numba

    lines.append(
        f"numba threading layer: {numba.config.THREADING_LAYER}, threads {numba.get_num_threads()}"
    )
    # (jit: importing elmscale's kernels puts a wheel's carried ones in place, or says why not)
    from elmscale.core import carried_kernels, compile_cache, jit  # noqa: F401

    lines.append(
        f"numba cache: {compile_cache.cache_folder()} ({compile_cache.choose()[1]}; "
        "`elmscale warmup` fills it)"
    )
    lines.append(f"compiled kernels carried by the wheel: {carried_kernels.STATUS['reason']}")
    for pool in threadpool_info():
        lines.append(
            f"thread pool {pool['internal_api']} ({pool.get('architecture') or '-'}): "
            f"{pool['num_threads']} threads, {Path(pool['filepath']).name}"
        )
    if args.model:
        from elmscale.io.model_files import read_metadata

        options = _options(args, args.model)
        _require_input(args.model, "model", options)
        meta = read_metadata(args.model, storage_options=options)
        model = meta["model"]
        lines.append(
            f"model {args.model}: {model['estimator']} (format "
            f"{meta['format_version']}, elmscale {meta['library_version']}, "
            f"created {meta['created']})"
        )
        steps = model["steps"] if model["estimator"] == "Pipeline" else [("model", model)]
        if model["estimator"] == "Pipeline":
            lines.append(
                "  steps: " + ", ".join(f"{n} ({s['estimator']})" for n, s in model["steps"])
            )
        for name, step in steps:  # the parameters it was fitted with, and what it learned
            params = ", ".join(f"{k}={v!r}" for k, v in sorted(step.get("params", {}).items()))
            lines.append(f"  {name} parameters: {params or '(none)'}")
            fitted = ", ".join(f"{k}={v!r}" for k, v in sorted(step.get("attributes", {}).items()))
            if fitted:
                lines.append(f"  {name} fitted: {fitted}")
    print("\n".join(lines))
    return EXIT_OK


def cmd_warmup(args) -> int:
    from elmscale.app import warmup

    return warmup.main(only=args.only, quiet=args.quiet)


def cmd_demo(args) -> int:
    """The quick start: data generated here, a scaled ELM, evaluation and a saved model."""
    from sklearn.pipeline import make_pipeline

    from elmscale.data.parquet_io import load_parquet, write_parquet
    from elmscale.data.scaling import Scaler
    from elmscale.data.synthetic import generate_classification
    from elmscale.io.model_files import load, save
    from elmscale.models.elm import ELMClassifier

    data_dir = Path(args.data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    train_path = data_dir / f"quickstart-train-{args.rows}.parquet"
    test_path = data_dir / f"quickstart-test-{args.rows}.parquet"
    if not (train_path.exists() and test_path.exists()):
        total = generate_classification(args.rows + args.rows // 2, n_features=8, random_state=0)
        cut = args.rows
        write_parquet(total.X[:cut], train_path, y=total.y[:cut], feature_names=total.feature_names)
        write_parquet(total.X[cut:], test_path, y=total.y[cut:], feature_names=total.feature_names)
        print(f"generated {train_path} and {test_path}")
    train = load_parquet(train_path, label="label")
    test = load_parquet(test_path, label="label")
    model = make_pipeline(
        Scaler(), ELMClassifier(hidden="sigmoid", n_hidden=args.n_hidden, C=args.C, random_state=0)
    )
    start = time.perf_counter()
    model.fit(train.X, train.y)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    test_acc = float(np.mean(model.predict(test.X) == test.y))
    predict_s = time.perf_counter() - start
    out_dir = Path(args.output_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_path = out_dir / "model.elm"
    save(model, model_path)
    reloaded = load(model_path)
    same = bool(np.array_equal(reloaded.predict(test.X), model.predict(test.X)))
    metrics = {
        "train_rows": train.n_samples,
        "test_rows": test.n_samples,
        "n_hidden": args.n_hidden,
        "C": args.C,
        "fit_seconds": round(fit_s, 3),
        "predict_seconds": round(predict_s, 3),
        "train_accuracy": float(np.mean(model.predict(train.X) == train.y)),
        "test_accuracy": test_acc,
        "reloaded_model_predicts_the_same": same,
    }
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(
        f"ELMClassifier(sigmoid, {args.n_hidden} nodes, C={args.C:g}) on {train.n_samples} rows: "
        f"fit {fit_s:.2f} s, test accuracy {test_acc:.4f} on {test.n_samples} rows "
        f"(predict {predict_s:.2f} s)"
    )
    print(
        f"saved {model_path}; reloaded model predicts the same: {same}; "
        f"metrics in {out_dir / 'metrics.json'}"
    )
    return EXIT_OK if same else EXIT_RUNTIME


def _pipeline(args):
    from elmscale.app.pipeline import PipelineError, load_pipeline

    try:
        return load_pipeline(
            args.pipeline, args.set or (), storage_options=args.storage_options
        ).check()
    except PipelineError as exc:
        raise UsageError(str(exc)) from exc


def cmd_validate(args) -> int:
    pipeline = _pipeline(args)
    print(f"{pipeline.path}: ok (task {pipeline['run']['task']}, {pipeline['model']['estimator']})")
    return EXIT_OK


def cmd_run(args) -> int:
    from elmscale.app.runner import resolve_compute, run_pipeline

    pipeline = _pipeline(args)
    target = resolve_compute(
        pipeline,
        scheduler=args.scheduler,
        scheduler_file=args.scheduler_file,
        ray_address=args.ray_address,
        tls=_tls_flags(args),
    )
    # resolved and checked once, here (bad TLS is refused before anything runs); the run
    # connects with this security
    target["security"] = _checked_tls(target)
    try:
        metrics, run_dir = run_pipeline(pipeline, target=target, dry_run=args.dry_run)
    except ValueError as exc:  # bad data met while running: a runtime error
        raise RuntimeError(str(exc)) from exc
    if run_dir is None:
        return EXIT_OK
    parts = [f"run {run_dir}"]
    if "cv" in metrics:
        parts.append(
            f"best {metrics['cv']['best_params']} (CV score {metrics['cv']['best_score']:.4f})"
        )
    if "test" in metrics:
        parts.append("test " + ", ".join(f"{k} {v}" for k, v in metrics["test"].items()))
    if "scored" in metrics:
        parts.append(
            f"scored {metrics['scored']['rows']:,} rows in {metrics['scored']['files']} file(s)"
        )
    parts.append(f"{metrics['seconds'].get('total', 0):.1f} s")
    print("; ".join(parts))
    return EXIT_OK


def cmd_score(args) -> int:
    from elmscale.app.runner import resolve_compute
    from elmscale.io.batch_scoring import plan_jobs, score_jobs
    from elmscale.io.model_files import load, saved_features

    model_options = _options(args, args.model)
    _require_input(args.model, "model", model_options)
    _require_input(args.input, "input", _options(args, args.input))
    model = load(args.model, storage_options=model_options)
    features = args.features
    if features is None:
        features = saved_features(args.model, storage_options=model_options)
    elif "," in features:
        features = [f.strip() for f in features.split(",")]
    jobs = plan_jobs(
        model,
        args.input,
        args.output,
        features=features,
        id_columns=args.id or (),
        decision=args.decision,
        batch_rows=args.batch_rows,
        storage_options=_options(args, args.input, args.output),
    )
    client = None
    target = resolve_compute(
        None, scheduler=args.scheduler, ray_address=args.ray_address, tls=_tls_flags(args)
    )
    if target["dask_address"]:
        client = _connect_dask(target)
    try:
        summary = score_jobs(
            model,
            jobs,
            client=client,
            ray_address=None if client is not None else target["ray"],
            progress=not args.quiet,
        )
    finally:
        if client is not None:
            client.close()
    print(
        f"scored {summary['rows']:,} rows into {summary['scored']} file(s) "
        f"({summary['skipped']} already done) in {summary['seconds']:.1f} s"
        + (f", {summary['rows_per_second']:,.0f} rows/s" if summary["rows"] else "")
    )
    return EXIT_OK


def _tls_flags(args) -> dict:
    """The ``--tls-*`` flags as :func:`~elmscale.app.runner.resolve_compute` takes them."""
    return {"ca_file": args.tls_ca_file, "cert": args.tls_cert, "key": args.tls_key}


def _connect_dask(target: dict):
    """A client of ``target``'s Dask scheduler, over TLS when its files are given."""
    from elmscale.distributed.connect import connect_dask

    return connect_dask(target["dask_address"], security=_checked_tls(target))


def _checked_tls(target: dict):
    """``target``'s TLS security (None without TLS files); a bad TLS file, or a ``tls://``
    address with no certificates given or configured, is the user's to fix (exit 2),
    found before anything runs."""
    from elmscale.distributed.connect import security_for, tls_security

    try:
        security = tls_security(**target["tls"])
        if target["dask_address"]:
            security = security_for(target["dask_address"], security)
        return security
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _add_storage_flags(p) -> None:
    """``--storage-option KEY=VALUE``: fsspec options for the command's URLs."""
    p.add_argument(
        "--storage-option",
        action="append",
        metavar="KEY=VALUE",
        help="an fsspec storage option for the URLs (s3://, gs://, ...) the command reads "
        "and writes, as Dask's and pandas' storage_options, repeatable: endpoint_url=URL, "
        "profile=NAME, anon=true, client_kwargs={...} or client_kwargs.region_name=NAME "
        "(VALUE as JSON, else a string); over a pipeline's [storage]. Secrets given so "
        "are never logged or written down, but other users of this machine may see a "
        "command line: prefer the environment or a profile for them",
    )


def _add_tls_flags(p) -> None:
    """``--tls-ca-file``, ``--tls-cert``, ``--tls-key``: a ``tls://`` scheduler's files."""
    p.add_argument("--tls-ca-file", help="for a tls:// scheduler: the CA file (PEM)")
    p.add_argument("--tls-cert", help="for a tls:// scheduler: this client's certificate (PEM)")
    p.add_argument(
        "--tls-key", help="for a tls:// scheduler: this client's key (PEM), if not in --tls-cert"
    )


def cmd_reproduce(args) -> int:
    from elmscale.app.runner import resolve_compute
    from elmscale.distributed.executors import DaskExecutor, LocalExecutor, RayExecutor
    from elmscale.experiments.reproduce import reproduce

    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise UsageError(f"--data-dir {args.data_dir}: no such directory")
    target = resolve_compute(
        None, scheduler=args.scheduler, ray_address=args.ray_address, tls=_tls_flags(args)
    )
    client = None
    if target["dask_address"]:
        client = _connect_dask(target)
        executor = DaskExecutor(client)
    elif target["ray"]:
        executor = RayExecutor(target["ray"])
    else:
        executor = LocalExecutor(args.threads)
    command = "elmscale " + shlex.join(args.argv)
    try:
        result = reproduce(
            args.paper,
            out_dir=args.out,
            sets=args.sets,
            trials=args.trials,
            cv_rows=args.cv_rows,
            quick=args.quick,
            data_dir=args.data_dir,
            executor=executor,
            quiet=args.quiet,
            command=command,
            memory_gb=args.memory_gb,
            piece_timeout=args.piece_timeout or None,
            timeout_every_piece=args.timeout_every_piece,
            retry_left_out=args.retry_left_out,
            dry_run=args.dry_run,
        )
    finally:
        if client is not None:
            client.close()
    if result.report is None:
        print(f"dry run of {args.paper}: {result.n_pieces} pieces planned above; none run")
        return EXIT_OK
    below = (
        int(result.report.comparison.get("below", []).sum()) if len(result.report.comparison) else 0
    )
    print(
        f"reproduced {args.paper}: {result.n_pieces} pieces in {result.wall_time_s:.1f} s; "
        f"report {Path(args.out) / 'report.md'} and report.html"
        + (f"; {below} row(s) more than 2 points below the paper" if below else "")
    )
    return EXIT_OK


# -- parser ----------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse exits 2 too; keep one message style
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _add_overrides(p: argparse.ArgumentParser) -> None:
    """``--set SECTION.KEY=VALUE``: run and validate read a pipeline file the same way."""
    p.add_argument(
        "--set",
        action="append",
        metavar="SECTION.KEY=VALUE",
        help="override a pipeline value (TOML syntax), repeatable",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="elmscale", description="Extreme Learning Machines at scale.")
    from elmscale import __version__

    parser.add_argument("--version", action="version", version=f"elmscale {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("run", help="run a pipeline file (a local cluster starts if none is given)")
    p.add_argument("pipeline", help="pipeline file (TOML)")
    p.add_argument("--scheduler", help="Dask scheduler address (tcp://host:8786)")
    p.add_argument("--scheduler-file", help="Dask scheduler file")
    p.add_argument("--ray-address", help="Ray address ('auto', 'ray://host:10001', host:port)")
    _add_tls_flags(p)
    _add_storage_flags(p)
    _add_overrides(p)
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="check the file and print the resolved plan; run nothing",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("validate", help="check a pipeline file without running it")
    p.add_argument("pipeline", help="pipeline file (TOML)")
    _add_overrides(p)
    _add_storage_flags(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("score", help="score Parquet / CSV files larger than memory")
    p.add_argument("model", help="a saved model file (.elm)")
    p.add_argument("input", help="a Parquet or CSV file, or a directory of them")
    p.add_argument("output", help="output file (.parquet / .csv) or directory")
    p.add_argument(
        "--id", action="append", metavar="COLUMN", help="column copied to the output (repeatable)"
    )
    p.add_argument(
        "--features",
        help="feature columns: a pattern or a comma-separated list "
        "(default: the model file's, else every numeric column but ids and label)",
    )
    p.add_argument("--decision", action="store_true", help="also write decision values")
    p.add_argument("--batch-rows", type=int, default=262_144, help="rows read and scored at a time")
    p.add_argument("--scheduler", help="Dask scheduler: one task per file")
    p.add_argument("--ray-address", help="Ray address: one task per file")
    _add_tls_flags(p)
    _add_storage_flags(p)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser("demo", help="quick start: generate data, train, evaluate, save a model")
    p.add_argument("--rows", type=int, default=200_000, help="training rows (default 200000)")
    p.add_argument("--n-hidden", type=int, default=1000, help="hidden nodes of the ELM")
    p.add_argument("--C", type=float, default=100.0, help="the ELM's regularisation C")
    p.add_argument(
        "--data-dir", default="data/generated", help="where the generated data are written"
    )
    p.add_argument(
        "--output-dir", default="runs/quickstart", help="where the model and metrics are written"
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("convert", help="convert LIBSVM / CSV / ARFF to Parquet")
    p.add_argument("input", help="the file to convert")
    p.add_argument("output", help="the Parquet file to write")
    p.add_argument(
        "--format",
        default="auto",
        choices=["auto", "libsvm", "csv", "arff", "parquet"],
        help="the input's format (auto: from its name and contents)",
    )
    p.add_argument("--label", help="label column: name, position, 'first' or 'last'")
    p.add_argument("--missing", choices=["error", "drop"], help="missing values (CSV)")
    p.add_argument("--n-features", type=int, help="feature count (LIBSVM test files)")
    p.add_argument("--row-group-size", type=int, default=262_144, help="rows per Parquet row group")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("train", help="train a model and save it")
    p.add_argument("data", help="training data (Parquet, CSV, LIBSVM, ARFF)")
    p.add_argument("model", help="output model file")
    p.add_argument(
        "--estimator",
        default="ELMClassifier",
        help="a registered estimator: " + ", ".join(registry.names()),
    )
    p.add_argument(
        "--param",
        "-p",
        action="append",
        metavar="KEY=VALUE",
        help="estimator parameter, e.g. -p C=10 -p kernel=gaussian (repeatable)",
    )
    p.add_argument("--label", help="label column: name, position, 'first' or 'last'")
    p.add_argument("--test", help="test data to evaluate on")
    p.add_argument(
        "--no-scale",
        action="store_true",
        help="do not scale features to [-1, 1] (the paper's protocol scales)",
    )
    p.add_argument("--metrics", help="write training / test metrics as JSON here")
    _add_storage_flags(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("predict", help="score a data file with a saved model")
    p.add_argument("model", help="a saved model file (.elm)")
    p.add_argument("data", help="the data to score (Parquet, CSV, LIBSVM, ARFF)")
    p.add_argument("output", help="output .csv or .parquet")
    p.add_argument(
        "--label",
        help="label column to leave out of the features (default: none "
        "for CSV; the column 'label' if present for Parquet)",
    )
    p.add_argument("--decision", action="store_true", help="also write decision values")
    _add_storage_flags(p)
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("export", help="export a saved model to ONNX (needs elmscale[onnx])")
    p.add_argument("model", help="a saved model file (.elm)")
    p.add_argument("output", help="the .onnx file to write")
    _add_storage_flags(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("info", help="versions, thread pools, and a model file's metadata")
    p.add_argument("model", nargs="?", help="a model file whose metadata to show")
    _add_storage_flags(p)
    p.set_defaults(func=cmd_info)

    from elmscale.app.warmup import STEP_NAMES

    p = sub.add_parser(
        "warmup", help="compile every numba kernel into the cache (for worker images)"
    )
    p.add_argument("--only", nargs="+", choices=STEP_NAMES, help="run only these steps")
    p.add_argument("--quiet", action="store_true", help="only the cache folder and the total")
    p.set_defaults(func=cmd_warmup)

    from elmscale.experiments.papers import PAPERS
    from elmscale.experiments.protocol import DEFAULT_PIECE_TIMEOUT

    p = sub.add_parser(
        "reproduce",
        help="a paper's experiments by its protocol: tables, figures, statistics, a report",
    )
    p.add_argument("paper", choices=sorted(PAPERS), help="the paper")
    p.add_argument(
        "--sets",
        nargs="+",
        help="data sets to run: the protocol's names, or paths to your own "
        "files (a 'train,test' pair for a file with its own test part)",
    )
    p.add_argument(
        "--trials",
        type=int,
        help="trials per data set (the paper's by default; boosting-ridge: repeats of "
        "its outer 10-fold CV)",
    )
    p.add_argument(
        "--cv-rows",
        type=int,
        help="choose each trial's parameters by CV on a random sample of at most this many "
        "training rows (default: all of them, as the papers); for large sets on few cores",
    )
    p.add_argument("--quick", action="store_true", help="a CI-sized run (two small sets)")
    p.add_argument("--out", default="reproduce", help="output directory (resumed if present)")
    p.add_argument("--data-dir", help="data directory (default ../shared/data when present)")
    p.add_argument("--scheduler", help="Dask scheduler address: the pieces run there")
    p.add_argument("--ray-address", help="Ray address ('auto', host:port): the pieces run there")
    _add_tls_flags(p)
    p.add_argument("--threads", type=int, help="local threads (default: all cores)")
    p.add_argument(
        "--memory-gb",
        type=_positive_float(),
        help="memory the pieces running at once may hold together, GB (default: 80%% of "
        "the available memory; on Ray / Dask, of each worker machine's); a piece whose "
        "estimate is larger is left out before it starts",
    )
    p.add_argument(
        "--piece-timeout",
        type=_positive_float(zero=True),
        default=DEFAULT_PIECE_TIMEOUT,
        metavar="SECONDS",
        help="stop a baseline's piece (SVC) after this many seconds and leave it out "
        f"(default {DEFAULT_PIECE_TIMEOUT:g}; 0: no limit)",
    )
    p.add_argument(
        "--timeout-every-piece",
        action="store_true",
        help="--piece-timeout applies to every piece, not only the baselines'",
    )
    p.add_argument(
        "--retry-left-out",
        action="store_true",
        help="run again the pieces an earlier run in --out left out (time budget hit, "
        "process killed)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the memory plan (each group's estimate, the budget, pieces at once, "
        "the pieces refused) and stop: nothing runs, nothing is written",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_reproduce)
    return parser


def main(argv: list[str] | None = None) -> int:
    from elmscale.core.lifeline import sigterm_raises, stop_signal

    with sigterm_raises():  # SIGTERM unwinds like Ctrl-C: what was started is shut down
        try:
            code = _main(argv)
        except Exception:
            # an error of another type raised after the stop signal, of it (a library
            # failing as its processes end, Ray's among them) is the stop; else a bug
            if stop_signal() is None:
                raise
            code = EXIT_RUNTIME
        signum = stop_signal()
        if signum is not None and code in (EXIT_RUNTIME, EXIT_USAGE):
            # the interrupt was swallowed on its way (a ctypes callback of numba's
            # compiler, Ray) and the command failed of it: it was stopped
            code = 128 + int(signum)
            stopped = "terminated" if code == EXIT_TERMINATED else "interrupted"
            print(f"elmscale: {stopped}", file=sys.stderr)
        return code


def _main(argv: list[str] | None) -> int:
    from elmscale.core.errors import DataError, ModelFileError
    from elmscale.core.lifeline import exit_code
    from elmscale.data.storage import scrub

    parser = build_parser()
    options: dict = {}  # the --storage-option flags: their secrets never reach a message

    def error(exc) -> None:
        print(f"elmscale: error: {scrub(str(exc), options)}", file=sys.stderr)

    try:
        args = parser.parse_args(argv)
        args.argv = list(sys.argv[1:] if argv is None else argv)
        args.storage_options = options = _storage_flags(getattr(args, "storage_option", None))
        return args.func(args)
    except UsageError as exc:
        error(exc)
        return EXIT_USAGE
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0)
    except (DataError, ModelFileError, RuntimeError, OSError) as exc:
        error(exc)
        return EXIT_RUNTIME
    except ValueError as exc:  # invalid parameter values (scikit-learn's validation)
        error(exc)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: what it started is shut down by now
        code = exit_code(exc)
        print(
            f"elmscale: {'terminated' if code == EXIT_TERMINATED else 'interrupted'}",
            file=sys.stderr,
        )
        return code
