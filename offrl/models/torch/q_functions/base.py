"""The interfaces of d3rlpy's Q-function modules and their "forwarders"
(``d3rlpy.models.torch.q_functions.base``).

A Q-function module (an ``nn.Module``) computes a :class:`QFunctionOutput`;
its forwarder (a plain object holding the module) turns it into what an
algorithm asks for: expected values, TD targets and the TD error. The
forwarder of a Q-function wrapped by DDP is pointed at the wrapper with
``set_q_func``.
"""

from __future__ import annotations

import abc
from typing import NamedTuple, Optional, Union

import torch
from torch import nn

from ....types import TorchObservation
from ..encoders import Encoder, EncoderWithAction

__all__ = [
    "QFunctionOutput",
    "ContinuousQFunction",
    "DiscreteQFunction",
    "ContinuousQFunctionForwarder",
    "DiscreteQFunctionForwarder",
]


class QFunctionOutput(NamedTuple):
    """``q_value``: expected values, ``(B, A)`` (discrete) or ``(B, 1)``;
    ``quantiles`` (``(B, A, N)`` or ``(B, N)``) and their fractions ``taus``
    for distributional Q-functions, None otherwise."""

    q_value: torch.Tensor
    quantiles: Optional[torch.Tensor]
    taus: Optional[torch.Tensor]


class ContinuousQFunction(nn.Module, metaclass=abc.ABCMeta):
    """``forward(x, action) -> QFunctionOutput``."""

    @abc.abstractmethod
    def forward(self, x: TorchObservation, action: torch.Tensor) -> QFunctionOutput:
        """The values at the given actions."""

    @property
    @abc.abstractmethod
    def encoder(self) -> EncoderWithAction:
        """The observation-action encoder."""


class DiscreteQFunction(nn.Module, metaclass=abc.ABCMeta):
    """``forward(x) -> QFunctionOutput`` for every action at once."""

    @abc.abstractmethod
    def forward(self, x: TorchObservation) -> QFunctionOutput:
        """The values of every action."""

    @property
    @abc.abstractmethod
    def encoder(self) -> Encoder:
        """The observation encoder."""


class ContinuousQFunctionForwarder(metaclass=abc.ABCMeta):
    """What algorithms ask of one continuous-action Q-function."""

    @abc.abstractmethod
    def compute_expected_q(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        """Expected values ``(B, 1)``."""

    @abc.abstractmethod
    def compute_error(self, observations: TorchObservation, actions: torch.Tensor, rewards: torch.Tensor,
                      target: torch.Tensor, terminals: torch.Tensor, gamma: Union[float, torch.Tensor] = 0.99,
                      reduction: str = "mean") -> torch.Tensor:
        """The TD error against ``rewards + gamma * target * (1 - terminals)``."""

    @abc.abstractmethod
    def compute_target(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        """The bootstrap value: ``(B, 1)``, or ``(B, N)`` quantiles."""

    @abc.abstractmethod
    def set_q_func(self, q_func: ContinuousQFunction) -> None:
        """Point the forwarder at another module (a DDP wrapper)."""


class DiscreteQFunctionForwarder(metaclass=abc.ABCMeta):
    """What algorithms ask of one discrete-action Q-function."""

    @abc.abstractmethod
    def compute_expected_q(self, x: TorchObservation) -> torch.Tensor:
        """Expected values of every action, ``(B, A)``."""

    @abc.abstractmethod
    def compute_error(self, observations: TorchObservation, actions: torch.Tensor, rewards: torch.Tensor,
                      target: torch.Tensor, terminals: torch.Tensor, gamma: Union[float, torch.Tensor] = 0.99,
                      reduction: str = "mean") -> torch.Tensor:
        """The TD error against ``rewards + gamma * target * (1 - terminals)``."""

    @abc.abstractmethod
    def compute_target(self, x: TorchObservation, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The bootstrap value at ``action`` (``(B, 1)`` or ``(B, N)``), or of
        every action when None (``(B, A)`` or ``(B, A, N)``)."""

    @abc.abstractmethod
    def set_q_func(self, q_func: DiscreteQFunction) -> None:
        """Point the forwarder at another module (a DDP wrapper)."""
