"""Where numba keeps elmscale's compiled kernels between processes.

numba compiles a kernel on its first call and, with ``cache=True``, writes the machine code
to a cache folder that the next process loads in milliseconds.  Its default folder is the
``__pycache__`` beside the module; when that is not writable (a read-only site-packages: a
cluster image, a container) it tries ``~/.cache/numba`` and, if that fails too, importing
the kernels raises.  Chosen here, before elmscale imports numba (``elmscale/__init__.py``
calls :func:`configure`), in this order:

1. ``ELMSCALE_CACHE_DIR``: ``$ELMSCALE_CACHE_DIR/numba`` (for example a folder kept in a
   worker image, filled by ``elmscale warmup``), when it can be used (else the next rule);
2. ``NUMBA_CACHE_DIR``, set by the user or inherited from an elmscale process (rules 1, 4
   and 5 export theirs), when it can be used;
3. elmscale's package folder writable: numba's default, the ``__pycache__`` beside the code;
4. the user cache folder, ``$XDG_CACHE_HOME/elmscale/numba`` (``~/.cache/elmscale/numba``);
5. if that cannot be used either, ``<temp>/elmscale-<uid>/numba``;
6. if that cannot be used either, a new folder of this process's own (said once, in a
   RuntimeWarning): nothing is cached between processes.

numba loads its index files with pickle, so whoever can write into a folder it reads, or
put another folder in its place, can run code in this process: another local user who made
``/tmp/elmscale-<uid>`` first, or the folder named by an inherited ``NUMBA_CACHE_DIR``.  So
in cases 1, 2, 4 and 5, whoever chose the folder, it can be used only if
(:func:`private_folder`) the folders from ``$ELMSCALE_CACHE_DIR``, ``$NUMBA_CACHE_DIR``,
``elmscale`` or ``elmscale-<uid>`` down to it (made with mode 0700 when missing), and the
sub-folders numba keeps elmscale's kernels in, are this user's, not links, and writable by
no one else; and every folder above them is this user's or root's and writable by no one
else unless sticky (``/tmp``), so that no one can rename them away.  A folder the user
named that is refused is said once, in a RuntimeWarning.  Case 3 is not checked: those are
the code's own folders, where Python reads its bytecode caches from too.

In cases 1, 4 and 5 the folder is written to ``NUMBA_CACHE_DIR`` in ``os.environ`` (numba
reads it when it compiles): other numba code in this process caches there too, and the
processes started from here inherit it (and check it again: rule 2).  A folder of this
process's own (case 6) is removed at exit, when another user could make one of that name,
so it is never exported: numba is told of it when elmscale imports numba
(:func:`prepare_numba`).  A refused ``NUMBA_CACHE_DIR`` is removed from ``os.environ``, so
that numba does not read that folder either.
numba keys each cached kernel by its source file's path and content, so installs in other
places, or of other versions, never load each other's code.

But numba checks only the file a kernel is written in, and a kernel holds the code of the
kernels it calls from other files (inlined, or compiled into it): a change to
``kernel_passes.py`` alone would leave ``kernel_dual.py``'s cached phase running the old
passes.  So :func:`configure` also keeps a fingerprint of every kernel source file (path,
size, modification time) beside the cache, and when any of them changed it removes this
install's cached kernels (:func:`drop_stale_kernels`, under a lock, so that two processes
starting together do not remove what the other has just written) before numba reads them.
A process started before the change may still compile kernels from the old code
afterwards; numba keys each of elmscale's kernels by the contents of all kernel sources
too (:func:`key_kernels_by_sources`), so no process loads a kernel compiled from other
sources than its own.

A wheel may carry kernels compiled when it was built: ``carried_kernels.use`` puts them in
this folder when elmscale imports numba (``core/jit.py``), when they fit.
"""

from __future__ import annotations

