"""elmscale.experiments.stats: Demšar's (2006) tests, checked on the FELM paper's Table 6 and
against the libraries they wrap."""

import math

import numpy as np
import pandas as pd
import pytest
from _datasets import shared_path
from scipy import stats as ss
from statsmodels.stats.multitest import multipletests

from elmscale.experiments import stats

METHODS = ["RFSVM", "FTSVM", "FELM", "FKELM"]


def _felm_tables():
    """(16 x 4 rank table with WPBC's test ranks taken from Table 5, printed average ranks)."""
    frame = pd.read_csv(shared_path("reference", "felm_paper_results.csv"))
    t6 = frame[frame["table"] == "Table 6"]
    printed = t6[t6["dataset"] == "Average rank"].set_index("method")["avg_rank"].astype(float)
    rows = t6[t6["dataset"] != "Average rank"]
    train = rows.pivot(index="dataset", columns="method", values="train_rank")[METHODS]
    test = rows.pivot(index="dataset", columns="method", values="test_rank")[METHODS]
    assert train.shape == test.shape == (8, 4)
    # Inconsistency 5: WPBC's printed test ranks are swapped relative to Table 5's accuracies.
    t5 = frame[(frame["table"] == "Table 5") & (frame["dataset"] == "WPBC")]
    accuracy = t5.set_index("method")["test_acc"].astype(float)[METHODS]
    wpbc = ss.rankdata(-accuracy.to_numpy())
    assert list(wpbc) != list(test.loc["WPBC"]), "Table 6 and Table 5 now agree on WPBC"
    test.loc["WPBC"] = wpbc
    ranks = pd.concat(
        [train.rename(index=lambda d: f"{d} train"), test.rename(index=lambda d: f"{d} test")]
    )
    return ranks.astype(float), printed[METHODS]


@pytest.mark.needs_shared
def test_felm_table6_friedman_and_nemenyi():
    ranks, printed = _felm_tables()
    assert ranks.shape == (16, 4)
    # Inconsistency 6: the paper averages 16 rank rows (train and test) ...
    ours = stats.average_ranks(ranks, higher_is_better=False)
    pd.testing.assert_series_equal(ours, printed, check_names=False, atol=1e-12)
    # ... but its Friedman test uses N = 8 data sets.
    result = stats.friedman_from_ranks(printed, n_datasets=8)
    assert result.chi2 == pytest.approx(8.5875, abs=1e-4)
    assert result.iman_davenport == pytest.approx(3.90, abs=0.01)
    assert result.f_pvalue < 0.05  # the null hypothesis is rejected, as the paper says

    assert stats.nemenyi_q_alpha(4) == pytest.approx(2.569, abs=1e-3)
    cd = stats.nemenyi_critical_difference(4, 8)
    assert cd == pytest.approx(1.658, abs=1e-3)  # inconsistency 8: the paper prints 1.6442
    assert abs(cd - 1.64) < 0.02

    gaps = printed - printed["FKELM"]
    assert gaps["FTSVM"] == pytest.approx(1.8125)
    assert gaps["FTSVM"] > cd  # significant
    assert gaps["FELM"] < cd and gaps["RFSVM"] < cd  # not significant


