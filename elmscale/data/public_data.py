"""The public benchmark files the shipped pipelines and benchmarks read, through a local cache.

Each file of :data:`PUBLIC_FILES` is a public copy at a fixed commit of a GitHub repository
(a ``https://raw.githubusercontent.com/<owner>/<repo>/<commit>/<path>`` URL) with its
sha256 and size.  :func:`fetch_public` gives the local copy, as scikit-learn's fetchers do:

* the cache is ``data_home`` (:func:`get_data_home`: the ``data_home=`` argument, else
  ``$ELMSCALE_DATA``, else ``~/elmscale_data``), each file under its :attr:`PublicFile.name`
  (``cod-rna/codrna.csv``): the layout of the project's ``../shared/data``;
* a file in the cache is used as it is, without the network (its size is checked);
* a missing one is downloaded to a temporary name beside it and renamed only when its
  sha256 is the registered one; otherwise nothing is kept and the error names the URL, the
  sha256 expected and the one got;
* a mirror (the ``mirror=`` argument, else ``$ELMSCALE_DATA_MIRROR``): a folder or URL
  holding the registered files under their names (a proxy, a copy made offline, the
  project's ``../shared/data``) is read instead of GitHub; its files are checked the same.

A pipeline's data path goes through :func:`resolve` (``elmscale.app.runner``): a registered
URL becomes its cached file, anything else is returned unchanged.  An ``https://`` URL that
is not registered is therefore read as any fsspec URL (:mod:`elmscale.data.storage`):
fetched again on every read, with no checksum, since none is known for it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from elmscale.core.errors import DataError
from elmscale.core.files import atomic_write
from elmscale.data.storage import is_url, locate, storage_errors

__all__ = [
    "DATA_HOME_ENV",
    "MIRROR_ENV",
    "PUBLIC_FILES",
    "PublicFile",
    "fetch_public",
    "get_data_home",
    "public_url",
    "resolve",
]

DATA_HOME_ENV = "ELMSCALE_DATA"
MIRROR_ENV = "ELMSCALE_DATA_MIRROR"
DEFAULT_DATA_HOME = "~/elmscale_data"

_RAW = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class PublicFile:
    """One registered file: its ``name`` in the cache and in a mirror, its public ``url``
    (a repository at a fixed commit), its ``sha256`` and ``size`` in bytes."""

    name: str
    url: str
    sha256: str
    size: int


def _file(name: str, repo: str, commit: str, path: str, sha256: str, size: int) -> PublicFile:
    return PublicFile(name, f"{_RAW}/{repo}/{commit}/{path}", sha256, size)


#: The registered files by URL (the sources of ../shared/data/README.md and its
#: regression/ and feature-selection/ READMEs; each blob checked against the shared copy).
PUBLIC_FILES: dict[str, PublicFile] = {
    f.url: f
    for f in (
        _file(
            "cod-rna/codrna.csv",
            "mcarmosi/icml_2021_submit",
            "65d400e11bd683a7038030968931ad40d10f45ef",
            "data/raw/codrna/codrna.csv",
            "62b4952aafd4ce87be1ccd8e45fe5cb556a9b00843fc6ea12562341319e306ea",
            3_714_634,
        ),
        _file(
            "satimage/satimage.scale",
            "sfujiwara/robust-svm",
            "b7dcdde31c30f3045d3c884a46bbfcdadb36a32c",
            "datasets/LIBSVM/satimage/satimage.scale",
            "b7150252d3117712588d9d5dfeb1a409234340313a93b458f66449a2678d5542",
            1_880_204,
        ),
        _file(
            "satimage/satimage.scale.t",
            "sfujiwara/robust-svm",
            "b7dcdde31c30f3045d3c884a46bbfcdadb36a32c",
            "datasets/LIBSVM/satimage/satimage.scale.t",
            "da3fb85baadd087beb9e8b32931224c443e26dc3305c09396170ab8997aedf92",
            847_958,
        ),
        _file(
            "australian/australian.dat",
            "Phas3r/MLCourse",
            "cbba3633ca95cc0f55f6233af1e080eccdea530a",
            "australian.dat",
            "1175297ee02ec98a7452bd6a0058f8590bcf933f58ada3a29d5c8f41babd0cc5",
            38_462,
        ),
        _file(
            "svmguide2/svmguide2.txt",
            "duvenaud/warped-mixtures",
            "fb90ddbf4d1c970254d8ef5545b823ebcc3a413a",
            "data/svmguide2.txt",
            "0fe7841f13956623ddc432528311453ab5bf9611c827f95b0b5fd1244ff15057",
            164_525,
        ),
        # the CCPP set, named Folds5x2_pp.csv (its UCI name) in the source
        _file(
            "regression/ccpp.csv",
            "Chilbro/DataScience_DataSets",
            "e9c6439e2227a1cb5cdb994fca9c2c3f4bd87e66",
            "Folds5x2_pp.csv",
            "76855630b59fb9b2ef08e02d5907f8c73f18d97a476ac25f06cca6dd7fe2df21",
            308_694,
        ),
        _file(
            "feature-selection/colon.csv",
            "Farzad-Zandi/Selecting-the-optimal-classifier-for-wrapper-based-feature-selection-methods.",
            "c77aa35e250db81833bb4ea3deca131c50ca7b6b",
            "Data/colon.csv",
            "0b7df02626b731238cedec09211e2cc75034badcf26603faf3ea3a03bee89793",
            2_109_873,
        ),
    )
}

_BY_NAME = {f.name: f for f in PUBLIC_FILES.values()}


def get_data_home(data_home: str | os.PathLike | None = None) -> Path:
    """The cache folder: ``data_home``, else ``$ELMSCALE_DATA``, else ``~/elmscale_data``
    (``~`` expanded; created when missing)."""
    home = data_home if data_home is not None else os.environ.get(DATA_HOME_ENV) or None
    path = Path(os.path.expanduser(os.fspath(home or DEFAULT_DATA_HOME)))
    path.mkdir(parents=True, exist_ok=True)
    return path


def public_url(name: str) -> str:
    """The public URL of the registered file ``name`` (``"cod-rna/codrna.csv"``)."""
    try:
        return _BY_NAME[name].url
    except KeyError:
        raise KeyError(f"{name!r}: not a registered file; known: {sorted(_BY_NAME)}") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _source(entry: PublicFile, mirror: str | os.PathLike | None) -> str:
    """Where ``entry`` is read from: its URL, or its name under the mirror."""
    mirror = mirror if mirror is not None else os.environ.get(MIRROR_ENV) or None
    if mirror is None:
        return entry.url
    base = os.fspath(mirror)
    if is_url(base):
        return f"{base.rstrip('/')}/{entry.name}"
    return os.fspath(Path(os.path.expanduser(base)) / entry.name)


def _download(entry: PublicFile, source: str, target: Path) -> Path:
    def write(tmp: Path) -> None:
        where = locate(source)
        if where.is_local:
            if not where.local_path.is_file():
                raise DataError(f"{source}: no such file in the mirror; expected {entry.name}")
            shutil.copyfile(where.local_path, tmp)
        else:
            with storage_errors(where, f"the public file {entry.name}"):
                where.fs.get_file(where.path, os.fspath(tmp))
        got = _sha256(tmp)
        if got != entry.sha256:
            via = "" if source == entry.url else f" (read from {source})"
            raise DataError(
                f"{entry.url}{via}: checksum mismatch: expected sha256 {entry.sha256} "
                f"({entry.size} bytes), got {got} ({tmp.stat().st_size} bytes); nothing was "
                f"kept in {target.parent}"
            )

    return atomic_write(target, write)


def fetch_public(
    url: str,
    *,
    data_home: str | os.PathLike | None = None,
    mirror: str | os.PathLike | None = None,
) -> Path:
    """The local copy of the registered file ``url`` (a key of :data:`PUBLIC_FILES`, or a
    registered name): the cached file when it is there (no network), else downloaded from
    ``url`` (or the ``mirror``), checked against its sha256 and kept.  An unregistered URL
    is a :class:`KeyError`."""
    entry = PUBLIC_FILES.get(url) or _BY_NAME.get(url)
    if entry is None:
        raise KeyError(f"{url}: not a registered public file (elmscale.data.PUBLIC_FILES)")
    target = get_data_home(data_home) / entry.name
    if target.is_file() and target.stat().st_size == entry.size:
        return target
    return _download(entry, _source(entry, mirror), target)


def resolve(
    path,
    *,
    data_home: str | os.PathLike | None = None,
    mirror: str | os.PathLike | None = None,
):
    """``path`` as a reader should open it: a registered URL's cached file
    (:func:`fetch_public`), any other path or URL unchanged."""
    if isinstance(path, str) and path in PUBLIC_FILES:
        return os.fspath(fetch_public(path, data_home=data_home, mirror=mirror))
    return path
