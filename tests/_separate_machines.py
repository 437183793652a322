"""A Dask cluster whose workers share no disk with the client, on one machine (issue 51).

On a real cluster the workers are other machines: what one process writes to its local disk
another never sees.  Here each worker is a process in its own mount namespace (``unshare
-m``) with a private tmpfs over ``/tmp`` and over the client's data folder
(:attr:`SeparateMachines.folder`, outside ``/tmp``): its ``/tmp`` is empty, the client's
and the other worker's ``/tmp`` and the client's data are out of its sight, and what it
writes there nobody else sees.  The data the workers read live where a cluster keeps them:
an object store (the tests' local S3 server, ``_s3``), whose endpoint and credentials the
workers take from their environment (``worker_env``), as a cluster's machines are given
theirs.

:func:`separate_machines` starts ``dask scheduler`` on 127.0.0.1 (outside any namespace)
and the workers, checks the scheduler answers and every worker joined (each step within a
deadline), and stops every process it started at the end, on failure too.  Where this
machine does not permit ``unshare -m`` (not root, or no mount namespaces), it raises
:class:`Unavailable`, which the fixture turns into a skip naming the reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: seconds for each step: the scheduler's file, every worker's joining, a process's end
START_TIMEOUT = 120
STOP_TIMEOUT = 20
#: a worker or scheduler left behind by a killed test run ends by itself
DEATH_TIMEOUT = "60s"
IDLE_TIMEOUT = "900s"

#: a worker's command: a private tmpfs over /tmp, then the worker (``"$@"``)
_PRIVATE_TMP = 'mount -t tmpfs -o mode=1777 tmpfs /tmp && exec "$@"'


def _private_tmp_keeping(outer: Path, hidden: Path | None = None) -> str:
    """:data:`_PRIVATE_TMP`, but where the interpreter, its environment or this checkout
    live under ``/tmp`` (a clone made there), those folders are bound back into the new
    ``/tmp`` (from ``outer``, where the old ``/tmp`` is bound first): the code the worker
    runs, not data; everything else under ``/tmp`` stays out of its sight.  ``hidden``: a
    folder (the client's data) covered by a private tmpfs too, last."""
    command = _private_tmp_binding(outer)
    if hidden is None:
        return command
    cover = f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(hidden))}"
    return command.replace('exec "$@"', f'{cover} && exec "$@"')


def _private_tmp_binding(outer: Path) -> str:
    root = Path(__file__).resolve().parents[1]
    wanted = {root, Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent}
    keep = sorted(
        {os.path.realpath(p) for p in wanted if Path(os.path.realpath(p)).is_relative_to("/tmp")}
    )
    if not keep:
        return _PRIVATE_TMP
    binds = " && ".join(
        f"mkdir -p {shlex.quote(p)} && mount --bind {shlex.quote(str(outer) + p[4:])} "
        f"{shlex.quote(p)}"
        for p in keep
    )
    return (
        f"mount --bind /tmp {shlex.quote(str(outer))} && "
        f'mount -t tmpfs -o mode=1777 tmpfs /tmp && {binds} && exec "$@"'
    )


class Unavailable(RuntimeError):
    """This machine cannot give a process its own mount namespace (the reason)."""


@dataclass
class SeparateMachines:
    """A running cluster: its ``client`` (not Dask's default client), its scheduler's
    ``address``, its workers' ``addresses``, and ``folder``, the client's data folder
    outside ``/tmp`` (removed at the end), which no worker sees (each has an empty tmpfs
    there)."""

    client: object
    addresses: list
    folder: Path
    address: str = ""


def _unshare_problem() -> str | None:
    """Why a process cannot have a private ``/tmp`` here, or None if it can."""
    if shutil.which("unshare") is None:
        return "no unshare command on this machine"
    try:
        probe = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", _PRIVATE_TMP, "sh", "true"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        return "unshare -m did not answer within 30 s"
    if probe.returncode != 0:
        return (
            "unshare -m with a tmpfs over /tmp is not permitted here "
            f"(exit {probe.returncode}: {probe.stderr.strip()[:300]})"
        )
    return None


