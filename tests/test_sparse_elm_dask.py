"""The random-node sparse ELM on a Parquet data set: primal Newton passes finished on the
exact dual, on Dask or on this process's threads."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
from _faults import run_killing_a_worker
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning

from elmscale import SparseELMClassifier, open_parquet
from elmscale.core.threads import blas_controller, blas_limits, thread_budget
from elmscale.data import write_generated_parquet
from elmscale.distributed import dataset_ops, newton
from elmscale.features.layers import HiddenLayer

TOL = 1e-3


@pytest.fixture(scope="module")
def binary_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("newton") / "binary"
    write_generated_parquet(
        out, 20_000, 6, 2, random_state=3, rows_per_file=5_000, row_group_size=2_500
    )
    return open_parquet(out, label="label")


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory):
    out = tmp_path_factory.mktemp("newton") / "three"
    write_generated_parquet(
        out, 15_000, 5, 3, random_state=4, rows_per_file=5_000, row_group_size=2_500
    )
    return open_parquet(out, label="label")


def _model(**kw):
    params = {"hidden": "sigmoid", "n_hidden": 20, "C": 1.0, "tol": TOL, "random_state": 0}
    params.update(kw)
    return SparseELMClassifier(**params)


def _primal(model, X, y):
    """Each pair's primal ``1/2 |beta|^2 + C sum hinge`` from the model, in float64."""
    H = model.hidden_layer_.transform(X, dtype=np.float64)
    out = []
    for p, (a, b) in enumerate(model.pairs_):
        rows = np.isin(y, model.classes_[[a, b]])
        t = np.where(y[rows] == model.classes_[a], 1.0, -1.0)
        beta = model.coef_[:, p]
        out.append(0.5 * beta @ beta + model.C * np.maximum(0.0, 1.0 - t * (H[rows] @ beta)).sum())
    return np.array(out)


def test_dask_passes_equal_the_blocked_passes_here_to_the_bit(binary_set, dask_client):
    here = _model().fit(binary_set, n_blocks=2)
    there = _model().fit(binary_set, client=dask_client)  # two one-thread workers
    np.testing.assert_array_equal(there.coef_, here.coef_)
    np.testing.assert_array_equal(there.support_, here.support_)
    np.testing.assert_array_equal(there.n_iter_, here.n_iter_)
    # the passes are exact map-reduces summed in unit order: the blocks change nothing
    for n_blocks in (1, 3, 8):
        other = _model().fit(binary_set, n_blocks=n_blocks)
        np.testing.assert_array_equal(other.coef_, here.coef_)
    assert there.converged_.all() and (there.kkt_violation_ <= TOL).all()
    # n_iter_ is the passes over the data, each timed
    assert 3 <= there.n_iter_[0] == there.pass_seconds_.size < 100
    X, y = binary_set.read()
    np.testing.assert_array_equal(
        dataset_ops.predict(there, binary_set, client=dask_client), there.predict(X)
    )
    assert there.n_support_.sum() == there.support_.size > 0


def test_each_pass_breakdown_and_the_blocks_sums_made_on_the_workers(binary_set, dask_client):
    """``pass_timings_``: per pass the slowest block's compute (Dask's task stream) and CPU,
    the wait and the coordinator's work within the pass's wall time.  Each block adds its
    units' answers (2 units a block here) before they travel: a pass brings back one answer
    per block, half of what one block per unit brings back."""
    there = _model().fit(binary_set, client=dask_client)
    per_unit = _model().fit(binary_set, n_blocks=len(binary_set.units()))
    assert len(binary_set.units()) == 4 and len(dask_client.nthreads()) == 2
    column = {name: i for i, name in enumerate(newton.PASS_COLUMNS)}
    timings, here = there.pass_timings_, per_unit.pass_timings_
    assert timings.shape == (there.n_iter_[0], len(newton.PASS_COLUMNS))
    np.testing.assert_array_equal(timings[:, column["seconds"]], there.pass_seconds_)
    seconds, wait = timings[:, column["seconds"]], timings[:, column["wait_s"]]
    compute, mapped = timings[:, column["compute_s"]], timings[:, column["map_s"]]
    assert (compute > 0).all() and (timings[:, column["cpu_s"]] > 0).all()
    np.testing.assert_allclose(compute + wait, mapped, atol=1e-9)
    assert (mapped + timings[:, column["coordinator_s"]] <= seconds + 1e-9).all()
    assert (timings[:, column["bytes_sent"]] > 0).all()
    assert np.isnan(here[:, column["compute_s"]]).all()  # no task stream without a client
    assert (here[:, column["bytes_sent"]] == 0).all()
    # the phase-1 passes (every row, the same answers' shapes): 2 answers against 4 (Dask
    # counts a little framing around arrays of 20 x 20; each unit's answer sent would be 1x)
    back = column["bytes_returned"]
    ratio = timings[:3, back] / here[:3, back]
    assert ((0.5 <= ratio) & (ratio < 0.7)).all(), ratio
    table = newton.breakdown_table(timings)
    assert len(table.splitlines()) == there.n_iter_[0] + 3


