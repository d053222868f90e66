"""A logger that records nothing."""

from __future__ import annotations

from typing import Any, Dict

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

    def close(self) -> None:
        pass


class NoopAdapterFactory:
    def create(self, experiment_name: str) -> NoopAdapter:
        return NoopAdapter()

    def __repr__(self) -> str:
        return "NoopAdapterFactory()"
