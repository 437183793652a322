"""Model files that loading cannot execute.

Format (``format_version`` 1)
-----------------------------
A model file is a ZIP archive with these members:

``metadata.json``
    UTF-8 JSON object::

        {"format": "elmscale-model", "format_version": 1,
         "library_version": "0.1.0", "created": "2026-11-29T20:00:00+00:00",
         "model": <node>,
         "input": {"features": ["f1", ...], "label": "label"}}   # optional

    ``input`` (optional) names the data columns the model was trained on, in
    order, so that ``elmscale score`` picks the same columns from a file.

    A *node* describes one estimator::

        {"estimator": "ELMClassifier",          # a registered name, "Scaler" or "Pipeline"
         "params": {...},                       # get_params(deep=False), JSON values
         "attributes": {"n_features_in_": 8},   # fitted scalars, strings, lists
         "arrays": {"coef_": "arrays/0/coef_.npy", ...},
         # sparse rows kept by a fit on CSR input (support_vectors_, X_fit_), as CSR parts:
         "sparse_arrays": {"support_vectors_": {"format": "csr", "shape": [n, d],
                           "data": "arrays/0/support_vectors_.data.npy",
                           "indices": "arrays/0/support_vectors_.indices.npy",
                           "indptr": "arrays/0/support_vectors_.indptr.npy"}},
         "layers": {"hidden_layer_": {"kind": "sigmoid", "n_features": 8,
                                      "n_hidden": 500, "seed": 123,
                                      "weights": "arrays/0/hidden_layer_.weights.npy",
                                      "biases": "arrays/0/hidden_layer_.biases.npy"}},
         # or, for S random layers side by side (the boosting-ridge ensembles):
         # "layers": {"hidden_layer_": {"type": "concatenated_layers",
         #                              "layers": [<a layer as above>, ...]}},
         "steps": [[name, <node>], ...]}        # Pipeline only

``arrays/...npy``
    NumPy ``.npy`` files of numeric or fixed-width string dtype, read with
    ``allow_pickle=False`` (an object array cannot be loaded).  A sparse attribute's
    three parts are checked as a CSR matrix (``indptr`` from 0 to the number of stored
    values, non-decreasing; ``indices`` within the shape's columns) before it is built.

``SHA256SUMS``
    ``<sha256>  <member>`` for every other member; loading verifies each.

Only the estimators of ``elmscale.registry`` and the two containers
(``Scaler``, scikit-learn's ``Pipeline``) can be rebuilt, from JSON
parameters and plain arrays: nothing in the file is imported or executed.  A
truncated or modified file, an unknown estimator or a newer format version
raises ``ModelFileError``.  Files are written to a temporary name and renamed.  A path may
be an fsspec URL (``s3://bucket/models/model.elm``) with ``storage_options``
(:mod:`elmscale.data.storage`): the file is put whole in one request, and read whole.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
import zipfile
import zlib
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from elmscale import registry
from elmscale.core.errors import ModelFileError
from elmscale.data.storage import Location, locate, write_whole
from elmscale.features.layers import ConcatenatedLayers, HiddenLayer

FORMAT_NAME = "elmscale-model"
FORMAT_VERSION = 1


#: The containers a model file may hold besides the registered estimators.
CONTAINERS = ("Scaler", "Pipeline")

#: Parameters added after files were written whose default differs from what the files
#: meant: a file without the parameter loads with the value it had then (FELM / FKELM's
#: psi was always absolute before ``psi_scale`` existed).
MEANING_OF_MISSING_PARAMS = {
    "FELMClassifier": {"psi_scale": "absolute"},
    "FKELMClassifier": {"psi_scale": "absolute"},
    # written before its kernel values could be float32: it scores as it did, in float64
    "SparseELMClassifier": {"precision": "double"},
}


def supported() -> tuple[str, ...]:
    """Names a model file may hold: the registered estimators and the containers."""
    return registry.names() + CONTAINERS


def _containers() -> dict:
    from sklearn.pipeline import Pipeline

    from elmscale.data.scaling import Scaler

    return {"Scaler": Scaler, "Pipeline": Pipeline}


def _name_of(est) -> str:
    """The name ``est`` is saved under; a TypeError for a class that cannot be saved."""
    for name, cls in _containers().items():
        if type(est) is cls:
            return name
    found = registry.entry_for(est)
    if found is None:
        raise TypeError(f"cannot save a {type(est).__name__}; supported: {', '.join(supported())}")
    return found.name


def _class_of(name, path: Path) -> type:
    containers = _containers()
    if name in containers:
        return containers[name]
    try:
        return registry.entry(name).load()
    except KeyError:
        raise ModelFileError(
            f"{path}: unknown estimator {name!r}; this elmscale reads {', '.join(supported())}"
        ) from None


def _library_version() -> str:
    from elmscale import __version__

    return __version__


# -- writing -------------------------------------------------------------------


def _json_value(value, where: str):
    """``value`` as JSON, or an error saying which parameter cannot be stored."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (list, tuple)) and all(
        v is None or isinstance(v, (bool, str, int, float, np.number)) for v in value
    ):
        return [_json_value(v, where) for v in value]
    raise TypeError(
        f"cannot save {where} = {value!r}: only numbers, strings, None and "
        "lists of them can be stored in a model file"
    )


