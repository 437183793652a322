"""The compiled kernels a wheel carries, so that its first fit compiles nothing.

``python -m build`` (``setup.py``) runs ``elmscale warmup`` on the built tree once for each
CPU baseline of :data:`BASELINES`, with numba told to generate code for that baseline
(``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``, in those processes only) instead of for the
build machine, and puts numba's cache files in ``elmscale/_kernel_cache/<baseline>/<package>/``
with a ``manifest.json``: the kernel sources' content hashes, the Python, platform, numba and
llvmlite versions, and each baseline's CPU name, features and the host features it needs.

When elmscale imports numba (:func:`use`, called from ``core/jit.py`` before any kernel is
defined), if the manifest's versions and source hashes are this install's and numba
generates code for this host (no ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``) with the
features of a carried baseline (the first that it meets: x86-64-v4, then x86-64-v3), that
baseline's kernels are put in the folders numba reads (``compile_cache.kernel_folders``),
filed under this process's code generator: numba loads them as the code it compiled here,
and machine code for a baseline runs on any CPU with the baseline's features.  Nothing else
changes: numba's CPU setting and the environment are left alone, so the other numba code in
this process, the processes started from it, and elmscale's kernels for the signatures not
carried compile for this host as without a carried cache.  When numba is told to compile
for a CPU (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``), the carried kernels serve only if
that is a carried baseline.  In any other case nothing changes: numba compiles on first use,
as without a carried cache.  Never raises: a failure is a reason in :data:`STATUS` (shown by
``elmscale info`` and ``elmscale warmup``).

The copy (:func:`install`): each index file is written anew, its entries keyed for this
process's code generator and added to the entries numba keeps there, after the data files it
names, which get names of this copy's own (the build, the baseline and the code generator).
So a process that reads an index meanwhile finds either the old one, whose data files are
left as they were, or the new one, whose data files are all there: never an old index with
new data under a name it knew.  A marker beside the sources' fingerprint lists the files
written and the data files' sizes: the copy is made again when any of them is gone (a cache
deleted by hand), not only when the build or the code generator differs.

What this relies on in numba, beyond its documented ``NUMBA_CPU_*`` settings (checked by the
build, which fails when they do not hold; at import only for the numba version the build
saw): a cached kernel's index (``<module>.<function>-<line>.py311.nbi``, numba's
``IndexDataCacheFile``) holds numba's version, pickled, then the source stamp and a dict
from keys to data file names, each key a signature, the code generator's "magic tuple" (LLVM
triple, CPU name, CPU features) and the bytecode's hashes (:func:`read_index` and
:func:`index_bytes` read and write it, the build checks that what they write loads as
numba's own file does); a data file holds the machine code, which numba links as it is
(copied byte for byte).  The stamp
of elmscale's kernels is elmscale's own (``compile_cache.key_kernels_by_sources``: content
hashes, not numba's file times, which pip does not keep).  The files go where numba's
``_UserProvidedCacheLocator`` or ``InTreeCacheLocator`` looks
(``compile_cache.kernel_folders``).

Measured on an AMD EPYC (znver5), one thread, COD-RNA half (``SparseELMClassifier(
sigma=0.5)``): native 0.53-0.55 s a warm fit, x86-64-v4 as LLVM tunes it (256-bit vectors)
0.64-0.66 s, x86-64-v4 with 512-bit vectors 0.53 s, x86-64-v3 0.69-0.71 s; and as a proxy
for an AVX2 host, znver3 0.67 s against x86-64-v3's 0.68 s.  So x86-64-v4 is carried with
512-bit vectors: its features ``-prefer-256-bit``, LLVM's preference for 256-bit vectors
turned off (as LLVM has it for Zen 4 and 5; Intel's AVX-512 servers prefer 256-bit vectors,
so there a warm fit may differ from a native one), and x86-64-v3 for the AVX2 hosts (Zen 2
and 3, most Intel desktops).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import pickle
import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import NamedTuple

from elmscale.core import compile_cache

FOLDER_NAME = "_kernel_cache"
FOLDER = compile_cache._PACKAGE / FOLDER_NAME
MANIFEST = "manifest.json"
FORMAT = 1

# the x86-64 psABI levels, in LLVM's feature names
_V3 = ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "sahf")  # x86-64-v2
_V3 += ("avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe", "xsave")
_V4 = (*_V3, "avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")


class Baseline(NamedTuple):
    """A CPU that a carried cache is compiled for: numba's ``CPU_NAME`` and
    ``CPU_FEATURES`` (its magic tuple's two CPU fields), and the host features it needs."""

    name: str
    cpu_name: str
    cpu_features: str
    requires: tuple[str, ...]


# best first: the first that a host meets is used
BASELINES = {
    b.name: b
    for b in (
        # "-prefer-256-bit": LLVM's preference for 256-bit vectors off, so 512-bit vectors
        Baseline("x86-64-v4", "x86-64-v4", "-prefer-256-bit", _V4),
        Baseline("x86-64-v3", "x86-64-v3", "", _V3),
    )
}

STATUS: dict[str, str | None] = {
    "baseline": None,
    "reason": "not checked: elmscale's kernels are not imported in this process",
}


def versions() -> dict[str, str]:
    """What numba's cached code depends on besides the CPU and the sources (read without
    importing numba): the Python (its bytecode is hashed into each index key, its version
    into the file names), the platform, numba and llvmlite."""
    import sysconfig

    return {
        "python": sys.implementation.cache_tag + sys.abiflags,
        "platform": sysconfig.get_platform(),
        "numba": metadata.version("numba"),
        "llvmlite": metadata.version("llvmlite"),
    }


def host_features() -> set[str]:
    """The CPU features LLVM finds on this host (those the OS enables, AVX-512 included)."""
    import llvmlite.binding as ll

    return {name for name, on in ll.get_host_cpu_features().items() if on}


def mismatch(manifest: dict, sources: dict[str, str], here: dict[str, str]) -> str | None:
    """Why a carried cache cannot serve this install (None when it can): another format,
    other versions, or kernel sources other than those it was compiled from."""
    if manifest.get("format") != FORMAT:
        return f"manifest format {manifest.get('format')!r}, not {FORMAT}"
    for key, value in here.items():
        if manifest.get(key) != value:
            return f"built with {key} {manifest.get(key)}, this is {value}"
    carried = manifest.get("sources", {})
    changed = sorted(
        set(carried) ^ set(sources) | {p for p in sources if carried.get(p) != sources[p]}
    )
    if changed:
        return f"kernel sources differ from the build's ({', '.join(changed[:3])})"
    return None


def code_generator() -> tuple[tuple[str, str, str], bool]:
    """``(magic tuple, for this host)``: numba's CPU code generator in this process (made
    now if it was not: the first kernel would make it) and whether it generates code for
    this host (numba's ``CPU_NAME`` and ``CPU_FEATURES`` not set)."""
    from numba.core import config, registry

    target = registry.cpu_target.target_context.codegen().magic_tuple()
    return tuple(target), config.CPU_NAME is None and config.CPU_FEATURES is None


def pick(manifest: dict, target: tuple[str, str, str], host: bool) -> tuple[dict | None, str]:
    """``(baseline, why)``: the carried baseline whose kernels can serve numba's code
    generator ``target`` (its magic tuple; ``host``: for this host), or None.

    The baseline it is, when numba is told to compile for one; else, for this host, the
    first carried baseline whose features the code generator has (``+feature`` in its
    features: none of AVX's where ``NUMBA_ENABLE_AVX=0``), whose code runs here."""
    baselines = manifest.get("baselines", [])
    for b in baselines:
        if (b["cpu_name"], b["cpu_features"]) == tuple(target[1:]):
            return b, "numba compiles for it"
    if not host:
        return None, (
            f"numba is told to compile for {target[1]} (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES), "
            "not a carried baseline"
        )
    features = {f[1:] for f in target[2].split(",") if f.startswith("+")}
    for b in baselines:
        if set(b["requires"]) <= features:
            return b, "the best carried baseline this CPU meets"
    return None, f"this CPU meets none of the carried baselines {[b['name'] for b in baselines]}"


class _Named:
    """A class of elmscale's that an index file names (a named tuple in a kernel's
    signature), held by its name: reading the index imports nothing of elmscale's, since
    those modules import ``core/jit.py``, which reads the index files when it is imported."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __eq__(self, other):
        return isinstance(other, _Named) and (self.module, self.name) == (other.module, other.name)

    def __hash__(self):
        return hash((self.module, self.name))


class _IndexReader(pickle.Unpickler):
    def find_class(self, module, name):
        if module.split(".")[0] == "elmscale":
            return _Named(module, name)
        return super().find_class(module, name)


class _IndexWriter(pickle._Pickler):
    """pickle's own writer (the Python one, whose ``save`` can be extended), a
    :class:`_Named` written as pickle writes the class it stands for."""

    def save(self, obj, save_persistent_id=True):
        if isinstance(obj, _Named) and id(obj) not in self.memo:
            self.save(obj.module)  # pickle's save_global, protocol 4 and later
            self.save(obj.name)
            self.write(pickle.STACK_GLOBAL)
            self.memoize(obj)
            return
        super().save(obj, save_persistent_id)


def read_index(path: Path) -> tuple[str, object, dict]:
    """``(numba version, source stamp, {key: data file name})`` of one of numba's index
    files (``IndexDataCacheFile``'s format: its version pickled, then its stamp and
    entries), elmscale's classes in it held by name (:class:`_Named`)."""
    with open(path, "rb") as f:
        version = pickle.load(f)
        stamp, entries = _IndexReader(f).load()
    return version, stamp, entries


def index_bytes(version: str, stamp: object, entries: dict) -> bytes:
    """An index file's content, as :func:`read_index` reads it and numba does."""
    out = io.BytesIO()
    pickle.dump(version, out, protocol=pickle.HIGHEST_PROTOCOL)
    _IndexWriter(out, protocol=pickle.HIGHEST_PROTOCOL).dump((stamp, entries))
    return out.getvalue()


def _in_place(marker: Path, key: str) -> bool:
    """Whether ``marker`` records the copy ``key`` and its files are all there (the data
    files at their sizes; an index grows as numba adds the kernels it compiles)."""
    try:
        recorded = json.loads(marker.read_bytes())
    except (OSError, ValueError):
        return False
    if not isinstance(recorded, dict) or recorded.get("key") != key:
        return False
    for path, size in recorded.get("files", {}).items():
        try:
            st = os.stat(path)
        except OSError:
            return False
        if size is not None and st.st_size != size:
            return False
    return True


def install(
    source: Path,
    folders: list[Path],
    marker: Path,
    key: str,
    built_for: tuple[str, str, str],
    target: tuple[str, str, str],
) -> int:
    """Put a baseline's carried kernels (``source/<package>/``, compiled by the code
    generator ``built_for``, a magic tuple) in numba's ``folders``, filed for the code
    generator ``target``, unless ``marker`` says this copy (``key``) is in place with all
    its files; returns the files written (see the module's docstring for the order)."""
    if _in_place(marker, key):
        return 0
    tag = hashlib.sha256(key.encode()).hexdigest()[:12]
    files: dict[str, int | None] = {}
    for package, folder in zip(compile_cache.KERNEL_PACKAGES, folders):
        for index in sorted((source / package).glob("*.nbi")):
            base = index.name.removesuffix(".nbi")
            version, stamp, entries = read_index(index)  # numba's version: the manifest's
            kernels = {}
            for (signature, generator, code), data_name in entries.items():
                if tuple(generator) != built_for:
                    continue
                name = f"{base}.{tag}{data_name.removeprefix(base)}"  # <base>.<tag>.1.nbc
                folder.mkdir(parents=True, exist_ok=True)
                compile_cache.replace_file(folder / name, (index.parent / data_name).read_bytes())
                files[str(folder / name)] = (folder / name).stat().st_size
                kernels[(signature, target, code)] = name
            if not kernels:
                continue
            kept = {}  # the entries numba keeps there, for this numba and these sources
            with contextlib.suppress(FileNotFoundError):
                there = read_index(folder / index.name)
                if there[:2] == (version, stamp):
                    kept = there[2]
            compile_cache.replace_file(
                folder / index.name, index_bytes(version, stamp, {**kept, **kernels})
            )
            files[str(folder / index.name)] = None
    compile_cache.replace_file(marker, json.dumps({"key": key, "files": files}).encode())
    return len(files)


def use(folder: Path | None, carried: Path = FOLDER) -> dict[str, str | None]:
    """Use the carried kernels if they fit this install and numba's code generator (see
    the module's docstring), for numba's cache ``folder`` (``compile_cache.configured``);
    returns and keeps :data:`STATUS`, ``{"baseline": name or None, "reason": why}``.  Runs
    where elmscale imports numba, before any kernel is defined; never raises."""
    try:
        baseline, reason = _use(folder, carried)
    except Exception as exc:  # noqa: BLE001 - an import must not fail for an optional cache
        baseline, reason = None, f"not used: {exc.__class__.__name__}: {exc}"
    STATUS.update(baseline=baseline, reason=reason)
    return STATUS


def _use(folder: Path | None, carried: Path) -> tuple[str | None, str]:
    try:
        manifest_bytes = (carried / MANIFEST).read_bytes()
    except FileNotFoundError:
        return None, "none carried (a source or editable install)"
    manifest = json.loads(manifest_bytes)
    sources = compile_cache.source_hashes(compile_cache.kernel_sources())
    why = mismatch(manifest, sources, versions())
    if why is None and os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES"):
        why = "NUMBA_CACHE_LOCATOR_CLASSES is set (numba's own cache keys, not elmscale's)"
    target, host = code_generator()
    if why is None and manifest.get("triple") != target[0]:
        why = f"built for {manifest.get('triple')}, this is {target[0]}"
    if why is not None:
        return None, f"not used: {why}"
    baseline, why = pick(manifest, target, host)
    if baseline is None:
        return None, f"not used: {why}"
    key = json.dumps(
        {
            "sources": compile_cache.fingerprint(compile_cache.kernel_sources()),
            "manifest": hashlib.sha256(manifest_bytes).hexdigest(),
            "baseline": baseline["name"],
            "target": target,
        },
        sort_keys=True,
    )
    # a marker for each code generator: hosts of other CPUs that share the folder (a home
    # on a network file system) keep their copies side by side
    generator = hashlib.sha256(json.dumps(target).encode()).hexdigest()[:12]
    marker = compile_cache.stamp_path(folder).with_suffix(f".{generator}.carried")
    built_for = (manifest["triple"], baseline["cpu_name"], baseline["cpu_features"])
    install(
        carried / baseline["name"],
        compile_cache.kernel_folders(folder),
        marker,
        key,
        built_for,
        target,
    )
    return baseline["name"], f"used: {baseline['name']} ({why})"


# -- the build side: python -m elmscale.core.carried_kernels (setup.py runs it) -------------


def build(baselines: list[str], timeout: float = 1800, report=print) -> Path:
    """Compile every kernel for each of ``baselines`` that this machine meets (``elmscale
    warmup`` in a process of its own, side by side; the warmup runs what it compiles, which
    would stop at the first instruction this CPU lacks; the others are reported, left out)
    and carry them in this package's :data:`FOLDER` with the manifest (written last); run
    from the built tree (``build_lib`` on ``PYTHONPATH``).  Raises ``RuntimeError`` if
    this machine meets none of them, a warmup fails or numba cached nothing where
    expected."""
    import subprocess
    import tempfile
    import time

    import llvmlite.binding as ll
    from numba.core import caching, registry

    relied_on = {
        "caching.CacheImpl._locator_classes": hasattr(caching.CacheImpl, "_locator_classes"),
        "registry.cpu_target.target_context.codegen().magic_tuple": hasattr(
            registry.cpu_target.target_context.codegen(), "magic_tuple"
        ),
    }
    if not all(relied_on.values()):
        missing = [name for name, there in relied_on.items() if not there]
        raise RuntimeError(f"this numba lacks what elmscale relies on: {missing}")
    package_root = Path(os.path.abspath(__file__)).parents[2]  # as imported: numba's paths
    out = Path(os.path.abspath(__file__)).parents[1] / FOLDER_NAME
    shutil.rmtree(out, ignore_errors=True)
    features = host_features()
    chosen = []  # best first
    for b in (b for b in BASELINES.values() if b.name in baselines):
        lacks = sorted(set(b.requires) - features)
        if lacks:
            report(f"not carried: {b.name}, whose {', '.join(lacks)} this machine lacks")
        else:
            chosen.append(b)
    if not chosen:
        raise RuntimeError(f"this machine meets none of the baselines {baselines}")
    entries = []
    with tempfile.TemporaryDirectory(prefix="elmscale-kernels-") as tmp:
        runs = {}
        for b in chosen:
            env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",)}
            env.update(
                ELMSCALE_CACHE_DIR=os.path.join(tmp, b.name),
                NUMBA_CPU_NAME=b.cpu_name,
                NUMBA_CPU_FEATURES=b.cpu_features,
                PYTHONPATH=os.pathsep.join(
                    filter(None, [str(package_root), env.get("PYTHONPATH")])
                ),
            )
            log = open(os.path.join(tmp, f"{b.name}.log"), "w+")  # closed below
            command = [sys.executable, "-m", "elmscale", "warmup"]
            runs[b.name] = (subprocess.Popen(command, env=env, stdout=log, stderr=log), log)
        start = time.monotonic()
        failed = []
        for name, (proc, log) in runs.items():
            try:
                proc.wait(timeout=max(1.0, timeout - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.seek(0)
            text = log.read()
            log.close()
            report(f"elmscale warmup for {name}:\n{text.rstrip()}")
            if proc.returncode != 0:
                failed.append(f"{name} exited {proc.returncode}: {text[-2000:]}")
        if failed:
            raise RuntimeError("; ".join(failed))
        for b in chosen:
            folders = compile_cache.kernel_folders(Path(tmp) / b.name / "numba")
            generator = (ll.get_process_triple(), b.cpu_name, b.cpu_features)
            count = 0
            for package, folder in zip(compile_cache.KERNEL_PACKAGES, folders):
                files = sorted(folder.glob("*.nb[ci]")) if folder.is_dir() else []
                if files:
                    (out / b.name / package).mkdir(parents=True, exist_ok=True)
                for path in files:
                    shutil.copyfile(path, out / b.name / package / path.name)
                for path in (p for p in files if p.suffix == ".nbi"):
                    # install() rewrites each index: what it writes must load as numba's
                    # file does (imported here, elmscale's classes named in it are equal)
                    version, stamp, kernels = read_index(path)
                    if _loaded(index_bytes(version, stamp, kernels)) != _loaded(path.read_bytes()):
                        raise RuntimeError(f"{path}: rewritten, it loads as another index")
                    # and finds its kernels by the key numba gave them
                    count += any(tuple(key[1]) == generator for key in kernels)
            if count == 0:
                raise RuntimeError(
                    f"numba cached nothing for {generator} in {folders}: its cache layout "
                    "is not the one elmscale expects"
                )
            entries.append({**b._asdict(), "requires": list(b.requires), "indexes": count})

    manifest = {
        "format": FORMAT,
        **versions(),
        "numpy": metadata.version("numpy"),  # not checked (numba does not key by it)
        "triple": ll.get_process_triple(),
        "sources": compile_cache.source_hashes(compile_cache.kernel_sources()),
        "baselines": entries,
    }
    text = json.dumps(manifest, indent=1, sort_keys=True) + "\n"
    compile_cache.replace_file(out / MANIFEST, text.encode())
    return out


def _loaded(index: bytes) -> object:
    """An index file's stamp and entries, read as numba reads them (elmscale's classes
    imported)."""
    stream = io.BytesIO(index)
    pickle.load(stream)  # numba's version
    return pickle.load(stream)


def main(argv=None) -> int:
    """``setup.py``'s step: ``--build-lib`` the built tree this must be imported from,
    ``--baselines`` (default all of :data:`BASELINES`)."""
    import argparse
    import time

    parser = argparse.ArgumentParser(description=build.__doc__.splitlines()[0])
    parser.add_argument("--build-lib", required=True)
    parser.add_argument("--baselines", nargs="+", default=list(BASELINES), choices=BASELINES)
    parser.add_argument("--timeout", type=float, default=1800)
    args = parser.parse_args(argv)
    if compile_cache._PACKAGE != Path(args.build_lib).resolve() / "elmscale":
        raise SystemExit(f"elmscale imported from {compile_cache._PACKAGE}, not {args.build_lib}")
    start = time.perf_counter()
    out = build(args.baselines, timeout=args.timeout)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    carried = [b["name"] for b in json.loads((out / MANIFEST).read_bytes())["baselines"]]
    print(
        f"carried kernels for {', '.join(carried)}: {out} ({size / 1e6:.1f} MB, "
        f"{time.perf_counter() - start:.0f} s)"
    )
    return 0
