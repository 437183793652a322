"""Pipeline files: one TOML file describing a run, checked before anything runs.

A pipeline file has the sections ``[run]``, ``[data]``, ``[model]``, ``[search]``,
``[compute]``, ``[storage]`` and ``[output]``.  :data:`SPEC` declares every key once: its
type as a user reads it, its default, the values it takes and what it means; the checks of
a value's type, range and choices are made from it, and so is the reference page
``docs/reference/pipeline-keys.md`` (``python docs/gen_reference.py``).  The checks that
involve several keys (``data.test_size`` against ``data.test``, the files a task needs,
the files that must exist, the estimator's parameters) are written below as code.

Relative paths are taken from the current directory.  Every data and output path may be an
fsspec URL (``s3://bucket/data/``); ``[storage]`` names the store's endpoint, profile or
region, never a secret (:func:`storage_options`).  ``load_pipeline`` reads a file,
applies ``--set section.key=value`` overrides, and returns a ``Pipeline`` whose
``problems`` list every mistake found (an unknown key with the closest valid name, a
missing file, a value out of range, a parameter the estimator rejects); a run starts
only when there is none.
"""

from __future__ import annotations

import copy
import difflib
import glob
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from elmscale import registry

__all__ = ["Key", "Pipeline", "PipelineError", "SPEC", "load_pipeline", "parse_override"]

TASKS = ("train", "cv", "score")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str_list(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# The types a key may have, by the words the reference page shows: the check of a value's
# type is the one its words name.
TYPES: dict[str, Callable[[object], bool]] = {
    "string": lambda v: isinstance(v, str),
    "path": lambda v: isinstance(v, str),
    "integer": _is_int,
    "boolean": lambda v: isinstance(v, bool),
    "table": lambda v: isinstance(v, dict),
    "list of strings": _is_str_list,
    "string or list of strings": lambda v: isinstance(v, str) or _is_str_list(v),
    "string or integer": lambda v: isinstance(v, str) or _is_int(v),
    "integer or fraction": lambda v: _is_int(v) or isinstance(v, float),
    "string or table": lambda v: isinstance(v, str | dict),
}


@dataclass(frozen=True)
class Key:
    """One pipeline key, declared once for the checks and for the reference page.

    type : the value's type in the words of ``TYPES`` ("integer", "path", ...).
    default : the value when the file does not set it; None is "unset" (TOML has no null,
        so an unset key is always the default).
    description : one line for users (Markdown).
    choices : the only values allowed, if any.
    minimum : the smallest value allowed (integers).
    rule, expected : a further condition on a value of the right type, and the words
        after "expected" in the error (and in the reference's allowed values) when a value
        breaks it; ``expected`` is derived from ``type`` / ``choices`` / ``minimum`` when
        empty.
    default_text : how the reference shows an unset default that the run resolves (say,
        from the machine's cores); plain "unset" when empty.
    keys : the sub-keys of a table with fixed keys (``data.generate``).
    """

    type: str
    default: object
    description: str
    choices: tuple = ()
    minimum: int | None = None
    rule: Callable[[object], bool] | None = field(default=None, compare=False)
    expected: str = ""
    default_text: str = ""
    keys: dict[str, Key] | None = None

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"unknown key type {self.type!r}; expected one of {list(TYPES)}")

    def expectation(self) -> str:
        """The words after "expected" in an error about this key's value."""
        if self.expected:
            return self.expected
        if self.choices:
            return f"one of {self.choices}"
        article = "an" if self.type[0] in "aeiou" else "a"
        if self.keys is not None:
            return f"{article} {self.type} {{{', '.join(self.keys)}}}"
        if self.minimum is not None:
            return f"{article} {self.type} >= {self.minimum}"
        return f"{article} {self.type}"

    def accepts(self, value) -> bool:
        """Whether ``value`` has this key's type and is in its range / choices (an unset
        default is accepted)."""
        if value is None and self.default is None:
            return True
        if not TYPES[self.type](value):
            return False
        if self.choices and value not in self.choices:
            return False
        if self.minimum is not None and value < self.minimum:
            return False
        return self.rule is None or bool(self.rule(value))

    def problem(self, name: str, value) -> str | None:
        """The error about ``value`` as the key ``name``, or None when it is accepted."""
        if self.accepts(value):
            return None
        return f"{name} = {value!r}; expected {self.expectation()}"


def _is_name(value) -> bool:
    return bool(value) and "/" not in value


def _is_test_size(value) -> bool:
    return (_is_int(value) and value >= 1) or (isinstance(value, float) and 0 < value < 1)


def _is_grid(value) -> bool:
    if isinstance(value, str):
        return value == "paper"
    return bool(value) and all(isinstance(v, list) and v for v in value.values())


