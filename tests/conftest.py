"""Test-session settings.  Data helpers: ``_datasets.py`` (../shared), ``_problems.py``.

Two guards for a CI that cannot hang or skip silently:

* A watchdog behind pytest-timeout: pytest-timeout (``timeout`` in pyproject.toml, or
  ``@pytest.mark.timeout``) fails a test that runs too long by a signal, which a test
  blocked outside Python never sees; ``ELMSCALE_TIMEOUT_GRACE`` seconds (default 60)
  later the watchdog prints the test's name and every thread's stack and ends the run.
* ``ELMSCALE_EXPECT_SKIPPED=1`` (the CI's run of ``-m needs_shared`` with the shared
  folder hidden): the run fails unless every test ran was skipped because the shared
  folder is absent.
"""

import faulthandler
import os
import sys
import threading

# scikit-learn's estimator checks include an array-API check that runs only
# when SciPy's array API support is on; it must be set before SciPy loads.
os.environ.setdefault("SCIPY_ARRAY_API", "1")

import _datasets  # noqa: E402
import pytest  # noqa: E402


def two_worker_client():
    """A client of a real two-worker Dask LocalCluster (processes, one thread each): the
    session's, and the cluster of its own that a test killing or limiting workers takes."""
    import contextlib

    import dask
    from distributed import Client, LocalCluster

    @contextlib.contextmanager
    def started():
        # Dask drops a nanny whose worker is not back within lost-worker-timeout (15 s) of
        # its loss, but keeps its spec entry, so that the cluster stays one short: a
        # restart under load, or a second kill of the same worker by the next test, within
        # 15 s did that to CI (issue 49).  The nanny restarts it; _faults.restore_workers
        # brings back any that is dropped all the same.
        with (
            dask.config.set({"distributed.deploy.lost-worker-timeout": "10 minutes"}),
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client

    return started()


@pytest.fixture(scope="session")
def _session_dask_client():
    with two_worker_client() as client:
        yield client


@pytest.fixture
def dask_client(_session_dask_client):
    """A real two-worker Dask LocalCluster (processes, one thread each), once per session;
    each test gets it with both workers up (a test that killed one waits for its return,
    but if the cluster is still short a later test waits here, on the cluster's state,
    instead of failing for the earlier one's fault: issue 49)."""
    from _faults import restore_workers

    restore_workers(_session_dask_client, 2)
    return _session_dask_client


@pytest.fixture(scope="session")
def s3_server():
    """A real S3 endpoint on 127.0.0.1 (moto's server mode, ``_s3.local_s3``): started once
    per session, checked to answer before use, stopped at the end; dummy credentials in the
    environment only while it runs.  ``s3_server.new_bucket()`` gives a test its bucket."""
    from _s3 import local_s3

    with local_s3() as server:
        yield server


@pytest.fixture(scope="session")
def ray_session():
    """A real local Ray with 2 CPUs, once per session, started as elmscale starts one (on
    127.0.0.1 only)."""
    import ray

    from elmscale.distributed.connect import start_local_ray

    start_local_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


# -- the running test (for _datasets' needs_shared check) and the timeout watchdog --------


def _timeout_of(item) -> float:
    """The test's pytest-timeout limit in seconds (0: none), found as pytest-timeout finds
    it: the marker, else --timeout, else PYTEST_TIMEOUT, else the ini file's."""
    marker = item.get_closest_marker("timeout")
    value = None
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
    if value is None:
        value = item.config.getoption("timeout", None)
    if value is None:
        value = os.environ.get("PYTEST_TIMEOUT") or None
    if value is None:
        try:
            value = item.config.getini("timeout")
        except ValueError:  # pytest-timeout not installed
            value = None
    try:
        return float(value or 0)
    except (TypeError, ValueError):
        return 0.0


def _stop_the_run(item, seconds: float):
    try:  # pytest holds fds 1 and 2 while a test runs: give them back, with what it holds
        capture = item.config.pluginmanager.getplugin("capturemanager")
        capture.suspend_global_capture(in_=True)
        out, err = capture.read_global_capture()
        sys.stderr.write(f"{out}{err}")
    except Exception:  # noqa: BLE001 - the run stops anyway
        pass
    sys.stderr.write(
        f"\n{'+' * 30} Timeout {'+' * 30}\n{item.nodeid} still running "
        f"{seconds:g} s after it started (past its pytest-timeout and the "
        "grace period): stacks of every thread, then the run stops\n"
    )
    sys.stderr.flush()
    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    sys.stderr.flush()
    os._exit(1)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _datasets.current_test = item
    timeout = _timeout_of(item)
    watchdog = None
    if timeout > 0:
        limit = timeout + float(os.environ.get("ELMSCALE_TIMEOUT_GRACE", "60"))
        watchdog = threading.Timer(limit, _stop_the_run, (item, limit))
        watchdog.daemon = True
        watchdog.start()
    try:
        return (yield)
    finally:
        if watchdog is not None:
            watchdog.cancel()
        _datasets.current_test = None


# -- ELMSCALE_EXPECT_SKIPPED: every test skipped for want of the shared folder --------------

_outcomes: dict = {}


def _expect_skipped() -> bool:
    return os.environ.get("ELMSCALE_EXPECT_SKIPPED", "") not in ("", "0")


def pytest_runtest_logreport(report):
    if not _expect_skipped():
        return
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
        ok = _datasets.SKIP_REASON in str(reason)
        _outcomes[report.nodeid] = "skipped" if ok else f"skipped for another reason: {reason}"
    elif report.failed:
        _outcomes[report.nodeid] = f"failed in {report.when}"
    elif report.when == "call":
        _outcomes[report.nodeid] = "passed"


def pytest_sessionfinish(session, exitstatus):
    if not _expect_skipped():
        return
    wrong = {k: v for k, v in _outcomes.items() if v != "skipped"}
    if wrong or not _outcomes:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    session.config.stash[_summary_key] = (wrong, len(_outcomes))


_summary_key = pytest.StashKey[tuple]()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _summary_key not in config.stash:
        return
    wrong, n = config.stash[_summary_key]
    write = terminalreporter.write_line
    terminalreporter.section("ELMSCALE_EXPECT_SKIPPED")
    if not n:
        write("no test ran: expected every test to be skipped for want of the shared folder")
    for nodeid, outcome in wrong.items():
        write(f"{nodeid}: {outcome} (expected: skipped, {_datasets.SKIP_REASON})")
    if n and not wrong:
        write(f"all {n} tests skipped: {_datasets.SKIP_REASON}")
