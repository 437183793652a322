"""Comparing classifiers over several data sets (Demšar 2006, JMLR 7:1-30).

A score table has one row per data set (a block) and one column per method.  The
statistics come from maintained libraries: scipy (ranks, Friedman, the studentized range,
Wilcoxon), scikit-posthocs (Nemenyi p-values, the critical-difference diagram) and
statsmodels (Holm's step-down adjustment).  Only what none of them offers is written here,
and each such place says so.

Functions:

* :func:`average_ranks` - the mean rank of each method (rank 1 = best, ties averaged);
* :func:`friedman` / :func:`friedman_from_ranks` - Friedman's chi2_F and the Iman-Davenport
  F_F, from raw scores or from a published table's average ranks;
* :func:`nemenyi_critical_difference` / :func:`nemenyi_pvalues` - the Nemenyi post-hoc test;
* :func:`holm_against_control` - every method against one control, Holm-adjusted;
* :func:`wilcoxon_signed_rank` - two methods over the data sets;
* :func:`cd_diagram` - a critical-difference diagram as a PNG.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import scikit_posthocs as sp
from scipy import stats
from statsmodels.stats.multitest import multipletests

from elmscale.core.files import atomic_write

__all__ = [
    "FriedmanResult",
    "WilcoxonResult",
    "average_ranks",
    "cd_diagram",
    "friedman",
    "friedman_from_ranks",
    "holm_against_control",
    "nemenyi_critical_difference",
    "nemenyi_pvalues",
    "nemenyi_q_alpha",
    "wilcoxon_signed_rank",
]


@dataclass(frozen=True)
class FriedmanResult:
    """Friedman's test over ``n_datasets`` blocks and ``n_methods`` methods.

    ``chi2`` is Friedman's chi2_F (``n_methods - 1`` degrees of freedom), ``iman_davenport``
    the F_F = (N-1) chi2_F / (N(k-1) - chi2_F) with (k-1, (k-1)(N-1)) degrees of freedom
    (infinite, p-value 0, when every data set ranks the methods the same way).
    """

    n_datasets: int
    n_methods: int
    average_ranks: pd.Series
    chi2: float
    chi2_pvalue: float
    iman_davenport: float
    f_pvalue: float


class WilcoxonResult(NamedTuple):
    """Wilcoxon signed-rank statistic and p-value."""

    statistic: float
    pvalue: float


def _check_counts(n_methods: int, n_datasets: int) -> None:
    if n_methods < 2:
        raise ValueError(f"need at least 2 methods to compare, got {n_methods}")
    if n_datasets < 2:
        raise ValueError(f"need at least 2 data sets, got {n_datasets}")


def _check_scores(scores) -> pd.DataFrame:
    """``scores`` as a float DataFrame (rows: data sets, columns: methods), or ValueError."""
    if not isinstance(scores, pd.DataFrame):
        scores = pd.DataFrame(scores)
    n_datasets, n_methods = scores.shape
    _check_counts(n_methods, n_datasets)
    if scores.columns.has_duplicates:
        dup = sorted({str(c) for c in scores.columns[scores.columns.duplicated()]})
        raise ValueError(f"duplicate method names in the score columns: {dup}")
    try:
        values = scores.astype(float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scores must be numeric: {exc}") from exc
    if values.isna().to_numpy().any():
        bad = [str(c) for c in values.columns[values.isna().any()]]
        raise ValueError(f"NaN scores for method(s) {bad}: drop or fill those data sets first")
    return values


def _rank_table(scores: pd.DataFrame, higher_is_better: bool) -> pd.DataFrame:
    """Per-row ranks (1 = best, ties get the average rank) of a checked score table."""
    oriented = -scores.to_numpy() if higher_is_better else scores.to_numpy()
    ranks = stats.rankdata(oriented, axis=1, method="average")
    return pd.DataFrame(ranks, index=scores.index, columns=scores.columns)


def average_ranks(scores: pd.DataFrame, higher_is_better: bool = True) -> pd.Series:
    """Mean over data sets (rows) of each method's (column's) rank; rank 1 is the best.

    Ties within a row get the average of the ranks they span (``scipy.stats.rankdata``).
    ``higher_is_better`` False for errors, times or a table of ranks itself.
    """
    ranks = _rank_table(_check_scores(scores), higher_is_better)
    return ranks.mean(axis=0).rename("average_rank")


def _iman_davenport(chi2: float, n_datasets: int, n_methods: int) -> tuple[float, float]:
    # Iman and Davenport's F from chi2_F (Demšar eq. 2): no library computes it, hence by hand.
    n, k = n_datasets, n_methods
    denominator = n * (k - 1) - chi2
    if denominator <= 0:  # every data set ranks the methods identically
        return math.inf, 0.0
    f_f = (n - 1) * chi2 / denominator
    return float(f_f), float(stats.f.sf(f_f, k - 1, (k - 1) * (n - 1)))


def friedman(scores: pd.DataFrame, higher_is_better: bool = True) -> FriedmanResult:
    """Friedman's test on raw scores (rows: data sets, columns: methods).

    chi2_F from ``scipy.stats.friedmanchisquare`` on the columns (which corrects for ties);
    scipy needs at least 3 methods - for two, use :func:`wilcoxon_signed_rank`.
    """
    values = _check_scores(scores)
    n_datasets, n_methods = values.shape
    if n_methods < 3:
        raise ValueError(
            f"the Friedman test needs at least 3 methods, got {n_methods}: "
            "compare two methods with wilcoxon_signed_rank"
        )
    chi2, chi2_p = stats.friedmanchisquare(*(values[c].to_numpy() for c in values.columns))
    f_f, f_p = _iman_davenport(float(chi2), n_datasets, n_methods)
    return FriedmanResult(
        n_datasets=n_datasets,
        n_methods=n_methods,
        average_ranks=average_ranks(values, higher_is_better),
        chi2=float(chi2),
        chi2_pvalue=float(chi2_p),
        iman_davenport=f_f,
        f_pvalue=f_p,
    )


def friedman_from_ranks(average_ranks: pd.Series, n_datasets: int) -> FriedmanResult:
    """Friedman's test from average ranks alone, for published tables that print only those.

    chi2_F = 12N/(k(k+1)) [sum_j R_j^2 - k(k+1)^2/4] (Demšar eq. 1, no tie correction); on a
    tie-free table it equals :func:`friedman`'s.
    """
    # No library takes average ranks (scipy and scikit-posthocs want raw scores): by hand.
    ranks = pd.Series(average_ranks, dtype=float)
    k, n = len(ranks), int(n_datasets)
    _check_counts(k, n)
    if ranks.isna().any():
        raise ValueError(f"NaN average ranks for {[str(i) for i in ranks.index[ranks.isna()]]}")
    # a published table rounds its ranks: allow half a unit of the 2nd decimal per method
    if abs(ranks.sum() - k * (k + 1) / 2) > 0.005 * k + 1e-9:
        raise ValueError(
            f"average ranks of {k} methods must sum to {k * (k + 1) / 2:g}, got {ranks.sum():g}"
        )
    chi2 = 12.0 * n / (k * (k + 1)) * (float((ranks**2).sum()) - k * (k + 1) ** 2 / 4.0)
    chi2 = max(chi2, 0.0)  # rounding can push an all-equal-ranks table a hair below 0
    f_f, f_p = _iman_davenport(chi2, n, k)
    return FriedmanResult(
        n_datasets=n,
        n_methods=k,
        average_ranks=ranks.rename("average_rank"),
        chi2=chi2,
        chi2_pvalue=float(stats.chi2.sf(chi2, k - 1)),
        iman_davenport=f_f,
        f_pvalue=f_p,
    )


def nemenyi_q_alpha(n_methods: int, alpha: float = 0.05) -> float:
    """Nemenyi's q_alpha: the studentized range quantile (infinite dof) over sqrt(2)."""
    if n_methods < 2:
        raise ValueError(f"need at least 2 methods to compare, got {n_methods}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    return float(stats.studentized_range.ppf(1.0 - alpha, n_methods, np.inf) / math.sqrt(2.0))


def nemenyi_critical_difference(n_methods: int, n_datasets: int, alpha: float = 0.05) -> float:
    """Nemenyi's CD = q_alpha sqrt(k(k+1)/(6N)): two average ranks further apart differ."""
    _check_counts(n_methods, n_datasets)
    k, n = n_methods, n_datasets
    return nemenyi_q_alpha(k, alpha) * math.sqrt(k * (k + 1) / (6.0 * n))


def nemenyi_pvalues(scores: pd.DataFrame) -> pd.DataFrame:
    """Pairwise Nemenyi p-values (methods x methods, symmetric, ones on the diagonal).

    ``scikit_posthocs.posthoc_nemenyi_friedman`` ranks each row ascending (lowest = rank 1);
    the p-values depend only on absolute rank differences, so orientation does not matter.
    """
    values = _check_scores(scores)
    pvalues = sp.posthoc_nemenyi_friedman(values)
    return pvalues.loc[values.columns, values.columns]


def holm_against_control(
    scores: pd.DataFrame, control, alpha: float = 0.05, higher_is_better: bool = True
) -> pd.DataFrame:
    """Every other method against ``control``, with Holm's step-down adjustment.

    One row per other method (index: method), sorted by unadjusted p-value: ``rank_difference``
    R_i - R_c (positive: worse than the control), ``z`` = that over sqrt(k(k+1)/(6N)), the
    two-sided normal ``pvalue``, ``pvalue_holm`` and ``reject`` from statsmodels'
    ``multipletests(method="holm")`` at ``alpha``.
    """
    values = _check_scores(scores)
    if control not in values.columns:
        raise ValueError(f"unknown control {control!r}; methods are {list(values.columns)}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    n, k = values.shape
    ranks = average_ranks(values, higher_is_better)
    others = ranks.drop(index=control)
    difference = others - ranks[control]
    z = difference / math.sqrt(k * (k + 1) / (6.0 * n))
    pvalue = 2.0 * stats.norm.sf(np.abs(z.to_numpy()))
    reject, adjusted, _, _ = multipletests(pvalue, alpha=alpha, method="holm")
    table = pd.DataFrame(
        {
            "rank_difference": difference.to_numpy(),
            "z": z.to_numpy(),
            "pvalue": pvalue,
            "pvalue_holm": adjusted,
            "reject": reject,
        },
        index=pd.Index(others.index, name="method"),
    )
    return table.sort_values("pvalue", kind="stable")


def wilcoxon_signed_rank(a, b, alternative: str = "two-sided") -> WilcoxonResult:
    """Wilcoxon signed-rank test of paired scores ``a`` and ``b`` (one pair per data set).

    Through ``scipy.stats.wilcoxon``, except when every difference is zero: scipy raises or
    warns there depending on its version, and this returns statistic 0, p-value 1 instead.
    """
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.ndim != 1 or x.shape != y.shape:
        raise ValueError(f"a and b must be 1-D of equal length, got shapes {x.shape}, {y.shape}")
    if len(x) < 2:
        raise ValueError(f"need at least 2 data sets, got {len(x)}")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("NaN scores in a or b")
    if np.all(x == y):
        return WilcoxonResult(0.0, 1.0)
    result = stats.wilcoxon(x, y, alternative=alternative)
    return WilcoxonResult(float(result.statistic), float(result.pvalue))


def cd_diagram(
    average_ranks: pd.Series,
    pvalues: pd.DataFrame,
    path,
    title: str | None = None,
    *,
    cd: float | None = None,
    alpha: float = 0.05,
) -> Path:
    """A critical-difference diagram as a PNG at ``path`` (written atomically).

    Drawn by ``scikit_posthocs.critical_difference_diagram``: methods on the rank axis, bars
    joining those whose pairwise p-value (``pvalues``, e.g. :func:`nemenyi_pvalues`) is not
    below ``alpha``; ``cd`` (e.g. :func:`nemenyi_critical_difference`) adds a CD bar.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranks = pd.Series(average_ranks, dtype=float)
    missing = set(ranks.index) - set(pvalues.index) | set(ranks.index) - set(pvalues.columns)
    if missing:
        raise ValueError(f"no p-values for method(s) {sorted(map(str, missing))}")
    from matplotlib.transforms import offset_copy

    fig, ax = plt.subplots(figsize=(6.0, 1.2 + 0.35 * len(ranks)))
    try:
        sp.critical_difference_diagram(ranks, pvalues, alpha=alpha, ax=ax)
        if cd is not None:
            # drawn here, not by the library (which puts the bar and its label across the
            # rank labels): a bar of length cd from the best rank, in points above the axis
            # and its labels, as in Demsar's figures
            start = float(ranks.min())
            lift = offset_copy(ax.transData, fig=fig, y=26, units="points")
            ax.plot([start, start + cd], [0, 0], "k", linewidth=2, transform=lift, clip_on=False)
            ax.update_datalim([(start, 0.0), (start + cd, 0.0)])  # the bar inside the x range
            ax.autoscale_view()
            label = offset_copy(ax.transData, fig=fig, y=29, units="points")
            ax.text(start + cd / 2, 0, f"CD = {cd:.2g}", ha="center", va="bottom", transform=label)
        if title:
            fig.suptitle(title)
        fig.tight_layout()
        path = Path(path)
        atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    finally:
        plt.close(fig)
    return path
