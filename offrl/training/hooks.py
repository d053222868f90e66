"""Step and epoch hooks for the training loops.

``fit``, ``fitter`` and ``fit_online`` take ``callback`` (called after every
step) and ``epoch_callback`` (after every epoch), both as
``hook(algo, epoch, total_step)``: ``total_step`` counts gradient steps in
``fit`` and environment steps in ``fit_online``, ``epoch`` is 1-based.

:class:`LinearInterpolationHook` (after PFRL's hook of that name) moves any
hyperparameter linearly over the steps; a *setter* applies each value:

    hook = LinearInterpolationHook(10000, 3e-4, 3e-5, set_learning_rate())
    sac.fit_online(env, n_steps=10000, callback=hook)

:func:`set_learning_rate` sets optimizers' learning rates and
:func:`set_config` a config field (``"tau"``, ``"alpha"``, ...); any callable
``setter(algo, step, value)`` works. :func:`combine_callbacks` runs several
hooks as one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np

__all__ = ["LinearInterpolationHook", "set_learning_rate", "set_config", "combine_callbacks"]

Setter = Callable[[Any, int, float], None]
Hook = Callable[[Any, int, int], None]


class LinearInterpolationHook:
    """Set a hyperparameter to ``value(step)`` after every step, with

        value(t) = start_value + (stop_value - start_value) * min(t, total_steps) / total_steps

    so it equals ``stop_value`` from step ``total_steps`` on. ``setter(algo,
    step, value)`` applies it (e.g. :func:`set_learning_rate`)."""

    def __init__(self, total_steps: int, start_value: float, stop_value: float, setter: Setter) -> None:
        if isinstance(total_steps, bool) or not isinstance(total_steps, (int, np.integer)) or total_steps <= 0:
            raise ValueError(f"total_steps must be a positive int, got {total_steps!r}")
        for name, value in (("start_value", start_value), ("stop_value", stop_value)):
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or not np.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if not callable(setter):
            raise TypeError(f"setter must be callable as setter(algo, step, value), got {type(setter).__name__}")
        self.total_steps = int(total_steps)
        self.start_value = float(start_value)
        self.stop_value = float(stop_value)
        self.setter = setter

    def value(self, step: int) -> float:
        """The value at step ``step``."""
        fraction = min(max(int(step), 0), self.total_steps) / self.total_steps
        return self.start_value + (self.stop_value - self.start_value) * fraction

    def __call__(self, algo: Any, epoch: int, total_step: int) -> None:
        self.setter(algo, total_step, self.value(total_step))

    def __repr__(self) -> str:
        return (
            f"LinearInterpolationHook(total_steps={self.total_steps}, start_value={self.start_value}, "
            f"stop_value={self.stop_value}, setter={self.setter!r})"
        )


class set_learning_rate:
    """Setter of the learning rate of one optimizer (by name, e.g.
    ``"critic_optim"``; see ``algo.optimizers``) or, by default, of all of them."""

    def __init__(self, optimizer: Optional[str] = None) -> None:
        self.optimizer = optimizer

    def __call__(self, algo: Any, step: int, value: float) -> None:
        optims = algo.optimizers
        if self.optimizer is not None:
            if self.optimizer not in optims:
                raise ValueError(f"{type(algo).__name__} has no optimizer {self.optimizer!r}; it has {sorted(optims)}")
            optims = {self.optimizer: optims[self.optimizer]}
        for wrapper in optims.values():
            for group in getattr(wrapper, "optim", wrapper).param_groups:  # a torch optimizer is its own
                group["lr"] = value

    def __repr__(self) -> str:
        return f"set_learning_rate({self.optimizer!r})"


class set_config:
    """Setter of a config field: the algorithm's config is replaced by a
    validated copy holding the new value (the user's config object is not
    changed). It takes effect where the algorithm reads the field during
    updates (e.g. ``gamma``, ``tau``, CQL's ``alpha``), not for fields used
    only when building networks."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"name must be a config field name, got {type(name).__name__}")
        self.name = name

    def __call__(self, algo: Any, step: int, value: float) -> None:
        config = algo.config
        names = {f.name for f in dataclasses.fields(config)}
        if self.name not in names:
            raise ValueError(f"{type(config).__name__} has no field {self.name!r}")
        current = getattr(config, self.name)
        if isinstance(current, int) and not isinstance(current, bool):
            value = int(round(value))
        algo.update_config(**{self.name: value})

    def __repr__(self) -> str:
        return f"set_config({self.name!r})"


def combine_callbacks(*callbacks: Optional[Hook]) -> Hook:
    """One hook calling each of ``callbacks`` in order (``None`` entries are skipped)."""
    for i, hook in enumerate(callbacks):
        if hook is not None and not callable(hook):
            raise TypeError(f"callbacks[{i}] is not callable: {type(hook).__name__}")
    hooks = [c for c in callbacks if c is not None]

    def combined(algo: Any, epoch: int, total_step: int) -> None:
        for hook in hooks:
            hook(algo, epoch, total_step)

    return combined
