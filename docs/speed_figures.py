"""The sparse ELM's speed figures on the README and the docs pages, generated from one
results file, so that no two pages can disagree.

The file is what ``python benchmarks/sparse_elm_field.py --only warm --results FILE`` wrote
(its warm mode: COD-RNA half, sigma 0.5, every C; ours and each CPU SVC peer, LIBSVM and,
where scikit-learn-intelex was installed, oneDAL, timed in the same run): :data:`RESULTS`.
A page marks each generated figure ``<!-- speed: NAME -->...<!-- /speed -->`` (inline in a
table cell or a sentence, or around a block); :func:`pages` rewrites what is between the
marks from the file, and nothing else.  ``docs/gen_reference.py`` writes the pages
(``--check``: compares only); tests/test_docs_speed.py fails when a page differs from what
the file gives.  Pure functions of the file's text: no clock, no machine.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# the latest warm run recorded, with LIBSVM and oneDAL timed in the same run
RESULTS = "benchmarks/results/sparse_elm_field_warm_onedal.txt"
# the other rows (a9a dense and CSR, the wide set, ...: ``--sets``), their latest
# run: the summary's rows for those sets, as the benchmark printed them
OTHERS = "benchmarks/results/sparse_elm_field_others.txt"
# the results files the pages are generated from (what a copy of the docs needs)
SOURCES = (RESULTS, OTHERS)
# each page and the figures it must carry (a page that drops a mark fails the test)
PAGES = {
    "README.md": {"fit", "predict", "source"},
    "docs/guide/sparse-elm.md": {"fit", "predict", "accuracy", "source"},
    "docs/performance.md": {"table", "source", "others", "others-source"},
}
LIBSVM, ONEDAL = "LIBSVM", "oneDAL"  # sparse_elm_vs_svc.py's names for the peers
ALIASES = {"SVC": LIBSVM}  # the files written before oneDAL was a peer say "SVC"

MARK = re.compile(r"<!-- speed: ([\w-]+) -->(.*?)<!-- /speed -->", re.S)
HEADER = re.compile(r"^# (python .*?)\s+\((\d{4}-\d\d-\d\d)")
TEST_ROWS = re.compile(r"([\d,]+) test rows")
WARM = re.compile(
    r"^\s+C=(\S+)\s+fit: (.*?) \| predict: (.*?) \| acc: (.*?) \| SVs: (.*?)(?: \| (.*))?$"
)
OURS = re.compile(r"ours\s+([\d.]+) (m?s)")
PEER = re.compile(r"(\w+)\s+([\d.]+) (m?s), ratio\s+([\d.]+)x")
PAIR = re.compile(r"(\w+) ([\d.]+)")
SUMMARY_HEADER = re.compile(r"^  situation\s+ours")
OTHER_ROW = re.compile(r"^  (warm fit|warm predict|accuracy), (?!C=)")
PRECISION = re.compile(r"single precision: .*? max ([\d.e+-]+) .*labels that differ: (\d+)")


@dataclass(frozen=True)
class Side:
    """One side's figures at one C: seconds, and a peer's printed ratio to ours."""

    fit: float
    predict: float
    accuracy: float
    n_sv: int
    fit_ratio: float | None = None  # None for ours
    predict_ratio: float | None = None


@dataclass(frozen=True)
class WarmRow:
    C: str  # as printed
    sides: dict  # "ours" and each peer -> Side
    gap: float | None  # max |float32 decision - float64's|
    flipped: int | None  # labels that differ between the two

    @property
    def peers(self) -> dict:
        return {name: side for name, side in self.sides.items() if name != "ours"}

    def fastest(self, what: str) -> str:
        """The fastest peer in ``what``: the smallest ratio of its time to ours."""
        return min(self.peers, key=lambda name: getattr(self.peers[name], what + "_ratio"))


@dataclass(frozen=True)
class WarmRun:
    command: str
    date: str
    test_rows: str
    rows: list

    @property
    def peers(self) -> list:
        return list(self.rows[0].peers)


def _seconds(value: str, unit: str) -> float:
    return float(value) / (1000 if unit == "ms" else 1)


def parse_warm(text: str) -> WarmRun:
    """The warm mode's rows of a results file; ValueError when it has none, names no
    command, or a oneDAL peer ran scikit-learn's code (its times would be LIBSVM's)."""
    header = HEADER.match(text)
    if header is None:
        raise ValueError("the results file does not start with '# python ...   (date, ...)'")
    test_rows = TEST_ROWS.search(text)
    rows, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        found = WARM.match(line)
        if found is None:
            continue
        C, fit, predict, acc, svs, rest = found.groups()
        if rest and "FELL BACK" in rest:
            raise ValueError(f"C={C}: {rest}")
        ours_fit, ours_pred = OURS.match(fit), OURS.match(predict)
        accs = {ALIASES.get(k, k): float(v) for k, v in PAIR.findall(acc)}
        n_svs = {ALIASES.get(k, k): int(v) for k, v in PAIR.findall(svs)}
        sides = {
            "ours": Side(
                _seconds(*ours_fit.groups()),
                _seconds(*ours_pred.groups()),
                accs["ours"],
                n_svs["ours"],
            )
        }
        predicted = {name: (s, u, r) for name, s, u, r in PEER.findall(predict)}
        for name, value, unit, ratio in PEER.findall(fit):
            p_value, p_unit, p_ratio = predicted[name]
            name = ALIASES.get(name, name)
            sides[name] = Side(
                _seconds(value, unit),
                _seconds(p_value, p_unit),
                accs[name],
                n_svs[name],
                float(ratio),
                float(p_ratio),
            )
        # the single-precision check is the line after its C's
        precision = PRECISION.search(lines[i + 1]) if i + 1 < len(lines) else None
        gap, flipped = (float(precision[1]), int(precision[2])) if precision else (None, None)
        rows.append(WarmRow(C, sides, gap, flipped))
    if not rows or len(rows[0].sides) < 2:
        raise ValueError("the results file has no warm-mode rows with a peer")
    return WarmRun(header[1], header[2], test_rows[1] if test_rows else "?", rows)


# -- the figures, as Markdown ---------------------------------------------------------


def _peers_text(run: WarmRun) -> str:
    if ONEDAL in run.peers:
        return "LIBSVM and oneDAL, timed in the same run"
    return "LIBSVM (scikit-learn's SVC) only, oneDAL not measured in that run"


def _against(run: WarmRun, what: str) -> tuple[list, str]:
    """Each C's ratio to the fastest peer in ``what`` and the words naming the peer."""
    names = [row.fastest(what) for row in run.rows]
    ratios = [getattr(row.peers[name], what + "_ratio") for row, name in zip(run.rows, names)]
    if len(set(names)) == 1:
        return ratios, f"than {names[0]}"
    return ratios, "than the faster of LIBSVM and oneDAL at each C"


