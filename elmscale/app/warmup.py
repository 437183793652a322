"""``elmscale warmup``: compile every numba kernel once, into the compile cache.

For the image of a cluster worker (or a container, a CI cache): run it once where the
image is built, with ``ELMSCALE_CACHE_DIR`` pointing into the image if the package folder
will be read-only there, and each worker process then loads the machine code from the
cache in milliseconds instead of compiling it on its first fit
(``elmscale/core/compile_cache.py`` says where the cache is).

Each step fits (and predicts with) small generated data along one of the library's paths,
so that every signature a fit compiles is compiled: the sparse ELM's kernel solver (float32
and float64 columns, with and without its helper thread, a C path from a kept Gram matrix),
its random-node solver, the ELM's hidden layers (float32 and float64 outputs) and kernels,
and every other registered estimator.  numba caches by the machine it compiles for: build
the cache on the kind of CPU the workers run on.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from elmscale.core import carried_kernels, compile_cache


@dataclass
class StepResult:
    """One step: its name, seconds, and the kernels compiled (names, in order)."""

    name: str
    seconds: float
    compiled: list[str] = field(default_factory=list)


class _CompileRecorder:
    """The numba functions compiled (not loaded from the cache) while it is installed."""

    def __init__(self):
        from numba.core import event

        class _Listener(event.Listener):
            def on_start(inner, ev):  # noqa: N805 - numba's listener protocol
                pass

            def on_end(inner, ev):  # noqa: N805
                dispatcher = ev.data["dispatcher"]
                module = getattr(dispatcher.py_func, "__module__", "") or ""
                if module.startswith("elmscale"):
                    self.names.append(dispatcher.py_func.__name__)

        self._event = event
        self._listener = _Listener()
        self.names: list[str] = []

    def __enter__(self):
        self._event.register("numba:compile", self._listener)
        return self

    def __exit__(self, *exc):
        self._event.unregister("numba:compile", self._listener)


def _data(n_rows=240, n_features=6, n_classes=2, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, (n_rows, n_features)) * scale
    y = (np.arange(n_rows) % n_classes).astype(np.int64)
    X[:, 0] += 0.5 * y  # learnable, so that the solvers take a few real steps
    return X, y


def _core():
    from elmscale.core import jit

    a = np.arange(8.0)
    jit.dot(a, a)
    jit.dot(a.astype(np.float32), a)
    rows = np.arange(3, dtype=np.int64)
    M = np.eye(8)
    jit.weighted_row_sum(M, rows, a[:3], np.empty(0, np.int64), np.empty(8))
    jit.weighted_row_sum(M, rows, a[:3], rows, np.empty(3))
    jit.signed_block(M, rows, a[:3], np.empty((3, 3)))
    jit.shuffle_prefix(rows.copy(), 3, np.ones(1, np.uint64))


def _sparse_kernel():
    from elmscale.features.kernels import Kernel
    from elmscale.models.sparse_elm import SparseELMClassifier
    from elmscale.solvers.sparse_dual import solve_kernel_dual

    X, y = _data()
    SparseELMClassifier(kernel="gaussian").fit(X, y).predict(X)
    t = np.where(y == 1, 1.0, -1.0)
    # the helper thread's loop (a fit takes it from 8,192 rows on two threads); the final
    # check from float32 kernel values (a fit's without a kept Gram matrix: larger data)
    gaussian = Kernel("gaussian", sigma=1.0)
    solve_kernel_dual(X, t, kernel=gaussian, C=1.0, helper=True, check_precision="single")
    solve_kernel_dual(X, t, kernel=gaussian, C=1.0, helper=False)


def _sparse_kernel_float64():
    from elmscale.features.kernels import Kernel
    from elmscale.solvers.sparse_dual import solve_kernel_dual

    # a polynomial kernel on unscaled features: float64 columns (``column_dtype``)
    X, y = _data(scale=10.0)
    t = np.where(y == 1, 1.0, -1.0)
    for helper in (True, False):
        solve_kernel_dual(
            X, t, kernel=Kernel("polynomial", degree=2), C=1.0, helper=helper, max_iter=2000
        )


def _sparse_path():
    from elmscale.models.sparse_elm import SparseELMClassifier

    X, y = _data(n_classes=3)
    for model in SparseELMClassifier(kernel="gaussian").fit_path(X, y, [0.1, 1.0, 10.0]):
        model.predict(X)


def _sparse_random_nodes():
    from elmscale.models.sparse_elm import SparseELMClassifier

    X, y = _data()
    for hidden in ("sigmoid", "gaussian"):
        SparseELMClassifier(hidden=hidden, n_hidden=20).fit(X, y).predict(X)


def _elm():
    from elmscale.models.elm import ELMClassifier

    X, y = _data()
    for precision in ("single", "double"):
        for hidden in ("sigmoid", "gaussian"):
            ELMClassifier(hidden=hidden, n_hidden=30, precision=precision).fit(X, y).predict(X)
    for kernel in ("gaussian", "polynomial"):
        ELMClassifier(kernel=kernel).fit(X, y).predict(X)


def _registered():
    from elmscale import registry

    X, y = _data(n_rows=120)
    y_reg = X[:, 0] + 0.1 * X[:, 1]
    for entry in registry.entries():
        cls = entry.load()
        target = y if entry.capabilities.task == "classifier" else y_reg
        cls().fit(X, target).predict(X)


# (name, what it compiles, function); ``elmscale warmup --only NAME`` runs some of them
STEPS = [
    ("core", "small shared kernels: dot products, Gram rows, shuffles", _core),
    ("sparse-kernel", "the sparse ELM's kernel solver, float32 columns", _sparse_kernel),
    ("sparse-float64", "its float64 columns (large kernel values)", _sparse_kernel_float64),
    ("sparse-path", "a C path from a kept Gram matrix, one-vs-one", _sparse_path),
    ("sparse-hidden", "the sparse ELM's random-node solver", _sparse_random_nodes),
    ("elm", "the ELM's hidden layers (float32, float64) and kernels", _elm),
    ("registered", "every registered estimator, fit and predict", _registered),
]
STEP_NAMES = tuple(name for name, _, _ in STEPS)


def warmup(only=None, report=print) -> list[StepResult]:
    """Run the steps (all, or those named in ``only``); ``report`` gets a line per step."""
    unknown = sorted(set(only or ()) - set(STEP_NAMES))
    if unknown:
        raise ValueError(f"unknown warmup step(s) {unknown}; the steps are {list(STEP_NAMES)}")
    results = []
    for name, what, fn in STEPS:
        if only and name not in only:
            continue
        start = time.perf_counter()
        with _CompileRecorder() as recorder, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tiny data: convergence warnings say nothing
            fn()
        result = StepResult(name, time.perf_counter() - start, recorder.names)
        results.append(result)
        if report is not None:
            done = (
                f"compiled {len(result.compiled)}: {', '.join(sorted(set(result.compiled)))}"
                if result.compiled
                else "all cached"
            )
            report(f"  {name:15s} {result.seconds:7.2f} s  {what}; {done}")
    return results


def main(only=None, quiet=False) -> int:
    """The command: prints where the cache is, a line per step (unless ``quiet``) and a
    total."""
    _, why = compile_cache.choose()
    where = compile_cache.cache_folder()
    print(f"elmscale warmup: numba cache {where} ({why})")
    if carried_kernels.FOLDER.is_dir():  # a wheel's compiled kernels: used, or why not
        from elmscale.core import jit  # noqa: F401 - importing the kernels puts them in place

        print(f"kernels carried by the wheel: {carried_kernels.STATUS['reason']}")
    results = warmup(only, report=None if quiet else print)
    total = sum(r.seconds for r in results)
    compiled = sum(len(r.compiled) for r in results)
    print(
        f"{len(results)} steps in {total:.1f} s: "
        + (f"{compiled} kernels compiled into the cache" if compiled else "everything cached")
    )
    return 0
