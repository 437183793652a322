"""The reliability matrix's bad-input and security cases at a few examples each
(``tests/_reliability.py`` holds the cases; ``benchmarks/stress.py`` runs them many times,
with the fault and load cases).

Property-based: hypothesis draws the damage (where a file is cut, which bits flip, which
value of a pipeline or metadata.json changes to what, which column types and corruption a
data file has); every example must end in the documented error and exit code, or, when the
input is in fact valid, in the right result.  ``deadline=None``: the first example pays the
imports; each test has a timeout.
"""

import json
import os
import zipfile

import _reliability as rel
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import elmscale

EXAMPLES = int(os.environ.get("ELMSCALE_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=True,  # the same examples every run: CI failures reproduce
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def model_case(tmp_path_factory):
    return rel.make_model_case(tmp_path_factory.mktemp("model"))


# -- model files -----------------------------------------------------------------------------


@pytest.mark.timeout(300)
@FUZZ
@given(keep=st.integers(0, 10**6))
def test_a_truncated_model_file_is_refused_naming_it(model_case, keep):
    damaged = rel.truncated(model_case.raw, keep)
    assert rel.check_model_file(model_case, damaged, "cut") == "refused"


@pytest.mark.timeout(300)
@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), min_size=1, max_size=8))
def test_a_bit_flipped_model_file_is_refused_or_loads_unchanged(model_case, flips):
    rel.check_model_file(model_case, rel.bit_flipped(model_case.raw, flips), "flip")


@pytest.mark.timeout(300)
@FUZZ
@given(
    name=st.sampled_from(["../evil.txt", "/tmp/evil.txt", "a/../../evil", "..\\evil", "C:/evil"]),
    listed=st.booleans(),
)
def test_a_member_outside_the_archive_is_refused(model_case, name, listed):
    damaged = rel.with_outside_member(model_case.raw, name, listed)
    assert rel.check_model_file(model_case, damaged, "slip") == "refused"


@pytest.mark.timeout(300)
@FUZZ
@given(
    shape=st.sampled_from([(10**12,), (10**6, 10**6), (2**62,), (10**4, 10**4, 10**4)]),
    dtype=st.sampled_from(["<f8", "<f4", "<i8", "|u1"]),
)
def test_an_array_header_declaring_huge_sizes_is_refused_without_allocating(
    model_case, shape, dtype
):
    damaged = rel.with_huge_array(model_case.raw, shape, dtype)
    assert rel.check_model_file(model_case, damaged, "huge") == "refused"


@pytest.mark.timeout(300)
@FUZZ
@given(version=st.integers(2, 10**9))
def test_a_newer_format_version_is_refused_with_advice(model_case, version):
    damaged = rel.newer_version(model_case.raw, version)
    assert rel.check_model_file(model_case, damaged, "newer") == "refused"


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=6,
)


@pytest.mark.timeout(300)
@FUZZ
@given(data=st.data(), value=JSON_VALUES)
def test_a_crafted_metadata_value_is_refused_or_harmless(model_case, data, value):
    """Any value of metadata.json replaced (the checksums made anew, as an attacker would):
    refused naming the file, or it loads and predicts as before."""
    metadata = json.loads(rel.zip_members(model_case.raw)["metadata.json"])
    paths = rel.metadata_paths(metadata)
    where = data.draw(st.sampled_from(paths))
    damaged = rel.with_metadata(model_case.raw, lambda m: rel.replaced_at(m, where, value))
    rel.check_model_file(model_case, damaged, "meta")


# -- pipeline files --------------------------------------------------------------------------

KEYS = st.sampled_from(
    [(s, k) for s, keys in rel.BASE_PIPELINE.items() for k in keys]
    + [("data", k) for k in ("test", "score", "features", "id_columns", "scale", "generate")]
    + [("data", "test_size"), ("search", "grid"), ("search", "scoring"), ("output", "model")]
    + [("compute", k) for k in ("scheduler", "ray_address", "threads_per_worker")]
) | st.tuples(st.text(min_size=1, max_size=8), st.text(min_size=1, max_size=8))
TOML_VALUES = st.recursive(
    st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=5,
)


@pytest.fixture(scope="module")
def pipeline_folder(tmp_path_factory, model_case):
    return rel.pipeline_folder(tmp_path_factory.mktemp("pipelines"), model_case)


@pytest.mark.timeout(300)
@FUZZ
@given(changes=st.lists(st.tuples(KEYS, TOML_VALUES), min_size=1, max_size=4))
def test_random_pipeline_keys_and_values_are_usage_errors_never_tracebacks(
    pipeline_folder, changes
):
    rel.check_pipeline_file(pipeline_folder, rel.mutated_pipeline(pipeline_folder, changes), "keys")


