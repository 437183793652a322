"""Sparse ELM against the CPU SVCs (LIBSVM, oneDAL) on the COD-RNA paper split.

    python benchmarks/sparse_elm_vs_svc.py                 # C in 0.1 1 10 100 1000
    python benchmarks/sparse_elm_vs_svc.py --C 1 10        # chosen values of C
    python benchmarks/sparse_elm_vs_svc.py --quick         # 5,000 training rows, C = 1
    python benchmarks/sparse_elm_vs_svc.py --hidden --C 1 50   # random nodes vs LIBLINEAR
    python benchmarks/sparse_elm_vs_svc.py --multiclass        # satimage, one-vs-one, vs SVC
    python benchmarks/sparse_elm_vs_svc.py --million           # random nodes, 1M generated rows

Gaussian kernel, sigma = 0.5 (SVC: gamma = 1 / (2 sigma^2) = 2), tol 1e-3, 200 MB
cache for all; features scaled to [-1, 1] on the training half.  The peers, timed in the
same run: LIBSVM (scikit-learn's SVC) and, when scikit-learn-intelex is installed
(``pip install "elmscale[bench]"``), oneDAL's SVC (``sklearnex.svm.SVC``) with the same
gamma, C, tol and cache; a line says when it is absent.  Prints fit and predict wall
times, test accuracies, support-vector counts and the ratios peer / ours.
With ``--hidden``: SparseELMClassifier(hidden="sigmoid", n_hidden=200) against
LinearSVC(loss="hinge", fit_intercept=False, dual=True, tol=1e-3) on the same
hidden-layer output (LIBLINEAR solving exactly this dual).  ``--multiclass``:
satimage (its own test file, 6 classes) at Table III's gaussian parameters
(C=1, sigma=0.2) and the cross-validated ones of our protocol (C=5, sigma=2),
one-vs-one in both.  ``--million``: SparseELMClassifier(hidden="sigmoid",
n_hidden=200, C=1) on 1,000,000 generated rows x 8 features (fit time, SVs).
Needs ../shared/data (COD-RNA, satimage).
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import sklearn
from sklearn.svm import SVC, LinearSVC

from elmscale import SparseELMClassifier
from elmscale.data import Scaler, load

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"
CODRNA = SHARED / "cod-rna" / "codrna.csv"


HALF = 29_768  # the paper's COD-RNA training rows
LIBSVM, ONEDAL = "LIBSVM", "oneDAL"  # the CPU SVCs ours is timed against


@functools.cache
def onedal_svc_class():
    """oneDAL's SVC (scikit-learn-intelex), or None where it is not installed.  Imported
    once and before any clock starts: the import alone takes seconds."""
    try:
        from sklearnex.svm import SVC as OneDALSVC
    except ImportError:
        return None
    return OneDALSVC


def peer_names():
    """The peers this run times: LIBSVM always, oneDAL where it is installed."""
    return (LIBSVM, ONEDAL) if onedal_svc_class() is not None else (LIBSVM,)


def peer_svc(name, sigma, C):
    """The peer ``name`` with the parameters ours gets: gaussian gamma = 1 / (2 sigma^2),
    C, tol 1e-3, a 200 MB cache."""
    cls = SVC if name == LIBSVM else onedal_svc_class()
    return cls(kernel="rbf", gamma=1 / (2 * sigma**2), C=C, tol=1e-3, cache_size=200)


def peers_line():
    """One line naming the peers and their versions, or saying that oneDAL is absent."""
    libsvm = f"LIBSVM (scikit-learn {sklearn.__version__}'s SVC)"
    if onedal_svc_class() is None:
        return (
            f"peers: {libsvm} only; oneDAL absent (scikit-learn-intelex not installed: "
            'pip install "elmscale[bench]"), its column left out'
        )
    version = importlib.metadata.version("scikit-learn-intelex")
    try:  # oneDAL runs its own thread pool (TBB), which threadpoolctl does not limit
        import daal4py

        threads = f", {daal4py.num_threads()} threads"
    except ImportError:
        threads = ""
    return f"peers: {libsvm} and oneDAL (scikit-learn-intelex {version}'s SVC{threads})"


def fell_back(name, est):
    """True when the fitted oneDAL peer ran scikit-learn's own code instead (sklearnex
    falls back on parameters it does not accelerate): its times would be LIBSVM's."""
    return name == ONEDAL and getattr(est, "_onedal_estimator", None) is None


def fastest(times):
    """``(name, seconds)`` of the fastest peer in ``{name: seconds}`` (None left out)."""
    known = {k: v for k, v in times.items() if v is not None}
    return min(known.items(), key=lambda kv: kv[1]) if known else (None, None)


