"""Expected-value Q-functions (``d3rlpy.models.torch.q_functions.mean_q_function``):
a linear head on the encoder's features. The TD error is the Huber loss for
discrete actions (DQN's) and the squared error for continuous ones."""

from __future__ import annotations

from typing import Optional, Union

import torch
from torch import nn
import torch.nn.functional as F

from ....types import TorchObservation
from ..encoders import Encoder, EncoderWithAction, check_positive_int
from .base import (
    ContinuousQFunction,
    ContinuousQFunctionForwarder,
    DiscreteQFunction,
    DiscreteQFunctionForwarder,
    QFunctionOutput,
)
from .utility import compute_huber_loss, compute_reduce, pick_value_by_action, td_target

__all__ = [
    "DiscreteMeanQFunction",
    "ContinuousMeanQFunction",
    "DiscreteMeanQFunctionForwarder",
    "ContinuousMeanQFunctionForwarder",
]


class DiscreteMeanQFunction(DiscreteQFunction):
    """``Q(x, .) = W h(x) + b``, ``(B, A)``."""

    def __init__(self, encoder: Encoder, hidden_size: int, action_size: int) -> None:
        super().__init__()
        self._encoder = encoder
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), check_positive_int("action_size", action_size))

    def forward(self, x: TorchObservation) -> QFunctionOutput:
        return QFunctionOutput(self._fc(self._encoder(x)), None, None)

    @property
    def encoder(self) -> Encoder:
        return self._encoder


class DiscreteMeanQFunctionForwarder(DiscreteQFunctionForwarder):
    def __init__(self, q_func: DiscreteMeanQFunction, action_size: int) -> None:
        self._q_func = q_func
        self._action_size = check_positive_int("action_size", action_size)

    def compute_expected_q(self, x: TorchObservation) -> torch.Tensor:
        return self._q_func(x).q_value

    def compute_error(self, observations: TorchObservation, actions: torch.Tensor, rewards: torch.Tensor,
                      target: torch.Tensor, terminals: torch.Tensor, gamma: Union[float, torch.Tensor] = 0.99,
                      reduction: str = "mean") -> torch.Tensor:
        value = pick_value_by_action(self._q_func(observations).q_value, actions, keepdim=True)
        loss = compute_huber_loss(value, td_target(rewards, target, terminals, gamma))
        return compute_reduce(loss, reduction)

    def compute_target(self, x: TorchObservation, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        values = self._q_func(x).q_value
        return values if action is None else pick_value_by_action(values, action, keepdim=True)

    def set_q_func(self, q_func: DiscreteQFunction) -> None:
        self._q_func = q_func  # type: ignore[assignment]


class ContinuousMeanQFunction(ContinuousQFunction):
    """``Q(x, a) = W h(x, a) + b``, ``(B, 1)``."""

    def __init__(self, encoder: EncoderWithAction, hidden_size: int) -> None:
        super().__init__()
        self._encoder = encoder
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), 1)

    def forward(self, x: TorchObservation, action: torch.Tensor) -> QFunctionOutput:
        return QFunctionOutput(self._fc(self._encoder(x, action)), None, None)

    @property
    def encoder(self) -> EncoderWithAction:
        return self._encoder


class ContinuousMeanQFunctionForwarder(ContinuousQFunctionForwarder):
    def __init__(self, q_func: ContinuousMeanQFunction) -> None:
        self._q_func = q_func

    def compute_expected_q(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return self._q_func(x, action).q_value

    def compute_error(self, observations: TorchObservation, actions: torch.Tensor, rewards: torch.Tensor,
                      target: torch.Tensor, terminals: torch.Tensor, gamma: Union[float, torch.Tensor] = 0.99,
                      reduction: str = "mean") -> torch.Tensor:
        value = self._q_func(observations, actions).q_value
        loss = F.mse_loss(value, td_target(rewards, target, terminals, gamma), reduction="none")
        return compute_reduce(loss, reduction)

    def compute_target(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return self._q_func(x, action).q_value

    def set_q_func(self, q_func: ContinuousQFunction) -> None:
        self._q_func = q_func  # type: ignore[assignment]
