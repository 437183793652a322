"""setuptools' build (the project is described in pyproject.toml) plus one step: a wheel
carries elmscale's numba kernels compiled for the x86-64-v4 and x86-64-v3 CPU baselines
(``elmscale/core/carried_kernels.py``; those the build machine meets: the step runs the
code it compiles), so that its first fit compiles nothing.

The step runs ``elmscale warmup`` on the built tree, so it needs elmscale's dependencies
(numba, scikit-learn, ...) where the wheel is built, and the cache serves only the numba
that compiled it.  They are not build requirements: every ``pip install -e .`` and
source install would fetch them all into its isolated build environment, and numba
there could differ from the one installed beside the wheel.  So build with the
environment that will run it::

    python -m build --no-isolation        # or: pip wheel --no-build-isolation --no-deps .

In an isolated build (plain ``python -m build``), an editable install, or with
``ELMSCALE_WHEEL_KERNELS=no``, the wheel carries no kernels (the reason is printed) and
compiles on first use.  ``ELMSCALE_WHEEL_KERNELS=require`` fails the build instead;
``ELMSCALE_WHEEL_BASELINES="x86-64-v4"`` carries only the baselines named.  A wheel
that carries kernels is tagged for this Python and platform (``cp311-cp311-linux_x86_64``).
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

MODE = "ELMSCALE_WHEEL_KERNELS"  # auto (default), require, no
BASELINES = "ELMSCALE_WHEEL_BASELINES"  # default: every baseline carried_kernels knows
NEEDED = ("numpy", "scipy", "numba", "llvmlite", "sklearn", "pandas", "pyarrow")
TIMEOUT = 1800  # seconds; a warmup took 40 s on two busy cores


def carried(build_lib) -> Path:
    return Path(build_lib) / "elmscale" / "_kernel_cache"


def carry_kernels(build_lib: Path) -> None:
    """Compile the kernels into ``build_lib``'s package, or say why not."""
    shutil.rmtree(carried(build_lib), ignore_errors=True)  # a former build's
    mode = os.environ.get(MODE, "auto")
    if mode not in ("auto", "require", "no"):
        raise SystemExit(f"{MODE}={mode!r}: use auto, require or no")
    reason = None
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if mode == "no":
        reason = f"{MODE}=no"
    elif missing:
        reason = (
            f"{', '.join(missing)} not installed where it is built (an isolated build?); "
            "`python -m build --no-isolation` carries kernels for the numba installed"
        )
    else:
        command = [
            sys.executable,
            "-c",
            "import sys; from elmscale.core.carried_kernels import main; sys.exit(main())",
            "--build-lib",
            str(build_lib),
        ]
        if os.environ.get(BASELINES):
            command += ["--baselines", *os.environ[BASELINES].replace(",", " ").split()]
        env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR",)}
        env["PYTHONPATH"] = str(build_lib)
        for name in ("ELMSCALE_CACHE_DIR", "NUMBA_CPU_NAME", "NUMBA_CPU_FEATURES"):
            env.pop(name, None)
        try:
            done = subprocess.run(command, env=env, cwd=build_lib, timeout=TIMEOUT)
            if done.returncode != 0:
                reason = f"compiling them failed (exit {done.returncode}, above)"
        except subprocess.TimeoutExpired:
            reason = f"compiling them took over {TIMEOUT} s"
    if reason is None:
        return
    shutil.rmtree(carried(build_lib), ignore_errors=True)
    if mode == "require":
        raise SystemExit(f"elmscale: no compiled kernels for the wheel: {reason}")
    print(f"elmscale: the wheel carries no compiled kernels: {reason}", flush=True)


class BuildPy(build_py):
    """``build_py``, then the carried kernels (not for an editable install)."""

    def run(self):
        super().run()
        if not getattr(self, "editable_mode", False):
            carry_kernels(Path(self.build_lib).resolve())


class BdistWheel(bdist_wheel):
    """A wheel with machine code in it is for this Python and platform only."""

    def get_tag(self):
        build_lib = self.get_finalized_command("build_py").build_lib
        if (carried(build_lib) / "manifest.json").is_file():
            self.root_is_pure = False
        return super().get_tag()


setup(cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
