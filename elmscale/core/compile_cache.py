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

But numba checks only the file a kernel is written in, and a kernel holds the code of the
kernels it calls from other files (inlined, or compiled into it): a change to
``kernel_passes.py`` alone would leave ``kernel_dual.py``'s cached phase running the old
passes.  So :func:`configure` also keeps a fingerprint of every kernel source file (path,
size, modification time) beside the cache, and when any of them changed it removes this
install's cached kernels (:func:`drop_stale_kernels`) before numba reads them.
"""

from __future__ import annotations

import hashlib
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
    """Point numba's cache at :func:`choose`'s folder for this process (and its children),
    its kernels dropped if any kernel source changed since they were cached; returns the
    folder, None when numba's default is kept."""
    folder, _ = choose()
    try:
        drop_stale_kernels(kernel_folders(folder), stamp_path(folder), kernel_sources())
    except OSError:  # a cache that cannot be read or cleared: numba's own checks remain
        pass
    if folder is None:
        return None
    os.environ[NUMBA_ENV] = str(folder)
    config = sys.modules.get("numba.core.config")
    if config is not None:  # numba imported before elmscale: its settings are read already
        config.CACHE_DIR = str(folder)
    return folder


def kernel_sources() -> list[Path]:
    """The source files of the packages that hold elmscale's compiled kernels."""
    return sorted(p for name in KERNEL_PACKAGES for p in (_PACKAGE / name).glob("*.py"))


def kernel_folders(folder: Path | None) -> list[Path]:
    """Where numba caches the kernels of ``KERNEL_PACKAGES``: their ``__pycache__`` (numba's
    default), or in ``folder`` the sub-folder numba names after each package's directory
    (its name and the SHA-1 of its absolute path, numba's ``_UserProvidedCacheLocator``).
    The path as imported, symbolic links kept: numba takes it from the code's file name."""
    imported = Path(os.path.abspath(__file__)).parents[1]
    dirs = [imported / name for name in KERNEL_PACKAGES]
    if folder is None:
        return [d / "__pycache__" for d in dirs]
    return [Path(folder) / f"{d.name}_{hashlib.sha1(str(d).encode()).hexdigest()}" for d in dirs]


def stamp_path(folder: Path | None) -> Path:
    """The fingerprint file of this install's kernel sources, beside their cache."""
    if folder is None:
        return _PACKAGE / KERNEL_PACKAGES[0] / "__pycache__" / "elmscale-kernels.stamp"
    install = hashlib.sha1(str(_PACKAGE).encode()).hexdigest()[:16]
    return Path(folder) / f"elmscale-kernels-{install}.stamp"


def fingerprint(sources: list[Path]) -> str:
    """A digest of the files' paths, sizes and modification times (what numba compares
    for one file, here for all of them at once)."""
    digest = hashlib.sha1()
    for path in sources:
        st = path.stat()
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def drop_stale_kernels(folders: list[Path], stamp: Path, sources: list[Path]) -> bool:
    """Remove numba's cached kernels (``*.nbi``, ``*.nbc``) in ``folders`` unless
    ``stamp`` holds the fingerprint of ``sources``, then write it there (to a temporary
    name, then renamed); returns whether they were removed."""
    now = fingerprint(sources)
    try:
        if stamp.read_text() == now:
            return False
    except FileNotFoundError:
        pass
    for folder in folders:
        if folder.is_dir():
            for cached in folder.iterdir():
                if cached.suffix in (".nbi", ".nbc"):
                    cached.unlink(missing_ok=True)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f"{stamp.name}.{os.getpid()}.tmp")
    tmp.write_text(now)
    os.replace(tmp, stamp)
    return True


def cache_folder() -> Path:
    """Where this process's elmscale kernels are cached (numba's default: the package's
    folders' ``__pycache__``, reported as the package folder)."""
    folder, _ = choose()
    return _PACKAGE if folder is None else folder
