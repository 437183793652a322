"""Batch scoring Parquet -> Parquet with a saved model (``elmscale score``), against the
floor: the same model scoring the same rows already in memory with plain numpy.

    python benchmarks/score_throughput.py            # 10M generated rows (10 files)
    python benchmarks/score_throughput.py --quick    # 200k rows, for CI

Models: ELMClassifier(hidden="sigmoid", n_hidden=1000) trained on 50k generated rows, and
a gaussian SparseELMClassifier (sigma 0.5, C 1) trained on 3k rows.  Ours: the
``elmscale score`` code path in this process (read, score, write each file to a
temporary name then rename; both cores).  Floor: numpy float64 in 65k-row chunks (X @ W,
np.exp, @ beta; for the sparse ELM the gaussian kernel to the support vectors), BLAS on
both cores, on the same rows in memory (the first --floor-rows of them, 1M by default:
numpy takes minutes for all 10M; its rate is rows / time): no reading or writing.  Prints
rows/s of each and the ratio (target for the 1,000-unit ELM: >= 3x).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from elmscale import ELMClassifier, SparseELMClassifier, load, open_parquet, save
from elmscale.data import generate_classification, write_generated_parquet
from elmscale.io.batch_scoring import plan_jobs, score_jobs

CHUNK = 65_536


def numpy_elm_scores(X, model):
    W = model.hidden_layer_.weights.astype(np.float64)
    b = model.hidden_layer_.biases.astype(np.float64)
    beta = model.coef_
    out = np.empty(len(X))
    for start in range(0, len(X), CHUNK):
        H = 1.0 / (1.0 + np.exp(-(X[start : start + CHUNK] @ W + b)))
        out[start : start + CHUNK] = H @ beta
    return out


def numpy_sparse_scores(X, model):
    S = model.support_vectors_.astype(np.float64)
    coef = model.dual_coef_[0]
    s2 = np.square(S).sum(axis=1)
    gamma = 1.0 / (2.0 * model.sigma**2)
    out = np.empty(len(X))
    for start in range(0, len(X), CHUNK):
        x = X[start : start + CHUNK]
        d2 = np.square(x).sum(axis=1)[:, None] + s2 - 2.0 * x @ S.T
        out[start : start + CHUNK] = -(np.exp(-gamma * np.maximum(d2, 0.0)) @ coef)
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--floor-rows",
        type=int,
        default=1_000_000,
        help="rows the numpy floor scores (its rate is rows / time); "
        "numpy needs minutes for 10M rows",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=Path(__file__).resolve().parent / "generated"
    )
    args = parser.parse_args(argv)
    rows = 200_000 if args.quick else 10_000_000
    source = write_generated_parquet(
        args.data_dir / f"classification-{rows}", rows, rows_per_file=min(rows, 1_000_000)
    )
    train = generate_classification(50_000, random_state=7)
    models = {
        "ELM sigmoid 1000": ELMClassifier(hidden="sigmoid", n_hidden=1000, random_state=0).fit(
            train.X, train.y
        ),
        "sparse ELM gaussian": SparseELMClassifier(sigma=0.5, C=1.0).fit(
            train.X[:3000], train.y[:3000]
        ),
    }
    X, _ = open_parquet(source).read()
    X64 = X[: args.floor_rows].astype(np.float64)
    work = Path(tempfile.mkdtemp(prefix="elmscale-score-"))
    print(
        f"{rows:,} generated rows x 8 features in {len(list(source.glob('*.parquet')))} "
        f"Parquet files -> Parquet"
    )
    try:
        for name, model in models.items():
            model_path = save(model, work / "model.elm")
            floor_fn = numpy_elm_scores if isinstance(model, ELMClassifier) else numpy_sparse_scores
            floor_fn(X64[:1000], model)
            start = time.perf_counter()
            floor_scores = floor_fn(X64, model)
            floor_s = time.perf_counter() - start
            loaded = load(model_path)
            out = work / "scores"
            shutil.rmtree(out, ignore_errors=True)
            start = time.perf_counter()
            jobs = plan_jobs(loaded, source, out, features=[f"f{j + 1}" for j in range(8)])
            summary = score_jobs(loaded, jobs)
            ours_s = time.perf_counter() - start
            predictions = np.concatenate(
                [pq.read_table(job.output).column("prediction").to_numpy() for job in jobs]
            )
            agree = np.mean(
                predictions[: len(X64)] == loaded.classes_[(floor_scores > 0).astype(int)]
            )
            extra = f", {model.support_.size} SVs" if hasattr(model, "support_") else ""
            print(
                f"  {name}{extra}: ours {summary['rows'] / ours_s / 1e6:.3f} M rows/s "
                f"({ours_s:.1f} s, Parquet in and out) | numpy floor in memory "
                f"{len(X64) / floor_s / 1e6:.3f} M rows/s ({floor_s:.1f} s on the first "
                f"{len(X64):,} rows) | ratio "
                f"{(summary['rows'] / ours_s) / (len(X64) / floor_s):.2f}x"
                f" | predictions equal to the floor's: "
                f"{100 * agree:.4f} %"
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
