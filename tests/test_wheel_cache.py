"""The wheel carries its compiled kernels (``setup.py``, ``elmscale/core/carried_kernels.py``).

The wheel is built once for the module (``python -m build --wheel --no-isolation`` on a
copy of this tree, with this interpreter's packages: a minute or so), installed in fresh
virtual environments whose dependencies are this interpreter's (a ``.pth`` file: the
carried kernels must match the numba installed), and each fit runs in a fresh process
with an empty user cache folder.  The picking of a baseline and the manifest's checks are
tested in this process too, on made-up manifests.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest
from _wheel import build_wheel, clean_env, site_packages, wheel_venv
from sklearn.datasets import make_classification

from elmscale import ELMClassifier, SparseELMClassifier
from elmscale.core import carried_kernels, compile_cache

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT = 480  # seconds: 56 s on two cores shared with other work

# Fits in a fresh process from the installed wheel: which elmscale, what the carried cache
# said, the CPU numba compiles for, the elmscale kernels compiled, the predictions
CHILD = r"""
import json, sys
if sys.argv[1] == "numba-first":  # as a program that uses numba itself may
    import numba
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


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    if _host_baseline() is None:
        pytest.skip("this CPU meets none of the carried baselines (x86-64-v3 at least)")
    built, dist = build_wheel(ROOT, tmp_path_factory.mktemp("wheel"), BUILD_TIMEOUT)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    return wheel


def _fit_in(python: Path, tmp: Path, *models: str, first="elmscale") -> tuple[dict, dict]:
    work = tmp / f"work-{first}"
    work.mkdir()
    xdg = tmp / "xdg"  # empty: no user cache
    result = subprocess.run(
        [str(python), "-c", CHILD, f"{first}-first", *models],
        cwd=work,
        env=clean_env(XDG_CACHE_HOME=str(xdg)),
        capture_output=True,
        text=True,
        timeout=400,
    )
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert result.returncode == 0 and lines, result.stderr[-3000:]
    with np.load(work / "predictions.npz") as saved:
        predictions = dict(saved)
    return json.loads(lines[-1][len("RESULT ") :]), predictions


def _same_as_this_checkout(predictions: dict, models) -> None:
    """The editable checkout's fit of the same data: the same labels; decision values equal
    but for the last bits (the wheel's code is compiled for a baseline, this process's
    for this CPU)."""
    X, y = make_classification(600, 8, n_informative=5, random_state=0)
    X_large, y_large = make_classification(9000, 8, n_informative=5, random_state=1)
    made = {
        "sparse": (SparseELMClassifier(sigma=0.5), X, y),
        "sparse_large": (SparseELMClassifier(sigma=0.5), X_large, y_large),
        "elm": (ELMClassifier(random_state=0), X, y),
    }
    for name in models:
        estimator, X_fit, y_fit = made[name]
        model = estimator.fit(X_fit, y_fit)
        np.testing.assert_array_equal(predictions[f"{name}_labels"], model.predict(X))
        np.testing.assert_allclose(
            predictions[f"{name}_scores"], model.decision_function(X), rtol=1e-6, atol=1e-9
        )


