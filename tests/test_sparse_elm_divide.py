"""The kernel sparse ELM on Parquet by divide and conquer on Dask (kernel k-means parts,
sub-solves on the workers, the global solve here from their duals)."""

from __future__ import annotations

import functools
import os

import _datasets
import numpy as np
import pytest
from _faults import kill_the_worker_once, wait_for_a_new_worker
from _problems import assert_same_optimum

from elmscale import SparseELMClassifier, open_parquet
from elmscale.data import (
    Scaler,
    generate_classification,
    load,
    write_generated_parquet,
    write_parquet,
)
from elmscale.distributed import dataset_ops
from elmscale.distributed.divide_conquer import PHASES, fit_divide_conquer, partition
from elmscale.features.kernels import Kernel
from elmscale.models.sparse_elm_pairs import fit_binary
from elmscale.solvers.kernel_kmeans import kernel_kmeans, nearest_centre

pytestmark = pytest.mark.timeout(120)

TOL = 1e-3


@pytest.fixture(scope="module")
def binary_set(tmp_path_factory):
    out = tmp_path_factory.mktemp("divide") / "binary"
    write_generated_parquet(out, 5_000, 4, 2, random_state=5, rows_per_file=2_500)
    return open_parquet(out, label="label")


@pytest.fixture(scope="module")
def three_classes(tmp_path_factory):
    out = tmp_path_factory.mktemp("divide") / "three"
    write_generated_parquet(out, 4_500, 4, 3, random_state=6, rows_per_file=1_500)
    return open_parquet(out, label="label")


#: the binary set in 3 parts and the three classes in 2
ON_BOTH_SETS = pytest.mark.parametrize(
    ("data", "n_classes", "n_parts"), [("binary_set", 2, 3), ("three_classes", 3, 2)]
)


def _model(**kw):
    params = {"sigma": 0.5, "C": 1.0, "tol": TOL, "random_state": 0}
    params.update(kw)
    return SparseELMClassifier(**params)


def _same_optimum(fitted, reference, held_out):
    assert_same_optimum(fitted, reference, held_out, TOL)


def _status(model, n_rows, n_pairs):
    assert model.n_iter_.shape == (n_pairs,) and np.all(model.n_iter_ >= 0)
    assert model.sub_iter_.shape == (model.n_parts_, n_pairs)
    assert model.part_sizes_.sum() == n_rows and np.all(model.part_sizes_ > 0)
    assert model.phase_seconds_.shape == (len(PHASES),) and np.all(model.phase_seconds_ >= 0)


@ON_BOTH_SETS
def test_divide_and_conquer_is_the_single_process_optimum(
    request, dask_client, data, n_classes, n_parts
):
    dataset = request.getfixturevalue(data)
    X, y = dataset.read()
    single = _model().fit(X, y)
    divided = _model().fit(dataset, client=dask_client, n_parts=n_parts)
    assert divided.n_parts_ == n_parts
    n_pairs = n_classes * (n_classes - 1) // 2
    _status(divided, X.shape[0], n_pairs)
    np.testing.assert_array_equal(divided.classes_, single.classes_)
    held_out = generate_classification(2_000, 4, n_classes, random_state=50 + n_classes).X
    _same_optimum(divided, single, held_out)


@pytest.mark.needs_shared
def test_cod_rna(dask_client, tmp_path):
    data = load(_datasets.shared_data("cod-rna", "codrna.csv"))
    order = np.random.default_rng(0).permutation(data.n_samples)
    train, test = order[:6_000], order[6_000:10_000]
    scaler = Scaler().fit(data.X[train])
    X_tr, X_te = scaler.transform(data.X[train]), scaler.transform(data.X[test])
    path = write_parquet(X_tr, tmp_path / "codrna.parquet", y=data.y[train], row_group_size=1_500)
    single = _model().fit(X_tr, data.y[train])
    divided = _model().fit(open_parquet(path, label="label"), client=dask_client, n_parts=4)
    _same_optimum(divided, single, X_te)


