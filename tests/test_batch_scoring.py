"""``elmscale score`` gives the model's own answers, batch by batch, and its read-ahead
helper neither reorders, swallows nor outlives anything."""

import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from elmscale import ELMClassifier, SparseELMClassifier, save
from elmscale.app.cli import main
from elmscale.core import jit
from elmscale.data import Scaler, generate_classification
from elmscale.features.layers import HiddenLayer
from elmscale.io.batch_scoring import _prefetched

pytestmark = pytest.mark.timeout(300)

FEATURES = [f"f{j + 1}" for j in range(6)]


def _inputs(folder, n_files=2, rows=7_000):
    folder.mkdir()
    for i in range(n_files):
        part = generate_classification(rows, n_features=6, random_state=50 + i)
        table = pa.table(
            {
                "id": np.arange(rows) + i * rows,
                **{name: part.X[:, j].astype(np.float32) for j, name in enumerate(FEATURES)},
            }
        )
        pq.write_table(table, folder / f"part-{i}.parquet", row_group_size=2_000)
    return folder


def _models():
    from sklearn.pipeline import make_pipeline

    train = generate_classification(2_000, n_features=6, random_state=3)
    return {
        "elm_sigmoid": ELMClassifier(hidden="sigmoid", n_hidden=203, random_state=0).fit(
            train.X, train.y
        ),
        "scaled_elm": make_pipeline(
            Scaler(), ELMClassifier(hidden="sigmoid", n_hidden=64, C=10, random_state=1)
        ).fit(train.X, train.y),
        "sparse_elm": SparseELMClassifier(sigma=0.5, C=1.0).fit(train.X[:600], train.y[:600]),
        "sparse_elm_random_nodes": SparseELMClassifier(
            hidden="sigmoid", n_hidden=50, C=1.0, random_state=2
        ).fit(train.X, train.y),
    }


@pytest.mark.parametrize("name", sorted(_models()))
def test_score_equals_the_models_own_decision_values_and_predictions(name, tmp_path):
    model = _models()[name]
    inputs = _inputs(tmp_path / "in")
    path = save(model, tmp_path / "model.elm", features=FEATURES, label="label")
    out = tmp_path / "out"
    argv = ["score", str(path), str(inputs), str(out), "--id", "id", "--decision"]
    assert main([*argv, "--batch-rows", "1500", "--quiet"]) == 0
    for source in sorted(inputs.glob("*.parquet")):
        table = pq.read_table(source)
        X = np.column_stack([table.column(c).to_numpy() for c in FEATURES])
        scored = pq.read_table(out / source.name)
        assert scored.num_rows == table.num_rows
        np.testing.assert_array_equal(scored.column("id").to_numpy(), table.column("id"))
        np.testing.assert_array_equal(scored.column("prediction").to_numpy(), model.predict(X))
        expected = model.decision_function(X)
        scale = np.abs(expected).max()
        np.testing.assert_allclose(
            scored.column("decision").to_numpy(), expected, rtol=1e-6, atol=1e-6 * scale
        )


@pytest.mark.parametrize("n_features", [1, 3, 4, 7, 8, 9])
def test_sigmoid_scores_are_the_layers_node_values_times_coef(n_features):
    layer = HiddenLayer("sigmoid", n_features, 101, seed=n_features, weight_scale=3.0)
    X = np.random.default_rng(n_features).uniform(-1, 1, size=(777, n_features))
    coef = np.random.default_rng(1).standard_normal((101, 3))
    scores = layer.scores(X, coef)
    general = np.empty_like(scores)
    jit.hidden_block_scores(
        X.astype(np.float32), layer.weights, layer.biases, jit.NODE_CODES["sigmoid"], coef, general
    )
    # the node values are the same to the bit: only the order of the float64 sums differs,
    # which moves a sum by at most n u times its terms' sizes (a score near 0 out of terms
    # of size 80 is off by more than 1e-12 of itself: 1.1e-12 under OpenBLAS Sandybridge
    # and numba x86-64-v2, issue 49)
    H = layer.transform(X).astype(np.float64)
    sums = 101 * 2.0**-53 * (np.abs(H) @ np.abs(coef))
    np.testing.assert_array_less(np.abs(scores - general), sums + 1e-300)
    np.testing.assert_array_less(np.abs(scores - H @ coef), sums + 1e-300)
    one = layer.scores(X, coef[:, 0])
    np.testing.assert_array_less(np.abs(one - H @ coef[:, 0]), sums[:, 0] + 1e-300)


