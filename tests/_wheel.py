"""The wheel that carries compiled kernels, built and installed as a user would
(``setup.py``, ``elmscale/core/carried_kernels.py``): for ``tests/test_wheel_cache.py`` and
``benchmarks/first_fit.py --wheel``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from _background import Background

from elmscale.core import carried_kernels


def clean_env(**extra) -> dict:
    """No cache folder or CPU chosen, nothing on PYTHONPATH: as after a plain install."""
    drop = ("PYTHONPATH", "NUMBA_CACHE_DIR", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("ELMSCALE")}
    env.update(extra)
    return env


class WheelBuild(Background):
    """``python -m build --wheel --no-isolation`` (this interpreter's packages: its numba
    compiles the kernels carried, which are required) of a copy of ``source`` made in
    ``where`` (``source``'s build/ folder is left alone), started in the background: the
    build compiles on one core for a minute or more, and its caller may do other work
    meanwhile (:meth:`result` waits for it; :meth:`stop` ends the build's warmup process
    with it)."""

    def __init__(self, source: Path, where: Path):
        copy = where / "source"
        copy.mkdir(parents=True)
        for name in ("pyproject.toml", "setup.py", "README.md"):
            shutil.copy2(source / name, copy / name)
        shutil.copytree(
            source / "elmscale",
            copy / "elmscale",
            ignore=shutil.ignore_patterns("__pycache__", "*.nb[ic]", carried_kernels.FOLDER_NAME),
        )
        self.dist = copy / "dist"
        super().__init__(
            [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", "dist", "."],
            logs=where / "build-logs",
            cwd=copy,
            env=clean_env(ELMSCALE_WHEEL_KERNELS="require"),
        )


def build_wheel(source: Path, where: Path, timeout: float):
    """``(build, dist)``: :class:`WheelBuild` of ``source`` in ``where``, waited for; the
    finished process and the folder its wheel is in."""
    build = WheelBuild(source, where)
    return build.result(timeout), build.dist


def site_packages(python) -> Path:
    """The ``purelib`` folder of the interpreter ``python``."""
    return Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            timeout=60,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )


def wheel_venv(where: Path, wheel: Path) -> Path:
    """A fresh venv with ``wheel`` installed (no dependencies: this interpreter's, through a
    .pth file, whose own .pth files, an editable elmscale's among them, are not read: the
    numba the kernels were compiled by); its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120
    )
    python = where / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
        + ["--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    deps = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site_packages(python) / "elmscale-deps.pth").write_text("\n".join(sorted(deps)) + "\n")
    return python
