"""The guards that keep CI from hanging or passing by skipping: each runs pytest on a small
test file of its own, in a subprocess with its own timeout.

* pytest-timeout (``timeout`` in pyproject.toml) fails a hanging test and names it;
* conftest.py's watchdog ends the run when a test does not stop at its timeout;
* tests/_datasets.py fails a test that reads ../shared without the ``needs_shared`` mark;
* ``ELMSCALE_EXPECT_SKIPPED=1`` fails a run in which a test was not skipped.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parent

HANGS = """
import time

def test_sleeps_for_a_minute():
    time.sleep(60)
"""

IGNORES_ITS_TIMEOUT = """
import time

def test_carries_on_after_its_timeout():
    for _ in range({seconds}):
        try:
            time.sleep(1)
        except BaseException:  # pytest-timeout's failure, swallowed as a blocked call would
            pass
"""

SHARED = """
import pytest
from _datasets import shared_path

@pytest.mark.needs_shared
def test_marked_and_reads_shared():
    assert shared_path("x").name == "x"

@pytest.mark.needs_shared
def test_marked_but_reads_nothing():
    pass

def test_reads_shared_unmarked():
    shared_path("x")
"""


def _pytest(tmp_path: Path, source: str, *args, env=None, timeout=60):
    """Run pytest on ``source`` in ``tmp_path`` (its own rootdir and ini, with this
    directory's conftest.py as a plugin when asked); returns (result, seconds)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    needs_shared: test\n")
    (tmp_path / "test_guarded.py").write_text(source)
    inherited = {k: v for k, v in os.environ.items() if not k.startswith("ELMSCALE_")}
    env = {
        **inherited,
        **(env or {}),
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, "test_guarded.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return result, time.monotonic() - start


def test_a_hanging_test_fails_within_seconds_and_is_named(tmp_path):
    result, seconds = _pytest(tmp_path, HANGS, "--timeout", "2")
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert seconds < 30, out
    assert "FAILED test_guarded.py::test_sleeps_for_a_minute" in out, out
    assert "Timeout (>2.0s) from pytest-timeout" in out, out


def test_a_test_that_outlives_its_timeout_stops_the_run_named(tmp_path):
    result, seconds = _pytest(
        tmp_path,
        IGNORES_ITS_TIMEOUT.format(seconds=60),
        "-p",
        "conftest",
        "--timeout",
        "2",
        env={"ELMSCALE_TIMEOUT_GRACE": "2"},
    )
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert seconds < 30, out
    assert "test_guarded.py::test_carries_on_after_its_timeout still running 4 s" in out, out
    assert "in test_carries_on_after_its_timeout" in out, out  # its stack


def test_no_watchdog_where_the_timeout_is_turned_off(tmp_path):
    result, _ = _pytest(
        tmp_path,
        IGNORES_ITS_TIMEOUT.format(seconds=4),
        "-p",
        "conftest",
        "--timeout",
        "0",
        "-o",
        "timeout=1",
        env={"ELMSCALE_TIMEOUT_GRACE": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_project_sets_a_timeout_for_every_test(pytestconfig):
    assert float(pytestconfig.getini("timeout")) >= 60


def test_reading_shared_needs_the_mark_and_hidden_shared_means_skipped(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    present, _ = _pytest(
        tmp_path, SHARED, "-p", "conftest", "-rA", env={"ELMSCALE_SHARED": str(shared)}
    )
    out = present.stdout + present.stderr
    assert present.returncode == 1, out
    assert "PASSED test_guarded.py::test_marked_and_reads_shared" in out, out
    assert "FAILED test_guarded.py::test_reads_shared_unmarked" in out, out
    assert "test_guarded.py::test_reads_shared_unmarked reads " in out, out
    assert "is not marked needs_shared" in out, out

    env = {"ELMSCALE_SHARED": str(tmp_path / "absent"), "ELMSCALE_EXPECT_SKIPPED": "1"}
    hidden, _ = _pytest(tmp_path, SHARED, "-p", "conftest", "-m", "needs_shared", env=env)
    out = hidden.stdout + hidden.stderr
    assert hidden.returncode == 1, out
    assert "test_marked_but_reads_nothing: passed (expected: skipped" in out, out
    assert "test_marked_and_reads_shared" not in out.split("ELMSCALE_EXPECT_SKIPPED")[-1], out

    selected, _ = _pytest(tmp_path, SHARED, "-p", "conftest", "-k", "marked_and_reads", env=env)
    out = selected.stdout + selected.stderr
    assert selected.returncode == 0, out
    assert "all 1 tests skipped: shared folder absent" in out, out