# data.generate's sub-keys: the shape of the synthetic data written when the files are missing
GENERATE: dict[str, Key] = {
    "rows": Key("integer", 100_000, "training rows written to `data.train`", minimum=1),
    "test_rows": Key(
        "integer",
        None,
        "test rows written to `data.test` (with `data.test` set)",
        minimum=1,
        default_text="unset: no test file",
    ),
    "features": Key("integer", 8, "feature columns", minimum=1),
    "classes": Key("integer", 2, "classes of the label column", minimum=2),
}

SPEC: dict[str, dict[str, Key]] = {
    "run": {
        "name": Key(
            "string",
            "run",
            "the run's name: its directory is `<output.dir>/<name>-<UTC time>/`",
            rule=_is_name,
            expected="a non-empty name without '/'",
        ),
        "task": Key(
            "string",
            "train",
            "`train` fits the model, `cv` chooses its parameters by cross-validation over "
            "`search.grid` and refits, `score` scores `data.score` with `output.model`",
            choices=TASKS,
        ),
        "seed": Key(
            "integer",
            0,
            "seeds the folds, the `data.test_size` hold-out, the generated data and the "
            "estimator's `random_state` when its parameters leave it unset",
            minimum=0,
        ),
    },
    "data": {
        "train": Key(
            "path",
            None,
            "training data: a Parquet file, directory or glob (fitted on Dask where the "
            "estimator can), or a CSV, LIBSVM or ARFF file (read into memory); needed by "
            "tasks `train` and `cv`",
        ),
        "test": Key(
            "path",
            None,
            "test data the fitted model is evaluated on (same formats as `data.train`)",
        ),
        "score": Key(
            "path",
            None,
            "data to score, file by file, into the run's `scores/`; needed by task `score`",
        ),
        "features": Key(
            "string or list of strings",
            None,
            'the feature columns: a list of names or a pattern such as `"V*"`',
            default_text="unset: every numeric column but the label",
        ),
        "label": Key(
            "string or integer",
            None,
            'the label column: a name, a position, `"first"` or `"last"`',
            default_text="unset: Parquet's `label` column, else the last column",
        ),
        "id_columns": Key(
            "list of strings",
            [],
            "columns copied from `data.score` into the scores beside the predictions",
        ),
        "scale": Key(
            "boolean",
            True,
            "scale the features to [-1, 1] on the training data (the papers' protocol)",
        ),
        "generate": Key(
            "table",
            None,
            "synthetic data: write `data.train` (and `data.test`) as Parquet first when they "
            "are missing (sub-keys below)",
            keys=GENERATE,
        ),
        "test_size": Key(
            "integer or fraction",
            None,
            "rows (a count, or a fraction of them) held out of `data.train` at random with "
            "`run.seed` and evaluated on, when there is no `data.test`; in-memory "
            "estimators only",
            rule=_is_test_size,
            expected="a row count >= 1 or a fraction in (0, 1)",
            default_text="unset: no hold-out",
        ),
    },
    "model": {
        "estimator": Key(
            "string",
            "ELMClassifier",
            "the estimator: a registered name (listed below)",
            expected="a registered estimator's name",
        ),
        "params": Key(
            "table",
            {},
            "the estimator's parameters, checked against it before anything runs "
            "(`--set model.params.C=10` sets one)",
        ),
    },
    "search": {
        "grid": Key(
            "string or table",
            None,
            "the parameter grid of task `cv`: a table of lists (`{C = [1, 10], sigma = "
            '[0.5, 1]}`), or `"paper"` for the paper\'s grid of the estimator',
            rule=_is_grid,
            expected='"paper" or a table of non-empty lists',
        ),
        "folds": Key("integer", 5, "cross-validation folds (task `cv`)", minimum=2),
        "scoring": Key(
            "string",
            None,
            "a scikit-learn scoring name for the cross-validation (on Parquet data: "
            "`accuracy` or `neg_mean_squared_error`)",
            default_text="unset: the estimator's own score",
        ),
    },
    "compute": {
        "scheduler": Key(
            "string",
            None,
            "a Dask scheduler address (`tcp://host:8786`); the `--scheduler` flag and "
            "`DASK_SCHEDULER_ADDRESS` come first",
            default_text="unset: a local Dask cluster when there is no Ray address either",
        ),
        "scheduler_file": Key(
            "path", None, "a Dask scheduler file, used when no scheduler address is given"
        ),
        "tls_ca_file": Key(
            "path",
            None,
            "for a `tls://` scheduler: the CA file (PEM) that signed the cluster's "
            "certificates; the `--tls-ca-file` flag comes first",
            default_text="unset: Dask's configuration (`distributed.comm.tls.ca-file`)",
        ),
        "tls_cert": Key(
            "path",
            None,
            "for a `tls://` scheduler: this client's certificate (PEM); `--tls-cert` first",
            default_text="unset: Dask's configuration (`distributed.comm.tls.client.cert`)",
        ),
        "tls_key": Key(
            "path",
            None,
            "for a `tls://` scheduler: this client's private key (PEM), when the "
            "certificate file does not hold it; `--tls-key` first",
            default_text="unset: in the certificate file, or Dask's configuration",
        ),
        "ray_address": Key(
            "string",
            None,
            "a Ray address (`auto`, `ray://host:10001`, `host:port`); the `--ray-address` "
            "flag and `RAY_ADDRESS` come first",
            default_text="unset: a local Ray when there is no Dask address either",
        ),
        "workers": Key(
            "integer",
            None,
            "workers of the local Dask cluster (and CPUs of the local Ray: workers x threads)",
            minimum=1,
            default_text="unset: the machine's available cores / `threads_per_worker`",
        ),
        "threads_per_worker": Key("integer", 1, "threads of each local Dask worker", minimum=1),
    },
    "storage": {
        "endpoint": Key(
            "string",
            None,
            "the endpoint of an S3-compatible store or of GCS for the paths that are URLs "
            "(`https://minio.example.com:9000`)",
            default_text="unset: the store's own, or `AWS_ENDPOINT_URL`",
        ),
        "profile": Key(
            "string",
            None,
            "a profile of the credential files (`~/.aws/credentials`) for `s3://` URLs; "
            "credentials come from the environment or those files, never a pipeline file",
            default_text="unset: the environment's credentials",
        ),
        "region": Key("string", None, "the region of an `s3://` store"),
        "anonymous": Key("boolean", False, "read public buckets without credentials"),
    },
    "output": {
        "dir": Key(
            "path",
            "runs",
            "where the run directories are written (a URL: the run's files are put there "
            "when it ends, its scores as they are written)",
        ),
        "decision": Key(
            "boolean", False, "write the decision values beside the predictions in the scores"
        ),
        "model": Key(
            "path",
            None,
            "the model file (`model.elm`) that task `score` scores with; required by it",
        ),
    },
}

