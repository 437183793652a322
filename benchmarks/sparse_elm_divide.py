"""The gaussian kernel sparse ELM fitted from Parquet by divide and conquer on a 2-worker Dask
LocalCluster, against the single-process solver and scikit-learn's SVC.

    python benchmarks/sparse_elm_divide.py            # COD-RNA's 59,535 rows; 300,000 generated
    python benchmarks/sparse_elm_divide.py --quick    # 4,000 COD-RNA rows; 6,000 generated

Parameters: COD-RNA's usual ones, features scaled to [-1, 1], sigma 0.5 (SVC: gamma =
1 / (2 sigma^2) = 2), C 1, tol 1e-3, 200 MB kernel cache.  Per set:

* one process: ``SparseELMClassifier`` fitted from arrays in this process (both cores: its
  solver's helper thread);
* divide and conquer: the same model fitted from the set written as Parquet, on a
  LocalCluster of 2 worker processes of 1 thread each (127.0.0.1), ``n_parts=2`` (the
  workers' threads) unless ``--n-parts`` (the model's default, "auto", gathers and solves
  here: dividing was measured no faster); its time includes gathering the rows;
* early prediction: the same, with ``early_prediction=True`` and ``--early-parts`` parts
  (8; ``--quick``: 2): no global solve, each test row scored by its nearest centre's
  part (not the one-process optimum);
* SVC (LIBSVM, one process), in a subprocess that is killed after ``--svc-limit`` seconds
  (30 minutes), and then said to be cut.

Prints fit time, objective (the dual, per one-vs-one pair: one here), test accuracy,
support vectors, the ratio one-process time / divide-and-conquer time (target: 1.5x or
more at equal accuracy), and the divide-and-conquer phases' seconds (partition,
sub-solves, gradient, global solve) with the global solve's steps; for early prediction,
fit time, test accuracy and its difference in points from the one-process fit's, support
vectors, the ratio one-process time / early-prediction time, and its phases.

Data: COD-RNA's training file from ../shared/data (the whole file, scaled on its rows);
its test file ``cod-rna.t`` is not in the shared folder, so the accuracy is measured on
``--codrna-test`` when given (LIBSVM format, scaled with the training rows' factors), else
on the training rows (and said so).  ``--quick`` takes a seeded split of the file (4,000
train / 4,000 test rows) instead.  The generated set: ``benchmarks/make_parquet.py``'s
problem (8 features in [-1, 1], 3 % label noise), kept in ``--data-dir``; test on 20,000
fresh rows.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from distributed import Client
from make_parquet import make_parquet
from sparse_elm_vs_svc import CODRNA, codrna_split
from two_workers import two_worker_cluster

from elmscale import SparseELMClassifier, open_parquet
from elmscale.data import Scaler, generate_classification, load, write_parquet
from elmscale.distributed.divide_conquer import PHASES

SIGMA, C, TOL, CACHE_MB = 0.5, 1.0, 1e-3, 200.0

# SVC's fit in a subprocess (killable): rows from .npy files, one JSON line back
_SVC_SCRIPT = """
import json, sys, time
import numpy as np
from sklearn.svm import SVC
folder, gamma, C, tol, cache = sys.argv[1], *map(float, sys.argv[2:6])
X, y = np.load(folder + "/X.npy"), np.load(folder + "/y.npy", allow_pickle=False)
X_te, y_te = np.load(folder + "/X_te.npy"), np.load(folder + "/y_te.npy", allow_pickle=False)
svc = SVC(kernel="rbf", gamma=gamma, C=C, tol=tol, cache_size=cache)
start = time.perf_counter()
svc.fit(X, y)
seconds = time.perf_counter() - start
acc = float(np.mean(svc.predict(X_te) == y_te))
print(json.dumps({"seconds": seconds, "accuracy": acc, "support": int(svc.support_.size)}))
"""


def _model() -> SparseELMClassifier:
    return SparseELMClassifier(sigma=SIGMA, C=C, tol=TOL, cache_size=CACHE_MB, random_state=0)


def codrna_sets(quick: bool, test_file: Path | None):
    """``(X, y, X_te, y_te, what the test rows are)`` of COD-RNA, scaled to [-1, 1]."""
    data = load(CODRNA)
    if quick:  # the paper's split's first 4,000 training and test rows
        return (*codrna_split(data, 4_000), "4,000 held-out rows of the file")
    scaler = Scaler().fit(data.X)
    X = scaler.transform(data.X)
    if test_file is None:
        return X, data.y, X, data.y, "the training rows (cod-rna.t is not in ../shared)"
    test = load(test_file, n_features=data.n_features)
    return X, data.y, scaler.transform(test.X), test.y, f"{test.n_samples:,} rows of {test_file}"


def svc_fit(X, y, X_te, y_te, limit: float) -> str:
    """SVC's fit in a subprocess killed after ``limit`` seconds, as a line of text."""
    with tempfile.TemporaryDirectory(prefix="elmscale-svc-") as folder:
        for name, value in (("X", X), ("y", y), ("X_te", X_te), ("y_te", y_te)):
            np.save(Path(folder) / f"{name}.npy", np.asarray(value), allow_pickle=False)
        gamma = 1.0 / (2.0 * SIGMA**2)
        command = [sys.executable, "-c", _SVC_SCRIPT, folder, str(gamma), str(C), str(TOL)]
        try:
            done = subprocess.run(
                [*command, str(CACHE_MB)], capture_output=True, text=True, timeout=limit
            )
        except subprocess.TimeoutExpired:
            return f"SVC                 : cut after {limit:.0f} s (killed; not finished)"
    if done.returncode != 0:
        return f"SVC                 : failed ({done.stderr.strip().splitlines()[-1:]})"
    r = json.loads(done.stdout.strip().splitlines()[-1])
    return (
        f"SVC                 : fit {r['seconds']:8.2f} s, test acc {r['accuracy']:.4f}, "
        f"SVs {r['support']:,}"
    )