def _random_scores(n=12, k=5, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame(rng.random((n, k)), columns=[f"m{j}" for j in range(k)])


def test_friedman_matches_scipy_and_the_ranks_formula():
    scores = _random_scores()
    result = stats.friedman(scores)
    chi2, p = ss.friedmanchisquare(*(scores[c] for c in scores.columns))
    assert result.chi2 == pytest.approx(chi2)
    assert result.chi2_pvalue == pytest.approx(p)
    assert (result.n_datasets, result.n_methods) == (12, 5)
    from_ranks = stats.friedman_from_ranks(stats.average_ranks(scores), 12)
    assert from_ranks.chi2 == pytest.approx(result.chi2)
    assert from_ranks.chi2_pvalue == pytest.approx(result.chi2_pvalue)
    assert from_ranks.iman_davenport == pytest.approx(result.iman_davenport)
    assert from_ranks.f_pvalue == pytest.approx(result.f_pvalue)
    n, k = 12, 5
    ff = (n - 1) * chi2 / (n * (k - 1) - chi2)
    assert result.iman_davenport == pytest.approx(ff)
    assert result.f_pvalue == pytest.approx(ss.f.sf(ff, k - 1, (k - 1) * (n - 1)))


def test_average_ranks_orientation_and_ties():
    scores = pd.DataFrame({"a": [0.9, 0.5], "b": [0.8, 0.5], "c": [0.7, 0.1]})
    high = stats.average_ranks(scores)
    assert list(high) == [1.25, 1.75, 3.0]  # the tie on row 2 shares ranks 1 and 2
    low = stats.average_ranks(scores, higher_is_better=False)
    assert list(low) == [2.75, 2.25, 1.0]


def test_perfect_agreement_gives_an_infinite_f():
    scores = pd.DataFrame([[3.0, 2.0, 1.0]] * 4, columns=list("abc"))
    result = stats.friedman(scores)
    assert result.iman_davenport == math.inf and result.f_pvalue == 0.0


def test_holm_against_control_matches_statsmodels_and_is_monotone():
    scores = _random_scores(n=20, k=6, seed=3)
    scores["best"] = scores.max(axis=1) + 0.01  # ranks first everywhere
    table = stats.holm_against_control(scores, "best")
    assert "best" not in table.index and len(table) == 6
    k, n = 7, 20
    ranks = stats.average_ranks(scores)
    diff = ranks.drop("best") - ranks["best"]
    pd.testing.assert_series_equal(
        table["rank_difference"].sort_index(), diff.sort_index(), check_names=False
    )
    z = diff / math.sqrt(k * (k + 1) / (6 * n))
    p = 2 * ss.norm.sf(np.abs(z))
    assert np.allclose(table.loc[diff.index, "pvalue"], p)
    reject, adjusted, _, _ = multipletests(table["pvalue"], alpha=0.05, method="holm")
    assert np.allclose(table["pvalue_holm"], adjusted)
    assert list(table["reject"]) == list(reject)
    by_gap = table.sort_values("rank_difference", key=np.abs)
    assert np.all(np.diff(by_gap["pvalue_holm"].to_numpy()) <= 1e-12)  # wider gap, smaller p
    assert table["reject"].any()


def test_wilcoxon():
    a = np.array([0.81, 0.72, 0.93, 0.64, 0.55, 0.86])
    assert stats.wilcoxon_signed_rank(a, a.copy()) == (0.0, 1.0)
    b = a - np.array([0.01, 0.03, 0.02, 0.05, 0.04, 0.06])
    result = stats.wilcoxon_signed_rank(a, b)
    expected = ss.wilcoxon(a, b)
    assert result.statistic == pytest.approx(expected.statistic)
    assert result.pvalue == pytest.approx(expected.pvalue)
    assert stats.wilcoxon_signed_rank(a, b, alternative="greater").pvalue < result.pvalue


def test_nemenyi_pvalues_agree_with_the_critical_difference():
    scores = _random_scores(n=30, k=4, seed=1)
    scores["m0"] += 0.6  # one clearly better method
    pvalues = stats.nemenyi_pvalues(scores)
    assert list(pvalues.index) == list(pvalues.columns) == list(scores.columns)
    assert np.allclose(pvalues.to_numpy(), pvalues.to_numpy().T)
    assert np.allclose(np.diag(pvalues), 1.0)
    # orientation does not matter, and p < alpha exactly when the rank gap exceeds the CD
    assert np.allclose(stats.nemenyi_pvalues(-scores), pvalues)
    ranks = stats.average_ranks(scores)
    cd = stats.nemenyi_critical_difference(4, 30)
    for i in scores.columns:
        for j in scores.columns:
            if i != j:
                assert (pvalues.loc[i, j] < 0.05) == (abs(ranks[i] - ranks[j]) > cd)
    assert (pvalues.loc["m0"].drop("m0") < 0.05).all()


def test_cd_diagram_writes_a_png_atomically(tmp_path):
    scores = _random_scores(n=10, k=4, seed=2)
    path = tmp_path / "sub" / "cd.png"
    out = stats.cd_diagram(
        stats.average_ranks(scores),
        stats.nemenyi_pvalues(scores),
        path,
        title="CD",
        cd=stats.nemenyi_critical_difference(4, 10),
    )
    assert out == path
    assert path.read_bytes().startswith(b"\x89PNG")
    assert [p.name for p in path.parent.iterdir()] == ["cd.png"]


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: stats.average_ranks(pd.DataFrame({"a": [1.0, 2.0]})), "at least 2 methods"),
        (lambda: stats.friedman(pd.DataFrame([[1.0, 2.0, 3.0]])), "at least 2 data sets"),
        (lambda: stats.friedman(_random_scores(k=2)), "at least 3 methods"),
        (lambda: stats.nemenyi_critical_difference(1, 8), "at least 2 methods"),
        (lambda: stats.nemenyi_critical_difference(4, 1), "at least 2 data sets"),
        (lambda: stats.friedman_from_ranks(pd.Series([1.0, 2.0]), 1), "at least 2 data sets"),
        (lambda: stats.friedman_from_ranks(pd.Series([1.0, 1.0]), 5), "must sum to 3"),
        (lambda: stats.holm_against_control(_random_scores(), "nope"), "unknown control 'nope'"),
        (lambda: stats.wilcoxon_signed_rank([1.0, 2.0], [1.0]), "equal length"),
        (lambda: stats.wilcoxon_signed_rank([1.0, np.nan], [1.0, 2.0]), "NaN"),
    ],
)
def test_bad_input_raises(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize(
    "function",
    [stats.average_ranks, stats.friedman, stats.nemenyi_pvalues],
)
def test_nan_scores_raise(function):
    scores = _random_scores(n=5, k=3)
    scores.iloc[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"NaN scores for method\(s\) \['m1'\]"):
        function(scores)
