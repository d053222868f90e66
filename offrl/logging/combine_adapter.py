"""Send everything to several logger adapters at once."""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from .base import LoggerAdapter, LoggerAdapterFactory, create_logger_adapter

__all__ = ["CombineAdapter", "CombineAdapterFactory"]


class CombineAdapter:
    def __init__(self, adapters: Sequence[LoggerAdapter]) -> None:
        self.adapters = list(adapters)

    def write_params(self, params: Dict[str, Any]) -> None:
        for a in self.adapters:
            a.write_params(params)

    def before_write_metric(self, epoch: int, step: int) -> None:
        for a in self.adapters:
            a.before_write_metric(epoch, step)

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        for a in self.adapters:
            a.write_metric(epoch, step, name, value)

    def after_write_metric(self, epoch: int, step: int) -> None:
        for a in self.adapters:
            a.after_write_metric(epoch, step)

    def save_model(self, epoch: int, algo: Any) -> None:
        for a in self.adapters:
            a.save_model(epoch, algo)

    def watch_model(self, epoch: int, step: int) -> None:
        for a in self.adapters:
            if callable(getattr(a, "watch_model", None)):
                a.watch_model(epoch, step)

    def close(self) -> None:
        for a in self.adapters:
            a.close()


class CombineAdapterFactory:
    def __init__(self, adapter_factories: Sequence[LoggerAdapterFactory]) -> None:
        self.adapter_factories = list(adapter_factories)

    def create(self, algo: Any, experiment_name: Optional[str] = None, n_steps_per_epoch: Optional[int] = None) -> CombineAdapter:
        """One adapter of each factory (each called with the signature it was written for)."""
        if experiment_name is None and isinstance(algo, str):  # the older create(experiment_name)
            algo, experiment_name = None, algo
        if not isinstance(experiment_name, str):
            raise TypeError("create() needs an experiment_name: create(algo, experiment_name, n_steps_per_epoch)")
        return CombineAdapter([create_logger_adapter(f, algo, experiment_name, n_steps_per_epoch) for f in self.adapter_factories])
