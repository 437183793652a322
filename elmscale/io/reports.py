"""Cross-validation reports: ``cv_results_`` as CSV / JSON, and pictures of the mean score.

Files are written to a temporary name in the same directory and renamed, so an
interrupted write leaves nothing.  :func:`plot_cv_results` picks the picture from the
grid's shape; :func:`plot_cv_heatmap` draws a two-parameter grid as a heatmap.  Both draw
with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import json
import numbers
from pathlib import Path

import numpy as np
import pandas as pd

from elmscale.core.files import atomic_write

__all__ = ["cv_results_frame", "plot_cv_heatmap", "plot_cv_results", "write_cv_results"]

#: A second parameter with more values than this is drawn as a heatmap, not as lines.
MAX_LINES = 6


def _plain(value):
    if isinstance(value, np.generic):
        return value.item()
    return value


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _order(value):
    """Sort key for grid values of mixed kinds: numbers by value, then the rest as text."""
    return (0, float(value), "") if _is_number(value) else (1, 0.0, repr(value))


def _label(value) -> str:
    return f"{value:g}" if _is_number(value) else str(value)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> Path:
    plt = _pyplot()
    path = Path(path)
    try:
        fig.tight_layout()
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    finally:
        plt.close(fig)
    return path


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
    (log-spaced axes labelled with the grid values; other parameters at their best; the
    best cell marked with a star)."""
    plt = _pyplot()
    xs = sorted({_plain(v) for v in cv_results[f"param_{x}"]}, key=_order)
    ys = sorted({_plain(v) for v in cv_results[f"param_{y}"]}, key=_order)
    grid = np.full((len(ys), len(xs)), np.nan)
    for xv, yv, score in zip(
        cv_results[f"param_{x}"], cv_results[f"param_{y}"], cv_results["mean_test_score"]
    ):
        i, j = ys.index(_plain(yv)), xs.index(_plain(xv))
        grid[i, j] = np.nanmax([grid[i, j], score])
    fig, ax = plt.subplots(figsize=(1.0 + 0.45 * len(xs), 1.0 + 0.4 * len(ys)))
    image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis")
    if not np.all(np.isnan(grid)):
        i, j = np.unravel_index(np.nanargmax(grid), grid.shape)
        ax.plot(j, i, marker="*", color="red", markersize=12, markeredgecolor="white")
    ax.set_xticks(range(len(xs)), [_label(v) for v in xs], rotation=90)
    ax.set_yticks(range(len(ys)), [_label(v) for v in ys])
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title or f"mean CV score over ({x}, {y})")
    fig.colorbar(image, ax=ax)
    return _save(fig, path)


def _best_index(cv_results: dict) -> int:
    """The best candidate: lowest ``rank_test_score`` (the first of ties), else the highest
    mean score."""
    if "rank_test_score" in cv_results:
        return int(np.argmin(np.asarray(cv_results["rank_test_score"])))
    return int(np.nanargmax(np.asarray(cv_results["mean_test_score"], dtype=np.float64)))


def _subset(cv_results: dict, rows) -> dict:
    """``cv_results`` restricted to the candidates ``rows`` (in that order)."""
    out = {}
    for key, values in cv_results.items():
        if key == "params":
            out[key] = [values[r] for r in rows]
        else:
            out[key] = np.asarray(values, dtype=object if key.startswith("param_") else None)[rows]
    return out


