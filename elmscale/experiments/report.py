"""From a run's raw tables to the report: summaries, comparisons with the paper,
statistics, figures, ``report.md`` and a self-contained ``report.html``.

Every file is written to a temporary name and renamed (``atomic_write``).
"""

from __future__ import annotations

import base64
import html
import json
import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from elmscale.core.files import atomic_write
from elmscale.core.threads import available_cores
from elmscale.experiments import stats
from elmscale.experiments.engine import RunTables, trial_keys
from elmscale.experiments.protocol import Protocol
from elmscale.io.reports import plot_cv_heatmap

__all__ = ["Report", "build_report", "summarise"]

#: a mark where ours is more than this many points below the paper
BELOW_PAPER = 2.0


def summarise(tables: RunTables) -> pd.DataFrame:
    """Mean and standard deviation over trials per (table, data set, mapping, method): of
    the accuracies, of every ``test_<metric>`` column; the mean times, support vectors
    and kept features (``n_features_selected``) and the input width."""
    results = tables.results
    if results.empty:
        return pd.DataFrame()
    keys = results.assign(key=trial_keys(results))
    joined = keys.merge(tables.timings, on="key", how="left")
    group = joined.groupby(["table", "dataset", "mapping", "method"], sort=False)
    spread = {"train_acc": "train_accuracy", "test_acc": "test_accuracy"}
    metric_columns = [
        c
        for c in joined.columns
        if c.startswith("test_") and c not in ("test_accuracy", "test_time_s")
    ]
    spread.update({c: c for c in metric_columns})
    columns: dict = {"trials": ("trial", "size")}
    for name, column in spread.items():
        if column in joined:
            columns[name] = (column, "mean")
            columns[f"{name}_std"] = (column, "std")
    for name in ("train_time_s", "test_time_s", "cv_time_s", "n_support", "n_features_selected"):
        if name in joined:
            columns[name] = (name, "mean")
    columns["n_train"] = ("n_train", "first")
    if "n_features" in joined:
        columns["n_features"] = ("n_features", "first")
    summary = group.agg(**columns).reset_index()
    for std in [c for c in summary.columns if c.endswith("_std")]:
        # one trial has no spread (0); a metric the row does not have stays empty
        summary[std] = summary[std].fillna(0.0).where(summary[std[: -len("_std")]].notna())
    return summary


def compare(summary: pd.DataFrame, paper: pd.DataFrame | None) -> pd.DataFrame:
    """``summary`` with the paper's values beside ours and the differences."""
    if paper is None or paper.empty or summary.empty:
        return summary.assign(paper_test_acc=np.nan, diff=np.nan, below=False)
    merged = summary.merge(
        paper[
            [
                "dataset",
                "method",
                "mapping",
                "train_acc",
                "test_acc",
                "n_support",
                "train_time_s",
                "test_time_s",
            ]
        ].rename(
            columns={
                "train_acc": "paper_train_acc",
                "test_acc": "paper_test_acc",
                "n_support": "paper_n_support",
                "train_time_s": "paper_train_time_s",
                "test_time_s": "paper_test_time_s",
            }
        ),
        on=["dataset", "method", "mapping"],
        how="left",
    )
    merged["diff"] = merged["test_acc"] - merged["paper_test_acc"]
    merged["below"] = merged["diff"] < -BELOW_PAPER
    return merged


@dataclass
class Report:
    """What a run produced: the comparison frame, statistics, claims and figures."""

    comparison: pd.DataFrame
    statistics: list[dict] = field(default_factory=list)
    claims: pd.DataFrame | None = None
    figures: list[Path] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)
    piece_time_s: float = 0.0
    n_pieces: int = 0
    #: (piece key, reason) of the pieces left out: no result, not a number made up
    left_out: list[tuple[str, str]] = field(default_factory=list)


