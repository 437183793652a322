"""Data: the ``Dataset`` every reader returns (``dataset``), the LIBSVM, CSV and ARFF
readers (``text_formats``), Parquet data sets read and written whole (``parquet_io``),
format detection and the ``load`` dispatcher (``formats``), Parquet data sets cut into
work units (``parquet``), sparse rows in Parquet in Spark ML's vector layout
(``sparse_rows``), column choice (``columns``), the paper's scaling (``scaling``),
synthetic data (``synthetic``) and the public benchmark files through a local cache
(``public_data``).

Every public name of the submodules is importable from here (``from elmscale.data import
Scaler, load``); they load on first use, so that a worker that reads Parquet units does not
import the text readers or scikit-learn.
"""

from importlib import import_module

_NAMES = {
    "dataset": ("Dataset", "check_finite", "encode_labels"),
    "formats": ("detect_format", "load"),
    "text_formats": ("load_arff", "load_csv", "load_libsvm", "DEFAULT_NA_VALUES"),
    "parquet_io": ("load_parquet", "write_parquet", "MIN_ROW_GROUP", "MAX_ROW_GROUP"),
    "columns": ("PARQUET_SUFFIXES", "is_numeric_type", "parquet_columns"),
    "parquet": ("ParquetDataset", "WorkUnit", "open_parquet"),
    "scaling": ("Scaler",),
    "public_data": ("PUBLIC_FILES", "fetch_public", "get_data_home", "public_url"),
    "synthetic": (
        "generate_classification",
        "generate_two_gaussians",
        "generate_two_moons",
        "generate_two_spirals",
        "iter_classification_blocks",
        "write_generated_parquet",
        "GENERATED_MARKER",
    ),
}
_WHERE = {name: module for module, names in _NAMES.items() for name in names}


def __getattr__(name):
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_WHERE))


__all__ = sorted(_WHERE)
