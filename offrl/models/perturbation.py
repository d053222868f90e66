"""BCQ's perturbation actor.

The actor of BCQ (Fujimoto, Meger and Precup, 2019, "Off-Policy Deep
Reinforcement Learning without Exploration") does not choose an action: it
nudges an action proposed by the generative model of the data by at most
``action_flexibility`` (Φ in the paper) of the action range:

    xi(s, a) = clip(a + action_flexibility * max_action * tanh(f(s, a)), -1, 1)

with ``max_action = 1`` in offrl's normalised action range.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .encoders import EncoderFactory, ShapeLike, compute_output_size
from .layers import float32_head

__all__ = ["PerturbationActor", "create_perturbation_actor"]


class PerturbationActor(nn.Module):
    """``(s, a) -> clip(a + action_flexibility * tanh(W h(s, a) + b), -1, 1)``."""

    def __init__(self, encoder: nn.Module, feature_size: int, action_size: int, action_flexibility: float) -> None:
        super().__init__()
        self.encoder = encoder
        self.fc = nn.Linear(feature_size, action_size)
        self.action_flexibility = float(action_flexibility)

    def forward(self, x: Any, action: torch.Tensor) -> torch.Tensor:
        residual = self.action_flexibility * torch.tanh(float32_head(self.fc, self.encoder(x, action)))
        return (action + residual).clamp(-1.0, 1.0)


def create_perturbation_actor(
    encoder_factory: EncoderFactory, observation_shape: ShapeLike, action_size: int, action_flexibility: float
) -> PerturbationActor:
    """A :class:`PerturbationActor` on ``encoder_factory.create_with_action``."""
    encoder = encoder_factory.create_with_action(observation_shape, action_size)
    return PerturbationActor(encoder, compute_output_size(encoder, observation_shape, action_size), action_size, action_flexibility)