def table_statistics(summary: pd.DataFrame, out_dir: Path, protocol: Protocol | None = None):
    """Per table: Friedman / Iman-Davenport, Nemenyi's CD with its diagram and Holm against
    the table's control on its primary score (data sets as blocks; the sparse-ELM paper's
    tables: mean test accuracy against sparse_elm); Wilcoxon for two methods.  A table
    with fewer than two complete data sets is skipped, saying so."""
    specs = {t.name: t for t in protocol.tables} if protocol is not None else {}
    out = []
    for table, part in summary.groupby("table", sort=False):
        spec = specs.get(table)
        primary = spec.primary if spec else "test_acc"
        higher = not spec.lower_is_better if spec else True
        control = spec.control if spec else "sparse_elm"
        scores = part.pivot(index="dataset", columns="method", values=primary).dropna()
        entry: dict = {
            "table": table,
            "score": primary,
            "n_datasets": len(scores),
            "methods": list(scores),
        }
        if len(scores) < 2 or scores.shape[1] < 2:
            entry["skipped"] = "fewer than two data sets with every method"
            out.append(entry)
            continue
        ranks = stats.average_ranks(scores, higher)
        entry["average_ranks"] = {k: round(float(v), 4) for k, v in ranks.items()}
        if scores.shape[1] == 2:
            a, b = scores.columns
            statistic, p = stats.wilcoxon_signed_rank(scores[a], scores[b])
            entry["wilcoxon"] = {"a": a, "b": b, "statistic": float(statistic), "p": float(p)}
            out.append(entry)
            continue
        friedman = stats.friedman(scores, higher)
        entry["friedman_chi2"] = float(friedman.chi2)
        entry["friedman_p"] = float(friedman.chi2_pvalue)
        entry["iman_davenport_F"] = float(friedman.iman_davenport)
        entry["iman_davenport_p"] = float(friedman.f_pvalue)
        entry["nemenyi_cd"] = float(stats.nemenyi_critical_difference(scores.shape[1], len(scores)))
        if control in scores.columns:
            holm = stats.holm_against_control(scores, control, higher_is_better=higher)
            entry["control"] = control
            entry["holm"] = json.loads(holm.reset_index().to_json(orient="records"))
        pvalues = stats.nemenyi_pvalues(scores)
        path = out_dir / f"cd_{table}.png"
        stats.cd_diagram(
            friedman.average_ranks,
            pvalues,
            path,
            title=f"Table {table}: average ranks ({primary})",
            cd=entry["nemenyi_cd"],
        )
        entry["cd_diagram"] = path.name
        out.append(entry)
    return out


