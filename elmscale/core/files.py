"""Writing files so that no half-written one is ever left behind."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
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