@pytest.mark.timeout(900)
def test_the_wheels_first_fit_compiles_no_kernel(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as zf:
        manifest = json.loads(zf.read("elmscale/_kernel_cache/manifest.json"))
    # machine code for this Python and platform: tagged so
    python_tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform_tag = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name.endswith(f"-{python_tag}-{python_tag}-{platform_tag}.whl"), wheel.name
    assert [b["name"] for b in manifest["baselines"]] == list(carried_kernels.BASELINES)
    assert manifest["sources"] == compile_cache.source_hashes(compile_cache.kernel_sources())
    python = wheel_venv(tmp_path / "venv", wheel)
    out, predictions = _fit_in(python, tmp_path, "sparse", "sparse_large", "elm")
    assert Path(out["package"]).is_relative_to(tmp_path / "venv"), out["package"]
    expected = _host_baseline()
    assert out["status"]["baseline"] == expected.name, out["status"]
    assert out["cpu"] == [expected.cpu_name, expected.cpu_features]
    assert out["compiled"] == [], out["compiled"]
    _same_as_this_checkout(predictions, ["sparse", "sparse_large", "elm"])
    # numba imported first, not compiling yet: its CPU is still set to the baseline
    out, _ = _fit_in(python, tmp_path, "sparse", first="numba")
    assert out["cpu"] == [expected.cpu_name, expected.cpu_features]
    assert out["compiled"] == [], out["compiled"]


@pytest.mark.timeout(900)
def test_a_manifest_of_another_numba_falls_back_to_compiling(wheel, tmp_path):
    python = wheel_venv(tmp_path / "venv", wheel)
    site = site_packages(python)
    manifest_path = site / "elmscale" / carried_kernels.FOLDER_NAME / carried_kernels.MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["numba"] = "0.1.0"
    manifest_path.write_text(json.dumps(manifest))
    out, predictions = _fit_in(python, tmp_path, "elm")
    assert out["status"]["baseline"] is None
    assert "built with numba 0.1.0" in out["status"]["reason"], out["status"]
    assert out["cpu"] == [None, None]  # numba compiles for this CPU, as without the cache
    assert out["compiled"], "nothing compiled: the carried kernels were used"
    assert not list((site / "elmscale" / "core" / "__pycache__").glob("*.carried"))
    _same_as_this_checkout(predictions, ["elm"])


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


class _Config:
    def __init__(self, name, features):
        self.CPU_NAME, self.CPU_FEATURES = name, features


def test_the_best_baseline_the_host_meets_unless_the_cpu_is_set():
    v4, v3 = carried_kernels.BASELINES.values()
    manifest = _manifest()
    assert carried_kernels.pick(manifest, set(v4.requires), {})[0]["name"] == v4.name
    assert carried_kernels.pick(manifest, set(v3.requires), {})[0]["name"] == v3.name
    baseline, why = carried_kernels.pick(manifest, {"sse3", "avx"}, {})
    assert baseline is None and "meets none" in why
    # set by the user (or inherited from a parent that used the cache): only if carried
    env = {"NUMBA_CPU_NAME": v3.cpu_name, "NUMBA_CPU_FEATURES": v3.cpu_features}
    assert carried_kernels.pick(manifest, set(v4.requires), env)[0]["name"] == v3.name
    baseline, why = carried_kernels.pick(manifest, set(v4.requires), {"NUMBA_CPU_NAME": "znver5"})
    assert baseline is None and "znver5" in why
    # numba imported before elmscale: free until it has compiled or its CPU is set
    native = _Config(None, None)
    assert carried_kernels.pick(manifest, set(v4.requires), {}, native)[0]["name"] == v4.name
    assert carried_kernels.pick(manifest, set(v4.requires), {}, native, compiled=True)[0] is None
    same = _Config(v4.cpu_name, v4.cpu_features)
    picked = carried_kernels.pick(manifest, set(v4.requires), {}, same, compiled=True)[0]
    assert picked["name"] == v4.name
    assert carried_kernels.pick(manifest, set(v4.requires), {}, _Config("znver5", None))[0] is None


def test_the_carried_files_are_copied_once(tmp_path):
    source = tmp_path / "carried"
    (source / "core").mkdir(parents=True)
    (source / "core" / "jit.dot-10.py311.nbi").write_bytes(b"index")
    (source / "core" / "jit.dot-10.py311.1.nbc").write_bytes(b"data")
    folders = [tmp_path / "numba" / p for p in compile_cache.KERNEL_PACKAGES]
    marker = tmp_path / "numba" / "elmscale-kernels.carried"
    assert carried_kernels.install(source, folders, marker, "key") == 2
    assert sorted(p.name for p in folders[0].iterdir()) == [
        "jit.dot-10.py311.1.nbc",
        "jit.dot-10.py311.nbi",
    ]
    (folders[0] / "jit.dot-10.py311.nbi").write_bytes(b"numba's own since")
    assert carried_kernels.install(source, folders, marker, "key") == 0  # in place already
    assert (folders[0] / "jit.dot-10.py311.nbi").read_bytes() == b"numba's own since"
    assert carried_kernels.install(source, folders, marker, "another build") == 2
    assert not list(tmp_path.rglob("*.tmp"))


def test_an_unusable_manifest_never_fails_the_import(tmp_path):
    (tmp_path / carried_kernels.MANIFEST).write_text("{not json")
    status = dict(carried_kernels.use(None, carried=tmp_path))
    carried_kernels.use(None)  # this checkout's own status again
    assert status["baseline"] is None and status["reason"].startswith("not used: JSONDecodeError")
    assert carried_kernels.use(None, carried=tmp_path / "none")["reason"].startswith("none carried")