def test_saturated_sigmoid_nodes_stay_finite():
    layer = HiddenLayer("sigmoid", 2, 40, seed=0, weight_scale=500.0)
    X = np.array([[1.0, 1.0], [-1.0, -1.0], [0.0, 0.0]])
    H = layer.transform(X).astype(np.float64)
    assert H.min() < 1e-30 and H.max() == 1.0  # some nodes saturate both ways
    coef = np.linspace(-1, 1, 40)
    scores = layer.scores(X, coef)
    assert np.all(np.isfinite(scores))
    np.testing.assert_allclose(scores, H @ coef, rtol=1e-12, atol=1e-12)


def _reader_threads():
    return [t for t in threading.enumerate() if t.name == "elmscale-score-reader"]


def test_read_ahead_keeps_order_and_raises_the_readers_error_in_place():
    assert list(_prefetched(iter(range(100)))) == list(range(100))

    def broken():
        yield 1
        yield 2
        raise ValueError("row group 3 is damaged")

    got = []
    with pytest.raises(ValueError, match="row group 3 is damaged"):
        for item in _prefetched(broken()):
            got.append(item)
    assert got == [1, 2]
    assert not _reader_threads()


def test_read_ahead_stops_when_the_caller_stops():
    closed = threading.Event()

    def endless():
        try:
            i = 0
            while True:
                yield i
                i += 1
        finally:
            closed.set()

    stream = _prefetched(endless(), depth=2)
    assert [next(stream) for _ in range(5)] == [0, 1, 2, 3, 4]
    stream.close()  # the caller gives up (a scoring error): the reader stops, the file closes
    assert closed.wait(30)
    assert not _reader_threads()


def test_a_scoring_error_midway_leaves_no_file_and_no_reader(tmp_path):
    inputs = _inputs(tmp_path / "in", n_files=1)
    table = pq.read_table(inputs / "part-0.parquet")
    f1 = table.column("f1").to_numpy().astype(np.float64)
    f1[5_000] = np.nan  # in a later batch: the first ones are scored before it is met
    pq.write_table(
        table.set_column(1, "f1", pa.array(f1, mask=np.isnan(f1))),
        inputs / "part-0.parquet",
        row_group_size=2_000,
    )
    model = _models()["elm_sigmoid"]
    path = save(model, tmp_path / "model.elm", features=FEATURES, label="label")
    out = tmp_path / "out"
    argv = ["score", str(path), str(inputs), str(out), "--batch-rows", "1000", "--quiet"]
    assert main(argv) == 1
    assert not out.exists() or not list(out.iterdir())  # nothing half-written
    assert not _reader_threads()


def test_scoring_from_s3_reads_the_needed_chunks_and_exact_footers_without_a_head(
    tmp_path, s3_server, monkeypatch
):
    """Each input's footer is read in one request of exactly its bytes (the plan's own
    read gave its length), not pyarrow's 64 KiB tail again, and each object is opened
    with its size known (no HEAD request)."""
    from s3fs import S3FileSystem

    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    folder = _inputs(tmp_path / "in", rows=3_000)
    bucket = s3_server.new_bucket("scoring-bytes")
    s3_server.filesystem().put(f"{folder}/", f"{bucket}/in/", recursive=True)
    model = ELMClassifier(n_hidden=8, random_state=0).fit(
        generate_classification(500, n_features=6, random_state=1).X,
        np.arange(500) % 2,
    )
    options = s3_server.storage_options
    jobs = plan_jobs(
        model, f"s3://{bucket}/in/", tmp_path / "out", id_columns=["id"], storage_options=options
    )
    chunks = footers = 0
    for file in sorted(folder.glob("*.parquet")):
        meta = pq.ParquetFile(file).metadata
        footers += meta.serialized_size + 8
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            chunks += sum(group.column(c).total_compressed_size for c in range(group.num_columns))
    asked = []
    info = S3FileSystem._info

    async def counted(self, path, *args, **kwargs):
        asked.append(path)
        return await info(self, path, *args, **kwargs)

    monkeypatch.setattr(S3FileSystem, "_info", counted)
    before = s3_server.bytes_sent()
    assert score_jobs(model, jobs)["rows"] == 6_000
    read = s3_server.bytes_sent() - before
    assert asked == []
    # every column is read (the id and the features); row groups' chunks are adjacent
    assert chunks + footers <= read <= chunks + footers + 2 * 8192, (read, chunks, footers)


