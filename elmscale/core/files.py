"""Writing files so that no half-written one is ever left behind."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path


def atomic_write(path, write: Callable[[Path], object], *, make_dirs: bool = True) -> Path:
    """Call ``write(tmp)`` on a temporary name next to ``path``, then rename it to ``path``.

    On any failure the temporary file is removed and the error raised; ``path`` is
    either the complete new file or untouched.  Temporary names are ``.<name>.<hex>.tmp``
    (``batch_scoring`` clears stale ones left by a killed process).  ``make_dirs``
    False: a missing parent directory is an error (``FileNotFoundError``), not created.
    """
    path = Path(path)
    if make_dirs:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


@contextmanager
def folder_lock(folder, what: str):
    """Hold an exclusive lock on ``folder`` (created if missing) for the ``with`` block;
    a second holder in any process gets a :class:`DataError` at once, naming the folder
    and ``what`` holds it, instead of writing into it alongside (``flock`` on the folder
    itself: nothing is left in it, and the lock goes with the process that held it)."""
    import fcntl

    from elmscale.core.errors import DataError

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise DataError(
                f"{folder}: {what} is writing into this folder now; wait for it to finish "
                "(a rerun then skips the files it wrote) or choose another output"
            ) from None
        yield folder
    finally:
        os.close(fd)  # releases the lock
