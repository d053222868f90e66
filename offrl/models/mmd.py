"""Maximum mean discrepancy between two sets of action samples per state.

BEAR (Kumar et al., 2019, "Stabilizing Off-Policy Q-Learning via Bootstrapping
Error Reduction", arXiv:1906.00949) keeps the learned policy's support near
the data's by bounding the MMD between ``n`` policy actions ``x_1..x_n`` and
``m`` actions ``y_1..y_m`` sampled from a model of the behaviour policy:

    MMD^2(x, y) = mean_{i,i'} k(x_i, x_i') + mean_{j,j'} k(y_j, y_j') - 2 mean_{i,j} k(x_i, y_j)
    gaussian   k(u, v) = exp(-||u - v||_2^2 / (2 sigma))
    laplacian  k(u, v) = exp(-||u - v||_1   / (2 sigma))

(``2 sigma`` and not ``2 sigma^2``, as in the authors' code and d3rlpy, so
that ``mmd_sigma`` keeps its meaning). :func:`mmd` returns
``sqrt(MMD^2 + 1e-6)`` (the authors' form: finite gradient at 0).

All states of a batch and all pairs are computed at once: the two sample
sets are stacked and one broadcast kernel evaluation gives the whole
``(B, n + m, n + m)`` Gram matrix, whose three blocks are averaged.
"""

from __future__ import annotations

import torch

__all__ = ["MMD_KERNELS", "gaussian_kernel", "laplacian_kernel", "mmd_squared", "mmd"]

MMD_KERNELS = ("gaussian", "laplacian")


def gaussian_kernel(u: torch.Tensor, v: torch.Tensor, sigma: float) -> torch.Tensor:
    """``exp(-||u - v||_2^2 / (2 sigma))`` over the last axis (broadcasting)."""
    return torch.exp(-((u - v) ** 2).sum(dim=-1) / (2.0 * sigma))


def laplacian_kernel(u: torch.Tensor, v: torch.Tensor, sigma: float) -> torch.Tensor:
    """``exp(-||u - v||_1 / (2 sigma))`` over the last axis (broadcasting)."""
    return torch.exp(-(u - v).abs().sum(dim=-1) / (2.0 * sigma))


def mmd_squared(x: torch.Tensor, y: torch.Tensor, kernel: str = "laplacian", sigma: float = 20.0) -> torch.Tensor:
    """Squared MMD per state between samples ``x`` ``(B, n, A)`` and ``y``
    ``(B, m, A)``; returns ``(B,)`` (biased V-statistic, diagonals included)."""
    if kernel not in MMD_KERNELS:
        raise ValueError(f"kernel must be one of {list(MMD_KERNELS)}, got {kernel!r}")
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma!r}")
    if x.dim() != 3 or y.dim() != 3 or x.shape[0] != y.shape[0] or x.shape[2] != y.shape[2]:
        raise ValueError(f"x and y must be (B, n, A) and (B, m, A), got {tuple(x.shape)} and {tuple(y.shape)}")
    n = x.shape[1]
    z = torch.cat([x, y], dim=1)  # (B, n + m, A)
    k = (gaussian_kernel if kernel == "gaussian" else laplacian_kernel)(z.unsqueeze(2), z.unsqueeze(1), float(sigma))
    return k[:, :n, :n].mean(dim=(1, 2)) + k[:, n:, n:].mean(dim=(1, 2)) - 2.0 * k[:, :n, n:].mean(dim=(1, 2))


def mmd(x: torch.Tensor, y: torch.Tensor, kernel: str = "laplacian", sigma: float = 20.0) -> torch.Tensor:
    """``sqrt(MMD^2 + 1e-6)`` per state, ``(B,)`` (see :func:`mmd_squared`)."""
    return torch.sqrt(mmd_squared(x, y, kernel, sigma) + 1e-6)