# -- the shared-folder probe on a Ray cluster ---------------------------------------------


@pytest.mark.timeout(300)
def test_the_ray_probe_passes_a_shared_folder_and_names_one_the_nodes_do_not_see(tmp_path):
    """A real local Ray shares this machine's disk, so the probe passes for a folder and an
    input it can see.  The process that runs the probe then puts its main thread alone in
    a private mount namespace with a tmpfs over a folder (``unshare(CLONE_NEWNS)``; the
    Ray workers, other processes, keep the machine's view): an output folder and an input
    there are errors naming them and the Ray node."""
    import subprocess
    import sys
    from pathlib import Path

    shared, hidden = tmp_path / "shared", tmp_path / "hidden"
    shared.mkdir()
    hidden.mkdir()
    (shared / "in.parquet").write_bytes(b"x" * 100)
    script = Path(__file__).with_name("_ray_unseen_folder.py")
    run = subprocess.run(
        [sys.executable, str(script), str(shared), str(hidden)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    if run.returncode != 0 and ("unshare" in run.stderr or "mount" in run.stderr):
        pytest.skip(f"no private mount namespace here: {run.stderr.strip()[-300:]}")
    assert run.returncode == 0, run.stderr[-2000:]
    lines = dict(line.split(": ", 1) for line in run.stdout.splitlines() if ": " in line)
    assert lines["shared"] == "seen"
    assert lines["hidden_output"].startswith(f"DataError: {hidden / 'out'}: ray node ")
    assert "does not see this output folder" in lines["hidden_output"]
    assert lines["hidden_input"].startswith(f"DataError: {hidden / 'in.parquet'}: ray node ")
    assert "does not see this input file" in lines["hidden_input"]
    assert list(shared.iterdir()) == [shared / "in.parquet"]  # probes and their folders gone
    assert list(hidden.iterdir()) == []  # the tmpfs went with the process


@pytest.mark.timeout(300)
def test_sparse_rows_are_scored_as_csr(tmp_path):
    """An input whose features are one column of sparse rows (Spark ML's vector layout)
    is scored batch by batch as CSR blocks: the model's own predictions and decision values
    of the CSR rows; a width other than the model's is named before anything is written."""
    import scipy.sparse as sp

    from elmscale.data import write_parquet

    X = sp.random(5_000, 300, density=0.02, format="csr", random_state=4, dtype=np.float32)
    y = np.asarray(X.sum(axis=1)).ravel() > np.median(np.asarray(X.sum(axis=1)))
    model = ELMClassifier(hidden="sigmoid", n_hidden=40, C=1.0, random_state=0)
    model.fit(X, y.astype(int))
    inputs = tmp_path / "in"
    path = write_parquet(X, inputs / "rows.parquet")
    table = pq.read_table(path)
    pq.write_table(table.append_column("id", pa.array(np.arange(5_000))), path)
    saved = save(model, tmp_path / "model.elm")
    out = tmp_path / "out"
    argv = ["score", str(saved), str(inputs), str(out), "--id", "id", "--decision"]
    assert main([*argv, "--batch-rows", "1500", "--quiet"]) == 0
    scored = pq.read_table(out / "rows.parquet")
    np.testing.assert_array_equal(scored.column("id").to_numpy(), np.arange(5_000))
    np.testing.assert_array_equal(scored.column("prediction").to_numpy(), model.predict(X))
    expected = model.decision_function(X)
    np.testing.assert_allclose(
        scored.column("decision").to_numpy(),
        expected,
        rtol=1e-6,
        atol=1e-6 * np.abs(expected).max(),
    )
    narrow = tmp_path / "narrow"
    write_parquet(X[:, :200], narrow / "rows.parquet")
    from elmscale.core.errors import DataError
    from elmscale.io.batch_scoring import plan_jobs

    with pytest.raises(DataError, match="holds rows of 200 features; the model expects 300"):
        plan_jobs(model, narrow, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()
