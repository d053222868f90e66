"""A logger that records nothing."""

from __future__ import annotations

from typing import Any, Dict, Optional

from .base import split_create_arguments

__all__ = ["NoopAdapter", "NoopAdapterFactory"]


class NoopAdapter:
    def write_params(self, params: Dict[str, Any]) -> None:
        pass

    def before_write_metric(self, epoch: int, step: int) -> None:
        pass

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        pass

    def after_write_metric(self, epoch: int, step: int) -> None:
        pass

    def save_model(self, epoch: int, algo: Any) -> None:
        pass

    def watch_model(self, epoch: int, step: int) -> None:
        pass

    def close(self) -> None:
        pass


class NoopAdapterFactory:
    def create(self, algo: Any, experiment_name: Optional[str] = None, n_steps_per_epoch: Optional[int] = None) -> NoopAdapter:
        """``create(algo, experiment_name, n_steps_per_epoch)`` (d3rlpy 2.7+) or ``create(experiment_name)``."""
        split_create_arguments(algo, experiment_name)
        return NoopAdapter()

    def __repr__(self) -> str:
        return "NoopAdapterFactory()"
