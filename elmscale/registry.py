"""The estimator registry: every estimator the library's commands know, and what it can do.

Pipeline files (``[model] estimator``), model files, the command line (``--estimator``),
the runner and the grid search look estimators up here and read their capabilities; none
of them tests a class or its name.  Adding a model family is one module in
``elmscale.models`` plus one :func:`register` call below (or in your own code)::

    register(EstimatorEntry(
        "MyClassifier", "mypackage.models:MyClassifier",
        Capabilities(task="classifier", c_path=True)))

An entry names its class by ``"module:attribute"`` (imported on first use, so that
reading the registry imports no estimator) or by the class itself.  Loading a model file
rebuilds only registered classes, from JSON parameters and plain arrays.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module

__all__ = [
    "Capabilities",
    "EstimatorEntry",
    "entries",
    "entry",
    "entry_for",
    "names",
    "register",
    "unregister",
]

TASKS = ("classifier", "regressor")
GRID_PIECES = ("folds", "pairs")


@dataclass(frozen=True)
class Capabilities:
    """What an estimator can do, as the commands and the grid search need to know it.

    task : "classifier" or "regressor".
    c_path : ``fit_path(X, y, values)`` returns one fitted copy per value of the path
        parameter, cheaper than separate fits (grid pieces then solve the grid's values of
        it as one path); otherwise each value is a separate ``fit``.
    path_param : the parameter a grid search runs as the path: ``"C"`` (default), or
        another (FLSA-SVM's ``"n_support"``).
    parquet_fit : ``fit(dataset, client=...)`` takes a :class:`~elmscale.data.parquet.
        ParquetDataset` and reduces it on a Dask cluster: False, True, or a function of
        the estimator's parameters (random nodes only, say).
    parquet_cv : ``elmscale.model_selection.cross_validate_path`` cross-validates its C path
        on a Parquet data set in one pass (same forms as ``parquet_fit``).
    grid_pieces : how ``GridSearchCV`` cuts the work: "folds" (a piece per fold and
        parameter setting), or "pairs" (also per one-vs-one pair: the estimator provides
        ``grid_plan``, see :class:`elmscale.models.sparse_elm.SparseELMClassifier`).
    ray_fit : ``fit(X, y, ray_address=...)`` fans its own pieces (one-vs-one pairs) out as
        Ray tasks.
    paper_grid : ``"module:function"`` giving the paper's grid for a parameter dict, or
        None.
    """

    task: str
    c_path: bool = False
    path_param: str = "C"
    parquet_fit: bool | Callable[[dict], bool] = False
    parquet_cv: bool | Callable[[dict], bool] = False
    grid_pieces: str = "folds"
    ray_fit: bool = False
    paper_grid: str | None = None

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}; got {self.task!r}")
        if self.grid_pieces not in GRID_PIECES:
            raise ValueError(f"grid_pieces must be one of {GRID_PIECES}; got {self.grid_pieces!r}")

    def fits_parquet(self, params: dict) -> bool:
        """Whether an estimator with these parameters fits a Parquet data set on Dask."""
        return bool(self.parquet_fit(params) if callable(self.parquet_fit) else self.parquet_fit)

    def cross_validates_parquet(self, params: dict) -> bool:
        """Whether ``cross_validate_path`` takes an estimator with these parameters."""
        return bool(self.parquet_cv(params) if callable(self.parquet_cv) else self.parquet_cv)


@dataclass(frozen=True)
class EstimatorEntry:
    """One registered estimator: its name (as pipeline and model files write it), its class
    (``"module:attribute"`` or the class) and its capabilities."""

    name: str
    target: str | type = field(repr=False)
    capabilities: Capabilities

    def load(self) -> type:
        """The estimator class."""
        if isinstance(self.target, type):
            return self.target
        module, _, attribute = self.target.partition(":")
        return getattr(import_module(module), attribute)

    def paper_grid(self, params: dict) -> dict | None:
        """The paper's grid for an estimator with ``params``, or None."""
        if self.capabilities.paper_grid is None:
            return None
        module, _, attribute = self.capabilities.paper_grid.partition(":")
        return getattr(import_module(module), attribute)(params)


_REGISTRY: dict[str, EstimatorEntry] = {}


def register(new: EstimatorEntry, *, replace: bool = False) -> EstimatorEntry:
    """Add ``new``; an existing name is an error unless ``replace``."""
    if not isinstance(new, EstimatorEntry):
        raise TypeError(f"register takes an EstimatorEntry; got {type(new).__name__}")
    if new.name in _REGISTRY and not replace:
        raise ValueError(f"an estimator named {new.name!r} is already registered")
    _REGISTRY[new.name] = new
    return new


def unregister(name: str) -> None:
    """Remove the entry ``name`` (for tests and plug-ins)."""
    entry(name)
    del _REGISTRY[name]


def names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(_REGISTRY)


def entries() -> tuple[EstimatorEntry, ...]:
    return tuple(_REGISTRY.values())


def entry(name: str) -> EstimatorEntry:
    """The entry ``name``; an unknown name is a ``KeyError`` naming the closest."""
    try:
        return _REGISTRY[name]
    except (KeyError, TypeError):
        match = difflib.get_close_matches(str(name), list(_REGISTRY), n=1, cutoff=0.5)
        hint = f"did you mean {match[0]!r}?" if match else f"registered: {', '.join(_REGISTRY)}"
        raise KeyError(f"unknown estimator {name!r} ({hint})") from None


def entry_for(estimator) -> EstimatorEntry | None:
    """The entry whose class is exactly ``type(estimator)`` (a subclass is not its parent:
    its model file could not rebuild it), or None."""
    cls = type(estimator)
    for candidate in _REGISTRY.values():
        if candidate.load() is cls:
            return candidate
    return None


# -- the library's estimators -------------------------------------------------------------


_UNIFIED_GRID = "elmscale.models.paper_grids:unified_elm_grid"


def _random_nodes(params: dict) -> bool:
    """with random nodes only (``kernel`` unset)"""
    return params.get("kernel") is None


def _sparse_random_nodes(params: dict) -> bool:
    """with random nodes only (``hidden`` set)"""
    # the sparse ELM's random-node problem runs as Newton passes over the units
    return params.get("hidden") is not None


register(
    EstimatorEntry(
        "ELMClassifier",
        "elmscale.models.elm:ELMClassifier",
        Capabilities(
            task="classifier",
            c_path=True,
            parquet_fit=_random_nodes,
            parquet_cv=_random_nodes,
            paper_grid=_UNIFIED_GRID,
        ),
    )
)
register(
    EstimatorEntry(
        "ELMRegressor",
        "elmscale.models.elm:ELMRegressor",
        Capabilities(
            task="regressor",
            c_path=True,
            parquet_fit=_random_nodes,
            parquet_cv=_random_nodes,
            paper_grid=_UNIFIED_GRID,
        ),
    )
)
register(
    EstimatorEntry(
        "SparseELMClassifier",
        "elmscale.models.sparse_elm:SparseELMClassifier",
        Capabilities(
            task="classifier",
            c_path=True,
            parquet_fit=_sparse_random_nodes,
            grid_pieces="pairs",
            ray_fit=True,
            paper_grid="elmscale.models.paper_grids:sparse_elm_grid",
        ),
    )
)

# The boosting-ridge ensembles (elmscale.models.boosting_ridge): every one fits a Parquet
# data set on Dask (random nodes: the Gram of the S layers; KBRELM: K in row blocks), and
# the random-node ones cross-validate their C path on it in one pass.
for _ensemble in ("BRELM", "GBRELM", "GGBRELM", "KBRELM"):
    for _task in ("Classifier", "Regressor"):
        register(
            EstimatorEntry(
                f"{_ensemble}{_task}",
                f"elmscale.models.boosting_ridge:{_ensemble}{_task}",
                Capabilities(
                    task=_task.lower(),
                    c_path=True,
                    parquet_fit=True,
                    parquet_cv=_random_nodes,
                    paper_grid="elmscale.models.paper_grids:boosting_ridge_grid",
                ),
            )
        )

# FLSA-SVM (elmscale.models.flsa_svm): no C; one selection run gives every number of
# support vectors, so a grid search's path is n_support; fit(dataset, client=...) reduces the
# candidates' Gram over the units.
for _task in ("Classifier", "Regressor"):
    register(
        EstimatorEntry(
            f"FLSASVM{_task}",
            f"elmscale.models.flsa_svm:FLSASVM{_task}",
            Capabilities(task=_task.lower(), c_path=True, path_param="n_support", parquet_fit=True),
        )
    )

# FELM / FKELM (elmscale.models.felm): feature selection inside the sparse ELM; the
# candidate flips fan out as Ray tasks with fit(..., ray_address=...).
for _family in ("FELM", "FKELM"):
    register(
        EstimatorEntry(
            f"{_family}Classifier",
            f"elmscale.models.felm:{_family}Classifier",
            Capabilities(task="classifier", ray_fit=True),
        )
    )