def test_the_certified_gap_and_the_single_process_optimum(binary_set):
    X, y = binary_set.read()
    fitted = _model().fit(binary_set)
    single = _model(tol=1e-4).fit(X, y)
    np.testing.assert_array_equal(fitted.hidden_layer_.weights, single.hidden_layer_.weights)
    # the gap, recomputed here from the model alone: P(beta) + D(alpha) over P
    primal = _primal(fitted, X, y)
    gap = (primal + fitted.objective_) / primal
    np.testing.assert_allclose(gap, fitted.duality_gap_, rtol=1e-3, atol=1e-9)
    assert np.all(gap >= -1e-9) and np.all(gap <= TOL), gap
    # the dual is minimised: the same optimum as the dual solver's, within tol
    rel = (fitted.objective_ - single.objective_) / np.abs(single.objective_)
    assert np.all(np.abs(rel) <= TOL), rel
    assert np.mean(fitted.predict(X) == single.predict(X)) > 0.99
    # phase 2 gathered the rows near the margin: a few per hidden node, not the set
    assert 0 < fitted.n_gathered_[0] < 0.1 * X.shape[0]


def test_three_classes_one_vs_one_on_dask(three_classes, dask_client):
    X, y = three_classes.read()
    there = _model(n_hidden=15).fit(three_classes, client=dask_client)
    here = _model(n_hidden=15).fit(three_classes, n_blocks=2)
    np.testing.assert_array_equal(there.coef_, here.coef_)
    assert there.coef_.shape == (15, 3) and there.pairs_.tolist() == [[0, 1], [0, 2], [1, 2]]
    assert there.converged_.all() and there.n_iter_.shape == (3,)
    single = _model(n_hidden=15, tol=1e-4).fit(X, y)
    rel = (there.objective_ - single.objective_) / np.abs(single.objective_)
    assert np.all(np.abs(rel) <= TOL), rel
    assert np.mean(there.predict(X) == single.predict(X)) > 0.98


