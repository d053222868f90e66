"""Implicit quantile networks (Dabney et al., 2018, arXiv:1806.06923;
``d3rlpy.models.torch.q_functions.iqn_q_function``).

The value at a fraction ``tau`` is ``W (h(x) * phi(tau)) + b`` with the
cosine embedding ``phi(tau) = relu(E [cos(pi k tau)]_{k=1..embed_size})``.
In training mode ``n_quantiles`` fractions are drawn uniformly per sample;
in eval mode ``n_greedy_quantiles`` evenly spaced fractions from 0 to 1
(both ends included, as d3rlpy 2.8.1) are used.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ....types import TorchObservation
from ..encoders import Encoder, EncoderWithAction, check_positive_int
from .base import (
    ContinuousQFunction,
    DiscreteQFunction,
    QFunctionOutput,
)
from .qr_q_function import ContinuousQuantileQFunctionForwarder, DiscreteQuantileQFunctionForwarder
from .utility import (
    observation_batch_size,
    observation_device,
)

__all__ = [
    "DiscreteIQNQFunction",
    "ContinuousIQNQFunction",
    "DiscreteIQNQFunctionForwarder",
    "ContinuousIQNQFunctionForwarder",
    "compute_iqn_feature",
]


def _taus(batch: int, n: int, training: bool, device: torch.device) -> torch.Tensor:
    if training:
        return torch.rand(batch, n, device=device)
    return torch.linspace(0.0, 1.0, n, device=device, dtype=torch.float32).view(1, -1).expand(batch, n)


def compute_iqn_feature(h: torch.Tensor, taus: torch.Tensor, embed: nn.Linear, embed_size: int) -> torch.Tensor:
    """``h(x) * phi(tau)``: ``(B, F)`` features and ``(B, N)`` fractions ->
    ``(B, N, F)``."""
    k = torch.arange(1, embed_size + 1, device=h.device, dtype=h.dtype)
    cosines = torch.cos(math.pi * k.view(1, 1, -1) * taus.view(h.shape[0], -1, 1))
    return h.view(h.shape[0], 1, -1) * torch.relu(embed(cosines))


class _IQNBody(nn.Module):
    def __init__(self, encoder: nn.Module, hidden_size: int, outputs: int, n_quantiles: int, n_greedy_quantiles: int,
                 embed_size: int) -> None:
        super().__init__()
        hidden_size = check_positive_int("hidden_size", hidden_size)
        self._encoder = encoder
        self._fc = nn.Linear(hidden_size, outputs)
        self._n_quantiles = check_positive_int("n_quantiles", n_quantiles)
        self._n_greedy_quantiles = check_positive_int("n_greedy_quantiles", n_greedy_quantiles)
        self._embed_size = check_positive_int("embed_size", embed_size)
        self._embed = nn.Linear(embed_size, hidden_size)

    def quantile_outputs(self, x: TorchObservation, h: torch.Tensor):
        n = self._n_quantiles if self.training else self._n_greedy_quantiles
        taus = _taus(observation_batch_size(x), n, self.training, observation_device(x))
        return self._fc(compute_iqn_feature(h, taus, self._embed, self._embed_size)), taus  # (B, N, outputs)


class DiscreteIQNQFunction(_IQNBody, DiscreteQFunction):
    """``(B, A, N)`` quantiles at sampled (training) or fixed (eval) fractions."""

    def __init__(self, encoder: Encoder, hidden_size: int, action_size: int, n_quantiles: int,
                 n_greedy_quantiles: int, embed_size: int) -> None:
        super().__init__(encoder, hidden_size, check_positive_int("action_size", action_size), n_quantiles,
                         n_greedy_quantiles, embed_size)
        self._action_size = action_size

    def forward(self, x: TorchObservation) -> QFunctionOutput:
        out, taus = self.quantile_outputs(x, self._encoder(x))
        quantiles = out.transpose(1, 2)
        return QFunctionOutput(quantiles.mean(dim=2), quantiles, taus)

    @property
    def encoder(self) -> Encoder:
        return self._encoder


class DiscreteIQNQFunctionForwarder(DiscreteQuantileQFunctionForwarder):
    """The forwarder of :class:`DiscreteIQNQFunction` (the sampled fractions are the module's ``taus``)."""


class ContinuousIQNQFunction(_IQNBody, ContinuousQFunction):
    """``(B, N)`` quantiles at the given action."""

    def __init__(self, encoder: EncoderWithAction, hidden_size: int, n_quantiles: int, n_greedy_quantiles: int,
                 embed_size: int) -> None:
        super().__init__(encoder, hidden_size, 1, n_quantiles, n_greedy_quantiles, embed_size)

    def forward(self, x: TorchObservation, action: torch.Tensor) -> QFunctionOutput:
        h = self._encoder(x, action)
        out, taus = self.quantile_outputs(x, h)
        quantiles = out.view(h.shape[0], -1)
        return QFunctionOutput(quantiles.mean(dim=1, keepdim=True), quantiles, taus)

    @property
    def encoder(self) -> EncoderWithAction:
        return self._encoder


class ContinuousIQNQFunctionForwarder(ContinuousQuantileQFunctionForwarder):
    """The forwarder of :class:`ContinuousIQNQFunction` (the sampled fractions are the module's ``taus``)."""
