"""Where data live: a local path or the URL of any fsspec file system, and its options.

Every path elmscale reads or writes (Parquet data sets and their work units, the CSV,
LIBSVM and ARFF readers, model files, batch scoring's inputs and outputs, a pipeline's
paths) goes through :func:`locate`:

* a plain path or ``file://`` URL is a local file, read and written as before;
* ``s3://``, ``gs://``, ``abfs://``, ``hdfs://`` ... are fsspec URLs; the file system's
  package (``elmscale[s3]``, ``[gcs]``, ``[azure]``) is imported by fsspec's registry only
  when such a URL is used.  ``storage_options`` are fsspec's (and Dask's and pandas'):
  ``{"client_kwargs": {"endpoint_url": ...}}``, ``{"profile": ...}``, ``{"anon": True}``;
  without them credentials come from the environment and the usual credential files.

Credentials never leave this module in words: :class:`Store`'s repr, every error raised
here and :func:`scrub` replace the values of options named like a secret (key, secret,
token, password, credential) and a URL's password by ``***``.

Writing.  A local file is written to a temporary name and renamed
(:func:`elmscale.core.files.atomic_write`).  An object store has no rename: an object is
written locally first, then put whole in one request (a multipart upload is completed in
one request too), so that readers see all of it or nothing (:func:`write_whole`).  An
output of many objects (batch scoring) writes a marker object after each one
(``write_whole(..., marker=)``), and a rerun trusts only the objects a marker names
(:func:`marked_done`).  Local folders are locked while written (:func:`output_lock`); an
object store has no lock: one writer per output folder, by design.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elmscale.core.errors import DataError
from elmscale.core.files import atomic_write, folder_lock

__all__ = [
    "Location",
    "Store",
    "is_url",
    "locate",
    "marked_done",
    "named_options",
    "output_lock",
    "put_folder",
    "redact_options",
    "scrub",
    "storage_errors",
    "write_whole",
]

#: Option names holding one of these words are secrets: never shown.
SECRET_WORDS = ("key", "secret", "token", "password", "credential", "sas", "connection_string")

#: The extra that installs each protocol's file system (the error for a missing one names it).
EXTRAS = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
    "az": ("adlfs", "azure"),
    "adl": ("adlfs", "azure"),
}

LOCAL_PROTOCOLS = ("file", "local")

#: Object stores whose fsspec files read one range request per read (no read-ahead) and
#: take a known ``size`` (fsspec's buffered files: s3fs, gcsfs, adlfs).
RANGE_READ_PROTOCOLS = ("s3", "s3a", "gs", "gcs", "abfs", "abfss", "az")

#: The folder of batch scoring's markers inside an output folder (a dot name: no reader of
#: that folder takes it for data).
MARKERS = ".elmscale-done"

_REDACTED = "***"
_URL_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][\w+.-]*://[^/:@\s]*:)(?P<password>[^/@\s]+)@")


def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


def redact_options(options: Mapping | None) -> dict:
    """A copy of ``options`` with the value of every secret-named option (at any depth)
    replaced by ``***``: what a repr or a log line may show."""
    shown: dict = {}
    for name, value in (options or {}).items():
        if isinstance(value, Mapping):
            shown[name] = redact_options(value)
        elif _is_secret_name(str(name)) and value is not None:
            shown[name] = _REDACTED
        else:
            shown[name] = value
    return shown


def _secret_values(options: Mapping | None) -> list[str]:
    values = []
    for name, value in (options or {}).items():
        if isinstance(value, Mapping):
            values += _secret_values(value)
        elif _is_secret_name(str(name)) and value not in (None, ""):
            values.append(str(value))
    # the longest first: a secret that contains another is replaced whole
    return sorted(set(values), key=len, reverse=True)


def scrub(text: str, options: Mapping | None = None) -> str:
    """``text`` with the secret values of ``options`` and the passwords of URLs replaced
    by ``***`` (for any message that may quote a URL or an option)."""
    for secret in _secret_values(options):
        text = text.replace(secret, _REDACTED)
    return _URL_PASSWORD.sub(lambda m: f"{m['head']}{_REDACTED}@", text)


@dataclass(frozen=True)
class Store:
    """A file system: its fsspec ``protocol`` ("file" for local files) and
    ``storage_options``.  Small and picklable (a work unit carries it to the worker that
    opens the files); its repr never shows a secret."""

    protocol: str = "file"
    options: Mapping = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"Store({self.protocol!r}, {redact_options(self.options)!r})"

    # a frozen dataclass with a dict is not hashable by its fields: hash what identifies it
    def __hash__(self) -> int:
        return hash((self.protocol, json.dumps(self.options, sort_keys=True, default=str)))

    @property
    def is_local(self) -> bool:
        return self.protocol in LOCAL_PROTOCOLS

    def filesystem(self):
        """The fsspec file system (fsspec keeps one instance per protocol and options in a
        process: a worker that reads many units opens it once)."""
        import fsspec

        return fsspec.filesystem(self.protocol, **dict(self.options))

    def open_input(self, url: str, size: int | None = None):
        """A file object of ``url`` (a URL of this store) for pyarrow: each read is one
        range request (no read-ahead: a unit reads the row groups it needs, not the rest of
        the file), and pyarrow's ``pre_buffer`` coalesces a row group's column chunks.
        ``size``: the object's bytes when known (a listing, :func:`~elmscale.data.
        open_parquet`'s footers): the object store's file is opened without asking its size
        (a HEAD request, one round trip per opening, saved); None: asked."""
        fs = self.filesystem()
        path = fs._strip_protocol(url)
        if self.protocol in RANGE_READ_PROTOCOLS:
            known = {} if size is None else {"size": int(size)}
            return fs.open(path, "rb", cache_type="none", **known)
        return fs.open(path, "rb")


@dataclass(frozen=True)
class Location:
    """A path or URL, resolved: ``url`` as named (for messages), its :class:`Store` and
    ``path``, the name inside that store (fsspec's form, ``bucket/key`` for S3; the local
    path as given for a local file)."""

    url: str
    store: Store
    path: str

    def __str__(self) -> str:
        return scrub(self.url)

    def __repr__(self) -> str:
        return f"Location({str(self)!r}, {self.store!r})"

    @property
    def is_local(self) -> bool:
        return self.store.is_local

    @property
    def local_path(self) -> Path:
        if not self.is_local:
            raise ValueError(f"{self}: not a local path")
        return Path(self.path)

    @property
    def fs(self):
        return self.store.filesystem()

    @property
    def name(self) -> str:
        return (
            posixpath.basename(self.path.rstrip("/")) if not self.is_local else Path(self.path).name
        )

    @property
    def suffix(self) -> str:
        return posixpath.splitext(self.name)[1]

    @property
    def stem(self) -> str:
        return posixpath.splitext(self.name)[0]

    def child(self, name: str) -> Location:
        """The location ``name`` inside this folder."""
        if self.is_local:
            return Location(os.path.join(self.url, name), self.store, os.path.join(self.path, name))
        return Location(
            f"{self.url.rstrip('/')}/{name}", self.store, f"{self.path.rstrip('/')}/{name}"
        )

    @property
    def parent(self) -> Location:
        if self.is_local:
            return Location(
                os.fspath(Path(self.url).parent), self.store, os.fspath(Path(self.path).parent)
            )
        return Location(
            self.url.rstrip("/").rsplit("/", 1)[0],
            self.store,
            posixpath.dirname(self.path.rstrip("/")),
        )

    def url_of(self, path: str) -> str:
        """The URL of ``path``, a name in this store as fsspec lists it."""
        return path if self.is_local else self.fs.unstrip_protocol(path)

    def exists(self) -> bool:
        if self.is_local:
            return Path(self.path).exists()
        with storage_errors(self, "an existing path"):
            return bool(self.fs.exists(self.path))

    def is_dir(self) -> bool:
        if self.is_local:
            return Path(self.path).is_dir()
        with storage_errors(self, "an existing path"):
            return bool(self.fs.isdir(self.path))

    def read_bytes(self) -> bytes:
        if self.is_local:
            return Path(self.path).read_bytes()
        with storage_errors(self, "an existing file"):
            return self.fs.cat_file(self.path)

    def glob(self, pattern: str) -> list[Location]:
        """The files in this folder whose names match ``pattern``, by name."""
        if self.is_local:
            return [self.child(p.name) for p in sorted(Path(self.path).glob(pattern))]
        with storage_errors(self, "a folder it may list"):
            found = self.fs.glob(f"{self.path.rstrip('/')}/{pattern}")
        return [self.child(posixpath.basename(f)) for f in sorted(found)]

    def remove(self) -> None:
        if self.is_local:
            Path(self.path).unlink(missing_ok=True)
            return
        with storage_errors(self, "a path it may delete"), suppress(FileNotFoundError):
            self.fs.rm_file(self.path)


def locate(path: str | os.PathLike | Location, storage_options: Mapping | None = None) -> Location:
    """Resolve a local path or an fsspec URL, with ``storage_options`` for its store.

    Local paths (plain or ``file://``) keep the path as given (relative stays relative); an
    unknown protocol or a missing file system package is a :class:`DataError` naming the
    URL and the extra to install.
    """
    if isinstance(path, Location):
        return path
    url = os.fspath(path)
    protocol, _ = _split_protocol(url)
    options = dict(storage_options or {})
    if protocol is None or protocol in LOCAL_PROTOCOLS:
        local = url.split("://", 1)[1] if protocol is not None else url
        return Location(url, Store("file", options), local)
    store = Store(protocol, options)
    try:
        import fsspec

        cls = fsspec.get_filesystem_class(protocol)
    except ImportError as exc:
        package, extra = EXTRAS.get(protocol, (None, None))
        hint = (
            f'pip install "elmscale[{extra}]" (it installs {package})'
            if extra
            else f"install the fsspec file system of {protocol}://"
        )
        raise DataError(
            f"{scrub(url)}: {protocol}:// URLs need a package that is not installed ({exc}); {hint}"
        ) from None
    except ValueError:
        raise DataError(
            f"{scrub(url)}: unknown protocol {protocol!r}; expected a local path or an fsspec "
            "URL (s3://, gs://, abfs://, hdfs://, file://, ...)"
        ) from None
    return Location(url, store, cls._strip_protocol(url))


def _split_protocol(url: str) -> tuple[str | None, str]:
    """``(protocol, rest)``; None for a plain path (a Windows drive letter is not one)."""
    head, sep, rest = url.partition("://")
    if not sep or not re.fullmatch(r"[a-zA-Z][\w+.-]+", head):
        return None, url
    return head.lower(), rest


def named_options(
    url: str,
    *,
    endpoint: str | None = None,
    profile: str | None = None,
    region: str | None = None,
    anonymous: bool = False,
) -> dict:
    """fsspec ``storage_options`` for ``url`` from names that are not secrets (a pipeline
    file's ``[storage]``): an endpoint, a profile of the credential files, a region, or
    anonymous access.  The credentials themselves come from the environment or the
    credential files.  Local paths take none; a store that has no such option ignores it."""
    protocol, _ = _split_protocol(url)
    options: dict = {}
    if protocol in ("s3", "s3a"):
        client = {"endpoint_url": endpoint, "region_name": region}
        if any(v is not None for v in client.values()):
            options["client_kwargs"] = {k: v for k, v in client.items() if v is not None}
        if profile is not None:
            options["profile"] = profile
        if anonymous:
            options["anon"] = True
    elif protocol in ("gs", "gcs"):
        if endpoint is not None:
            options["endpoint_url"] = endpoint
        if anonymous:
            options["token"] = "anon"
    elif protocol in ("abfs", "abfss", "az"):
        if anonymous:
            options["anon"] = True
    return options


def is_url(path) -> bool:
    """Whether ``path`` names a file system other than the local one."""
    if isinstance(path, Location):
        return not path.is_local
    protocol, _ = _split_protocol(os.fspath(path))
    return protocol is not None and protocol not in LOCAL_PROTOCOLS


@contextmanager
def storage_errors(where: Location | str, expected: str, options: Mapping | None = None):
    """Errors of a store's file system (a missing bucket or key, refused credentials, no
    network) as a :class:`DataError` naming ``where`` and what was ``expected``, with any
    secret in the store's message replaced by ``***``."""
    if isinstance(where, Location):
        options = where.store.options if options is None else options
    shown = scrub(str(where), options)
    try:
        yield
    except DataError:
        raise
    except FileNotFoundError as exc:
        raise DataError(
            f"{shown}: no such file, object or bucket ({scrub(str(exc), options)}); "
            f"expected {expected}"
        ) from None
    except PermissionError as exc:
        raise DataError(
            f"{shown}: access denied ({scrub(str(exc), options)}); check the credentials "
            "(storage_options, the environment or the credential files) and their "
            f"permissions; expected {expected}"
        ) from None
    # the stores' own errors (botocore's ProfileNotFound, NoCredentialsError, ...) derive
    # from nothing common: whatever the store's package raised is the store's failure
    except Exception as exc:  # noqa: BLE001
        raise DataError(
            f"{shown}: the store failed ({type(exc).__name__}: {scrub(str(exc), options)}); "
            f"expected {expected}"
        ) from None


@contextmanager
def local_copy(location: Location, expected: str = "an existing data file") -> Iterator[Path]:
    """A local file with the contents of ``location``: the file itself when local, else a
    temporary copy (same name, removed after the ``with`` block) for readers that need a
    local file (the CSV, LIBSVM and ARFF readers read a file more than once)."""
    if location.is_local:
        p = location.local_path
        if not p.exists():
            raise DataError(f"{location}: no such file; expected {expected}")
        if p.is_dir():
            raise DataError(f"{location}: is a directory; expected {expected}")
        yield p
        return
    with tempfile.TemporaryDirectory(prefix="elmscale-fetch-") as folder:
        copy = Path(folder) / (location.name or "data")
        with storage_errors(location, expected):
            if location.fs.isdir(location.path):
                raise DataError(f"{location}: is a directory; expected {expected}")
            location.fs.get_file(location.path, os.fspath(copy))
        yield copy


def write_whole(
    location: Location,
    write: Callable[[Path], object],
    *,
    make_dirs: bool = True,
    marker: Callable[[], Mapping[str, Any]] | None = None,
):
    """Call ``write(tmp)`` on a local temporary file, then make it ``location`` whole:
    locally by a rename next to it (:func:`~elmscale.core.files.atomic_write`), on an
    object store by one put of the complete object (nothing appears there before it is
    complete, and a failed write leaves nothing).  ``marker``: for an output of many
    objects, the facts that the object's marker records after it (:func:`marked_done`;
    a local output needs none: the rename is its mark).  Returns the local path written,
    or the location."""
    if location.is_local:
        return atomic_write(location.local_path, write, make_dirs=make_dirs)
    with tempfile.TemporaryDirectory(prefix="elmscale-put-") as folder:
        tmp = Path(folder) / (location.name or "object")
        write(tmp)
        with storage_errors(location, "a location it may write"):
            location.fs.put_file(os.fspath(tmp), location.path)
        if marker is not None:
            # last, and naming the size put: a marker vouches only for a whole object (an
            # earlier marker of the name is replaced, and a rerun that finds it with another
            # object's size writes that object again)
            record = {"output": location.name, "size": tmp.stat().st_size, **marker()}
            target = _marker(location)
            with storage_errors(target, "a location it may write"):
                target.fs.pipe_file(
                    target.path, (json.dumps(record, sort_keys=True) + "\n").encode()
                )
    return location


def put_folder(local: Path, target: Location) -> None:
    """Put every file below the local folder ``local`` into the store's folder ``target``
    (same names), each whole (a run's files, written locally, then kept in the store)."""
    for file in sorted(p for p in local.rglob("*") if p.is_file()):
        dest = target.child(file.relative_to(local).as_posix())
        with storage_errors(dest, "a location it may write"):
            dest.fs.put_file(os.fspath(file), dest.path)


def output_lock(folder: Location, what: str):
    """A local output folder is locked while written (:func:`~elmscale.core.files.
    folder_lock`: a second writer is an error naming it).  An object store has no lock:
    one writer per output folder, by design, and its objects appear whole."""
    if folder.is_local:
        return folder_lock(folder.local_path, what)
    return nullcontext(folder)


def _marker(output: Location) -> Location:
    return output.parent.child(MARKERS).child(f"{output.name}.json")


def marked_done(output: Location) -> bool:
    """Whether a rerun may skip ``output``: its marker names it, and the object is there
    with the size the marker recorded (an object without a marker, or one that vanished
    or changed since, is written again)."""
    marker = _marker(output)
    with storage_errors(marker, "a readable marker or none"):
        try:
            record = json.loads(marker.fs.cat_file(marker.path))
            size = output.fs.size(output.path)
        except (FileNotFoundError, json.JSONDecodeError):
            return False
    return (
        isinstance(record, dict)
        and record.get("output") == output.name
        and (record.get("size") == size)
    )
