"""The sparse ELM against the paper's Tables IV (gaussian) and V (polynomial), by its protocol.

Protocol (tests/_paper_protocol.py): a seeded random split of the paper's
sizes, scaling fitted on the training part, (C, sigma) or (C, degree) chosen
by 5-fold stratified cross-validation over the paper's whole grid on the
training part (``path_grid_search`` with the sparse ELM's warm-started
``fit_path``), accuracy on the test part.  Target: within 2 points of the
paper's sparse-ELM figure or better.

Australian and Diabetes run one seed (0); Ionosphere, whose 175 test rows make
one seed noisy (88.0 to 94.3 % over seeds 0-4 with the gaussian kernel), runs
five and is judged on the mean.  SVMguide1 and Satimage use their own test
files (one split); Satimage, 6 classes and 15 one-vs-one pairs, on a coarser
grid: every other C and sigma of the paper's (7 x 7; 7 C x 5 degrees).  Heart
(the paper used a fixed partition, see test_paper_unified_elm.py) is left to
the parity test at the paper's own parameters.

COD-RNA at the paper's stated parameters (C=1, sigma=0.5, split 29,768 /
29,767) must reach 94.4 % (the paper: 94.44 %).
"""

import numpy as np
import pytest
from _datasets import shared_data
from _paper_protocol import paper_test_accuracy, protocol_run

from elmscale import SparseELMClassifier
from elmscale.data import Scaler, load
from elmscale.model_selection import PAPER_C_GRID, PAPER_DEGREE_GRID, PAPER_SIGMA_GRID

pytestmark = pytest.mark.needs_shared

TOLERANCE = 2.0
SEEDS = {"Ionosphere": range(5)}
COARSE = {"Satimage"}  # every other C and sigma of the paper's grid


@pytest.mark.slow
@pytest.mark.parametrize("mapping", ["gaussian", "polynomial"])
@pytest.mark.parametrize("name", ["Australian", "Diabetes", "Ionosphere", "SVMguide1", "Satimage"])
def test_sparse_elm_reaches_the_papers_accuracy(name, mapping):
    step = 2 if name in COARSE else 1
    if mapping == "gaussian":
        model, table = SparseELMClassifier(), "TABLE IV"
        grid = {"sigma": list(PAPER_SIGMA_GRID[::step])}
    else:
        model = SparseELMClassifier(kernel="polynomial")
        grid, table = {"degree": list(PAPER_DEGREE_GRID)}, "TABLE V"
    runs = [
        protocol_run(name, model, grid, seed=seed, Cs=PAPER_C_GRID[::step])
        for seed in SEEDS.get(name, [0])
    ]
    accuracy = float(np.mean([acc for acc, _ in runs]))
    paper = paper_test_accuracy(table, name, "sparse_elm", mapping)
    print(
        f"{name} {mapping}: ours {accuracy:.2f} (seeds: "
        f"{[(round(acc, 2), best) for acc, best in runs]}), paper {paper:.2f}"
    )
    assert accuracy >= paper - TOLERANCE


def test_codrna_at_the_papers_parameters():
    data = load(shared_data("cod-rna/codrna.csv"))
    order = np.random.default_rng(0).permutation(data.n_samples)
    assert data.n_samples == 59_535
    train, test = order[:29_768], order[29_768:]
    scaler = Scaler().fit(data.X[train])
    model = SparseELMClassifier(kernel="gaussian", sigma=0.5, C=1.0)
    model.fit(scaler.transform(data.X[train]), data.y[train])
    accuracy = 100 * model.score(scaler.transform(data.X[test]), data.y[test])
    print(
        f"COD-RNA C=1 sigma=0.5: {accuracy:.2f} %, {model.support_.size} SVs "
        f"(paper: 94.44 %, 11,359 SVs)"
    )
    assert model.kkt_violation_[0] <= 1e-3
    assert accuracy >= 94.4
