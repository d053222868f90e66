"""Losses and selections shared by d3rlpy's Q-function modules
(``d3rlpy.models.torch.q_functions.utility``)."""

from __future__ import annotations

from typing import Union

import torch
import torch.nn.functional as F

from ....types import TorchObservation

__all__ = [
    "pick_value_by_action",
    "pick_quantile_value_by_action",
    "compute_huber_loss",
    "compute_quantile_huber_loss",
    "compute_quantile_loss",
    "compute_reduce",
    "observation_batch_size",
    "observation_device",
    "repeat_rows",
    "td_target",
    "quantiles_of",
]

REDUCTIONS = ("mean", "sum", "none")


def observation_batch_size(x: TorchObservation) -> int:
    """The batch size of a tensor or of a list of tensors (tuple observations)."""
    return int((x if isinstance(x, torch.Tensor) else x[0]).shape[0])


def observation_device(x: TorchObservation) -> torch.device:
    return (x if isinstance(x, torch.Tensor) else x[0]).device


def _one_hot(action: torch.Tensor, action_size: int) -> torch.Tensor:
    return F.one_hot(action.reshape(-1).long(), num_classes=action_size).to(torch.float32)


def pick_value_by_action(values: torch.Tensor, action: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    """``values[b, action[b]]`` of ``(B, A)`` values: ``(B,)``, or ``(B, 1)``
    with ``keepdim``."""
    if values.dim() != 2:
        raise ValueError(f"pick_value_by_action takes (B, A) values, got shape {tuple(values.shape)}")
    return (values * _one_hot(action, values.shape[1])).sum(dim=1, keepdim=keepdim)


def pick_quantile_value_by_action(values: torch.Tensor, action: torch.Tensor, keepdim: bool = False) -> torch.Tensor:
    """The quantiles of the chosen actions from ``(B, A, N)``: ``(B, N)``
    (``(B, 1, N)`` with ``keepdim``)."""
    if values.dim() != 3:
        raise ValueError(f"pick_quantile_value_by_action takes (B, A, N) quantiles, got shape {tuple(values.shape)}")
    mask = _one_hot(action, values.shape[1]).unsqueeze(-1)
    return (values * mask).sum(dim=1, keepdim=keepdim)


def compute_huber_loss(y: torch.Tensor, target: torch.Tensor, beta: float = 1.0) -> torch.Tensor:
    """Elementwise Huber loss of ``target - y``: ``d^2 / 2`` where ``|d| <
    beta``, ``beta (|d| - beta / 2)`` elsewhere."""
    diff = target - y
    small = diff.detach().abs() < beta
    return torch.where(small, 0.5 * diff**2, beta * (diff.abs() - 0.5 * beta))


def compute_quantile_huber_loss(y: torch.Tensor, target: torch.Tensor, taus: torch.Tensor) -> torch.Tensor:
    """Quantile Huber loss of predicted quantiles ``y`` ``(B, 1, N)`` against
    target samples ``target`` ``(B, M, 1)`` at fractions ``taus``
    ``(B or 1, 1, N)``: summed over the predicted quantiles, averaged over
    the targets, ``(B,)``."""
    if y.dim() != 3 or target.dim() != 3 or taus.dim() != 3:
        raise ValueError("compute_quantile_huber_loss takes 3-D y, target and taus, got shapes "
                         f"{tuple(y.shape)}, {tuple(target.shape)}, {tuple(taus.shape)}")
    huber = compute_huber_loss(y, target)
    below = ((target - y).detach() < 0.0).to(huber.dtype)
    return ((taus - below).abs() * huber).sum(dim=2).mean(dim=1)


def td_target(rewards: torch.Tensor, target: torch.Tensor, terminals: torch.Tensor,
              gamma: Union[float, torch.Tensor]) -> torch.Tensor:
    """``rewards + gamma * target * (1 - terminals)``."""
    return rewards + gamma * target * (1 - terminals)


def compute_quantile_loss(quantiles: torch.Tensor, rewards: torch.Tensor, target: torch.Tensor,
                          terminals: torch.Tensor, taus: torch.Tensor,
                          gamma: Union[float, torch.Tensor]) -> torch.Tensor:
    """The quantile TD loss of ``(B, N)`` quantiles against the ``(B, M)``
    target quantiles ``rewards + gamma * target * (1 - terminals)``, ``(B,)``."""
    batch, n = quantiles.shape
    y = td_target(rewards, target, terminals, gamma)
    return compute_quantile_huber_loss(quantiles.view(batch, 1, n), y.view(batch, -1, 1), taus.view(-1, 1, n))


def quantiles_of(output: "tuple") -> "tuple":
    """``(quantiles, taus)`` of a distributional Q-function's output; a
    ``TypeError`` when the module gave none (a forwarder pointed at an
    expected-value Q-function)."""
    quantiles, taus = output[1], output[2]
    if quantiles is None or taus is None:
        raise TypeError("this forwarder needs a distributional Q-function (quantiles and taus in its output), "
                        "the module returned none")
    return quantiles, taus


def compute_reduce(value: torch.Tensor, reduction_type: str) -> torch.Tensor:
    """``mean`` or ``sum`` of per-sample losses, or ``none``: them as ``(B, 1)``."""
    if reduction_type == "mean":
        return value.mean()
    if reduction_type == "sum":
        return value.sum()
    if reduction_type == "none":
        return value.view(-1, 1)
    raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction_type!r}")


def repeat_rows(x: TorchObservation, n: int) -> TorchObservation:
    """``(B, ...)`` -> ``(B * n, ...)``, row ``b * n + j`` = row ``b`` (tuple observations element-wise)."""
    if isinstance(x, torch.Tensor):
        return x.repeat_interleave(n, dim=0)
    return [t.repeat_interleave(n, dim=0) for t in x]
