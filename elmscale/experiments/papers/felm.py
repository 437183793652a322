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
"""

from __future__ import annotations

from elmscale.experiments.protocol import DataSet

__all__ = ["ARTIFICIAL", "BENCHMARK", "DATASETS", "GENERATOR_SEED"]

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