def curve_figures(curves: pd.DataFrame, protocol: Protocol, out_dir: Path) -> list[Path]:
    """Figs. 2-5: training (dashed) and test (solid) accuracy against L, a line per C."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    if curves.empty:
        return paths
    for figure in protocol.curves:
        part = curves[curves["figure"] == figure.name]
        datasets = [d for d in figure.datasets if d in set(part["dataset"])]
        if not datasets:
            continue
        fig, axes = plt.subplots(1, len(datasets), figsize=(5 * len(datasets), 3.6), squeeze=False)
        for ax, dataset in zip(axes[0], datasets):
            mean = (
                part[part["dataset"] == dataset]
                .groupby(["C", "n_hidden"])[["train_accuracy", "test_accuracy"]]
                .mean()
                .reset_index()
            )
            for C, line in mean.groupby("C"):
                shown = ax.plot(
                    line["n_hidden"], line["test_accuracy"], "o-", label=f"C={C:g} test"
                )
                ax.plot(
                    line["n_hidden"],
                    line["train_accuracy"],
                    "--",
                    color=shown[0].get_color(),
                    label=f"C={C:g} train",
                )
            ax.set_xscale("log")
            ax.set_xlabel("hidden nodes L")
            ax.set_ylabel("accuracy (%)")
            ax.set_title(dataset)
            ax.legend(fontsize=7)
        fig.suptitle(figure.title, fontsize=10)
        fig.tight_layout()
        path = out_dir / f"{figure.name}.png"
        atomic_write(path, lambda tmp, f=fig: f.savefig(tmp, format="png", dpi=100))
        plt.close(fig)
        paths.append(path)
    return paths


def grid_figures(grids: pd.DataFrame, protocol: Protocol, out_dir: Path) -> list[Path]:
    """Figs. 6-7: mean test accuracy over the C x parameter grid, as a heatmap."""
    paths = []
    if grids.empty:
        return paths
    for figure in protocol.grids:
        part = grids[grids["figure"] == figure.name]
        if part.empty:
            continue
        mean = part.groupby(["value", "C"])["test_accuracy"].mean().reset_index()
        grid = {
            "param_C": mean["C"].tolist(),
            f"param_{figure.param}": mean["value"].tolist(),
            "mean_test_score": mean["test_accuracy"].tolist(),
        }
        path = out_dir / f"{figure.name}.png"
        plot_cv_heatmap(
            grid,
            path,
            x="C",
            y=figure.param,
            title=f"{figure.title} ({figure.dataset}, test accuracy %)",
        )
        paths.append(path)
    return paths


# -- rendering -------------------------------------------------------------------------


def _fmt(value, digits=2) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating)):
        # below 1 (RMSE and R2 of targets in [0, 1], p-values) three significant digits
        if abs(value) >= 1000 or (0 < abs(value) < 1):
            return f"{value:.3g}"
        return f"{value:.{digits}f}"
    return str(value)


def _markdown(frame: pd.DataFrame) -> str:
    head = "| " + " | ".join(frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(_fmt(v) for v in row) + " |" for row in frame.itertuples(False)]
    return "\n".join([head, rule, *body])


def _html_table(frame: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_METRIC_LABELS = {
    "balanced_accuracy": "balanced acc %",
    "precision_macro": "macro precision %",
    "f1_macro": "macro F1 %",
    "rmse": "RMSE",
    "r2": "R2",
}


def accuracy_table(comparison: pd.DataFrame, table: str, features: bool = False) -> pd.DataFrame:
    """One table's rows: accuracies (and the paper's), the evaluation's metrics with their
    standard deviations, times; with ``features`` the input features and the mean count
    each method kept (:attr:`~elmscale.experiments.protocol.Table.feature_counts`).
    Columns empty for every row of the table are left out."""
    part = comparison[comparison["table"] == table]
    columns = {
        "dataset": "data set",
        "method": "method",
        "trials": "trials",
        "train_acc": "train %",
        "test_acc": "test %",
        "test_acc_std": "test std",
    }
    for metric, label in _METRIC_LABELS.items():
        columns[f"test_{metric}"] = label
        columns[f"test_{metric}_std"] = f"{label} std"
    if features:
        columns.update({"n_features": "features", "n_features_selected": "kept (mean)"})
    columns.update(
        {
            "paper_test_acc": "paper test %",
            "diff": "diff",
            "train_time_s": "train s",
            "paper_train_time_s": "paper train s",
            "test_time_s": "test s",
            "paper_test_time_s": "paper test s",
        }
    )
    present = [c for c in columns if c in part and part[c].notna().any()]
    shown = part[present].rename(columns=columns)
    # where the paper's own SVM figure is not reached either on a set, or no method of the
    # table reaches the paper's there, the protocol (the split, the file, the nodes)
    # differs there rather than the method
    svm_below = set(
        comparison.loc[(comparison["method"] == "SVM") & comparison["below"], "dataset"]
    )
    all_below = set(part.groupby("dataset")["below"].all().loc[lambda b: b].index)
    marks = []
    for d, b in zip(part["dataset"], part["below"]):
        if not b:
            marks.append("")
        elif d in svm_below:
            marks.append("▼ >2 below, SVM too: protocol differs")
        elif d in all_below:
            marks.append("▼ >2 below, every method: protocol differs")
        else:
            marks.append("▼ >2 below")
    if any(marks):
        where = shown.columns.get_loc("diff") + 1 if "diff" in shown else len(shown.columns)
        shown.insert(where, "mark", marks)
    return shown


def support_table(comparison: pd.DataFrame) -> pd.DataFrame:
    """Table VIII: support vectors, ours against the paper's."""
    part = comparison[["dataset", "mapping", "method", "n_train", "n_support"]].copy()
    if "paper_n_support" in comparison:
        part["paper n_support"] = comparison["paper_n_support"]
    return part.rename(columns={"n_support": "n_support (mean)"})


