"""The sparse ELM's speed figures on the README and the docs pages are the results file's
(docs/speed_figures.py): a page whose marked figures differ from what the file gives, or
that lost a mark, fails here, so that two pages cannot disagree."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))  # docs/speed_figures.py is no package's module

import speed_figures  # noqa: E402

REGENERATE = "run python docs/gen_reference.py"


def _run():
    return speed_figures.parse_warm((ROOT / speed_figures.RESULTS).read_text())


def test_the_pages_speed_figures_are_the_results_files():
    problems = speed_figures.problems(ROOT)
    assert not problems, "; ".join(problems) + f" ({REGENERATE})"


def test_the_results_file_is_read_as_written():
    """Both layouts of the warm mode's file, read as printed: LIBSVM alone ("SVC", before
    oneDAL was a peer) and LIBSVM with oneDAL, each peer's time and ratio on its line."""
    old = speed_figures.parse_warm(
        (ROOT / "benchmarks/results/sparse_elm_field_warm.txt").read_text()
    )
    assert [row.C for row in old.rows] == ["0.1", "1", "10", "100", "1000"]
    c1 = old.rows[1]
    assert c1.sides["ours"].fit == pytest.approx(0.3405)
    assert c1.peers["LIBSVM"].fit == pytest.approx(2.51)
    assert c1.peers["LIBSVM"].fit_ratio == 7.36
    assert c1.peers["LIBSVM"].predict_ratio == 58.60
    assert (c1.sides["ours"].n_sv, c1.peers["LIBSVM"].n_sv) == (5204, 5211)
    assert old.rows[-1].flipped == 2
    both = speed_figures.parse_warm(
        (ROOT / "benchmarks/results/sparse_elm_field_warm_onedal.txt").read_text()
    )
    c1 = both.rows[1]
    assert c1.sides["ours"].fit == pytest.approx(0.7667)
    assert (c1.peers["LIBSVM"].fit, c1.peers["oneDAL"].fit) == (pytest.approx(6.16), 2.35)
    assert (c1.peers["oneDAL"].fit_ratio, c1.peers["oneDAL"].predict_ratio) == (3.07, 4.78)
    assert (c1.sides["ours"].n_sv, c1.peers["oneDAL"].n_sv) == (5204, 5200)
    assert both.rows[-1].flipped == 1


def test_a_figure_changed_on_a_page_is_reported(tmp_path):
    for page in [*speed_figures.SOURCES, *speed_figures.PAGES]:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((ROOT / page).read_text())
    readme = tmp_path / "README.md"
    text = readme.read_text()
    figure = speed_figures.fragments(_run(), "README.md")["predict"]
    readme.write_text(text.replace(figure, figure.replace("-", " to ", 1), 1))
    assert speed_figures.problems(tmp_path) == [
        f"README.md: its speed figures differ from {speed_figures.RESULTS}'s"
    ]
    # a mark removed (the figure left as hand-written text) is reported too
    unmarked = text.replace("<!-- speed: predict -->", "", 1)
    readme.write_text(unmarked.replace(f"{figure}<!-- /speed -->", figure, 1))
    assert speed_figures.problems(tmp_path) == [
        "README.md: no <!-- speed: NAME --> mark for ['predict']"
    ]


def test_a_run_with_onedal_names_the_fastest_peer():
    text = (ROOT / speed_figures.RESULTS).read_text()
    lines = []
    for line in text.splitlines():  # the file as a run with oneDAL would write it
        if " fit: ours " in line:
            line = line.replace(", SVC ", ", LIBSVM ")
            line = line.replace("| predict:", ", oneDAL 0.10 s, ratio 1.50x | predict:", 1).replace(
                "| acc:", ", oneDAL 0.50 s, ratio 2.00x | acc:", 1
            )
            line = line.replace("| SVs:", ", oneDAL 0.9500 | SVs:", 1)
            line = line.replace("| steps", ", oneDAL 5000 | steps", 1)
        lines.append(line)
    run = speed_figures.parse_warm("\n".join(lines))
    assert run.peers == ["LIBSVM", "oneDAL"]
    figures = speed_figures.fragments(run, "README.md")
    # oneDAL's ratio (1.5x) is below LIBSVM's at every C: it is the fastest peer
    assert figures["fit"] == "1.5x / 1.5x / 1.5x / 1.5x / 1.5x faster than oneDAL at C = " + (
        "0.1 / 1 / 10 / 100 / 1000"
    )
    assert figures["predict"] == "2.0-2.0x faster than oneDAL"
    assert "LIBSVM and oneDAL" in figures["source"]


def test_a_run_where_onedal_fell_back_is_refused():
    text = (ROOT / speed_figures.RESULTS).read_text()
    fell = text.replace("| steps 7684", "| steps 7684 | oneDAL FELL BACK to scikit-learn", 1)
    with pytest.raises(ValueError, match="FELL BACK"):
        speed_figures.parse_warm(fell)


def test_the_other_sets_rows_are_the_results_files(tmp_path):
    text = (ROOT / speed_figures.OTHERS).read_text()
    block = speed_figures.fragments(_run(), "docs/performance.md", text)["others"]
    rows = [line.strip() for line in block.strip("\n").splitlines()]
    # the summary's header, then each other set's fit, predict and accuracy rows, verbatim
    assert rows[0].startswith("situation") and "oneDAL" in rows[0]
    printed = [line.strip() for line in text.splitlines() if line.startswith("  warm fit, a9a")]
    assert printed and all(row in rows for row in printed)
    assert not any(row.startswith("warm fit, C=") for row in rows)  # COD-RNA's: the table's
    # a row changed in the file changes the page: the page is then reported
    for page in [*speed_figures.SOURCES, *speed_figures.PAGES]:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((ROOT / page).read_text())
    assert speed_figures.problems(tmp_path) == []
    changed = text.replace(printed[0], printed[0].replace("s ", "s  ", 1), 1)
    (tmp_path / speed_figures.OTHERS).write_text(changed)
    assert speed_figures.problems(tmp_path) == [
        f"docs/performance.md: its speed figures differ from {speed_figures.RESULTS}'s"
    ]
    with pytest.raises(ValueError, match="no summary rows"):
        speed_figures.fragments(_run(), "docs/performance.md", "# python x   (2026-12-07)\n")
