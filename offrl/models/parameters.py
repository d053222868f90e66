"""Learnable scalars (SAC's temperature, CQL's Lagrange multiplier).

A positive scalar is learned in log space so that gradient steps can never
make it negative and equal steps change it by equal factors.
"""

from __future__ import annotations

import math

import torch
from torch import nn

__all__ = ["ScalarParameter"]


class ScalarParameter(nn.Module):
    """A positive scalar ``exp(log_value)``, initialised to ``initial``.

    ``log_value`` is a 0-dim parameter; ``forward()`` returns the value
    ``exp(log_value)`` as a 0-dim tensor.
    """

    def __init__(self, initial: float = 1.0) -> None:
        super().__init__()
        initial = float(initial)
        if not (initial > 0.0 and math.isfinite(initial)):
            raise ValueError(f"initial must be a positive finite number, got {initial}")
        self.log_value = nn.Parameter(torch.tensor(math.log(initial), dtype=torch.float32))

    def forward(self) -> torch.Tensor:
        return self.log_value.exp()

    @torch.no_grad()
    def clamp_(self, min_value: float, max_value: float) -> None:
        """Project the value into ``[min_value, max_value]`` (in place, no host sync)."""
        self.log_value.clamp_(math.log(min_value), math.log(max_value))
