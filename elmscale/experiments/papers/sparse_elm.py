"""Bai, Huang, Wang, Wang and Westover, "Sparse Extreme Learning Machine for
Classification" (IEEE Trans. Cybernetics 44(10), 2014): its protocol.

Section VI: 20 trials per data set; each trial permutes the training and the test part
(or, for a set without its own test file, draws a random split of the paper's sizes),
scales every attribute to [-1, 1] with factors fitted on the training part, and chooses
the parameters by five-fold cross-validation on the training part: C and sigma both over
{0.01, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}, the polynomial degree m
over {1, ..., 5}; random nodes take C only, with L = 200 hidden nodes for binary sets and
1000 for multiclass ones.  Tables IV-VII: gaussian and polynomial kernels, sigmoid and
sinusoid nodes; SVM (here scikit-learn's SVC, i.e. LIBSVM), unified ELM, sparse ELM.
Table VIII: support vectors.  Figures 2-5: accuracy against L (sinusoid nodes); Figures
6-7: test accuracy over the C x sigma grid (ionosphere).

Our sparse ELM solves the paper's dual (no bias, 0 <= a_i <= C) to the same KKT tolerance
(1e-3) with LIBSVM-style steps (a maximal-violating variable per step, shrinking), not
Algorithm 1's sweep: the same optimum, reached in fewer steps.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from elmscale.experiments.protocol import CurveFigure, DataSet, GridFigure, Method, Protocol, Table
from elmscale.models.paper_grids import PAPER_C_GRID, PAPER_DEGREE_GRID, PAPER_SIGMA_GRID

__all__ = ["claims", "paper_values", "protocol"]

# Why Table VII's sinusoid rows of the one-hot sets are far below the paper's (measured:
# the unified ELM, 200 nodes, trial 0, C 0.1-100).
_SINUSOID_ON_ONE_HOT = (
    "scaled to [-1, 1] as the paper says, its 0/1 columns become +-1, and sin(a.x + b) "
    "with a ~ U(-1, 1) then compares two rows through E cos(a.(x - x')) / 2 (the "
    "features' mean product, less a term in x + x'), which falls by "
    "sin(2)/2 = 0.45 for every column where the rows differ (by 2): rows a few "
    "attributes apart are near orthogonal and the 200 features are close to noise "
    "(training accuracy 60 % on a9a, 68 % on mushrooms, at every C). On the 0/1 columns "
    "unscaled (0.84 a column) the same nodes reach 82.0 % on a9a and 99.0 % on "
    "mushrooms, near the paper's 84.55 % and 99.88 %: its inputs were likely not +-1"
)

DATASETS = (
    DataSet(
        "australian",
        ("australian/australian.dat",),
        "Australian",
        345,
        345,
        load_kw=(("label", "last"),),
    ),
    DataSet(
        "breast-cancer",
        ("breast-cancer/breast-cancer-wisconsin.data",),
        "Breast Cancer",
        342,
        341,
        load_kw=(("label", "last"), ("missing", "drop")),
        drop_columns=(0,),
        note="the 16 rows with a missing value dropped (683 left, the paper's 342 + 341); "
        "the sample id column dropped (the paper's 10 features count it)",
    ),
    DataSet("diabetes", ("diabetes/diabetes_scale",), "Diabetes", 384, 384),
    DataSet(
        "heart",
        ("heart/heart_scale",),
        "Heart",
        135,
        135,
        note="the paper used one fixed partition (its standard deviations are 0); "
        "here each trial draws a random one",
    ),
    DataSet("ionosphere", ("ionosphere/ionosphere_scale",), "Ionosphere", 176, 175),
    DataSet(
        "mushrooms",
        ("mushrooms/mushrooms",),
        "Mushroom",
        4062,
        4062,
        note="LIBSVM's one-hot copy (112 columns; the paper lists 22 attributes). "
        + "Sinusoid nodes (Table VII) fail on it: "
        + _SINUSOID_ON_ONE_HOT,
    ),
    DataSet("svmguide1", ("svmguide1/svmguide1", "svmguide1/svmguide1.t"), "SVMguide1"),
    DataSet(
        "cod-rna",
        ("cod-rna/codrna.csv",),
        "COD RNA",
        29768,
        29767,
        load_kw=(("label", "last"),),
        note="the 59,535 training rows split 29,768 / 29,767 as the paper did",
    ),
    DataSet(
        "a9a",
        ("a9a/a9a", "a9a/a9a.t"),
        "Adult",
        6414,
        26147,
        pool=True,
        relabel=((1, 0.0, -1.0),),
        note="a9a and a9a.t pooled (48,842 rows) and split at the paper's Adult sizes "
        "6,414 / 26,147 (LIBSVM's a5a). Sinusoid nodes (Table VII) fail on it: "
        + _SINUSOID_ON_ONE_HOT,
    ),
    DataSet("satimage", ("satimage/satimage.scale", "satimage/satimage.scale.t"), "Satimage"),
    DataSet(
        "svmguide2",
        ("svmguide2/svmguide2.txt",),
        "SVMguide2",
        196,
        195,
        note="the paper's figures (56-63 %, SVM's too) lie far below every method here "
        "(81-86 %): its SVMguide2 was likely another file or split",
    ),
    DataSet(
        "sonar",
        ("sonar/sonar_scale",),
        None,
        104,
        104,
        note="not in the paper: run by its protocol, shown without paper values",
    ),
)

#: the sets of the quick (CI) run: small, binary and multiclass
QUICK_SETS = ("heart", "svmguide2")

_TABLES = (
    ("IV", "gaussian", "TABLE IV"),
    ("V", "polynomial", "TABLE V"),
    ("VI", "sigmoid", "TABLE VI"),
    ("VII", "sinusoid", "TABLE VII"),
)


def _methods(mapping: str, Cs, sigmas, degrees) -> tuple[Method, ...]:
    if mapping in ("gaussian", "polynomial"):
        name, values = ("sigma", sigmas) if mapping == "gaussian" else ("degree", degrees)
        grid = (("C", tuple(Cs)), (name, tuple(values)))
        kernel = (("kernel", mapping),)
        return (
            Method("SVM", mapping, "elmscale.experiments.pieces:PaperSVC", kernel, grid),
            Method(
                "unified_elm",
                mapping,
                "elmscale.models.elm:ELMClassifier",
                kernel,
                grid,
                c_path=True,
            ),
            Method(
                "sparse_elm",
                mapping,
                "elmscale.models.sparse_elm:SparseELMClassifier",
                kernel,
                grid,
                c_path=True,
            ),
        )
    grid = (("C", tuple(Cs)),)
    nodes = (("hidden", mapping), ("n_hidden", 200))
    many = (("n_hidden", 1000),)
    return (
        Method(
            "unified_elm",
            mapping,
            "elmscale.models.elm:ELMClassifier",
            nodes,
            grid,
            c_path=True,
            multiclass_params=many,
            seed_param="random_state",
        ),
        Method(
            "sparse_elm",
            mapping,
            "elmscale.models.sparse_elm:SparseELMClassifier",
            nodes,
            grid,
            c_path=True,
            multiclass_params=many,
            seed_param="random_state",
        ),
    )


def protocol(quick: bool = False, trials: int | None = None) -> Protocol:
    """The paper's protocol; ``quick``: two small sets, a 4 x 3 grid, one trial (CI)."""
    if quick:
        Cs, sigmas, degrees = (0.1, 1.0, 10.0, 100.0), (0.5, 2.0, 10.0), (1, 2, 3)
        sets, n_trials, fig_trials = QUICK_SETS, 1, 1
        curve_L, curve_Cs, grid_Cs, grid_sigmas = (10, 50, 200), (1.0, 100.0), Cs, sigmas
        curve_sets_4, curve_sets_5 = ("heart",), ("svmguide2",)
        grid_set = "heart"
    else:
        Cs, sigmas, degrees = PAPER_C_GRID, PAPER_SIGMA_GRID, PAPER_DEGREE_GRID
        sets, n_trials, fig_trials = tuple(d.name for d in DATASETS), 20, 5
        curve_L = (10, 20, 50, 100, 200, 500, 1000)
        curve_Cs, grid_Cs, grid_sigmas = (0.1, 1.0, 10.0, 100.0, 1000.0), Cs, sigmas
        # Fig. 5's Iris and Segment are not in ../shared/data: two multiclass sets stand in
        curve_sets_4, curve_sets_5 = ("australian", "diabetes"), ("svmguide2", "satimage")
        grid_set = "ionosphere"
    if trials is not None:
        n_trials = int(trials)
        fig_trials = min(fig_trials, n_trials)
    tables = tuple(
        Table(name, mapping, _methods(mapping, Cs, sigmas, degrees), sets, n_trials, 5, paper)
        for name, mapping, paper in _TABLES
    )
    sinusoid = _methods("sinusoid", Cs, sigmas, degrees)[1]
    curve_set_23 = ("heart",) if quick else ("ionosphere",)
    curves = (
        CurveFigure(
            "fig2-3",
            "Sparse ELM, sinusoid nodes: accuracy against L",
            sinusoid,
            curve_set_23,
            curve_L,
            curve_Cs,
            fig_trials,
        ),
        CurveFigure(
            "fig4",
            "Sparse ELM, sinusoid nodes, C = 1 (binary)",
            sinusoid,
            curve_sets_4,
            curve_L,
            (1.0,),
            fig_trials,
        ),
        CurveFigure(
            "fig5",
            "Sparse ELM, sinusoid nodes, C = 1 (multiclass)",
            sinusoid,
            curve_sets_5,
            curve_L,
            (1.0,),
            fig_trials,
        ),
    )
    gaussian = _methods("gaussian", Cs, sigmas, degrees)
    grids = (
        GridFigure(
            "fig6",
            "SVM (gaussian kernel): test accuracy over C x sigma",
            gaussian[0],
            grid_set,
            "sigma",
            tuple(grid_sigmas),
            tuple(grid_Cs),
            fig_trials,
        ),
        GridFigure(
            "fig7",
            "Sparse ELM (gaussian kernel): test accuracy over C x sigma",
            gaussian[2],
            grid_set,
            "sigma",
            tuple(grid_sigmas),
            tuple(grid_Cs),
            fig_trials,
        ),
    )
    return Protocol(
        name="sparse-elm",
        title="Sparse Extreme Learning Machine for Classification (Bai et al. 2014)",
        datasets=DATASETS,
        tables=tables,
        curves=curves,
        grids=grids,
        reference="elmscale.experiments.papers.sparse_elm:paper_values",
        claims="elmscale.experiments.papers.sparse_elm:claims",
        support_table="Table VIII",
        notes=(
            "SVM is scikit-learn's SVC (LIBSVM) with the paper's kernels: "
            "exp(-||u-v||^2 / (2 sigma^2)) and (u.v + 1)^m.",
            "Our sparse ELM reaches the paper's optimum (KKT tolerance 1e-3) with "
            "LIBSVM-style maximal-violating-variable steps and shrinking, not Algorithm 1's "
            "sweep over variables.",
            "Sets of the paper that are not in ../shared/data (Magic, Colon, Leukemia, "
            "Spambase, Iris, Wine, Vowel, Segment, DNA, USPS) are not run.",
        ),
    )


