"""Cross-validation along C paths: ``GridSearchCV`` and ``path_grid_search`` on arrays (pieces
on Ray or on threads), ``cross_validate_path`` on Parquet data sets, the papers' grids."""

from elmscale.model_selection.parquet_path import PathCVResult, cross_validate_path
from elmscale.model_selection.search import (
    PAPER_C_GRID,
    PAPER_DEGREE_GRID,
    PAPER_SIGMA_GRID,
    GridSearchCV,
    PathSearchResult,
    paper_grid,
    path_grid_search,
)

__all__ = [
    "PAPER_C_GRID",
    "PAPER_DEGREE_GRID",
    "PAPER_SIGMA_GRID",
    "GridSearchCV",
    "PathCVResult",
    "PathSearchResult",
    "cross_validate_path",
    "paper_grid",
    "path_grid_search",
]