def _plain_array(value: np.ndarray, where: str) -> np.ndarray:
    if value.dtype == object:
        try:
            value = value.astype(str)
        except (TypeError, ValueError) as exc:  # pragma: no cover - exotic objects
            raise TypeError(f"cannot save {where}: object array of non-strings") from exc
        if not all(isinstance(v, str) for v in value.ravel().tolist()):
            raise TypeError(f"cannot save {where}: object array of non-strings")
    if value.dtype.kind not in "biufcUSM":
        raise TypeError(f"cannot save {where}: arrays of dtype {value.dtype} are not supported")
    return value


def _encode_layer(layer: HiddenLayer, member_prefix: str, arrays: dict) -> dict:
    spec = layer.to_dict()
    for part in ("weights", "biases"):
        member = f"{member_prefix}.{part}.npy"
        arrays[member] = getattr(layer, part)
        spec[part] = member
    return spec


def _encode(est, prefix: str, arrays: dict) -> dict:
    name = _name_of(est)
    node: dict = {"estimator": name}
    if name == "Pipeline":
        node["params"] = {"memory": None, "verbose": bool(est.verbose)}
        node["steps"] = [
            [step_name, _encode(step, f"{prefix}{i}/", arrays)]
            for i, (step_name, step) in enumerate(est.steps)
        ]
        return node
    params = est.get_params(deep=False)
    if "random_state" in params and not (
        params["random_state"] is None or isinstance(params["random_state"], (int, np.integer))
    ):
        params["random_state"] = None  # a RandomState object: the drawn seed is in the layer
    node["params"] = {k: _json_value(v, f"{name}.{k}") for k, v in params.items()}
    node["attributes"], node["arrays"], node["layers"] = {}, {}, {}
    sparse_arrays: dict = {}
    for attr, value in vars(est).items():
        if attr in params:
            continue
        where = f"{name}.{attr}"
        if isinstance(value, HiddenLayer):
            node["layers"][attr] = _encode_layer(value, f"arrays/{prefix}{attr}", arrays)
        elif isinstance(value, ConcatenatedLayers):
            node["layers"][attr] = {
                "type": "concatenated_layers",
                "layers": [
                    _encode_layer(layer, f"arrays/{prefix}{attr}.{i}", arrays)
                    for i, layer in enumerate(value.layers)
                ],
            }
        elif isinstance(value, np.ndarray):
            member = f"arrays/{prefix}{attr}.npy"
            arrays[member] = _plain_array(value, where)
            node["arrays"][attr] = member
        elif sp.issparse(value):
            sparse_arrays[attr] = _encode_sparse(value, f"arrays/{prefix}{attr}", arrays, where)
        else:
            node["attributes"][attr] = _json_value(value, where)
    if sparse_arrays:  # only then: a dense model's file is as before
        node["sparse_arrays"] = sparse_arrays
    return node


def _encode_sparse(value, member_prefix: str, arrays: dict, where: str) -> dict:
    """A sparse attribute (rows a fit on CSR input kept) as its CSR parts' members."""
    csr = sp.csr_matrix(value)
    csr.sort_indices()
    spec: dict = {"format": "csr", "shape": [int(n) for n in csr.shape]}
    for part in ("data", "indices", "indptr"):
        member = f"{member_prefix}.{part}.npy"
        arrays[member] = _plain_array(np.asarray(getattr(csr, part)), f"{where}.{part}")
        spec[part] = member
    return spec


