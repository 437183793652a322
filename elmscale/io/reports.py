"""Cross-validation reports: ``cv_results_`` as CSV / JSON, and a heatmap of mean accuracy.

Files are written to a temporary name in the same directory and renamed, so an
interrupted write leaves nothing.  The heatmap needs matplotlib (``pip install
"elmscale[plot]"``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from elmscale.core.files import atomic_write

__all__ = ["cv_results_frame", "plot_cv_heatmap", "write_cv_results"]


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    return value


def cv_results_frame(cv_results: dict) -> pd.DataFrame:
    """One row per candidate; ``params`` as JSON text."""
    columns = {}
    for key, values in cv_results.items():
        if key == "params":
            columns[key] = [
                json.dumps({k: _plain(v) for k, v in p.items()}, sort_keys=True) for p in values
            ]
        else:
            columns[key] = [_plain(v) for v in values]
    return pd.DataFrame(columns)


def write_cv_results(cv_results: dict, path) -> Path:
    """Write ``cv_results`` to ``path``: CSV for ``.csv``, JSON (a list of rows) for ``.json``."""
    path = Path(path)
    frame = cv_results_frame(cv_results)
    if path.suffix == ".csv":
        return atomic_write(path, lambda tmp: frame.to_csv(tmp, index=False))
    if path.suffix == ".json":
        rows = frame.assign(params=[json.loads(p) for p in frame["params"]]).to_dict("records")
        return atomic_write(path, lambda tmp: tmp.write_text(json.dumps(rows, indent=1)))
    raise ValueError(f"{path}: expected a .csv or .json file name")


def plot_cv_heatmap(
    cv_results: dict, path, *, x: str = "C", y: str = "sigma", title: str | None = None
) -> Path:
    """Mean CV score over the (``x``, ``y``) grid as a PNG, like the paper's Figs. 6-7
    (log-spaced axes labelled with the grid values; other parameters at their best)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ImportError('the heatmap needs matplotlib: pip install "elmscale[plot]"') from exc
    xs = sorted({_plain(v) for v in cv_results[f"param_{x}"]})
    ys = sorted({_plain(v) for v in cv_results[f"param_{y}"]})
    grid = np.full((len(ys), len(xs)), np.nan)
    for xv, yv, score in zip(
        cv_results[f"param_{x}"], cv_results[f"param_{y}"], cv_results["mean_test_score"]
    ):
        i, j = ys.index(_plain(yv)), xs.index(_plain(xv))
        grid[i, j] = np.nanmax([grid[i, j], score])
    fig, ax = plt.subplots(figsize=(1.0 + 0.45 * len(xs), 1.0 + 0.4 * len(ys)))
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    ax.set_xticks(range(len(xs)), [f"{v:g}" for v in xs], rotation=90)
    ax.set_yticks(range(len(ys)), [f"{v:g}" for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"mean CV score over ({x}, {y})")
    fig.colorbar(image, ax=ax)
    fig.tight_layout()
    path = Path(path)
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    plt.close(fig)
    return path