def _ratio(r: float) -> str:
    """A ratio as printed on the pages: two decimals below 1 (0.98x is slower, which
    "1.0x" would hide), one below 10, none above."""
    return f"{r:.2f}" if r < 1 else f"{r:.1f}" if r < 10 else f"{r:.0f}"


def _fit(run: WarmRun) -> str:
    ratios, peer = _against(run, "fit")
    Cs = " / ".join(row.C for row in run.rows)
    return f"{' / '.join(f'{_ratio(r)}x' for r in ratios)} faster {peer} at C = {Cs}"


def _predict(run: WarmRun) -> str:
    ratios, peer = _against(run, "predict")
    return f"{_ratio(min(ratios))}-{_ratio(max(ratios))}x faster {peer}"


def _accuracy(run: WarmRun) -> str:
    gap = max(
        abs(row.sides["ours"].accuracy - side.accuracy)
        for row in run.rows
        for side in row.peers.values()
    )
    row = next((r for r in run.rows if r.C == "1"), run.rows[0])
    ours, peers = row.sides["ours"], row.peers
    return (
        f"test accuracy within {gap:.4f} of every peer's at every C (at C = {row.C}: ours "
        f"{ours.accuracy:.4f}, "
        + ", ".join(f"{name} {side.accuracy:.4f}" for name, side in peers.items())
        + f"; {ours.n_sv:,} support vectors against "
        + ", ".join(f"{name}'s {side.n_sv:,}" for name, side in peers.items())
        + ")"
    )


def _source(run: WarmRun, link: str) -> str:
    return f"[`{RESULTS}`]({link}), `{run.command}`, {run.date}; peers: {_peers_text(run)}"