def _npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def save(model, path, *, features=None, label=None, storage_options=None) -> Path | Location:
    """Write ``model`` (a fitted elmscale estimator, ``Scaler`` or a ``Pipeline`` of them) to
    ``path``; ``features`` / ``label``: the training data's column names, kept for scoring.
    ``path`` may be an fsspec URL with ``storage_options`` (never written into the file)."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(model)
    arrays: dict[str, np.ndarray] = {}
    metadata = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "library_version": _library_version(),
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "model": _encode(model, "0/", arrays),
    }
    if features is not None:
        metadata["input"] = {
            "features": [str(f) for f in features],
            "label": None if label is None else str(label),
        }
    members = {"metadata.json": json.dumps(metadata, indent=1, sort_keys=True).encode()}
    members.update({member: _npy_bytes(a) for member, a in arrays.items()})
    sums = "".join(
        f"{hashlib.sha256(data).hexdigest()}  {member}\n" for member, data in members.items()
    )

    def write(tmp: Path) -> None:
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
            for member, data in members.items():
                zf.writestr(member, data)
            zf.writestr("SHA256SUMS", sums)

    return write_whole(locate(path, storage_options), write, make_dirs=False)


# -- reading -------------------------------------------------------------------


def _inside_archive(name: str) -> bool:
    """Whether a member name stays inside the archive: relative, no ``..``, no drive."""
    parts = name.replace("\\", "/").split("/")
    return (
        bool(name)
        and not name.startswith(("/", "\\"))
        and ":" not in parts[0]
        and (".." not in parts)
    )


def _named(where: Location) -> Path | Location:
    """What errors name: a local file's path as pathlib writes it, else the URL."""
    return where.local_path if where.is_local else where


def _read_members(where: Location) -> dict[str, bytes]:
    path = _named(where)
    # an object is read whole in one request (a model file is small), then unzipped here
    source = where.local_path if where.is_local else io.BytesIO(where.read_bytes())
    try:
        with zipfile.ZipFile(source) as zf:
            infos = zf.infolist()
            for info in infos:
                # members are read into memory, never extracted; a name that points out of
                # the archive is refused all the same (nothing a file says names a path here)
                if not _inside_archive(info.filename):
                    raise ModelFileError(
                        f"{path}: member {info.filename!r} names a path outside the archive "
                        "(refused: a model file holds only its own members)"
                    )
            return {info.filename: zf.read(info) for info in infos}
    except (FileNotFoundError, ModelFileError):
        raise
    except (
        zipfile.BadZipFile,
        EOFError,
        OSError,
        zipfile.LargeZipFile,
        zlib.error,  # a damaged deflate stream
        NotImplementedError,  # a damaged header naming an unknown compression method
        ValueError,
    ) as exc:
        raise ModelFileError(
            f"{path}: not a complete elmscale model file (truncated, damaged or not a "
            f"model at all): {exc}"
        ) from exc


def _verify(path: Path, members: dict[str, bytes]) -> dict:
    if "SHA256SUMS" not in members or "metadata.json" not in members:
        raise ModelFileError(f"{path}: not an elmscale model file (no metadata.json / SHA256SUMS)")
    expected = {}
    for line in members["SHA256SUMS"].decode("utf-8", "replace").splitlines():
        digest, _, member = line.partition("  ")
        expected[member] = digest
    for member, data in members.items():
        if member == "SHA256SUMS":
            continue
        if member not in expected:
            raise ModelFileError(
                f"{path}: member {member!r} is not listed in SHA256SUMS (the file was modified)"
            )
        if hashlib.sha256(data).hexdigest() != expected[member]:
            raise ModelFileError(
                f"{path}: member {member!r} does not match its checksum "
                "(the file was modified or damaged)"
            )
    missing = set(expected) - set(members)
    if missing:
        raise ModelFileError(f"{path}: members missing: {sorted(missing)}")
    try:
        metadata = json.loads(members["metadata.json"])
    except (ValueError, RecursionError) as exc:
        raise ModelFileError(f"{path}: metadata.json is not valid JSON: {exc}") from exc
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT_NAME:
        raise ModelFileError(
            f"{path}: not an elmscale model file (format is "
            f"{metadata.get('format') if isinstance(metadata, dict) else None!r})"
        )
    version = metadata.get("format_version")
    if not isinstance(version, int):
        raise ModelFileError(f"{path}: format_version missing or not an integer")
    if version > FORMAT_VERSION:
        raise ModelFileError(
            f"{path}: written in model format version {version} (elmscale "
            f"{metadata.get('library_version', '?')}); this elmscale ({_library_version()}) "
            f"reads versions up to {FORMAT_VERSION}: upgrade elmscale to load it"
        )
    given = metadata.get("input")
    if given is not None and not (
        isinstance(given, dict)
        and isinstance(given.get("features"), list)
        and all(isinstance(f, str) for f in given["features"])
        and isinstance(given.get("label"), (str, type(None)))
    ):
        raise ModelFileError(
            f"{path}: metadata.json's input is malformed: expected "
            '{"features": [names], "label": name or null}'
        )
    return metadata


