"""Model files written by an earlier release load and predict as they did when written.

``tests/fixtures/models/*.elm`` were written by elmscale 0.1.0 (format version 1) before
the package was split into subpackages (``make_fixtures.py`` beside them shows how); each
``.npz`` holds the rows and the predictions the model gave then.
"""

from pathlib import Path

import numpy as np
import pytest

import elmscale

FIXTURES = Path(__file__).parent / "fixtures" / "models"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.elm"))


def test_every_fixture_has_its_expected_outputs():
    assert len(NAMES) == 4
    assert all((FIXTURES / f"{name}.npz").is_file() for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_an_earlier_release_model_file_loads_and_predicts_the_same(name):
    model = elmscale.load(FIXTURES / f"{name}.elm")
    expected = np.load(FIXTURES / f"{name}.npz", allow_pickle=False)
    X = expected["X"]
    predicted = model.predict(X)
    if np.issubdtype(expected["predict"].dtype, np.floating):
        # A regressor's outputs are sums of kernel values: the kernel's summation order
        # (features taken four per pass since the release) moves them by an ulp or two.
        np.testing.assert_allclose(predicted, expected["predict"], rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(predicted, expected["predict"])
    if "decision_function" in expected:
        np.testing.assert_allclose(
            model.decision_function(X),
            expected["decision_function"],
            rtol=1e-12,
            atol=_float32_nodes_bound(model, X),
        )


def _float32_nodes_bound(model, X) -> float:
    """How far other kernels can move a random-node model's decision values: its nodes are
    float32, each pre-activation ``a.x + b`` within (d + 2) 2^-24 of its terms' sizes and
    the node's value (slope at most 1) within that plus two units of its last place, times
    the output weights (issue 49: 5e-7 apart under OpenBLAS Sandybridge and numba
    x86-64-v2).  Kernel models: 1e-12 (float64 values)."""
    final = model.steps[-1][1] if hasattr(model, "steps") else model
    layer = getattr(final, "hidden_layer_", None)
    if layer is None or layer.kind not in ("sigmoid", "sinusoid"):
        return 1e-12
    rows = model[:-1].transform(X) if hasattr(model, "steps") else X
    W, b = np.abs(layer.weights), np.abs(layer.biases)
    sizes = (np.abs(rows) @ W + b).max()
    node = 2.0**-24 * ((rows.shape[1] + 2) * sizes + 2)
    coef = np.abs(np.asarray(final.coef_, dtype=np.float64)).sum(axis=0).max()
    return float(node * coef) + 1e-12


@pytest.mark.parametrize("name", NAMES)
def test_an_earlier_release_model_file_round_trips_in_todays_format(name, tmp_path):
    model = elmscale.load(FIXTURES / f"{name}.elm")
    elmscale.save(model, tmp_path / "again.elm")
    again = elmscale.load(tmp_path / "again.elm")
    X = np.load(FIXTURES / f"{name}.npz", allow_pickle=False)["X"]
    np.testing.assert_array_equal(again.predict(X), model.predict(X))
