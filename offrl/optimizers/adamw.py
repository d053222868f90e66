"""``AdamWFactory``: AdamW (decoupled weight decay) as JSON data (d3rlpy 2.7+)."""

from __future__ import annotations

import dataclasses

import torch

from ..serialization import register
from .optimizers import AdamFactory

__all__ = ["AdamWFactory"]


@register("optimizer")
@dataclasses.dataclass
class AdamWFactory(AdamFactory):
    """``torch.optim.AdamW``; fields as d3rlpy's ``AdamWFactory`` (the weight
    decay is decoupled from the gradient, applied to every parameter).

    Args:
        betas, eps, weight_decay, amsgrad: AdamW's parameters.
        clip_grad_norm: clip the gradient norm before each step (None: no clipping).
        lr_scheduler_factory: a scheduler stepped after each optimizer step.
    """

    weight_decay: float = 0.0

    @staticmethod
    def get_type() -> str:
        return "adam_w"

    def _optim_class(self) -> type:
        return torch.optim.AdamW