def paper_values(reference_dir: Path) -> pd.DataFrame:
    """Tables IV-VIII as one frame, in our data-set names: (table, dataset, method,
    mapping) -> train/test accuracy (mean, std; blank where the paper prints none),
    times, support vectors."""
    ours = {d.paper_name: d.name for d in DATASETS if d.paper_name}
    tables = {paper: name for name, _, paper in _TABLES}
    results = pd.read_csv(Path(reference_dir) / "sparse_elm_paper_results.csv")
    support = pd.read_csv(Path(reference_dir) / "sparse_elm_paper_support_vectors.csv")
    keys = ["dataset", "method", "mapping"]
    frame = results.merge(support[[*keys, "n_support"]], on=keys, how="left")
    frame = frame[frame["dataset"].isin(list(ours))]
    return frame.assign(
        table=frame["table"].map(tables), dataset=frame["dataset"].map(ours)
    ).reset_index(drop=True)


#: the paper's "large size" binary sets (Table I) that are in ../shared/data
LARGE_SETS = ("mushrooms", "svmguide1", "cod-rna", "a9a")


def claims(summary: pd.DataFrame, results: pd.DataFrame, timings: pd.DataFrame, **_):
    """The paper's headline claims, each judged on this run (Wilcoxon signed-rank over
    the (data set, mapping) means; one-sided in the claim's direction)."""
    from elmscale.experiments.stats import wilcoxon_signed_rank

    def paired(method_a, method_b, column, datasets=None):
        a = summary[summary["method"] == method_a].set_index(["dataset", "mapping"])[column]
        b = summary[summary["method"] == method_b].set_index(["dataset", "mapping"])[column]
        both = a.index.intersection(b.index)
        if datasets is not None:
            both = [k for k in both if k[0] in datasets]
        return a.loc[both].to_numpy(float), b.loc[both].to_numpy(float)

    out = []
    for text, (a, b, column, datasets) in {
        "the sparse ELM needs fewer support vectors than the SVM on most sets": (
            "sparse_elm",
            "SVM",
            "n_support",
            None,
        ),
        "the sparse ELM trains faster than the unified ELM on the large sets": (
            "sparse_elm",
            "unified_elm",
            "train_time_s",
            LARGE_SETS,
        ),
        "the sparse ELM tests faster than the unified ELM": (
            "sparse_elm",
            "unified_elm",
            "test_time_s",
            None,
        ),
    }.items():
        x, y = paired(a, b, column, datasets)
        if len(x) == 0:
            out.append({"claim": text, "pairs": 0, "wins": 0, "holds": None, "p_value": None})
            continue
        wins = int(np.sum(x < y))
        _, p = wilcoxon_signed_rank(x, y, alternative="less")
        out.append(
            {
                "claim": text,
                "pairs": len(x),
                "wins": wins,
                "holds": bool(wins > len(x) / 2 and p < 0.05),
                "p_value": float(p),
            }
        )
    return pd.DataFrame(out)
