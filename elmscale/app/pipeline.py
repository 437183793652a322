"""Pipeline files: one TOML file describing a run, checked before anything runs.

Sections and keys (defaults in brackets)::

    [run]      name ["run"], task ("train" | "cv" | "score") ["train"], seed [0]
    [data]     train, test, score (paths: Parquet file / directory / glob, CSV, LIBSVM),
               features (list or pattern), label (a column; default: Parquet's "label"
               or the last column; none for LIBSVM), id_columns [[]],
               scale [true], generate (a table {rows, test_rows, features, classes}:
               write the train / test Parquet files first when they are missing),
               test_size (rows, or a fraction, held out of ``train`` at random with
               run.seed when there is no ``test``; in-memory estimators only)
    [model]    estimator (a name in ``elmscale.registry``: "ELMClassifier",
               "ELMRegressor", "SparseELMClassifier", ...) ["ELMClassifier"], params (a
               table of the estimator's parameters)
    [search]   grid (a table of lists, or "paper"), folds [5], scoring
    [compute]  scheduler, scheduler_file (Dask), ray_address (Ray), workers
               [cores], threads_per_worker [1]
    [output]   dir ["runs"], decision [false] (decision values in scores)

Relative paths are taken from the current directory.  ``load_pipeline`` reads a file,
applies ``--set section.key=value`` overrides, and returns a ``Pipeline`` whose
``problems`` list every mistake found (an unknown key with the closest valid name, a
missing file, a value out of range, a parameter the estimator rejects); a run starts
only when there is none.
"""

from __future__ import annotations

import difflib
import glob
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from elmscale import registry

__all__ = ["Pipeline", "PipelineError", "load_pipeline", "parse_override"]

TASKS = ("train", "cv", "score")

SCHEMA: dict[str, dict] = {
    "run": {"name": "run", "task": "train", "seed": 0},
    "data": {
        "train": None,
        "test": None,
        "score": None,
        "features": None,
        "label": None,
        "id_columns": [],
        "scale": True,
        "generate": None,
        "test_size": None,
    },
    "model": {"estimator": "ELMClassifier", "params": {}},
    "search": {"grid": None, "folds": 5, "scoring": None},
    "compute": {
        "scheduler": None,
        "scheduler_file": None,
        "ray_address": None,
        "workers": None,
        "threads_per_worker": 1,
    },
    "output": {"dir": "runs", "decision": False, "model": None},
}
GENERATE_KEYS = ("rows", "test_rows", "features", "classes")


class PipelineError(ValueError):
    """A pipeline file that cannot run; the message lists every problem."""


@dataclass
class Pipeline:
    path: str
    config: dict
    problems: list[str] = field(default_factory=list)

    def __getitem__(self, section: str) -> dict:
        return self.config[section]

    def check(self) -> Pipeline:
        if self.problems:
            raise PipelineError(f"{self.path}: " + "; ".join(self.problems))
        return self


def parse_override(text: str) -> tuple[str, str, object]:
    """``section.key=value`` (the value in TOML syntax, else a plain string)."""
    key, sep, value = text.partition("=")
    section, dot, name = key.strip().partition(".")
    if not sep or not dot or not section or not name:
        raise PipelineError(f"--set expects section.key=value; got {text!r}")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value
    return section, name, parsed


def _closest(word: str, options) -> str:
    match = difflib.get_close_matches(word, list(options), n=1, cutoff=0.5)
    return f" (did you mean '{match[0]}'?)" if match else f" (valid: {', '.join(options)})"


def _exists(path: str) -> bool:
    return bool(glob.glob(path)) if glob.has_magic(path) else Path(path).exists()


def load_pipeline(path, overrides=()) -> Pipeline:
    """Read and check a pipeline file; the result's ``problems`` list what is wrong."""
    path = Path(path)
    if not path.is_file():
        raise PipelineError(f"{path}: no such pipeline file")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise PipelineError(f"{path}: not valid TOML ({exc})") from exc
    for override in overrides:
        section, name, value = parse_override(override)
        if name.startswith("params.") and section == "model":
            raw.setdefault("model", {}).setdefault("params", {})[name[7:]] = value
        else:
            raw.setdefault(section, {})[name] = value
    problems: list[str] = []
    config = {}
    for section, raw_values in raw.items():
        if section not in SCHEMA:
            problems.append(f"unknown section [{section}]{_closest(section, SCHEMA)}")
            continue
        if not isinstance(raw_values, dict):
            problems.append(f"[{section}] must be a table")
            continue
        for key in raw_values:
            if key not in SCHEMA[section]:
                problems.append(f"unknown key {section}.{key}{_closest(key, SCHEMA[section])}")
    for section, defaults in SCHEMA.items():
        given = raw.get(section, {}) if isinstance(raw.get(section, {}), dict) else {}
        config[section] = {**defaults, **{k: v for k, v in given.items() if k in defaults}}
    pipeline = Pipeline(str(path), config, problems)
    _check_values(pipeline)
    return pipeline