def codrna_split(data, rows=None):
    """``(X_tr, y_tr, X_te, y_te)`` of COD-RNA (``data``, loaded from ``CODRNA``): a seeded
    permutation, its first 29,768 rows train, the rest test, the first ``rows`` of each
    part when given, scaled to [-1, 1] on the training part."""
    order = np.random.default_rng(0).permutation(data.n_samples)
    train, test = order[:HALF][:rows], order[HALF:][:rows]
    scaler = Scaler().fit(data.X[train])
    return (
        scaler.transform(data.X[train]),
        data.y[train],
        scaler.transform(data.X[test]),
        data.y[test],
    )


def _rss_mb(field):
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_extra_mb(fn):
    """Peak resident memory that ``fn`` adds to the process, in MB (Linux: the
    peak is reset through /proc/self/clear_refs, then read as VmHWM)."""
    base = _rss_mb("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        return float("nan")
    fn()
    return _rss_mb("VmHWM") - base


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def best_of(repeat, fn):
    """``(seconds, result)``: the fastest of ``repeat`` runs in a row (timeit's rule)."""
    runs = [timed(fn) for _ in range(repeat)]
    return min(seconds for seconds, _ in runs), runs[-1][1]


@dataclass
class Measured:
    fit: float  # seconds, the best of the runs
    predict: float
    accuracy: float
    n_sv: int


def measure(est, X_tr, y_tr, X_te, y_te, repeat=1):
    """Fit and predict ``est``, each time the best of ``repeat`` runs in a row, for every
    side alike: this machine's timings drift by 25-50 % within minutes, and a process's
    first touch of memory that another library freed costs it 0.25 s per 200 MB here (a
    virtual machine's page faults), which the first run pays and a long-lived process
    does not."""
    fit, _ = best_of(repeat, lambda: est.fit(X_tr, y_tr))
    predict, p = best_of(repeat, lambda: est.predict(X_te))
    return Measured(fit, predict, float(np.mean(p == y_te)), int(est.support_.size))


def fmt_s(seconds):
    return f"{seconds * 1000:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def versus(ours, peers):
    """``ours``'s seconds against ``{peer: seconds}``: "ours 0.34 s, LIBSVM 2.51 s, ratio
    7.36x, oneDAL ..." (ratio = peer / ours; docs/speed_figures.py reads these lines)."""
    parts = [f"ours {fmt_s(ours)}"]
    parts += [f"{name} {fmt_s(t)}, ratio {t / ours:.2f}x" for name, t in peers.items()]
    return ", ".join(parts)


def compare(ours, peers, X_tr, y_tr, X_te, y_te, repeat=1):
    """Ours and each peer (``{name: estimator}``) measured in turn; ``(line, {name:
    Measured})`` with "ours" among the names, the line the comparison as text."""
    found = {"ours": measure(ours, X_tr, y_tr, X_te, y_te, repeat)}
    for name, est in peers.items():
        found[name] = measure(est, X_tr, y_tr, X_te, y_te, repeat)
    ran = [f"{name} FELL BACK to scikit-learn" for name, e in peers.items() if fell_back(name, e)]
    mine, others = found["ours"], {k: v for k, v in found.items() if k != "ours"}
    line = (
        f"fit: {versus(mine.fit, {k: v.fit for k, v in others.items()})} | predict: "
        f"{versus(mine.predict, {k: v.predict for k, v in others.items()})} | acc: "
        + ", ".join(f"{k} {v.accuracy:.4f}" for k, v in found.items())
        + " | SVs: "
        + ", ".join(f"{k} {v.n_sv}" for k, v in found.items())
        + "".join(f" | {what}" for what in ran)
    )
    return line, found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--C", type=float, nargs="+", default=None)
    parser.add_argument("--sigma", type=float, default=0.5)
    parser.add_argument(
        "--hidden",
        action="store_true",
        help="random sigmoid nodes against LinearSVC on the same layer",
    )
    parser.add_argument("--multiclass", action="store_true", help="satimage, one-vs-one")
    parser.add_argument(
        "--million", action="store_true", help="random nodes on 1,000,000 generated rows"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=None,
        help="fits and predictions of each model in a row; the best time "
        "counts (default 3, 1 with --quick)",
    )
    args = parser.parse_args(argv)
    repeat = args.repeat or (1 if args.quick else 3)
    if args.multiclass:
        return compare_multiclass(args.quick, repeat)
    if args.million:
        return random_nodes_at_scale(100_000 if args.quick else 1_000_000)
    Cs = args.C or ([1.0] if args.quick else [0.1, 1.0, 10.0, 100.0, 1000.0])

    X_tr, y_tr, X_te, y_te = codrna_split(load(CODRNA), 5_000 if args.quick else None)
    SparseELMClassifier().fit(X_tr[:200], y_tr[:200])  # numba compile / cache load

    if args.hidden:
        return compare_random_nodes(X_tr, y_tr, X_te, y_te, Cs)
    print(
        f"COD-RNA, {len(y_tr):,} train / {len(y_te):,} test rows, gaussian sigma={args.sigma}"
        f", times the best of {repeat}; {peers_line()}"
    )
    for C in Cs:
        ours = SparseELMClassifier(sigma=args.sigma, C=C, cache_size=200)
        peers = {name: peer_svc(name, args.sigma, C) for name in peer_names()}
        result, _ = compare(ours, peers, X_tr, y_tr, X_te, y_te, repeat)
        memory = peak_extra_mb(
            lambda: SparseELMClassifier(sigma=args.sigma, C=C, cache_size=200).fit(X_tr, y_tr)
        )
        print(
            f"  C={C:<7g} {result} | steps {int(ours.n_iter_[0])} | peak memory of our fit "
            f"{memory:.0f} MB (cache 200 MB + data {X_tr.nbytes / 2**20:.0f} MB)"
        )
    return 0


def compare_random_nodes(X_tr, y_tr, X_te, y_te, Cs, n_hidden=200):
    print(
        f"COD-RNA, {len(y_tr):,} train rows, {n_hidden} sigmoid nodes: sparse ELM vs LinearSVC "
        "(hinge, no intercept) on the same hidden layer"
    )
    # numba compile / cache load of the random-node path (main's warm-up is a kernel fit)
    SparseELMClassifier(hidden="sigmoid", n_hidden=n_hidden).fit(X_tr[:200], y_tr[:200])
    for C in Cs:
        ours = SparseELMClassifier(hidden="sigmoid", n_hidden=n_hidden, C=C, random_state=0)
        fit_ours, _ = timed(lambda: ours.fit(X_tr, y_tr))
        layer = ours.hidden_layer_
        H_tr, H_te = layer.transform(X_tr), layer.transform(X_te)
        ref = LinearSVC(
            loss="hinge", fit_intercept=False, dual=True, tol=1e-3, C=C, max_iter=1_000_000
        )
        fit_ref, _ = timed(lambda: ref.fit(H_tr, y_tr))
        print(
            f"  C={C:<5g} fit: ours {fit_ours:6.2f} s (incl. the layer), LinearSVC "
            f"{fit_ref:6.2f} s (layer given), ratio {fit_ref / fit_ours:5.2f}x | test acc: ours "
            f"{ours.score(X_te, y_te):.4f}, LinearSVC {ref.score(H_te, y_te):.4f} | "
            f"SVs ours {ours.support_.size} | passes {int(ours.n_iter_[0])}"
        )
    return 0


def compare_multiclass(quick, repeat):
    train = load(SHARED / "satimage" / "satimage.scale")
    test = load(SHARED / "satimage" / "satimage.scale.t", n_features=train.n_features)
    scaler = Scaler().fit(train.X)
    X_tr, X_te = scaler.transform(train.X), scaler.transform(test.X)
    print(
        f"satimage, {len(train.y):,} train / {len(test.y):,} test rows, "
        f"{len(np.unique(train.y))} classes, one-vs-one, times the best of {repeat}; "
        f"{peers_line()}"
    )
    SparseELMClassifier().fit(X_tr[::20], train.y[::20])  # numba compile / cache load
    for C, sigma in [(1.0, 0.2)] if quick else [(1.0, 0.2), (5.0, 2.0)]:
        ours = SparseELMClassifier(sigma=sigma, C=C)
        peers = {name: peer_svc(name, sigma, C) for name in peer_names()}
        line, _ = compare(ours, peers, X_tr, train.y, X_te, test.y, repeat)
        print(f"  C={C:g} sigma={sigma:g} {line}")
    return 0


def random_nodes_at_scale(n_rows):
    from elmscale.data import generate_classification

    data = generate_classification(n_rows + 100_000, n_features=8, random_state=0)
    X_tr, y_tr = data.X[:n_rows], data.y[:n_rows]
    X_te, y_te = data.X[n_rows:], data.y[n_rows:]
    model = SparseELMClassifier(hidden="sigmoid", n_hidden=200, C=1.0, random_state=0)
    model.fit(X_tr[:1000], y_tr[:1000])  # numba compile / cache load
    fit_s, _ = timed(lambda: model.fit(X_tr, y_tr))
    print(
        f"generated, {n_rows:,} train rows x 8 features, 200 sigmoid nodes, C=1: fit "
        f"{fit_s:.2f} s, {model.support_.size:,} SVs, {int(model.n_iter_[0])} passes, "
        f"test acc {model.score(X_te, y_te):.4f} on 100,000 rows"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