def _table(run: WarmRun) -> str:
    """The warm run as a fixed-width block (an indented code block on the page)."""
    label = 32

    def line(name, cells):
        return "    " + f"{name:{label}}" + "".join(f"{c:11}" for c in cells).rstrip()

    def seconds(t):
        return f"{t:.2f}"

    rows = run.rows
    out = [line("COD-RNA half, sigma 0.5", [f"C = {r.C}" for r in rows])]
    out.append(line("fit, ours (s)", [seconds(r.sides["ours"].fit) for r in rows]))
    for name in run.peers:
        out.append(line(f"fit, {name} (s)", [seconds(r.peers[name].fit) for r in rows]))
        out.append(
            line(f"fit ratio, {name} / ours", [f"{r.peers[name].fit_ratio:.2f}x" for r in rows])
        )
    out.append(line("predict, ours (s)", [f"{r.sides['ours'].predict:.3f}" for r in rows]))
    for name in run.peers:
        out.append(
            line(
                f"predict ratio, {name} / ours",
                [f"{r.peers[name].predict_ratio:.1f}x" for r in rows],
            )
        )
    if all(r.gap is not None for r in rows):
        out.append(line("|single - double| decision", [f"{r.gap:.1e}" for r in rows]))
        out.append(line("labels single vs double differ", [str(r.flipped) for r in rows]))
    return "\n\n" + "\n".join(out) + f"\n\n    ({run.test_rows} test rows)\n\n"


def _others(text: str) -> str:
    """The other sets' rows of a results file's summary (their fit, predict and accuracy
    against the peers), as printed, as a fixed-width block; ValueError when it has none."""
    lines = text.splitlines()
    header = [line for line in lines if SUMMARY_HEADER.match(line)]
    rows = [line for line in lines if OTHER_ROW.match(line)]
    if not header or not rows:
        raise ValueError(f"{OTHERS} has no summary rows of the other sets")
    return "\n\n" + "\n".join("  " + line for line in header[:1] + rows) + "\n\n"


def _others_source(text: str, link: str) -> str:
    header = HEADER.match(text)
    if header is None:
        raise ValueError(f"{OTHERS} does not start with '# python ...   (date, ...)'")
    return f"[`{OTHERS}`]({link}), `{header[1]}`, {header[2]}"


def _link(page: str, results: str = RESULTS) -> str:
    """A results file's address from ``page`` (the docs site publishes
    benchmarks/results/ as results/, docs/hooks.py)."""
    if not page.startswith("docs/"):
        return results
    published = "docs/results/" + Path(results).name
    return os.path.relpath(published, os.path.dirname(page)).replace(os.sep, "/")


def fragments(run: WarmRun, page: str, others: str = "") -> dict:
    """Every figure's Markdown, by its mark's name, for ``page`` (``others``: the text of
    :data:`OTHERS`, for the marks that read it)."""
    figures = {
        "fit": _fit(run),
        "predict": _predict(run),
        "accuracy": _accuracy(run),
        "source": _source(run, _link(page)),
        "table": _table(run),
    }
    if others:
        figures["others"] = _others(others)
        figures["others-source"] = _others_source(others, _link(page, OTHERS))
    return figures


def render(text: str, figures: dict) -> str:
    """``text`` with every marked figure replaced by ``figures``' (KeyError: a mark this
    module does not know)."""

    def replace(found):
        name = found[1]
        if name not in figures:
            raise KeyError(f"unknown speed figure {name!r}")
        return f"<!-- speed: {name} -->{figures[name]}<!-- /speed -->"

    return MARK.sub(replace, text)


def marks(text: str) -> set:
    """The names of the figures marked on a page."""
    return {name for name, _ in MARK.findall(text)}


def pages(root: Path) -> dict:
    """``{page: its text with the figures from the results file}`` for every page of
    :data:`PAGES` (paths relative to ``root``, the checkout)."""
    run = parse_warm((root / RESULTS).read_text(encoding="utf-8"))
    others = (root / OTHERS).read_text(encoding="utf-8")
    return {
        page: render((root / page).read_text(encoding="utf-8"), fragments(run, page, others))
        for page in PAGES
    }


def problems(root: Path) -> list:
    """What is wrong with the pages: a mark missing, a figure not the file's."""
    found = []
    for page, text in pages(root).items():
        committed = (root / page).read_text(encoding="utf-8")
        missing = PAGES[page] - marks(committed)
        if missing:
            found.append(f"{page}: no <!-- speed: NAME --> mark for {sorted(missing)}")
        if committed != text:
            found.append(f"{page}: its speed figures differ from {RESULTS}'s")
    return found
