"""Logger adapter protocols: how training reports parameters, metrics and models."""

from __future__ import annotations

from typing import Any, Dict, Protocol, runtime_checkable

__all__ = ["LoggerAdapter", "LoggerAdapterFactory"]


@runtime_checkable
class LoggerAdapter(Protocol):
    """Receives what one training run reports."""

    def write_params(self, params: Dict[str, Any]) -> None: ...

    def before_write_metric(self, epoch: int, step: int) -> None: ...

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None: ...

    def after_write_metric(self, epoch: int, step: int) -> None: ...

    def save_model(self, epoch: int, algo: Any) -> None: ...

    def close(self) -> None: ...


@runtime_checkable
class LoggerAdapterFactory(Protocol):
    """Creates a :class:`LoggerAdapter` at the start of each run."""

    def create(self, experiment_name: str) -> LoggerAdapter: ...
