"""The compiled kernels a wheel carries, so that its first fit compiles nothing.

``python -m build`` (``setup.py``) runs ``elmscale warmup`` on the built tree once for each
CPU baseline of :data:`BASELINES`, with numba told to generate code for that baseline
(``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``) instead of for the build machine, and puts
numba's cache files in ``elmscale/_kernel_cache/<baseline>/<package>/`` with a
``manifest.json``: the kernel sources' content hashes, the Python, platform, numba and
llvmlite versions, and each baseline's CPU name, features and the host features it needs.

At import (:func:`use`, called from ``elmscale/__init__.py`` after
``compile_cache.configure()`` and before numba is imported), when the manifest's versions
and source hashes are this install's and the host has the features of a carried baseline
(the first that it meets: x86-64-v4, then x86-64-v3), that baseline's files are copied
into the folders numba will read (``compile_cache.kernel_folders``; once: a marker beside
the sources' fingerprint says which copy is in place) and numba is told to generate code
for that baseline (in ``os.environ``, so processes started from here do too): its cached
kernels are then the ones numba looks for.  In any other case nothing changes: numba
compiles on first use for this CPU, as without a carried cache.  Never raises: a failure
is a reason in :data:`STATUS` (shown by ``elmscale info`` and ``elmscale warmup``).

Other numba code in the process compiles for the baseline too (numba has one CPU setting
per process); a user's ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` are left as they are,
and then the carried kernels serve only if they name a carried baseline.  So is the CPU of
a numba imported before elmscale once it has compiled anything; before that, its config is
set as well.

What this relies on in numba, beyond its documented ``NUMBA_CPU_*`` settings (checked by the
build, which fails when they do not hold; at import only for the numba version the build
saw): a cached kernel's index (``<module>.<function>-<line>.py311.nbi``, numba's
``IndexDataCacheFile``) holds numba's version, the source stamp and, per signature, the
codegen's "magic tuple" (LLVM triple, CPU name, CPU features): carried files load only where
all of these are equal.  The stamp of elmscale's kernels is elmscale's own
(``compile_cache.key_kernels_by_sources``: content hashes, not numba's file times, which pip
does not keep).  The files go where numba's ``_UserProvidedCacheLocator`` or
``InTreeCacheLocator`` looks (``compile_cache.kernel_folders``).  Whether a numba imported
earlier has fixed its CPU is read from its ``cpu_target``'s cached target context
(:func:`numba_compiled`).

Measured on an AMD EPYC (znver5), one thread, COD-RNA half (``SparseELMClassifier(
sigma=0.5)``): native 0.53-0.55 s a warm fit, x86-64-v4 as LLVM tunes it (256-bit vectors)
0.64-0.66 s, x86-64-v4 with 512-bit vectors 0.53 s, x86-64-v3 0.69-0.71 s; and as a proxy
for an AVX2 host, znver3 0.67 s against x86-64-v3's 0.68 s.  So x86-64-v4 is carried with
``-prefer-256-bit`` (LLVM's choice for Zen 4 and 5; on Intel's AVX-512 servers it prefers
256-bit vectors, so there a warm fit may differ from a native one), and x86-64-v3 for the
AVX2 hosts (Zen 2 and 3, most Intel desktops).
"""

from __future__ import annotations

import hashlib
import os
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
        Baseline("x86-64-v4", "x86-64-v4", "-prefer-256-bit", _V4),
        Baseline("x86-64-v3", "x86-64-v3", "", _V3),
    )
}

STATUS: dict[str, str | None] = {"baseline": None, "reason": "use() not called"}


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


