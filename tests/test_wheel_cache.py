"""The wheel carries its compiled kernels (``setup.py``, ``elmscale/core/carried_kernels.py``).

The wheel is built once for the module (``python -m build --wheel --no-isolation`` on a
copy of this tree, with this interpreter's packages: a minute or more on one core, started
in the background as the module starts, while the tests before the wheel's own run on the
other core), installed in fresh
virtual environments whose dependencies are this interpreter's (a ``.pth`` file: the
carried kernels must match the numba installed), and each fit runs in a fresh process
with an empty user cache folder.  The picking of a baseline and the manifest's checks are
tested in this process too, on made-up manifests.

Every process started here gets a controlled environment (``_wheel.clean_env``: no
``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``, no cache folder, unless a test sets them):
these tests are also run with numba told to compile for another CPU (CI's second-kernels
run, ``.ci/second_kernels.py``), and what a wheel's fit is compared with is this
checkout's fit compiled for the same target, in a fresh process too, never this process's
kernels, compiled for whatever CPU this process was told.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest
from _wheel import WheelBuild, clean_env, site_packages, wheel_venv

from elmscale.core import carried_kernels, compile_cache

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "elmscale"
BUILD_TIMEOUT = 480  # seconds: 56 s on two cores shared with other work

# Fits in a fresh process from the installed wheel: which elmscale, what the carried cache
# said, the CPU numba compiles for, the elmscale kernels compiled, the predictions
CHILD = r"""
import json, sys
if sys.argv[1] == "numba-first":  # as a program that uses numba itself may
    import numba
    numba.njit(lambda a: a.sum())(__import__("numpy").arange(3.0))
import numpy as np
import elmscale
from elmscale.app.warmup import _CompileRecorder
from elmscale.core import carried_kernels
from sklearn.datasets import make_classification
X, y = make_classification(600, 8, n_informative=5, random_state=0)
# 9,000 rows: the kernel solver's column cache, shrinking and helper thread (from 8,192)
X_large, y_large = make_classification(9000, 8, n_informative=5, random_state=1)
with _CompileRecorder() as recorder:
    from elmscale import ELMClassifier, SparseELMClassifier
    models = {
        "sparse": (SparseELMClassifier(sigma=0.5), X, y),
        "sparse_large": (SparseELMClassifier(sigma=0.5), X_large, y_large),
        "elm": (ELMClassifier(random_state=0), X, y),
    }
    out = {}
    for name in sys.argv[2:]:
        model, X_fit, y_fit = models[name]
        out[name] = model.fit(X_fit, y_fit)
import numba
np.savez(
    "predictions.npz",
    **{f"{n}_labels": m.predict(X) for n, m in out.items()},
    **{f"{n}_scores": m.decision_function(X) for n, m in out.items()},
)
print("RESULT " + json.dumps({
    "package": elmscale.__file__,
    "status": carried_kernels.STATUS,
    "cpu": [numba.config.CPU_NAME, numba.config.CPU_FEATURES],
    "compiled": recorder.names,
}))
"""


def _host_baseline():
    features = carried_kernels.host_features()
    for baseline in carried_kernels.BASELINES.values():
        if set(baseline.requires) <= features:
            return baseline
    return None


@pytest.fixture(scope="module", autouse=True)
def wheel_build(request, tmp_path_factory):
    """The wheel's build, started in the background as the module's first test starts when
    any of its tests selected uses the wheel: it compiles on one core for a minute or more,
    while the tests of the kernels carried for the core step (``carried_core``, which
    compile on the other) run; the wheel's own tests are last in the file and wait for it.
    Killed at the module's end if still running (a test failed or was deselected)."""
    here = request.node.path
    wanted = any(
        item.path == here and "wheel" in getattr(item, "fixturenames", ())
        for item in request.session.items
    )
    if not wanted or _host_baseline() is None:
        yield None
        return
    build = WheelBuild(ROOT, tmp_path_factory.mktemp("wheel"))
    yield build
    build.stop()


@pytest.fixture(scope="module")
def wheel(wheel_build) -> Path:
    if _host_baseline() is None:
        pytest.skip("this CPU meets none of the carried baselines (x86-64-v3 at least)")
    built = wheel_build.result(BUILD_TIMEOUT)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = wheel_build.dist.glob("*.whl")
    return wheel


class _Fit(NamedTuple):
    """A fit of CHILD's running in a fresh process (:func:`_start_fit`)."""

    process: subprocess.Popen
    work: Path


