"""Batch scoring Parquet -> Parquet with a saved model (``elmscale score``), against a
careful user's numpy scoring the same rows already in memory.

    python benchmarks/score_throughput.py            # 10M generated rows (10 files)
    python benchmarks/score_throughput.py --quick    # 200k rows, for CI
    python benchmarks/score_throughput.py --rows 1000000

Models: ELMClassifier(hidden="sigmoid", n_hidden=1000) trained on 50k generated rows, and
a gaussian SparseELMClassifier (sigma 0.5, C 1) trained on 3k rows.

Ours: the ``elmscale score`` code path in this process (plan_jobs + score_jobs: read,
score, write each file to a temporary name then rename; both cores), over every row.

The floor is what a careful numpy user writes, on the first --floor-rows rows (1M by
default) in memory, no reading or writing; its rate is rows / time.  Everything in
float32 (X, weights, biases, output weights), 8,192-row chunks into preallocated
buffers, every step in place: ``np.matmul(x, W, out=buf)``, ``buf += b``, the sigmoid
as ``np.negative``, ``np.exp``, ``+= 1``, ``np.reciprocal`` on ``buf``, then
``np.matmul(buf, beta, out=...)``; for the sparse ELM the gaussian kernel to the support
vectors the same way (``-2 x.s`` by one matmul, ``+ |x|^2 + |s|^2``, clipped at 0,
``*= -gamma``, exp, matmul with the dual weights).  Two ways to use both cores, both
timed: (a) one Python thread, BLAS on two threads (threadpoolctl); (b) two Python
threads on half the chunks each (numpy releases the GIL), BLAS on one thread each.  The
floor is the faster of the two (printed, with both times); the ratio is ours over it
(target for the 1,000-unit ELM: >= 3x).  CPU seconds are printed beside wall seconds:
on a shared machine their ratio says how much of the two cores a run had.

ONNX Runtime: the same model exported by ``elmscale.to_onnx`` (float64 inside the graph),
scored by an ``InferenceSession`` (CPU, ``THREADS`` intra-op threads) on the same rows in
memory as the floor, in ``ORT_BATCH``-row batches; its rate (rows / s), its labels'
agreement with elmscale's ``predict`` and its largest decision difference are printed
beside ``elmscale score``'s.  Skipped, with a line saying so, without the onnx extra.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from threadpoolctl import threadpool_limits

from elmscale import ELMClassifier, SparseELMClassifier, load, open_parquet, save
from elmscale.data import generate_classification, write_generated_parquet
from elmscale.io.batch_scoring import plan_jobs, score_jobs

CHUNK = 8_192
THREADS = 2
ORT_BATCH = 16_384


def onnx_runtime_scores(model, X):
    """``(decision, labels, seconds)`` of ONNX Runtime on ``X`` in ORT_BATCH-row batches
    (the session built before timing), or None without onnxruntime."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    from elmscale import to_onnx

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    session = ort.InferenceSession(
        to_onnx(model).SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    session.run(None, {"X": X[:1000]})  # warm
    decision = np.empty(len(X), dtype=np.float32)
    labels = np.empty(len(X), dtype=np.int64)
    start = time.perf_counter()
    for s in range(0, len(X), ORT_BATCH):
        label, dec = session.run(["label", "decision"], {"X": X[s : s + ORT_BATCH]})
        labels[s : s + len(label)], decision[s : s + len(dec)] = label, dec
    return decision, labels, time.perf_counter() - start


def elm_floor_parts(model):
    """Float32 copies of the ELM's layer, made once, outside the timing."""
    W = np.ascontiguousarray(model.hidden_layer_.weights, dtype=np.float32)
    b = np.ascontiguousarray(model.hidden_layer_.biases, dtype=np.float32)
    beta = np.ascontiguousarray(model.coef_, dtype=np.float32)
    return W, b, beta


def elm_chunks(X, parts, out, start, stop):
    W, b, beta = parts
    buf = np.empty((CHUNK, W.shape[1]), dtype=np.float32)
    for s in range(start, stop, CHUNK):
        e = min(s + CHUNK, stop)
        h = buf[: e - s]
        np.matmul(X[s:e], W, out=h)
        h += b
        np.negative(h, out=h)
        np.exp(h, out=h)
        h += 1.0
        np.reciprocal(h, out=h)
        np.matmul(h, beta, out=out[s:e])


def sparse_floor_parts(model):
    S = np.ascontiguousarray(model.support_vectors_, dtype=np.float32)
    St = np.ascontiguousarray(S.T)
    s2 = np.square(S, dtype=np.float32).sum(axis=1)
    neg_coef = np.ascontiguousarray(-model.dual_coef_[0], dtype=np.float32)
    gamma = np.float32(1.0 / (2.0 * model.sigma**2))
    return St, s2, neg_coef, gamma


def sparse_chunks(X, parts, out, start, stop):
    St, s2, neg_coef, gamma = parts
    buf = np.empty((CHUNK, St.shape[1]), dtype=np.float32)
    x2 = np.empty(CHUNK, dtype=np.float32)
    sq = np.empty((CHUNK, X.shape[1]), dtype=np.float32)
    for s in range(start, stop, CHUNK):
        e = min(s + CHUNK, stop)
        n = e - s
        h, xx, q = buf[:n], x2[:n], sq[:n]
        x = X[s:e]
        np.matmul(x, St, out=h)
        h *= -2.0
        h += s2
        np.multiply(x, x, out=q)
        np.sum(q, axis=1, out=xx)
        h += xx[:, None]
        np.maximum(h, 0.0, out=h)
        h *= -gamma
        np.exp(h, out=h)
        np.matmul(h, neg_coef, out=out[s:e])


def floor_blas_threads(chunks, X, parts):
    """(a): one Python thread, BLAS on THREADS threads."""
    out = np.empty(len(X), dtype=np.float32)
    with threadpool_limits(limits=THREADS):
        chunks(X, parts, out, 0, len(X))
    return out


def floor_python_threads(chunks, X, parts):
    """(b): THREADS Python threads on contiguous shares of the chunks, one BLAS thread each."""
    out = np.empty(len(X), dtype=np.float32)
    n_chunks = -(-len(X) // CHUNK)
    bounds = [min(len(X), (n_chunks * k // THREADS) * CHUNK) for k in range(THREADS + 1)]
    with threadpool_limits(limits=1), ThreadPoolExecutor(THREADS) as pool:
        for f in [pool.submit(chunks, X, parts, out, lo, hi) for lo, hi in zip(bounds, bounds[1:])]:
            f.result()
    return out


def timed(fn, repeat):
    """Best wall time of ``repeat`` runs, that run's CPU seconds, and its result."""
    best = None
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = fn()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if best is None or wall < best[0]:
            best = (wall, cpu, result)
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--floor-rows",
        type=int,
        default=1_000_000,
        help="rows the numpy floor scores (its rate is rows / time)",
    )
    parser.add_argument("--repeat", type=int, default=2, help="best of N for each timing")
    parser.add_argument("--rows", type=int, help="rows to score (default 10M, --quick 200k)")
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    rows = args.rows or (200_000 if args.quick else 10_000_000)
    source = write_generated_parquet(
        args.data_dir / f"classification-{rows}", rows, rows_per_file=min(rows, 1_000_000)
    )
    # the models' sizes (1,000 nodes; the sparse ELM's support vectors) set the scoring
    # cost, not the rows the ELM was trained on: --quick trains it on 10,000, not 50,000
    train = generate_classification(10_000 if args.quick else 50_000, random_state=7)
    models = {
        "ELM sigmoid 1000": ELMClassifier(hidden="sigmoid", n_hidden=1000, random_state=0).fit(
            train.X, train.y
        ),
        "sparse ELM gaussian": SparseELMClassifier(sigma=0.5, C=1.0).fit(
            train.X[:3000], train.y[:3000]
        ),
    }
    X, _ = open_parquet(source).read()
    Xf = np.ascontiguousarray(X[: args.floor_rows], dtype=np.float32)
    work = Path(tempfile.mkdtemp(prefix="elmscale-score-"))
    n_files = len(list(source.glob("*.parquet")))
    print(f"{rows:,} generated rows x 8 features in {n_files} Parquet files -> Parquet")
    print(
        f"floor: careful numpy, float32, {CHUNK:,}-row chunks in place, on the first "
        f"{len(Xf):,} rows in memory; (a) BLAS x{THREADS} threads, (b) {THREADS} Python "
        "threads x 1 BLAS thread; best of the two"
    )
    try:
        for name, model in models.items():
            is_elm = isinstance(model, ELMClassifier)
            chunks = elm_chunks if is_elm else sparse_chunks
            parts = (elm_floor_parts if is_elm else sparse_floor_parts)(model)
            variants = {}
            for label, way in (("a", floor_blas_threads), ("b", floor_python_threads)):
                way(chunks, Xf[: 4 * CHUNK], parts)  # warm: threads, pages
                variants[label] = timed(lambda: way(chunks, Xf, parts), args.repeat)
            best = min(variants, key=lambda k: variants[k][0])
            floor_s, floor_cpu, floor_scores = variants[best]
            floor_rate = len(Xf) / floor_s

            model_path = save(model, work / "model.elm")
            loaded = load(model_path)
            loaded.decision_function(Xf[:1000])  # compiled before timing (numba's cache)
            memory_s, _, _ = timed(lambda: loaded.decision_function(Xf), 1)
            out = work / "scores"

            def ours():
                shutil.rmtree(out, ignore_errors=True)
                jobs = plan_jobs(loaded, source, out, features=[f"f{j + 1}" for j in range(8)])
                return jobs, score_jobs(loaded, jobs)

            ours_s, ours_cpu, (jobs, summary) = timed(ours, args.repeat)
            ours_rate = summary["rows"] / ours_s
            predictions = np.concatenate(
                [pq.read_table(job.output).column("prediction").to_numpy() for job in jobs]
            )
            agree = np.mean(
                predictions[: len(Xf)] == loaded.classes_[(floor_scores > 0).astype(int)]
            )
            extra = f", {model.support_.size} SVs" if hasattr(model, "support_") else ""
            print(f"  {name}{extra}:")
            print(
                f"    ours (elmscale score, Parquet in and out): {ours_rate / 1e6:.3f} M rows/s "
                f"({ours_s:.2f} s wall, {ours_cpu:.2f} s CPU for {summary['rows']:,} rows)"
            )
            print(
                f"    floor ({best}): {floor_rate / 1e6:.3f} M rows/s "
                + " | ".join(
                    f"({k}) {len(Xf) / v[0] / 1e6:.3f} M rows/s, {v[0]:.2f} s wall {v[1]:.2f} s CPU"
                    for k, v in variants.items()
                )
            )
            print(
                f"    ratio ours / floor: {ours_rate / floor_rate:.2f}x "
                f"(CPU time per row: {(floor_cpu / len(Xf)) / (ours_cpu / summary['rows']):.2f}x)"
                f" | in-memory decision_function: {len(Xf) / memory_s / 1e6:.3f} M rows/s"
                f" | predictions equal to the floor's: {100 * agree:.4f} %"
            )
            onnx = onnx_runtime_scores(loaded, Xf)
            if onnx is None:
                print("    ONNX Runtime: not installed (pip install 'elmscale[onnx]')")
            else:
                decision, labels, onnx_s = onnx
                ours_decision = loaded.decision_function(Xf)
                print(
                    f"    ONNX Runtime (in memory, {ORT_BATCH:,}-row batches, {THREADS} threads):"
                    f" {len(Xf) / onnx_s / 1e6:.3f} M rows/s ({onnx_s:.2f} s for {len(Xf):,}"
                    f" rows); labels equal to elmscale's predict: "
                    f"{100 * np.mean(labels == loaded.predict(Xf)):.4f} %; largest decision "
                    f"difference / largest |decision|: "
                    f"{np.abs(decision - ours_decision).max() / np.abs(ours_decision).max():.1e}"
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
