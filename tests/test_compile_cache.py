"""numba's compile cache: where elmscale puts it, and ``elmscale warmup`` filling it.

Each test runs a fresh Python in a subprocess (with a timeout), since the cache folder is
chosen when elmscale is imported.  The kernels compiled are the small ones of the warmup's
``core`` step, so that a cold compile takes seconds.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

import elmscale
from elmscale.core import compile_cache

PACKAGE = Path(elmscale.__file__).resolve().parent
COMPILE_ONE = (
    "import numpy as np, elmscale\n"
    "from elmscale.core import compile_cache, jit\n"
    "jit.dot(np.arange(4.0), np.arange(4.0))\n"
    "print(compile_cache.cache_folder())\n"
)


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", compile_cache.ENV)}
    env.update(extra)
    return env


def _python(code, env, cwd, timeout=240):
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _cache_files(folder: Path):
    return sorted(p.name for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc"))


@pytest.mark.timeout(300)
def test_elmscale_cache_dir_is_where_the_kernels_are_cached(tmp_path):
    cache = tmp_path / "cache"
    result = _python(COMPILE_ONE, _env(ELMSCALE_CACHE_DIR=str(cache)), tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == cache / "numba"
    files = _cache_files(cache / "numba")
    assert any(name.startswith("jit.dot-") and name.endswith(".nbi") for name in files), files
    assert any(name.endswith(".nbc") for name in files), files


@pytest.mark.timeout(300)
def test_a_users_numba_cache_dir_is_honoured(tmp_path):
    numba_dir = tmp_path / "numba-own"
    result = _python(COMPILE_ONE, _env(NUMBA_CACHE_DIR=str(numba_dir)), tmp_path)
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()) == numba_dir
    assert _cache_files(numba_dir), "nothing cached in NUMBA_CACHE_DIR"


def _read_only_copy(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "elmscale", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [site, *site.rglob("*")]:
        path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    return site


# root writes through permissions: there the copy is mounted read-only, in a mount namespace
# of the child's own
_READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'


def _python_read_only(site: Path, code, env, cwd):
    command = [sys.executable, "-c", code]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        if shutil.which("unshare") is None:
            pytest.skip("running as root without unshare: cannot make a folder read-only")
        command = ["unshare", "-m", "sh", "-c", _READ_ONLY_MOUNT, str(site), *command]
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=240)
    if result.returncode != 0 and "mount" in result.stderr and "elmscale" not in result.stderr:
        pytest.skip(f"cannot mount a folder read-only here: {result.stderr.strip()}")
    return result


@pytest.mark.timeout(300)
def test_read_only_package_caches_in_the_user_cache_folder(tmp_path):
    site = _read_only_copy(tmp_path)
    try:
        xdg = tmp_path / "xdg"
        env = _env(PYTHONPATH=str(site), XDG_CACHE_HOME=str(xdg))
        probe = "import elmscale; print(elmscale.__file__)\n" + COMPILE_ONE
        result = _python_read_only(site, probe, env, tmp_path)
        assert result.returncode == 0, result.stderr
        imported, folder = result.stdout.split()
        assert Path(imported).is_relative_to(site)  # the read-only copy, not this tree
        assert Path(folder) == xdg / "elmscale" / "numba"
        assert _cache_files(xdg / "elmscale" / "numba")
        assert not list(site.rglob("*.nbi"))
    finally:
        for path in [site, *site.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_the_rules_in_order(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(compile_cache, "_package_writable", lambda: True)
    assert compile_cache.choose() == (None, "package folder")
    monkeypatch.setattr(compile_cache, "_package_writable", lambda: False)
    assert compile_cache.choose() == (tmp_path / "xdg" / "elmscale" / "numba", "user cache folder")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "n"))
    assert compile_cache.choose() == (tmp_path / "n", "NUMBA_CACHE_DIR")
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "e"))
    assert compile_cache.choose() == (tmp_path / "e" / "numba", compile_cache.ENV)
    # an ELMSCALE_CACHE_DIR that cannot be written: the next rule
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv(compile_cache.ENV, str(blocker))
    with pytest.warns(RuntimeWarning, match="not cached in ELMSCALE_CACHE_DIR=.*not a folder"):
        assert compile_cache.choose() == (tmp_path / "n", "NUMBA_CACHE_DIR")


@pytest.mark.timeout(400)
def test_warmup_fills_the_cache_then_finds_it_there(tmp_path):
    cache = tmp_path / "cache"
    env = _env(ELMSCALE_CACHE_DIR=str(cache))
    command = [sys.executable, "-m", "elmscale", "warmup", "--only", "core"]
    first = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert first.returncode == 0, first.stderr
    assert f"numba cache {cache / 'numba'} (ELMSCALE_CACHE_DIR)" in first.stdout
    assert "compiled 5: dot, shuffle_prefix, signed_block, weighted_row_sum" in first.stdout
    files = _cache_files(cache / "numba")
    for name in ("dot", "shuffle_prefix", "signed_block", "weighted_row_sum"):
        assert any(f.startswith(f"jit.{name}-") for f in files), (name, files)
    second = subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert second.returncode == 0, second.stderr
    assert "all cached" in second.stdout and "everything cached" in second.stdout, second.stdout
    assert _cache_files(cache / "numba") == files


def test_warmup_rejects_an_unknown_step():
    from elmscale.app import warmup

    with pytest.raises(ValueError, match="unknown warmup step"):
        warmup.warmup(only=["nope"], report=None)


def test_a_change_to_any_kernel_source_drops_every_cached_kernel(tmp_path):
    """numba checks only a kernel's own file; a kernel inlines others' code, so a change to
    any kernel source must drop them all (the package-wide fingerprint)."""
    sources = [tmp_path / "src" / name for name in ("passes.py", "phase.py")]
    for path in sources:
        path.parent.mkdir(exist_ok=True)
        path.write_text("x = 1\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    stamp = tmp_path / "stamp"

    def fill():
        for name in ("phase._kernel_phase-1.py311.nbi", "phase._kernel_phase-1.py311.1.nbc"):
            (cache / name).write_bytes(b"code")
        (cache / "other.txt").write_text("kept")

    fill()
    assert compile_cache.drop_stale_kernels([cache], stamp, sources)  # no stamp yet
    assert sorted(p.name for p in cache.iterdir()) == ["other.txt"]
    fill()
    assert not compile_cache.drop_stale_kernels([cache], stamp, sources)  # nothing changed
    assert len(list(cache.iterdir())) == 3
    st = sources[0].stat()
    os.utime(sources[0], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # passes.py edited
    assert compile_cache.drop_stale_kernels([cache], stamp, sources)
    assert sorted(p.name for p in cache.iterdir()) == ["other.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.timeout(300)
def test_the_fingerprint_guards_the_folders_numba_really_uses(tmp_path):
    cache = tmp_path / "cache"
    env = _env(ELMSCALE_CACHE_DIR=str(cache))
    first = _python(COMPILE_ONE, env, tmp_path)
    assert first.returncode == 0, first.stderr
    folders = compile_cache.kernel_folders(cache / "numba")
    cached = [p for folder in folders for p in _cache_files(folder)]
    assert any(name.startswith("jit.dot-") for name in cached), cached
    stamp = compile_cache.stamp_path(cache / "numba")
    assert stamp.read_text() == compile_cache.fingerprint(compile_cache.kernel_sources())
    stamp.write_text("a fingerprint of other sources")
    index = next(p for p in folders[0].glob("jit.dot-*.nbi"))
    index.write_bytes(b"stale")  # what an old build left: dropped, not loaded
    again = _python(COMPILE_ONE, env, tmp_path)
    assert again.returncode == 0, again.stderr
    assert stamp.read_text() == compile_cache.fingerprint(compile_cache.kernel_sources())
    assert index.read_bytes() != b"stale"  # compiled and cached again


def _only_the_temporary_folder_left(tmp_path, monkeypatch):
    """choose() down to its last rules: the package folder and the user cache folder cannot
    be written, the temporary folder is ``tmp_path``."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(compile_cache, "_package_writable", lambda: False)
    monkeypatch.setattr(compile_cache.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setattr(compile_cache, "_process_folder_made", [], raising=False)
    return tmp_path / f"elmscale-{os.getuid()}"


def test_an_owned_private_temporary_folder_is_used(tmp_path, monkeypatch):
    top = _only_the_temporary_folder_left(tmp_path, monkeypatch)
    assert compile_cache.choose() == (top / "numba", "temporary folder")
    for folder in (top, top / "numba"):  # made by the cache: this user's, mode 0700
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert folder.stat().st_uid == os.geteuid()
    assert compile_cache.choose() == (top / "numba", "temporary folder")  # found again


@pytest.mark.parametrize("whose", ["another user's", "world-writable", "a link"])
def test_a_temporary_folder_another_user_controls_is_refused(tmp_path, monkeypatch, whose):
    """numba unpickles the index files it finds: a folder another user made first (or can
    write into) would run their code here.  Refused, once said, for a folder of this
    process's own."""
    top = _only_the_temporary_folder_left(tmp_path, monkeypatch)
    if whose == "a link":
        (tmp_path / "theirs").mkdir(mode=0o700)
        top.symlink_to(tmp_path / "theirs")
    else:
        (top / "numba").mkdir(parents=True, mode=0o700)
        top.chmod(0o700)
    if whose == "another user's":
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another user needs root")
        os.chown(top, 65534, 65534)  # nobody
    elif whose == "world-writable":
        (top / "numba").chmod(0o777)
    with pytest.warns(RuntimeWarning, match="cached for this process only") as said:
        folder, why = compile_cache.choose()
    assert why == "a folder of this process's own"
    assert not folder.is_relative_to(top) and folder.name.startswith("elmscale-numba-")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    reason = {"another user's": "owned by uid 65534", "world-writable": "written by others"}
    assert reason.get(whose, "not a folder") in str(said[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once a process
        assert compile_cache.choose() == (folder, why)


def test_the_user_cache_folder_must_be_private_too(tmp_path, monkeypatch):
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(compile_cache, "_package_writable", lambda: False)
    monkeypatch.setattr(compile_cache.tempfile, "gettempdir", lambda: str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    user = tmp_path / "xdg" / "elmscale"
    assert compile_cache.choose() == (user / "numba", "user cache folder")
    user.chmod(0o777)
    assert compile_cache.choose()[1] == "temporary folder"


# a process that imported elmscale's kernels, then sees a source edited and another process
# start (a new fingerprint written, the cached kernels dropped), then compiles a kernel
_EDITED_WHILE_RUNNING = """
import pathlib, subprocess, sys
import numpy as np
import elmscale
from elmscale.core import jit
source = pathlib.Path(elmscale.__file__).parent / "solvers" / "kernel_passes.py"
source.write_text(source.read_text() + "\\n# edited\\n")
subprocess.run([sys.executable, "-c", "import elmscale"], check=True, timeout=200)
jit.dot(np.arange(4.0), np.arange(4.0))
print(sum(jit.dot.stats.cache_misses.values()))
"""
_CACHE_HITS = (
    "import numpy as np\n"
    "from elmscale.core import jit\n"
    "jit.dot(np.arange(4.0), np.arange(4.0))\n"
    "print(sum(jit.dot.stats.cache_hits.values()))\n"
)


@pytest.mark.timeout(600)
def test_a_process_older_than_the_sources_caches_nothing_newer_ones_load(tmp_path):
    """The stale-code race: a long-lived process, started before a source edit, compiles a
    kernel lazily after a newer process wrote the new fingerprint.  numba keys the kernel by
    its own file only (unchanged here), so it was cached where the next process loaded it;
    with all sources in its key, the next process compiles it again."""
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "elmscale", ignore=shutil.ignore_patterns("__pycache__"))
    env = _env(PYTHONPATH=str(site), ELMSCALE_CACHE_DIR=str(tmp_path / "cache"))
    old = _python(_EDITED_WHILE_RUNNING, env, tmp_path, timeout=400)
    assert old.returncode == 0, old.stderr
    assert old.stdout.split() == ["1"]  # compiled by the old process, and written
    newer = _python(_CACHE_HITS, env, tmp_path)
    assert newer.returncode == 0, newer.stderr
    assert newer.stdout.split() == ["0"], "the old process's kernel was loaded"
    again = _python(_CACHE_HITS, env, tmp_path)  # the same sources: the cache serves
    assert again.returncode == 0, again.stderr
    assert again.stdout.split() == ["1"]


def test_every_cached_kernel_is_keyed_by_all_kernel_sources():
    """numba's stamp of each cached kernel also holds the kernel sources' fingerprint: no
    kernel module defines a kernel before ``core/jit.py`` has set this up."""
    import importlib
    import pkgutil

    from numba.core.dispatcher import Dispatcher

    kernels = []
    for package in compile_cache.KERNEL_PACKAGES:
        for info in pkgutil.iter_modules([str(PACKAGE / package)]):
            module = importlib.import_module(f"elmscale.{package}.{info.name}")
            kernels += [
                v
                for v in vars(module).values()
                if isinstance(v, Dispatcher) and v.py_func.__module__ == module.__name__
            ]
    cached = [k for k in kernels if hasattr(k._cache, "_cache_file")]
    assert len(cached) > 20, [k.py_func.__name__ for k in kernels]
    for kernel in cached:
        stamp = kernel._cache._cache_file._source_stamp
        source = os.path.realpath(kernel.py_func.__code__.co_filename)
        assert stamp[1:] == (compile_cache.sources_stamp(source),), kernel.py_func.__qualname__


def test_a_module_imported_after_the_sources_changed_gets_a_stamp_of_its_own(monkeypatch):
    """Its process holds kernels of both versions: none it caches may serve another."""
    first = compile_cache._first_fingerprint()  # taken (once) before the edit
    monkeypatch.setattr(compile_cache, "fingerprint", lambda sources: "edited since")
    uncached = compile_cache.sources_stamp.__wrapped__  # past the per-module memo
    stamp = uncached(str(PACKAGE / "solvers" / "late_module.py"))
    assert stamp != first and stamp.startswith("edited since, changed while process")


# -- every folder numba reads is this user's alone, whoever chose it (issue 50) -------------


class _RunsWhenUnpickled:
    """What another user would plant as an index file: unpickling it makes ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return os.mkdir, (self.path,)


def _index_name(kernel) -> str:
    """The name of numba's index file of ``kernel`` in a ``NUMBA_CACHE_DIR``."""
    line = kernel.py_func.__code__.co_firstlineno
    version = f"{sys.version_info.major}{sys.version_info.minor}{sys.abiflags}"
    return (
        f"{kernel.py_func.__module__.rsplit('.', 1)[-1]}.{kernel.__name__}-{line}.py{version}.nbi"
    )


@pytest.mark.timeout(300)
def test_an_inherited_numba_cache_dir_another_user_owns_is_never_read(tmp_path):
    """A NUMBA_CACHE_DIR handed down by a process that has since exited names a folder that
    another user can then make, with an index file and the stamp (their names are
    predictable) planted in it: numba would unpickle the index before any check."""
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    from elmscale.core import jit

    theirs = tmp_path / "theirs"
    index = compile_cache.kernel_folders(theirs)[0] / _index_name(jit.dot)
    index.parent.mkdir(parents=True)
    ran = tmp_path / "their-code-ran"
    index.write_bytes(pickle.dumps(_RunsWhenUnpickled(ran)))
    stamp = compile_cache.stamp_path(theirs)  # the current fingerprint: nothing dropped
    stamp.write_text(compile_cache.fingerprint(compile_cache.kernel_sources()))
    for path in [theirs, *theirs.rglob("*")]:
        os.chown(path, 65534, 65534)  # nobody
    result = _python(COMPILE_ONE, _env(NUMBA_CACHE_DIR=str(theirs)), tmp_path)
    assert result.returncode == 0, result.stderr
    assert not ran.exists(), "numba unpickled the index file another user planted"
    assert Path(result.stdout.strip()) != theirs
    assert f"not cached in NUMBA_CACHE_DIR={theirs}: {theirs} is owned by uid 65534" in (
        result.stderr
    )


@pytest.mark.parametrize("how", ["world-writable", "a world-writable parent", "a link"])
def test_a_numba_cache_dir_others_can_write_or_replace_is_refused(tmp_path, monkeypatch, how):
    monkeypatch.delenv(compile_cache.ENV, raising=False)
    monkeypatch.setattr(compile_cache, "_package_writable", lambda: True)
    parent = tmp_path / "parent"
    folder = parent / "numba"
    folder.mkdir(parents=True, mode=0o700)
    if how == "world-writable":
        folder.chmod(0o777)
    elif how == "a world-writable parent":  # not sticky: anyone can rename the folder away
        parent.chmod(0o777)
    else:
        (tmp_path / "link").symlink_to(folder)
        folder = tmp_path / "link"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(folder))
    with pytest.warns(RuntimeWarning, match=f"not cached in NUMBA_CACHE_DIR={folder}"):
        assert compile_cache.choose() == (None, "package folder")
    parent.chmod(0o777 | stat.S_ISVTX)  # sticky, as /tmp: only the owner renames
    if how == "a world-writable parent":
        assert compile_cache.choose() == (folder, "NUMBA_CACHE_DIR")


# the last rule left: the package folder read-only, the user cache folder not one, the
# temporary one writable by all; then what this process and its child see
_OWN_FOLDER = """
import json, os, subprocess, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
import elmscale
import numba
from elmscale.core import compile_cache, jit
jit.dot(np.arange(4.0), np.arange(4.0))
folder, why = compile_cache.choose()
child = subprocess.run(
    [sys.executable, "-c", "import os; print(os.environ.get('NUMBA_CACHE_DIR'))"],
    capture_output=True, text=True, timeout=60,
)
print(json.dumps({
    "why": why, "folder": str(folder), "environ": os.environ.get("NUMBA_CACHE_DIR"),
    "inherited": child.stdout.strip(), "numba": numba.config.CACHE_DIR,
    "cached": sorted(p.name for p in folder.rglob("jit.dot-*.nbi")),
}))
"""


@pytest.mark.timeout(300)
def test_a_folder_of_this_process_own_is_never_handed_to_its_children(tmp_path):
    """It is removed at exit, and another user can then make a folder of that name: a
    child that inherited its name in NUMBA_CACHE_DIR would read what they put there."""
    site = _read_only_copy(tmp_path)
    try:
        blocker = tmp_path / "not-a-folder"
        blocker.write_text("")
        temp = tmp_path / "tmp"
        (temp / f"elmscale-{os.getuid()}").mkdir(parents=True)
        (temp / f"elmscale-{os.getuid()}").chmod(0o777)
        env = _env(PYTHONPATH=str(site), XDG_CACHE_HOME=str(blocker), TMPDIR=str(temp))
        result = _python_read_only(site, _OWN_FOLDER, env, tmp_path)
        assert result.returncode == 0, result.stderr
        out = json.loads(result.stdout.splitlines()[-1])
        assert out["why"] == "a folder of this process's own", out
        assert out["environ"] is None and out["inherited"] == "None", out
        assert out["numba"] == out["folder"]  # numba caches there all the same
        assert out["cached"], "nothing cached in this process's own folder"
        assert not Path(out["folder"]).exists()  # removed at exit
    finally:
        for path in [site, *site.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)


def test_the_stamp_is_written_through_no_planted_link(tmp_path):
    """A temporary name that another user can guess, opened as usual, writes through the
    link they put there."""
    source = tmp_path / "passes.py"
    source.write_text("x = 1\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    stamp = cache / "elmscale-kernels.stamp"
    victim = tmp_path / "victim"
    victim.write_text("theirs")
    (cache / f"{stamp.name}.{os.getpid()}.tmp").symlink_to(victim)
    assert compile_cache.drop_stale_kernels([cache], stamp, [source])
    assert victim.read_text() == "theirs"
    assert not stamp.is_symlink() and stamp.read_text() == compile_cache.fingerprint([source])


_DROP = (
    "import sys\n"
    "from pathlib import Path\n"
    "from elmscale.core import compile_cache\n"
    "cache, stamp, source = map(Path, sys.argv[1:])\n"
    "print(compile_cache.drop_stale_kernels([cache], stamp, [source]))\n"
)


@pytest.mark.timeout(120)
def test_a_process_starting_meanwhile_leaves_what_another_just_wrote(tmp_path):
    """Two processes start after an edit: the first drops the stale kernels, writes the new
    fingerprint and copies a wheel's kernels in; the second, which read the old stamp
    meanwhile, must not drop them too."""
    fcntl = pytest.importorskip("fcntl")
    source = tmp_path / "passes.py"
    source.write_text("x = 1\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    stamp = cache / "elmscale-kernels.stamp"
    stamp.write_text("the fingerprint of the sources before the edit")
    copied = cache / "jit.dot-10.py311.nbi"
    held = os.open(cache, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)  # as drop_stale_kernels in the first process
        copied.write_bytes(b"just copied")
        second = subprocess.Popen(
            [sys.executable, "-c", _DROP, str(cache), str(stamp), str(source)],
            env=_env(),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(3)  # the second process starts and comes to the stamp
        stamp.write_text(compile_cache.fingerprint([source]))
    finally:
        os.close(held)
    out, _ = second.communicate(timeout=100)
    assert second.returncode == 0
    assert out.split() == ["False"]  # it found the new fingerprint: nothing dropped
    assert copied.read_bytes() == b"just copied"
