"""Note retrieval at scale: HnswVectorIndex latency and recall@10 against exact search.

Run `python benchmarks/vector_index.py` (defaults: 100,000 vectors of dim 384, the
index's default M, ef_construction and ef). Three data sets: low-rank vectors (like
sentence embeddings, whose intrinsic dimension is far below 384), clustered vectors,
and i.i.d. random vectors (the worst case: no structure for a graph index to use).
It prints each figure next to its target and asserts nothing.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from agentloop.adapters.embedders.hashing import HashingEmbedder
from agentloop.adapters.vectors.hnsw import DEFAULT_EF, DEFAULT_EF_CONSTRUCTION, DEFAULT_M, HnswVectorIndex

Matrix = npt.NDArray[np.float32]
TARGET_P50_MS = 2.0
TARGET_RECALL = 0.95


def _unit(matrix: Matrix) -> Matrix:
    unit: Matrix = (matrix / np.linalg.norm(matrix, axis=1, keepdims=True)).astype(np.float32)
    return unit


def low_rank(rng: np.random.Generator, n: int, q: int, dim: int) -> tuple[Matrix, Matrix]:
    basis = rng.standard_normal((32, dim), dtype=np.float32)
    points = rng.standard_normal((n + q, 32), dtype=np.float32) @ basis
    points += 0.1 * rng.standard_normal(points.shape, dtype=np.float32) * np.sqrt(32)
    points = _unit(points)
    return points[:n], points[n:]


def clustered(rng: np.random.Generator, n: int, q: int, dim: int) -> tuple[Matrix, Matrix]:
    centres = rng.standard_normal((100, dim), dtype=np.float32)
    points = centres[rng.integers(0, 100, n + q)] + 0.5 * rng.standard_normal((n + q, dim), dtype=np.float32)
    points = _unit(points)
    return points[:n], points[n:]


def uniform(rng: np.random.Generator, n: int, q: int, dim: int) -> tuple[Matrix, Matrix]:
    points = _unit(rng.standard_normal((n + q, dim), dtype=np.float32))
    return points[:n], points[n:]


DATA_SETS: dict[str, Callable[[np.random.Generator, int, int, int], tuple[Matrix, Matrix]]] = {
    "low-rank": low_rank,
    "clustered": clustered,
    "random": uniform,
}


def exact_top(data: Matrix, queries: Matrix, k: int) -> npt.NDArray[np.int64]:
    top = np.empty((len(queries), k), dtype=np.int64)
    for start in range(0, len(queries), 100):
        sims = queries[start : start + 100] @ data.T
        part = np.argpartition(-sims, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sims, part, axis=1), axis=1)
        top[start : start + 100] = np.take_along_axis(part, order, axis=1)
    return top


def measure(
    index: HnswVectorIndex, queries: Matrix, truth: npt.NDArray[np.int64], accept: Callable[[int], bool] | None
) -> tuple[float, float, float]:
    """p50 ms, p95 ms and recall@10 over `queries`."""
    times = []
    hits = 0
    for query, expected in zip(queries, truth):
        started = time.perf_counter()
        found = index.search(query, 10, accept=accept)
        times.append(time.perf_counter() - started)
        hits += len({i for i, _ in found} & set(expected.tolist()))
    return float(np.median(times)) * 1e3, float(np.percentile(times, 95)) * 1e3, hits / truth.size


def mark(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--m", type=int, default=DEFAULT_M)
    parser.add_argument("--ef-construction", type=int, default=DEFAULT_EF_CONSTRUCTION)
    parser.add_argument("--ef", type=int, nargs="+", default=[DEFAULT_EF])
    parser.add_argument("--data", choices=list(DATA_SETS), nargs="+", default=list(DATA_SETS))
    args = parser.parse_args()

    texts = [f"note {i}: the deploy of service {i % 37} failed after migration step {i % 11}" for i in range(1000)]
    started = time.perf_counter()
    HashingEmbedder().embed(texts)
    print(f"HashingEmbedder, 1,000 short texts (cold): {(time.perf_counter() - started) * 1e3:.1f} ms (target well under 1,000 ms)")

    print(f"n={args.n} dim={args.dim} queries={args.queries} M={args.m} ef_construction={args.ef_construction}")
    print(f"{'data':<10} {'ef':>4} {'filter':<8} {'p50 ms':>7} {'p95 ms':>7} {'recall@10':>9}   target p50 <= {TARGET_P50_MS} ms, recall@10 >= {TARGET_RECALL}")
    for name in args.data:
        rng = np.random.default_rng(0)
        data, queries = DATA_SETS[name](rng, args.n, args.queries, args.dim)
        index = HnswVectorIndex(args.dim, capacity=args.n, m=args.m, ef_construction=args.ef_construction)
        started = time.perf_counter()
        for start in range(0, args.n, 10_000):
            index.add(range(start, min(start + 10_000, args.n)), data[start : start + 10_000])
        print(f"{name:<10} build {time.perf_counter() - started:.1f} s")
        truth = exact_top(data, queries, 10)
        tenth = set(range(0, args.n, 10))
        filtered_truth = exact_top(data[::10], queries, 10) * 10
        for ef in args.ef:
            index.set_ef(ef)
            for label, accept, expected in (("none", None, truth), ("1 in 10", tenth.__contains__, filtered_truth)):
                p50, p95, recall = measure(index, queries, expected, accept)
                verdict = f"{mark(p50 <= TARGET_P50_MS)} / {mark(recall >= TARGET_RECALL)}"
                print(f"{name:<10} {ef:>4} {label:<8} {p50:>7.3f} {p95:>7.3f} {recall:>9.4f}   {verdict}")


if __name__ == "__main__":
    main()
