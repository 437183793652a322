"""Exceptions raised by elmscale.

``DataError`` is raised for bad input data (a file, a column, a value); it is a
``ValueError`` so that scikit-learn's conventions hold.  ``ModelFileError`` is
raised when a model file cannot be trusted (truncated, tampered, unknown
format).
"""


class DataError(ValueError):
    """Input data that elmscale cannot use; the message names the file or column."""


class PieceFailed(RuntimeError):
    """A piece of distributed work raised; the message names the piece and the cause."""


class ModelFileError(ValueError):
    """A model file that is truncated, tampered with, or of an unknown format."""
