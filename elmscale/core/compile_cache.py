"""Where numba keeps elmscale's compiled kernels between processes.

numba compiles a kernel on its first call and, with ``cache=True``, writes the machine code
to a cache folder that the next process loads in milliseconds.  Its default folder is the
``__pycache__`` beside the module; when that is not writable (a read-only site-packages: a
cluster image, a container) it tries ``~/.cache/numba`` and, if that fails too, importing
the kernels raises.  Chosen here, before elmscale imports numba (``elmscale/__init__.py``
calls :func:`configure`), in this order:

1. ``ELMSCALE_CACHE_DIR``: ``$ELMSCALE_CACHE_DIR/numba`` (for example a folder kept in a
   worker image, filled by ``elmscale warmup``), when it can be written (else the next rule);
2. ``NUMBA_CACHE_DIR`` set by the user: left as it is;
3. elmscale's package folder writable: numba's default, the ``__pycache__`` beside the code;
4. the user cache folder, ``$XDG_CACHE_HOME/elmscale/numba`` (``~/.cache/elmscale/numba``);
5. if that is not writable either, ``<temp>/elmscale-<uid>/numba``.

In cases 1, 4 and 5 the folder is written to ``NUMBA_CACHE_DIR`` in ``os.environ`` (numba
reads it when it compiles; worker processes started from here inherit it), so other numba
code in this process caches there too, each module in a sub-folder of its own.
numba keys each cached kernel by its source file's path and content, so installs in other
places, or of other versions, never load each other's code.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ENV = "ELMSCALE_CACHE_DIR"
NUMBA_ENV = "NUMBA_CACHE_DIR"
# the sub-packages whose modules hold cached numba kernels (their __pycache__ is numba's
# default folder)
KERNEL_PACKAGES = ("core", "features", "linalg", "solvers")
_PACKAGE = Path(__file__).resolve().parents[1]


def user_cache_root() -> Path:
    """``$XDG_CACHE_HOME/elmscale``, or ``~/.cache/elmscale``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "elmscale"


def writable(folder: Path) -> bool:
    """Whether ``folder`` exists (made if need be) and a file can be created in it."""
    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError:
        return False
    return True


def _package_writable() -> bool:
    for name in KERNEL_PACKAGES:
        folder = _PACKAGE / name / "__pycache__"
        target = folder if folder.is_dir() else folder.parent
        if not os.access(target, os.W_OK | os.X_OK):
            return False
    return True


def choose() -> tuple[Path | None, str]:
    """``(folder, why)``: the numba cache folder for elmscale's kernels (None: numba's
    default beside the code) and which rule chose it."""
    explicit = os.environ.get(ENV)
    if explicit and writable(Path(explicit) / "numba"):
        return Path(explicit) / "numba", ENV
    if os.environ.get(NUMBA_ENV):
        return Path(os.environ[NUMBA_ENV]), NUMBA_ENV
    if _package_writable():
        return None, "package folder"
    user = user_cache_root() / "numba"
    if writable(user):
        return user, "user cache folder"
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"elmscale-{uid}" / "numba", "temporary folder"


def configure() -> Path | None:
    """Point numba's cache at :func:`choose`'s folder for this process (and its children);
    returns the folder, None when numba's default is kept."""
    folder, _ = choose()
    if folder is None:
        return None
    os.environ[NUMBA_ENV] = str(folder)
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba imported before elmscale: its settings are read already
        config.CACHE_DIR = str(folder)
    return folder


def cache_folder() -> Path:
    """Where this process's elmscale kernels are cached (numba's default: the package's
    folders' ``__pycache__``, reported as the package folder)."""
    folder, _ = choose()
    return _PACKAGE if folder is None else folder
