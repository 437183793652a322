"""The public API: ``elmscale.__all__`` names every registered estimator and every lazily
loaded name, each resolves, and ``help(elmscale)`` lists them."""

import pydoc
import subprocess
import sys

import elmscale
from elmscale import registry


def builtin_names():
    """The estimators elmscale registers itself (a test may register one of its own)."""
    return [
        e.name
        for e in registry.entries()
        if isinstance(e.target, str) and e.target.startswith("elmscale.")
    ]


def test_all_names_every_registered_estimator():
    missing = set(builtin_names()) - set(elmscale.__all__)
    assert not missing, f"registered but not in elmscale.__all__: {sorted(missing)}"
    assert {"FELMClassifier", "FKELMClassifier"} <= set(elmscale.__all__)


def test_every_name_in_all_resolves_and_registered_ones_are_the_registry_classes():
    for name in elmscale.__all__:
        assert getattr(elmscale, name) is not None, name
    for name in builtin_names():
        assert getattr(elmscale, name) is registry.entry(name).load(), name


def test_help_lists_the_estimators_and_functions():
    text = pydoc.render_doc(elmscale, renderer=pydoc.plaintext)
    for name in (*builtin_names(), "load", "save", "open_parquet", "ParquetDataset"):
        assert name in text, name


def test_star_import_gives_every_public_name():
    code = (
        "from elmscale import *\n"
        "import elmscale\n"
        "missing = [n for n in elmscale.__all__ if n not in globals()]\n"
        "assert not missing, missing\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
