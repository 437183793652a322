"""A real S3 endpoint on 127.0.0.1 for the tests, the docs' snippets and
``benchmarks/object_storage.py``: moto's server mode (the way s3fs's own tests run), reached
through s3fs and pyarrow with ``endpoint_url`` as a user's code reaches S3.

:func:`local_s3` starts it on a free port (in a thread of this process, or with
``own_process`` in a process of its own, as a store on another machine would be: the
benchmark's timings then share no interpreter lock with it), checks that it answers an
HTTP request, sets dummy credentials in the environment for the ``with`` block only, and
stops it after.  It counts the bytes of object data it sends (``server.bytes_sent()``):
the bytes read from the store.

    python tests/_s3.py PORT     # serve until stdin closes (local_s3(own_process=True))
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from contextlib import contextmanager
from dataclasses import dataclass

#: Dummy credentials (moto accepts any unless its IAM checks are switched on).
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}

#: The path (not an S3 one: no bucket is named so) where the server says what it sent.
COUNTS = "/_elmscale/bytes-sent"


@dataclass
class LocalS3:
    """The running server: its ``endpoint`` and the ``storage_options`` that reach it (the
    dummy key and secret included, for worker processes started before the environment
    had them)."""

    endpoint: str

    @property
    def storage_options(self) -> dict:
        return {
            "key": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "secret": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "client_kwargs": {"endpoint_url": self.endpoint},
        }

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(**self.storage_options)

    def new_bucket(self, prefix: str = "elmscale") -> str:
        """A new, empty bucket (names are unique: tests share one server)."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.filesystem().call_s3("create_bucket", Bucket=name)
        return name

    def bytes_sent(self) -> int:
        """The bytes of the server's answers to GET requests so far (object data)."""
        with urllib.request.urlopen(self.endpoint + COUNTS, timeout=10) as answer:
            return int(json.loads(answer.read())["bytes"])

    def set_auth(self, on: bool) -> None:
        """Switch moto's credential checks on (every request after this needs a key its
        IAM knows: any other is refused, as AWS refuses a wrong one) or off."""
        request = urllib.request.Request(
            f"{self.endpoint}/moto-api/reset-auth",
            data=b"0" if on else b"inf",
            method="POST",
            # not a form: moto reads the count from the raw body
            headers={"Content-Type": "application/octet-stream"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()


def _counting(app):
    """Moto's WSGI app, counting the bytes of its answers to GET requests and telling
    them at :data:`COUNTS`."""
    lock = threading.Lock()
    sent = [0]

    def count(body):
        n = 0
        try:
            for chunk in body:
                n += len(chunk)
                yield chunk
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()
            with lock:
                sent[0] += n

    def counted(environ, start_response):
        if environ.get("PATH_INFO") == COUNTS:
            start_response("200 OK", [("Content-Type", "application/json")])
            with lock:
                return [json.dumps({"bytes": sent[0]}).encode()]
        body = app(environ, start_response)
        return count(body) if environ.get("REQUEST_METHOD") == "GET" else body

    return counted


def _serve(port: int):
    """Moto's server (its ThreadedMotoServer's app, counted) on 127.0.0.1:``port``, in a
    thread; returns the HTTP server and the thread."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    # each request's log line would drown the output
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = _counting(DomainDispatcherApplication(create_backend_app))
    http = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=http.serve_forever, name="local-s3", daemon=True)
    thread.start()
    return http, thread


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(endpoint: str, timeout: float) -> None:
    """Wait until an HTTP request to the server is answered (ListBuckets)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(endpoint, timeout=2) as answer:
                answer.read()
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the local S3 server at {endpoint} does not answer") from None
            time.sleep(0.05)


@contextmanager
def local_s3(timeout: float = 30, own_process: bool = False):
    """Start moto's S3 server on 127.0.0.1, yield its :class:`LocalS3`, stop it after; the
    dummy credentials are in the environment only meanwhile."""
    saved = {name: os.environ.get(name) for name in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    port = _free_port()
    server = LocalS3(f"http://127.0.0.1:{port}")
    child = http = thread = None
    try:
        if own_process:
            # it serves until its stdin closes: it ends with this process, however that ends
            child = subprocess.Popen([sys.executable, __file__, str(port)], stdin=subprocess.PIPE)
        else:
            http, thread = _serve(port)
        _answers(server.endpoint, timeout)
        yield server
    finally:
        if child is not None:
            child.stdin.close()
            child.wait(timeout=30)
        if http is not None:
            http.shutdown()
            thread.join(timeout=10)
            http.server_close()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_elmscale(*args, env_extra=None, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m elmscale ARGS`` as a user runs it against the store: this process's
    environment (the fixture's dummy credentials) with ``env_extra`` over it (the store's
    ``AWS_ENDPOINT_URL``), one thread per BLAS and numba, no scheduler or Ray address but
    those named."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.update(env_extra or {})
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[name] = "1"
    env.pop("DASK_SCHEDULER_ADDRESS", None)
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "elmscale", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
    sys.stdin.read()
