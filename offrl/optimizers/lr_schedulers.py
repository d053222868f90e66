"""Learning-rate scheduler factories (d3rlpy's ``d3rlpy.optimizers.lr_schedulers``).

A scheduler factory is data (JSON through offrl's registry, kind
``"lr_scheduler"``); ``create(optim)`` builds a ``torch.optim.lr_scheduler``
scheduler for one optimizer. The scheduler is stepped once per gradient step,
right after the optimizer's step (see :func:`attach_lr_scheduler`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, LRScheduler

from .._d3rlpy_json import D3rlpySerializable
from ..serialization import Serializable, register

__all__ = [
    "LRSchedulerFactory",
    "WarmupSchedulerFactory",
    "CosineAnnealingLRFactory",
    "ScheduledOptimizerWrapper",
    "attach_lr_scheduler",
    "make_lr_scheduler_field",
    "register_lr_scheduler_factory",
]


def _positive_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")


@dataclasses.dataclass
class LRSchedulerFactory(D3rlpySerializable, Serializable):
    """Base of learning-rate scheduler factories: ``create(optim)``."""

    _kind = "lr_scheduler"

    def create(self, optim: torch.optim.Optimizer) -> LRScheduler:
        """A scheduler for ``optim``."""
        raise NotImplementedError


def register_lr_scheduler_factory(cls: type) -> type:
    """Register a user scheduler factory so configs naming it load."""
    if not (isinstance(cls, type) and issubclass(cls, LRSchedulerFactory)):
        raise TypeError(f"expected an LRSchedulerFactory subclass, got {cls!r}")
    return register("lr_scheduler")(cls)


class _Warmup:
    """``min((step + 1) / warmup_steps, 1)`` as a plain callable object."""

    def __init__(self, warmup_steps: int) -> None:
        self.warmup_steps = warmup_steps

    def __call__(self, step: int) -> float:
        return min((step + 1) / self.warmup_steps, 1.0)


@register("lr_scheduler")
@dataclasses.dataclass
class WarmupSchedulerFactory(LRSchedulerFactory):
    """Linear warm-up: the learning rate at gradient step ``t`` (from 0) is
    ``lr * min((t + 1) / warmup_steps, 1)``.

    Args:
        warmup_steps: steps until the full learning rate.
    """

    warmup_steps: int

    def __post_init__(self) -> None:
        _positive_int(self.warmup_steps, "warmup_steps")

    @staticmethod
    def get_type() -> str:
        return "warmup"

    def create(self, optim: torch.optim.Optimizer) -> LRScheduler:
        return LambdaLR(optim, _Warmup(self.warmup_steps))


@register("lr_scheduler")
@dataclasses.dataclass
class CosineAnnealingLRFactory(LRSchedulerFactory):
    """Cosine annealing from ``lr`` to ``eta_min`` over ``T_max`` steps
    (``torch.optim.lr_scheduler.CosineAnnealingLR``).

    Args:
        T_max: steps of one half cosine period.
        eta_min: the smallest learning rate.
        last_epoch: index of the last step (-1: start from the beginning).
    """

    T_max: int  # noqa: N815 (torch's and d3rlpy's name)
    eta_min: float = 0.0
    last_epoch: int = -1

    def __post_init__(self) -> None:
        _positive_int(self.T_max, "T_max")
        if not isinstance(self.eta_min, (int, float)) or isinstance(self.eta_min, bool) or self.eta_min < 0:
            raise ValueError(f"eta_min must be a number >= 0, got {self.eta_min!r}")
        if isinstance(self.last_epoch, bool) or not isinstance(self.last_epoch, int) or self.last_epoch < -1:
            raise ValueError(f"last_epoch must be an int >= -1, got {self.last_epoch!r}")

    @staticmethod
    def get_type() -> str:
        return "cosine_annealing"

    def create(self, optim: torch.optim.Optimizer) -> LRScheduler:
        if self.last_epoch != -1:
            for group in optim.param_groups:
                group.setdefault("initial_lr", group["lr"])
        return CosineAnnealingLR(optim, T_max=self.T_max, eta_min=float(self.eta_min), last_epoch=self.last_epoch)


def make_lr_scheduler_field() -> Any:
    """A dataclass field for an optional scheduler factory (default None)."""
    return dataclasses.field(default=None)


class ScheduledOptimizerWrapper:
    """An optimizer wrapper whose ``step`` also steps a learning-rate
    scheduler, once per gradient step, after the optimizer (d3rlpy's order).
    Everything else is delegated to the wrapped optimizer wrapper; the
    scheduler's state is saved with the optimizer's."""

    def __init__(self, wrapper: Any, lr_scheduler: LRScheduler) -> None:
        self._wrapper = wrapper
        self.lr_scheduler = lr_scheduler

    def step(self) -> None:
        self._wrapper.step()
        self.lr_scheduler.step()

    def state_dict(self) -> Dict[str, Any]:
        return {"optimizer": self._wrapper.state_dict(), "lr_scheduler": self.lr_scheduler.state_dict()}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if set(state) == {"optimizer", "lr_scheduler"}:
            self._wrapper.load_state_dict(state["optimizer"])
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        else:  # a checkpoint written without a scheduler
            self._wrapper.load_state_dict(state)

    def __getattr__(self, name: str) -> Any:
        # only reached for names not set on this object; while copy / pickle
        # rebuild it, ``_wrapper`` itself is not set yet
        if name == "_wrapper":
            raise AttributeError(name)
        return getattr(self._wrapper, name)


def attach_lr_scheduler(wrapper: Any, factory: Optional[LRSchedulerFactory]) -> Any:
    """``wrapper`` itself when ``factory`` is None, else a
    :class:`ScheduledOptimizerWrapper` stepping ``factory.create(wrapper.optim)``."""
    if factory is None:
        return wrapper
    if not isinstance(factory, LRSchedulerFactory):
        raise TypeError(f"lr_scheduler_factory must be an LRSchedulerFactory, got {type(factory).__name__}")
    return ScheduledOptimizerWrapper(wrapper, factory.create(wrapper.optim))
