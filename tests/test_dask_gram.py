"""The ELM's Gram reduction on a real Dask LocalCluster reports its breakdown (issue 53):
``gram_timings_``, one row per pass, columns ``breakdown.PASS_COLUMNS``."""

import numpy as np
import pytest
from sklearn.base import clone

from elmscale import ELMClassifier, ELMRegressor, dataplane, open_parquet
from elmscale.data import generate_classification, write_parquet
from elmscale.distributed.breakdown import PASS_COLUMNS, breakdown_table
from elmscale.features.layers import HiddenLayer

COLUMN = {name: i for i, name in enumerate(PASS_COLUMNS)}


@pytest.fixture(scope="module")
def six_units(tmp_path_factory):
    """6,000 generated rows in 3 files, 6 units of 1,000 rows."""
    data = generate_classification(6_000, n_features=8, random_state=5)
    folder = tmp_path_factory.mktemp("gram")
    for i in range(3):
        rows = slice(2_000 * i, 2_000 * (i + 1))
        write_parquet(data.X[rows], folder / f"part-{i}.parquet", y=data.y[rows])
    return open_parquet(folder, label="label").with_units(6)


def test_the_gram_reduction_on_dask_reports_its_breakdown(six_units, dask_client):
    """The busiest worker's compute (Dask's task stream) and its thread CPU (Dask's own
    per-worker metric) within the pass's wall time, the wait the map's time beyond that
    compute, the bytes each way: the units sent, the L x L Gram back."""
    model = ELMClassifier(n_hidden=40, random_state=0).fit(six_units, client=dask_client)
    timings = model.gram_timings_
    assert timings.shape == (1, len(PASS_COLUMNS)) and timings.dtype == np.float64
    assert np.isfinite(timings).all() and (timings >= 0).all()
    row = timings[0]
    compute, wall = row[COLUMN["compute_s"]], row[COLUMN["seconds"]]
    assert 0 < compute <= row[COLUMN["map_s"]] <= wall
    assert 0 < row[COLUMN["cpu_s"]] <= compute + 1e-3  # (thread CPU is within its wall)
    np.testing.assert_allclose(compute + row[COLUMN["wait_s"]], row[COLUMN["map_s"]])
    assert row[COLUMN["map_s"]] + row[COLUMN["coordinator_s"]] <= wall + 1e-9
    assert row[COLUMN["bytes_sent"]] > 0
    # back here: the Gram (H'H 40 x 40 and H'Y 40 x 2, float64), with Dask's framing
    gram_bytes = 8 * 40 * (40 + 2)
    assert gram_bytes <= row[COLUMN["bytes_returned"]] < 2 * gram_bytes
    assert len(breakdown_table(timings).splitlines()) == 1 + 3


def test_the_breakdown_here_and_what_it_leaves_out(six_units, dask_client):
    """Without a client: the wall time and this process's CPU, no task stream (compute and
    wait NaN), no bytes.  A fit from arrays has no Gram pass: a Parquet fit's record does
    not outlive a refit.  The record is not part of the model: the cluster's fit and this
    process's agree in everything else within the sums' rounding."""
    here = ELMRegressor(n_hidden=30, random_state=0).fit(six_units)
    row = here.gram_timings_[0]
    assert np.isnan(row[[COLUMN["compute_s"], COLUMN["wait_s"]]]).all()
    assert 0 < row[COLUMN["map_s"]] <= row[COLUMN["seconds"]]
    assert row[COLUMN["cpu_s"]] > 0
    assert row[COLUMN["bytes_sent"]] == row[COLUMN["bytes_returned"]] == 0
    there = clone(here).fit(six_units, client=dask_client)
    np.testing.assert_allclose(there.coef_, here.coef_, rtol=1e-9, atol=1e-12)
    X, y = six_units.read()
    here.fit(X, y)
    assert not hasattr(here, "gram_timings_")


def test_dataplane_gram_appends_one_record_per_reduction(six_units, dask_client):
    layer = HiddenLayer("sigmoid", 8, 20, 0)
    timings: list = []
    first = dataplane.gram(six_units, layer, client=dask_client, timings=timings)
    second = dataplane.gram(six_units, layer, client=dask_client, timings=timings, n_folds=3)
    assert len(timings) == 2 and set(timings[0]) == set(PASS_COLUMNS)
    np.testing.assert_allclose(second.total().HtH, first.total().HtH, rtol=1e-12)
