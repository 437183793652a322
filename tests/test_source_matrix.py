"""The closing table of issue 51: every family x {arrays, local Parquet, s3:// Parquet, Dask
DataFrame, Dask Array} x {fit, predict, score}, each cell a test that runs
(docs/guide/data-on-a-cluster.md shows the table with these tests' ids).

The same 600 rows (float32 features, so that every source holds the same numbers) are the
arrays, a local Parquet file and an s3:// object on the local S3 server (row groups of 150
rows: 4 units), and Dask collections of 4 persisted partitions of the same 150 rows, on the
session's two-worker LocalCluster.

* **fit**: ``fit`` from the source (Parquet: ``fit(dataset, client=client)``; collections:
  ``fit(X, y)`` with Dask's default client).  The s3:// and Dask fits map the same units as
  the local Parquet fit and give its model to the bit (``test_dask_collections``'
  promise); every source's model gives the arrays fit's decision values within the bound
  of a change of summation order in its sums (:func:`_tolerance`), or to the bit where
  nothing is summed in another order (kernel models: the rows gathered).
* **predict**: arrays: an ndarray.  Parquet files: the batch scorer
  (``elmscale.io.batch_scoring``: one prediction file per input, scored on the cluster,
  written next to it in the same store).  Collections: a lazy Dask collection with X's
  partitions (a Series with its divisions; an Array with its row chunks).  Each equals the
  arrays' predictions to the bit.
* **score**: the estimator's ``score`` (accuracy, or R^2) of the source's labelled rows:
  arrays in this process; a ParquetDataset's units and the collections' partitions on the
  workers (``score(dataset, client=client)``, ``score(X, y)``).  Accuracy equals the
  arrays' to the bit; R^2 within the rounding of its sums.
"""

from __future__ import annotations

import dask
import dask.array as da
import dask.dataframe as dd
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from distributed import wait

from elmscale import (
    ELMClassifier,
    ELMRegressor,
    FELMClassifier,
    FKELMClassifier,
    FLSASVMClassifier,
    FLSASVMRegressor,
    SparseELMClassifier,
    open_parquet,
)
from elmscale.models.boosting_ridge import (
    BRELMClassifier,
    BRELMRegressor,
    GBRELMClassifier,
    GBRELMRegressor,
    GGBRELMClassifier,
    GGBRELMRegressor,
    KBRELMClassifier,
    KBRELMRegressor,
)

pytestmark = pytest.mark.timeout(120)

N_ROWS, N_FEATURES, GROUP_ROWS = 600, 5, 150
FEATURES = [f"f{j}" for j in range(N_FEATURES)]
SOURCES = ("arrays", "parquet", "s3", "dask_dataframe", "dask_array")
OPERATIONS = ("fit", "predict", "score")
#: float64 unit roundoff: random-node families solve in double precision here, so that the
#: bound of :func:`_tolerance` is a float64 one (float32 Grams: tests/test_gram.py)
U64 = np.finfo(np.float64).eps / 2

_RIDGE = {"n_hidden": 10, "n_estimators": 3, "precision": "double", "random_state": 0}
_KERNEL_ENSEMBLE = {"sigma": 2.0, "n_estimators": 3}
#: ``{family: (estimator class, parameters, "classes" or "values")}``: every family of the
#: registry, each task
FAMILIES = {
    "elm": (ELMClassifier, {"n_hidden": 30, "precision": "double", "random_state": 0}, "classes"),
    "elm_regressor": (
        ELMRegressor,
        {"n_hidden": 30, "precision": "double", "random_state": 0},
        "values",
    ),
    "elm_kernel": (ELMClassifier, {"kernel": "gaussian", "sigma": 2.0}, "classes"),
    "sparse_elm": (
        SparseELMClassifier,
        {"hidden": "sigmoid", "n_hidden": 20, "random_state": 0},
        "classes",
    ),
    "sparse_elm_kernel": (SparseELMClassifier, {"kernel": "gaussian", "sigma": 2.0}, "classes"),
    "flsa_svm": (
        FLSASVMClassifier,
        {"n_support": 20, "candidates": 200, "random_state": 0},
        "classes",
    ),
    "flsa_svm_regressor": (
        FLSASVMRegressor,
        {"n_support": 20, "candidates": 200, "random_state": 0},
        "values",
    ),
    "felm": (FELMClassifier, {"n_hidden": 20, "random_state": 0}, "classes"),
    "fkelm": (FKELMClassifier, {"sigma": 2.0}, "classes"),
    "brelm": (BRELMClassifier, _RIDGE, "classes"),
    "brelm_regressor": (BRELMRegressor, _RIDGE, "values"),
    "gbrelm": (GBRELMClassifier, _RIDGE, "classes"),
    "gbrelm_regressor": (GBRELMRegressor, _RIDGE, "values"),
    "ggbrelm": (GGBRELMClassifier, _RIDGE, "classes"),
    "ggbrelm_regressor": (GGBRELMRegressor, _RIDGE, "values"),
    "kbrelm": (KBRELMClassifier, _KERNEL_ENSEMBLE, "classes"),
    "kbrelm_regressor": (KBRELMRegressor, _KERNEL_ENSEMBLE, "values"),
}

