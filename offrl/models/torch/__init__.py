"""d3rlpy's ``d3rlpy.models.torch`` path, for the base classes of custom
encoders: an :class:`~offrl.models.EncoderFactory` subclass returns an
:class:`Encoder` from ``create`` and an :class:`EncoderWithAction` from
``create_with_action`` (d3rlpy 2.8.1's ``examples/tuple_observation.py``).

offrl's networks take any ``nn.Module`` with these call signatures; the
classes are here so that code written for d3rlpy imports and subclasses
them unchanged. d3rlpy's other torch modules (its policies, Q-functions
and their "forwarders") are its implementation layer and are not
provided.
"""

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
