"""Optimizer and learning-rate scheduler factories (d3rlpy's
``d3rlpy.optimizers``).

The optimizer factories of :mod:`offrl.models` (``AdamFactory``,
``SGDFactory``, ``RMSpropFactory``, ``GPTAdamWFactory``, ``OptimizerFactory``)
are the same classes here; ``AdamWFactory`` and the scheduler factories are
defined in this package. The optimizer names load on first use, so that
:mod:`offrl.models.optimizers` may import the scheduler factories from here.
"""

from __future__ import annotations

from typing import Any

from .lr_schedulers import (
    CosineAnnealingLRFactory,
    LRSchedulerFactory,
    ScheduledOptimizerWrapper,
    WarmupSchedulerFactory,
    attach_lr_scheduler,
    make_lr_scheduler_field,
    register_lr_scheduler_factory,
)

__all__ = [
    "OptimizerFactory",
    "OptimizerWrapper",
    "SGDFactory",
    "AdamFactory",
    "AdamWFactory",
    "RMSpropFactory",
    "GPTAdamWFactory",
    "LRSchedulerFactory",
    "WarmupSchedulerFactory",
    "CosineAnnealingLRFactory",
    "ScheduledOptimizerWrapper",
    "attach_lr_scheduler",
    "make_lr_scheduler_field",
    "make_optimizer_field",
    "register_lr_scheduler_factory",
    "register_optimizer_factory",
]

_FROM_MODELS = {"OptimizerFactory", "OptimizerWrapper", "SGDFactory", "AdamFactory", "RMSpropFactory", "GPTAdamWFactory"}


def register_optimizer_factory(cls: type) -> type:
    """Register a user optimizer factory so configs naming it load."""
    from ..models.optimizers import OptimizerFactory
    from ..serialization import register

    if not (isinstance(cls, type) and issubclass(cls, OptimizerFactory)):
        raise TypeError(f"expected an OptimizerFactory subclass, got {cls!r}")
    return register("optimizer")(cls)


def make_optimizer_field() -> Any:
    """A dataclass field whose default is a fresh ``AdamFactory()``."""
    import dataclasses

    from ..models.optimizers import AdamFactory

    return dataclasses.field(default_factory=AdamFactory)


def __getattr__(name: str) -> Any:
    if name in _FROM_MODELS:
        from ..models import optimizers

        return getattr(optimizers, name)
    if name == "AdamWFactory":
        from .adamw import AdamWFactory

        return AdamWFactory
    raise AttributeError(f"module 'offrl.optimizers' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
