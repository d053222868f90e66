"""``AdamWFactory``: AdamW (decoupled weight decay) as JSON data, with an
optional learning-rate scheduler (d3rlpy 2.7+)."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Optional, Tuple

import torch
from torch import nn

from ..models.optimizers import AdamFactory
from ..serialization import register
from .lr_schedulers import LRSchedulerFactory, attach_lr_scheduler

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
    lr_scheduler_factory: Optional[LRSchedulerFactory] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.lr_scheduler_factory is not None and not isinstance(self.lr_scheduler_factory, LRSchedulerFactory):
            raise TypeError(
                "lr_scheduler_factory must be an LRSchedulerFactory, got "
                f"{type(self.lr_scheduler_factory).__name__}"
            )

    @staticmethod
    def get_type() -> str:
        return "adam_w"

    def _optim_class(self) -> type:
        return torch.optim.AdamW

    def create(self, named_params: Iterable[Tuple[str, nn.Parameter]], lr: float) -> Any:
        return attach_lr_scheduler(super().create(named_params, lr), self.lr_scheduler_factory)
