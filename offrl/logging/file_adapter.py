"""Logging to files: ``params.json``, one CSV per metric, model snapshots.

An adapter holds its directory's lock (:mod:`offrl.logging.lock`) from its
creation to :meth:`FileAdapter.close`, so a second run logging into the same
directory from another process is refused instead of mixing its rows into
this run's files. Files that are symbolic links (a metric CSV linked into a
dashboard's folder, say) are written through: the link stays.
"""

from __future__ import annotations

import os
import weakref
from typing import Any, Dict, Optional

from .._atomic import append_text, atomic_write_json, make_directory, remove_stale_temporaries
from .base import LoggerAdapter, split_create_arguments
from .lock import lock_log_directory

__all__ = ["FileAdapter", "FileAdapterFactory"]

#: a temporary of a dead writer older than this is an orphan (the margin
#: protects a writer on another host sharing the directory, whose pid
#: means nothing here)
STALE_AFTER_S = 60.0


class FileAdapter:
    """Writes into ``logdir``: ``params.json``, ``<metric>.csv`` with rows
    ``epoch,step,value``, and ``model_<step>.d3`` snapshots.

    ``FileAdapter(logdir)``, or d3rlpy 2.7+'s ``FileAdapter(algo, logdir)``."""

    def __init__(self, algo_or_logdir: Any, logdir: Optional[str] = None) -> None:
        if logdir is None:
            logdir = algo_or_logdir
        if not isinstance(logdir, (str, os.PathLike)):
            raise TypeError(f"logdir must be a path, got {type(logdir).__name__}")
        logdir = os.fspath(logdir)
        self.logdir = logdir
        make_directory(logdir)  # FileWriteError naming it when it cannot be made
        self._lock = lock_log_directory(logdir)  # LogDirectoryInUseError if another process logs here
        self._release = weakref.finalize(self, self._lock.release)  # also when never closed
        # half-written files of an earlier run that was killed mid-save
        remove_stale_temporaries(logdir, min_age_s=STALE_AFTER_S)

    def write_params(self, params: Dict[str, Any]) -> None:
        """Write ``params.json`` atomically under a unique temporary name, so
        a reader never sees half a file."""
        atomic_write_json(os.path.join(self.logdir, "params.json"), params, follow_symlinks=True)

    def before_write_metric(self, epoch: int, step: int) -> None:
        pass

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        """Append the row ``epoch,step,value`` to ``<name>.csv`` (path
        separators in ``name`` become ``_``); a row is written whole or not
        at all (:class:`~offrl._atomic.FileWriteError` names the file)."""
        if not isinstance(name, str):
            raise TypeError(f"metric name must be a str, got {type(name).__name__}")
        if "\x00" in name:
            raise ValueError(f"metric name {name!r} contains a NUL character, which no file name can hold")
        safe = name.replace(os.sep, "_").replace("/", "_")
        append_text(os.path.join(self.logdir, f"{safe}.csv"), f"{int(epoch)},{int(step)},{float(value)!r}\n")

    def after_write_metric(self, epoch: int, step: int) -> None:
        pass

    def save_model(self, epoch: int, algo: Any) -> None:
        algo.save(os.path.join(self.logdir, f"model_{algo.grad_step}.d3"))

    def watch_model(self, epoch: int, step: int) -> None:
        """d3rlpy 2.8's gradient-watch hook (nothing to watch in files)."""

    def close(self) -> None:
        """Release the directory's lock (the files stay)."""
        self._release()


class FileAdapterFactory:
    """One directory per experiment under ``root_dir``."""

    def __init__(self, root_dir: str = "offrl_logs") -> None:
        self.root_dir = root_dir

    def create(self, algo: Any, experiment_name: Optional[str] = None, n_steps_per_epoch: Optional[int] = None) -> LoggerAdapter:
        """The adapter of one run: ``create(algo, experiment_name,
        n_steps_per_epoch)`` (d3rlpy 2.7+) or ``create(experiment_name)``."""
        return FileAdapter(os.path.join(self.root_dir, split_create_arguments(algo, experiment_name)))

    def __repr__(self) -> str:
        return f"FileAdapterFactory(root_dir={self.root_dir!r})"
