"""Children that end with the command, and a command that stops cleanly on SIGTERM.

A process elmscale starts must not outlive the command that started it, however the
command ends (SIGKILL included).  Three ties, Linux first:

* :func:`die_with_parent`: the kernel sends SIGKILL to this process when the *thread*
  that forked it ends (``prctl(PR_SET_PDEATHSIG)``): for a child forked from a process's
  main thread (a piece worker, forked by the forkserver's only thread).
* :func:`watch_parent`: a thread that kills this process once its parent has changed
  (the parent died and the process was handed to init or a subreaper): for a child
  started from any thread of its parent (the forkserver, started from a piece thread).
* :func:`exit_when_closed`: a thread that kills this process when the other end of a
  socket or pipe it holds is closed (the command died): for a grandchild, whose parent is
  not the command (a piece worker, whose parent is the forkserver).

:func:`terminate_raises` makes SIGTERM raise :class:`Terminated` (a ``KeyboardInterrupt``)
in the main thread, so that a terminated command unwinds like an interrupted one: its
``finally`` blocks shut down what it started, and it exits with ``128 + signal``
(:func:`exit_code`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time

__all__ = [
    "Terminated",
    "die_with_parent",
    "exit_code",
    "exit_when_closed",
    "sigterm_kept",
    "sigterm_raises",
    "stop_signal",
    "terminate_raises",
    "watch_parent",
]

_PR_SET_PDEATHSIG = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived (raised in the main thread by :func:`terminate_raises`)."""

    signum = signal.SIGTERM


