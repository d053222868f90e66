"""d3rlpy's ``d3rlpy.logging.logger`` path: :class:`D3RLPyLogger`, the
object that sits between a training loop and a logger adapter (it averages
the metrics added during an epoch and writes them on ``commit``), and the
protocols d3rlpy's adapters are typed against.

offrl's own training loops talk to the adapter directly; this class is here
for code written against d3rlpy 2.8.1 that builds a logger itself (custom
loops, d3rlpy's ``save_config(algo, logger)``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from contextlib import contextmanager
from datetime import datetime
from typing import Any, Dict, Iterator, List, Optional, Protocol, Tuple

from torch import nn

from .base import LoggerAdapter, LoggerAdapterFactory, create_logger_adapter

__all__ = ["AlgProtocol", "D3RLPyLogger", "ImplProtocol", "LoggerAdapter", "LoggerAdapterFactory",
           "ModuleProtocol", "SaveProtocol"]


class SaveProtocol(Protocol):
    """Something with ``save(fname)`` (what ``save_model`` receives)."""

    def save(self, fname: str) -> None: ...


class ModuleProtocol(Protocol):
    """An implementation's networks, as a gradient watcher sees them."""

    def get_torch_modules(self) -> Dict[str, nn.Module]: ...

    def get_gradients(self) -> Iterator[Tuple[str, Any]]: ...


class ImplProtocol(Protocol):
    @property
    def modules(self) -> ModuleProtocol: ...


class AlgProtocol(Protocol):
    """What a logger adapter factory receives as ``algo``."""

    @property
    def impl(self) -> Optional[ImplProtocol]: ...


class D3RLPyLogger:
    """A run's logger: creates the adapter (``experiment_name`` gets a
    ``_YYYYmmddHHMMSS`` suffix unless ``with_timestamp=False``), writes
    parameters at once, averages each metric added during an epoch and
    writes the means on :meth:`commit`."""

    def __init__(self, algo: Any, adapter_factory: LoggerAdapterFactory, experiment_name: str,
                 n_steps_per_epoch: int, with_timestamp: bool = True):
        if with_timestamp:
            experiment_name = f"{experiment_name}_{datetime.now().strftime('%Y%m%d%H%M%S')}"
        self._experiment_name = experiment_name
        self._algo = algo
        self._adapter = create_logger_adapter(adapter_factory, algo, experiment_name, n_steps_per_epoch)
        self._metrics_buffer: Dict[str, List[float]] = defaultdict(list)

    @property
    def adapter(self) -> LoggerAdapter:
        return self._adapter

    @property
    def experiment_name(self) -> str:
        return self._experiment_name

    def add_params(self, params: Dict[str, Any]) -> None:
        self._adapter.write_params(params)

    def add_metric(self, name: str, value: float) -> None:
        self._metrics_buffer[name].append(float(value))

    def commit(self, epoch: int, step: int) -> Dict[str, float]:
        """Write the mean of each metric added since the last commit; returns them."""
        self._adapter.before_write_metric(epoch, step)
        metrics = {name: sum(values) / len(values) for name, values in self._metrics_buffer.items()}
        for name, value in metrics.items():
            self._adapter.write_metric(epoch, step, name, value)
        self._adapter.after_write_metric(epoch, step)
        watch = getattr(self._adapter, "watch_model", None)
        if callable(watch):
            watch(epoch, step)
        self._metrics_buffer.clear()
        return metrics

    def save_model(self, epoch: int, algo: SaveProtocol) -> None:
        self._adapter.save_model(epoch, algo)

    def close(self) -> None:
        self._adapter.close()

    @contextmanager
    def measure_time(self, name: str) -> Iterator[None]:
        """Add the seconds the block took as metric ``time_<name>``."""
        start = time.time()
        try:
            yield
        finally:
            self.add_metric("time_" + name, time.time() - start)
