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
5. if that is not writable either, ``<temp>/elmscale-<uid>/numba``;
6. if that cannot be used either, a new folder of this process's own (said once, in a
   RuntimeWarning): nothing is cached between processes.

In cases 4 and 5 the folders from ``elmscale`` down (made with mode 0700 when missing) must
be this user's and writable by no one else (:func:`private_folder`), else the next rule:
numba loads its index files with pickle, and another local user who made
``/tmp/elmscale-<uid>`` first could plant one there and run code in this process.  The
folders of rules 1 and 2 are the user's own choice and are not checked.

In cases 1, 4, 5 and 6 the folder is written to ``NUMBA_CACHE_DIR`` in ``os.environ`` (numba
reads it when it compiles; worker processes started from here inherit it), so other numba
code in this process caches there too, each module in a sub-folder of its own.
numba keys each cached kernel by its source file's path and content, so installs in other
places, or of other versions, never load each other's code.

But numba checks only the file a kernel is written in, and a kernel holds the code of the
kernels it calls from other files (inlined, or compiled into it): a change to
``kernel_passes.py`` alone would leave ``kernel_dual.py``'s cached phase running the old
passes.  So :func:`configure` also keeps a fingerprint of every kernel source file (path,
size, modification time) beside the cache, and when any of them changed it removes this
install's cached kernels (:func:`drop_stale_kernels`) before numba reads them.  A process
started before the change may still compile kernels from the old code afterwards; numba
keys each of elmscale's kernels by the contents of all kernel sources too
(:func:`key_kernels_by_sources`), so no process loads a kernel compiled from other sources
than its own.

A wheel may carry kernels compiled when it was built: ``carried_kernels.use`` copies them
into this folder after :func:`configure` (``elmscale/__init__.py``), when they fit.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import os
import shutil
import stat
import sys
import tempfile
import warnings
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


def private_folder(folder: Path, top: Path) -> str | None:
    """Why ``folder`` cannot hold cached kernels, or None when it can: ``top`` and every
    folder below it down to ``folder`` (each made, mode 0700, when missing) must be a folder,
    not a link, owned by this user and writable by no one else.  numba unpickles its index
    files, so a folder that another user made first, or can write into, lets them run code
    in this process (pip checks its cache's owner likewise).  Ownership and modes are
    POSIX's: elsewhere only that the folders can be made."""
    folder, top = Path(folder), Path(top)
    below = folder.relative_to(top).parts
    try:
        top.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{top.parent} cannot be made ({exc.strerror})"
    for path in [top.joinpath(*below[:i]) for i in range(len(below) + 1)]:
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            return f"{path} cannot be made ({exc.strerror})"
        st = path.lstat()
        if not stat.S_ISDIR(st.st_mode):
            return f"{path} is not a folder (a link or a file)"
        if not hasattr(os, "geteuid"):
            continue
        if st.st_uid != os.geteuid():
            return f"{path} is owned by uid {st.st_uid}, not this user ({os.geteuid()})"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return f"{path} can be written by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


_process_folder_made: list[Path] = []  # the one folder of _process_folder, once made


def _process_folder(why: str) -> Path:
    """A new folder of this process's own (``mkdtemp``: mode 0700, a name no one can
    guess; removed at exit), made once, saying once why: the kernels compile as without a
    cache, and what they write there no other process reads (but the processes started
    from this one, which inherit ``NUMBA_CACHE_DIR``)."""
    if not _process_folder_made:
        made = Path(tempfile.mkdtemp(prefix="elmscale-numba-"))
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        _process_folder_made.append(made)
        warnings.warn(
            f"elmscale's compiled kernels are cached for this process only: {why}; "
            f"set {ENV} to a folder of yours to keep them",
            RuntimeWarning,
            stacklevel=2,
        )
    return _process_folder_made[0]


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
    if private_folder(user, user_cache_root()) is None and writable(user):
        return user, "user cache folder"
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    top = Path(tempfile.gettempdir()) / f"elmscale-{uid}"
    refused = private_folder(top / "numba", top)
    if refused is None and writable(top / "numba"):
        return top / "numba", "temporary folder"
    return _process_folder(refused or f"{top} cannot be written"), "a folder of this process's own"


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


