"""Small pure helpers shared by the algorithm files."""

from __future__ import annotations

import contextlib
from typing import Iterable, Iterator

import torch
from torch import nn

__all__ = ["soft_update", "hard_update", "expectile_loss", "td_target", "freeze", "no_param_grads"]


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source`` (one foreach op)."""
    targets = list(target.parameters())
    sources = list(source.parameters())
    torch._foreach_lerp_(targets, sources, tau)
    for tb, sb in zip(target.buffers(), source.buffers()):
        tb.copy_(sb)


@torch.no_grad()
def hard_update(target: nn.Module, source: nn.Module) -> None:
    """``target <- source``."""
    torch._foreach_copy_(list(target.parameters()), list(source.parameters()))
    for tb, sb in zip(target.buffers(), source.buffers()):
        tb.copy_(sb)


def freeze(module: nn.Module) -> nn.Module:
    """Mark a (target) network as not trainable."""
    for p in module.parameters():
        p.requires_grad_(False)
    return module


def td_target(rewards: torch.Tensor, next_values: torch.Tensor, terminals: torch.Tensor, gamma: float, intervals: torch.Tensor) -> torch.Tensor:
    """``r + gamma**interval * (1 - terminal) * next_values``; ``next_values``
    is ``(B, N)`` (``N`` quantiles, 1 for a scalar value)."""
    return rewards + (gamma**intervals) * (1.0 - terminals) * next_values


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """Asymmetric squared loss ``|expectile - 1(diff < 0)| * diff**2``, mean."""
    weight = torch.where(diff > 0, expectile, 1.0 - expectile)
    return (weight * diff**2).mean()


@contextlib.contextmanager
def no_param_grads(module: nn.Module) -> Iterator[None]:
    """Temporarily stop gradients into ``module``'s parameters; gradients
    still flow through it to its inputs (e.g. a critic in an actor step)."""
    params = [p for p in module.parameters() if p.requires_grad]
    for p in params:
        p.requires_grad_(False)
    try:
        yield
    finally:
        for p in params:
            p.requires_grad_(True)
