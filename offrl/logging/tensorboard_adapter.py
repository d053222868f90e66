"""Logging to TensorBoard event files (optional extra: ``pip install offrl[tensorboard]``).

Scalars are written under ``metrics/<name>`` with the run's total step
(gradient steps offline, environment steps online) on the x-axis, so curves
of runs with different epoch lengths line up; the epoch is logged as the
``epoch`` scalar at the same step. Parameters go in as a JSON text entry.
Models are not saved by this adapter: combine it with
:class:`~offrl.logging.FileAdapterFactory` through
:class:`~offrl.logging.CombineAdapterFactory` to keep snapshots.

Like the file adapter, it holds its run directory's lock until closed: a
second process writing into the same TensorBoard run is refused, instead of
drawing its curves over this run's.
"""

from __future__ import annotations

import json
import os
import weakref
from typing import Any, Dict, Optional

from .._atomic import make_directory
from .._optional import optional_dependency
from .base import split_create_arguments
from .lock import lock_log_directory

__all__ = ["TensorboardAdapter", "TensorboardAdapterFactory"]


def _summary_writer_class() -> Any:
    with optional_dependency("TensorboardAdapterFactory needs the tensorboard package: pip install 'offrl[tensorboard]'"):
        from torch.utils.tensorboard import SummaryWriter
    return SummaryWriter


class TensorboardAdapter:
    """Writes one TensorBoard run into ``logdir``: ``TensorboardAdapter(logdir)``,
    or d3rlpy 2.7+'s ``TensorboardAdapter(algo, root_dir, experiment_name)``
    (``root_dir/runs/experiment_name``)."""

    def __init__(self, *args: Any) -> None:
        if len(args) == 1:
            logdir = args[0]
        elif len(args) == 3:
            logdir = os.path.join(args[1], "runs", args[2])
        else:
            raise TypeError("TensorboardAdapter takes (logdir) or (algo, root_dir, experiment_name), "
                            f"got {len(args)} arguments")
        writer_class = _summary_writer_class()
        self.logdir = logdir
        make_directory(logdir)  # FileWriteError naming it when it cannot be made
        lock = lock_log_directory(logdir)  # LogDirectoryInUseError if another process logs here
        self._release = weakref.finalize(self, lock.release)
        try:
            self._writer = writer_class(log_dir=logdir)
        except BaseException:
            self._release()
            raise

    def write_params(self, params: Dict[str, Any]) -> None:
        text = json.dumps(params, indent=2, default=str)
        # four leading spaces: TensorBoard renders the text as code (markdown)
        self._writer.add_text("params", "\n".join("    " + line for line in text.splitlines()), 0)

    def before_write_metric(self, epoch: int, step: int) -> None:
        pass

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        self._writer.add_scalar(f"metrics/{name}", float(value), int(step))

    def after_write_metric(self, epoch: int, step: int) -> None:
        self._writer.add_scalar("epoch", int(epoch), int(step))
        self._writer.flush()

    def save_model(self, epoch: int, algo: Any) -> None:
        pass

    def watch_model(self, epoch: int, step: int) -> None:
        """d3rlpy 2.8's gradient-watch hook (not used by TensorBoard here)."""

    def close(self) -> None:
        try:
            self._writer.close()
        finally:
            self._release()


class TensorboardAdapterFactory:
    """One TensorBoard run per experiment, in ``root_dir/runs/<experiment_name>``
    (the layout d3rlpy uses, so ``tensorboard --logdir root_dir`` shows all)."""

    def __init__(self, root_dir: str = "tensorboard_logs") -> None:
        self.root_dir = root_dir
        _summary_writer_class()  # fail at construction, not when training starts

    def create(self, algo: Any, experiment_name: Optional[str] = None, n_steps_per_epoch: Optional[int] = None) -> TensorboardAdapter:
        """``create(algo, experiment_name, n_steps_per_epoch)`` (d3rlpy 2.7+) or ``create(experiment_name)``."""
        return TensorboardAdapter(os.path.join(self.root_dir, "runs", split_create_arguments(algo, experiment_name)))

    def __repr__(self) -> str:
        return f"TensorboardAdapterFactory(root_dir={self.root_dir!r})"