def key_kernels_by_sources() -> None:
    """Make numba key each cached kernel of elmscale by all kernel sources, not by its own
    file alone: its stamp is the SHA-256 of its own file and :func:`sources_stamp`.
    Called where elmscale imports numba, before any kernel is defined (``core/jit.py``).

    Why, beyond :func:`drop_stale_kernels`: that runs when a process starts.  A process
    started before a source edit still compiles kernels later, lazily, from the old code,
    and numba would write them under a stamp that matches (their own file unchanged) beside
    the fingerprint that another, newer process wrote: the next process would load old
    code.  With the sources' digest in the stamp, each process loads only the kernels
    compiled from the sources it runs.  The stamp holds the files' contents, not their
    paths or times (numba before 0.6x stamped a file by its time and size): the kernels
    a wheel carries (``carried_kernels.py``) match wherever pip unpacks it.

    This subclasses numba's private locator list (``CacheImpl._locator_classes``, a list
    of classes with ``get_source_stamp`` and ``_py_file``); where that is missing nothing
    is changed, and numba's own stamps apply (the carried kernels then never match, and
    compile).  A user's ``NUMBA_CACHE_LOCATOR_CLASSES`` replaces the list likewise."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None)
    classes = getattr(impl, "_locator_classes", None)
    if not isinstance(classes, list):
        return
    if not any(getattr(c, "_elmscale_keyed", False) for c in classes):
        impl._locator_classes = [_keyed_by_sources(c) for c in classes]


def _keyed_by_sources(locator: type) -> type:
    """A subclass of numba's cache locator ``locator`` whose stamp of an elmscale file is
    its content's hash and :func:`sources_stamp`."""

    def get_source_stamp(self):
        path = getattr(self, "_py_file", None)
        if path is None or not Path(os.path.realpath(path)).is_relative_to(_PACKAGE):
            return super(keyed, self).get_source_stamp()
        real = os.path.realpath(path)
        return file_hash(real), sources_stamp(real)

    keyed = type(locator.__name__, (locator,), {"get_source_stamp": get_source_stamp})
    keyed._elmscale_keyed = True
    return keyed


def file_hash(path) -> str:
    """SHA-256 of a file's content, read once per process while its time and size stay
    (the kernels' stamps, the sources' digest and a wheel's manifest check share it)."""
    st = os.stat(path)
    return _content_hash(str(path), st.st_mtime_ns, st.st_size)


@functools.cache
def _content_hash(path: str, mtime_ns: int, size: int) -> str:
    """SHA-256 of a file's content (memoised by its time and size, as numba does)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def source_hashes(sources: list[Path]) -> dict[str, str]:
    """``{path within the package: SHA-256 of the content}`` of the files: what the
    kernels compiled from them depend on, the same in every install of these sources."""
    return {path.relative_to(_PACKAGE).as_posix(): file_hash(path) for path in sources}


def content_digest(sources: list[Path]) -> str:
    """One digest of :func:`source_hashes`."""
    hashes = source_hashes(sources)
    return hashlib.sha256("".join(f"{k}\0{v}\n" for k, v in hashes.items()).encode()).hexdigest()


@functools.cache
def _first_fingerprint() -> str:
    """The kernel sources' fingerprint when this process defined its first kernel."""
    return fingerprint(kernel_sources())


@functools.cache
def _first_digest() -> str:
    """The kernel sources' :func:`content_digest` then (taken just after
    :func:`_first_fingerprint`)."""
    _first_fingerprint()
    return content_digest(kernel_sources())


@functools.cache
def sources_stamp(module_file: str) -> str:
    """The kernel sources' content digest as this process imported ``module_file`` (taken
    at its first kernel): :func:`_first_digest`, or, when their fingerprint changed in
    between (this process then holds code of both versions), a stamp of this process's
    own, which no other process's kernels match."""
    now = fingerprint(kernel_sources())
    if now == _first_fingerprint():
        return _first_digest()
    return f"{now}, changed while process {os.getpid()} ({_PROCESS_TOKEN}) imported its kernels"


_PROCESS_TOKEN = os.urandom(8).hex()


def cache_folder() -> Path:
    """Where this process's elmscale kernels are cached (numba's default: the package's
    folders' ``__pycache__``, reported as the package folder)."""
    folder, _ = choose()
    return _PACKAGE if folder is None else folder
