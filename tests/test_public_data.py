"""The public benchmark files through the local cache (``elmscale.data.public_data``).

No test reaches the network: a local HTTP server (``http.server`` in a thread, on
127.0.0.1, checked to answer before use) serves a folder, counting requests, and
``ELMSCALE_DATA_MIRROR`` points the registered URLs at it.  The shared data folder
(``_datasets``) serves the registered files themselves (``needs_shared``); the cache's
mechanics run on a small file registered for the test, without it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import threading
import tomllib
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from elmscale.core.errors import DataError
from elmscale.data import public_data
from elmscale.data.public_data import (
    MIRROR_ENV,
    PUBLIC_FILES,
    PublicFile,
    fetch_public,
    get_data_home,
    resolve,
)

ROOT = Path(__file__).resolve().parents[1]
#: the shipped pipelines that read registered public files
PUBLIC_PIPELINES = (
    "satimage_ovo",
    "codrna_sparse_elm",
    "codrna_flsa_svm",
    "boosting_regression",
    "felm_colon",
)


class _Server:
    """A folder served over HTTP on 127.0.0.1; ``requests`` counts GET / HEAD per path;
    ``corrupt`` names paths whose bytes are served with the first one changed."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.requests: Counter = Counter()
        self.corrupt: set[str] = set()
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(folder), **kwargs)

            def log_message(self, *args):  # quiet
                pass

            def send_head(self):
                server.requests[self.path] += 1
                if self.path not in server.corrupt:
                    return super().send_head()
                body = bytearray((folder / self.path.lstrip("/")).read_bytes())
                body[0] ^= 0xFF
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                import io

                return io.BytesIO(bytes(body))

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def total(self) -> int:
        return sum(self.requests.values())


@contextlib.contextmanager
def serve(folder: Path, probe: str):
    """Serve ``folder`` until the block ends; ``probe`` (a file in it) must answer within
    10 s before the block starts."""
    server = _Server(folder)
    thread = threading.Thread(target=server.httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"{server.url}/{probe}", timeout=10) as answer:
            assert answer.status == 200
        server.requests.clear()
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        thread.join(10)


@pytest.fixture(scope="module")
def shared_mirror():
    """The shared data folder served as the mirror of the registered files."""
    from _datasets import shared_data

    with serve(shared_data(), "cod-rna/codrna.csv") as server:
        yield server


@pytest.fixture
def mirrored(shared_mirror, tmp_path, monkeypatch):
    """The registered URLs read through the shared mirror into an empty cache."""
    monkeypatch.setenv(MIRROR_ENV, shared_mirror.url)
    monkeypatch.setenv(public_data.DATA_HOME_ENV, str(tmp_path / "cache"))
    shared_mirror.requests.clear()
    return shared_mirror


# -- the cache's mechanics, on a file registered for the test -----------------------------

SMALL = b"1 1:0.5 2:-0.5\n-1 1:-0.25 2:0.75\n1 1:0.125 2:0.5\n"
SMALL_URL = "https://raw.githubusercontent.com/example/data/0123456789/small.libsvm"


@pytest.fixture
def small(tmp_path, monkeypatch):
    folder = tmp_path / "served"
    (folder / "sets").mkdir(parents=True)
    (folder / "sets" / "small.libsvm").write_bytes(SMALL)
    (folder / "other.libsvm").write_bytes(SMALL)
    entry = PublicFile(
        "sets/small.libsvm", SMALL_URL, hashlib.sha256(SMALL).hexdigest(), len(SMALL)
    )
    monkeypatch.setitem(PUBLIC_FILES, SMALL_URL, entry)
    monkeypatch.setitem(public_data._BY_NAME, entry.name, entry)
    monkeypatch.setenv(public_data.DATA_HOME_ENV, str(tmp_path / "cache"))
    with serve(folder, "sets/small.libsvm") as server:
        monkeypatch.setenv(MIRROR_ENV, server.url)
        yield server


