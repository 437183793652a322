"""How an estimator's grid search is cut into pieces (``GridSearchCV`` runs them).

Estimators whose registry entry says ``grid_pieces="pairs"`` give their own plan from a
``grid_plan(X, y, splits, settings, Cs, scoring)`` method; the others get the grid search's
own (a piece per fold and parameter setting).  A plan names the pieces, the pure function
that runs one (on a Ray worker or a thread), the large arrays every piece shares, and how
the pieces' results become scores.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = ["GridPlan"]


@dataclass(frozen=True)
class GridPlan:
    """The pieces of a grid search.

    pieces : each starts with ``(fold, setting index, ...)``; what follows is the plan's
        (a one-vs-one pair, say), and is named in errors.
    fn : ``fn(piece, **shared, **kwargs)``, a pure function importable on a worker.
    shared : large values put in the object store once (Ray) and passed to every piece.
    kwargs : small values passed to every piece.
    scores : ``scores(results)`` with results in piece order gives the validation scores,
        an array ``(n_settings, n_C, n_folds)``.
    """

    pieces: Sequence[tuple]
    fn: Callable
    scores: Callable[[list], np.ndarray]
    shared: dict = field(default_factory=dict)
    kwargs: dict = field(default_factory=dict)
