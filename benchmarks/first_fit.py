"""What the first fit after installing costs: numba compiling elmscale's kernels.

    python benchmarks/first_fit.py                    # a clean venv, elmscale installed from here
    python benchmarks/first_fit.py --source DIR       # ... installed from another tree
    python benchmarks/first_fit.py --python VENV/bin/python   # a venv you made (elmscale in it)
    python benchmarks/first_fit.py --read-only        # the installed package made read-only
    python benchmarks/first_fit.py --wheel            # the wheel, with its compiled kernels
    python benchmarks/first_fit.py --quick            # this interpreter, 2,000 rows, ELM (CI)

For each estimator (``SparseELMClassifier()`` and ``ELMClassifier()``, their defaults) on
the COD-RNA half (29,768 rows: ``benchmarks/sparse_elm_vs_svc.py``'s seeded split, scaled
to [-1, 1]), it runs the fit in a fresh process with a cold compile cache, then in a second
fresh process (the cache now filled), then once more in that process; it prints the three
times and the difference between the cold and the warm
fresh-process fit: what a first fit pays for compiling, and the CPU seconds spent inside
numba's compiler (on two cores shared with other work the solve's own time varies by
several times; the compile's CPU seconds much less).

Without ``--python`` it makes a clean venv in a temporary folder and installs elmscale there
from this working tree (or ``--source``), not editable, with its dependencies (pip takes
them from its usual index or ``PIP_FIND_LINKS``).  Every child runs with its own empty
``XDG_CACHE_HOME``, ``ELMSCALE_CACHE_DIR`` and ``NUMBA_CACHE_DIR`` unset, so the cache it
starts from is the fresh install's (``--cache-dir`` sets both instead; ``--quick`` does,
with an empty temporary folder, since this venv's own package folder may hold a cache).
``--quick`` fits ``ELMClassifier()`` alone unless ``--estimators`` says otherwise: the same
steps (a cold and a warm fresh process, the compile's CPU seconds, the kernels counted) for
its 4 kernels, about 7 s of compiling, where ``SparseELMClassifier()``'s 16 take about 38 s
(CI's whole budget for this check).  The sparse ELM's cold compile is measured at full size
without ``--quick``, and checked in a fresh process by ``tests/test_wheel_cache.py``.
``--read-only`` removes write permission from the installed package's folders first (as
root, which writes anyway, the children see it mounted read-only: ``unshare -m``): a
cluster image or a container, where numba cannot cache beside the code.

``--wheel`` builds the wheel from this tree (or ``--source``) as ``setup.py`` says
(``python -m build --wheel --no-isolation`` with this interpreter's packages: the kernels it
carries are compiled by this numba) and installs it, without dependencies, in a fresh venv
for each estimator whose dependencies are this interpreter's (a ``.pth`` file); its
"cold" fit is the first fit after installing the wheel.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODRNA = ROOT.parent / "shared" / "data" / "cod-rna" / "codrna.csv"
HALF = 29_768
QUICK_ROWS = 2_000
CHILD_TIMEOUT = 900  # seconds: a cold compile on two busy cores took 90 s
BUILD_TIMEOUT = 1800  # seconds: the wheel's build compiled two baselines in 56 s

# Runs in the child, from an empty folder (so that this tree is not on its path).
CHILD = r"""
import json, resource, sys, threading, time
t0 = time.perf_counter()
from numba.core import event
# CPU seconds inside numba's compiler, on whichever thread compiles: the compile's own cost,
# whatever the solve's threads do beside it on busy cores
compile_cpu = [0.0]
local = threading.local()
class Compiles(event.Listener):
    def on_start(self, ev):
        depth = getattr(local, "depth", 0)
        if depth == 0:
            local.start = time.thread_time()
        local.depth = depth + 1
    def on_end(self, ev):
        local.depth -= 1
        if local.depth == 0:
            compile_cpu[0] += time.thread_time() - local.start
event.register("numba:compiler_lock", Compiles())
# elmscale's kernels compiled (not loaded from the cache)
compiled = [0]
class Kernels(event.Listener):
    def on_start(self, ev):
        pass
    def on_end(self, ev):
        module = getattr(ev.data["dispatcher"].py_func, "__module__", "") or ""
        compiled[0] += module.startswith("elmscale")
event.register("numba:compile", Kernels())
import numpy as np
import elmscale
from elmscale.data import Scaler, load
try:  # whether a wheel's compiled kernels were used
    from elmscale.core.carried_kernels import STATUS as carried
except ImportError:
    carried = {}
which, path, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
if path == "-":
    from sklearn.datasets import make_classification
    X, y = make_classification(rows, 8, random_state=0)
else:
    data = load(path)
    order = np.random.default_rng(0).permutation(data.n_samples)[:rows]
    X, y = data.X[order], data.y[order]
X = Scaler().fit(X).transform(X)
if which == "sparse":
    from elmscale import SparseELMClassifier as Model
else:
    from elmscale import ELMClassifier as Model