# The defaults, section -> key -> value (the configuration of a file that sets nothing)
SCHEMA: dict[str, dict] = {
    section: {name: key.default for name, key in keys.items()} for section, keys in SPEC.items()
}
GENERATE_KEYS = tuple(GENERATE)


class PipelineError(ValueError):
    """A pipeline file that cannot run; the message lists every problem."""


@dataclass
class Pipeline:
    path: str
    config: dict
    problems: list[str] = field(default_factory=list)
    # fsspec options given beside the file (``--storage-option``), for every URL; secrets
    # allowed, so never in ``config`` (which a run writes down) nor in the repr
    extra_storage_options: dict = field(default_factory=dict, repr=False, compare=False)

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


def storage_options(p: Pipeline, url: str) -> dict:
    """The fsspec ``storage_options`` of ``url`` from the pipeline's ``[storage]``, with
    ``p.extra_storage_options`` over them (a URL's only)."""
    from elmscale.data.storage import is_url, named_options

    options = named_options(url, **p["storage"])
    if p.extra_storage_options and is_url(url):
        options = merged_options(options, p.extra_storage_options)
    return options


def merged_options(base: dict, over: dict) -> dict:
    """``base`` with ``over``'s options over them, nested tables merged key by key
    (``client_kwargs.endpoint_url`` over a ``[storage]`` region keeps the region)."""
    merged = dict(base)
    for name, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(name), dict):
            merged[name] = merged_options(merged[name], value)
        else:
            merged[name] = value
    return merged


def _exists(p: Pipeline, path: str) -> bool:
    from elmscale.data.public_data import PUBLIC_FILES
    from elmscale.data.storage import is_url, locate

    if path in PUBLIC_FILES:
        # a registered public file is there by definition: the run downloads it into the
        # cache the first time (elmscale.data.public_data); checking needs no network
        return True
    if not is_url(path):
        return bool(glob.glob(path)) if glob.has_magic(path) else Path(path).exists()
    where = locate(path, storage_options(p, path))
    return bool(where.fs.glob(where.path)) if glob.has_magic(path) else where.exists()


