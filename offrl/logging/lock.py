"""One training run per log directory.

Two runs logging into one directory (the same ``experiment_name`` with
``with_timestamp=False``, or the same ``offrl fit --output-dir``) would
interleave their rows in the metric CSVs and overwrite each other's
checkpoints and model snapshots. The file and TensorBoard adapters therefore
hold an exclusive lock on their directory while a run logs into it, and the
training loop holds it while it writes checkpoints there; a second process
that asks for the directory gets :class:`LogDirectoryInUseError`.

The lock is an advisory ``flock`` on the directory itself (no lock file is
left in it). The operating system releases it when the holder closes it or
ends, killed or not, so a crashed run never blocks the next one. Within one
process the lock is re-entrant: resuming a run, or a second adapter on the
same directory, in the process that holds it is allowed. Processes forked
from the holder do not keep the lock alive after it ends. Where locks are
not available (Windows, a file system without ``flock``) a warning says so
and the run goes on unlocked.
"""

from __future__ import annotations

import errno as errno_codes
import os
import threading
import warnings
from typing import Dict, Optional, Tuple

__all__ = ["LogDirectoryInUseError", "LogDirectoryLock", "lock_log_directory"]


class LogDirectoryInUseError(RuntimeError):
    """Another process is logging into this directory."""


class _Held:
    __slots__ = ("fd", "count", "pid")

    def __init__(self, fd: int, pid: int) -> None:
        self.fd = fd
        self.count = 1
        self.pid = pid


_mutex = threading.Lock()
_held: Dict[Tuple[int, int], _Held] = {}


def _forget_after_fork() -> None:
    # the child's copies of the descriptors would keep the parent's locks
    # alive after the parent ends (flock belongs to the open file, which the
    # child shares): close them; the parent still holds its locks
    global _mutex
    _mutex = threading.Lock()
    for held in _held.values():
        try:
            os.close(held.fd)
        except OSError:
            pass
    _held.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _holder(stat: os.stat_result) -> Optional[int]:
    """The id of the process holding a ``flock`` on the file ``stat``
    describes, read from ``/proc/locks`` (Linux); None where unknown."""
    device = f"{os.major(stat.st_dev):02x}:{os.minor(stat.st_dev):02x}:{stat.st_ino}"
    try:
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            for line in f:
                fields = line.split()
                if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device and "->" not in fields[:2]:
                    return int(fields[4])
    except (OSError, ValueError):
        pass
    return None


class LogDirectoryLock:
    """The lock of one log directory, held until :meth:`release` (or the
    end of a ``with`` block, or of the process)."""

    def __init__(self, logdir: str, key: Optional[Tuple[int, int]]) -> None:
        self.logdir = logdir
        self._key = key

    @property
    def held(self) -> bool:
        """Whether this object still holds its share of the lock."""
        return self._key is not None

    def release(self) -> None:
        """Give this share of the lock back (the directory is free when
        every share this process took is released). Idempotent."""
        key, self._key = self._key, None
        if key is None:
            return
        with _mutex:
            held = _held.get(key)
            if held is None or held.pid != os.getpid():
                return
            held.count -= 1
            if held.count == 0:
                del _held[key]
                os.close(held.fd)  # closing the descriptor releases the flock

    def __enter__(self) -> "LogDirectoryLock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"LogDirectoryLock({self.logdir!r}, held={self.held})"


def lock_log_directory(logdir: str) -> LogDirectoryLock:
    """Lock the existing directory ``logdir`` for the run about to log into
    it. Raises :class:`LogDirectoryInUseError` when another process holds
    it; in this process the lock is shared (re-entrant)."""
    path = os.fspath(logdir)
    try:
        import fcntl
    except ImportError:  # Windows
        warnings.warn(f"log directory {path} is not locked: this platform has no flock; make sure no other run "
                      "logs into it", RuntimeWarning, stacklevel=2)
        return LogDirectoryLock(path, None)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    with _mutex:
        fd = os.open(path, flags)
        stat = os.fstat(fd)
        key = (stat.st_dev, stat.st_ino)
        held = _held.get(key)
        if held is not None and held.pid == os.getpid():
            os.close(fd)
            held.count += 1
            return LogDirectoryLock(path, key)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno_codes.EAGAIN, errno_codes.EACCES, errno_codes.EWOULDBLOCK):
                pid = _holder(stat)
                who = f"process {pid}" if pid is not None else "another process"
                raise LogDirectoryInUseError(
                    f"log directory {path} is in use by another training run ({who} holds its lock): a second run "
                    "there would interleave its metric rows with that run's and overwrite its checkpoints and "
                    "models. Give this run another experiment_name (or with_timestamp=True), or wait for that "
                    "run to end (the lock is released when its process ends, also when it is killed)"
                ) from None
            warnings.warn(f"log directory {path} is not locked ({os.strerror(e.errno or 0)}): make sure no other "
                          "run logs into it", RuntimeWarning, stacklevel=2)
            return LogDirectoryLock(path, None)
        _held[key] = _Held(fd, os.getpid())
    return LogDirectoryLock(path, key)
