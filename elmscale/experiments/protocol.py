"""A paper's experiments as data: data sets, methods with their grids, the CV scheme, trials.

A :class:`Protocol` says *what* to run; :mod:`elmscale.experiments.engine` runs it.  It
expands into independent :class:`Piece` s (one trial of one method on one data set, one
point of a figure), each named by a stable key, so a results journal can tell which
pieces are done.  Everything here is plain frozen data: a piece travels to a Ray or Dask
worker by value.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

__all__ = [
    "DEFAULT_PIECE_TIMEOUT",
    "CurveFigure",
    "DataSet",
    "Evaluation",
    "GridFigure",
    "Method",
    "Piece",
    "Protocol",
    "Table",
    "piece_key",
]

#: seconds a baseline's piece (scikit-learn's SVC on one trial: its CV over the grid, the
#: final fit) may run before it is stopped and left out, so that a paper's full run ends
#: on a laptop (measured: SVC's polynomial kernel on a9a ran past 16 minutes a trial);
#: ``elmscale reproduce --piece-timeout`` changes it, 0 lifts it
DEFAULT_PIECE_TIMEOUT = 900.0


@dataclass(frozen=True)
class DataSet:
    """A data set and how a trial splits it.

    ``files`` are relative to the data directory (or absolute: a user's own file).  With
    two files and ``pool=False`` the second is the test part and each trial only reorders
    both (the paper: "random permutation within training and testing set separately");
    otherwise the rows of all files are pooled and each trial draws a random
    ``n_train`` / ``n_test`` split (``None``: half each), stratified by class when
    ``stratify``.

    A set that needs no file (generated, or shipped with a library) has no ``files`` and
    a ``source`` instead: ``"module:function"`` called with ``source_kw``, giving an
    :class:`elmscale.data.Dataset`, a scikit-learn ``Bunch`` (``data``, ``target``) or an
    ``(X, y)`` pair, e.g. ``"sklearn.datasets:load_breast_cancer"``.
    """

    name: str
    files: tuple[str, ...]
    paper_name: str | None = None
    n_train: int | None = None
    n_test: int | None = None
    pool: bool = False
    #: keywords for :func:`elmscale.data.load`, one dict for every file
    load_kw: tuple[tuple[str, object], ...] = ()
    #: feature columns dropped after loading (an id column)
    drop_columns: tuple[int, ...] = ()
    #: labels renamed after loading, per file ((file index, old, new), ...)
    relabel: tuple[tuple[int, float, float], ...] = ()
    group: Literal["binary", "multiclass", "auto"] = "auto"
    note: str = ""
    task: Literal["classification", "regression"] = "classification"
    #: regression: targets scaled to [0, 1] by the whole set's range when loaded
    scale_target: bool = False
    #: rows from a function instead of files ("module:function"), called with source_kw
    source: str | None = None
    source_kw: tuple[tuple[str, object], ...] = ()
    #: a pooled set's trial split keeps the class shares (scikit-learn's stratified split)
    stratify: bool = False
    #: the feature columns the set must have once loaded (checked, naming the file)
    n_features: int | None = None

    def __post_init__(self) -> None:
        if bool(self.files) == bool(self.source):
            raise ValueError(
                f"data set {self.name!r}: give its files or a source, not "
                f"{'both' if self.files else 'neither'}"
            )

    @property
    def origin(self) -> str:
        """Where its rows come from (its files, or its source), for messages."""
        return ", ".join(self.files) if self.files else f"source {self.source}"


@dataclass(frozen=True)
class Method:
    """One estimator with one feature mapping, its fixed parameters and its CV grid.

    ``estimator`` is ``"module:Class"``; ``grid`` maps parameter names to the values the
    cross-validation tries (``C`` first).  ``c_path``: the estimator fits a whole path of
    ``path_param`` (C, or FLSA-SVM's ``n_support``) at once (``fit_path``), so the search
    runs one path per other setting.
    ``multiclass_params`` replace ``params`` on data sets with more than two classes (the
    paper's L = 1000 hidden nodes there).
    """

    name: str
    mapping: str
    estimator: str
    params: tuple[tuple[str, object], ...] = ()
    grid: tuple[tuple[str, tuple], ...] = ()
    c_path: bool = False
    path_param: str = "C"
    multiclass_params: tuple[tuple[str, object], ...] = ()
    #: the parameter that takes each trial's seed (random hidden nodes)
    seed_param: str | None = None
    #: a first CV stage (a grid) run with ``first_stage_params`` set (a cheap variant of
    #: the estimator: FELM / FKELM without feature selection); ``grid`` is then searched at
    #: its chosen values, which the final model keeps
    first_stage: tuple[tuple[str, tuple], ...] = ()
    first_stage_params: tuple[tuple[str, object], ...] = ()

    @property
    def label(self) -> str:
        return f"{self.name} ({self.mapping})"

    def grid_dict(self) -> dict[str, list]:
        return {name: list(values) for name, values in self.grid}


#: the metrics a table may report besides accuracy (``sklearn.metrics``): classification
#: in percent, regression as computed
METRICS = ("balanced_accuracy", "precision_macro", "f1_macro", "rmse", "r2")


@dataclass(frozen=True)
class Evaluation:
    """How a table's trials split, scale and score.

    ``split="holdout"``: each trial draws the data set's train / test split
    (:class:`DataSet`); ``"kfold"``: trial t is fold ``t % outer_folds`` of repeat
    ``t // outer_folds`` of a shuffled (stratified, for classes) k-fold partition seeded by
    the repeat alone, so every method sees the same partitions.  ``scaling``: the inputs
    to [-1, 1] ("minmax") or to zero mean and unit variance ("standard"), fitted on the
    training part.  ``metrics``: names of :data:`METRICS` computed on the test part.
    ``scoring``: the inner cross-validation's criterion (a scikit-learn scorer name; None:
    the estimator's ``score``).  ``cv_rows``: the inner cross-validation runs on a random
    (stratified, for classes) sample of at most this many training rows, and the chosen
    model is then fitted on them all (None: the CV uses every training row, as the papers).
    """

    split: Literal["holdout", "kfold"] = "holdout"
    outer_folds: int = 10
    repeats: int = 3
    scaling: Literal["minmax", "standard"] = "minmax"
    metrics: tuple[str, ...] = ()
    scoring: str | None = None
    cv_rows: int | None = None

    def __post_init__(self) -> None:
        unknown = [m for m in self.metrics if m not in METRICS]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; expected some of {METRICS}")
        if self.cv_rows is not None and (
            isinstance(self.cv_rows, bool) or not isinstance(self.cv_rows, int) or self.cv_rows < 20
        ):
            raise ValueError(f"cv_rows={self.cv_rows!r}; expected a whole number of at least 20")


@dataclass(frozen=True)
class Table:
    """Methods x data sets x trials: each trial chooses the parameters by ``folds``-fold
    CV on its training part, refits there, and tests.

    ``primary``: the summary column the statistics rank (``test_acc``, or ``test_<metric>``
    for a metric of ``evaluation``), higher better unless ``lower_is_better``; ``control``:
    the method Holm's test compares the others with.  ``feature_counts``: the report
    shows each method's kept input features (``n_features_selected``, recorded for every
    trial) beside its accuracy.
    """

    name: str
    mapping: str
    methods: tuple[Method, ...]
    datasets: tuple[str, ...]
    trials: int
    folds: int = 5
    paper_table: str | None = None
    evaluation: Evaluation = Evaluation()
    primary: str = "test_acc"
    lower_is_better: bool = False
    control: str = "sparse_elm"
    #: the task of its data sets (a protocol's other sets do not run in it)
    task: Literal["classification", "regression"] = "classification"
    feature_counts: bool = False


@dataclass(frozen=True)
class CurveFigure:
    """Training and test accuracy against the number of hidden nodes L, one line per C
    (the sparse-ELM paper's Figs. 2-5)."""

    name: str
    title: str
    method: Method
    datasets: tuple[str, ...]
    n_hidden: tuple[int, ...]
    Cs: tuple[float, ...]
    trials: int = 1


@dataclass(frozen=True)
class GridFigure:
    """Test accuracy over a C x kernel-parameter grid (the paper's Figs. 6-7)."""

    name: str
    title: str
    method: Method
    dataset: str
    param: str
    values: tuple[float, ...]
    Cs: tuple[float, ...]
    trials: int = 1


def piece_key(kind, table, dataset, method, mapping, trial, point=(), cv_rows=None) -> str:
    """The journal's name of a piece (:attr:`Piece.key`); results rows are joined to their
    timings by it."""
    parts = [kind, table, dataset, method, mapping]
    parts += [str(p) if not isinstance(p, tuple) else "" for p in point]
    if cv_rows is not None:  # a sampled CV is another experiment
        parts.append(f"cv{int(cv_rows)}")
    return "/".join(p for p in parts + [f"trial{int(trial)}"] if p)


@dataclass(frozen=True)
class Piece:
    """One independent piece of work; ``key`` names it in the results journal."""

    kind: Literal["trial", "curve", "grid"]
    dataset: str
    method: Method
    trial: int
    seed: int
    folds: int = 5
    table: str = ""
    #: curve: (L, Cs); grid: (param name, value, Cs)
    point: tuple = ()
    evaluation: Evaluation = Evaluation()

    @property
    def key(self) -> str:
        return piece_key(
            self.kind,
            self.table,
            self.dataset,
            self.method.name,
            self.method.mapping,
            self.trial,
            self.point,
            self.evaluation.cv_rows,
        )

    def describe(self) -> str:
        return f"{self.key} (seed {self.seed})"


@dataclass(frozen=True)
class Protocol:
    """A paper's experiments: its data sets, tables and figures."""

    name: str
    title: str
    datasets: tuple[DataSet, ...]
    tables: tuple[Table, ...] = ()
    curves: tuple[CurveFigure, ...] = ()
    grids: tuple[GridFigure, ...] = ()
    seed: int = 0
    #: "module:function" giving the paper's values as a frame (reference directory in)
    reference: str | None = None
    #: "module:function" judging the paper's headline claims on a run's results
    claims: str | None = None
    notes: tuple[str, ...] = field(default=())
    #: the report's support-vector table (the sparse-ELM paper's Table VIII)
    support_table: str | None = None

    def dataset(self, name: str) -> DataSet:
        for ds in self.datasets:
            if ds.name == name:
                return ds
        raise KeyError(name)

    def with_datasets(self, datasets: tuple[DataSet, ...]) -> Protocol:
        """The same experiments on ``datasets`` (chosen sets replace the paper's: a set
        that some table lists runs in the tables that list it; any other, a user's own
        set among them, in every table of its task; every figure runs on them)."""
        names = tuple(ds.name for ds in datasets)
        keep = set(names)
        listed = {name for t in self.tables for name in t.datasets}

        def runs_in(t: Table, d: DataSet) -> bool:
            return d.task == t.task and (d.name in t.datasets or d.name not in listed)

        tables = tuple(
            replace(t, datasets=tuple(d.name for d in datasets if runs_in(t, d)))
            for t in self.tables
        )
        curves = tuple(
            replace(c, datasets=tuple(d for d in c.datasets if d in keep)) for c in self.curves
        )
        grids = tuple(g for g in self.grids if g.dataset in keep)
        return replace(self, datasets=datasets, tables=tables, curves=curves, grids=grids)

    def with_cv_rows(self, cv_rows: int | None) -> Protocol:
        """The same experiments with every table's inner CV on at most ``cv_rows`` training
        rows (:class:`Evaluation`), said in the report's notes; None: unchanged."""
        if cv_rows is None:
            return self
        tables = tuple(
            replace(t, evaluation=replace(t.evaluation, cv_rows=cv_rows)) for t in self.tables
        )
        note = (
            f"the parameters are chosen by cross-validation on a random sample of at most "
            f"{cv_rows:,} of each trial's training rows (stratified; --cv-rows), not on all "
            "of them as the paper did; the chosen model is fitted and timed on them all"
        )
        return replace(self, tables=tables, notes=self.notes + (note,))

    def pieces(self) -> list[Piece]:
        """Every piece, in a fixed order (tables, then curve and grid figures)."""

        def each(kind, name, dataset, method, points, trials, folds=5, evaluation=Evaluation()):
            return [
                Piece(kind, dataset, method, t, self.seed + t, folds, name, point, evaluation)
                for point in points
                for t in range(trials)
            ]

        pieces: list[Piece] = []
        for table in self.tables:
            for dataset in table.datasets:
                for method in table.methods:
                    pieces += each(
                        "trial",
                        table.name,
                        dataset,
                        method,
                        [()],
                        table.trials,
                        table.folds,
                        table.evaluation,
                    )
        for curve in self.curves:
            points = [(n_hidden, tuple(curve.Cs)) for n_hidden in curve.n_hidden]
            for dataset in curve.datasets:
                pieces += each("curve", curve.name, dataset, curve.method, points, curve.trials)
        for grid in self.grids:
            points = [(grid.param, value, tuple(grid.Cs)) for value in grid.values]
            pieces += each("grid", grid.name, grid.dataset, grid.method, points, grid.trials)
        return pieces