@pytest.mark.timeout(300)
def test_a_worker_lost_in_the_sub_solves_changes_nothing(binary_set, dask_client, tmp_path):
    """The first sub-solve kills its worker (and the part's rows that worker held): Dask
    reruns it, reading those rows again, and the fit is the undisturbed one, bit for bit."""
    model = _model()
    X, y = dataset_ops.gather_rows(binary_set, client=dask_client)
    X32, _, kernel, _, problems, seed = model._prepare(X, y)
    fit = functools.partial(
        fit_divide_conquer,
        binary_set,
        X32,
        problems,
        kernel=kernel,
        options={"C": float(model.C), **model._solver_options()},
        n_parts=2,
        client=dask_client,
        seed=seed,
    )
    undisturbed = fit(solve=fit_binary)
    marker = tmp_path / "killed"
    pids = dask_client.run(os.getpid)
    recovered = fit(solve=functools.partial(kill_the_worker_once, str(marker), fit_binary))
    assert marker.exists()
    wait_for_a_new_worker(dask_client, pids)
    for lost, whole in zip(recovered.sub_alphas, undisturbed.sub_alphas):
        np.testing.assert_array_equal(lost, whole)
    for lost, whole in zip(recovered.solutions, undisturbed.solutions):
        np.testing.assert_array_equal(lost.alpha, whole.alpha)


def test_parts_are_a_function_of_the_rows_and_the_seed(binary_set, dask_client):
    X, _ = binary_set.read()
    kernel = Kernel("gaussian", sigma=0.5)
    parts, centres = partition(X, kernel, 4, seed=11, n_sample=500)
    again, _ = partition(X, kernel, 4, seed=11, n_sample=500)
    np.testing.assert_array_equal(parts, again)
    assert centres.n_centres == 4 and set(np.unique(parts)) == set(range(4))
    other, _ = partition(X, kernel, 4, seed=12, n_sample=500)
    assert not np.array_equal(parts, other)
    # the assignment computed on the workers is the one computed here
    centres, labels = kernel_kmeans(kernel, X[:500], 3, seed=1)
    here = kernel.block_matvec(X, centres.sample, centres.weights)
    there = dataset_ops.kernel_matvec(
        binary_set, centres.sample, centres.weights, kernel, client=dask_client
    )
    np.testing.assert_array_equal(
        nearest_centre(there, centres.centre_sq), nearest_centre(here, centres.centre_sq)
    )
    # the sample's own labels are its nearest centres: a fixed point of Lloyd's step
    np.testing.assert_array_equal(nearest_centre(here[:500], centres.centre_sq), labels)
    # a whole fit on the cluster: the same parts and model each time
    first = _model(random_state=3).fit(binary_set, client=dask_client, n_parts=2)
    second = _model(random_state=3).fit(binary_set, client=dask_client, n_parts=2)
    np.testing.assert_array_equal(first.part_sizes_, second.part_sizes_)
    np.testing.assert_array_equal(first.dual_coef_, second.dual_coef_)


@pytest.mark.parametrize("bad", [-1, 2.5, "many", True, None])
def test_bad_n_parts_is_named(binary_set, dask_client, bad):
    with pytest.raises(ValueError, match="n_parts"):
        _model().fit(binary_set, client=dask_client, n_parts=bad)


def test_more_parts_only_where_divide_and_conquer_runs(binary_set, dask_client):
    X, y = binary_set.read()
    with pytest.raises(ValueError, match="n_parts=3.*Dask"):
        _model().fit(X, y, n_parts=3)
    with pytest.raises(ValueError, match="n_parts=3.*Dask"):
        _model().fit(binary_set, n_parts=3)
    with pytest.raises(ValueError, match="n_parts=2.*hidden"):
        _model(hidden="sigmoid").fit(binary_set, client=dask_client, n_parts=2)