def compare(name, X, y, X_te, y_te, tested_on, folder: Path, client, args) -> None:
    path = write_parquet(X, folder / f"{name.split()[0]}.parquet", y=y, row_group_size=32_768)
    dataset = open_parquet(path, label="label")
    print(f"{name}: {X.shape[0]:,} train rows x {X.shape[1]} features; test on {tested_on}")

    start = time.perf_counter()
    single = _model().fit(X, y)
    single_s = time.perf_counter() - start
    single_acc = float(np.mean(single.predict(X_te) == y_te))
    print(
        f"  one process         : fit {single_s:8.2f} s, objective {single.objective_[0]:.6e}, "
        f"test acc {single_acc:.4f}, SVs {single.support_.size:,}, steps {single.n_iter_[0]:,}",
        flush=True,
    )

    start = time.perf_counter()
    divided = _model().fit(dataset, client=client, n_parts=args.n_parts)
    divided_s = time.perf_counter() - start
    divided_acc = float(np.mean(divided.predict(X_te) == y_te))
    rel = (divided.objective_[0] - single.objective_[0]) / abs(single.objective_[0])
    print(
        f"  divide and conquer  : fit {divided_s:8.2f} s, objective {divided.objective_[0]:.6e} "
        f"(relative to one process {rel:+.1e}, {'within' if abs(rel) <= TOL else 'NOT within'} "
        f"tol), test acc {divided_acc:.4f}, SVs {divided.support_.size:,}; "
        f"one process / divide and conquer {single_s / divided_s:.2f}x",
        flush=True,
    )
    if divided.n_parts_ > 1:
        phases = ", ".join(
            f"{phase} {seconds:.2f} s" for phase, seconds in zip(PHASES, divided.phase_seconds_)
        )
        print(
            f"    {divided.n_parts_} parts of {', '.join(f'{n:,}' for n in divided.part_sizes_)} "
            f"rows; sub-solve steps {', '.join(f'{n:,}' for n in divided.sub_iter_[:, 0])}; "
            f"{phases}; global steps {divided.n_iter_[0]:,}",
            flush=True,
        )
    else:
        print("    one part: gathered and solved here (n_parts)")

    start = time.perf_counter()
    early = _model().fit(dataset, client=client, n_parts=args.early_parts, early_prediction=True)
    early_s = time.perf_counter() - start
    early_acc = float(np.mean(early.predict(X_te) == y_te))
    phases = ", ".join(
        f"{phase} {seconds:.2f} s" for phase, seconds in zip(PHASES[:2], early.phase_seconds_)
    )
    print(
        f"  early prediction    : fit {early_s:8.2f} s, test acc {early_acc:.4f} "
        f"({100 * (early_acc - single_acc):+.2f} points against one process), SVs "
        f"{early.support_.size:,}; one process / early prediction {single_s / early_s:.2f}x",
        flush=True,
    )
    print(
        f"    {early.n_parts_} parts of {', '.join(f'{n:,}' for n in early.part_sizes_)} rows; "
        f"sub-solve steps {', '.join(f'{n:,}' for n in early.sub_iter_[:, 0])}; {phases}",
        flush=True,
    )
    print(f"  {svc_fit(X, y, X_te, y_te, args.svc_limit)}", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rows", type=int, default=None, help="generated rows (300,000)")
    parser.add_argument("--n-parts", default="2", help="parts: a number (2) or 'auto'")
    parser.add_argument(
        "--early-parts", type=int, default=None, help="early prediction's parts (8; --quick: 2)"
    )
    parser.add_argument("--svc-limit", type=float, default=1800.0, help="SVC's seconds at most")
    parser.add_argument("--codrna-test", type=Path, default=None, help="COD-RNA's cod-rna.t")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    args.n_parts = args.n_parts if args.n_parts == "auto" else int(args.n_parts)
    args.early_parts = args.early_parts or (2 if args.quick else 8)
    rows = args.rows or (6_000 if args.quick else 300_000)
    print(
        f"SparseELMClassifier(sigma={SIGMA}, C={C:g}, tol={TOL:g}, cache_size={CACHE_MB:.0f}); "
        f"divide and conquer with n_parts={args.n_parts!r}, early prediction with "
        f"n_parts={args.early_parts}, on a 2-worker LocalCluster (1 thread each); SVC(gamma=2) "
        "in a subprocess"
    )
    sets = [("COD-RNA", *codrna_sets(args.quick, args.codrna_test))]
    generated = open_parquet(
        make_parquet(args.data_dir / f"classification-{rows}", rows), label="label"
    )
    X, y = generated.read()
    test = generate_classification(20_000, 8, random_state=12345)
    sets.append((f"generated {rows:,}", X, y, test.X, test.y, "20,000 fresh rows"))
    # a seeded sample: the COD-RNA file is sorted by label (its first rows one class)
    pick = np.random.default_rng(0).permutation(sets[0][1].shape[0])[:2_000]
    warm_X, warm_y = sets[0][1][pick], sets[0][2][pick]
    _model().fit(warm_X[:300], warm_y[:300])  # compiled kernels loaded before any timing
    with (
        tempfile.TemporaryDirectory(prefix="elmscale-divide-") as folder,
        two_worker_cluster() as cluster,
        Client(cluster) as client,
    ):
        # the workers load the compiled kernels once, before any timing
        small = write_parquet(warm_X, Path(folder) / "warm.parquet", y=warm_y)
        _model().fit(open_parquet(small, label="label"), client=client, n_parts=2)
        for name, X, y, X_te, y_te, tested_on in sets:
            compare(name, X, y, X_te, y_te, tested_on, Path(folder), client, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