def plot_cv_results(cv_results: dict, path, *, title: str | None = None) -> Path:
    """The mean CV score of a grid search as a PNG, drawn to suit the grid's shape.

    * C the only varying parameter: mean score against C (log axis) with a band of one
      standard deviation (``std_test_score``) either side.
    * C and one other parameter: a line per value of the other, or the heatmap
      (:func:`plot_cv_heatmap`) when it has more than ``MAX_LINES`` numeric values (the
      paper's 14 x 14 C x sigma grid).
    * More parameters: the same, for the parameter with the most values, with the rest
      fixed at the best candidate's values (the title says which).

    The best candidate is marked with a star.  When C does not vary, the first varying
    parameter takes its place on the x axis.
    """
    names = sorted(k[len("param_") :] for k in cv_results if k.startswith("param_"))
    values = {
        name: sorted({_plain(v) for v in cv_results[f"param_{name}"]}, key=_order) for name in names
    }
    if not names:
        raise ValueError("cv_results has no param_<name> columns to plot against")
    varying = [name for name in names if len(values[name]) > 1]
    if "C" in varying or (not varying and "C" in names):
        x = "C"
    else:
        x = varying[0] if varying else names[0]
    others = [name for name in varying if name != x]
    best = _best_index(cv_results)
    note = ""
    if len(others) > 1:
        # lines for the parameter with the most values; the rest at the best's values
        line_param = max(others, key=lambda name: (len(values[name]), -others.index(name)))
        fixed = {
            name: _plain(cv_results[f"param_{name}"][best]) for name in others if name != line_param
        }
        rows = [
            r
            for r in range(len(cv_results["mean_test_score"]))
            if all(_plain(cv_results[f"param_{n}"][r]) == v for n, v in fixed.items())
        ]
        cv_results = _subset(cv_results, rows)
        best = rows.index(best)
        note = ", ".join(f"{n}={_label(v)}" for n, v in fixed.items()) + " fixed at the best"
        others = [line_param]
        values[line_param] = sorted(
            {_plain(v) for v in cv_results[f"param_{line_param}"]}, key=_order
        )
    z = others[0] if others else None
    heatmap = (
        z is not None
        and len(values[z]) > MAX_LINES
        and all(_is_number(v) for v in values[x] + values[z])
    )
    if title:
        heading = title
    elif heatmap:
        heading = f"mean CV score over ({x}, {z})"
    else:
        heading = f"mean CV score against {x}" + (f", a line per {z}" if z else "")
    if note:
        heading = f"{heading}\n({note})"
    if heatmap:
        return plot_cv_heatmap(cv_results, path, x=x, y=z, title=heading)
    return _plot_lines(cv_results, path, x=x, z=z, best=best, title=heading)


def _plot_lines(cv_results: dict, path, *, x: str, z: str | None, best: int, title: str):
    plt = _pyplot()
    xs_all = [_plain(v) for v in cv_results[f"param_{x}"]]
    numeric = all(_is_number(v) for v in xs_all)
    log = numeric and all(v > 0 for v in xs_all)
    categories = sorted(set(xs_all), key=_order)

    def position(v):
        return float(v) if numeric else float(categories.index(v))

    mean = np.asarray(cv_results["mean_test_score"], dtype=np.float64)
    std = np.asarray(cv_results.get("std_test_score", np.zeros_like(mean)), dtype=np.float64)
    zs_all = [_plain(v) for v in cv_results[f"param_{z}"]] if z else [None] * len(mean)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for zv in sorted(set(zs_all), key=_order):
        rows = sorted(
            (r for r in range(len(mean)) if zs_all[r] == zv), key=lambda r: _order(xs_all[r])
        )
        px = np.array([position(xs_all[r]) for r in rows])
        pm, ps = mean[rows], std[rows]
        label = f"{z}={_label(zv)}" if z else "mean CV score"
        (line,) = ax.plot(px, pm, "o-", markersize=4, label=label)
        ax.fill_between(
            px,
            pm - ps,
            pm + ps,
            color=line.get_color(),
            alpha=0.15 if z else 0.25,
            linewidth=0,
            label=None if z else "± 1 std over folds",
        )
    best_label = ", ".join(
        f"{k}={_label(_plain(v))}"
        for k, v in sorted(
            (k[len("param_") :], cv_results[k][best]) for k in cv_results if k.startswith("param_")
        )
    )
    ax.plot(
        position(xs_all[best]),
        mean[best],
        marker="*",
        color="red",
        markersize=14,
        linestyle="none",
        markeredgecolor="black",
        zorder=5,
        label=f"best: {best_label} ({mean[best]:.4g})",
    )
    if log:
        ax.set_xscale("log")
    if not numeric:
        ax.set_xticks(range(len(categories)), [_label(v) for v in categories])
    ax.set_xlabel(x)
    ax.set_ylabel("mean CV score")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return _save(fig, path)
