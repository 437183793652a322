"""The random-node sparse ELM on a Parquet data set: CoCoA+ rounds on Dask or here."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from _faults import run_killing_a_worker
from sklearn.base import clone

from elmscale import SparseELMClassifier, open_parquet
from elmscale.core.threads import blas_controller, blas_limits, thread_budget
from elmscale.data import write_generated_parquet
from elmscale.distributed import cocoa, dataplane
from elmscale.distributed.cocoa import fit_cocoa

TOL = 1e-3


@pytest.fixture(scope="module")
def binary_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("cocoa") / "binary"
    write_generated_parquet(
        out, 20_000, 6, 2, random_state=3, rows_per_file=5_000, row_group_size=2_500
    )
    return open_parquet(out, label="label")


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory):
    out = tmp_path_factory.mktemp("cocoa") / "three"
    write_generated_parquet(
        out, 15_000, 5, 3, random_state=4, rows_per_file=5_000, row_group_size=2_500
    )
    return open_parquet(out, label="label")


def _model(**kw):
    # CoCoA+'s rounds grow as rows per hidden node shrink (measured: 20,000 x 20 nodes, 2
    # blocks: 1-3 rounds to a gap of 1e-3; 6,000 x 40: 262): a thousand rows a node
    params = {"hidden": "sigmoid", "n_hidden": 20, "C": 1.0, "tol": TOL, "random_state": 0}
    params.update(kw)
    return SparseELMClassifier(**params)


def test_dask_rounds_equal_the_same_rounds_here_and_close_the_gap(binary_set, dask_client):
    here = _model().fit(binary_set, n_blocks=2)
    there = _model().fit(binary_set, client=dask_client)  # two one-thread workers: 2 blocks
    np.testing.assert_array_equal(there.coef_, here.coef_)
    np.testing.assert_array_equal(there.support_, here.support_)
    assert there.converged_.all() and (there.duality_gap_ <= TOL).all()
    assert there.n_iter_[0] >= 1 and there.round_seconds_.size == there.n_iter_[0] + 1
    X, y = binary_set.read()
    np.testing.assert_array_equal(
        dataplane.predict(there, binary_set, client=dask_client), there.predict(X)
    )
    assert there.n_support_.sum() == there.support_.size > 0


def _blas_threads_after(pause, *, n_threads):
    """Inside a block's own thread budget: BLAS's thread count ``pause`` s in."""
    with thread_budget(n_threads):
        time.sleep(pause)
        return max(pool["num_threads"] for pool in blas_controller().info())


def test_blocks_here_keep_one_blas_thread_while_another_block_ends():
    # BLAS limits are process-wide: a block that ended first once restored the caller's
    # two threads under the block still running, whose sums (so bits) then differed from
    # the workers' (CI: coef_ 5e-14 apart)
    if not blas_controller().info():
        pytest.skip("no BLAS library with a thread pool is loaded")
    with blas_limits(2):
        seen = cocoa._on_blocks(None, None, [0.0, 0.5], _blas_threads_after, n_threads=2)
    assert seen == [1, 1]


def test_the_objective_is_the_single_process_solvers_within_tol(binary_set):
    X, y = binary_set.read()
    cocoa = _model().fit(binary_set, n_blocks=2)
    single = _model(tol=1e-4).fit(X, y)
    np.testing.assert_array_equal(cocoa.hidden_layer_.weights, single.hidden_layer_.weights)
    # the dual is minimised: ours lies above the optimum by at most the gap (tol P ~ tol |D|)
    rel = (cocoa.objective_ - single.objective_) / np.abs(single.objective_)
    assert np.all(rel > -1e-6) and np.all(rel <= 1.5 * TOL), rel
    agree = np.mean(cocoa.predict(X) == single.predict(X))
    assert agree > 0.98, agree
    # one block is the single-process problem itself: one round solves it
    one = _model().fit(binary_set, n_blocks=1)
    assert one.n_iter_[0] <= 2
    assert abs(one.objective_[0] - single.objective_[0]) <= TOL * abs(single.objective_[0])


def test_three_classes_one_vs_one_on_dask(three_classes, dask_client):
    X, y = three_classes.read()
    there = _model(n_hidden=15).fit(three_classes, client=dask_client)
    here = _model(n_hidden=15).fit(three_classes, n_blocks=2)
    np.testing.assert_array_equal(there.coef_, here.coef_)
    assert there.coef_.shape == (15, 3) and there.pairs_.tolist() == [[0, 1], [0, 2], [1, 2]]
    single = _model(n_hidden=15).fit(X, y)
    assert np.mean(there.predict(X) == single.predict(X)) > 0.97
    assert abs(np.mean(there.predict(X) == y) - np.mean(single.predict(X) == y)) <= 0.01


def test_state_folder_is_emptied_and_bad_calls_are_named(binary_set, tmp_path, dask_client):
    state = tmp_path / "state"
    with pytest.warns(Warning, match="CoCoA"):
        capped = _model(max_iter=2, tol=1e-9).fit(binary_set, n_blocks=2, state_dir=state)
    assert capped.n_iter_[0] == 2 and not capped.converged_.any()
    assert list(state.iterdir()) == []
    X, y = binary_set.read()
    with pytest.raises(ValueError, match="y must be None"):
        _model().fit(binary_set, y)
    with pytest.raises(ValueError, match="client is used with a ParquetDataset"):
        _model().fit(X, y, client=dask_client)
    with pytest.raises(ValueError, match="local_passes"):
        _model().fit(binary_set, local_passes=0)
    with pytest.raises(ValueError, match="n_blocks"):
        _model().fit(binary_set, n_blocks=0)
    layer = {"kind": "sigmoid", "n_features": 6, "n_hidden": 20, "seed": 0}
    for cap in (-1, 2.5):  # -1 reached unbound variables after running no round
        with pytest.raises(ValueError, match="max_rounds must be an integer >= 0"):
            fit_cocoa(binary_set, layer, [0, 1], C=1.0, tol=TOL, max_rounds=cap)


def test_a_kernel_model_gathers_the_rows(tmp_path, dask_client):
    write_generated_parquet(tmp_path, 3_000, 6, 2, random_state=5, rows_per_file=1_000)
    small = open_parquet(tmp_path, label="label")
    X, y = small.read()
    kernel = SparseELMClassifier(sigma=1.0, C=1.0)
    gathered = clone(kernel).fit(small, client=dask_client)
    np.testing.assert_array_equal(gathered.dual_coef_, clone(kernel).fit(X, y).dual_coef_)


def test_small_cache_streams_units_to_the_same_optimum(binary_set):
    # 20,000 rows x 20 nodes is ~2 MB: a 0.3 MB cache makes every block stream its units
    streamed = _model().fit(binary_set, n_blocks=2, cache_mb=0.3)
    whole = _model().fit(binary_set, n_blocks=2)
    assert streamed.converged_.all()
    rel = abs(streamed.objective_[0] - whole.objective_[0]) / abs(whole.objective_[0])
    assert rel <= 2 * TOL


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_worker_killed_during_a_round_does_not_change_the_fit(binary_set, dask_client):
    model = _model(tol=1e-12, max_iter=60)  # 60 rounds: the kill lands in one
    # two blocks whatever the cluster counts while a worker is being replaced
    reference = clone(model).fit(binary_set, client=dask_client, n_blocks=2)
    # past the column statistics, in the rounds
    fitted = run_killing_a_worker(
        dask_client,
        lambda: clone(model).fit(binary_set, client=dask_client, n_blocks=2),
        settle=0.3,
    )
    np.testing.assert_array_equal(fitted.coef_, reference.coef_)


PIPELINE = """
[run]
name = "cocoa"
task = "train"
seed = 2
[data]
train = "{d}/train"
test = "{d}/test"
label = "label"
generate = {{ rows = 20000, test_rows = 4000, features = 6 }}
[model]
estimator = "SparseELMClassifier"
params = {{ hidden = "sigmoid", n_hidden = 20 }}
[output]
dir = "{d}/runs"
"""


@pytest.mark.timeout(600)
def test_a_pipeline_trains_the_random_node_sparse_elm_on_parquet(tmp_path):
    import json
    import subprocess
    import sys

    from elmscale import load

    path = tmp_path / "cocoa.toml"
    path.write_text(PIPELINE.format(d=tmp_path))
    env = {
        k: v for k, v in os.environ.items() if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS")
    }
    done = subprocess.run(
        [sys.executable, "-m", "elmscale", "run", str(path)],
        capture_output=True,
        text=True,
        timeout=540,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").iterdir()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["train_rows"] == 20_000
    model = load(run_dir / "model.elm")
    final = model[-1] if hasattr(model, "steps") else model
    assert final.duality_gap_.max() <= final.tol and final.support_vectors_.shape[0] == 0
    assert metrics["test"]["accuracy"] > 0.8, metrics["test"]


def test_the_cache_budget_bounds_a_process_holding_two_blocks(tmp_path):
    """Two blocks here, each fitting ``cache_mb`` alone but not together: the plan goes
    unit by unit, so the hidden outputs held stay within the budget plus the unit each
    thread works on (before: each block checked against the whole budget, both held whole,
    twice it)."""
    import tracemalloc

    write_generated_parquet(tmp_path, 20_000, 6, 2, random_state=3, rows_per_file=1_250)
    data = open_parquet(tmp_path, label="label")  # 16 units of 1,250 rows
    n_hidden = 200
    layer = {"kind": "sigmoid", "n_features": 6, "n_hidden": n_hidden, "seed": 0}
    unit_bytes = 1_250 * (4 * n_hidden + 8)
    budget = 1.05 * 8 * unit_bytes  # a block of 8 units fits, two do not

    def fit(**kw):
        # one pass a round: no exact tail, whose dense Q_AA would dwarf the outputs here
        # no warm start: its sample solve holds its own (bounded) memory on the coordinator
        return fit_cocoa(
            data, layer, [0, 1], C=1.0, tol=TOL, n_blocks=2, local_passes=1, warm_rows=0, **kw
        )

    fit(max_rounds=0, cache_mb=0.1)  # compiled before counting
    tracemalloc.start()
    try:
        result = fit(cache_mb=budget / 2**20, max_rounds=2, n_threads=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= budget + 2 * unit_bytes + 2**20, (peak, budget, unit_bytes)
    assert not result.whole_blocks
    assert fit(max_rounds=0).whole_blocks  # both blocks fit the default 1 GB together


def test_support_rows_stay_out_of_the_coordinators_memory(three_classes, tmp_path):
    """The coordinator receives support counts only; the rows' numbers are joined from the
    workers' files into one file that is memory-mapped and unlinked (nothing left on
    disk), so its memory does not grow with them (issue 31: 547 MB at 10M rows, 787 MB
    at 20M).  The rows are those whose dual variables are positive, as before."""
    import glob
    import tempfile

    state = tmp_path / "state"
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "elmscale-support-*")))
    model = _model(n_hidden=10, max_iter=3).fit(three_classes, n_blocks=2, state_dir=state)
    support = model.support_
    assert isinstance(support, np.memmap) and not support.flags.writeable
    assert not os.path.exists(support.filename)  # unlinked once mapped
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "elmscale-support-*"))) == before
    assert sorted(os.listdir(state)) == []  # the units' support files are removed too
    assert support.dtype == np.int64 and np.all(np.diff(support) > 0)
    assert model.n_support_.sum() == support.size > 5_000  # most rows of 15,000
    # per class: the counts the coordinator summed are the rows' labels'
    _, y = three_classes.read()
    np.testing.assert_array_equal(
        model.n_support_, [np.sum(y[np.asarray(support)] == c) for c in model.classes_]
    )


def test_joining_the_support_files_holds_one_unit_at_a_time(three_classes, tmp_path):
    """Every row a support vector (the units' dual variables written as after a round):
    joining their numbers allocates one unit's worth at a time, not the whole support."""

    from elmscale.distributed.cocoa import (
        CocoaProblem,
        _count_support,
        _save_alpha,
    )

    units = three_classes.units(6)
    assert len(units) == 6
    problem = CocoaProblem(
        layer={},
        classes=(0, 1, 2),
        pairs=((0, 1), (0, 2), (1, 2)),
        C=1.0,
        sigma_prime=1.0,
        local_passes=1,
        local_tol=TOL,
        seed=0,
        state_dir=str(tmp_path),
        fit_id="t",
        cache_mb=0.0,
        whole_blocks=False,
    )
    for unit in units:
        _save_alpha(problem, unit, 1, np.ones((3, unit.n_rows)))
    counts = _count_support(None, units, 1, problem)
    assert counts.sum() == three_classes.n_rows
    # measured in a fresh interpreter: tracemalloc sees every thread, and this one's
    # Dask / Ray sessions allocate in the background
    script = (
        "import pickle, sys, tracemalloc\n"
        "import numpy as np\n"
        "from elmscale.distributed.cocoa import _support_rows\n"
        "units, problem, n_rows = pickle.load(open(sys.argv[1], 'rb'))\n"
        "tracemalloc.start()\n"
        "support = _support_rows(units, problem, n_rows)\n"
        "peak = tracemalloc.get_traced_memory()[1]\n"
        "print(peak, int(np.array_equal(support, np.arange(support.size))), support.size)\n"
    )
    inputs = tmp_path / "inputs.pkl"
    inputs.write_bytes(__import__("pickle").dumps((units, problem, int(counts.sum()))))
    run = __import__("subprocess").run(
        [__import__("sys").executable, "-c", script, str(inputs)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(__import__("sys").path)},
    )
    assert run.returncode == 0, run.stderr
    peak, in_order, size = (int(x) for x in run.stdout.split())
    assert in_order and size == three_classes.n_rows
    # one unit's rows (20 kB here) and the file objects' buffers, not the 120 kB of all
    assert peak < size * 8 / 2, (peak, size * 8)


@pytest.mark.parametrize("n_blocks", [2, 4])
def test_the_warm_start_takes_fewer_rounds_to_the_same_objective(three_classes, n_blocks):
    """Round 0 from the duals a sample's solution implies (issue 31 item 1) against every
    dual at zero: fewer rounds, the same objective within tol, three pairs."""
    cold = _model(n_hidden=10).fit(three_classes, n_blocks=n_blocks)  # from zero, the default
    warm = _model(n_hidden=10).fit(three_classes, n_blocks=n_blocks, warm_rows="auto")
    assert cold.converged_.all() and warm.converged_.all()
    assert warm.n_iter_[0] < cold.n_iter_[0], (warm.n_iter_, cold.n_iter_)
    # both within tol of the optimum: their dual objectives within tol of each other
    np.testing.assert_allclose(warm.objective_, cold.objective_, rtol=2 * TOL)


def test_warm_rows_is_checked():
    with pytest.raises(ValueError, match="warm_rows must be 'auto' or an integer >= 0"):
        fit_cocoa(None, {"n_hidden": 5}, [0, 1], C=1.0, tol=TOL, warm_rows=-1)
