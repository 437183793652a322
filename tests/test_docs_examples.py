"""The documentation's worked examples (``docs/examples/*.py``, included verbatim in the
user-guide pages) run as a reader would run them and draw their figures.

Each script runs in a subprocess from an empty folder with the output folder as its
argument; it must exit 0 and write ``<name>.png`` there, a PNG that matplotlib reads back.
Every script has its committed figure ``docs/figures/<name>.png`` (what the pages show).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "docs" / "examples").glob("*.py"))
#: words each script prints (the figures a reader compares to)
PRINTS = {
    "boosting_ridge_layers": ("BRELM:", "GBRELM:", "GGBRELM:", "test RMSE"),
    "elm_cv_heatmap": ("best {", "CV accuracy"),
    "felm_objective_path": ("every feature: test accuracy", "psi = 0.25"),
    "flsa_svm_two_spirals": ("FLSA-SVM:", "SVC:", "support vectors"),
    "sparse_elm_cd_diagram": ("average ranks", "Nemenyi CD"),
}


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    # one thread each: on these small problems more threads only wait on each other
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = "1"
    env["MPLBACKEND"] = "Agg"
    return env


def test_there_are_examples():
    assert len(EXAMPLES) >= 5, EXAMPLES


@pytest.mark.timeout(600)
@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_and_draws_its_figure(script, tmp_path):
    import matplotlib.image

    out, cwd = tmp_path / "out", tmp_path / "cwd"
    out.mkdir()
    cwd.mkdir()
    done = subprocess.run(
        [sys.executable, str(script), str(out)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    png = out / f"{script.stem}.png"
    assert sorted(p.name for p in out.iterdir()) == [png.name]  # nothing else, no temp files
    assert not list(cwd.iterdir())  # nothing written where it ran
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = matplotlib.image.imread(png)
    height, width = image.shape[:2]
    assert image.ndim == 3 and 200 <= height <= 1200 and 500 <= width <= 1200, image.shape
    assert image.std() > 0.05  # not a blank canvas
    for words in PRINTS.get(script.stem, ()):
        assert words in done.stdout, (words, done.stdout)


@pytest.mark.parametrize("script", EXAMPLES, ids=lambda p: p.stem)
def test_example_has_its_committed_figure_and_follows_the_rules(script):
    figure = ROOT / "docs" / "figures" / f"{script.stem}.png"
    assert figure.is_file(), f"run {script.relative_to(ROOT)} to draw {figure.relative_to(ROOT)}"
    assert 5_000 < figure.stat().st_size < 200_000
    text = script.read_text()
    assert text.startswith('"""'), "a module docstring first"
    assert "argparse" not in text and "../shared" not in text and "shared_data" not in text
    assert f"{script.stem}.png" in text  # it writes the figure named after it
    assert len(text.splitlines()) <= 70
