"""The nearest-neighbour index against a plain loop over the points, its
memory check and its input checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from offrl.models.nearest import NearestNeighborIndex, index_bytes


def naive_nearest(points: np.ndarray, queries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each query, the smallest squared distance and every index at it
    (a plain double loop in float64)."""
    best_d, best_i = [], []
    for q in queries:
        dists = []
        for p in points:
            dists.append(sum((float(a) - float(b)) ** 2 for a, b in zip(q, p)))
        m = min(dists)
        best_d.append(m)
        best_i.append({i for i, d in enumerate(dists) if d == m})
    return np.array(best_d), best_i


def check_against_loop(index: NearestNeighborIndex, points: np.ndarray, queries: np.ndarray) -> None:
    found = index.query(torch.from_numpy(queries)).numpy()
    assert found.shape == (queries.shape[0],) and found.dtype == np.int64
    best_d, best_i = naive_nearest(points, queries)
    for b, i in enumerate(found):
        got = float(((points[i].astype(np.float64) - queries[b].astype(np.float64)) ** 2).sum())
        # exactly the nearest: the same distance as the loop's minimum (float32
        # inputs, float64 sums), and one of the loop's indices at that distance
        assert got == pytest.approx(best_d[b], rel=1e-6, abs=1e-9), (b, i, best_i[b])
        if got == best_d[b]:
            assert int(i) in best_i[b]


coordinates = st.floats(-5.0, 5.0, allow_nan=False, width=32)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40), dim=st.integers(1, 5), batch=st.integers(1, 6),
    backend=st.sampled_from(["kd_tree", "brute"]), seed=st.integers(0, 2**16), grid=st.booleans(),
)
def test_index_finds_the_nearest_point_as_a_loop_does(n, dim, batch, backend, seed, grid):
    rng = np.random.default_rng(seed)
    if grid:  # many exact ties and duplicate points
        points = rng.integers(-2, 3, size=(n, dim)).astype(np.float32)
        queries = rng.integers(-2, 3, size=(batch, dim)).astype(np.float32) + 0.5 * rng.integers(0, 2, size=(batch, dim))
        queries = queries.astype(np.float32)
    else:
        points = rng.normal(size=(n, dim)).astype(np.float32) * 3
        queries = rng.normal(size=(batch, dim)).astype(np.float32) * 3
    index = NearestNeighborIndex(torch.from_numpy(points), backend=backend, leaf_size=3)
    check_against_loop(index, points, queries)


def test_brute_force_blocks_and_reranking(monkeypatch):
    """Several blocks (of 50 points, 4 candidates each) and points far from
    the origin whose distances are tiny: centring and the exact re-ranking
    find the nearest where the product form |x|^2 - 2 q.x alone rounds."""
    import offrl.models.nearest as nearest

    monkeypatch.setitem(nearest._BLOCK_ELEMENTS, "cpu", 8 * 50)  # blocks of 50 points
    rng = np.random.default_rng(3)
    points = (1000.0 + rng.normal(size=(300, 4)) * 1e-2).astype(np.float32)
    queries = points[rng.integers(0, 300, size=8)] + np.float32(1e-3)
    index = NearestNeighborIndex(torch.from_numpy(points), backend="brute")
    check_against_loop(index, points, queries)


def test_query_of_dataset_points_returns_them():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(500, 7)).astype(np.float32)
    for backend in ("kd_tree", "brute", "auto"):
        index = NearestNeighborIndex(torch.from_numpy(points), backend=backend)
        np.testing.assert_array_equal(index.query(torch.from_numpy(points[[5, 17, 499]])).numpy(), [5, 17, 499])
    assert NearestNeighborIndex(torch.from_numpy(points)).backend == "kd_tree"  # auto on the CPU


def test_memory_is_checked_before_building():
    points = torch.zeros(1000, 23)
    needed = index_bytes(1000, 23, "kd_tree")
    assert needed >= 1000 * 23 * 8
    with pytest.raises(MemoryError, match=r"needs about .* GiB, but only .* GiB is available"):
        NearestNeighborIndex(points, backend="kd_tree", available_bytes=needed - 1)
    NearestNeighborIndex(points, backend="kd_tree", available_bytes=needed)
    with pytest.raises(MemoryError, match="brute"):
        NearestNeighborIndex(points, backend="brute", available_bytes=index_bytes(1000, 23, "brute") - 1)


def test_bad_input():
    with pytest.raises(ValueError, match="backend"):
        NearestNeighborIndex(torch.zeros(3, 2), backend="ball_tree")
    with pytest.raises(ValueError, match="shape"):
        NearestNeighborIndex(torch.zeros(3))
    with pytest.raises(ValueError, match="shape"):
        NearestNeighborIndex(torch.zeros(0, 2))
    with pytest.raises(TypeError, match="points"):
        NearestNeighborIndex(np.zeros((3, 2)))
    with pytest.raises(ValueError, match=r"points\[1\]"):
        NearestNeighborIndex(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="leaf_size"):
        NearestNeighborIndex(torch.zeros(3, 2), leaf_size=0)
    index = NearestNeighborIndex(torch.zeros(3, 2))
    with pytest.raises(ValueError, match=r"queries must have shape \(batch, 2\)"):
        index.query(torch.zeros(4, 3))
    assert index.query(torch.zeros(0, 2)).shape == (0,)


def test_memory_available_on_the_device_is_the_default(monkeypatch):
    import offrl.models.nearest as nearest

    assert nearest.available_bytes(torch.device("cpu")) is None or nearest.available_bytes(torch.device("cpu")) > 0
    monkeypatch.setattr(nearest, "available_bytes", lambda device: 10)
    with pytest.raises(MemoryError, match="only 9.31e-09 GiB is available on cpu"):
        NearestNeighborIndex(torch.zeros(5, 2))
