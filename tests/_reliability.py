"""Cases of the reliability matrix shared by ``tests/test_reliability.py`` (a few examples
each, in the test suite) and ``benchmarks/stress.py`` (many, in the full matrix).

Bad input: a case builds one damaged input (a model file, a pipeline file, a Parquet or CSV
file) and runs the ``elmscale`` command on it in this process (``main(argv)``); the
documented outcome is exit code 1 (bad data, a bad model file) or 2 (a bad pipeline or
command line) with one ``elmscale: error:`` line naming the file, and nothing written.  An
exception escaping ``main`` is the traceback a user would see: the case fails with it.
Inputs that are in fact valid (a bit flip in a ZIP header's timestamp) must give exit code
0 and the undamaged input's results.

Security: :func:`probe_local_clusters` starts the Dask cluster and the Ray that ``elmscale
run`` starts by itself (``elmscale.app.runner.Compute``) in a fresh process and reports the
addresses every process of theirs listens on and Ray's authentication mode.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import subprocess
import sys
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from elmscale.distributed.connect import is_loopback

FEATURES = ["f1", "f2", "f3", "f4"]


# -- running the command -------------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def run_cli(argv: list[str]) -> Outcome:
    """``elmscale ARGV`` in this process: its exit code and what it printed."""
    from elmscale.app.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return Outcome(code, out.getvalue(), err.getvalue())


def files_under(folder: Path) -> set[Path]:
    return {p for p in Path(folder).rglob("*")} if Path(folder).exists() else set()


def assert_documented_error(outcome: Outcome, codes: tuple[int, ...], names: str) -> None:
    """Exit code in ``codes``, one ``elmscale: error:`` message that names ``names``."""
    assert outcome.code in codes, (outcome.code, outcome.err)
    assert outcome.err.startswith("elmscale: error:"), outcome.err
    assert "Traceback" not in outcome.err, outcome.err
    assert names in outcome.err, (names, outcome.err)


# -- a small model and its inputs ------------------------------------------------------------


@dataclass
class ModelCase:
    folder: Path
    model: Path
    raw: bytes = field(repr=False)
    data: Path  # a CSV file of FEATURES to predict
    expected: np.ndarray = field(repr=False)  # the model's predictions for it


def make_model_case(folder: Path) -> ModelCase:
    """A fitted 8-node ELM on 4 features saved with its column names, and a CSV to score."""
    from elmscale import ELMClassifier
    from elmscale.data import generate_classification
    from elmscale.io.model_files import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    train = generate_classification(300, n_features=4, random_state=0)
    model = ELMClassifier(n_hidden=8, random_state=0).fit(train.X, train.y)
    path = save(model, folder / "model.elm", features=FEATURES, label="label")
    rows = generate_classification(50, n_features=4, random_state=1).X
    data = folder / "rows.csv"
    pacsv.write_csv(pa.table({f: rows[:, j] for j, f in enumerate(FEATURES)}), data)
    return ModelCase(folder, path, path.read_bytes(), data, model.predict(rows))


def zip_members(raw: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(raw)) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def zip_of(members: dict[str, bytes], *, sums: bool = True) -> bytes:
    """A ZIP of ``members`` with SHA256SUMS made anew: a file crafted to pass the checksums."""
    members = {k: v for k, v in members.items() if k != "SHA256SUMS"}
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        if sums:
            zf.writestr(
                "SHA256SUMS",
                "".join(f"{hashlib.sha256(v).hexdigest()}  {k}\n" for k, v in members.items()),
            )
    return buffer.getvalue()


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def truncated(raw: bytes, keep: int) -> bytes:
    return raw[: keep % len(raw)]


def bit_flipped(raw: bytes, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(raw)
    for position, bit in flips:
        out[position % len(out)] ^= 1 << (bit % 8)
    return bytes(out)


def with_outside_member(raw: bytes, name: str, listed: bool) -> bytes:
    """An extra member named ``name`` (a path out of the archive), listed in SHA256SUMS or
    not."""
    members = zip_members(raw)
    members[name] = b"written outside the archive"
    if listed:
        return zip_of(members)
    buffer = io.BytesIO(raw)
    with zipfile.ZipFile(buffer, "a") as zf:
        zf.writestr(name, members[name])
    return buffer.getvalue()


def with_huge_array(raw: bytes, shape: tuple[int, ...], dtype: str = "<f8") -> bytes:
    """Every array member's header replaced by one declaring ``shape`` over a few bytes."""
    members = zip_members(raw)
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": dtype, "fortran_order": False, "shape": tuple(shape)}
    )
    for name in members:
        if name.endswith(".npy"):
            members[name] = header.getvalue() + b"\0" * 64
    return zip_of(members)


