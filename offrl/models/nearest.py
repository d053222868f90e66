"""Exact nearest-neighbour search over a fixed set of points (Euclidean).

PRDC (:mod:`offrl.algos.prdc`) looks up, for every mini-batch, the dataset
point ``(beta * s, a)`` closest to ``(beta * s, pi(s))``. Two exact
backends answer the same question:

* ``"kd_tree"``: scikit-learn's ``KDTree`` (CPU). On logged trajectories,
  whose points lie near low-dimensional curves, a query batch of 256 over
  1M points of dimension 23 takes tens of milliseconds on one thread, about
  8x less than brute force (``benchmarks/nearest_neighbors.py``);
* ``"brute"``: blocked torch matrix products, ``|x|^2 - 2 q.x`` per block
  of points, whose few best candidates per block are then re-ranked with
  exact differences (so the rounding of the product form picks a wrong
  neighbour only if more than four points of a block tie with the nearest
  within that rounding). On a GPU this is the faster one, and it is exact on
  unstructured points where trees degrade to brute force anyway.

``"auto"`` picks the KD-tree for points on the CPU and brute force for
points on a GPU. Before anything is allocated the memory the index needs
is compared with what is available (:func:`index_bytes`): a dataset too
large for its index is refused with a :class:`MemoryError` saying how
much was needed.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from .._safety import available_memory

__all__ = ["BACKENDS", "NearestNeighborIndex", "available_bytes", "index_bytes"]

BACKENDS = ("auto", "kd_tree", "brute")
#: candidates kept per block before exact re-ranking (brute force)
_CANDIDATES = 4
#: elements of one (queries x block) distance matrix on the CPU / a GPU
_BLOCK_ELEMENTS = {"cpu": 2**22, "cuda": 2**26}


def _resolve_backend(backend: str, device: torch.device) -> str:
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    if backend == "auto":
        return "kd_tree" if device.type == "cpu" else "brute"
    return backend


def index_bytes(n_points: int, dim: int, backend: str, leaf_size: int = 40) -> int:
    """Bytes an index over ``n_points`` points of ``dim`` coordinates holds:
    the KD-tree's float64 copy of the points, its permutation and its node
    bounds; brute force's float32 points and their squared norms."""
    if backend == "kd_tree":
        n_nodes = 2 * max(1, n_points // max(1, leaf_size)) + 1
        return n_points * dim * 8 + n_points * 8 + n_nodes * (2 * dim * 8 + 32)
    if backend == "brute":
        return n_points * dim * 4 + n_points * 4
    raise ValueError(f"backend must be 'kd_tree' or 'brute', got {backend!r}")


def available_bytes(device: torch.device) -> Optional[int]:
    """Memory free for an index on ``device`` now (bytes; None when unknown)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return available_memory()


def _free_bytes(device: torch.device) -> Optional[int]:
    # the module's function (a parameter of the index shadows its name)
    return available_bytes(device)


class NearestNeighborIndex:
    """Exact nearest neighbours of query points among ``points``.

    Args:
        points: ``(N, D)`` float tensor (its device decides where brute
            force runs); it is copied, later changes to it do not matter.
        backend: ``"auto"``, ``"kd_tree"`` or ``"brute"`` (module docstring).
        leaf_size: points per KD-tree leaf.
        available_bytes: memory to check the index against (default: what
            the points' device has available now).
    """

    def __init__(self, points: torch.Tensor, backend: str = "auto", leaf_size: int = 40,
                 available_bytes: Optional[int] = None) -> None:
        if not isinstance(points, torch.Tensor):
            raise TypeError(f"points must be a torch.Tensor, got {type(points).__name__}")
        if points.ndim != 2 or points.shape[0] == 0 or points.shape[1] == 0:
            raise ValueError(f"points must have shape (n_points > 0, dim > 0), got {tuple(points.shape)}")
        if not points.is_floating_point():
            raise TypeError(f"points must be floating point, got {points.dtype}")
        if isinstance(leaf_size, bool) or not isinstance(leaf_size, int) or leaf_size <= 0:
            raise ValueError(f"leaf_size must be a positive int, got {leaf_size!r}")
        if not bool(torch.isfinite(points).all()):
            row = int(torch.nonzero(~torch.isfinite(points).all(dim=1))[0, 0])
            raise ValueError(f"points[{row}] is not finite; the index needs finite coordinates")
        self.device = points.device
        self.backend = _resolve_backend(backend, self.device)
        n, dim = int(points.shape[0]), int(points.shape[1])
        self.n_points, self.dim = n, dim
        needed = index_bytes(n, dim, self.backend, leaf_size)
        available = _free_bytes(self.device) if available_bytes is None else int(available_bytes)
        if available is not None and needed > available:
            raise MemoryError(
                f"a {self.backend} nearest-neighbour index over {n} points of dimension {dim} needs about "
                f"{needed / 2**30:.3g} GiB, but only {available / 2**30:.3g} GiB is available on {self.device}"
            )
        if self.backend == "kd_tree":
            from sklearn.neighbors import KDTree

            self._tree = KDTree(points.detach().cpu().numpy().astype(np.float64), leaf_size=leaf_size)
        else:
            points = points.detach().to(torch.float32)
            # centred, so that |x|^2 - 2 q.x does not lose the distances to the points' offset
            self._center = points.mean(dim=0)
            self._points = points - self._center
            self._squared_norms = (self._points * self._points).sum(dim=1)

    def query(self, queries: torch.Tensor) -> torch.Tensor:
        """Index of the nearest point for each query: ``(B, D)`` -> ``(B,)``
        int64 on the queries' device (ties: any of the tied points)."""
        if not isinstance(queries, torch.Tensor):
            raise TypeError(f"queries must be a torch.Tensor, got {type(queries).__name__}")
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries must have shape (batch, {self.dim}), got {tuple(queries.shape)}")
        if queries.shape[0] == 0:
            return torch.zeros(0, dtype=torch.int64, device=queries.device)
        if self.backend == "kd_tree":
            q = queries.detach().cpu().numpy().astype(np.float64)
            index = self._tree.query(q, k=1, return_distance=False)[:, 0]
            return torch.from_numpy(index.astype(np.int64)).to(queries.device)
        return self._brute(queries.detach().to(self.device, torch.float32)).to(queries.device)

    def _brute(self, q: torch.Tensor) -> torch.Tensor:
        q = q - self._center
        n = self.n_points
        block = max(1, _BLOCK_ELEMENTS.get(self.device.type, 2**22) // q.shape[0])
        k = min(_CANDIDATES, n)
        candidates = []
        for start in range(0, n, block):
            points = self._points[start:start + block]
            # |q - x|^2 up to the per-query constant |q|^2
            partial = torch.addmm(self._squared_norms[start:start + block].unsqueeze(0), q, points.T, alpha=-2.0)
            kk = min(k, points.shape[0])
            candidates.append(partial.topk(kk, dim=1, largest=False).indices + start)
        cand = torch.cat(candidates, dim=1)  # (B, C)
        exact = ((self._points[cand] - q.unsqueeze(1)) ** 2).sum(dim=-1)  # (B, C)
        return cand.gather(1, exact.argmin(dim=1, keepdim=True))[:, 0]