def _start_fit(
    python: Path, tmp: Path, *models: str, first="elmscale", work_name=None, **env
) -> _Fit:
    """CHILD's fits of ``models`` by ``python``, started in a fresh process in the controlled
    environment ``clean_env(**env)`` (by default an empty user cache folder); ``_result``
    waits for them.  Two started together run on two cores: a fit that compiles (on one
    core: numba's compiler holds a lock) beside one that does not, or beside another
    process's compile."""
    work = tmp / (work_name or f"work-{first}")
    work.mkdir()
    xdg = tmp / "xdg"  # empty: no user cache
    with open(work / "child.out", "wb") as out, open(work / "child.err", "wb") as err:
        process = subprocess.Popen(
            [str(python), "-c", CHILD, f"{first}-first", *models],
            cwd=work,
            env=clean_env(**{"XDG_CACHE_HOME": str(xdg), **env}),
            stdout=out,  # files: a pipe nobody reads meanwhile could fill and stop it
            stderr=err,
        )
    return _Fit(process, work)


def _result(fit: _Fit, timeout: float = 400) -> tuple[dict, dict]:
    """The started fit's ``RESULT`` and its predictions, once it has ended."""
    try:
        fit.process.wait(timeout)
    except subprocess.TimeoutExpired:
        fit.process.kill()
        fit.process.wait(60)
        raise
    stdout = (fit.work / "child.out").read_text(errors="replace")
    stderr = (fit.work / "child.err").read_text(errors="replace")
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert fit.process.returncode == 0 and lines, stderr[-3000:]
    with np.load(fit.work / "predictions.npz") as saved:
        predictions = dict(saved)
    return json.loads(lines[-1][len("RESULT ") :]), predictions


def _fit_in(python: Path, tmp: Path, *models: str, **kw) -> tuple[dict, dict]:
    """:func:`_start_fit`, waited for."""
    return _result(_start_fit(python, tmp, *models, **kw))


def _start_checkout_fit(models, tmp: Path, baseline: carried_kernels.Baseline | None) -> _Fit:
    """The editable checkout's fit of the same data, started in a fresh process whose numba
    compiles for the target the wheel's fit ran kernels of: ``baseline`` (its carried
    kernels) or, None, this host (numba's default, no ``NUMBA_CPU_*``), whatever CPU this
    process's numba was told to compile for.  ``_same_as_this_checkout`` compares."""
    cpu = {}
    if baseline is not None:
        cpu = {"NUMBA_CPU_NAME": baseline.cpu_name, "NUMBA_CPU_FEATURES": baseline.cpu_features}
    # a cache folder of its own: the checkout's __pycache__ is left alone
    return _start_fit(
        Path(sys.executable),
        tmp,
        *models,
        work_name="work-checkout",
        ELMSCALE_CACHE_DIR=str(tmp / "checkout-cache"),
        **cpu,
    )


def _same_as_this_checkout(
    predictions: dict, models, checkout: _Fit, baseline: carried_kernels.Baseline | None
) -> None:
    """``predictions`` against the checkout's (:func:`_start_checkout_fit`).  The same
    sources compiled for the same target are the same machine code, and the solvers are
    deterministic (the kernel solver's helper thread included: the same result to the bit
    as one thread), so the labels and decision values are equal to the bit.  Kernels
    compiled for another target would differ in more than rounding: other vector widths and
    FMA contraction round the kernel solver's steps otherwise, and its path to its stopping
    tolerance, not to the last bit, follows (3e-4 in a decision value against x86-64-v2's
    kernels)."""
    out, reference = _result(checkout)
    assert Path(out["package"]).is_relative_to(PACKAGE), out["package"]
    expected_cpu = [None, None] if baseline is None else [baseline.cpu_name, baseline.cpu_features]
    assert out["cpu"] == expected_cpu, out
    for name in models:
        for kind in ("labels", "scores"):
            np.testing.assert_array_equal(
                predictions[f"{name}_{kind}"], reference[f"{name}_{kind}"], err_msg=name
            )


# -- the checks, on made-up manifests ------------------------------------------------------

_HERE = {"python": "cpython-311", "platform": "linux-x86_64", "numba": "1", "llvmlite": "2"}


def _manifest(**changes):
    baselines = [
        {**b._asdict(), "requires": list(b.requires)} for b in carried_kernels.BASELINES.values()
    ]
    return {
        "format": carried_kernels.FORMAT,
        **_HERE,
        "sources": {"core/jit.py": "aa", "solvers/x.py": "bb"},
        "baselines": baselines,
        **changes,
    }