def test_many_rows_on_the_margin_still_converge(tmp_path):
    """300 distinct rows, each 40 times: every copy of a free support vector lies on the
    margin, so phase 2 gathers thousands of rows, and still ends at the optimum."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    base = rng.uniform(-1, 1, size=(300, 4)).astype(np.float32)
    labels = np.where(base[:, 0] * base[:, 1] + 0.3 * rng.standard_normal(300) > 0, 1, 0)
    X = np.repeat(base, 40, axis=0)
    y = np.repeat(labels, 40)
    table = pa.table({**{f"x{j}": X[:, j] for j in range(4)}, "label": y})
    pq.write_table(table, tmp_path / "part-0.parquet", row_group_size=3_000)
    data = open_parquet(tmp_path, label="label")
    fitted = _model(n_hidden=30, C=10.0).fit(data)
    single = _model(n_hidden=30, C=10.0, tol=1e-4).fit(X, y)
    assert fitted.converged_.all() and fitted.kkt_violation_[0] <= TOL
    assert fitted.n_gathered_[0] >= 10 * 30  # many rows on (or near) the margin: 40 copies each
    rel = (fitted.objective_ - single.objective_) / np.abs(single.objective_)
    assert abs(rel[0]) <= TOL, rel


def test_state_folder_is_emptied_and_bad_calls_are_named(binary_set, tmp_path, dask_client):
    state = tmp_path / "state"
    with pytest.warns(ConvergenceWarning, match="Newton"):
        capped = _model(max_iter=2).fit(binary_set, n_blocks=2, state_dir=state)
    assert capped.n_iter_[0] == 2 and not capped.converged_.any()
    assert list(state.iterdir()) == []
    X, y = binary_set.read()
    with pytest.raises(ValueError, match="y must be None"):
        _model().fit(binary_set, y)
    with pytest.raises(ValueError, match="client is used with a ParquetDataset"):
        _model().fit(X, y, client=dask_client)
    with pytest.raises(ValueError, match="n_blocks"):
        _model().fit(binary_set, n_blocks=0)
    with pytest.raises(ValueError, match="cache_mb"):
        _model().fit(binary_set, cache_mb=-1)


def test_a_kernel_model_gathers_the_rows(tmp_path, dask_client):
    write_generated_parquet(tmp_path, 3_000, 6, 2, random_state=5, rows_per_file=1_000)
    small = open_parquet(tmp_path, label="label")
    X, y = small.read()
    kernel = SparseELMClassifier(sigma=1.0, C=1.0)
    gathered = clone(kernel).fit(small, client=dask_client)
    np.testing.assert_array_equal(gathered.dual_coef_, clone(kernel).fit(X, y).dual_coef_)


def test_a_cache_too_small_streams_units_to_the_same_bits(binary_set):
    # 20,000 rows x 20 nodes is ~2 MB: a 0.3 MB cache computes most units at every pass
    streamed = _model().fit(binary_set, n_blocks=2, cache_mb=0.3)
    whole = _model().fit(binary_set, n_blocks=2)
    np.testing.assert_array_equal(streamed.coef_, whole.coef_)


def _blas_threads_after(block, *, n_threads):
    """Inside a block's own thread budget: BLAS's thread count ``block`` s in."""
    with thread_budget(n_threads):
        time.sleep(block)
        return max(pool["num_threads"] for pool in blas_controller().info())


def test_blocks_here_keep_one_blas_thread_while_another_block_ends():
    # BLAS limits are process-wide: a block that ended first once restored the caller's
    # two threads under the block still running, whose sums (so bits) then differed from
    # the workers'
    if not blas_controller().info():
        pytest.skip("no BLAS library with a thread pool is loaded")
    with blas_limits(2):
        seen = newton._on_blocks(None, None, [0.0, 0.5], _blas_threads_after, n_threads=2)
    assert seen == [1, 1]


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_worker_killed_during_a_pass_does_not_change_the_fit(tmp_path, dask_client):
    # 200,000 rows and no cache: every pass reads and maps its units again, so the fit
    # lasts seconds and the kill lands in its passes (on 20,000 rows it could finish first)
    write_generated_parquet(tmp_path, 200_000, 6, 2, random_state=8, rows_per_file=50_000)
    data = open_parquet(tmp_path, label="label")
    model = _model(n_hidden=100)
    reference = clone(model).fit(data, client=dask_client, n_blocks=2, cache_mb=0)

    def problem_holder():
        # the worker holding the fit's problem (the task result the passes' tasks take),
        # its only copy where the other worker has not fetched it yet: computed again
        held = dask_client.run_on_scheduler(
            lambda dask_scheduler: [
                ws.address
                for key, ts in dask_scheduler.tasks.items()
                if str(key).startswith("_the_problem-")
                for ws in ts.who_has
            ]
        )
        assert held, "the fit's problem is held nowhere"
        return held[0]

    fitted = run_killing_a_worker(
        dask_client,
        lambda: clone(model).fit(data, client=dask_client, n_blocks=2, cache_mb=0),
        settle=0.5,
        choose=problem_holder,
    )
    np.testing.assert_array_equal(fitted.coef_, reference.coef_)
    np.testing.assert_array_equal(fitted.support_, reference.support_)
    np.testing.assert_array_equal(fitted.n_iter_, reference.n_iter_)


PIPELINE = """
[run]
name = "newton"
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

    path = tmp_path / "newton.toml"
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
    assert final.kkt_violation_.max() <= final.tol and final.support_vectors_.shape[0] == 0
    assert metrics["test"]["accuracy"] > 0.8, metrics["test"]


