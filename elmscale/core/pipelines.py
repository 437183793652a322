"""What the library's commands need to know of a fitted model, bare or in a Pipeline."""

from __future__ import annotations


def final_estimator(model):
    """The estimator that predicts: a Pipeline's last step, or the model itself."""
    return model[-1] if hasattr(model, "steps") else model