def with_metadata(raw: bytes, change) -> bytes:
    """``change(metadata)`` applied to metadata.json, checksums made anew."""
    members = zip_members(raw)
    metadata = json.loads(members["metadata.json"])
    metadata = change(metadata)
    members["metadata.json"] = json.dumps(metadata).encode()
    return zip_of(members)


def newer_version(raw: bytes, version: int) -> bytes:
    def change(metadata):
        metadata["format_version"] = version
        return metadata

    return with_metadata(raw, change)


def metadata_paths(value, prefix=()) -> list[tuple]:
    """Every key path in a JSON value (dict keys and list positions)."""
    paths = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            paths += metadata_paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            paths += metadata_paths(v, (*prefix, i))
    return paths


def replaced_at(value, path: tuple, new):
    if not path:
        return new
    head, rest = path[0], path[1:]
    value[head] = replaced_at(value[head], rest, new)
    return value


def check_model_file(case: ModelCase, damaged: bytes, tag: str) -> str:
    """``elmscale predict`` with a damaged model file: exit 1 naming it and nothing written,
    or (the damage left the content intact) exit 0 with the undamaged predictions.
    Returns "refused" or "loaded"."""
    path = case.folder / f"damaged-{tag}.elm"
    path.write_bytes(damaged)
    out = case.folder / f"out-{tag}.csv"
    before = files_under(case.folder)
    try:
        outcome = run_cli(["predict", path, case.data, out])
        if outcome.code == 0:
            predicted = pacsv.read_csv(out).column("prediction").to_numpy()
            np.testing.assert_array_equal(predicted, case.expected)
            return "loaded"
        assert_documented_error(outcome, (1,), str(path))
        assert files_under(case.folder) == before, "a failed predict wrote a file"
        return "refused"
    finally:
        path.unlink(missing_ok=True)
        out.unlink(missing_ok=True)


# -- pipeline files --------------------------------------------------------------------------

#: A valid pipeline (the mutations start from it); ``{train}`` is a CSV file.
BASE_PIPELINE = {
    "run": {"name": "fuzz", "task": "train", "seed": 0},
    "data": {"train": "{train}", "label": "label"},
    "model": {"estimator": "ELMClassifier", "params": {"n_hidden": 10}},
    "search": {"folds": 3},
    "compute": {"workers": 1},
    "output": {"dir": "{out}"},
}


def pipeline_folder(folder: Path, case: ModelCase) -> Path:
    """``folder`` with ``train.csv`` (the case's rows and a 0 / 1 label) for BASE_PIPELINE."""
    lines = case.data.read_text().splitlines()
    rows = "".join(f"{line},{i % 2}\n" for i, line in enumerate(lines[1:]))
    (folder / "train.csv").write_text(f"{lines[0]},label\n{rows}")
    return folder


def mutated_pipeline(folder: Path, changes) -> str:
    """BASE_PIPELINE on ``folder``'s train.csv with ``changes`` ``((section, key), value)``
    applied, as TOML text."""
    config = json.loads(json.dumps(BASE_PIPELINE))
    config["data"]["train"] = str(folder / "train.csv")
    config["output"]["dir"] = str(folder / "runs")
    for (section, key), value in changes:
        config.setdefault(section, {})
        if isinstance(config[section], dict):
            config[section][key] = value
    return toml_text(config)


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not np.isfinite(value):
            return "nan" if np.isnan(value) else ("inf" if value > 0 else "-inf")
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string is a JSON string
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(value)


def toml_text(config: dict) -> str:
    lines = []
    for section, values in config.items():
        if not isinstance(values, dict):
            lines.append(f"{json.dumps(section)} = {toml_value(values)}")
            continue
    for section, values in config.items():
        if isinstance(values, dict):
            lines.append(f"[{json.dumps(section)}]")
            lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def check_pipeline_file(folder: Path, text: str, tag: str) -> str:
    """``elmscale validate`` and ``run --dry-run`` of a pipeline file: exit 0 (valid) or 2
    naming the file, never a traceback; nothing written either way.  Returns "valid" or
    "refused"."""
    path = folder / f"pipeline-{tag}.toml"
    path.write_text(text)
    before = files_under(folder)
    try:
        validate = run_cli(["validate", path])
        dry = run_cli(["run", path, "--dry-run"])
        assert files_under(folder) == before, "validate / --dry-run wrote a file"
        if validate.code == 0:
            assert dry.code == 0, dry.err
            return "valid"
        assert_documented_error(validate, (2,), str(path))
        assert_documented_error(dry, (2,), str(path))
        return "refused"
    finally:
        path.unlink(missing_ok=True)


