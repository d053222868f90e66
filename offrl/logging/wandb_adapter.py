"""Logging to Weights & Biases (optional extra: ``pip install 'offrl[wandb]'``).

d3rlpy 2.8.1's ``WanDBAdapter`` / ``WanDBAdapterFactory`` (its names,
including the capital D, and its arguments): one W&B run per training run,
named after the experiment, the parameters in the run's config, the
metrics of each logging step in one history row at the run's total step
(gradient steps offline, environment steps online) with the epoch beside
them, and the networks' gradients watched every epoch as d3rlpy does.
Models are not uploaded (as in d3rlpy): combine with
:class:`~offrl.logging.FileAdapterFactory` through
:class:`~offrl.logging.CombineAdapterFactory` to keep snapshots.

Without a network, or to keep everything local, use W&B's offline mode:
``WanDBAdapterFactory(project="p", mode="offline", dir="wandb_runs")`` (or
``WANDB_MODE=offline`` in the environment); ``wandb sync`` uploads the runs
later. Keyword arguments beyond d3rlpy's ``project`` go to ``wandb.init``
unchanged (offrl's addition), and ``watch=False`` skips the gradient hooks.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from .._optional import optional_dependency
from .base import split_create_arguments

__all__ = ["WanDBAdapter", "WanDBAdapterFactory"]


def _wandb() -> Any:
    with optional_dependency("WanDBAdapterFactory needs the wandb package: pip install 'offrl[wandb]'"):
        import wandb
    return wandb


def _torch_modules(algo: Any) -> tuple:
    """The algorithm's networks (none when it is not built or not an offrl algorithm)."""
    if algo is None or not getattr(algo, "is_built", False):
        return ()
    modules = getattr(algo, "modules", None)
    return tuple(modules.values()) if modules is not None else ()


class WanDBAdapter:
    """One W&B run: ``WanDBAdapter(algo, experiment_name, n_steps_per_epoch, project=None)``
    (d3rlpy's arguments); ``watch`` and the keyword arguments of ``wandb.init``
    (``mode``, ``dir``, ``tags``, ``group``, ...) are offrl's additions."""

    def __init__(self, algo: Any, experiment_name: str, n_steps_per_epoch: Optional[int], project: Optional[str] = None,
                 *, watch: bool = True, **init_kwargs: Any) -> None:
        if not isinstance(experiment_name, str):
            raise TypeError(f"experiment_name must be a str, got {type(experiment_name).__name__}")
        wandb = _wandb()
        self.run = wandb.init(project=project, name=experiment_name, **init_kwargs)
        modules = _torch_modules(algo) if watch else ()
        if modules:
            self.run.watch(modules, log="gradients", log_freq=max(1, int(n_steps_per_epoch or 1000)))
        self._row: Dict[str, float] = {}
        self._closed = False

    def write_params(self, params: Dict[str, Any]) -> None:
        """The parameters go into the run's config."""
        self.run.config.update(params, allow_val_change=True)

    def before_write_metric(self, epoch: int, step: int) -> None:
        self._row = {}

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        self._row[name] = float(value)

    def after_write_metric(self, epoch: int, step: int) -> None:
        """One history row per logging step: the metrics and ``epoch`` at ``step``."""
        if self._row:
            self.run.log({**self._row, "epoch": int(epoch)}, step=int(step))
        self._row = {}

    def save_model(self, epoch: int, algo: Any) -> None:
        """Not uploaded (as d3rlpy): combine with FileAdapterFactory for snapshots."""

    def watch_model(self, epoch: int, step: int) -> None:
        """d3rlpy 2.8's hook; the gradients are watched from the start instead."""

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.run.finish()


class WanDBAdapterFactory:
    """One W&B run per experiment in ``project``: ``WanDBAdapterFactory(project=None)``
    (d3rlpy's argument); further keyword arguments go to ``wandb.init``, e.g.
    ``mode="offline"``, ``dir=...``; ``watch=False`` skips the gradient hooks."""

    def __init__(self, project: Optional[str] = None, *, watch: bool = True, **init_kwargs: Any) -> None:
        _wandb()  # fail at construction, not when training starts
        if project is not None and not isinstance(project, str):
            raise TypeError(f"project must be a str or None, got {type(project).__name__}")
        for name in ("project", "name"):
            if name in init_kwargs:
                raise TypeError(f"{name} is set by the factory ({'its project argument' if name == 'project' else 'the experiment name'}), "
                                "not through wandb.init's keyword arguments")
        self._project = project
        self._watch = bool(watch)
        self._init_kwargs = dict(init_kwargs)

    @property
    def project(self) -> Optional[str]:
        return self._project

    def create(self, algo: Any, experiment_name: Optional[str] = None, n_steps_per_epoch: Optional[int] = None) -> WanDBAdapter:
        """``create(algo, experiment_name, n_steps_per_epoch)`` (d3rlpy 2.7+) or ``create(experiment_name)``."""
        name = split_create_arguments(algo, experiment_name)
        return WanDBAdapter(None if isinstance(algo, str) else algo, name, n_steps_per_epoch, self._project,
                            watch=self._watch, **self._init_kwargs)

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self._init_kwargs.items())
        return f"WanDBAdapterFactory(project={self._project!r}{extra})"
