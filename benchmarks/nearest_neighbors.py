"""PRDC's nearest-neighbour search: build time and one query batch.

PRDC looks up, every policy update, the dataset point ``(beta * s, a)``
nearest to each of ``batch_size`` queries ``(beta * s, pi(s))``. This
script times, at 1M points of dimension 23 (17 observation + 6 action
coordinates, a locomotion task's) and query batches of 256:

* scikit-learn's ``NearestNeighbors`` with ``algorithm="auto"`` (what
  d3rlpy 2.8.1's PRDC builds), ``"kd_tree"``, ``"ball_tree"``, ``"brute"``;
* offrl's :class:`offrl.models.nearest.NearestNeighborIndex` with its
  ``kd_tree`` and blocked-torch ``brute`` backends.

on two kinds of points: ``trajectories`` (random walks, points near
low-dimensional curves, as logged states and actions are) and ``gaussian``
(independent normal coordinates: the worst case for trees). Each query
figure is the median of ``--repeats`` batches; every backend is checked to
return neighbours at the same distance as brute force.

    python benchmarks/nearest_neighbors.py [--quick] [--only kd_tree,brute] [--points N]

Everything runs on ``--threads`` threads (default 1: the machines are
shared), scikit-learn with ``n_jobs=1``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import _harness

METHODS = ("sklearn-auto", "sklearn-kd_tree", "sklearn-ball_tree", "sklearn-brute", "offrl-kd_tree", "offrl-brute")
KINDS = ("trajectories", "gaussian")


def make_points(kind: str, n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``(points (n, dim), queries (256, dim))`` float32; queries lie near
    random points (as a policy's actions near logged ones)."""
    rng = np.random.default_rng(seed)
    if kind == "trajectories":
        length = 1000
        steps = rng.normal(size=(max(1, n // length), length, dim)).astype(np.float32) * 0.05
        points = np.cumsum(steps, axis=1).reshape(-1, dim)[:n]
    else:
        points = rng.normal(size=(n, dim)).astype(np.float32)
    queries = points[rng.integers(0, points.shape[0], 256)] + rng.normal(size=(256, dim)).astype(np.float32) * 0.05
    return np.ascontiguousarray(points), queries.astype(np.float32)


def build(method: str, points: np.ndarray):
    """A ``query(queries) -> indices`` function for ``method``, built on ``points``."""
    import torch

    library, algorithm = method.split("-")
    if library == "sklearn":
        from sklearn.neighbors import NearestNeighbors

        nn = NearestNeighbors(n_neighbors=1, algorithm=algorithm, n_jobs=1).fit(points)
        return lambda q: nn.kneighbors(q, n_neighbors=1, return_distance=False)[:, 0]
    from offrl.models.nearest import NearestNeighborIndex

    index = NearestNeighborIndex(torch.from_numpy(points), backend=algorithm)
    return lambda q: index.query(torch.from_numpy(q)).numpy()


def nearest_distances(points: np.ndarray, queries: np.ndarray, indices: np.ndarray) -> np.ndarray:
    return ((points[indices].astype(np.float64) - queries.astype(np.float64)) ** 2).sum(axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    _harness.add_common_args(parser, only=METHODS, d3rlpy=False, quick_help="200k points, 3 query batches")
    parser.add_argument("--points", type=int, default=None, help="number of points (default 1M; 200k with --quick)")
    parser.add_argument("--dim", type=int, default=23, help="coordinates per point (default 23)")
    parser.add_argument("--repeats", type=int, default=None, help="query batches timed per method (default 7)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    args = parser.parse_args()
    _harness.check_threads(args, parser)
    methods = _harness.parse_only(args.only, METHODS, parser)
    kinds = _harness.parse_only(args.kinds, KINDS, parser)
    n = args.points or (200_000 if args.quick else 1_000_000)
    repeats = args.repeats or (3 if args.quick else 7)
    threads = _harness.set_threads(args.threads)
    _harness.print_load("start")
    rows = []
    for kind in kinds:
        points, queries = make_points(kind, n, args.dim)
        reference = None
        for method in methods:
            _harness.log(f"{kind}: {method}")
            t0 = time.perf_counter()
            query = build(method, points)
            build_s = time.perf_counter() - t0
            times = []
            for r in range(repeats):
                q = queries if r == 0 else np.roll(queries, r, axis=0)
                t0 = time.perf_counter()
                found = query(q)
                times.append(time.perf_counter() - t0)
                if r == 0:
                    d = nearest_distances(points, queries, found)
                    if reference is None:
                        reference = d
                    exact = bool(np.allclose(d, reference, rtol=1e-5, atol=1e-9))
                # a slow method (> 3 s a batch) is timed on fewer batches
                if sum(times) > 3 * repeats or times[0] > 3:
                    break
            rows.append([kind, method, f"{build_s:.2f}", f"{statistics.median(times) * 1e3:.1f}", len(times),
                         "yes" if exact else "NO"])
    _harness.print_table(["points", "method", "build s", "query ms (median)", "batches", "same distances"], rows,
                         title=f"{n} points of dimension {args.dim}, query batches of 256, {threads} thread(s)", left=2)
    _harness.print_load("end")


if __name__ == "__main__":
    main()