@pytest.mark.parametrize("n_parts", [0, 1])
def test_one_part_is_the_plain_path(binary_set, dask_client, n_parts):
    X, y = binary_set.read()
    single = _model().fit(X, y)
    plain = _model().fit(binary_set, client=dask_client, n_parts=n_parts)
    np.testing.assert_array_equal(plain.support_, single.support_)
    np.testing.assert_array_equal(plain.dual_coef_, single.dual_coef_)
    np.testing.assert_array_equal(plain.n_iter_, single.n_iter_)
    assert plain.n_parts_ == 1 and not hasattr(plain, "phase_seconds_")


def test_auto_gathers_and_solves_and_divides_for_early_prediction(
    binary_set, dask_client, tmp_path
):
    write_generated_parquet(tmp_path / "ten", 10_000, 4, 2, random_state=7, rows_per_file=5_000)
    ten = open_parquet(tmp_path / "ten", label="label")
    # the exact divide and conquer was measured no faster than one process: not the default
    auto = _model().fit(ten, client=dask_client)
    assert auto.n_parts_ == 1 and not hasattr(auto, "phase_seconds_")
    # early prediction: the workers' threads (2), at most one part per AUTO_PART_ROWS rows
    early = _model().fit(ten, client=dask_client, early_prediction=True)
    assert early.n_parts_ == sum(dask_client.nthreads().values()) == 2
    # refitting forgets the status of an earlier divided fit
    divided = _model().fit(binary_set, client=dask_client, n_parts=2)
    assert hasattr(divided, "phase_seconds_")
    divided.fit(binary_set, client=dask_client, n_parts=1)
    assert divided.n_parts_ == 1 and not hasattr(divided, "sub_iter_")


# -- early prediction: the parts' models, each row scored by its nearest centre's part --------


@pytest.fixture(scope="module")
def early_binary(binary_set, _session_dask_client):
    from _faults import restore_workers

    restore_workers(_session_dask_client, 2)
    return _model().fit(binary_set, client=_session_dask_client, n_parts=3, early_prediction=True)


def _route(model, X):
    """Each row's part, as the centres say (computed here, apart from the model)."""
    kernel = model._kernel_obj()
    cross = kernel.block_matvec(X, model.part_centres_, model.part_weights_)
    return nearest_centre(cross, model.part_centre_sq_)


@pytest.mark.timeout(90)
@ON_BOTH_SETS
def test_early_prediction_is_within_a_point_of_the_exact_fit(
    request, dask_client, data, n_classes, n_parts
):
    dataset = request.getfixturevalue(data)
    X, y = dataset.read()
    exact = _model().fit(X, y)
    early = _model().fit(dataset, client=dask_client, n_parts=n_parts, early_prediction=True)
    held_out = generate_classification(3_000, 4, n_classes, random_state=70 + n_classes)
    exact_acc = np.mean(exact.predict(held_out.X) == held_out.y)
    early_acc = np.mean(early.predict(held_out.X) == held_out.y)
    assert early_acc >= exact_acc - 0.01, (early_acc, exact_acc)
    # the status is the parts': no global solve ran
    n_pairs = n_classes * (n_classes - 1) // 2
    assert early.n_parts_ == n_parts
    _status(early, X.shape[0], n_pairs)
    np.testing.assert_array_equal(early.n_iter_, early.sub_iter_.max(axis=0))
    assert np.isnan(early.kkt_violation_).all() and early.converged_.all()
    assert np.all(early.phase_seconds_[2:] == 0)
    assert early.decision_function(held_out.X).shape == (
        (held_out.y.size,) if n_classes == 2 else (held_out.y.size, n_classes)
    )