t1 = time.perf_counter()
Model().fit(X, y)
t2 = time.perf_counter()
first_compile, first_kernels = compile_cpu[0], compiled[0]
Model().fit(X, y)
t3 = time.perf_counter()
use = resource.getrusage(resource.RUSAGE_SELF)
print("RESULT " + json.dumps({
    "prepare": t1 - t0, "fit": t2 - t1, "again": t3 - t2,
    "cpu": use.ru_utime + use.ru_stime, "compile": first_compile, "kernels": first_kernels,
    "package": elmscale.__file__, "carried": carried.get("reason"),
}))
"""


# root writes through permissions: for it the package is mounted read-only instead, in a
# mount namespace of the child's own
READ_ONLY_MOUNT = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'


def run_child(python, which, data, rows, env, workdir, read_only=None):
    command = [python, "-c", CHILD, which, data, str(rows)]
    if read_only is not None and os.geteuid() == 0:
        command = ["unshare", "-m", "sh", "-c", READ_ONLY_MOUNT, str(read_only), *command]
    out = subprocess.run(
        command,
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"the {which} fit failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def make_venv(where: Path, source: Path) -> str:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, timeout=300)
    python = str(where / "bin" / "python")
    out = subprocess.run(
        [python, "-m", "pip", "install", "-q", str(source)],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=where,
    )
    if out.returncode != 0:
        raise SystemExit(f"pip install {source} failed:\n{out.stderr[-3000:]}")
    return python


def package_dir(python, workdir, env) -> Path:
    out = subprocess.run(
        [python, "-c", "import elmscale, os; print(os.path.dirname(elmscale.__file__))"],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return Path(out.stdout.strip())


def set_writable(folder: Path, writable: bool):
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode | 0o200 if writable else mode & ~0o222)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="this interpreter, 2,000 rows, ELM")
    parser.add_argument("--python", help="an interpreter with elmscale installed")
    parser.add_argument("--source", default=str(ROOT), help="the tree to install (no --python)")
    parser.add_argument("--rows", type=int, default=None, help=f"default {HALF:,}")
    parser.add_argument("--cache-dir", help="ELMSCALE_CACHE_DIR / NUMBA_CACHE_DIR for the fits")
    parser.add_argument("--read-only", action="store_true", help="package folders read-only")
    parser.add_argument("--wheel", action="store_true", help="the wheel, a fresh venv each")
    parser.add_argument(
        "--estimators",
        nargs="+",
        default=None,
        choices=["sparse", "elm"],
        help="default: both (--quick: elm)",
    )
    args = parser.parse_args(argv)
    args.estimators = args.estimators or (["elm"] if args.quick else ["sparse", "elm"])
    rows = args.rows or (QUICK_ROWS if args.quick else HALF)
    data = str(CODRNA) if CODRNA.exists() else "-"
    if data == "-" and not args.quick:
        raise SystemExit(f"{CODRNA} not found (it is in ../shared/data)")
    tmp = Path(tempfile.mkdtemp(prefix="elmscale-first-fit-"))
    made = pkg = wheel = None
    pkgs = []  # made read-only, to be made writable again
    try:
        workdir = tmp / "work"
        workdir.mkdir()
        if args.python or args.quick:
            python = os.path.abspath(args.python or sys.executable)  # children run elsewhere
            how = f"interpreter {python}"
        elif args.wheel:
            # the wheel's build and install, as its test's (it imports elmscale: here only)
            sys.path.insert(0, str(ROOT / "tests"))
            from _wheel import build_wheel, wheel_venv

            start = time.perf_counter()
            built, dist = build_wheel(Path(args.source), tmp / "build", BUILD_TIMEOUT)
            if built.returncode != 0:
                output = (built.stdout + built.stderr)[-3000:]
                raise SystemExit(f"building the wheel failed:\n{output}")
            (wheel,) = dist.glob("*.whl")
            seconds = time.perf_counter() - start
            python = str(wheel_venv(tmp / "venv", wheel))
            how = (
                f"wheel {wheel.name} ({wheel.stat().st_size / 1e6:.1f} MB, built in "
                f"{seconds:.0f} s from {args.source}), a fresh venv for each estimator"
            )
        else:
            made = tmp / "venv"
            python = make_venv(made, Path(args.source))
            how = f"clean venv {made}, elmscale installed from {args.source}"
        cache = args.cache_dir or (str(tmp / "cache") if args.quick else None)
        base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
        for name in ("ELMSCALE_CACHE_DIR", "NUMBA_CACHE_DIR"):
            base_env.pop(name, None)
        if cache:
            base_env["ELMSCALE_CACHE_DIR"] = cache
            base_env["NUMBA_CACHE_DIR"] = os.path.join(cache, "numba")
        pkg = package_dir(python, workdir, base_env)
        print(
            f"first fit: {how}; package {pkg}{' (read-only)' if args.read_only else ''}; "
            f"{rows:,} rows of {'COD-RNA' if data != '-' else 'generated data'}; "
            f"cache {cache or 'the defaults'}"
        )
        for which in args.estimators:
            if wheel is not None and which != args.estimators[0]:  # a fresh install each
                python = str(wheel_venv(tmp / f"venv-{which}", wheel))
                pkg = package_dir(python, workdir, base_env)
            if args.read_only:
                set_writable(pkg, False)
                pkgs.append(pkg)
            env = dict(base_env, XDG_CACHE_HOME=str(tmp / f"xdg-{which}"))
            if cache:  # every estimator starts cold
                env["ELMSCALE_CACHE_DIR"] = os.path.join(cache, which)
                env["NUMBA_CACHE_DIR"] = os.path.join(cache, which, "numba")
            ro = pkg if args.read_only else None
            cold = run_child(python, which, data, rows, env, workdir, ro)
            warm = run_child(python, which, data, rows, env, workdir, ro)
            name = "SparseELMClassifier()" if which == "sparse" else "ELMClassifier()"
            print(
                f"  {name:22s} cold {cold['fit']:6.2f} s (compiling: {cold['compile']:5.1f} "
                f"CPU s) | warm {warm['fit']:6.2f} s (compiling: {warm['compile']:4.1f} CPU s) "
                f"| same process again {warm['again']:5.2f} s | cold - warm "
                f"{cold['fit'] - warm['fit']:6.2f} s | kernels compiled cold {cold['kernels']}"
                + (f", carried: {cold['carried']}" if wheel is not None else "")
            )
    finally:
        for folder in pkgs:
            set_writable(folder, True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
