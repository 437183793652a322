"""One shape for every cross-validation result: scikit-learn's ``cv_results_``.

``GridSearchCV``, ``path_grid_search`` and ``cross_validate_path`` all report through
:func:`cv_results`, so reports (``elmscale.io.reports``) and the runner read one shape.
"""

from __future__ import annotations

import numpy as np

__all__ = ["cv_results"]


def cv_results(candidates: list[dict], split_scores: np.ndarray) -> dict:
    """``cv_results_`` of ``candidates`` (parameter dicts) scored ``split_scores``
    ``(n_candidates, n_folds)``: ``params``, ``param_<name>``, ``split<k>_test_score``,
    ``mean_test_score``, ``std_test_score``, ``rank_test_score`` (1 is best; ties keep
    candidate order, as scikit-learn's ``GridSearchCV``)."""
    split_scores = np.asarray(split_scores, dtype=np.float64)
    if split_scores.shape[0] != len(candidates):
        raise ValueError(f"{split_scores.shape[0]} rows of scores for {len(candidates)} candidates")
    mean, std = split_scores.mean(axis=1), split_scores.std(axis=1)
    order = np.argsort(-mean, kind="stable")
    rank = np.empty(len(candidates), dtype=np.int64)
    rank[order] = np.arange(1, len(candidates) + 1)
    results: dict = {"params": list(candidates)}
    for name in sorted({k for c in candidates for k in c}):
        results[f"param_{name}"] = np.array([c.get(name) for c in candidates], dtype=object)
    for k in range(split_scores.shape[1]):
        results[f"split{k}_test_score"] = split_scores[:, k]
    results.update(mean_test_score=mean, std_test_score=std, rank_test_score=rank)
    return results
