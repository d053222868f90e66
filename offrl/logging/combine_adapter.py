"""Send everything to several logger adapters at once."""

from __future__ import annotations

from typing import Any, Dict, Sequence

from .base import LoggerAdapter, LoggerAdapterFactory

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

    def close(self) -> None:
        for a in self.adapters:
            a.close()


class CombineAdapterFactory:
    def __init__(self, adapter_factories: Sequence[LoggerAdapterFactory]) -> None:
        self.adapter_factories = list(adapter_factories)

    def create(self, experiment_name: str) -> CombineAdapter:
        return CombineAdapter([f.create(experiment_name) for f in self.adapter_factories])