# -- data files ------------------------------------------------------------------------------

COLUMN_KINDS = ("float64", "float32", "int64", "bool", "string", "nulls", "all_null", "absent")
CORRUPTIONS = ("none", "truncated", "footer_flip", "empty", "garbage")


def data_table(kinds: list[str], n_rows: int, seed: int) -> pa.Table:
    """A table with FEATURES of the given kinds (and an id column)."""
    rng = np.random.default_rng(seed)
    columns = {"id": pa.array(np.arange(n_rows), pa.int64())}
    for name, kind in zip(FEATURES, kinds):
        values = rng.uniform(-1, 1, n_rows)
        if kind == "absent":
            continue
        if kind in ("float64", "float32"):
            columns[name] = pa.array(values.astype(kind))
        elif kind == "int64":
            columns[name] = pa.array((values * 10).astype(np.int64))
        elif kind == "bool":
            columns[name] = pa.array(values > 0)
        elif kind == "string":
            columns[name] = pa.array([f"x{v:.3f}" for v in values], pa.string())
        elif kind == "nulls":
            mask = np.arange(n_rows) % 3 == 0
            columns[name] = pa.array(values, mask=mask)
        elif kind == "all_null":
            columns[name] = pa.nulls(n_rows, pa.float64())
    return pa.table(columns)