def environment() -> dict:
    import numba
    import scipy
    import sklearn

    from elmscale import __version__

    return {
        "elmscale": __version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "scikit-learn": sklearn.__version__,
        "numba": numba.__version__,
        "machine": f"{platform.machine()}, {available_cores()} cores available",
        "system": platform.platform(),
    }


def build_report(
    protocol: Protocol,
    tables: RunTables,
    summary: pd.DataFrame,
    out_dir: Path,
    *,
    paper: pd.DataFrame | None,
    claims: pd.DataFrame | None,
    command: str,
    wall_time_s: float,
    skipped: list[str],
    piece_time_s: float = 0.0,
    n_pieces: int = 0,
    left_out: list[tuple[str, str]] | None = None,
) -> Report:
    """Write figures, ``summary.csv``, ``report.md`` and ``report.html`` (``summary`` is
    :func:`summarise` of ``tables``; ``left_out``: (piece key, reason) of the pieces that
    gave no result, listed)."""
    out_dir = Path(out_dir)
    comparison = compare(summary, paper)
    report = Report(
        comparison, piece_time_s=piece_time_s, n_pieces=n_pieces, left_out=list(left_out or [])
    )
    if not summary.empty:
        report.files.append(
            atomic_write(out_dir / "summary.csv", lambda tmp: comparison.to_csv(tmp, index=False))
        )
        report.statistics = table_statistics(summary, out_dir, protocol)
    report.claims = claims
    report.figures = curve_figures(tables.curves, protocol, out_dir) + grid_figures(
        tables.grids, protocol, out_dir
    )
    md, page = _render(protocol, report, command, wall_time_s, skipped, out_dir)
    report.files.append(atomic_write(out_dir / "report.md", lambda tmp: tmp.write_text(md)))
    report.files.append(atomic_write(out_dir / "report.html", lambda tmp: tmp.write_text(page)))
    return report


def statistics_tables(entries: list[dict]) -> list[tuple[str, pd.DataFrame]]:
    """:func:`table_statistics`' entries as tables: the tests per table, the average
    ranks (method by table) and Holm's comparisons against the control."""
    tests, ranks, holm = [], {}, []
    for entry in entries:
        row = {"table": entry["table"], "score": entry["score"], "data sets": entry["n_datasets"]}
        if "skipped" in entry:
            row["test"] = f"none: {entry['skipped']}"
        elif "wilcoxon" in entry:
            w = entry["wilcoxon"]
            row.update(test=f"Wilcoxon {w['a']} vs {w['b']}", statistic=w["statistic"])
            row["p"] = w["p"]
        else:
            row.update(
                test="Friedman",
                statistic=entry["friedman_chi2"],
                p=entry["friedman_p"],
                **{
                    "Iman-Davenport F": entry["iman_davenport_F"],
                    "F p": entry["iman_davenport_p"],
                    "Nemenyi CD": entry["nemenyi_cd"],
                },
            )
        tests.append(row)
        if "average_ranks" in entry:
            ranks[f"table {entry['table']}"] = entry["average_ranks"]
        for h in entry.get("holm", []):
            holm.append({"table": entry["table"], "control": entry["control"], **h})
    out = [("Tests", pd.DataFrame(tests))]
    if ranks:
        frame = pd.DataFrame(ranks).rename_axis("method").reset_index()
        out.append(("Average ranks (1 = best)", frame))
    if holm:
        out.append(("Holm's step-down against the control", pd.DataFrame(holm)))
    return out


def _time_line(wall_time_s: float, piece_time_s: float, n_pieces: int) -> str:
    return (
        f"Wall time of this invocation: {wall_time_s:.1f} s; the {n_pieces} pieces' own "
        f"times sum to {piece_time_s:.1f} s (one thread each; a resumed run's earlier "
        "pieces included)"
    )


