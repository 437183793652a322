"""FELM and FKELM (*Feature Selection Methods for Extreme Learning Machines*, Axioms 2022;
``../shared/papers/feature-selection-elm-felm-fkelm.txt``, ``../shared/reference/
felm_paper_protocol.md``): its data sets.

Table 4's eight binary benchmark sets, split 70 % / 30 % at the table's sizes with a fresh
stratified split per trial: Australian, Heart, Ionosphere and Sonar from ``../shared/data``
(the sparse-ELM paper's copies), Colon, Leukaemia and WPBC from ``../shared/data/
feature-selection/``, and WDBC as scikit-learn ships it (``load_breast_cancer``: no file).
Tables 1-3's two artificial 2-D sets are generated here with a fixed seed
(:func:`elmscale.data.generate_two_moons`, :func:`elmscale.data.generate_two_gaussians`)
and split at the paper's sizes the same way.

The protocol (``elmscale reproduce felm``): FELM (300 sigmoid nodes) and FKELM (the
memorization-generalization kernel) against two scikit-learn baselines a user would
reach for, ``SelectFromModel(LinearSVC(penalty="l1"))`` + a gaussian SVC
(:class:`~elmscale.experiments.pieces.L1SelectSVC`) and the plain gaussian SVC; 10
trials of a fresh stratified 70 / 30 split, inputs scaled to [-1, 1] on the training part,
every method's parameters by 5-fold CV on the training part.  Each trial records the
test accuracy, the kept features and the times.  Table 5 (the eight benchmark sets) and
Table 3 (the two artificial ones) are set beside the paper's FELM / FKELM test accuracy;
Friedman, Iman-Davenport and Nemenyi's CD (with its diagram) run over each table's sets.

Beside the paper's FELM and FKELM rows (its absolute psi, ``psi_scale="absolute"``), the
rows ``FELM-rel`` and ``FKELM-rel`` cross-validate psi on the relative scale
(``psi_scale="relative"``: psi in units of ``f0 / sqrt(d)``, ``f0`` the objective on every
feature) over :data:`REL_PSI`, 2^4 down to 2^-8: the paper's values prune the separable
high-dimensional sets (colon, leukaemia, objective ~0.4) to a handful of features at psi
= 1 already, so that its grid jumps from "every feature" to "a few".  The relative grid is
listed from the largest psi, so that the CV's ties (frequent on 44-row training parts) go
to the sparser model.

The paper's grids (:data:`PAPER_C`, :data:`PAPER_PSI`, :data:`PAPER_TAU`,
:data:`PAPER_SIGMA_P`: 21 x 6 x 11 x 21 for FKELM, each point a whole selection run, five
times per trial) are far beyond 2 cores; the default run cross-validates the reduced
grids below them (:data:`Cs` ...), the notes say so, and ``--quick`` is CI's size.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from elmscale.experiments.protocol import DataSet, Method, Protocol, Table

__all__ = [
    "ARTIFICIAL",
    "BENCHMARK",
    "DATASETS",
    "GENERATOR_SEED",
    "REL_PSI",
    "claims",
    "library_sigma",
    "paper_values",
    "protocol",
]

# -- the paper's grids (Section 4.1) -------------------------------------------------------

#: C in {2^-10, ..., 2^10}
PAPER_C = tuple(2.0**k for k in range(-10, 11))
#: psi in {0, 2^0, ..., 2^4}
PAPER_PSI = (0.0, *(2.0**k for k in range(5)))
#: tau in {0, 0.1, ..., 1} (the step is not stated; the reported values fit 0.1)
PAPER_TAU = tuple(round(0.1 * k, 1) for k in range(11))
#: the paper's kernel parameter sigma_p (an inverse width: exp(-sigma_p^2 ||u - v||^2))
PAPER_SIGMA_P = tuple(2.0**k for k in range(-10, 11))
#: sigma*_p = 2^-10 sigma_p: in the library's widths sigma_star = 2^10 sigma (FKELM's
#: default sigma_star_ratio)
PAPER_SIGMA_STAR_RATIO = 2.0**10

# -- the grids run here (2 cores) ----------------------------------------------------------

Cs = tuple(2.0**k for k in (-6, -4, -2, 0, 2, 4, 6))
PSI = (0.0, 1.0, 4.0, 16.0)
#: FELM-rel / FKELM-rel: psi on the relative scale, 2^4, 2^2, ..., 2^-8, largest first (the
#: CV's ties go to the first: the sparser model)
REL_PSI = tuple(2.0**k for k in range(4, -9, -2))
TAU = (0.3, 0.4, 0.5, 0.6)
SIGMA_P = tuple(2.0**k for k in (-8, -6, -4, -2, 0, 2))
#: the l1 selector's C (SelectFromModel(LinearSVC(penalty="l1")))
SELECT_C = (2.0**-2, 2.0**0, 2.0**2)

#: the selection's sweeps at most (the paper: "a fixed and large k"; at psi = 0 the flips
#: creep by ~1e-6 a step for 20 sweeps on colon)
MAX_SWEEPS = 5
#: FELM / FKELM's first CV stage: the sparse ELM itself (every feature, no flips), which
#: chooses C (and tau, sigma) in milliseconds a fit; the second stage chooses psi with the
#: selection at those values
WITHOUT_SELECTION = (("psi", 0.0), ("initial_selection", False), ("max_sweeps", 0))

#: --quick (CI): two small sets, one trial, 3-fold CV on a tiny grid
QUICK_SETS = ("heart", "wdbc")
QUICK = {
    "C": (1.0, 8.0),
    "psi": (0.0, 4.0),
    "rel_psi": (4.0, 0.25),
    "tau": (0.5,),
    "sigma_p": (2.0**-2,),
    "select_C": (1.0,),
}
TRIALS = 10
FOLDS = 5

#: the claim's margin: our test accuracy within this many points of the paper's
ACCURACY_MARGIN = 2.0

#: hidden nodes P (the paper's, for every set)
N_HIDDEN = 300

_FS = "feature-selection/"

#: the artificial sets are drawn once with this seed (the trials draw their splits)
GENERATOR_SEED = 2022

BENCHMARK = (
    DataSet(
        "australian",
        ("australian/australian.dat",),
        "Australian",
        483,
        207,
        load_kw=(("label", "last"),),
        stratify=True,
        n_features=14,
    ),
    DataSet(
        "heart",
        ("heart/heart_scale",),
        "Heart",
        189,
        81,
        stratify=True,
        n_features=13,
    ),
    DataSet(
        "ionosphere",
        ("ionosphere/ionosphere_scale",),
        "Ionosphere",
        246,
        105,
        drop_columns=(1,),
        stratify=True,
        n_features=33,
        note="the constant second attribute dropped (33 left, the paper's count)",
    ),
    DataSet(
        "wdbc",
        (),
        "WDBC",
        398,
        171,
        source="sklearn.datasets:load_breast_cancer",
        stratify=True,
        n_features=30,
        note="scikit-learn's copy (sklearn.datasets.load_breast_cancer; no file needed)",
    ),
    DataSet(
        "wpbc",
        (_FS + "wpbc.data",),
        "WPBC",
        139,
        59,
        load_kw=(("label", 1), ("drop_columns", (0,))),
        stratify=True,
        n_features=33,
        note="the patient id dropped; the recurrence time kept as a feature (33 features: "
        "the paper prints 34)",
    ),
    DataSet(
        "sonar",
        ("sonar/sonar_scale",),
        "Sonar",
        146,
        62,
        stratify=True,
        n_features=60,
    ),
    DataSet(
        "colon",
        (_FS + "colon.csv",),
        "Colon",
        44,
        18,
        load_kw=(("label", "last"), ("drop_columns", (0,))),
        stratify=True,
        n_features=2000,
        note="the row-number column dropped",
    ),
    DataSet(
        "leukemia",
        (_FS + "leukemia.csv",),
        "Leukaemia",
        51,
        21,
        load_kw=(("label", "last"),),
        stratify=True,
        n_features=7129,
    ),
)

ARTIFICIAL = (
    DataSet(
        "two-moon",
        (),
        "Two-moon",
        501,
        100,
        source="elmscale.data.synthetic:generate_two_moons",
        source_kw=(("n_samples", 601), ("random_state", GENERATOR_SEED)),
        stratify=True,
        n_features=2,
        note="generated (generate_two_moons: radius 1.25, width 0.75, interlocked by 0.5, "
        "x1 in (0, 4.5); the paper gives no radius or width), 601 rows drawn once",
    ),
    DataSet(
        "two-gaussians",
        (),
        "Self-defining function",
        350,
        50,
        source="elmscale.data.synthetic:generate_two_gaussians",
        source_kw=(("n_samples", 400), ("random_state", GENERATOR_SEED)),
        stratify=True,
        n_features=2,
        note="the paper's self-defining function set, generated (generate_two_gaussians: "
        "identity covariance, means (0, 0) and (0.8, 0.8)), 400 rows drawn once; these "
        "gaussians overlap so that no classifier passes about 71 % (the Bayes rate), "
        "while the paper reports 0.99",
    ),
)

DATASETS = BENCHMARK + ARTIFICIAL


#: the paper's table of each set
PAPER_TABLE = {**{d.name: "5" for d in BENCHMARK}, **{d.name: "3" for d in ARTIFICIAL}}


def library_sigma(sigma_p: float) -> float:
    """The paper's inverse width sigma_p (exp(-sigma_p^2 d^2)) as the library's gaussian
    width sigma (exp(-d^2 / (2 sigma^2))): sigma = 1 / (sqrt(2) sigma_p)."""
    return 1.0 / (math.sqrt(2.0) * float(sigma_p))


def _methods(C, psi, tau, sigma_p, select_C, rel_psi) -> tuple[Method, ...]:
    sigmas = tuple(library_sigma(s) for s in sigma_p)
    C = tuple(C)
    felm = (("n_hidden", N_HIDDEN), ("hidden", "sigmoid"), ("max_sweeps", MAX_SWEEPS))
    fkelm = (("sigma_star_ratio", PAPER_SIGMA_STAR_RATIO), ("max_sweeps", MAX_SWEEPS))
    fkelm_first = (("C", C), ("tau", tuple(tau)), ("sigma", sigmas))
    ours = []
    for suffix, scale, grid in (("", "absolute", psi), ("-rel", "relative", rel_psi)):
        scaled = (("psi_scale", scale),)
        ours += [
            Method(
                "FELM" + suffix,
                "sigmoid",
                "elmscale.models.felm:FELMClassifier",
                felm + scaled,
                (("psi", tuple(grid)),),
                seed_param="random_state",
                first_stage=(("C", C),),
                first_stage_params=WITHOUT_SELECTION,
            ),
            Method(
                "FKELM" + suffix,
                "mg-kernel",
                "elmscale.models.felm:FKELMClassifier",
                fkelm + scaled,
                (("psi", tuple(grid)),),
                seed_param="random_state",
                first_stage=fkelm_first,
                first_stage_params=WITHOUT_SELECTION,
            ),
        ]
    return (
        *ours,
        Method(
            "L1-select+SVC",
            "gaussian",
            "elmscale.experiments.pieces:L1SelectSVC",
            (),
            (("C", C), ("select_C", tuple(select_C)), ("sigma", sigmas)),
        ),
        Method(
            "SVC",
            "gaussian",
            "elmscale.experiments.pieces:PaperSVC",
            (("kernel", "gaussian"),),
            (("C", C), ("sigma", sigmas)),
        ),
    )


def _grid_text(C, psi, tau, sigma_p, select_C, rel_psi=()) -> str:
    def listed(words):
        # a long run of evenly spaced values as its first two, "...", its last
        if len(words) > 5:
            words = [words[0], words[1], "...", words[-1]]
        return "{" + ", ".join(words) + "}"

    def powers(values):
        return listed(["0" if v == 0 else f"2^{math.log2(v):g}" for v in values])

    taus = listed([f"{t:g}" for t in tau])
    relative = f", relative psi in {powers(rel_psi)}" if rel_psi else ""
    return (
        f"C in {powers(C)}, psi in {powers(psi)}{relative}, tau in {taus}, sigma_p in "
        f"{powers(sigma_p)}, the l1 selector's C in {powers(select_C)}"
    )


def protocol(quick: bool = False, trials: int | None = None) -> Protocol:
    """The paper's protocol on the reduced grids; ``quick``: heart and WDBC, one trial,
    3-fold CV on a 2 x 2 grid (CI)."""
    if quick:
        grid = (
            QUICK["C"],
            QUICK["psi"],
            QUICK["tau"],
            QUICK["sigma_p"],
            QUICK["select_C"],
            QUICK["rel_psi"],
        )
        table5, table3 = QUICK_SETS, ()
        n_trials, folds = 1, 3
    else:
        grid = (Cs, PSI, TAU, SIGMA_P, SELECT_C, REL_PSI)
        table5 = tuple(d.name for d in BENCHMARK)
        table3 = tuple(d.name for d in ARTIFICIAL)
        n_trials, folds = TRIALS, FOLDS
    if trials is not None:
        n_trials = int(trials)
    methods = _methods(*grid)
    tables = tuple(
        Table(
            name,
            "feature selection",
            methods,
            sets,
            n_trials,
            folds,
            paper_table=f"Table {name}",
            control="FKELM",
            feature_counts=True,
        )
        for name, sets in (("5", table5), ("3", table3))
    )
    full = _grid_text(PAPER_C, PAPER_PSI, PAPER_TAU, PAPER_SIGMA_P, ())
    return Protocol(
        name="felm",
        title="FELM and FKELM: feature selection for extreme learning machines "
        "(Axioms 2022) against l1-selected and plain SVCs",
        datasets=DATASETS,
        tables=tables,
        reference="elmscale.experiments.papers.felm:paper_values",
        claims="elmscale.experiments.papers.felm:claims",
        notes=(
            "Grid reduced and staged: the paper cross-validates "
            + full.rsplit(", the l1", 1)[0]
            + " (FKELM: 21 x 6 x 11 x 21 points, each a whole feature-selection run, per "
            "fold); on 2 cores this run uses "
            + _grid_text(*grid)
            + (" (--quick: CI's size)" if quick else "")
            + ", in two CV stages for FELM and FKELM: first C (FKELM: C, tau, sigma) on "
            "the model without selection (every feature, no flips: the sparse ELM itself, "
            f"{len(grid[0])} points for FELM, {len(grid[0]) * len(grid[2]) * len(grid[3])} "
            f"for FKELM), then psi ({len(grid[1])} values; FELM-rel / FKELM-rel: "
            f"{len(grid[5])} relative values) with the selection at those; the selection "
            f"runs at most {MAX_SWEEPS} sweeps (the paper: 'a fixed and large k').",
            "FELM and FKELM take the paper's psi, a cost per kept feature in the "
            "objective's own units (psi_scale='absolute'); FELM-rel and FKELM-rel take psi "
            "on the relative scale (psi_scale='relative': in units of f0 / sqrt(d), f0 the "
            "objective on every feature, d the number of features), whose grid walks from "
            "(nearly) every feature to a few on every set; their grid is searched from the "
            "largest psi down, so that the CV's ties go to the sparser model.",
            f"{n_trials} trial(s) per set, each a fresh stratified 70 / 30 split at Table 4's "
            f"sizes; inputs scaled to [-1, 1] on the training part; {folds}-fold CV on the "
            "training part for every method (the paper does not state its folds).",
            f"FELM: {N_HIDDEN} sigmoid hidden nodes, seeded per trial.  FKELM: the "
            "memorization-generalization kernel with sigma = 1 / (sqrt(2) sigma_p) (the "
            "library's exp(-d^2 / (2 sigma^2)) against the paper's exp(-sigma_p^2 d^2)) and "
            "sigma* = 2^10 sigma, the paper's sigma*_p = 2^-10 sigma_p (its text asks for "
            "sigma* >> sigma; this makes the second term nearly constant).",
            "Baselines (not the paper's RFSVM / FTSVM, whose code is not available): "
            "SelectFromModel(LinearSVC(penalty='l1', dual=False)) then a gaussian SVC on the "
            "kept features, and the gaussian SVC on every feature, both scikit-learn "
            "(LIBSVM / liblinear), at the same C and width grid.",
            "Kept features: get_support()'s count for the selecting methods, every feature "
            "for the SVC; the paper reports none.  The paper's time column (unclear whether "
            "it includes the search) is shown as its train s.",
        ),
    )


def paper_values(reference_dir: Path) -> pd.DataFrame:
    """The paper's FELM and FKELM rows of Tables 3 and 5 (``felm_paper_results.csv``) in
    our data-set names and percent: table, dataset, method, mapping, train / test
    accuracy, time (as train_time_s)."""
    ours = {d.paper_name: d.name for d in DATASETS}
    mappings = {"FELM": "sigmoid", "FKELM": "mg-kernel"}
    frame = pd.read_csv(Path(reference_dir) / "felm_paper_results.csv")
    frame = frame[
        frame["table"].isin(["Table 3", "Table 5"])
        & frame["method"].isin(list(mappings))
        & frame["dataset"].isin(list(ours))
    ]
    return pd.DataFrame(
        {
            "table": frame["table"].str.removeprefix("Table ").to_numpy(),
            "dataset": frame["dataset"].map(ours).to_numpy(),
            "method": frame["method"].to_numpy(),
            "mapping": frame["method"].map(mappings).to_numpy(),
            "train_acc": 100.0 * frame["train_acc"].to_numpy(float),
            "test_acc": 100.0 * frame["test_acc"].to_numpy(float),
            "n_support": np.nan,
            "train_time_s": frame["time_s"].to_numpy(float),
            "test_time_s": np.nan,
        }
    )


def claims(summary: pd.DataFrame, results, timings, reference_dir: Path | None = None, **_):
    """Per set and method (FELM, FKELM): this run's mean test accuracy at most
    :data:`ACCURACY_MARGIN` points below the paper's (Tables 3 and 5; above it holds too),
    with the features kept."""
    empty = pd.DataFrame(columns=["claim", "holds"])
    if reference_dir is None or not (Path(reference_dir) / "felm_paper_results.csv").is_file():
        return empty
    paper = paper_values(reference_dir).set_index(["dataset", "method"])
    out = []
    for row in summary.itertuples(index=False):
        if (row.dataset, row.method) not in paper.index:
            continue
        theirs = float(paper.loc[(row.dataset, row.method), "test_acc"])
        gap = float(row.test_acc) - theirs
        out.append(
            {
                "claim": f"{row.dataset}: {row.method}'s test accuracy at most "
                f"{ACCURACY_MARGIN:g} points below the paper's",
                "ours test %": float(row.test_acc),
                "paper test %": theirs,
                "difference": gap,
                "kept features": float(getattr(row, "n_features_selected", np.nan)),
                "of": getattr(row, "n_features", None),
                "holds": bool(gap >= -ACCURACY_MARGIN),
            }
        )
    return pd.DataFrame(out) if out else empty