def _load_array(path: Path, members: dict[str, bytes], member: str) -> np.ndarray:
    if not isinstance(member, str) or member not in members:
        raise ModelFileError(f"{path}: array member {member!r} is missing")
    data = io.BytesIO(members[member])
    try:
        # the header's shape is checked against the bytes that follow before anything is
        # allocated: a header may declare 10^12 elements in a member of a few bytes
        major, _ = np.lib.format.read_magic(data)
        read_header = (
            np.lib.format.read_array_header_1_0
            if major == 1
            else np.lib.format.read_array_header_2_0
        )
        shape, _, dtype = read_header(data)
        declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if dtype.hasobject or declared != len(members[member]) - data.tell():
            raise ValueError(
                f"its header declares shape {shape} of {dtype} ({declared:,} bytes) but "
                f"{len(members[member]) - data.tell():,} bytes follow"
            )
        data.seek(0)
        return np.load(data, allow_pickle=False)
    except (ValueError, TypeError, OverflowError, EOFError) as exc:
        raise ModelFileError(f"{path}: {member} is not a plain array: {exc}") from exc


def _decode(node: dict, path: Path, members: dict[str, bytes]):
    name = node.get("estimator")
    cls = _class_of(name, path)
    if name == "Pipeline":
        steps = [(str(step_name), _decode(sub, path, members)) for step_name, sub in node["steps"]]
        return cls(steps)
    params = {**MEANING_OF_MISSING_PARAMS.get(name, {}), **node.get("params", {})}
    try:
        est = cls(**params)
        if name not in CONTAINERS and hasattr(est, "_parameter_constraints"):
            est._validate_params()  # the values a fit would accept, nothing else
    except (TypeError, ValueError) as exc:
        raise ModelFileError(
            f"{path}: parameters of {name} do not match this elmscale: {exc}"
        ) from exc
    for attr, value in node.get("attributes", {}).items():
        _check_attribute(cls, attr, path)
        setattr(est, attr, value)
    for attr, member in node.get("arrays", {}).items():
        _check_attribute(cls, attr, path)
        setattr(est, attr, _load_array(path, members, member))
    sparse_arrays = node.get("sparse_arrays", {})
    if not isinstance(sparse_arrays, dict):
        raise ModelFileError(f"{path}: sparse_arrays of {name} is not an object")
    for attr, spec in sparse_arrays.items():
        _check_attribute(cls, attr, path)
        setattr(est, attr, _decode_sparse(spec, attr, path, members))
    for attr, spec in node.get("layers", {}).items():
        _check_attribute(cls, attr, path)
        if isinstance(spec, dict) and spec.get("type") == "concatenated_layers":
            layers = spec.get("layers")
            if not isinstance(layers, list) or not layers:
                raise ModelFileError(f"{path}: {attr} lists no layers")
            value = ConcatenatedLayers(
                tuple(_decode_layer(s, f"{attr}[{i}]", path, members) for i, s in enumerate(layers))
            )
        else:
            value = _decode_layer(spec, attr, path, members)
        setattr(est, attr, value)
    return est


def _check_attribute(cls: type, attr, path: Path) -> None:
    """A fitted attribute a file may set: a plain name, not one of the class's own (its
    methods and properties stay the class's)."""
    if not isinstance(attr, str) or not attr.isidentifier() or attr.startswith("__"):
        raise ModelFileError(f"{path}: attribute name {attr!r} is not a fitted attribute")
    if hasattr(cls, attr):
        raise ModelFileError(
            f"{path}: attribute {attr!r} would replace {cls.__name__}.{attr} (refused)"
        )


def _decode_sparse(spec, where: str, path: Path, members: dict[str, bytes]) -> sp.csr_matrix:
    """A sparse attribute from its CSR parts, checked before scipy sees them (scipy's own
    checks are not all made at construction; a crafted index would be read out of range)."""
    shape = spec.get("shape") if isinstance(spec, dict) else None
    if (
        not isinstance(spec, dict)
        or spec.get("format") != "csr"
        or not isinstance(shape, list)
        or len(shape) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
    ):
        raise ModelFileError(f"{path}: {where} is not a CSR matrix's description: {spec!r}")
    data, indices, indptr = (
        _load_array(path, members, spec.get(part)) for part in ("data", "indices", "indptr")
    )
    n_rows, n_cols = shape
    if (
        data.ndim != 1
        or data.dtype.kind != "f"
        or indices.ndim != 1
        or indices.dtype.kind not in "iu"
        or indptr.ndim != 1
        or indptr.dtype.kind not in "iu"
        or indptr.shape[0] != n_rows + 1
        or indices.shape != data.shape
        or indptr[0] != 0
        or indptr[-1] != data.shape[0]
        or np.any(np.diff(indptr) < 0)
        or (indices.size and (indices.min() < 0 or indices.max() >= n_cols))
    ):
        raise ModelFileError(
            f"{path}: {where}'s CSR parts do not fit its shape {shape} (data "
            f"{data.shape} {data.dtype}, indices {indices.shape}, indptr {indptr.shape})"
        )
    return sp.csr_matrix((data, indices, indptr), shape=(n_rows, n_cols))


