"""Logger adapter protocols: how training reports parameters, metrics and models.

A factory's ``create`` has d3rlpy 2.7+'s signature ``create(algo,
experiment_name, n_steps_per_epoch)``; user factories written for the older
``create(experiment_name)`` keep working: :func:`create_logger_adapter`
(what the training loops call) tells the two apart by the signature.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, Optional, Protocol, runtime_checkable

__all__ = ["LoggerAdapter", "LoggerAdapterFactory", "create_logger_adapter", "split_create_arguments"]


@runtime_checkable
class LoggerAdapter(Protocol):
    """Receives what one training run reports (``watch_model`` is optional:
    d3rlpy 2.8's hook for gradient watchers, called only if present)."""

    def write_params(self, params: Dict[str, Any]) -> None: ...

    def before_write_metric(self, epoch: int, step: int) -> None: ...

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None: ...

    def after_write_metric(self, epoch: int, step: int) -> None: ...

    def save_model(self, epoch: int, algo: Any) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class LoggerAdapterFactory(Protocol):
    """Creates a :class:`LoggerAdapter` at the start of each run."""

    def create(self, algo: Any, experiment_name: str, n_steps_per_epoch: int) -> LoggerAdapter: ...


def _takes_new_signature(create: Any) -> bool:
    """``create`` accepts ``(algo, experiment_name, n_steps_per_epoch)``
    (True) or only ``(experiment_name)`` (False)."""
    try:
        signature = inspect.signature(create)
    except (TypeError, ValueError):  # a builtin or C callable: assume the current signature
        return True
    positional = [p for p in signature.parameters.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in signature.parameters.values()):
        return True
    if len(positional) >= 3:
        return True
    if len(positional) >= 1 and sum(p.default is inspect.Parameter.empty for p in positional) <= 1:
        return False
    raise TypeError(
        f"{getattr(create, '__qualname__', create)!s} must take (algo, experiment_name, n_steps_per_epoch) "
        f"or (experiment_name), got {signature}"
    )


def create_logger_adapter(factory: Any, algo: Any, experiment_name: str, n_steps_per_epoch: int) -> LoggerAdapter:
    """``factory.create(algo, experiment_name, n_steps_per_epoch)``, or
    ``factory.create(experiment_name)`` for a factory written to the older
    signature."""
    create = getattr(factory, "create", None)
    if not callable(create):
        raise TypeError(f"logger_adapter must be a LoggerAdapterFactory (with a create method), got {type(factory).__name__}")
    if _takes_new_signature(create):
        return create(algo, experiment_name, n_steps_per_epoch)
    return create(experiment_name)


def split_create_arguments(algo: Any, experiment_name: Optional[str]) -> str:
    """The experiment name of a built-in factory's ``create`` call, which may
    be d3rlpy 2.7+'s ``create(algo, experiment_name, n_steps_per_epoch)`` or
    the older ``create(experiment_name)``."""
    if experiment_name is None:
        if isinstance(algo, str):
            return algo
        raise TypeError("create() needs an experiment_name: create(algo, experiment_name, n_steps_per_epoch)")
    if not isinstance(experiment_name, str):
        raise TypeError(f"experiment_name must be a str, got {type(experiment_name).__name__}")
    return experiment_name
