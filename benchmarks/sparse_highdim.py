"""The kernel sparse ELM on high-dimensional sparse rows (rcv1-like), from CSR and from a
LIBSVM file, against the CPU SVCs (LIBSVM, oneDAL) on the same CSR.

    python benchmarks/sparse_highdim.py            # 12,000 rows x 47,236 features
    python benchmarks/sparse_highdim.py --quick    # 3,000 rows (CI: seconds)

The data are generated with rcv1's shape: 47,236 features, about 0.16 % of the cells
nonzero (76 words a row), tf-idf-like nonnegative values (log term counts times an idf
from Zipf word frequencies), each row normalised to unit length; two classes, each with
its own topic words mixed into the common ones, and 5 % of the labels flipped.  Nothing is
ever densified: the rows as a dense float32 array would be 12,000 x 47,236 x 4 = 2.3 GB.

Gaussian kernel, sigma = 1 (gamma = 1 / (2 sigma^2) = 0.5 for the SVCs), C = 10,
tol = 1e-3, a 200 MB cache for all.  Timed in the same run: elmscale's
``SparseELMClassifier`` fitted from the CSR matrix and from a LIBSVM file written to a
temporary folder and read back with ``elmscale.data.load_libsvm(dense=False)`` (its read
timed apart); scikit-learn's SVC (LIBSVM) and, when scikit-learn-intelex is installed,
oneDAL's SVC, both on the same CSR (float64, as they take it).  Prints fit and predict
wall times (best of ``--repeat``), test accuracies, the ratios peer / ours, and the peak
memory elmscale's fit from CSR took above what it held before (Python's tracemalloc:
numpy's arrays, the column cache included) against the CSR's own size.
"""

from __future__ import annotations

import argparse
import functools
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file
from sklearn.svm import SVC

from elmscale import SparseELMClassifier
from elmscale.data import load_libsvm

N_FEATURES = 47_236  # rcv1's
WORDS_PER_ROW = 93  # words drawn a row: 76 distinct (rcv1: 0.16 % of 47,236) once repeats add up
TOPIC_WORDS = 1_500  # each class's own words
TOPIC_SHARE = 0.3  # of a row's words drawn from its class's topic
FLIP = 0.05  # labels flipped
SIGMA, C, TOL, CACHE_MB = 1.0, 10.0, 1e-3, 200.0


def rcv1_like(n_rows: int, n_features: int = N_FEATURES, seed: int = 0):
    """``(X, y)``: ``n_rows`` rows of rcv1's sparsity (CSR float32, tf-idf-like, unit rows)
    and labels 0 / 1 (see the module's docstring)."""
    rng = np.random.default_rng(seed)
    freq = 1.0 / np.arange(1, n_features + 1) ** 1.1  # Zipf word frequencies
    freq = rng.permutation(freq / freq.sum())
    idf = np.log(1.0 / freq) - np.log(1.0 / freq.max()) + 1.0
    topics = [rng.choice(n_features, TOPIC_WORDS, replace=False) for _ in range(2)]
    y = rng.integers(0, 2, n_rows)
    counts = np.maximum(1, rng.poisson(WORDS_PER_ROW, n_rows))
    row_of = np.repeat(np.arange(n_rows), counts)
    from_topic = rng.random(row_of.size) < TOPIC_SHARE
    words = rng.choice(n_features, row_of.size, p=freq)
    topic_pick = rng.integers(0, TOPIC_WORDS, row_of.size)
    topic_words = np.where(y[row_of] == 0, topics[0][topic_pick], topics[1][topic_pick])
    words = np.where(from_topic, topic_words, words)
    # duplicate words of a row add up (term counts); log(1 + tf) idf, then unit rows
    X = sp.csr_matrix(
        (np.ones(row_of.size), (row_of, words)), shape=(n_rows, n_features), dtype=np.float64
    )
    X.sum_duplicates()
    X.data = np.log1p(X.data) * idf[X.indices]
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.csr_matrix(sp.diags(1.0 / norms) @ X, dtype=np.float32)
    X.sum_duplicates()  # canonical (sorted, no repeats), as a LIBSVM file's reader gives it
    flip = rng.random(n_rows) < FLIP
    return X, np.where(flip, 1 - y, y)


def csr_bytes(X) -> int:
    """The CSR matrix's own size: its values, column numbers and row offsets."""
    return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes


@functools.cache
def onedal_svc_class():
    """oneDAL's SVC (scikit-learn-intelex), or None where it is not installed (imported
    before any clock starts: the import alone takes seconds)."""
    try:
        from sklearnex.svm import SVC as OneDALSVC
    except ImportError:
        return None
    return OneDALSVC


def best_of(repeat: int, fn):
    """``(best wall seconds, last result)`` of ``repeat`` calls of ``fn``."""
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def ours() -> SparseELMClassifier:
    return SparseELMClassifier(kernel="gaussian", sigma=SIGMA, C=C, tol=TOL, cache_size=CACHE_MB)


def svc(cls):
    return cls(kernel="rbf", gamma=1.0 / (2.0 * SIGMA**2), C=C, tol=TOL, cache_size=CACHE_MB)


# The memory measurement's cache: under 16 MB, so that it is an ordinary numpy array that
# tracemalloc counts (``core.memory.empty_huge`` maps larger ones outside Python's allocator)
MEMORY_CACHE_MB = 15.0