@pytest.mark.timeout(60)
def test_early_prediction_routes_each_row_to_its_part(early_binary, binary_set, dask_client):
    model = early_binary
    assert model.support_part_.shape == model.support_.shape
    assert set(np.unique(model.support_part_)) == set(range(model.n_parts_))
    X = generate_classification(2_000, 4, 2, random_state=81).X
    part = _route(model, X)
    assert np.unique(part).size == model.n_parts_  # every part scores some rows
    decision = model.decision_function(X)
    for q in range(model.n_parts_):
        # a plain model holding the part's support vectors only
        sv = model.support_part_ == q
        alone = _model()
        alone.__dict__.update(
            {k: v for k, v in vars(model).items() if k.endswith("_") and k[-2:] != "__"}
        )
        for name in ("part_centres_", "part_weights_", "part_centre_sq_", "support_part_"):
            del alone.__dict__[name]
        alone.support_ = model.support_[sv]
        alone.support_vectors_ = model.support_vectors_[sv]
        alone.dual_coef_ = model.dual_coef_[:, sv]
        rows = part == q
        np.testing.assert_allclose(
            decision[rows], alone.decision_function(X[rows]), rtol=1e-12, atol=1e-12
        )
    # not the whole expansion: the parts' sums over every support vector differ
    whole = _model()
    whole.__dict__.update({k: v for k, v in vars(model).items() if k.endswith("_")})
    for name in ("part_centres_", "part_weights_", "part_centre_sq_", "support_part_"):
        del whole.__dict__[name]
    assert not np.allclose(whole.decision_function(X), decision)
    # refitting without early prediction forgets the partition
    again = _model().fit(binary_set, client=dask_client, n_parts=2)
    assert not any(hasattr(again, name) for name in ("part_centres_", "support_part_"))


@pytest.mark.timeout(60)
def test_early_prediction_model_file_round_trip(early_binary, tmp_path):
    import elmscale

    X = generate_classification(1_000, 4, 2, random_state=82).X
    path = tmp_path / "early.elm"
    early_binary.save(path)
    loaded = elmscale.load(path)
    for name in ("part_centres_", "part_weights_", "part_centre_sq_", "support_part_"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(early_binary, name))
    assert loaded.part_centres_.dtype == np.float32
    np.testing.assert_array_equal(loaded.decision_function(X), early_binary.decision_function(X))
    np.testing.assert_array_equal(loaded.predict(X), early_binary.predict(X))


@pytest.mark.timeout(60)
def test_early_prediction_has_no_onnx_export(early_binary):
    pytest.importorskip("onnx")
    from elmscale.io.onnx_export import UnsupportedModelError, to_onnx

    with pytest.raises(UnsupportedModelError, match="early_prediction.*nearest centre"):
        to_onnx(early_binary)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("bad", [1, 0, "yes", None, np.bool_(True)])
def test_bad_early_prediction_is_named(binary_set, dask_client, bad):
    with pytest.raises(ValueError, match="early_prediction must be True or False"):
        _model().fit(binary_set, client=dask_client, n_parts=2, early_prediction=bad)


@pytest.mark.timeout(30)
def test_early_prediction_only_where_divide_and_conquer_runs(binary_set, dask_client):
    X, y = binary_set.read()
    with pytest.raises(ValueError, match="early_prediction=True.*Dask"):
        _model().fit(X, y, early_prediction=True)
    with pytest.raises(ValueError, match="early_prediction=True.*Dask"):
        _model().fit(binary_set, early_prediction=True)
    with pytest.raises(ValueError, match="early_prediction=True.*hidden"):
        _model(hidden="sigmoid").fit(binary_set, client=dask_client, early_prediction=True)
    with pytest.raises(ValueError, match="early_prediction=True.*probability"):
        _model(probability=True).fit(
            binary_set, client=dask_client, n_parts=2, early_prediction=True
        )
    # 5,000 rows: "auto" gives one part
    with pytest.raises(ValueError, match="early_prediction=True needs more than one part"):
        _model().fit(binary_set, client=dask_client, early_prediction=True)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("n_parts", [0, 1])
def test_one_part_with_early_prediction_raises(binary_set, dask_client, n_parts):
    with pytest.raises(ValueError, match="early_prediction=True needs more than one part"):
        _model().fit(binary_set, client=dask_client, n_parts=n_parts, early_prediction=True)
