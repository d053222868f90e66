"""Optimizer and learning-rate scheduler factories (d3rlpy's
``d3rlpy.optimizers``).

The optimizer factories are defined in :mod:`offrl.optimizers.optimizers`,
the scheduler
factories in :mod:`offrl.optimizers.lr_schedulers`. :mod:`offrl.models`
re-exports the optimizer factories (the same classes) under its names.
"""

from .lr_schedulers import (
    CosineAnnealingLRFactory,
    LRSchedulerFactory,
    ScheduledOptimizerWrapper,
    WarmupSchedulerFactory,
    attach_lr_scheduler,
    make_lr_scheduler_field,
    register_lr_scheduler_factory,
)
from .optimizers import (
    AdamFactory,
    AdamWFactory,
    GPTAdamWFactory,
    OptimizerFactory,
    OptimizerWrapper,
    RMSpropFactory,
    SGDFactory,
    make_optimizer_field,
    register_optimizer_factory,
)

__all__ = [
    "OptimizerFactory", "OptimizerWrapper", "SGDFactory", "AdamFactory", "AdamWFactory", "RMSpropFactory",
    "GPTAdamWFactory", "make_optimizer_field", "register_optimizer_factory",
    "LRSchedulerFactory", "WarmupSchedulerFactory", "CosineAnnealingLRFactory", "ScheduledOptimizerWrapper",
    "attach_lr_scheduler", "make_lr_scheduler_field", "register_lr_scheduler_factory",
]