#: Cells left as strict xfails, with the reason: ``{(family, source, operation): reason}``
XFAIL: dict[tuple[str, str, str], str] = {}


def _cells():
    for family in FAMILIES:
        for source in SOURCES:
            for operation in OPERATIONS:
                marks = []
                if (family, source, operation) in XFAIL:
                    reason = XFAIL[(family, source, operation)]
                    marks.append(pytest.mark.xfail(strict=True, reason=reason))
                yield pytest.param(family, source, id=f"{family}-{source}", marks=marks)


def _frame(task: str) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N_ROWS, N_FEATURES)).astype(np.float32)
    signal = X[:, 0] - 0.5 * X[:, 1] + 0.3 * rng.normal(size=N_ROWS)
    df = pd.DataFrame(X, columns=FEATURES)
    if task == "values":
        df["label"] = (signal / 4 + 0.5).astype(np.float64)
    else:  # three classes
        df["label"] = np.digitize(signal, [-0.5, 0.5]).astype(np.int64)
    return df


class Sources:
    """Each task's rows as every source: ``arrays[task]`` ``(X, y)``, ``parquet[task]`` a
    local file, ``s3[task]`` its URL, ``frames[task]`` a persisted Dask DataFrame and
    ``arrays_on_cluster[task]`` ``(X, y)`` persisted Dask Arrays."""

    def __init__(self, tmp, s3_server, client):
        self.options = s3_server.storage_options
        self.tmp = tmp
        self.client = client
        bucket = s3_server.new_bucket("matrix")
        fs = s3_server.filesystem()
        self.arrays, self.parquet, self.s3, self.frames, self.arrays_on_cluster = {}, {}, {}, {}, {}
        for task in ("classes", "values"):
            df = _frame(task)
            self.arrays[task] = (df[FEATURES].to_numpy(), df["label"].to_numpy())
            folder = tmp / task
            folder.mkdir()
            path = folder / "rows.parquet"
            table = pa.Table.from_pandas(df, preserve_index=False)
            pq.write_table(table, path, row_group_size=GROUP_ROWS)
            self.parquet[task] = path
            fs.put(str(path), f"{bucket}/{task}/rows.parquet")
            self.s3[task] = f"s3://{bucket}/{task}/rows.parquet"
            ddf = client.persist(dd.from_pandas(df, chunksize=GROUP_ROWS))
            X, y = self.arrays[task]
            X_array = client.persist(da.from_array(X, chunks=(GROUP_ROWS, N_FEATURES)))
            y_array = client.persist(da.from_array(y, chunks=GROUP_ROWS))
            wait([ddf, X_array, y_array])
            assert ddf.npartitions == X_array.numblocks[0] == N_ROWS // GROUP_ROWS
            self.frames[task] = ddf
            self.arrays_on_cluster[task] = (X_array, y_array)

    def fit_input(self, source: str, task: str) -> tuple[tuple, dict]:
        """``(args, kwargs)`` of ``fit`` (and ``score``) from ``source``."""
        if source == "arrays":
            return self.arrays[task], {}
        if source == "parquet":
            return (open_parquet(self.parquet[task], label="label"),), {"client": self.client}
        if source == "s3":
            dataset = open_parquet(self.s3[task], label="label", storage_options=self.options)
            return (dataset,), {"client": self.client}
        if source == "dask_dataframe":
            ddf = self.frames[task]
            return (ddf[FEATURES], ddf["label"]), {}  # Dask's default client
        return self.arrays_on_cluster[task], {}


