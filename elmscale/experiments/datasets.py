"""Reading a protocol's data sets and cutting one trial's split.

:func:`load_dataset` reads a :class:`~elmscale.experiments.protocol.DataSet`'s files once
(on the coordinator); :func:`trial_split` cuts a trial's training and test parts from
them (on whichever worker runs the piece), scaled to [-1, 1] by factors fitted on the
training part only (the sparse-ELM paper, Section VI-A); :func:`piece_split` cuts a piece's
by its table's :class:`~elmscale.experiments.protocol.Evaluation` (a holdout split, or a
fold of a repeated k-fold partition; [-1, 1] or standardised inputs).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from sklearn.model_selection import KFold, StratifiedKFold, StratifiedShuffleSplit
from sklearn.preprocessing import StandardScaler

from elmscale.core.errors import DataError
from elmscale.data import Scaler, load
from elmscale.data.formats import detect_format
from elmscale.experiments.protocol import DataSet, Evaluation, Piece

__all__ = [
    "LoadedSet",
    "dataset_from_path",
    "kfold_split",
    "load_dataset",
    "piece_split",
    "trial_split",
]


@dataclass(frozen=True)
class LoadedSet:
    """A data set's rows: ``parts`` holds (X, y) per file, or one pooled (X, y).
    ``identity``: a hash of the spec and the rows (two sets alike in name but not in
    content differ in it; a piece worker keeps the set it holds by it)."""

    spec: DataSet
    parts: tuple[tuple[np.ndarray, np.ndarray], ...]
    identity: str = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        # computed once, where the set is loaded: it travels with the set when pickled
        object.__setattr__(self, "identity", _content_hash(self.spec, self.parts))

    @property
    def n_classes(self) -> int:
        """Classes in the labels (0 for a regression set)."""
        if self.spec.task == "regression":
            return 0
        return int(np.unique(np.concatenate([y for _, y in self.parts])).size)

    @property
    def group(self) -> str:
        if self.spec.group != "auto":
            return self.spec.group
        if self.spec.task == "regression":
            return "regression"
        return "binary" if self.n_classes == 2 else "multiclass"

    @property
    def n_features(self) -> int:
        return int(self.parts[0][0].shape[1])


def _content_hash(spec: DataSet, parts) -> str:
    """A hex digest of ``spec`` and the arrays of ``parts`` (dtype, shape and bytes; an
    object array by its pickle, whose raw bytes would be pointers)."""
    digest = hashlib.blake2b(repr(spec).encode(), digest_size=16)
    for array in (a for pair in parts for a in pair):
        array = np.asarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        if array.dtype.hasobject:
            digest.update(pickle.dumps(array, protocol=pickle.HIGHEST_PROTOCOL))
        else:
            digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def _resolve(file: str, data_dir: Path | None) -> Path:
    path = Path(file)
    if path.is_absolute() or data_dir is None:
        return path
    return data_dir / path


def missing_files(spec: DataSet, data_dir: Path | None) -> list[Path]:
    """The files of ``spec`` that are not there."""
    return [p for p in (_resolve(f, data_dir) for f in spec.files) if not p.is_file()]


def _from_source(spec: DataSet):
    """A source's rows as ``(X, y)``: an elmscale Dataset, a scikit-learn Bunch or a pair."""
    module, _, name = str(spec.source).partition(":")
    try:
        function = getattr(importlib.import_module(module), name)
        made = function(**dict(spec.source_kw))
    except Exception as exc:
        raise DataError(f"data set {spec.name!r}: source {spec.source} failed: {exc}") from exc
    if hasattr(made, "X") and hasattr(made, "y"):
        return made.X, made.y
    if hasattr(made, "data") and hasattr(made, "target"):
        return made.data, made.target
    if isinstance(made, tuple) and len(made) == 2:
        return made
    raise DataError(
        f"data set {spec.name!r}: source {spec.source} gave a {type(made).__name__}; "
        "expected a Dataset, a Bunch with data and target, or an (X, y) pair"
    )


def _read(spec: DataSet, data_dir: Path | None):
    """``(origin, X, y)`` per file of ``spec`` (or once, from its source)."""
    if spec.source:
        X, y = _from_source(spec)
        yield f"source {spec.source}", X, y
        return
    kw = dict(spec.load_kw)
    n_features = None
    for i, file in enumerate(spec.files):
        extra = dict(kw)
        if i > 0 and n_features is not None and "n_features" not in extra:
            # a LIBSVM test file may not name the last feature
            extra = _with_width(_resolve(file, data_dir), extra, n_features)
        path = _resolve(file, data_dir)
        ds = load(path, **extra)
        if i == 0:
            n_features = ds.X.shape[1]
        yield str(path), ds.X, ds.y


