"""The input features a fitted model keeps, by name: for feature-selecting estimators
(FELM, FKELM: scikit-learn's ``get_support()``), alone or as the last step of a pipeline."""

from __future__ import annotations

__all__ = ["describe_kept", "kept_features"]

#: names listed in a line before "... and N more"
SHOWN = 20


def kept_features(model, feature_names) -> list[str] | None:
    """The names of the features ``model`` keeps, in input order; None when it keeps every
    feature by construction (no ``get_support``)."""
    final = model.steps[-1][1] if hasattr(model, "steps") else model
    if not hasattr(final, "get_support"):
        return None
    return [str(feature_names[i]) for i in final.get_support(indices=True)]


def describe_kept(kept: list[str], n_features: int) -> str:
    """``kept 3 of 2000 features: f12, f377, f1003`` (at most :data:`SHOWN` names)."""
    shown = ", ".join(kept[:SHOWN])
    more = f" ... and {len(kept) - SHOWN} more" if len(kept) > SHOWN else ""
    return f"kept {len(kept)} of {n_features} features: {shown}{more}"
