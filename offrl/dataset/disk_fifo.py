"""A FIFO replay buffer whose step columns are files on disk (online
training with a replay buffer larger than memory); see
:mod:`offrl.dataset.disk` for datasets that are read from disk."""

from __future__ import annotations

import os
import shutil
from typing import Any, Optional

import numpy as np

from .disk import check_free_space
from .signature import Signature
from .storage import FIFOBuffer

__all__ = ["DiskFIFOBuffer"]

_FIFO_MOVE_ROWS = 1 << 16  # rows moved per chunk when the ring is compacted


class DiskFIFOBuffer(FIFOBuffer):
    """A :class:`FIFOBuffer` whose step columns are fixed-size files on disk.

    For online training (``fit_online``, ``append``) with a replay buffer
    larger than memory: the newest ``limit`` transitions are kept, exactly
    as :class:`FIFOBuffer` keeps them, in memory-mapped column files of
    ``capacity`` rows (default ``2 * limit + 1024``: room for a final
    observation row per episode) created in ``directory`` when the
    signatures are known. When the tail reaches the end of the files, the
    live rows are moved back to the top (in chunks; no copy of the whole
    buffer in memory), so the files never grow. The episode table stays in
    memory. Unlike the in-memory buffer, episode views taken before a
    compaction may show moved data: copy what you keep. The files are
    scratch space, removed by :meth:`close` (or when the buffer is garbage
    collected); save the data with ``dump_disk_dataset``.
    """

    def __init__(self, limit: int, directory: Any, capacity: Optional[int] = None) -> None:
        super().__init__(limit)
        directory = os.path.abspath(os.fspath(directory))
        if not os.path.isdir(directory):
            raise ValueError(f"directory {directory} does not exist")
        if capacity is None:
            capacity = 2 * self.limit + 1024
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity <= self.limit:
            raise ValueError(f"capacity must be an int > limit={self.limit}, got {capacity!r}")
        self.directory = directory
        self.capacity = int(capacity)
        self._scratch: Optional[str] = None
        self._finalizer: Any = None

    def initialize(self, observation_signature: Signature, action_signature: Signature,
                   reward_signature: Signature) -> None:
        if self.is_initialized:
            super().initialize(observation_signature, action_signature, reward_signature)
            return
        import tempfile
        import weakref

        row_bytes = sum(
            int(np.prod(s, dtype=np.int64)) * np.dtype(d).itemsize
            for d, s in zip(observation_signature.dtype, observation_signature.shape)
        ) + int(np.prod(action_signature.shape[0], dtype=np.int64)) * np.dtype(action_signature.dtype[0]).itemsize
        row_bytes += int(np.prod(reward_signature.shape[0], dtype=np.int64)) * np.dtype(reward_signature.dtype[0]).itemsize
        check_free_space(self.directory, row_bytes * self.capacity, f"a disk FIFO buffer of {self.capacity} rows")
        super().initialize(observation_signature, action_signature, reward_signature)
        self._scratch = tempfile.mkdtemp(prefix=".offrl-fifo-", dir=self.directory)
        self._finalizer = weakref.finalize(self, shutil.rmtree, self._scratch, True)

        def column(name: str, like: np.ndarray) -> np.ndarray:
            return np.memmap(os.path.join(self._scratch, f"{name}.bin"), dtype=like.dtype, mode="w+",
                             shape=(self.capacity,) + like.shape[1:]).view(np.ndarray)

        self._observations = [column(f"observations_{k}", o) for k, o in enumerate(self._observations)]
        self._actions = column("actions", self._actions)
        self._rewards = column("rewards", self._rewards)

    def set_columns(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        raise TypeError("a DiskFIFOBuffer is filled by appending (append, append_episode), not by load")

    def _reserve_rows(self, n: int) -> None:
        capacity = self._actions.shape[0]
        if self._tail + n <= capacity:
            return
        head = self.head
        live = self._tail - head
        if live + n > capacity:
            raise ValueError(
                f"the disk FIFO buffer needs {live + n} rows ({live} live + {n} new) but its files hold "
                f"capacity={capacity}: create it with a larger capacity"
            )
        columns = [*self._observations, self._actions, self._rewards]
        if self._behaviour is not None:
            columns.append(self._behaviour)
        for a in range(0, live, _FIFO_MOVE_ROWS):  # forward, destination below source: safe in place
            b = min(a + _FIFO_MOVE_ROWS, live)
            for c in columns:
                c[a:b] = c[head + a : head + b]
        self._ep_start[self._ep_head : self._ep_tail] -= head
        self._ep_end[self._ep_head : self._ep_tail] -= head
        self._tail = live
        self._changed()

    def close(self) -> None:
        """Remove the scratch files; the buffer is unusable afterwards."""
        self._observations = None
        self._actions = self._rewards = self._behaviour = None
        if self._finalizer is not None:
            self._finalizer()

    def __repr__(self) -> str:
        return (
            f"DiskFIFOBuffer(limit={self.limit}, capacity={self.capacity}, directory={self.directory!r}, "
            f"episodes={self.episode_count}, transitions={self.transition_count})"
        )