def load_dataset(spec: DataSet, data_dir: Path | None) -> LoadedSet:
    """Read every file of ``spec`` (or its source): float64 features, labels as read, then
    relabelled.  A file (or source) that does not give ``spec.n_features`` columns once
    the ``drop_columns`` are dropped is a :class:`DataError` naming it."""
    parts = []
    for i, (origin, X, y) in enumerate(_read(spec, data_dir)):
        X = np.asarray(X.toarray() if hasattr(X, "toarray") else X, dtype=np.float64)
        if spec.drop_columns:
            X = np.delete(X, list(spec.drop_columns), axis=1)
        if spec.n_features is not None and X.shape[1] != spec.n_features:
            dropped = f" once columns {list(spec.drop_columns)} are dropped"
            raise DataError(
                f"data set {spec.name!r}: {origin} gives {X.shape[1]} feature columns"
                f"{dropped if spec.drop_columns else ''}; expected {spec.n_features}"
            )
        y = np.asarray(y).copy()
        if spec.task == "regression":
            y = y.astype(np.float64)
        for file_index, old, new in spec.relabel:
            if file_index == i:
                y[y == old] = new
        parts.append((X, y))
    widths = {X.shape[1] for X, _ in parts}
    if len(widths) != 1:
        raise DataError(
            f"data set {spec.name!r}: its files have {sorted(widths)} feature columns; "
            "expected the same number in every file"
        )
    if spec.pool or len(parts) == 1:
        parts = [(np.vstack([X for X, _ in parts]), np.concatenate([y for _, y in parts]))]
    if spec.scale_target:
        low = min(float(y.min()) for _, y in parts)
        span = max(float(y.max()) for _, y in parts) - low
        if not span > 0:
            raise DataError(f"data set {spec.name!r}: the target is constant; cannot scale it")
        parts = [(X, (y - low) / span) for X, y in parts]
    return LoadedSet(spec, tuple(parts))


def _with_width(path: Path, kw: dict, n_features: int) -> dict:
    if detect_format(path) == "libsvm":
        return {**kw, "n_features": n_features}
    return kw


def trial_split(data: LoadedSet, seed: int, *, scaled: bool = True):
    """``(X_train, y_train, X_test, y_test)`` of one trial, scaled to [-1, 1] on the
    training part (``scaled=False``: as read)."""
    rng = np.random.default_rng(seed)
    spec = data.spec
    if len(data.parts) == 2:
        (X_tr, y_tr), (X_te, y_te) = data.parts
        train = rng.permutation(len(y_tr))[: spec.n_train]
        test = rng.permutation(len(y_te))[: spec.n_test]
        X_tr, y_tr, X_te, y_te = X_tr[train], y_tr[train], X_te[test], y_te[test]
    else:
        X, y = data.parts[0]
        n_train = spec.n_train if spec.n_train is not None else len(y) // 2
        n_test = spec.n_test if spec.n_test is not None else len(y) - n_train
        if n_train + n_test > len(y):
            raise DataError(
                f"data set {spec.name!r}: n_train={n_train} + n_test={n_test} rows requested; "
                f"the files hold {len(y)}"
            )
        if spec.stratify:
            # the class shares of the whole set in both parts (70 / 30 per trial, say)
            splitter = StratifiedShuffleSplit(
                n_splits=1,
                train_size=n_train,
                test_size=n_test,
                random_state=int(rng.integers(2**31 - 1)),
            )
            train, test = next(splitter.split(np.zeros((len(y), 1)), y))
        else:
            order = rng.permutation(len(y))
            train, test = order[:n_train], order[n_train : n_train + n_test]
        X_tr, y_tr, X_te, y_te = X[train], y[train], X[test], y[test]
    if not scaled:
        return X_tr, y_tr, X_te, y_te
    X_tr, X_te = _scaled(X_tr, X_te, "minmax")
    return X_tr, y_tr, X_te, y_te


def _scaled(X_tr, X_te, scaling: str):
    scaler = StandardScaler() if scaling == "standard" else Scaler()
    scaler.fit(X_tr)
    return scaler.transform(X_tr), scaler.transform(X_te)


def kfold_split(data: LoadedSet, trial: int, evaluation: Evaluation, seed: int):
    """Trial ``trial`` of a repeated k-fold evaluation: fold ``trial % outer_folds`` of
    repeat ``trial // outer_folds``, the partition shuffled by ``seed + repeat`` (the same
    for every method), stratified for classes; scaled on the training part."""
    if len(data.parts) != 1:
        raise DataError(
            f"data set {data.spec.name!r}: a k-fold evaluation needs one pool of rows; "
            "it has a separate test file (set pool=True)"
        )
    X, y = data.parts[0]
    folds = int(evaluation.outer_folds)
    repeat, fold = divmod(int(trial), folds)
    kind = StratifiedKFold if data.spec.task == "classification" else KFold
    splitter = kind(n_splits=folds, shuffle=True, random_state=int(seed) + repeat)
    train, test = list(splitter.split(X, y))[fold]
    X_tr, X_te = _scaled(X[train], X[test], evaluation.scaling)
    return X_tr, y[train], X_te, y[test]


def piece_split(data: LoadedSet, piece: Piece):
    """A trial piece's ``(X_train, y_train, X_test, y_test)`` by its evaluation."""
    evaluation = piece.evaluation
    if evaluation.split == "kfold":
        # the partition's seed is the protocol's, not the trial's: methods share it
        return kfold_split(data, piece.trial, evaluation, piece.seed - piece.trial)
    X_tr, y_tr, X_te, y_te = trial_split(data, piece.seed, scaled=False)
    X_tr, X_te = _scaled(X_tr, X_te, evaluation.scaling)
    return X_tr, y_tr, X_te, y_te


def dataset_from_path(path: str) -> DataSet:
    """A user's own file as a data set: half the rows train, half test, each trial.

    A file with a test file beside it is named ``train,test``.  CSV files take their label
    from the last column (the loaders' rules apply; see :func:`elmscale.data.load`).
    """
    files = tuple(os.path.abspath(p) for p in path.split(","))
    name = Path(files[0]).stem
    kw: tuple = ()
    if detect_format(files[0]) == "csv":
        kw = (("label", "last"),)
    return DataSet(name=name, files=files, load_kw=kw, note=f"user file {path}")