@pytest.fixture(scope="module")
def sources(tmp_path_factory, s3_server, _session_dask_client):
    return Sources(tmp_path_factory.mktemp("source_matrix"), s3_server, _session_dask_client)


_FITTED: dict = {}


def _fitted(family: str, source: str, sources: Sources):
    """The family's model fitted from ``source`` (once per module)."""
    if (family, source) not in _FITTED:
        cls, params, task = FAMILIES[family]
        args, kwargs = sources.fit_input(source, task)
        _FITTED[(family, source)] = cls(**params).fit(*args, **kwargs)
    return _FITTED[(family, source)]


def _fitted_state(model) -> dict:
    return {
        name: value
        for name, value in vars(model).items()
        if name.endswith("_")
        and not name.startswith("_")
        and not any(word in name for word in ("seconds", "timings"))
    }


def _assert_same_model(a, b) -> None:
    """The same fitted state to the bit (timings aside)."""
    sa, sb = _fitted_state(a), _fitted_state(b)
    assert sa.keys() == sb.keys()
    for name, value in sa.items():
        other = sb[name]
        if isinstance(value, np.ndarray) or np.ndim(value):
            np.testing.assert_array_equal(np.asarray(other), np.asarray(value), err_msg=name)
        elif hasattr(value, "to_dict"):  # a hidden layer
            assert repr(value.to_dict()) == repr(other.to_dict()), name
        else:
            assert value == other or (value != value and other != other), name


def _outputs(model, X) -> np.ndarray:
    """The model's real-valued outputs: decision values, or a regressor's predictions."""
    method = "decision_function" if hasattr(model, "decision_function") else "predict"
    return np.asarray(getattr(model, method)(X), dtype=np.float64)


def _features(model, X) -> np.ndarray | None:
    """The columns a random-node or support-vector model's system is built on (None: a
    kernel model whose fit gathers the rows and sums nothing in another order)."""
    layer = getattr(model, "hidden_layer_", None)
    if layer is not None:
        return layer.transform(X, dtype=np.float64)
    if isinstance(model, (FLSASVMClassifier, FLSASVMRegressor)):  # its support rows' kernel
        K = np.asarray(model._kernel_obj().block(X, model.support_vectors_), dtype=np.float64)
        return np.column_stack([K, np.ones(len(K))]) if model.fit_intercept else K
    return None


def _tolerance(model, X) -> float:
    """How far two fits of the same rows may differ in a decision value when their sums
    (the Gram ``H'H``, the gradients) are added in another order.

    Each sum of N terms changes by at most ``N u`` of its terms' sizes; a ridge system
    ``(I / C + H'H)`` (a Newton step's too: its rows are a subset) has condition number at
    most ``kappa = 1 + C lambda_max(H'H)``, which the change of the solution is bounded by
    relative to its size; FLSA-SVM's least squares on its support columns (no C: their
    number regularises) has ``kappa = lambda_max / lambda_min`` of ``A'A``.  ``S``
    learners solved in turn compound it S times.  Zero for kernel models, which sum
    nothing in another order.
    """
    H = _features(model, X)
    if H is None:
        return 0.0
    eig = np.linalg.eigvalsh(H.T @ H)
    kappa = 1.0 + float(model.C) * eig[-1] if hasattr(model, "C") else eig[-1] / eig[0]
    S = int(getattr(model, "n_estimators", 1))
    return S * X.shape[0] * U64 * kappa * float(np.abs(_outputs(model, X)).max())


# -- the cells ------------------------------------------------------------------------------