def peak_fit_bytes(X, y) -> int:
    """Peak bytes (tracemalloc) a fit from ``X`` with a ``MEMORY_CACHE_MB`` cache allocated
    above what was held before it: numpy's and scipy's arrays, the column cache included
    (numba's scratch, O(n + d) a thread, is not counted)."""
    model = SparseELMClassifier(kernel="gaussian", sigma=SIGMA, C=C, tol=TOL)
    model.set_params(cache_size=MEMORY_CACHE_MB)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        model.fit(X, y)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3,000 training rows")
    parser.add_argument("--rows", type=int, default=None, help="training rows")
    parser.add_argument("--repeat", type=int, default=2, help="best of this many runs")
    args = parser.parse_args()
    n_train = args.rows or (3_000 if args.quick else 12_000)
    n_test = max(1_000, n_train // 4)
    X_all, y_all = rcv1_like(n_train + n_test, seed=0)
    X, y = X_all[:n_train], y_all[:n_train]
    X_test, y_test = X_all[n_train:], y_all[n_train:]
    X64, X_test64 = X.astype(np.float64), X_test.astype(np.float64)  # as the SVCs take it
    density = X.nnz / (X.shape[0] * X.shape[1])
    print(
        f"rcv1-like: {n_train:,} training rows, {n_test:,} test rows, {X.shape[1]:,} features, "
        f"{100 * density:.3f} % dense, CSR {csr_bytes(X) / 2**20:.1f} MB (dense float32 "
        f"would be {4 * X.shape[0] * X.shape[1] / 2**30:.2f} GB); gaussian sigma {SIGMA} "
        f"(gamma {1 / (2 * SIGMA**2)}), C {C}, tol {TOL}, cache {CACHE_MB:.0f} MB, best of "
        f"{args.repeat}"
    )
    onedal = onedal_svc_class()
    ours().fit(X[:200], y[:200]).predict(X_test[:10])  # compile before the clocks
    rows = {}
    t_fit, model = best_of(args.repeat, lambda: ours().fit(X, y))
    t_pred, pred = best_of(args.repeat, lambda: model.predict(X_test))
    rows["elmscale (CSR)"] = (t_fit, t_pred, np.mean(pred == y_test), model.support_.size)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "train.svm"
        dump_svmlight_file(X, y, str(path), zero_based=False)
        t_read, data = best_of(1, lambda: load_libsvm(path, n_features=X.shape[1], dense=False))
        X_file, y_file = data.X, data.y
        if not sp.issparse(X_file):
            raise RuntimeError("load_libsvm(dense=False) gave dense rows")
        t_fit, model_f = best_of(args.repeat, lambda: ours().fit(X_file, y_file))
    pred = model_f.predict(X_test)
    rows["elmscale (LIBSVM file)"] = (t_fit, None, np.mean(pred == y_test), model_f.support_.size)
    for name, cls in (("LIBSVM (sklearn SVC)", SVC), ("oneDAL (sklearnex SVC)", onedal)):
        if cls is None:
            print(f"{name}: not installed (pip install 'elmscale[bench]')")
            continue
        t_fit, peer = best_of(args.repeat, lambda cls=cls: svc(cls).fit(X64, y))
        t_pred, pred = best_of(args.repeat, lambda peer=peer: peer.predict(X_test64))
        rows[name] = (t_fit, t_pred, np.mean(pred == y_test), peer.support_.size)
    base_fit, base_pred = rows["elmscale (CSR)"][:2]
    print(f"{'':24s} {'fit s':>8s} {'predict s':>10s} {'accuracy':>9s} {'SVs':>7s} "
          f"{'fit ratio':>10s} {'predict ratio':>14s}")  # fmt: skip
    for name, (t_fit, t_pred, acc, n_sv) in rows.items():
        fit_ratio = f"{t_fit / base_fit:.2f}x"
        pred_s = "-" if t_pred is None else f"{t_pred:.3f}"
        pred_ratio = "-" if t_pred is None else f"{t_pred / base_pred:.2f}x"
        print(
            f"{name:24s} {t_fit:8.2f} {pred_s:>10s} {acc:9.4f} {n_sv:7d} {fit_ratio:>10s} "
            f"{pred_ratio:>14s}"
        )
    print(f"LIBSVM file read (load_libsvm, dense=False): {t_read:.2f} s")
    print("ratios: peer time / elmscale-from-CSR time (above 1: elmscale faster)")
    peak = peak_fit_bytes(X, y)
    budget = 2 * csr_bytes(X) + MEMORY_CACHE_MB * 2**20
    print(
        f"elmscale fit from CSR with a {MEMORY_CACHE_MB:.0f} MB cache, peak memory above the "
        f"data (tracemalloc, the cache counted): {peak / 2**20:.1f} MB; budget 2x the CSR's "
        f"{csr_bytes(X) / 2**20:.1f} MB + the cache = {budget / 2**20:.1f} MB: "
        f"{'within' if peak <= budget else 'OVER'} (beyond the cache: "
        f"{(peak - MEMORY_CACHE_MB * 2**20) / csr_bytes(X):.2f}x the CSR)"
    )


if __name__ == "__main__":
    main()