_received: list = []  # SIGTERM, once it has arrived (Ray re-raises a plain KeyboardInterrupt)


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The shell's code for a command ended by ``interrupt``: 143 for SIGTERM (also where
    a library turned :class:`Terminated` into a plain ``KeyboardInterrupt``, as Ray's
    ``ray.get`` does), 130 for SIGINT (Ctrl-C)."""
    signum = getattr(interrupt, "signum", None) or (_received[-1] if _received else None)
    return 128 + int(signum or signal.SIGINT)


def stop_signal() -> int | None:
    """The stop signal (SIGTERM, SIGINT) that arrived within :func:`sigterm_raises`, if
    any: its exception may have been swallowed (raised inside a ctypes callback, as
    numba's compiler has, the command then failing with another error)."""
    return _received[-1] if _received else None


def _on_sigint(signum, frame):
    _received.append(signal.SIGINT)
    raise KeyboardInterrupt()


def _on_sigterm(signum, frame):
    # a second SIGTERM during the clean-up ends the command at once (its children follow
    # it through their lifelines)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _received.append(signal.SIGTERM)
    raise Terminated()


def terminate_raises():
    """SIGTERM raises :class:`Terminated` in the main thread from now on (once: a second
    SIGTERM ends the process at once); returns the handler it replaced.  None, and
    nothing changed, off the main thread or where SIGTERM is ignored (``nohup``-like)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_IGN:
        return None
    signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # Python's, noted
        signal.signal(signal.SIGINT, _on_sigint)
    return previous


@contextlib.contextmanager
def sigterm_raises(deadline: float | None = 8.0):
    """:func:`terminate_raises` for the block, the handler before it restored after.

    ``deadline``: seconds the command has to unwind once SIGTERM or SIGINT arrives; past
    them it kills its descendants (SIGKILL) and exits at once (``os._exit(128 +
    signal)``).  A Python handler runs only when the main thread is back in the
    interpreter, and a numba kernel, a BLAS call or Ray's C++ start-up may hold it there
    for minutes; the countdown runs in a thread woken by the signal itself
    (``signal.set_wakeup_fd``).
    None: no deadline."""
    _received.clear()
    previous = terminate_raises()
    watchdog = _Watchdog.start(deadline) if previous is not None and deadline else None
    hook = sys.unraisablehook
    sys.unraisablehook = _quiet_interrupts(hook)
    try:
        yield
    finally:
        sys.unraisablehook = hook
        if watchdog is not None:
            watchdog.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
            if signal.getsignal(signal.SIGINT) is _on_sigint:
                signal.signal(signal.SIGINT, signal.default_int_handler)
        _received.clear()


def _quiet_interrupts(hook):
    """``sys.unraisablehook`` without the interrupts: a SIGINT or SIGTERM raised inside a
    ctypes callback (numba's compiler) is printed as "Exception ignored" with a traceback,
    and the command reports it as stopped anyway (:func:`stop_signal`)."""

    def quiet(unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            return
        hook(unraisable)

    return quiet


@contextlib.contextmanager
def sigterm_kept():
    """Put :func:`terminate_raises`'s SIGTERM handler back after the block if it was in
    place before it: ``ray.init`` installs Ray's C++ failure handler over it (it logs a
    stack and exits 1, before anything the command started is shut down)."""
    ours = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is _on_sigterm
    )
    try:
        yield
    finally:
        if ours:
            signal.signal(signal.SIGTERM, _on_sigterm)


class _Watchdog:
    """The thread behind ``sigterm_raises``'s deadline."""

    def __init__(self, deadline: float, read_fd: int, write_fd: int, old_wakeup: int):
        self.deadline = deadline
        self.read_fd, self.write_fd, self.old_wakeup = read_fd, write_fd, old_wakeup
        self.stopped = False

    @classmethod
    def start(cls, deadline: float):
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            old = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except (ValueError, OSError):  # pragma: no cover - not the main thread
            os.close(read_fd)
            os.close(write_fd)
            return None
        if old != -1:  # someone's loop (asyncio in the main thread) has it: leave it
            signal.set_wakeup_fd(old)
            os.close(read_fd)
            os.close(write_fd)
            return None
        watchdog = cls(deadline, read_fd, write_fd, old)
        threading.Thread(target=watchdog._watch, name="elmscale-deadline", daemon=True).start()
        return watchdog

    def _watch(self) -> None:
        stopping = (signal.SIGTERM, signal.SIGINT)
        while True:
            try:
                got = os.read(self.read_fd, 64)
            except OSError:
                return
            if not got:  # stop(): the block ended
                os.close(self.read_fd)
                return
            hits = [n for n in got if n in stopping]
            if hits:
                time.sleep(self.deadline)
                if self.stopped:  # the command unwound in time (called in-process)
                    os.close(self.read_fd)
                    return
                with contextlib.suppress(Exception):
                    sys.stderr.write(
                        f"elmscale: still stopping {self.deadline:g} s after the signal; "
                        "exiting now\n"
                    )
                    sys.stderr.flush()
                _kill_descendants()
                os._exit(128 + hits[0])

    def stop(self) -> None:
        self.stopped = True
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(self.old_wakeup)
        os.close(self.write_fd)


def _kill_descendants() -> None:
    """SIGKILL every descendant of this process (the deadline's exit: what the command
    started ends with it, also the processes that no lifeline ties to it, such as a Ray
    raylet's agents, which notice their raylet's end only a minute later)."""
    with contextlib.suppress(Exception):
        import psutil

        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                proc.kill()


def _kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def die_with_parent(parent: int | None = None) -> None:
    """Linux: SIGKILL to this process when the thread that forked it ends.  ``parent``: the
    pid this process was started by; if it is gone already (died before the call), this
    process ends now.  Elsewhere nothing (use :func:`watch_parent`)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent is not None and os.getppid() != parent:
        _kill_self()


def watch_parent(parent: int | None = None, every: float = 0.2) -> threading.Thread:
    """A daemon thread that kills this process (SIGKILL) once its parent is no longer
    ``parent`` (by default the parent now), checked every ``every`` seconds."""
    parent = os.getppid() if parent is None else parent

    def watch():
        while os.getppid() == parent:
            time.sleep(every)
        _kill_self()

    thread = threading.Thread(target=watch, name="elmscale-lifeline", daemon=True)
    thread.start()
    return thread


def exit_when_closed(fd: int) -> threading.Thread:
    """A daemon thread that kills this process (SIGKILL) when the other end of the socket
    or pipe ``fd`` is closed (the hang-up; data waiting to be read do not wake it)."""
    events = select.POLLHUP | getattr(select, "POLLRDHUP", 0)

    def watch():
        poller = select.poll()
        poller.register(fd, events)
        while True:
            try:
                ready = poller.poll()
            except InterruptedError:  # pragma: no cover - retried by Python since 3.5
                continue
            if any(mask & (events | select.POLLNVAL | select.POLLERR) for _, mask in ready):
                if any(mask & select.POLLNVAL for _, mask in ready):
                    return  # the fd was closed here: the process is ending its own way
                _kill_self()

    thread = threading.Thread(target=watch, name="elmscale-lifeline", daemon=True)
    thread.start()
    return thread