def test_the_cache_budget_bounds_the_hidden_outputs_held(tmp_path):
    """Units fill the cache up to ``cache_mb`` and no further: the others are computed at
    each pass, so a budget of a quarter of the outputs holds about three quarters less
    than a budget that keeps them all."""
    import tracemalloc

    write_generated_parquet(tmp_path, 40_000, 6, 2, random_state=3, rows_per_file=1_250)
    data = open_parquet(tmp_path, label="label")  # 32 units of 1,250 rows
    n_hidden = 50
    layer = {"kind": "sigmoid", "n_features": 6, "n_hidden": n_hidden, "seed": 0}
    every_unit = 32 * 1_250 * (4 * n_hidden + 8)

    def peak(cache_bytes):
        tracemalloc.start()
        try:
            newton.fit_newton(
                data.units(),
                layer,
                [0, 1],
                C=1.0,
                tol=TOL,
                n_blocks=2,
                n_threads=2,
                max_passes=3,
                cache_mb=cache_bytes / 2**20,
            )
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(0)  # compiled before counting
    bounded, whole = peak(every_unit / 4), peak(2 * every_unit)
    assert whole - bounded >= 0.5 * (every_unit - every_unit / 4), (bounded, whole)
    assert newton.clear_cache() == 0  # the fit dropped its entries


@pytest.mark.parametrize("shared", [False, True], ids=["returned", "state_dir"])
def test_support_rows_stay_out_of_the_coordinators_memory(shared, three_classes, tmp_path):
    """The support rows' numbers come back through the blocks' results (by default) or
    are joined from the units' files in ``state_dir``, into one file that is memory-mapped
    and unlinked (nothing left on disk), the rows ascending though the blocks' units
    interleave (2 blocks: units 0, 2, 4 and 1, 3, 5).  The rows are those whose dual
    variable is positive in some pair."""
    import glob
    import tempfile

    state = tmp_path / "state"
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "elmscale-support-*")))
    model = _model(n_hidden=10).fit(three_classes, n_blocks=2, state_dir=state if shared else None)
    support = model.support_
    assert isinstance(support, np.memmap) and not support.flags.writeable
    assert not os.path.exists(support.filename)  # unlinked once mapped
    assert set(glob.glob(os.path.join(tempfile.gettempdir(), "elmscale-support-*"))) == before
    if shared:
        assert sorted(os.listdir(state)) == []  # the units' support files are removed too
    else:
        assert not state.exists()  # no folder without one given
    assert support.dtype == np.int64 and np.all(np.diff(support) > 0)
    _, y = three_classes.read()
    np.testing.assert_array_equal(
        model.n_support_, [np.sum(y[np.asarray(support)] == c) for c in model.classes_]
    )
    # the same rows as the duals kept in memory give (the one-process path's)
    X, _ = three_classes.read()
    y_idx = np.searchsorted(model.classes_, y)
    units = newton.array_units(X, y_idx, 6)
    layer = model.hidden_layer_.to_dict()
    seed = model._feature_map_description(X.shape[1])[1]
    kept = newton.fit_newton(units, layer, [0, 1, 2], C=1.0, tol=TOL, seed=seed, keep_duals=True)
    np.testing.assert_array_equal(np.flatnonzero((kept.alpha > 0).any(axis=0)), support)
    assert kept.alpha.max() <= 1.0 and kept.alpha.min() >= 0.0


def _newton_folders(folder: str) -> list:
    """The temporary folders an earlier Newton fit made in ``folder`` for its support files."""
    import glob

    return sorted(glob.glob(os.path.join(folder, "elmscale-newton-*")))