def _decode_layer(spec, where: str, path: Path, members: dict[str, bytes]) -> HiddenLayer:
    try:
        layer = HiddenLayer.from_dict(spec)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelFileError(f"{path}: {where} is not a hidden layer: {exc}") from exc
    weights = _load_array(path, members, spec["weights"])
    biases = _load_array(path, members, spec["biases"])
    if weights.shape != (layer.n_features, layer.n_hidden) or biases.shape != (layer.n_hidden,):
        raise ModelFileError(f"{path}: {where} arrays do not match its shape")
    # The saved weights win over a rebuild from the seed, so that a model
    # scores the same even if the random generator's stream ever changes.
    layer.__dict__["_weights"] = (weights.astype(np.float32), biases.astype(np.float32))
    return layer


def load(path, *, storage_options=None):
    """Load a model written by ``save``; raises ``ModelFileError`` for a bad file.  ``path``
    may be an fsspec URL with ``storage_options``."""
    where = locate(path, storage_options)
    members = _read_members(where)
    path = _named(where)
    metadata = _verify(path, members)
    try:
        model = _decode(metadata["model"], path, members)
    except ModelFileError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        raise ModelFileError(f"{path}: model description is malformed: {exc!r}") from exc
    _check_usable(model, path)
    return model


def _check_usable(model, path: Path) -> None:
    """The loaded model predicts one row of zeros: parts that do not fit together (a
    crafted file, its checksums made anew) are a ModelFileError here, not an error in the
    middle of scoring."""
    import warnings

    from elmscale.core.pipelines import final_estimator

    first = model.steps[0][1] if hasattr(model, "steps") else model
    n_features = getattr(first, "n_features_in_", None)
    if not isinstance(n_features, int) or isinstance(n_features, bool) or n_features < 1:
        raise ModelFileError(f"{path}: n_features_in_ = {n_features!r} is not a feature count")
    # a transformer saved on its own (a Scaler, a feature selector) transforms the row
    predicts = hasattr(model, "predict") or not hasattr(model, "transform")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if predicts:
                prediction = np.asarray(model.predict(np.zeros((1, n_features))))
            else:
                transformed = np.asarray(model.transform(np.zeros((1, n_features))))
    except Exception as exc:  # noqa: BLE001 - whatever a crafted file breaks, it is the file's
        raise ModelFileError(
            f"{path}: the model's parts do not fit together ({type(exc).__name__}: {exc})"
        ) from exc
    if not predicts:
        if transformed.ndim != 2 or transformed.shape[0] != 1 or not np.isfinite(transformed).all():
            raise ModelFileError(f"{path}: the model transforms one row into {transformed!r}")
        return
    final = final_estimator(model)
    classes = getattr(final, "classes_", None)
    if prediction.shape[:1] != (1,) or (classes is not None and prediction[0] not in classes):
        raise ModelFileError(f"{path}: the model predicts {prediction!r} for one row")
    if getattr(final, "probability", False) is True and "prob_a_" in vars(final):
        try:  # the calibration (elmscale.models.probability) fits the model it came with
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                proba = np.asarray(model.predict_proba(np.zeros((1, n_features))))
        except Exception as exc:  # noqa: BLE001 - as above: a crafted file's fault
            raise ModelFileError(
                f"{path}: the model's calibration does not fit it ({type(exc).__name__}: {exc})"
            ) from exc
        if proba.shape != (1, len(classes)) or not np.all(np.isfinite(proba)):
            raise ModelFileError(f"{path}: the model's calibration gives {proba!r} for one row")


def read_metadata(path, *, storage_options=None) -> dict:
    """The verified ``metadata.json`` of a model file (for ``elmscale info``)."""
    where = locate(path, storage_options)
    return _verify(_named(where), _read_members(where))


def saved_features(path, *, storage_options=None) -> list[str] | None:
    """The feature columns a model file says it was trained on (``input.features``), or
    None when it does not say."""
    return (read_metadata(path, storage_options=storage_options).get("input") or {}).get("features")
