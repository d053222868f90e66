"""d3rlpy's ``d3rlpy.models.torch.encoders`` path: the base classes of a
custom encoder (see :mod:`offrl.models.torch`)."""

from __future__ import annotations

import abc

import torch
from torch import nn

from ...types import TorchObservation

__all__ = ["Encoder", "EncoderWithAction"]


class Encoder(nn.Module, metaclass=abc.ABCMeta):
    """An observation encoder: ``forward(x) -> (B, features)``; ``x`` is a
    tensor, or a list of tensors for tuple observations."""

    @abc.abstractmethod
    def forward(self, x: TorchObservation) -> torch.Tensor:
        """The features of a batch of (scaled) observations."""


class EncoderWithAction(nn.Module, metaclass=abc.ABCMeta):
    """An observation-and-action encoder (a Q-function's):
    ``forward(x, action) -> (B, features)``."""

    @abc.abstractmethod
    def forward(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        """The features of a batch of (scaled) observations and actions."""
