"""A command started in the background for the tests (and ``benchmarks/first_fit.py``): a
wheel's build (``tests/_wheel.py``), an ``elmscale`` run beside another
(``tests/test_pipelines.py``). Its caller does other work meanwhile, then waits for it with
a timeout or gives up on it."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def stop_process(process: subprocess.Popen, *, group=False, timeout=60) -> None:
    """SIGTERM ``process`` (its whole process group with ``group``), wait, SIGKILL it if it
    outlives ``timeout`` s."""

    def send(sig):
        try:
            os.killpg(process.pid, sig) if group else process.send_signal(sig)
        except ProcessLookupError:
            pass

    # a group is signalled even when its leader has ended: what it started may run on
    if group or process.poll() is None:
        send(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait(30)


class Background:
    """``argv`` running in the background in a session of its own, its output written to
    ``logs``/stdout and ``logs``/stderr: files, not pipes, as a pipe nobody reads meanwhile
    could fill and stop the command. A session of its own, so that :meth:`stop` ends what
    the command started with it (a build's PEP 517 hook and warmup, a run's workers)."""

    def __init__(self, argv, *, logs: Path, cwd=None, env=None):
        self.argv = [str(arg) for arg in argv]
        logs.mkdir(parents=True, exist_ok=True)
        self._out, self._err = logs / "stdout", logs / "stderr"
        with open(self._out, "wb") as out, open(self._err, "wb") as err:
            self.process = subprocess.Popen(
                self.argv, cwd=cwd, env=env, stdout=out, stderr=err, start_new_session=True
            )

    def result(self, timeout: float = 300) -> subprocess.CompletedProcess:
        """The finished command, as ``subprocess.run(..., capture_output=True, text=True)``
        returns it; stopped (its process group) and ``TimeoutExpired`` raised if it is still
        running ``timeout`` s from now."""
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            stop_process(self.process, group=True)
            raise
        return subprocess.CompletedProcess(
            self.argv,
            self.process.returncode,
            self._out.read_text(errors="replace"),
            self._err.read_text(errors="replace"),
        )

    def stop(self) -> None:
        """End it and what it started, if it still runs (its caller gave up on it)."""
        if self.process.poll() is None:
            stop_process(self.process, group=True)