def test_a_manifest_fits_only_the_same_versions_and_sources():
    sources = {"core/jit.py": "aa", "solvers/x.py": "bb"}
    assert carried_kernels.mismatch(_manifest(), sources, _HERE) is None
    assert "numba 0.1" in carried_kernels.mismatch(_manifest(numba="0.1"), sources, _HERE)
    assert "python" in carried_kernels.mismatch(_manifest(python="cpython-312"), sources, _HERE)
    edited = {**sources, "core/jit.py": "cc"}
    assert "core/jit.py" in carried_kernels.mismatch(_manifest(), edited, _HERE)
    added = {**sources, "core/new.py": "dd"}
    assert "core/new.py" in carried_kernels.mismatch(_manifest(), added, _HERE)
    assert "format" in carried_kernels.mismatch(_manifest(format=0), sources, _HERE)


def _generator(cpu_name, features):
    """A code generator's magic tuple."""
    return ("x86_64-unknown-linux-gnu", cpu_name, features)


def test_the_best_baseline_the_host_meets_unless_the_cpu_is_set():
    v4, v3 = carried_kernels.BASELINES.values()
    manifest = _manifest()
    on = ",".join(f"+{f}" for f in v4.requires)
    host = _generator("znver5", f"+64bit,{on}")
    assert carried_kernels.pick(manifest, host, True)[0]["name"] == v4.name
    avx2 = _generator("znver3", ",".join(f"+{f}" for f in v3.requires) + ",-avx512f")
    assert carried_kernels.pick(manifest, avx2, True)[0]["name"] == v3.name
    baseline, why = carried_kernels.pick(manifest, _generator("sandybridge", "+sse3,+avx"), True)
    assert baseline is None and "meets none" in why
    # numba told to compile for a CPU (NUMBA_CPU_NAME / NUMBA_CPU_FEATURES): only a baseline
    told = _generator(v3.cpu_name, v3.cpu_features)
    assert carried_kernels.pick(manifest, told, False)[0]["name"] == v3.name
    baseline, why = carried_kernels.pick(manifest, _generator("znver5", on), False)
    assert baseline is None and "znver5" in why
    # NUMBA_ENABLE_AVX=0: numba's features for this host without AVX
    no_avx = _generator("znver5", on.replace("+avx", "-avx"))
    assert carried_kernels.pick(manifest, no_avx, True)[0] is None


def test_the_carried_files_are_copied_once(carried_core, tmp_path):
    """In place: none copied again, until one of them is gone or the copy differs."""
    carried, baseline = carried_core.folder, carried_core.baseline
    target, _ = carried_kernels.code_generator()
    built_for = (target[0], baseline.cpu_name, baseline.cpu_features)
    folders = [tmp_path / "numba" / p for p in compile_cache.KERNEL_PACKAGES]
    marker = tmp_path / "numba" / "elmscale-kernels.carried"

    def install(key):
        return carried_kernels.install(
            carried / baseline.name, folders, marker, key, built_for, target
        )

    written = install("key")
    assert written == len(list((carried / baseline.name).rglob("*.nb[ci]"))), written
    assert install("key") == 0  # in place already
    data = next(folders[0].glob("*.nbc"))
    data.unlink()
    assert install("key") == written  # a file gone: copied again
    assert install("another build") == written
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]
    # filed for this code generator: numba's own reader finds them by its keys
    for index in folders[0].glob("*.nbi"):
        _, _, entries = carried_kernels.read_index(index)
        assert {tuple(key[1]) for key in entries} == {target}, index.name
        assert all((folders[0] / name).is_file() for name in entries.values())


def test_an_unusable_manifest_never_fails_the_import(tmp_path):
    (tmp_path / carried_kernels.MANIFEST).write_text("{not json")
    status = dict(carried_kernels.use(None, carried=tmp_path))
    carried_kernels.use(None)  # this checkout's own status again
    assert status["baseline"] is None and status["reason"].startswith("not used: JSONDecodeError")
    assert carried_kernels.use(None, carried=tmp_path / "none")["reason"].startswith("none carried")


# -- kernels carried for the warmup's core step: the copy, and what it leaves alone -------


class Carried(NamedTuple):
    """A copy of this package and kernels carried for it (``carried_core``)."""

    site: Path  # the folder to put on PYTHONPATH
    folder: Path  # to put in the package as its _kernel_cache
    baseline: carried_kernels.Baseline