def write_data_file(
    path: Path, table: pa.Table, corruption: str, where: int, seed: int
) -> pa.Table | None:
    """Write ``table`` (Parquet or CSV by suffix), then damage it; returns the table a reader
    should see when the damage leaves the file intact, else None."""
    if path.suffix == ".csv":
        pacsv.write_csv(table, path)
    else:
        pq.write_table(table, path, row_group_size=max(1, table.num_rows // 3 or 1))
    raw = path.read_bytes()
    if corruption == "none":
        return table
    if corruption == "truncated":
        path.write_bytes(raw[: where % max(1, len(raw))])
    elif corruption == "footer_flip":
        data = bytearray(raw)
        data[len(data) - 1 - where % min(len(data), 64)] ^= 0xFF
        path.write_bytes(bytes(data))
    elif corruption == "empty":
        path.write_bytes(b"")
    elif corruption == "garbage":
        path.write_bytes(np.random.default_rng(seed).bytes(1 + where % 400))
    return None


def data_verdict(kinds: list[str], n_rows: int, corruption: str, csv: bool) -> str:
    """What scoring must do: "ok", "error", or "either" (a damaged CSV may still parse)."""
    if corruption in ("truncated", "footer_flip"):
        # a CSV cut at a row's end still parses; a flip in a Parquet footer's key-value
        # metadata or a CSV value may leave a readable file
        return "either" if csv or corruption == "footer_flip" else "error"
    if corruption != "none":
        return "error"
    if n_rows == 0:
        return "error"
    bad = {"string", "nulls", "all_null", "absent"}
    return "error" if bad & set(kinds) else "ok"


def check_scoring_input(
    case: ModelCase,
    kinds: list[str],
    n_rows: int,
    corruption: str,
    where: int,
    csv: bool,
    tag: str,
) -> str:
    """``elmscale score`` of one generated (maybe damaged) input: exit 0 with as many rows
    out as in, or exit 1 naming the input with nothing written.  Returns "scored" or
    "refused"."""
    table = data_table(kinds, n_rows, seed=where)
    source = case.folder / f"input-{tag}.{'csv' if csv else 'parquet'}"
    intact = write_data_file(source, table, corruption, where, seed=where)
    out_dir = case.folder / f"scored-{tag}"
    verdict = data_verdict(kinds, n_rows, corruption, csv)
    try:
        outcome = run_cli(["score", case.model, source, out_dir, "--id", "id", "--quiet"])
        if outcome.code == 0:
            assert verdict in ("ok", "either"), (verdict, kinds, n_rows, corruption)
            written = list(out_dir.glob("*"))
            assert [p.name for p in written] == [f"{source.stem}.parquet"], written
            scored = pq.read_table(written[0])
            # rows in = rows out, counted by reading the input as it is now
            rows_in = (pacsv.read_csv if csv else pq.read_table)(source).num_rows
            assert scored.num_rows == rows_in
            if intact is not None or not csv:  # a Parquet file is read whole or refused
                assert scored.column("id").to_pylist() == table.column("id").to_pylist()
            return "scored"
        assert verdict in ("error", "either"), (verdict, kinds, n_rows, corruption, outcome)
        assert_documented_error(outcome, (1,), str(source))
        assert not files_under(out_dir), f"a failed score wrote {files_under(out_dir)}"
        return "refused"
    finally:
        source.unlink(missing_ok=True)
        for p in sorted(files_under(out_dir), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        if out_dir.exists():
            out_dir.rmdir()


# -- security --------------------------------------------------------------------------------

_PROBE = r"""
import json, os, sys, psutil

def listening(procs):
    found = []
    for proc in procs:
        try:
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    found.append([proc.pid, proc.name(), conn.laddr.ip, conn.laddr.port])
        except psutil.Error:
            pass
    return found

def main():
    from elmscale.app.runner import Compute, resolve_compute
    me = psutil.Process()
    compute = Compute(resolve_compute(None), workers=2, threads_per_worker=1)
    report = {}
    try:
        client = compute.dask()
        report["dask"] = listening([me] + me.children(recursive=True))
        # the periodic wake-ups of each process (ms; the workers' profiler, if any)
        report["wakeups"] = {
            "scheduler tick": client.run_on_scheduler(
                lambda dask_scheduler: dask_scheduler.periodic_callbacks["tick"].callback_time),
            "workers": list(client.run(lambda dask_worker: {
                "tick": dask_worker.periodic_callbacks["tick"].callback_time,
                "profile": "profile" in dask_worker.periodic_callbacks}).values()),
        }
        if sys.argv[1] == "ray":
            before = {tuple(x[2:]) for x in report["dask"]}
            compute.ray()
            from ray._private.authentication.authentication_utils import is_token_auth_enabled
            import ray
            report["ray"] = [x for x in listening([me] + me.children(recursive=True))
                             if tuple(x[2:]) not in before]
            report["ray_token_auth"] = bool(is_token_auth_enabled())
            report["gcs_address"] = ray.get_runtime_context().gcs_address
            report["ray_node_ip"] = ray.util.get_node_ip_address()
            node = [n for n in ray.nodes() if n["Alive"]][0]
            report["ray_servers"] = {
                str(node[key]): name for key, name in [
                    ("NodeManagerPort", "raylet node manager"),
                    ("ObjectManagerPort", "raylet object manager"),
                    ("MetricsAgentPort", "dashboard agent gRPC"),
                    ("MetricsExportPort", "metrics export (Prometheus)"),
                    ("DashboardAgentListenPort", "dashboard agent HTTP"),
                    ("RuntimeEnvAgentPort", "runtime env agent"),
                ] if node.get(key, -1) not in (None, -1, 0)
            }
            report["ray_servers"][report["gcs_address"].rsplit(":", 1)[1]] = "GCS server"
            if len(sys.argv) > 2:  # a client without the token must be refused
                import subprocess
                code = f"import ray; ray.init(address={report['gcs_address']!r})"
                # RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0: the client keeps 127.0.0.1 as it is
                # (else Ray turns it into this machine's outward address, where the
                # loopback-only GCS does not answer): the token is what refuses it
                env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="0" * 32,
                           RAY_AUTH_TOKEN_PATH="/nonexistent",
                           RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
                r = subprocess.run([sys.executable, "-c", code], env=env, timeout=120,
                                   capture_output=True, text=True)
                # refused for its token (the GCS says Unauthenticated), not unreachable
                report["unauthenticated_client_refused"] = (
                    r.returncode != 0 and "Unauthenticated" in r.stderr)
                report["unauthenticated_client_error"] = (r.stderr.strip().splitlines() or [""])[-1]
    finally:
        compute.close()
    print("PROBE " + json.dumps(report))

if __name__ == "__main__":
    main()
"""


def probe_local_clusters(ray: bool, try_unauthenticated: bool = False, timeout: float = 300):
    """The report of :data:`_PROBE` run in a fresh process (a local Dask cluster, and a
    local Ray when ``ray``, started as ``elmscale run`` starts them)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS")
    }
    argv = [sys.executable, "-c", _PROBE, "ray" if ray else "dask"]
    if try_unauthenticated:
        argv.append("unauthenticated")
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("PROBE ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    return json.loads(lines[-1][6:])


# Servers of a local Ray that Ray's options cannot keep on loopback (Ray 2.60: none; with
# elmscale.distributed.connect.start_local_ray every one listens on 127.0.0.1 only):
# "server name": "why (the option Ray lacks)".  A server listed here beyond loopback is a
# known limit of the matrix; any other one fails it.
RAY_LOOPBACK_LIMITS: dict = {}


def ray_server_name(report: dict, entry: list) -> str:
    """What a listening socket of the probed Ray is: its server by port, else its process
    (a core worker's gRPC server: the driver, ``python``, or a ``ray::`` worker)."""
    _, process, _, port = entry
    server = report.get("ray_servers", {}).get(str(port))
    worker = process.startswith("python") or process.startswith("ray::")
    return server or ("core worker gRPC" if worker else process)


def ray_beyond_loopback(report: dict) -> list:
    """The probed Ray's listening sockets beyond loopback: ``(line, known)`` each, the line
    naming server, process, address, port and why (a known limit's reason, or what went
    wrong), ``known`` whether the server is one of :data:`RAY_LOOPBACK_LIMITS`."""
    lines = []
    for entry in report["ray"]:
        if is_loopback(entry[2]):
            continue
        server = ray_server_name(report, entry)
        why = RAY_LOOPBACK_LIMITS.get(server) or (
            f"the node address is {report.get('ray_node_ip')}, not 127.0.0.1: "
            "start_local_ray's loopback option did not take"
            if not is_loopback(report.get("ray_node_ip", "0.0.0.0"))
            else "beyond loopback although the node address is 127.0.0.1"
        )
        line = f"{server} ({entry[1]} pid {entry[0]}) on {entry[2]}:{entry[3]}: {why}"
        lines.append((line, server in RAY_LOOPBACK_LIMITS))
    return lines


_AUDIT: dict = {"on": False, "events": []}
_FILE_EVENTS = ("open", "os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link")


def _audit(event, args):
    # the calling thread's events only: a Dask or Ray monitor thread of the test session
    # reads /proc/<pid>/stat on its own schedule (seen once as a failure here)
    if _AUDIT["on"] and event in _FILE_EVENTS and threading.get_ident() == _AUDIT["thread"]:
        _AUDIT["events"].append((event, args[0] if args else None))


def file_events(fn):
    """``fn()``'s file opens, removals, renames and directory changes (audit events), in
    the thread that calls it (``fn`` runs there; loading a model file starts no thread)."""
    if not _AUDIT.get("hooked"):
        sys.addaudithook(_audit)
        _AUDIT["hooked"] = True
    _AUDIT["events"] = []
    _AUDIT["thread"] = threading.get_ident()
    _AUDIT["on"] = True
    try:
        fn()
    finally:
        _AUDIT["on"] = False
    return list(_AUDIT["events"])


def model_file_touches_only_itself(case: ModelCase) -> int:
    """Loading a model file whose members and array references point outside it opens,
    writes, renames or removes nothing but the file itself (audit events), and is refused
    naming it.  Returns the number of crafted files tried."""
    import elmscale
    from elmscale.core.errors import ModelFileError

    target = case.folder / "outside.txt"
    coef = ("model", "arrays", "coef_")
    crafted = [
        with_outside_member(case.raw, f"../{target.name}", listed=True),
        with_outside_member(case.raw, f"../{target.name}", listed=False),
        with_outside_member(case.raw, str(target), listed=True),
        with_outside_member(case.raw, f"arrays/../../{target.name}", listed=True),
        with_metadata(case.raw, lambda m: replaced_at(m, coef, str(target))),
        with_metadata(case.raw, lambda m: replaced_at(m, coef, f"../{target.name}")),
    ]
    target.write_text("secret")
    for i, raw in enumerate(crafted):
        path = case.folder / f"crafted-{i}.elm"
        path.write_bytes(raw)
        before = {p: p.stat().st_mtime_ns for p in files_under(case.folder)}
        refused = []

        def load(path=path, refused=refused):
            try:
                elmscale.load(path)
            except ModelFileError as exc:
                refused.append(str(exc))

        events = file_events(load)
        assert refused and str(path) in refused[0], f"{path}: a crafted file loaded"
        touched = {os.fspath(arg) for _, arg in events if isinstance(arg, (str, os.PathLike))}
        assert touched <= {str(path)}, touched
        assert {p: p.stat().st_mtime_ns for p in files_under(case.folder)} == before
        assert target.read_text() == "secret"
        path.unlink()
    target.unlink()
    return len(crafted)


# -- signals: what a stopped or killed command leaves running -------------------------------

#: seconds a command's processes have to end after SIGINT, SIGTERM or SIGKILL (issue 41)
GRACE_S = 10.0
TAG = "ELMSCALE_KILL_CASE"  # set in the command's environment: its processes carry it


def clean_env(**extra) -> dict:
    """This environment without a Dask or Ray address (the command starts its own)."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS")
    }
    return {**env, **extra}


def command_processes(sid: int, tag: str) -> dict[int, str]:
    """The live processes of a command started with ``start_new_session=True`` (its
    session is its pid) or carrying ``tag`` in their environment (a process that started a
    session of its own): pid -> command line."""
    import psutil

    found = {}
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        pid = proc.info["pid"]
        if pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        with contextlib.suppress(psutil.Error, OSError):
            if os.getsid(pid) == sid or proc.environ().get(TAG) == tag:
                found[pid] = " ".join(proc.info["cmdline"] or [])[:120]
    return found


def _sigint_default() -> None:
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


@dataclass
class Stopped:
    """What :func:`stop_command` saw."""

    code: int | None  # the command's exit code (None: it had not exited)
    ready: bool  # the command reached the point it was to be signalled at
    at_signal: dict  # its processes when the signal was sent
    left: dict  # its processes GRACE_S after the signal (then killed)
    gone_s: float | None  # seconds from the signal until none was left
    out: str
    err: str
    waited_s: float = 0.0  # seconds from the signal until ``left`` was counted


def stop_command(
    argv,
    sig: int,
    *,
    ready=None,
    delay: float = 0.0,
    env: dict | None = None,
    ready_timeout: float = 240.0,
    wait_gone: float = 0.0,
    gone_by: float | None = None,
) -> Stopped:
    """Start ``argv`` in a session of its own, wait until ``ready(pid, out_path)`` (then
    ``delay`` s), send ``sig`` (SIGINT to its process group, as a terminal's Ctrl-C;
    SIGTERM and SIGKILL to the command alone, as ``kill PID``), and count its processes
    left :data:`GRACE_S` s later; whatever is left is then killed (after up to
    ``wait_gone`` s more, to time how long it lingers: ``gone_s``).

    ``gone_by`` (a ``time.monotonic()`` value): wait for its processes to end until then
    instead, each poll checking which are still running (exited and reaped, or a zombie,
    is ended), and count those left then (a test's own time limit: on a loaded machine
    they may take longer than :data:`GRACE_S` to end, and what matters is that they do)."""
    import signal
    import tempfile
    import time
    import uuid

    tag = uuid.uuid4().hex
    with tempfile.TemporaryDirectory(prefix="elmscale-kill-") as folder:
        out_path, err_path = Path(folder) / "out", Path(folder) / "err"
        with open(out_path, "w") as out, open(err_path, "w") as err:
            process = subprocess.Popen(
                [str(a) for a in argv],
                env={**(env or clean_env()), TAG: tag},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                # Ctrl-C as in a terminal: not ignored (a background job of a script
                # starts with SIGINT ignored, and Python then keeps it so)
                preexec_fn=_sigint_default,
            )
        pid = process.pid
        try:
            reached = True
            if ready is not None:
                deadline = time.monotonic() + ready_timeout
                reached = False
                while process.poll() is None and time.monotonic() < deadline:
                    if ready(pid, out_path):
                        reached = True
                        break
                    time.sleep(0.05)
            time.sleep(delay)
            at_signal = command_processes(pid, tag)
            sent = time.monotonic()
            with contextlib.suppress(ProcessLookupError):
                if sig == signal.SIGINT:
                    os.killpg(pid, sig)
                else:
                    os.kill(pid, sig)
            left, gone_s = {}, None
            until = sent + GRACE_S if gone_by is None else gone_by
            while True:
                process.poll()
                left = command_processes(pid, tag)
                if not left:
                    gone_s = time.monotonic() - sent
                    break
                if time.monotonic() >= until:
                    break
                time.sleep(0.1)
            waited_s = time.monotonic() - sent
            while left and gone_by is None and time.monotonic() - sent < GRACE_S + wait_gone:
                time.sleep(0.5)
                if not command_processes(pid, tag):
                    gone_s = time.monotonic() - sent
                    break
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(0.1 if left else 5)  # a zombie is not counted: reap it
            code = process.poll()
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            for other in command_processes(pid, tag):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(other, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
        out_text, err_text = out_path.read_text(), err_path.read_text()
        return Stopped(code, reached, at_signal, left, gone_s, out_text, err_text, waited_s)


def has_piece_workers(pid: int, out_path) -> bool:
    """``ready`` for ``elmscale reproduce``: its forkserver has forked a piece worker."""
    import psutil

    with contextlib.suppress(psutil.Error):
        forked = [
            p
            for p in psutil.Process(pid).children(recursive=True)
            if "multiprocessing.forkserver" in " ".join(p.cmdline())
        ]
        return len(forked) >= 2  # the forkserver and a worker
    return False


def cpu_seconds_past(seconds: float):
    """``ready``: the command has used more than ``seconds`` of CPU time (its imports
    done, its work begun)."""
    import psutil

    def ready(pid: int, out_path) -> bool:
        with contextlib.suppress(psutil.Error):
            times = psutil.Process(pid).cpu_times()
            return times.user + times.system > seconds
        return False

    return ready


def printed(text: str):
    """``ready``: the command has printed ``text`` on its standard output."""

    def ready(pid: int, out_path) -> bool:
        return text in Path(out_path).read_text()

    return ready


def files_appear(pattern_folder: Path, pattern: str):
    """``ready``: a file matching ``pattern`` exists under ``pattern_folder``."""

    def ready(pid: int, out_path) -> bool:
        return any(Path(pattern_folder).glob(pattern))

    return ready


KILL_PIPELINE = """
[run]
name = "kill"
task = "cv"
seed = 0

[data]
train = "{train}"
score = "{score}"
label = "label"
generate = {{ rows = {rows}, features = 8, classes = 3 }}

[model]
estimator = "SparseELMClassifier"
params = {{ sigma = 0.5 }}

[search]
grid = {{ C = [1, 10], sigma = [0.5, 1.0] }}
folds = 3

[output]
dir = "{runs}"

[compute]
workers = 2
"""


@dataclass
class KillCommand:
    """A command to stop midway: its argv, when it is mid-work (``ready``, then ``delay``
    s), its environment, how to rerun it (``rerun_argv``) and check the rerun
    (``check(rerun_outcome) -> what it found``, starting "failed:" if it did not resume or
    complete), and the half-written files it left
    (``partial() -> names``)."""

    argv: list
    ready: object
    delay: float
    rerun_argv: list
    check: object
    partial: object
    env: dict = field(default_factory=clean_env)


ELMSCALE = [sys.executable, "-m", "elmscale"]


def _dotfiles(folder: Path) -> list[str]:
    return sorted(p.name for p in Path(folder).rglob(".*")) if Path(folder).exists() else []


def _journal(out: Path) -> list[bytes]:
    path = out / "pieces.jsonl"
    return path.read_bytes().splitlines(keepends=True) if path.exists() else []


def _run_command(fresh: Path, score_data: Path, phase: str) -> KillCommand:
    """``elmscale run`` of :data:`KILL_PIPELINE`, mid-work once ``phase`` is logged."""
    runs = fresh / "runs"
    fresh.mkdir()
    pipeline = fresh / "kill.toml"
    pipeline.write_text(
        KILL_PIPELINE.format(train=fresh / "train", score=score_data, rows=3000, runs=runs)
    )

    def ready(pid, out_path):
        return any(phase in p.read_text() for p in runs.glob("*/run.log"))

    def partial():
        names = _dotfiles(runs)
        names += [f"{d.name}/metrics.json" for d in runs.glob("*") if (d / "metrics.json").exists()]
        for scored in runs.glob("*/scores/*.parquet"):
            if pq.ParquetFile(scored).metadata.num_rows != 500_000:
                names.append(scored.name)
        return names

    def check(outcome):
        done = [d for d in runs.glob("*") if (d / "metrics.json").exists()]
        if outcome.code != 0 or len(done) != 1:
            ended = f"{len(done)} finished runs"
            return f"failed: rerun exit {outcome.code}, {ended}: {outcome.err[-300:]}"
        return "a fresh run completed"

    argv = [*ELMSCALE, "run", pipeline]
    return KillCommand(argv, ready, 1.0, argv, check, partial)


def kill_commands(folder: Path, full_rerun: bool = True) -> dict:
    """:class:`KillCommand` s of ``reproduce``, ``run`` (killed in its Ray phase, and in
    its Dask phase: ``run-dask``), ``score``, ``train`` and ``warmup`` on small generated
    inputs under ``folder`` (each with a fresh output: call again for another try).
    ``full_rerun`` False: reproduce's rerun is a ``--dry-run`` (the journal read, the
    remaining pieces planned) instead of the rest of its pieces (a minute)."""
    import uuid

    from elmscale import ELMClassifier
    from elmscale.data import generate_classification, write_generated_parquet
    from elmscale.io.model_files import save

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fresh = folder / uuid.uuid4().hex[:8]
    fresh.mkdir()
    commands = {}

    # reproduce: a paper's pieces in the piece pool; the rerun resumes from the journal
    csv = folder / "gen400.csv"
    if not csv.exists():
        data = generate_classification(400, n_features=10, random_state=0)
        np.savetxt(csv, np.column_stack([data.X, data.y]), delimiter=",", fmt="%.6g")
    out = fresh / "reproduce"
    argv = [*ELMSCALE, "reproduce", "sparse-elm", "--sets", csv, "--trials", "1"]
    argv += ["--out", out, "--quiet"]
    kept: dict = {}

    def reproduce_partial():
        kept["lines"] = _journal(out)
        torn = kept["lines"] and not kept["lines"][-1].endswith(b"\n")
        return _dotfiles(out) + (["pieces.jsonl (a torn last line)"] if torn else [])

    def reproduce_check(outcome):
        lines = _journal(out)
        before = [line for line in kept.get("lines", []) if line.endswith(b"\n")]
        if outcome.code != 0:
            return f"failed: rerun exit {outcome.code}: {outcome.err[-300:]}"
        if lines[: len(before)] != before:
            return "failed: the rerun changed the journal's finished pieces"
        if not full_rerun:
            if "dry run of sparse-elm" not in outcome.out:
                return f"failed: the dry run planned nothing: {outcome.out[-200:]}"
            return f"resumable: {len(before)} pieces kept, the rest planned (dry run)"
        if "reproduced sparse-elm: 10 pieces" not in outcome.out or len(lines) != 10:
            return f"failed: rerun ended with {len(lines)} pieces journaled: {outcome.out[-200:]}"
        return f"resumed: {len(before)} pieces kept, {len(lines) - len(before)} run"

    def reproduce_ready(pid, out_path):  # a piece journaled, others running
        return bool(_journal(out)) and has_piece_workers(pid, out_path)

    again = argv if full_rerun else [*argv, "--dry-run"]
    commands["reproduce"] = KillCommand(
        argv, reproduce_ready, 1.0, again, reproduce_check, reproduce_partial
    )

    # run: a pipeline on a local Ray (the grid), then a local Dask cluster (scoring)
    score_data = folder / "run-score"
    if not score_data.exists():
        write_generated_parquet(score_data, 2_000_000, rows_per_file=500_000)
    for name, phase in (("run", "started a local Ray"), ("run-dask", "started a local Dask")):
        commands[name] = _run_command(fresh / name, score_data, phase)

    # score: a folder of files, each scored whole or not at all; the rerun does the rest
    model_path = folder / "model.elm"
    inputs = folder / "score-inputs"
    if not inputs.exists():
        train = generate_classification(500, n_features=8, random_state=0)
        save(
            ELMClassifier(n_hidden=200, random_state=0).fit(train.X, train.y),
            model_path,
            features=[f"f{j + 1}" for j in range(8)],
        )
        write_generated_parquet(inputs, 1_200_000, rows_per_file=200_000)
    scored = fresh / "scored"

    def score_check(outcome):
        files = sorted(scored.glob("*.parquet"))
        if outcome.code != 0 or len(files) != 6:
            ended = f"{len(files)} of 6 files"
            return f"failed: rerun exit {outcome.code}, {ended}: {outcome.err[-300:]}"
        if not all(pq.ParquetFile(f).metadata.num_rows == 200_000 for f in files):
            return "failed: a file with rows missing"
        return outcome.out.strip().splitlines()[-1][:100] if outcome.out.strip() else ""

    argv = [*ELMSCALE, "score", model_path, inputs, scored, "--quiet"]
    commands["score"] = KillCommand(
        argv, files_appear(scored, "*.parquet"), 0.0, argv, score_check, lambda: _dotfiles(scored)
    )

    # train: one process, no children; nothing saved unless the fit ends
    train_data = folder / "train-150k"
    if not train_data.exists():
        write_generated_parquet(train_data, 150_000, rows_per_file=150_000)
    model_out = fresh / "trained.elm"
    argv = [*ELMSCALE, "train", train_data, model_out, "--label", "label"]
    argv += ["-p", "n_hidden=2500"]

    def train_check(outcome):
        if outcome.code != 0 or not model_out.exists():
            return f"failed: rerun exit {outcome.code}: {outcome.err[-300:]}"
        return "trained"

    commands["train"] = KillCommand(
        argv,
        cpu_seconds_past(3.5),
        0.0,
        argv,
        train_check,
        lambda: _dotfiles(fresh) + (["trained.elm"] if model_out.exists() else []),
    )

    # warmup: numba compiling into an empty cache; the rerun (two quick steps) completes
    cache = fresh / "cache"
    env = clean_env(ELMSCALE_CACHE_DIR=str(cache))

    def warmup_check(outcome):
        if outcome.code != 0:
            return f"failed: rerun exit {outcome.code}: {outcome.err[-300:]}"
        return outcome.out.strip().splitlines()[-1][:100]

    commands["warmup"] = KillCommand(
        [*ELMSCALE, "warmup"],
        printed("elmscale warmup: numba cache"),
        3.0,
        [*ELMSCALE, "warmup", "--only", "core", "elm", "--quiet"],
        warmup_check,
        lambda: [],
        env,
    )
    return commands


def rerun(command: KillCommand, timeout: float = 600) -> Outcome:
    """The command's rerun, to its end."""
    result = subprocess.run(
        [str(a) for a in command.rerun_argv],
        env=command.env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Outcome(result.returncode, result.stdout, result.stderr)