def load_pipeline(path, overrides=(), storage_options=None) -> Pipeline:
    """Read and check a pipeline file; the result's ``problems`` list what is wrong.
    ``storage_options``: fsspec options for every URL it names, over its ``[storage]``'s
    (:attr:`Pipeline.extra_storage_options`)."""
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
        if section not in SPEC:
            problems.append(f"unknown section [{section}]{_closest(section, SPEC)}")
            continue
        if not isinstance(raw_values, dict):
            problems.append(f"[{section}] must be a table")
            continue
        for key in raw_values:
            if section == "storage" and key not in SPEC[section] and _names_a_secret(key):
                problems.append(
                    f"storage.{key}: a pipeline file holds no secret; give the credentials "
                    "in the environment (AWS_ACCESS_KEY_ID, ...) or in a profile of the "
                    "credential files (storage.profile)"
                )
            elif key not in SPEC[section]:
                problems.append(f"unknown key {section}.{key}{_closest(key, SPEC[section])}")
    for section, defaults in SCHEMA.items():
        given = raw.get(section, {}) if isinstance(raw.get(section, {}), dict) else {}
        config[section] = {
            **copy.deepcopy(defaults),
            **{k: v for k, v in given.items() if k in defaults},
        }
    pipeline = Pipeline(str(path), config, problems, dict(storage_options or {}))
    refused = _check_declared(pipeline)
    _check_values(pipeline, refused)
    return pipeline


def _names_a_secret(key: str) -> bool:
    from elmscale.data.storage import SECRET_WORDS

    return any(word in key.lower() for word in SECRET_WORDS)


def _check_declared(p: Pipeline) -> set[str]:
    """Every value against its declaration in ``SPEC`` (type, range, choices), and
    ``data.generate``'s sub-keys against ``GENERATE``; returns the names of the keys
    refused, which the checks across keys then leave alone."""
    refused = set()
    for section, keys in SPEC.items():
        for name, key in keys.items():
            problem = key.problem(f"{section}.{name}", p[section][name])
            if problem:
                p.problems.append(problem)
                refused.add(f"{section}.{name}")
    generate = p["data"]["generate"]
    if isinstance(generate, dict):
        for name, value in generate.items():
            if name not in GENERATE:
                p.problems.append(f"unknown key data.generate.{name}{_closest(name, GENERATE)}")
            elif problem := GENERATE[name].problem(f"data.generate.{name}", value):
                p.problems.append(problem)
    return refused


def _check_values(p: Pipeline, refused: set[str]) -> None:
    """The checks across keys (the declared ones are ``_check_declared``'s)."""
    run, data, model, search, compute = (
        p[s] for s in ("run", "data", "model", "search", "compute")
    )
    problems = p.problems
    generate = data["generate"]
    if data["test_size"] is not None and data["test"]:
        problems.append("data.test_size and data.test are both set; expected one of them")
    task = None if "run.task" in refused else run["task"]
    needed = {"train": ("train",), "cv": ("train",), "score": ("score",)}.get(task, ())
    for key in needed:
        if not data[key]:
            problems.append(f"data.{key} is required for task {task!r}")
    for key in ("train", "test", "score"):
        value = data[key]
        generated = generate and value in (data["train"], data["test"])
        if value and f"data.{key}" not in refused and not generated:
            _check_exists(p, f"data.{key}", value, "no such file or directory")
    if task == "score" and not p["output"]["model"]:
        problems.append("output.model (the model file to score with) is required for task 'score'")
    elif task == "score" and "output.model" not in refused:
        _check_exists(p, "output.model", p["output"]["model"], "no such file")
    estimators = registry.names()
    known_estimator = "model.estimator" not in refused and model["estimator"] in estimators
    if "model.estimator" not in refused and not known_estimator:
        problems.append(
            f"model.estimator = {model['estimator']!r}{_closest(model['estimator'], estimators)}"
        )
    if known_estimator and "model.params" not in refused:
        _check_estimator_params(model["estimator"], model["params"], problems)
    grid = search["grid"]
    if task == "cv" and grid is None:
        problems.append("search.grid is required for task 'cv' (a table of lists, or \"paper\")")
    elif (
        task == "cv" and isinstance(grid, dict) and known_estimator and "search.grid" not in refused
    ):
        _check_estimator_params(
            model["estimator"], {k: v[0] for k, v in grid.items()}, problems, "search.grid"
        )
    for key in ("scheduler_file", "tls_ca_file", "tls_cert", "tls_key"):
        path = compute[key]
        if path and f"compute.{key}" not in refused and not Path(path).is_file():
            problems.append(f"compute.{key}: {path}: no such file")


def _check_exists(p: Pipeline, key: str, path: str, missing: str) -> None:
    """A problem when ``path`` does not exist, or its store cannot say (an error of the
    store names the URL, never a secret)."""
    from elmscale.core.errors import DataError

    try:
        if not _exists(p, path):
            p.problems.append(f"{key}: {path}: {missing}")
    except DataError as exc:
        p.problems.append(f"{key}: {exc}")


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