@pytest.mark.timeout(300)
@FUZZ
@given(text=st.text(max_size=200))
def test_a_pipeline_file_that_is_not_toml_is_a_usage_error(pipeline_folder, text):
    rel.check_pipeline_file(pipeline_folder, text, "text")


# -- Parquet and CSV files -------------------------------------------------------------------


@pytest.mark.timeout(300)
@FUZZ
@given(
    kinds=st.lists(st.sampled_from(rel.COLUMN_KINDS), min_size=4, max_size=4),
    n_rows=st.sampled_from([0, 1, 7, 40]),
    corruption=st.sampled_from(rel.CORRUPTIONS),
    where=st.integers(0, 10**6),
    csv=st.booleans(),
)
def test_bad_parquet_and_csv_inputs_are_named_and_write_nothing(
    model_case, kinds, n_rows, corruption, where, csv
):
    rel.check_scoring_input(model_case, kinds, n_rows, corruption, where, csv, "data")


# -- security --------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_loading_a_model_file_touches_nothing_outside_it(model_case):
    assert rel.model_file_touches_only_itself(model_case) == 6


@pytest.mark.timeout(300)
def test_model_file_members_are_read_never_extracted(model_case, tmp_path, monkeypatch):
    monkeypatch.setattr(
        zipfile.ZipFile, "extract", lambda *a, **k: pytest.fail("a member was extracted")
    )
    monkeypatch.setattr(
        zipfile.ZipFile, "extractall", lambda *a, **k: pytest.fail("members were extracted")
    )
    import elmscale

    assert elmscale.load(model_case.model).predict is not None


@pytest.mark.timeout(300)
def test_local_clusters_listen_on_loopback_and_ray_keeps_token_auth():
    """The Dask cluster and the Ray that ``elmscale run`` starts by itself: Dask's scheduler,
    nannies and workers, and every server of Ray's (GCS, raylet, core workers, dashboard
    agent, runtime env agent) listen on 127.0.0.1 only, but for the servers Ray cannot keep
    there (``rel.RAY_LOOPBACK_LIMITS``, none with Ray 2.60); Ray's token authentication is
    on.  Its Dask processes wake once a second for their tick, not every 20 ms, and its
    workers run no statistical profiler (every 10 ms): the fits share the cores with them
    (``elmscale.distributed.local_cluster``)."""
    report = rel.probe_local_clusters(ray=True)
    assert report["dask"], "no listening socket found: the probe saw no cluster"
    wakeups = report["wakeups"]
    assert wakeups["scheduler tick"] == 1000, wakeups
    assert wakeups["workers"] == [{"tick": 1000, "profile": False}] * 2, wakeups
    outside = [entry for entry in report["dask"] if not rel.is_loopback(entry[2])]
    assert not outside, f"listening beyond 127.0.0.1: {outside}"
    assert report["ray"], "no Ray listening socket found"
    beyond = rel.ray_beyond_loopback(report)
    assert all(known for _, known in beyond), [line for line, _ in beyond]
    assert rel.is_loopback(report["ray_node_ip"]), report["ray_node_ip"]
    servers = {rel.ray_server_name(report, entry) for entry in report["ray"]}
    assert {"GCS server", "raylet node manager", "raylet object manager"} <= servers, servers
    assert report["ray_token_auth"] is True


