"""Quantile-regression Q-functions (Dabney et al., 2018, arXiv:1710.10044;
``d3rlpy.models.torch.q_functions.qr_q_function``): ``N`` quantiles at the
fixed fractions ``tau_i = (i + 0.5) / N``; the expected value is their
mean; the TD error is the quantile Huber loss."""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn

from ....types import TorchObservation
from ..encoders import Encoder, EncoderWithAction, check_positive_int
from .base import (
    ContinuousQFunction,
    ContinuousQFunctionForwarder,
    DiscreteQFunction,
    DiscreteQFunctionForwarder,
    QFunctionOutput,
)
from .utility import (
    compute_quantile_loss,
    compute_reduce,
    observation_batch_size,
    observation_device,
    pick_quantile_value_by_action,
    quantiles_of,
)

__all__ = [
    "DiscreteQRQFunction",
    "ContinuousQRQFunction",
    "DiscreteQRQFunctionForwarder",
    "ContinuousQRQFunctionForwarder",
    "DiscreteQuantileQFunctionForwarder",
    "ContinuousQuantileQFunctionForwarder",
    "midpoint_taus",
    "check_target",
]


def midpoint_taus(n_quantiles: int, device: torch.device) -> torch.Tensor:
    """``(1, N)`` fractions ``(i + 0.5) / N``."""
    return ((torch.arange(n_quantiles, dtype=torch.float32, device=device) + 0.5) / n_quantiles).view(1, -1)


def check_target(target: torch.Tensor, observations: TorchObservation) -> None:
    """A quantile TD target must be ``(B, M)`` for the batch's ``B``."""
    batch = observation_batch_size(observations)
    if target.dim() != 2 or target.shape[0] != batch:
        raise ValueError(f"target must hold (batch={batch}, n_quantiles) target quantiles, got shape {tuple(target.shape)}")


class DiscreteQRQFunction(DiscreteQFunction):
    """``(B, A, N)`` quantiles from a linear head."""

    def __init__(self, encoder: Encoder, hidden_size: int, action_size: int, n_quantiles: int) -> None:
        super().__init__()
        self._encoder = encoder
        self._action_size = check_positive_int("action_size", action_size)
        self._n_quantiles = check_positive_int("n_quantiles", n_quantiles)
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), action_size * n_quantiles)

    def forward(self, x: TorchObservation) -> QFunctionOutput:
        quantiles = self._fc(self._encoder(x)).view(-1, self._action_size, self._n_quantiles)
        taus = midpoint_taus(self._n_quantiles, observation_device(x))
        return QFunctionOutput(quantiles.mean(dim=2), quantiles, taus)

    @property
    def encoder(self) -> Encoder:
        return self._encoder


class DiscreteQuantileQFunctionForwarder(DiscreteQFunctionForwarder):
    """The forwarder of a distributional discrete Q-function (QR, IQN):
    the quantile Huber loss of the taken action's quantiles against the
    target's, with the module's fractions ``taus``."""

    def __init__(self, q_func: DiscreteQFunction, n_quantiles: int) -> None:
        self._q_func = q_func
        self._n_quantiles = check_positive_int("n_quantiles", n_quantiles)

    def compute_expected_q(self, x: TorchObservation) -> torch.Tensor:
        return self._q_func(x).q_value

    def compute_error(self, observations: TorchObservation, actions: torch.Tensor, rewards: torch.Tensor,
                      target: torch.Tensor, terminals: torch.Tensor, gamma: Union[float, torch.Tensor] = 0.99,
                      reduction: str = "mean") -> torch.Tensor:
        check_target(target, observations)
        all_quantiles, taus = quantiles_of(self._q_func(observations))
        quantiles = pick_quantile_value_by_action(all_quantiles, actions)
        loss = compute_quantile_loss(quantiles, rewards, target, terminals, taus, gamma)
        return compute_reduce(loss, reduction)

    def compute_target(self, x: TorchObservation, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        quantiles, _ = quantiles_of(self._q_func(x))
        return quantiles if action is None else pick_quantile_value_by_action(quantiles, action)

    def set_q_func(self, q_func: DiscreteQFunction) -> None:
        self._q_func = q_func


class DiscreteQRQFunctionForwarder(DiscreteQuantileQFunctionForwarder):
    """The forwarder of :class:`DiscreteQRQFunction`."""


class ContinuousQRQFunction(ContinuousQFunction):
    """``(B, N)`` quantiles at the given action from a linear head."""

    def __init__(self, encoder: EncoderWithAction, hidden_size: int, n_quantiles: int) -> None:
        super().__init__()
        self._encoder = encoder
        self._n_quantiles = check_positive_int("n_quantiles", n_quantiles)
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), n_quantiles)

    def forward(self, x: TorchObservation, action: torch.Tensor) -> QFunctionOutput:
        quantiles = self._fc(self._encoder(x, action))
        taus = midpoint_taus(self._n_quantiles, observation_device(x))
        return QFunctionOutput(quantiles.mean(dim=1, keepdim=True), quantiles, taus)

    @property
    def encoder(self) -> EncoderWithAction:
        return self._encoder


class ContinuousQuantileQFunctionForwarder(ContinuousQFunctionForwarder):
    """The forwarder of a distributional continuous Q-function (QR, IQN):
    the quantile Huber loss of the quantiles at the taken action against
    the target's."""

    def __init__(self, q_func: ContinuousQFunction, n_quantiles: int) -> None:
        self._q_func = q_func
        self._n_quantiles = check_positive_int("n_quantiles", n_quantiles)

    def compute_expected_q(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return self._q_func(x, action).q_value

    def compute_error(self, observations: TorchObservation, actions: torch.Tensor, rewards: torch.Tensor,
                      target: torch.Tensor, terminals: torch.Tensor, gamma: Union[float, torch.Tensor] = 0.99,
                      reduction: str = "mean") -> torch.Tensor:
        check_target(target, observations)
        quantiles, taus = quantiles_of(self._q_func(observations, actions))
        loss = compute_quantile_loss(quantiles, rewards, target, terminals, taus, gamma)
        return compute_reduce(loss, reduction)

    def compute_target(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return quantiles_of(self._q_func(x, action))[0]

    def set_q_func(self, q_func: ContinuousQFunction) -> None:
        self._q_func = q_func


class ContinuousQRQFunctionForwarder(ContinuousQuantileQFunctionForwarder):
    """The forwarder of :class:`ContinuousQRQFunction`."""