def test_data_home_argument_then_environment_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv(public_data.DATA_HOME_ENV, str(tmp_path / "env"))
    assert get_data_home(tmp_path / "arg") == tmp_path / "arg"
    assert (tmp_path / "arg").is_dir()
    assert get_data_home() == tmp_path / "env"
    monkeypatch.delenv(public_data.DATA_HOME_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert get_data_home() == tmp_path / "home" / "elmscale_data"


def test_first_read_downloads_and_checks_then_the_cache_is_used_offline(small, tmp_path):
    path = fetch_public(SMALL_URL)
    assert path == tmp_path / "cache" / "sets" / "small.libsvm"
    assert path.read_bytes() == SMALL
    assert small.requests == Counter({"/sets/small.libsvm": 1})
    assert fetch_public(SMALL_URL) == path and resolve(SMALL_URL) == str(path)
    assert small.total() == 1  # the second and third reads did not touch the server
    assert [p.name for p in path.parent.iterdir()] == ["small.libsvm"]  # no temporary left


def test_a_corrupted_download_is_refused_and_leaves_no_file(small, tmp_path):
    small.corrupt.add("/sets/small.libsvm")
    expected = hashlib.sha256(SMALL).hexdigest()
    with pytest.raises(DataError, match="checksum mismatch") as error:
        fetch_public(SMALL_URL)
    message = str(error.value)
    assert SMALL_URL in message and f"expected sha256 {expected}" in message
    assert f"got {hashlib.sha256(bytes([SMALL[0] ^ 0xFF]) + SMALL[1:]).hexdigest()}" in message
    assert f"read from {small.url}/sets/small.libsvm" in message
    cache = tmp_path / "cache"
    assert not [p for p in cache.rglob("*") if p.is_file()]
    small.corrupt.clear()  # the next read downloads again, and keeps the good copy
    assert fetch_public(SMALL_URL).read_bytes() == SMALL


def test_a_cached_file_of_the_wrong_size_is_downloaded_again(small, tmp_path):
    path = fetch_public(SMALL_URL)
    path.write_bytes(SMALL[:10])
    assert fetch_public(SMALL_URL).read_bytes() == SMALL
    assert small.total() == 2


def test_a_mirror_folder_and_a_missing_mirror_file(small, tmp_path, monkeypatch):
    monkeypatch.setenv(MIRROR_ENV, str(tmp_path / "served"))
    assert fetch_public(SMALL_URL, data_home=tmp_path / "h1").read_bytes() == SMALL
    assert small.total() == 0
    with pytest.raises(DataError, match="no such file in the mirror"):
        fetch_public(SMALL_URL, data_home=tmp_path / "h2", mirror=tmp_path / "nothing")
    assert not (tmp_path / "h2" / "sets" / "small.libsvm").exists()


def test_an_unregistered_url_is_read_as_it_is_every_time(small, tmp_path):
    """Decided: an ``https://`` (or ``http://``) URL that is not registered still works, as
    any fsspec URL: read again on each use, no checksum (none is known), nothing cached;
    ``fetch_public`` refuses it, naming it."""
    from elmscale.data import load

    url = f"{small.url}/other.libsvm"
    assert resolve(url) == url
    first, second = load(url), load(url)
    assert first.X.shape == (3, 2) and list(second.y) == [1, -1, 1]
    assert small.requests["/other.libsvm"] >= 2
    assert not (tmp_path / "cache" / "other.libsvm").exists()
    with pytest.raises(KeyError, match="not a registered public file"):
        fetch_public(url)


def test_the_registry_names_public_github_files_at_full_commits():
    names = [entry.name for entry in PUBLIC_FILES.values()]
    assert len(set(names)) == len(names)
    for url, entry in PUBLIC_FILES.items():
        assert url == entry.url
        head = "https://raw.githubusercontent.com/"
        assert url.startswith(head), url
        owner, repo, commit, *path = url.removeprefix(head).split("/")
        assert len(commit) == 40 and int(commit, 16) >= 0 and path, url
        assert len(entry.sha256) == 64 and entry.size > 0


# -- the registered files themselves, from the shared folder ------------------------------


@pytest.mark.needs_shared
def test_every_registered_file_matches_the_shared_copy():
    from _datasets import shared_data

    for entry in PUBLIC_FILES.values():
        local = shared_data(entry.name)
        assert local.stat().st_size == entry.size, entry.name
        assert hashlib.sha256(local.read_bytes()).hexdigest() == entry.sha256, entry.name


@pytest.mark.needs_shared
def test_registered_files_through_the_mirror_server(mirrored, tmp_path):
    from _datasets import shared_data

    url = public_data.public_url("satimage/satimage.scale.t")
    path = fetch_public(url)
    assert path.read_bytes() == shared_data("satimage", "satimage.scale.t").read_bytes()
    assert fetch_public(url) == path
    assert mirrored.requests == Counter({"/satimage/satimage.scale.t": 1})


def _pipeline_urls(name: str) -> dict:
    config = tomllib.loads((ROOT / "pipelines" / f"{name}.toml").read_text())
    return {k: config["data"][k] for k in ("train", "test") if k in config["data"]}


def test_the_shipped_pipelines_name_registered_public_urls():
    for path in sorted((ROOT / "pipelines").glob("*.toml")):
        assert "../shared" not in path.read_text(), path.name
    for name in PUBLIC_PIPELINES:
        for url in _pipeline_urls(name).values():
            assert url in PUBLIC_FILES, (name, url)


# each pipeline as shipped, its grid cut to one point and 2 folds (the data, the split, the
# scaling and the estimator are the shipped ones)
SMALL_RUNS = {
    "satimage_ovo": ["search.grid={C=[5],sigma=[2]}"],
    "codrna_sparse_elm": ["search.grid={C=[1],sigma=[1]}"],
    "codrna_flsa_svm": ["search.grid={n_support=[50],sigma=[1.0]}"],
    "boosting_regression": ["search.grid={C=[100]}"],
    "felm_colon": ["search.grid={C=[8.0],psi=[0.0625]}"],
}


#: the pipeline also run from the shared folder's files, to compare (the main job's data;
#: the others' files are checked byte for byte against the registry above, and a pipeline's
#: result from the same bytes is the same: one comparison shows the runner reads them)
COMPARED = "codrna_sparse_elm"


@pytest.mark.needs_shared
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", PUBLIC_PIPELINES)
def test_a_shipped_pipeline_runs_from_its_public_urls_through_the_mirror(
    name, mirrored, tmp_path, request
):
    """The pipeline reads its public URLs through the cache (each file downloaded once,
    from the mirror server) and fits and scores its test part; COD-RNA's gives the model
    and scores of the same pipeline pointed at the shared folder's files."""
    from _datasets import shared_data

    from elmscale.app.pipeline import load_pipeline
    from elmscale.app.runner import run_pipeline

    request.getfixturevalue("ray_session")  # after the mirror: no Ray when skipped
    overrides = [*SMALL_RUNS[name], "search.folds=2", f"output.dir={tmp_path / 'runs'}"]
    local = [
        f"data.{key}={shared_data(PUBLIC_FILES[url].name)}"
        for key, url in _pipeline_urls(name).items()
    ]
    results = []
    for extra in ([], local) if name == COMPARED else ([],):
        pipeline = load_pipeline(ROOT / "pipelines" / f"{name}.toml", [*overrides, *extra])
        metrics, _ = run_pipeline(
            pipeline, ray_address="auto", echo=lambda *a: None, progress=False
        )
        results.append(
            {k: metrics[k] for k in ("cv", "test", "train_rows", "kept_features") if k in metrics}
        )
    assert results[0]["test"] and results[0]["train_rows"] > 0
    assert all(result == results[0] for result in results)
    served = {f"/{PUBLIC_FILES[url].name}" for url in _pipeline_urls(name).values()}
    assert mirrored.requests == Counter(dict.fromkeys(served, 1))
