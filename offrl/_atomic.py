"""Atomic file writes that leave no clutter behind.

A file is written to a uniquely named temporary in the target's directory,
flushed to disk and renamed over the target, so a reader sees either the old
file or the new one, never a half-written one, and concurrent writers of the
same path never collide (each has its own temporary; the last rename wins).

Temporaries are named ``.offrl-<pid>-<token>.tmp<ext>``: the writer's process
id lets :func:`remove_stale_temporaries` delete the orphans of a writer that
was killed mid-write (SIGKILL, power loss) without touching the temporaries of
a writer that is still running; ``<ext>`` is the target's extension so tools
that pick a format from the file name (matplotlib, ONNX) still work.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import time
from typing import Any, Callable, List, Union

__all__ = ["PREFIX", "temporary_path", "atomic_write", "atomic_write_text", "atomic_write_json", "remove_stale_temporaries"]

PathLike = Union[str, "os.PathLike[str]"]

#: every temporary written here starts with this prefix
PREFIX = ".offrl-"
_TEMPORARY = re.compile(r"^\.offrl-(\d+)-[0-9a-f]{12}\.tmp(\.[A-Za-z0-9_]{1,16})*$")


def _extension(path: str) -> str:
    ext = os.path.splitext(os.path.basename(path))[1]
    return ext if re.fullmatch(r"\.[A-Za-z0-9_]{1,16}", ext) else ""


def temporary_path(path: PathLike) -> str:
    """A new, empty, uniquely named temporary file next to ``path``
    (created exclusively, so no other writer can be handed the same name)."""
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    ext = _extension(target)
    for _ in range(100):
        name = os.path.join(directory, f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}.tmp{ext}")
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        os.close(fd)
        return name
    raise FileExistsError(f"cannot create a temporary file next to {target}")  # pragma: no cover


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # not possible on every platform (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: PathLike, write_fn: Callable[[str], Any]) -> None:
    """Write ``path`` atomically: ``write_fn(tmp)`` writes the whole content
    to the temporary file name ``tmp`` (it may reopen or replace that file);
    then it is fsynced and renamed over ``path``. On any error (including
    KeyboardInterrupt) the temporary is removed and the error re-raised;
    ``path`` is then untouched.

    Raises ``IsADirectoryError`` without writing anything when ``path`` is a
    directory, and ``FileNotFoundError`` when its directory does not exist."""
    target = os.path.abspath(os.fspath(path))
    if os.path.isdir(target):
        raise IsADirectoryError(f"{os.fspath(path)} is a directory, expected a file path")
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        raise FileNotFoundError(f"{os.fspath(path)}: directory {directory} does not exist")
    tmp = temporary_path(target)
    try:
        write_fn(tmp)
        _fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    _fsync_directory(directory)


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8") -> None:
    """Write the string ``text`` to ``path`` atomically."""

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding=encoding) as f:
            f.write(text)

    atomic_write(path, write)


def atomic_write_json(path: PathLike, data: Any, indent: int = 2) -> None:
    """Write ``data`` as JSON to ``path`` atomically. The JSON text is made
    before anything is written, so unserialisable data leaves no file."""
    atomic_write_text(path, json.dumps(data, indent=indent) + "\n")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name != "posix":  # no cheap, safe liveness check: keep the file
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists under another user, or cannot tell: keep
    return True


def remove_stale_temporaries(directory: PathLike, min_age_s: float = 0.0) -> List[str]:
    """Remove the temporaries left in ``directory`` by writers that died
    mid-write: files named by :func:`temporary_path` whose process id no
    longer exists on this machine and which are at least ``min_age_s``
    seconds old. Temporaries of live processes and every other file are
    kept. Returns the removed paths.

    Process ids are per machine (and per PID namespace): on a directory
    shared between machines or containers, give ``min_age_s`` larger than
    any save takes so another host's writer in progress is not touched."""
    root = os.fspath(directory)
    removed: List[str] = []
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return removed
    now = time.time()
    for name in names:
        match = _TEMPORARY.match(name)
        if match is None:
            continue
        path = os.path.join(root, name)
        try:
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            if now - os.path.getmtime(path) < min_age_s:
                continue
        except OSError:
            continue
        if _pid_alive(int(match.group(1))):
            continue
        try:
            os.remove(path)
        except FileNotFoundError:
            continue
        removed.append(path)
    return removed