def pick(
    manifest: dict,
    features: set[str],
    environ: dict[str, str],
    numba_config=None,
    compiled: bool = False,
) -> tuple[dict | None, str]:
    """``(baseline, why)``: the carried baseline that numba would use here, or None.

    The first carried baseline whose features the host has, unless the CPU is set already:
    by the user (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``; a child process inherits
    the parent's choice this way), or in a numba imported before elmscale
    (``numba_config``, its config module) that has set it or has ``compiled`` (made its code
    generator, for its CPU then): then only a carried baseline equal to that setting."""
    carried = [b for b in manifest.get("baselines", []) if set(b["requires"]) <= features]
    config = None if numba_config is None else (numba_config.CPU_NAME, numba_config.CPU_FEATURES)
    if config is not None and (compiled or config != (None, None)):
        setting, where = config, "numba, imported before elmscale, compiles for"
    elif "NUMBA_CPU_NAME" in environ or "NUMBA_CPU_FEATURES" in environ:
        setting = (environ.get("NUMBA_CPU_NAME"), environ.get("NUMBA_CPU_FEATURES"))
        where = "NUMBA_CPU_NAME / NUMBA_CPU_FEATURES set to"
    else:
        if carried:
            return carried[0], "the best carried baseline this CPU meets"
        names = [b["name"] for b in manifest.get("baselines", [])]
        return None, f"this CPU meets none of the carried baselines {names}"
    for b in carried:
        if (b["cpu_name"], b["cpu_features"]) == setting:
            return b, f"{where} it"
    return None, f"{where} {setting}, not a carried baseline this CPU meets"


def numba_compiled() -> bool:
    """Whether an imported numba has made its CPU code generator (its CPU is fixed then):
    the target context, a cached property of numba's ``cpu_target`` (checked to exist
    when the wheel is built, and only the numba version that built it gets here)."""
    registry = sys.modules.get("numba.core.registry")
    if registry is None:
        return False
    target = getattr(registry, "cpu_target", None)
    return target is None or "_toplevel_target_context" in vars(target)


def install(source: Path, folders: list[Path], marker: Path, key: str) -> int:
    """Copy a baseline's carried files (``source/<package>/``) into numba's ``folders``
    unless ``marker`` says this copy (``key``) is in place; returns the files copied.

    Each file is written to a temporary name and renamed, the data files (``.nbc``) before
    the indexes (``.nbi``) that name them, the marker last: a process that starts meanwhile
    reads either no index or a whole one (at worst it compiles, as without this)."""
    try:
        if marker.read_text() == key:
            return 0
    except FileNotFoundError:
        pass
    copied = 0
    for package, folder in zip(compile_cache.KERNEL_PACKAGES, folders):
        files = sorted((source / package).glob("*.nb[ci]"), key=lambda p: p.suffix == ".nbi")
        if files:
            folder.mkdir(parents=True, exist_ok=True)
        for path in files:
            tmp = folder / f".{path.name}.{os.getpid()}.tmp"
            shutil.copyfile(path, tmp)
            os.replace(tmp, folder / path.name)
            copied += 1
    tmp = marker.with_name(f"{marker.name}.{os.getpid()}.tmp")
    tmp.write_text(key)
    os.replace(tmp, marker)
    return copied