def _die_with_parent() -> None:
    """(In a child before exec) SIGTERM when the test process ends, even killed."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _shared_folder() -> Path:
    """A new folder outside ``/tmp`` that every worker sees: ``/var/tmp``, else the
    project's ignored ``build/``."""
    for parent in (Path("/var/tmp"), Path(__file__).resolve().parents[1] / "build"):
        with contextlib.suppress(OSError):
            if Path(os.path.realpath(parent)).is_relative_to("/tmp"):
                continue
            parent.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix="elmscale-separate-", dir=parent))
    raise Unavailable("no folder outside /tmp to keep the data in")


def _worker_env(extra: dict | None = None) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS", "TMPDIR", "TEMP", "TMP")
    }
    env.update(extra or {})
    env["TMPDIR"] = "/tmp"  # (their own)
    # the tests' helpers (pickled by reference, as a LocalCluster's workers find them): code,
    # which every machine has, as it has elmscale
    tests = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH")) if p)
    return env


def _logs(folder: Path) -> str:
    out = []
    for log in sorted(folder.glob("*.log")):
        out.append(f"--- {log.name} ---\n{log.read_text(errors='replace')[-3000:]}")
    return "\n".join(out)


def _stop(process: subprocess.Popen) -> None:
    """End a process this module started (SIGTERM to its own group, then SIGKILL)."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT)


@contextlib.contextmanager
def separate_machines(n_workers: int = 2, worker_env: dict | None = None):
    """A scheduler on 127.0.0.1 and ``n_workers`` one-thread workers, each in its own mount
    namespace with a private ``/tmp`` and a private tmpfs over the client's data folder;
    ``worker_env``: variables added to the workers' environment (a store's endpoint and
    credentials); yields a :class:`SeparateMachines`."""
    from distributed import Client

    problem = _unshare_problem()
    if problem is not None:
        raise Unavailable(problem)
    folder = _shared_folder()
    (folder / "outer-tmp").mkdir()
    private_tmp = _private_tmp_keeping(folder / "outer-tmp", hidden=folder)
    processes: list[subprocess.Popen] = []
    logs = []
    client = None

    def start(name: str, command: list, cwd: Path = folder) -> subprocess.Popen:
        log = open(folder / f"{name}.log", "wb")  # noqa: SIM115 - closed at the end
        logs.append(log)
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=_worker_env(worker_env),
            cwd=cwd,
            start_new_session=True,  # (its own group: ended with its children)
            preexec_fn=_die_with_parent,
        )
        processes.append(process)
        return process

    try:
        scheduler_file = folder / "scheduler.json"
        scheduler = start(
            "scheduler",
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--no-dashboard",
                "--scheduler-file",
                str(scheduler_file),
                "--idle-timeout",
                IDLE_TIMEOUT,
            ],
        )
        deadline = time.monotonic() + START_TIMEOUT
        address = None
        while address is None:
            if scheduler.poll() is not None:
                raise RuntimeError(
                    f"dask scheduler exited ({scheduler.returncode})\n{_logs(folder)}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(f"no scheduler file in {START_TIMEOUT} s\n{_logs(folder)}")
            with contextlib.suppress(OSError, ValueError):
                address = json.loads(scheduler_file.read_text())["address"]
            if address is None:
                time.sleep(0.2)
        for i in range(n_workers):
            start(
                f"worker-{i}",
                [
                    "unshare",
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    private_tmp,
                    "sh",
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--name",
                    f"separate-{i}",
                    "--nworkers",
                    "1",
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                    "--death-timeout",
                    DEATH_TIMEOUT,
                ],
                # (not the data folder: a process whose working folder is under the tmpfs
                # would still reach the client's files through ".")
                cwd=Path("/"),
            )
        client = Client(address, timeout=f"{START_TIMEOUT}s", set_as_default=False)
        try:
            client.wait_for_workers(n_workers, timeout=START_TIMEOUT)
        except Exception as exc:
            raise RuntimeError(f"the workers did not join: {exc}\n{_logs(folder)}") from exc
        yield SeparateMachines(client, sorted(client.nthreads()), folder, address)
    finally:
        if client is not None:
            with contextlib.suppress(Exception):
                client.close(timeout=STOP_TIMEOUT)
        for process in reversed(processes):  # the workers first, then the scheduler
            _stop(process)
        for log in logs:
            log.close()
        shutil.rmtree(folder, ignore_errors=True)