def test_the_default_fit_needs_no_shared_folder(binary_set, dask_client, tmp_path, monkeypatch):
    """Workers on other machines share no disk with the client (issue 51: the default fit
    failed there, its workers writing into a temporary folder made on the client).  By
    default the last pass's support rows come back through Dask's results: no folder is
    made, before, during or after the fit, and the model is the ``state_dir`` fit's (a
    shared folder) to the bit."""
    import tempfile

    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # this process's temporary files
    returned = _model().fit(binary_set, client=dask_client)
    state = tmp_path / "state"
    shared = _model().fit(binary_set, client=dask_client, state_dir=state)
    for name in ("coef_", "support_", "n_support_", "n_iter_", "objective_"):
        np.testing.assert_array_equal(getattr(returned, name), getattr(shared, name))
    assert list(state.iterdir()) == []
    support = returned.support_
    assert isinstance(support, np.memmap) and not support.flags.writeable
    assert not os.path.exists(support.filename) and np.all(np.diff(support) > 0)
    assert os.listdir(temp) == []  # the support file is unlinked once mapped
    # during a fit, seen here and from the workers: no folder for them to write in
    seen = []

    def on_pass(index, phases):
        seen.append((_newton_folders(str(temp)), dask_client.run(_newton_folders, str(temp))))

    seed = returned._feature_map_description(binary_set.n_features)[1]
    result = newton.fit_newton(
        newton.parquet_units(binary_set),
        returned.hidden_layer_.to_dict(),
        returned.classes_,
        C=1.0,
        tol=TOL,
        client=dask_client,
        seed=seed,
        on_pass=on_pass,
    )
    assert len(seen) == returned.n_iter_.max()
    assert all(here == [] and not any(there.values()) for here, there in seen), seen
    np.testing.assert_array_equal(result.beta.T, returned.coef_)
    np.testing.assert_array_equal(result.support, returned.support_)
    assert os.listdir(temp) == []


def _pinned_as_the_nanny_set() -> None:
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD, fixed at glibc's default
    libc.mallopt(-1, int(os.environ["MALLOC_TRIM_THRESHOLD_"]))  # M_TRIM_THRESHOLD


def _worker_page_faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_the_workers_heaps_serve_the_passes_and_are_put_back(binary_set, dask_client):
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_, which pins glibc's mmap threshold at 128 KB:
    each pass's temporaries would be fresh pages.  During a fit's passes the workers'
    thresholds are raised (``worker_heap.passes_heap``); after it they are as the nanny set
    them, and a pass faults in fewer pages than with them pinned."""
    from elmscale.distributed.worker_heap import heap_tuned, passes_heap

    assert all(dask_client.run(lambda: "MALLOC_TRIM_THRESHOLD_" in os.environ).values())
    during = []
    units = newton.parquet_units(binary_set)
    layer = HiddenLayer("sigmoid", binary_set.n_features, 20, 0).to_dict()

    def fit():
        before = dask_client.run(_worker_page_faults)
        result = newton.fit_newton(
            units,
            layer,
            [0, 1],
            C=1.0,
            tol=TOL,
            client=dask_client,
            on_pass=lambda *_: during.append(all(dask_client.run(heap_tuned).values())),
        )
        after = dask_client.run(_worker_page_faults)
        return result, sum(after[w] - before[w] for w in after)

    # a first fit on these workers faults in what every later one finds (its imports,
    # compiled kernels, the units' pages): run alone, the test measured that (84,711 faults
    # against the pinned fit's 4,345), not the heap
    fit()
    tuned, faults = fit()
    assert during and all(during)
    assert not any(dask_client.run(heap_tuned).values())
    # the same passes with the thresholds pinned (a second fit leaves them raised: the
    # heap's counter is at 2, so this fit's own raise changes nothing)
    dask_client.run(passes_heap, True)
    dask_client.run(_pinned_as_the_nanny_set)
    try:
        pinned, pinned_faults = fit()
    finally:
        dask_client.run(passes_heap, False)
    np.testing.assert_array_equal(tuned.beta, pinned.beta)
    assert faults < pinned_faults, (faults, pinned_faults)