def use(folder: Path | None, carried: Path = FOLDER) -> dict[str, str | None]:
    """Use the carried kernels if they fit this install and host (see the module's
    docstring), for numba's cache ``folder`` (``compile_cache.configure``'s); returns and
    keeps :data:`STATUS`, ``{"baseline": name or None, "reason": why}``.  Must run before
    numba is imported to set the CPU; never raises."""
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
    import json  # (here: an install without carried kernels never needs it)

    manifest = json.loads(manifest_bytes)
    sources = compile_cache.source_hashes(compile_cache.kernel_sources())
    why = mismatch(manifest, sources, versions())
    if why is None and os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES"):
        why = "NUMBA_CACHE_LOCATOR_CLASSES is set (numba's own cache keys, not elmscale's)"
    if why is None:
        import llvmlite.binding as ll

        if manifest.get("triple") != ll.get_process_triple():
            why = f"built for {manifest.get('triple')}, this is {ll.get_process_triple()}"
    if why is not None:
        return None, f"not used: {why}"
    config = sys.modules.get("numba.core.config")
    baseline, why = pick(manifest, host_features(), dict(os.environ), config, numba_compiled())
    if baseline is None:
        return None, f"not used: {why}"
    key = json.dumps(
        {
            "sources": compile_cache.fingerprint(compile_cache.kernel_sources()),
            "manifest": hashlib.sha256(manifest_bytes).hexdigest(),
            "baseline": baseline["name"],
        },
        sort_keys=True,
    )
    marker = compile_cache.stamp_path(folder).with_suffix(".carried")
    install(carried / baseline["name"], compile_cache.kernel_folders(folder), marker, key)
    os.environ.setdefault("NUMBA_CPU_NAME", baseline["cpu_name"])
    os.environ.setdefault("NUMBA_CPU_FEATURES", baseline["cpu_features"])
    if config is not None:  # numba imported before elmscale: its settings are read already
        config.CPU_NAME, config.CPU_FEATURES = baseline["cpu_name"], baseline["cpu_features"]
    return baseline["name"], f"used: {baseline['name']} ({why})"


# -- the build side: python -m elmscale.core.carried_kernels (setup.py runs it) -------------


def build(baselines: list[str], timeout: float = 1800, report=print) -> Path:
    """Compile every kernel for each of ``baselines`` (``elmscale warmup`` in a process of
    its own, side by side) and carry them in this package's :data:`FOLDER` with the
    manifest (written last); run from the built tree (``build_lib`` on ``PYTHONPATH``).
    Raises ``RuntimeError`` if a warmup fails or numba cached nothing where expected."""
    import json
    import subprocess
    import tempfile
    import time

    from numba.core import caching, registry

    relied_on = {
        "caching.CacheImpl._locator_classes": hasattr(caching.CacheImpl, "_locator_classes"),
        "registry.cpu_target._toplevel_target_context": hasattr(
            type(registry.cpu_target), "_toplevel_target_context"
        ),
    }
    if not all(relied_on.values()):
        missing = [name for name, there in relied_on.items() if not there]
        raise RuntimeError(f"this numba lacks what elmscale relies on: {missing}")
    package_root = Path(os.path.abspath(__file__)).parents[2]  # as imported: numba's paths
    out = Path(os.path.abspath(__file__)).parents[1] / FOLDER_NAME
    shutil.rmtree(out, ignore_errors=True)
    chosen = [b for b in BASELINES.values() if b.name in baselines]  # best first
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
            count = 0
            for package, folder in zip(compile_cache.KERNEL_PACKAGES, folders):
                files = sorted(folder.glob("*.nb[ci]")) if folder.is_dir() else []
                if files:
                    (out / b.name / package).mkdir(parents=True, exist_ok=True)
                for path in files:
                    shutil.copyfile(path, out / b.name / package / path.name)
                count += sum(p.suffix == ".nbi" for p in files)
            if count == 0:
                raise RuntimeError(
                    f"numba cached nothing in {folders} for {b.name}: its cache layout is "
                    "not the one elmscale expects"
                )
            entries.append({**b._asdict(), "requires": list(b.requires), "indexes": count})
    import llvmlite.binding as ll

    manifest = {
        "format": FORMAT,
        **versions(),
        "numpy": metadata.version("numpy"),  # not checked (numba does not key by it)
        "triple": ll.get_process_triple(),
        "sources": compile_cache.source_hashes(compile_cache.kernel_sources()),
        "baselines": entries,
    }
    tmp_manifest = out / f".{MANIFEST}.tmp"
    tmp_manifest.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    os.replace(tmp_manifest, out / MANIFEST)
    return out


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
    print(
        f"carried kernels for {', '.join(args.baselines)}: {out} ({size / 1e6:.1f} MB, "
        f"{time.perf_counter() - start:.0f} s)"
    )
    return 0
