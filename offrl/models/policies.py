"""Policies and value functions built on an encoder."""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
from torch import nn
import torch.nn.functional as F

from .layers import float32_head

__all__ = [
    "DeterministicPolicy",
    "NormalPolicy",
    "CategoricalPolicy",
    "ValueFunction",
    "GreedyNormalPolicy",
    "ArgmaxPolicy",
    "squashed_sample",
    "squashed_draw",
    "sample_major_noise",
    "squashed_log_prob",
    "gaussian_log_prob",
]

#: log sqrt(2 pi), the constant of a Gaussian log-density
LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, logstd: torch.Tensor) -> torch.Tensor:
    """Log density of a diagonal Gaussian, summed over the last axis."""
    return (-0.5 * ((x - mean) * torch.exp(-logstd)) ** 2 - logstd - LOG_SQRT_2PI).sum(dim=-1)


def squashed_sample(mean: torch.Tensor, logstd: torch.Tensor, n: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised sample of ``tanh(u)``, ``u ~ N(mean, exp(logstd))``,
    and its log-density (with the tanh change of variables).

    With ``n > 0`` draws ``n`` samples per row: shapes ``(B, n, A)`` and
    ``(B, n)``; otherwise ``(B, A)`` and ``(B,)``.
    """
    noise = None
    if n > 0:
        mean = mean.unsqueeze(1).expand(-1, n, -1)
        logstd = logstd.unsqueeze(1).expand(-1, n, -1)
        noise = sample_major_noise(mean)
    _, _, action, log_prob = squashed_draw(mean, logstd, noise)
    return action, log_prob


def sample_major_noise(like: torch.Tensor) -> torch.Tensor:
    """Standard normal noise of ``like``'s shape ``(B, n, ...)``, drawn
    sample-major (all of sample 0's rows, then sample 1's, ...) as
    ``torch.distributions``' ``rsample((n,))`` draws it, so that a seeded
    run draws the numbers d3rlpy's ``sample_n`` does (``benchmarks/
    equivalence.py`` compares updates draw for draw); contiguous."""
    return torch.randn((like.shape[1], like.shape[0]) + tuple(like.shape[2:]), dtype=like.dtype,
                       device=like.device).transpose(0, 1).contiguous()


def squashed_draw(mean: torch.Tensor, logstd: torch.Tensor,
                  noise: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, ...]:
    """:func:`squashed_sample`'s one draw with what its gradients need:
    ``(noise, std, tanh(u), log-density)`` with ``u = mean + std * noise``
    (a written-out backward, ``offrl.algos.sac.plain_actor_temperature_step``);
    ``noise`` drawn here unless given."""
    if noise is None:
        noise = torch.randn_like(mean)
    std = torch.exp(logstd)
    u = mean + noise * std
    log_prob = (-0.5 * noise**2 - logstd - LOG_SQRT_2PI).sum(dim=-1)
    # log(1 - tanh(u)^2) computed stably
    log_prob = log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(dim=-1)
    return noise, std, torch.tanh(u), log_prob


def squashed_log_prob(mean: torch.Tensor, logstd: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Log-density of ``action = tanh(u)``, ``u ~ N(mean, exp(logstd))``,
    summed over the last axis: the density :func:`squashed_sample` draws
    from. ``-inf`` where an action lies outside [-1, 1]; actions at +-1 are
    moved 1e-6 inside (logged actions are often clipped to the bounds)."""
    inside = (action.abs() <= 1.0).all(dim=-1)
    a = action.clamp(-1.0 + 1e-6, 1.0 - 1e-6)
    u = torch.atanh(a)
    log_prob = gaussian_log_prob(u, mean, logstd)
    log_prob = log_prob - (2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))).sum(dim=-1)
    return torch.where(inside, log_prob, torch.full_like(log_prob, -math.inf))


class DeterministicPolicy(nn.Module):
    """``a = tanh(W h(s) + b)`` in the normalised action range [-1, 1]."""

    def __init__(self, encoder: nn.Module, feature_size: int, action_size: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.fc = nn.Linear(feature_size, action_size)

    def forward(self, x) -> torch.Tensor:
        return torch.tanh(float32_head(self.fc, self.encoder(x)))


class NormalPolicy(nn.Module):
    """Diagonal Gaussian head: ``forward(x) -> (mean, logstd)``.

    ``logstd`` is state-dependent and clamped to ``[min_logstd, max_logstd]``,
    or (``use_std_parameter``) one learned parameter per action dimension
    mapped into that range by a sigmoid (starting at its middle).

    SAC/CQL squash samples with tanh (:func:`squashed_sample`); IQL and
    stochastic BC use ``Normal(tanh(mean), std)`` (:meth:`log_prob`).
    The greedy action is ``tanh(mean)`` either way.
    """

    def __init__(
        self,
        encoder: nn.Module,
        feature_size: int,
        action_size: int,
        min_logstd: float = -20.0,
        max_logstd: float = 2.0,
        use_std_parameter: bool = False,
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.mu = nn.Linear(feature_size, action_size)
        self.min_logstd = float(min_logstd)
        self.max_logstd = float(max_logstd)
        self.use_std_parameter = use_std_parameter
        if use_std_parameter:
            self.logstd = nn.Parameter(torch.zeros(1, action_size))
        else:
            self.logstd = nn.Linear(feature_size, action_size)

    def forward(self, x) -> Tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(x)
        mean = float32_head(self.mu, h)
        if self.use_std_parameter:
            # squashed into the range by a sigmoid, so the gradient never vanishes at the bounds
            span = self.max_logstd - self.min_logstd
            logstd = (self.min_logstd + torch.sigmoid(self.logstd) * span).expand_as(mean)
            return mean, logstd
        return mean, float32_head(self.logstd, h).clamp(self.min_logstd, self.max_logstd)

    def greedy(self, x) -> torch.Tensor:
        return torch.tanh(self.forward(x)[0])

    def log_prob(self, x, action: torch.Tensor) -> torch.Tensor:
        """``log N(action; tanh(mean), exp(logstd))``, shape ``(B,)``."""
        mean, logstd = self.forward(x)
        return gaussian_log_prob(action, torch.tanh(mean), logstd)


class CategoricalPolicy(nn.Module):
    """Logits over discrete actions."""

    def __init__(self, encoder: nn.Module, feature_size: int, action_size: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.fc = nn.Linear(feature_size, action_size)

    def forward(self, x) -> torch.Tensor:
        return float32_head(self.fc, self.encoder(x))


class ValueFunction(nn.Module):
    """State value ``V(s)``, shape ``(B, 1)``."""

    def __init__(self, encoder: nn.Module, feature_size: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.fc = nn.Linear(feature_size, 1)

    def forward(self, x) -> torch.Tensor:
        return float32_head(self.fc, self.encoder(x))


class GreedyNormalPolicy(nn.Module):
    """The greedy action ``tanh(mean)`` of a :class:`NormalPolicy` (for export)."""

    def __init__(self, policy: NormalPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, x) -> torch.Tensor:
        return torch.tanh(self.policy(x)[0])


class ArgmaxPolicy(nn.Module):
    """``argmax`` of a :class:`CategoricalPolicy`'s logits, int64 indices (for export)."""

    def __init__(self, policy: CategoricalPolicy) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, x) -> torch.Tensor:
        return self.policy(x).argmax(dim=-1)