@pytest.mark.parametrize(("family", "source"), list(_cells())[0::3])
def test_fit(family, source, sources, dask_client):
    cls, _, task = FAMILIES[family]
    X, y = sources.arrays[task]
    model = _fitted(family, source, sources)
    assert isinstance(model, cls)
    assert model.n_features_in_ == N_FEATURES
    reference = _fitted(family, "arrays", sources)
    if source in ("s3", "dask_dataframe", "dask_array"):
        # the same units as the local Parquet fit: its model, to the bit
        _assert_same_model(_fitted(family, "parquet", sources), model)
    if source == "arrays":
        # the model learned the rows (better than a constant)
        assert model.score(X, y) > (0.6 if task == "classes" else 0.3)
        return
    np.testing.assert_allclose(
        _outputs(model, X), _outputs(reference, X), rtol=0, atol=_tolerance(reference, X)
    )


def _batch_scored(model, source: str, task: str, sources: Sources) -> np.ndarray:
    """The predictions the batch scorer writes for the source's file, next to it."""
    from elmscale.io.batch_scoring import plan_jobs, score_jobs

    options = sources.options if source == "s3" else None
    where = str(sources.s3[task] if source == "s3" else sources.parquet[task])
    folder = where.rsplit("/", 1)[0]
    out = f"{folder}/scored-{type(model).__name__}-{id(model)}"
    jobs = plan_jobs(model, where, out, features=FEATURES, storage_options=options)
    assert len(jobs) == 1
    summary = score_jobs(model, jobs, client=sources.client)
    assert (summary["scored"], summary["rows"]) == (1, N_ROWS)
    if source == "s3":
        import s3fs

        table = pq.read_table(jobs[0].target.path, filesystem=s3fs.S3FileSystem(**options))
    else:
        table = pq.read_table(jobs[0].target.path)
    return table["prediction"].to_numpy()


@pytest.mark.parametrize(("family", "source"), list(_cells())[1::3])
def test_predict(family, source, sources, dask_client):
    _, _, task = FAMILIES[family]
    X, _ = sources.arrays[task]
    model = _fitted(family, "arrays", sources)
    expected = model.predict(X)
    if source == "arrays":
        assert isinstance(expected, np.ndarray) and expected.shape == (N_ROWS,)
        if hasattr(model, "classes_"):
            assert set(np.unique(expected)) <= set(model.classes_)
        return
    if source in ("parquet", "s3"):
        np.testing.assert_array_equal(_batch_scored(model, source, task, sources), expected)
        return
    (X_source, _), _ = sources.fit_input(source, task)
    lazy = model.predict(X_source)
    assert dask.is_dask_collection(lazy)
    if source == "dask_dataframe":
        assert isinstance(lazy, dd.Series)
        assert lazy.npartitions == X_source.npartitions
        assert lazy.divisions == X_source.divisions
        got = lazy.compute().to_numpy()
    else:
        assert isinstance(lazy, da.Array)
        assert lazy.chunks[0] == X_source.chunks[0]
        got = lazy.compute()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("family", "source"), list(_cells())[2::3])
def test_score(family, source, sources, dask_client):
    _, _, task = FAMILIES[family]
    X, y = sources.arrays[task]
    model = _fitted(family, "arrays", sources)
    expected = model.score(X, y)
    args, kwargs = sources.fit_input(source, task)
    got = model.score(*args, **kwargs)
    assert isinstance(got, float)
    if task == "classes":
        assert got == expected  # a count over a count
    else:
        # R^2 = 1 - sse / spread, the spread from sum y^2 - (sum y)^2 / n: within N u of
        # sum y^2 relative to the spread
        spread = float(np.sum((y - y.mean()) ** 2))
        bound = 4 * N_ROWS * U64 * float(np.sum(y**2)) / spread
        assert abs(got - expected) <= bound, (got, expected, bound)


def test_the_guide_shows_every_cell():
    """docs/guide/data-on-a-cluster.md's table: a row per family, each cell its test id."""
    from pathlib import Path

    page = (Path(__file__).parents[1] / "docs/guide/data-on-a-cluster.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| ") and "`-" not in line]
    for family in FAMILIES:
        (row,) = [r for r in rows if f"| `{family}-arrays` |" in r]
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        assert [c.split()[0] for c in cells] == [f"`{family}-{s}`" for s in SOURCES], row
        for source, cell in zip(SOURCES, cells):
            xfails = [op for op in OPERATIONS if (family, source, op) in XFAIL]
            assert ("xfail" in cell) == bool(xfails), cell