def _check_values(p: Pipeline) -> None:
    run, data, model, search, compute = (
        p[s] for s in ("run", "data", "model", "search", "compute")
    )
    problems = p.problems
    if run["task"] not in TASKS:
        problems.append(f"run.task = {run['task']!r}; expected one of {TASKS}")
    if not isinstance(run["seed"], int) or run["seed"] < 0:
        problems.append(f"run.seed = {run['seed']!r}; expected an integer >= 0")
    if not isinstance(run["name"], str) or not run["name"] or "/" in run["name"]:
        problems.append(f"run.name = {run['name']!r}; expected a name without '/'")
    generate = data["generate"]
    if generate is not None:
        if not isinstance(generate, dict):
            problems.append("data.generate must be a table {rows, test_rows, features, classes}")
        else:
            for key, value in generate.items():
                if key not in GENERATE_KEYS:
                    problems.append(
                        f"unknown key data.generate.{key}{_closest(key, GENERATE_KEYS)}"
                    )
                elif not isinstance(value, int) or value < (2 if key == "classes" else 1):
                    problems.append(f"data.generate.{key} = {value!r}; expected a positive integer")
    test_size = data["test_size"]
    if test_size is not None and not (
        (isinstance(test_size, int) and test_size >= 1)
        or (isinstance(test_size, float) and 0 < test_size < 1)
    ):
        problems.append(
            f"data.test_size = {test_size!r}; expected a row count >= 1 or a fraction in (0, 1)"
        )
    if test_size is not None and data["test"]:
        problems.append("data.test_size and data.test are both set; expected one of them")
    task = run["task"] if isinstance(run["task"], str) else None  # a list or table: refused above
    needed = {"train": ("train",), "cv": ("train",), "score": ("score",)}.get(task, ())
    for key in needed:
        if not data[key]:
            problems.append(f"data.{key} is required for task {task!r}")
    for key in ("train", "test", "score"):
        value = data[key]
        generated = generate and value in (data["train"], data["test"])
        if value and not _exists(str(value)) and not generated:
            problems.append(f"data.{key}: {value}: no such file or directory")
    if task == "score" and not p["output"]["model"]:
        problems.append("output.model (the model file to score with) is required for task 'score'")
    elif task == "score" and not Path(str(p["output"]["model"])).is_file():
        problems.append(f"output.model: {p['output']['model']}: no such file")
    estimators = registry.names()
    if model["estimator"] not in estimators:
        problems.append(
            f"model.estimator = {model['estimator']!r}"
            f"{_closest(str(model['estimator']), estimators)}"
        )
    elif isinstance(model["params"], dict):
        _check_estimator_params(model["estimator"], model["params"], problems)
    else:
        problems.append("model.params must be a table")
    if not isinstance(search["folds"], int) or search["folds"] < 2:
        problems.append(f"search.folds = {search['folds']!r}; expected an integer >= 2")
    grid = search["grid"]
    if task == "cv":
        if grid is None:
            problems.append(
                "search.grid is required for task 'cv' (a table of lists, or \"paper\")"
            )
        elif grid != "paper" and not (
            isinstance(grid, dict)
            and grid
            and all(isinstance(v, list) and v for v in grid.values())
        ):
            problems.append('search.grid must be "paper" or a table of non-empty lists')
        elif isinstance(grid, dict) and model["estimator"] in estimators:
            _check_estimator_params(
                model["estimator"], {k: v[0] for k, v in grid.items()}, problems, "search.grid"
            )
    workers = compute["workers"]
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        problems.append(f"compute.workers = {workers!r}; expected an integer >= 1")
    threads = compute["threads_per_worker"]
    if not isinstance(threads, int) or threads < 1:
        problems.append(f"compute.threads_per_worker = {threads!r}; expected an integer >= 1")
    if compute["scheduler_file"] and not Path(str(compute["scheduler_file"])).is_file():
        problems.append(f"compute.scheduler_file: {compute['scheduler_file']}: no such file")


def make_estimator(name: str, params: dict):
    """A new estimator of the registered ``name`` with ``params``, its parameters checked
    (scikit-learn's ``_parameter_constraints``) before any data are read."""
    est = registry.entry(name).load()()
    est.set_params(**params)
    if hasattr(est, "_parameter_constraints"):
        est._validate_params()
    return est


def _check_estimator_params(name: str, params: dict, problems: list, where="model.params"):
    valid = registry.entry(name).load()().get_params(deep=False)
    unknown = [k for k in params if k not in valid]
    for key in unknown:
        problems.append(f"unknown key {where}.{key} for {name}{_closest(key, valid)}")
    try:
        make_estimator(name, {k: v for k, v in params.items() if k in valid})
    except (ValueError, TypeError) as exc:
        problems.append(f"{where}: {exc}")
