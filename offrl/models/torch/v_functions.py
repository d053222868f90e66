"""The state-value function of d3rlpy's builders
(``d3rlpy.models.torch.v_functions``): ``V(x) = W h(x) + b``, ``(B, 1)``."""

from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

from ...types import TorchObservation
from .encoders import Encoder, check_positive_int

__all__ = ["ValueFunction", "compute_v_function_error"]


class ValueFunction(nn.Module):
    """``forward(x) -> (B, 1)`` values; d3rlpy's attribute names
    (``_encoder``, ``_fc``)."""

    def __init__(self, encoder: Encoder, hidden_size: int) -> None:
        super().__init__()
        self._encoder = encoder
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), 1)

    def forward(self, x: TorchObservation) -> torch.Tensor:
        return self._fc(self._encoder(x))


def compute_v_function_error(v_function: ValueFunction, observations: TorchObservation,
                             target: torch.Tensor) -> torch.Tensor:
    """The mean squared error between ``V(observations)`` and ``target`` ``(B, 1)``."""
    values = v_function(observations)
    if values.shape != target.shape:
        raise ValueError(f"compute_v_function_error: target has shape {tuple(target.shape)}, "
                         f"the values {tuple(values.shape)}")
    return F.mse_loss(values, target)