def _render(protocol, report, command, wall_time_s, skipped, out_dir):
    time_line = _time_line(wall_time_s, report.piece_time_s, report.n_pieces)
    md = [
        f"# {protocol.title}",
        "",
        f"Command: `{command}`",
        "",
        time_line,
        "",
    ]
    page = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(protocol.title)}</title>",
        "<style>body{font-family:sans-serif;max-width:1200px;margin:auto}"
        "table{border-collapse:collapse;font-size:13px;margin:8px 0}"
        "td,th{border:1px solid #bbb;padding:2px 6px;text-align:right}"
        "img{max-width:100%}</style></head><body>",
        f"<h1>{html.escape(protocol.title)}</h1>",
        f"<p>Command: <code>{html.escape(command)}</code><br>{html.escape(time_line)}</p>",
    ]
    env = environment()
    md += ["## Environment", ""] + [f"- {k}: {v}" for k, v in env.items()] + [""]
    page += (
        ["<h2>Environment</h2><ul>"]
        + [f"<li>{html.escape(k)}: {html.escape(str(v))}</li>" for k, v in env.items()]
        + ["</ul>"]
    )
    notes = list(protocol.notes) + [f"skipped: {s}" for s in skipped]
    notes += [f"{d.name}: {d.note}" for d in protocol.datasets if d.note]
    md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    page += ["<h2>Notes</h2><ul>"] + [f"<li>{html.escape(n)}</li>" for n in notes] + ["</ul>"]
    if report.left_out:
        heading = f"Pieces left out ({len(report.left_out)}): no result, not counted"
        frame = pd.DataFrame(
            [{"piece": key, "left out": reason} for key, reason in sorted(report.left_out)]
        )
        md += [f"## {heading}", "", _markdown(frame), ""]
        page += [f"<h2>{html.escape(heading)}</h2>", _html_table(frame)]

    comparison = report.comparison
    for table in protocol.tables:
        if comparison.empty or table.name not in set(comparison["table"]):
            continue
        shown = accuracy_table(comparison, table.name, features=table.feature_counts)
        heading = f"Table {table.name}: {table.mapping}"
        if table.paper_table:
            heading += f" (ours and the paper's {table.paper_table})"
        md += [f"## {heading}", "", _markdown(shown), ""]
        page += [f"<h2>{html.escape(heading)}</h2>", _html_table(shown)]
    if protocol.support_table and not comparison.empty:
        support = support_table(comparison)
        heading = f"{protocol.support_table}: support vectors"
        md += [f"## {heading}", "", _markdown(support), ""]
        page += [f"<h2>{html.escape(heading)}</h2>", _html_table(support)]
    if report.claims is not None and not report.claims.empty:
        md += ["## The paper's claims", "", _markdown(report.claims), ""]
        page += ["<h2>The paper's claims</h2>", _html_table(report.claims)]
    if report.statistics:
        heading = "Statistics (each table's score, data sets as blocks)"
        md += [f"## {heading}", ""]
        page += [f"<h2>{html.escape(heading)}</h2>"]
        for title, frame in statistics_tables(report.statistics):
            md += [f"{title}:", "", _markdown(frame), ""]
            page += [f"<p>{html.escape(title)}:</p>", _html_table(frame)]
        for entry in report.statistics:
            if "cd_diagram" in entry:
                md += [f"![CD diagram, table {entry['table']}]({entry['cd_diagram']})", ""]
                page += [_img(out_dir / entry["cd_diagram"])]
    if report.figures:
        md += ["## Figures", ""] + [f"![{p.stem}]({p.name})" for p in report.figures] + [""]
        page += ["<h2>Figures</h2>"] + [_img(p) for p in report.figures]
    page += ["</body></html>"]
    return "\n".join(md) + "\n", "\n".join(page) + "\n"


def _img(path: Path) -> str:
    data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
    return f"<p><img alt='{html.escape(path.stem)}' src='data:image/png;base64,{data}'></p>"
