"""Print the environment of CI's second numerical run, ``OPENBLAS_CORETYPE=...
NUMBA_CPU_NAME=... NUMBA_CPU_FEATURES=``: kernels that round differently from the
default's and that this CPU can execute (issue 49: a tolerance that held under one set of
OpenBLAS kernels failed under another).

AVX-512 CPUs (OpenBLAS's default SkylakeX / Cooperlake / SapphireRapids): Haswell (AVX2 +
FMA, 256-bit).  AVX2 CPUs (default Haswell / Zen): Sandybridge (AVX without FMA: every
multiply-add rounded twice).  Older: Nehalem (SSE only).  The choice is checked: the
printed core type is the one numpy's OpenBLAS reports when it is forced (threadpoolctl),
else the script fails.

numba's kernels, compiled for the host by default, are compiled one x86-64 level lower
(no AVX-512 on an AVX-512 CPU: x86-64-v3; no AVX on others: x86-64-v2), its features
given explicitly (empty: the level's own), so that vector width and FMA contraction
change too.  numba keys its cache by CPU name, so the host's compiled kernels stay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def openblas_core(coretype: str | None) -> str:
    """The kernel set numpy's OpenBLAS runs with ``OPENBLAS_CORETYPE=coretype`` (None:
    the default), read in a fresh process."""
    env = dict(os.environ)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    code = (
        "import json, numpy, threadpoolctl;"
        "print(json.dumps([i['architecture'] for i in threadpoolctl.threadpool_info()"
        " if i['internal_api'] == 'openblas']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    if out.returncode != 0:
        raise SystemExit(f"OpenBLAS with core type {coretype!r} did not start: {out.stderr}")
    cores = json.loads(out.stdout)
    return cores[0] if cores else ""


def main() -> None:
    flags = cpu_flags()
    numba_level = "x86-64-v3" if "avx512f" in flags else "x86-64-v2"
    numba_env = f"NUMBA_CPU_NAME={numba_level} NUMBA_CPU_FEATURES="
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if forced:
        # a machine that sets it does so because other kernels compute wrong results or
        # crash there: keep it, vary numba's kernels only
        print(f"OpenBLAS: {forced}, as this machine sets it; numba: {numba_level}", file=sys.stderr)
        print(f"OPENBLAS_CORETYPE={forced} {numba_env}")
        return
    if "avx512f" in flags:
        second = "Haswell"
    elif "avx2" in flags and "fma" in flags:
        second = "Sandybridge"
    else:
        second = "Nehalem"
    default = openblas_core(None)
    if default.lower() == second.lower():  # a CPU whose default is already that one
        second = "Sandybridge" if second != "Sandybridge" else "Nehalem"
    got = openblas_core(second)
    if got.lower() != second.lower():
        raise SystemExit(f"OPENBLAS_CORETYPE={second} gave {got!r} kernels")
    print(f"OpenBLAS: default {default}, second {second}; numba: {numba_level}", file=sys.stderr)
    print(f"OPENBLAS_CORETYPE={second} {numba_env}")


if __name__ == "__main__":
    main()