import atexit
import contextlib
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
# the rules whose folder goes to NUMBA_CACHE_DIR: lasting folders, which the processes that
# inherit the setting check again (a user's NUMBA_CACHE_DIR is there already)
_EXPORTED = (ENV, "user cache folder", "temporary folder")


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
    not a link, owned by this user and writable by no one else, and no one else may be able
    to rename ``top`` away (:func:`_replaceable`).  numba unpickles its index files, so a
    folder that another user made first, or can write into or replace, lets them run code
    in this process (pip checks its cache's owner likewise).  Ownership and modes are
    POSIX's: elsewhere only that the folders can be made."""
    folder, top = Path(folder), Path(top)
    below = folder.relative_to(top).parts
    try:
        top.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"{top.parent} cannot be made ({exc.strerror})"
    refused = _replaceable(top)
    for path in [top.joinpath(*below[:i]) for i in range(len(below) + 1)]:
        if refused is not None:
            return refused
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            return f"{path} cannot be made ({exc.strerror})"
        refused = _not_private(path)
    return refused


def _not_private(path: Path) -> str | None:
    """Why the folder ``path`` is not this user's alone (None when it is): no folder (a link,
    a file), another owner, or writable by others."""
    st = path.lstat()
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder (a link or a file)"
    if not hasattr(os, "geteuid"):
        return None
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not this user ({os.geteuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} can be written by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _replaceable(top: Path) -> str | None:
    """Why another user could rename ``top`` away and put a folder of theirs in its place
    (None when no one can): a folder above it, as named or with links followed, that is
    neither this user's nor root's, or that others can write into without the sticky bit
    (``/tmp`` has it: there only a folder's owner can rename it)."""
    if not hasattr(os, "geteuid"):
        return None
    named = Path(os.path.abspath(top)).parent
    real = Path(os.path.realpath(named))
    for path in dict.fromkeys([named, *named.parents, real, *real.parents]):
        try:
            st = path.stat()
        except OSError as exc:
            return f"{path} cannot be read ({exc.strerror})"
        if st.st_uid not in (os.geteuid(), 0):
            return f"{path} is owned by uid {st.st_uid}, neither this user nor root"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            return f"{path} can be written by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _usable(folder: Path, top: Path) -> str | None:
    """Why numba may not read ``folder`` (None when it may): :func:`private_folder`, and
    the sub-folders it keeps elmscale's kernels in too (made here, mode 0700, when missing:
    numba would make them with the user's umask), and a file can be written there."""
    refused = private_folder(folder, top)
    for sub in kernel_folders(folder):
        refused = refused or private_folder(sub, folder)
    if refused is None and not writable(folder):
        refused = f"{folder} cannot be written"
    return refused


_process_folder_made: list[Path] = []  # the one folder of _process_folder, once made
_said: set[tuple[str, str, str]] = set()  # the refusals warned of


def _process_folder(why: str) -> Path:
    """A new folder of this process's own (``mkdtemp``: mode 0700, a name no one can
    guess; removed at exit), made once, saying once why: the kernels compile as without a
    cache, and what they write there no other process reads (not even those started from
    this one: the folder is never exported, since another user could make one of that name
    once it is removed)."""
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
    default beside the code) and which rule chose it; a folder named in ``ELMSCALE_CACHE_DIR``
    or ``NUMBA_CACHE_DIR`` that cannot be used is said once, in a RuntimeWarning."""
    for rule, top, sub in (
        (ENV, os.environ.get(ENV), "numba"),
        (NUMBA_ENV, os.environ.get(NUMBA_ENV), ""),
    ):
        if not top:
            continue
        refused = _usable(Path(top) / sub, Path(top))
        if refused is None:
            return Path(top) / sub, rule
        if (rule, top, refused) not in _said:
            _said.add((rule, top, refused))
            warnings.warn(
                f"elmscale's compiled kernels are not cached in {rule}={top}: {refused}",
                RuntimeWarning,
                stacklevel=2,
            )
    if _package_writable():
        return None, "package folder"
    user = user_cache_root() / "numba"
    if _usable(user, user_cache_root()) is None:
        return user, "user cache folder"
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    top = Path(tempfile.gettempdir()) / f"elmscale-{uid}"
    refused = _usable(top / "numba", top)
    if refused is None:
        return top / "numba", "temporary folder"
    return _process_folder(refused), "a folder of this process's own"


_configured: list[Path | None] = []  # configure()'s folder


def configure() -> Path | None:
    """Point numba's cache at :func:`choose`'s folder for this process (and, when it lasts,
    its children), its kernels dropped if any kernel source changed since they were cached;
    returns the folder, None when numba's default is kept."""
    folder, why = choose()
    try:
        drop_stale_kernels(kernel_folders(folder), stamp_path(folder), kernel_sources())
    except OSError:  # a cache that cannot be read or cleared: numba's own checks remain
        pass
    if why in _EXPORTED:
        os.environ[NUMBA_ENV] = str(folder)
    elif why != NUMBA_ENV:  # numba's default, or a folder that goes at exit: none to inherit
        os.environ.pop(NUMBA_ENV, None)
    _configured[:] = [folder]
    if "numba.core.config" in sys.modules:  # numba imported before elmscale: settings read
        _tell_numba()
    return folder


def configured() -> Path | None:
    """The folder :func:`configure` chose for this process (configured now if it was not)."""
    return _configured[0] if _configured else configure()


def _tell_numba() -> None:
    """Set numba's cache folder to :func:`configured`'s (a folder of this process's own is in
    no environment variable numba reads)."""
    from numba.core import config

    folder = configured()
    # numba reads its environment again when a NUMBA_ variable changed (configure's): now,
    # not at a later compile, which would undo this setting
    config.reload_config()
    config.CACHE_DIR = "" if folder is None else str(folder)


def prepare_numba() -> None:
    """Called where elmscale imports numba, before any kernel is defined (``core/jit.py``):
    numba caches in :func:`configured`'s folder, each of elmscale's kernels keyed by all
    kernel sources (:func:`key_kernels_by_sources`)."""
    _tell_numba()
    key_kernels_by_sources()


def replace_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all: to a new file in the same folder
    whose name no one can guess, made with ``O_EXCL | O_NOFOLLOW`` (``mkstemp``), then
    renamed over ``path``.  A fixed temporary name, opened as usual, would write through a
    link that someone planted under that name.  Mode 0644, as numba writes its files with
    the usual umask (a package's ``__pycache__`` serves every user of the package)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if hasattr(os, "fchmod"):
                os.fchmod(f.fileno(), 0o644)
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


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
    ``stamp`` holds the fingerprint of ``sources``, then write it there
    (:func:`replace_file`); returns whether they were removed.

    Under a lock on the stamp's folder: a second process that starts meanwhile reads the
    stamp after the first has written it, and leaves alone what the first then writes (the
    kernels a wheel carries, copied in just after this)."""
    now = fingerprint(sources)
    stamp.parent.mkdir(parents=True, exist_ok=True)
    with _locked(stamp.parent):
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
        replace_file(stamp, now.encode())
    return True


@contextlib.contextmanager
def _locked(folder: Path):
    """Hold an exclusive lock on ``folder`` for the ``with`` block, waiting for it (``flock``
    on the folder itself: nothing is left in it, and the lock goes with its process); no
    lock where there is no ``flock``."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


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