@pytest.mark.parametrize(
    "address, loopback",
    [
        ("127.0.0.1", True),
        ("127.0.0.5", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("::ffff:0.0.0.0", False),
        ("192.0.2.2", False),
        ("fe80::1%eth0", False),
    ],
)
def test_is_loopback_counts_ipv4_mapped_loopback(address, loopback):
    assert rel.is_loopback(address) is loopback


# -- what the fuzzing found, one example each ------------------------------------------------


def _deflate_damaged(raw: bytes) -> bytes:
    """metadata.json's compressed bytes overwritten: a deflate stream zlib rejects."""
    data = bytearray(raw)
    start = 30 + len("metadata.json")  # the first member's data follows its local header
    data[start : start + 16] = b"\xff" * 16
    return bytes(data)


def _unknown_compression(raw: bytes) -> bytes:
    """The first member's local and central headers name compression method 99."""
    data = bytearray(raw)
    data[8:10] = (99).to_bytes(2, "little")
    central = data.find(b"PK\x01\x02")
    data[central + 10 : central + 12] = (99).to_bytes(2, "little")
    return bytes(data)


def _nested_steps(raw: bytes, depth: int) -> bytes:
    """A model of ``depth`` Pipelines one inside the other (JSON the decoder still reads)."""
    members = rel.zip_members(raw)
    metadata = json.loads(members["metadata.json"])
    metadata["model"] = "MODEL"
    nested = '{"estimator": "Pipeline", "steps": [["a", ' * depth + "{}" + "]]}" * depth
    text = json.dumps(metadata).replace('"MODEL"', nested)
    return rel.zip_of({**members, "metadata.json": text.encode()})


FOUND = {
    "damaged deflate stream": _deflate_damaged,
    "unknown compression method": _unknown_compression,
    "deeply nested metadata": lambda raw: rel.zip_of(
        {**rel.zip_members(raw), "metadata.json": b"[" * 100_000}
    ),
    "steps nested past the recursion limit": lambda raw: _nested_steps(raw, 700),
    "input.features not a list": lambda raw: rel.with_metadata(
        raw, lambda m: rel.replaced_at(m, ("input",), {"features": 5})
    ),
    "n_features_in_ null": lambda raw: rel.with_metadata(
        raw, lambda m: rel.replaced_at(m, ("model", "attributes", "n_features_in_"), None)
    ),
    "an attribute replacing a method": lambda raw: rel.with_metadata(
        raw, lambda m: rel.replaced_at(m, ("model", "attributes"), {"predict": "x"})
    ),
    "a parameter out of range": lambda raw: rel.with_metadata(
        raw, lambda m: rel.replaced_at(m, ("model", "params", "n_hidden"), -3)
    ),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", sorted(FOUND))
def test_model_files_the_fuzzing_found_are_refused_naming_the_file(model_case, case):
    from elmscale.core.errors import ModelFileError

    damaged = FOUND[case](model_case.raw)
    path = model_case.folder / "found.elm"
    path.write_bytes(damaged)
    with pytest.raises(ModelFileError, match=str(path)):
        elmscale.load(path)
    assert rel.check_model_file(model_case, damaged, "found") == "refused"


@pytest.mark.timeout(120)
def test_a_second_score_into_a_folder_in_use_is_refused_and_writes_nothing(model_case, tmp_path):
    from elmscale.core.files import folder_lock

    out = tmp_path / "scored"
    with folder_lock(out, "a test"):
        outcome = rel.run_cli(["score", model_case.model, model_case.data, out, "--quiet"])
    rel.assert_documented_error(outcome, (1,), str(out))
    assert "writing into this folder now" in outcome.err
    assert not rel.files_under(out)
    again = rel.run_cli(["score", model_case.model, model_case.data, out, "--quiet"])
    assert again.code == 0, again.err
    assert [p.name for p in out.iterdir()] == ["rows.parquet"]


@pytest.mark.timeout(120)
def test_a_pipeline_task_that_is_a_list_is_a_usage_error(pipeline_folder):
    text = rel.mutated_pipeline(pipeline_folder, [(("run", "task"), [])])
    assert rel.check_pipeline_file(pipeline_folder, text, "list") == "refused"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("csv", [True, False])
def test_column_names_that_are_not_utf8_are_named(model_case, tmp_path, csv):
    source = tmp_path / ("bad.csv" if csv else "bad.parquet")
    if csv:
        source.write_bytes(b"\xcb\xff,f2\n1,2\n")
    else:
        rel.write_data_file(source, rel.data_table(["float64"] * 4, 3, 0), "none", 0, 0)
        source.write_bytes(source.read_bytes().replace(b"f1", b"\xcb\xff"))
    outcome = rel.run_cli(["score", model_case.model, source, tmp_path / "out", "--quiet"])
    rel.assert_documented_error(outcome, (1,), str(source))
    assert not rel.files_under(tmp_path / "out")


@pytest.mark.timeout(300)
def test_ctrl_c_during_score_exits_130_and_leaves_no_partial_file(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    import pyarrow.parquet as pq

    from elmscale import ELMClassifier
    from elmscale.data import generate_classification, write_generated_parquet
    from elmscale.io.model_files import save

    model = tmp_path / "model.elm"

    train = generate_classification(500, n_features=8, random_state=0)
    save(
        ELMClassifier(n_hidden=200, random_state=0).fit(train.X, train.y),
        model,
        features=[f"f{j + 1}" for j in range(8)],
    )
    inputs = write_generated_parquet(tmp_path / "inputs", 1_200_000, rows_per_file=200_000)
    out = tmp_path / "scored"
    env = {
        k: v for k, v in os.environ.items() if k not in ("DASK_SCHEDULER_ADDRESS", "RAY_ADDRESS")
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "elmscale", "score", model, inputs, out, "--quiet"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not list(out.glob("*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.005)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    done = list(out.glob("*.parquet"))
    assert 1 <= len(done) < 6, "the run was not interrupted midway"
    assert process.returncode == 130 and err.strip().endswith("elmscale: interrupted"), err
    assert "Traceback" not in err
    assert not list(out.glob(".*")), "a temporary file was left"
    for f in done:
        assert pq.ParquetFile(f).metadata.num_rows == 200_000