# the manifest of kernels carried for a baseline, as build() writes it, for the sources of
# the elmscale imported
_MANIFEST = r"""
import json, sys
import llvmlite.binding as ll
from elmscale.core import carried_kernels, compile_cache
baseline = carried_kernels.BASELINES[sys.argv[1]]
print(json.dumps({
    "format": carried_kernels.FORMAT,
    **carried_kernels.versions(),
    "triple": ll.get_process_triple(),
    "sources": compile_cache.source_hashes(compile_cache.kernel_sources()),
    "baselines": [{**baseline._asdict(), "requires": list(baseline.requires)}],
}))
"""


@pytest.fixture(scope="module")
def carried_core(tmp_path_factory) -> Carried:
    """Kernels carried for this host's best baseline as ``build`` carries them (``elmscale
    warmup`` told to compile for it, its cache files and a manifest), of the warmup's
    ``core`` step only (seconds, not minutes), with the copy of the package they were
    compiled from (a copy: the sources here may change meanwhile)."""
    baseline = _host_baseline()
    if baseline is None:
        pytest.skip("this CPU meets none of the carried baselines (x86-64-v3 at least)")
    tmp = tmp_path_factory.mktemp("carried")
    site = tmp / "site"
    ignore = shutil.ignore_patterns("__pycache__", "*.nb[ci]", carried_kernels.FOLDER_NAME)
    shutil.copytree(PACKAGE, site / "elmscale", ignore=ignore)
    cache = tmp / "cache"
    env = clean_env(
        PYTHONPATH=str(site),
        ELMSCALE_CACHE_DIR=str(cache),
        NUMBA_CPU_NAME=baseline.cpu_name,
        NUMBA_CPU_FEATURES=baseline.cpu_features,
    )
    warmup = [sys.executable, "-m", "elmscale", "warmup", "--only", "core"]
    done = subprocess.run(warmup, env=env, cwd=tmp, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    out = tmp / "carried"
    for folder in (cache / "numba").iterdir():  # numba's <package>_<hash of its path>
        if folder.is_dir():
            shutil.copytree(folder, out / baseline.name / folder.name.split("_")[0])
    manifest = subprocess.run(
        [sys.executable, "-c", _MANIFEST, baseline.name],
        env=clean_env(PYTHONPATH=str(site)),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    (out / carried_kernels.MANIFEST).write_text(manifest.stdout)
    return Carried(site, out, baseline)


def _installed(where: Path, carried: Carried, with_kernels: bool = True) -> Path:
    """A copy of ``carried``'s package in ``where/site`` (made once), carrying its kernels
    unless not ``with_kernels``; the folder to put on ``PYTHONPATH``."""
    site = where / "site"
    if not site.exists():
        shutil.copytree(carried.site, site)
    if with_kernels:
        shutil.copytree(carried.folder, site / "elmscale" / carried_kernels.FOLDER_NAME)
    return site


# numba imported (and compiling code of the program's own) first, or elmscale first; then
# one of elmscale's kernels, a function of the program's own, and a child process
CARRIED_CHILD = r"""
import json, os, subprocess, sys
import numpy as np
if sys.argv[1] == "numba":
    import numba
    numba.njit(lambda a: a.sum())(np.arange(3.0))
import elmscale
import llvmlite.binding as ll
import numba
from numba.core import registry
from elmscale.core import carried_kernels, jit
jit.dot(np.arange(4.0), np.arange(4.0))
numba.njit(lambda a: a.max())(np.arange(3.0))
listed = "import os; print([k for k in os.environ if k.startswith('NUMBA_CPU')])"
child = subprocess.run([sys.executable, "-c", listed], capture_output=True, text=True, timeout=60)
print("RESULT " + json.dumps({
    "status": carried_kernels.STATUS,
    "environ": [k for k in os.environ if k.startswith("NUMBA_CPU")],
    "inherited": child.stdout.strip(),
    "config": [numba.config.CPU_NAME, numba.config.CPU_FEATURES],
    "generator": registry.cpu_target.target_context.codegen().magic_tuple()[1],
    "host": ll.get_host_cpu_name(),
    "dot": [sum(jit.dot.stats.cache_hits.values()), sum(jit.dot.stats.cache_misses.values())],
}))
"""


def _carried_run(site: Path, cache: Path, first: str = "elmscale", **env) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", CARRIED_CHILD, first],
        cwd=cache.parent,
        env=clean_env(PYTHONPATH=str(site), ELMSCALE_CACHE_DIR=str(cache), **env),
        capture_output=True,
        text=True,
        timeout=240,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.mark.timeout(300)
@pytest.mark.parametrize("first", ["elmscale", "numba"])
def test_carried_kernels_leave_numba_compiling_for_this_host(carried_core, tmp_path, first):
    """They serve elmscale's kernels alone: numba's CPU setting and the environment stay as
    they were, so the program's own numba code and the processes it starts (Dask and Ray
    workers, sbatch) compile for their host, which may lack the baseline's features."""
    out = _carried_run(_installed(tmp_path, carried_core), tmp_path / "cache", first)
    assert out["status"]["baseline"] == carried_core.baseline.name, out["status"]
    assert out["dot"] == [1, 0], "the carried kernel was not loaded"
    assert out["environ"] == [] and out["inherited"] == "[]", out
    assert out["config"] == [None, None]
    assert out["generator"] == out["host"]


@pytest.mark.timeout(400)
def test_numba_told_to_compile_for_a_cpu_gets_carried_kernels_only_of_that_cpu(
    carried_core, tmp_path
):
    """A user's ``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES`` are obeyed: told the carried
    baseline, the carried kernels serve; told another CPU (x86-64-v2, as CI's second
    kernels run; or the baseline's name with this host's features, numba's default when
    ``NUMBA_CPU_FEATURES`` is unset), they are not used, and the kernels filed for the
    baseline in the same cache are not loaded either: numba compiles for the CPU it was
    told."""
    site = _installed(tmp_path, carried_core)
    cache = tmp_path / "cache"
    baseline = carried_core.baseline
    told = _carried_run(
        site, cache, NUMBA_CPU_NAME=baseline.cpu_name, NUMBA_CPU_FEATURES=baseline.cpu_features
    )
    assert told["status"]["baseline"] == baseline.name, told["status"]
    assert told["config"] == [baseline.cpu_name, baseline.cpu_features]
    assert told["dot"] == [1, 0], "the carried kernel was not loaded"
    others = [
        {"NUMBA_CPU_NAME": "x86-64-v2", "NUMBA_CPU_FEATURES": ""},
        {"NUMBA_CPU_NAME": baseline.cpu_name},  # with this host's features
    ]
    for cpu in others:
        other = _carried_run(site, cache, **cpu)
        assert other["status"]["baseline"] is None, (cpu, other["status"])
        assert cpu["NUMBA_CPU_NAME"] in other["status"]["reason"], other["status"]
        assert other["generator"] == cpu["NUMBA_CPU_NAME"], other
        assert other["dot"] == [0, 1], f"{cpu}: a kernel compiled for another CPU was loaded"


@pytest.mark.timeout(400)
def test_carried_kernels_deleted_from_the_cache_are_put_back(carried_core, tmp_path):
    """A user who deletes the cache (core/jit.py's docstring says where it is) gets them
    copied again, and ``elmscale info`` says "used" only when they are there."""
    site = _installed(tmp_path, carried_core)
    cache = tmp_path / "cache"
    baseline = carried_core.baseline

    def delete():
        files = list(cache.rglob("*.nb[ci]"))
        assert files
        for path in files:
            path.unlink()

    assert _carried_run(site, cache)["dot"] == [1, 0]
    delete()
    again = _carried_run(site, cache)
    assert again["status"]["baseline"] == baseline.name, again["status"]
    assert again["dot"] == [1, 0], "not copied again: the kernel was compiled"
    delete()
    info = subprocess.run(
        [sys.executable, "-m", "elmscale", "info"],
        cwd=tmp_path,
        env=clean_env(PYTHONPATH=str(site), ELMSCALE_CACHE_DIR=str(cache)),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert info.returncode == 0, info.stderr[-3000:]
    assert f"carried by the wheel: used: {baseline.name}" in info.stdout, info.stdout
    assert list(cache.rglob("jit.dot-*.nbi")), "said used, but the files are not there"


@pytest.mark.timeout(400)
def test_the_copy_leaves_the_data_files_an_index_names_as_they_were(carried_core, tmp_path):
    """The cache holds numba's own compile of a kernel (made before the wheel was installed,
    or on a host of another CPU): a process that read its index before the copy loads the
    data files that index names, so the copy writes none of them, and keeps its entries."""
    site = _installed(tmp_path, carried_core, with_kernels=False)
    cache = tmp_path / "cache"
    assert _carried_run(site, cache)["dot"] == [0, 1]  # compiled: none carried
    own = {p: p.read_bytes() for p in cache.rglob("jit.dot-*.nbc")}
    assert own
    _installed(tmp_path, carried_core)  # the wheel installed over it
    out = _carried_run(site, cache)
    assert out["status"]["baseline"] == carried_core.baseline.name, out["status"]
    assert out["dot"] == [1, 0], out
    assert {p: p.read_bytes() for p in own} == own


def test_the_v4_baseline_compiles_512_bit_vectors(tmp_path):
    """As the docs say: its features ``-prefer-256-bit`` turn LLVM's preference for 256-bit
    vectors off (compiled only, not run: this host may lack AVX-512)."""
    if not sysconfig.get_platform().endswith("x86_64"):
        pytest.skip("an x86-64 baseline")
    v4 = carried_kernels.BASELINES["x86-64-v4"]
    code = (
        "import numba\n"
        "def scale(a, b):\n"
        "    for i in range(a.shape[0]):\n"
        "        a[i] = a[i] * 2.5 + b[i]\n"
        "f = numba.njit('void(float64[::1], float64[::1])')(scale)\n"
        "asm = f.inspect_asm(f.signatures[0])\n"
        "print('zmm' in asm, 'ymm' in asm)\n"
    )
    vectors = {}
    for features in (v4.cpu_features, ""):
        env = clean_env(NUMBA_CPU_NAME=v4.cpu_name, NUMBA_CPU_FEATURES=features)
        done = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr[-2000:]
        vectors[features] = done.stdout.split()
    assert vectors[v4.cpu_features] == ["True", "True"]  # 512-bit registers in its loop
    assert vectors[""] == ["False", "True"]  # LLVM's default for x86-64-v4: 256-bit


# -- the wheel's own: last, so that its build runs beside the tests above -----------------


@pytest.mark.timeout(900)
def test_the_wheels_first_fit_compiles_no_kernel(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as zf:
        manifest = json.loads(zf.read("elmscale/_kernel_cache/manifest.json"))
    # machine code for this Python and platform: tagged so
    python_tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform_tag = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name.endswith(f"-{python_tag}-{python_tag}-{platform_tag}.whl"), wheel.name
    # those the build machine meets: the warmup runs the code it compiles
    features = carried_kernels.host_features()
    met = [b.name for b in carried_kernels.BASELINES.values() if set(b.requires) <= features]
    assert [b["name"] for b in manifest["baselines"]] == met
    assert manifest["sources"] == compile_cache.source_hashes(compile_cache.kernel_sources())
    expected = _host_baseline()
    models = ["sparse", "sparse_large", "elm"]
    # the checkout's compile for the baseline (the longest part) beside the wheel's fits
    checkout = _start_checkout_fit(models, tmp_path, expected)
    python = wheel_venv(tmp_path / "venv", wheel)
    out, predictions = _fit_in(python, tmp_path, *models)
    assert Path(out["package"]).is_relative_to(tmp_path / "venv"), out["package"]
    assert out["status"]["baseline"] == expected.name, out["status"]
    assert out["cpu"] == [None, None]  # numba still compiles for this host
    assert out["compiled"] == [], out["compiled"]
    # numba imported and compiling first: the carried kernels serve all the same
    out, _ = _fit_in(python, tmp_path, "sparse", first="numba")
    assert out["status"]["baseline"] == expected.name, out["status"]
    assert out["cpu"] == [None, None]
    assert out["compiled"] == [], out["compiled"]
    _same_as_this_checkout(predictions, models, checkout, expected)


@pytest.mark.timeout(900)
def test_a_manifest_of_another_numba_falls_back_to_compiling(wheel, tmp_path):
    python = wheel_venv(tmp_path / "venv", wheel)
    site = site_packages(python)
    manifest_path = site / "elmscale" / carried_kernels.FOLDER_NAME / carried_kernels.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["numba"] = "0.1.0"
    manifest_path.write_text(json.dumps(manifest))
    # both compile for this host, on a core each
    checkout = _start_checkout_fit(["elm"], tmp_path, None)
    out, predictions = _fit_in(python, tmp_path, "elm")
    assert out["status"]["baseline"] is None
    assert "built with numba 0.1.0" in out["status"]["reason"], out["status"]
    assert out["cpu"] == [None, None]  # numba compiles for this CPU, as without the cache
    assert out["compiled"], "nothing compiled: the carried kernels were used"
    assert not list((site / "elmscale" / "core" / "__pycache__").glob("*.carried"))
    _same_as_this_checkout(predictions, ["elm"], checkout, None)  # compiled for this host
