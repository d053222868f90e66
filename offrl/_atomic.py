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

A write that fails raises :class:`FileWriteError`, an ``OSError`` that names
the target (never the temporary), says why in the operating system's words
(``File too large``, ``No space left on device``, ...) and what was found out
about the cause (the process's file-size limit, the component of the path
that is a file, the longest name the file system takes), chained from the
error the writer raised. The target then holds its previous content (or does
not exist, if it did not) and the temporary is gone.
"""

from __future__ import annotations

import errno as errno_codes
import json
import os
import re
import secrets
import time
from typing import Any, Callable, Dict, List, Optional, Tuple, Type, Union

__all__ = ["PREFIX", "FileWriteError", "temporary_path", "check_target", "atomic_write", "atomic_write_text",
           "atomic_write_json", "append_text", "make_directory", "remove_stale_temporaries"]

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


class FileWriteError(OSError):
    """Writing a file failed. ``filename`` is the target the caller asked
    for, ``errno`` / ``strerror`` the operating system's reason; the message
    says both, what was found out about the cause, and that the target kept
    its previous content. The error that the writer raised is chained as
    ``__cause__``.

    Raised as a subclass that also derives from the built-in ``OSError``
    subclass of its errno (``FileNotFoundError``, ``NotADirectoryError``,
    ``IsADirectoryError``, ``PermissionError``), so code that catches those
    keeps working."""

    def __init__(self, *args: Any, message: Optional[str] = None) -> None:
        super().__init__(*args)
        self.message = message

    @property
    def target(self) -> str:
        """The path that could not be written."""
        return self.filename

    def __str__(self) -> str:
        return self.message if self.message else super().__str__()


class _FileNotFoundWriteError(FileWriteError, FileNotFoundError):
    pass


class _NotADirectoryWriteError(FileWriteError, NotADirectoryError):
    pass


class _IsADirectoryWriteError(FileWriteError, IsADirectoryError):
    pass


class _PermissionWriteError(FileWriteError, PermissionError):
    pass


_ERROR_CLASSES: Dict[int, Type[FileWriteError]] = {
    errno_codes.ENOENT: _FileNotFoundWriteError,
    errno_codes.ENOTDIR: _NotADirectoryWriteError,
    errno_codes.EISDIR: _IsADirectoryWriteError,
    errno_codes.EACCES: _PermissionWriteError,
    errno_codes.EPERM: _PermissionWriteError,
}


def _size_limit() -> Optional[int]:
    """This process's file-size limit in bytes (``ulimit -f``), or None."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _name_max(directory: str) -> Optional[int]:
    try:
        return int(os.pathconf(directory, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return None


def _reason(code: int, target: str) -> str:
    """What is known about why ``code`` stopped writing ``target``."""
    directory = os.path.dirname(target)
    if code == errno_codes.EFBIG:
        limit = _size_limit()
        if limit is not None:
            return f" (this process may write files of at most {limit} bytes: its file-size limit, ulimit -f)"
        return " (larger than the file system allows)"
    if code == errno_codes.ENOSPC:
        return f" (the file system holding {directory} is full)"
    if code == errno_codes.EROFS:
        return f" ({directory} is mounted read-only)"
    if code in (errno_codes.EACCES, errno_codes.EPERM):
        return f" (no permission to create or replace files in {directory})"
    if code == errno_codes.ENAMETOOLONG:
        name_max = _name_max(directory)
        size = len(os.fsencode(os.path.basename(target)))
        if name_max is not None and size > name_max:
            return f" (the name is {size} bytes, the file system allows {name_max})"
        return f" (the path is {len(os.fsencode(target))} bytes)"
    if code == errno_codes.ENOENT and not os.path.isdir(directory):
        return f" (the directory {directory} does not exist)"
    if code == errno_codes.EISDIR:
        return " (it is a directory, expected a file path)"
    return ""


def _write_error(target: str, code: int, existed: bool, reason: Optional[str] = None,
                 shown: Optional[str] = None, state: Optional[str] = None, action: str = "write") -> FileWriteError:
    """A :class:`FileWriteError` for ``target`` (shown as ``shown``) failing
    with errno ``code``; ``existed`` says whether the target kept old content
    (``state`` says what was left otherwise)."""
    strerror = os.strerror(code)
    if reason is None:
        reason = _reason(code, target)
    name = shown if shown is not None else target
    if state is None:
        state = f"{name} keeps its previous content" if existed else "no file was written"
    message = f"cannot {action} {name}: {strerror}{reason}; {state}"
    return _ERROR_CLASSES.get(code, FileWriteError)(code, strerror, target, message=message)


def _errno_in_chain(error: BaseException, own: Tuple[str, ...]) -> Optional[int]:
    """The errno of the first ``OSError`` that carries one in ``error`` or
    the errors it was raised from or during (h5py and torch wrap the
    operating system's error in their own); None when there is none, or
    when that error is about a file other than the paths in ``own`` (then
    it is not this write that failed)."""
    seen = set()
    stack = [error]
    while stack:
        current = stack.pop(0)
        if current is None or id(current) in seen or len(seen) > 32:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and isinstance(current.errno, int) and current.errno > 0:
            for name in (current.filename, current.filename2):
                if name is not None and not isinstance(name, int) and os.path.abspath(os.fsdecode(name)) not in own:
                    return None
            return current.errno
        stack.extend([current.__cause__, current.__context__])
    return None


def _probe(tmp: str, directory: str) -> Optional[int]:
    """Why writing ``tmp`` fails, asked of the operating system when the
    writer's error does not say (torch reports ``inline_container.cc``
    text): the file-size limit reached, a one-byte append refused, or a
    full file system. None when writing works now."""
    try:
        size = os.path.getsize(tmp)
    except OSError:
        size = None
    limit = _size_limit()
    if limit is not None and size is not None and size + 1 > limit:
        return errno_codes.EFBIG  # (never probed by writing: that would raise SIGXFSZ)
    if size is not None:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_APPEND)
        except OSError as e:
            return e.errno
        try:
            os.write(fd, b"\0")
            os.fsync(fd)
        except OSError as e:
            return e.errno
        finally:
            os.close(fd)
    try:
        stats = os.statvfs(directory)
    except (OSError, AttributeError):
        return None
    if stats.f_blocks > 0 and (stats.f_bfree == 0 or (stats.f_bavail == 0 and os.geteuid() != 0)):
        return errno_codes.ENOSPC
    return None


def _check_target(target: str, shown: str) -> bool:
    """Refuse, before anything is written, a target that cannot be written:
    a directory, a missing directory or one with a file on its path, a name
    longer than the file system allows. Returns whether the target exists."""
    if "\x00" in target:
        raise ValueError(f"cannot write {shown!r}: a file name cannot hold a NUL character")
    if os.path.isdir(target):
        raise _write_error(target, errno_codes.EISDIR, True, shown=shown)
    directory = os.path.dirname(target)
    if not os.path.isdir(directory):
        component = directory
        while True:
            if os.path.lexists(component) and not os.path.isdir(component):
                raise _write_error(target, errno_codes.ENOTDIR, False,
                                   f" ({component} is a file, not a directory)", shown)
            parent = os.path.dirname(component)
            if parent == component or os.path.isdir(parent):
                break
            component = parent
        raise _write_error(target, errno_codes.ENOENT, False, shown=shown)
    name_max = _name_max(directory)
    if name_max is not None and len(os.fsencode(os.path.basename(target))) > name_max:
        raise _write_error(target, errno_codes.ENAMETOOLONG, False, shown=shown)
    return os.path.lexists(target)


def check_target(path: PathLike) -> None:
    """Raise the :class:`FileWriteError` that :func:`atomic_write` would
    raise before writing ``path`` (a directory, a missing directory, a file
    on the directory's path, a name too long), for a writer that has costly
    work to do before it writes."""
    given = os.fspath(path)
    _check_target(os.path.abspath(given), given)


def make_directory(path: PathLike) -> None:
    """``os.makedirs(path, exist_ok=True)`` whose failure is a
    :class:`FileWriteError` saying which directory could not be made and
    why (a file in the way, no permission, a read-only file system)."""
    given = os.fspath(path)
    target = os.path.abspath(given)
    if os.path.isdir(target):
        return
    if os.path.lexists(target):
        raise _write_error(target, errno_codes.ENOTDIR, False, " (it is a file, expected a directory)", given,
                           "nothing was changed", "create the directory")
    try:
        os.makedirs(target, exist_ok=True)
    except OSError as e:
        code = e.errno if isinstance(e.errno, int) and e.errno > 0 else errno_codes.EIO
        component = os.path.dirname(target)
        while component != os.path.dirname(component) and not os.path.lexists(component):
            component = os.path.dirname(component)
        reason = None
        if code in (errno_codes.ENOTDIR, errno_codes.EEXIST) and not os.path.isdir(component):
            code, reason = errno_codes.ENOTDIR, f" ({component} is a file, not a directory)"
        elif code in (errno_codes.EACCES, errno_codes.EPERM):
            reason = f" (no permission to create directories in {component})"
        elif code == errno_codes.EROFS:
            reason = f" ({component} is mounted read-only)"
        raise _write_error(target, code, False, reason, given, "no directory was made", "create the directory") from e


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


def _resolve(path: PathLike, follow_symlinks: bool) -> Tuple[str, str]:
    """``(absolute target, the name errors show)``: with ``follow_symlinks``
    a symbolic link is written through (the file it points to is replaced,
    the link stays)."""
    given = os.fspath(path)
    target = os.path.abspath(given)
    if follow_symlinks and os.path.islink(target):
        real = os.path.realpath(target)
        return real, f"{given} (a link to {real})"
    return target, given


def atomic_write(path: PathLike, write_fn: Callable[[str], Any], follow_symlinks: bool = False) -> None:
    """Write ``path`` atomically: ``write_fn(tmp)`` writes the whole content
    to the temporary file name ``tmp`` (it may reopen or replace that file);
    then it is fsynced and renamed over ``path``. On any error (including
    KeyboardInterrupt) the temporary is removed and ``path`` is untouched.

    A failure to write (the writer's own ``OSError``, or a writer error
    whose cause the operating system confirms: the file-size limit reached,
    a full disk) raises :class:`FileWriteError` naming ``path``; any other
    error of ``write_fn`` is re-raised as it is. A directory ``path``
    (``IsADirectoryError``), a missing directory (``FileNotFoundError``), a
    file where a directory should be (``NotADirectoryError``) and a name
    too long for the file system are refused before anything is written.

    ``follow_symlinks=True`` writes through a symbolic link ``path`` (the
    file it points to is replaced, the link stays); by default the link
    itself is replaced by the new file."""
    target, shown = _resolve(path, follow_symlinks)
    existed = _check_target(target, shown)
    directory = os.path.dirname(target)
    try:
        tmp = temporary_path(target)
    except OSError as e:
        code = e.errno if isinstance(e.errno, int) and e.errno > 0 else errno_codes.EIO
        raise _write_error(target, code, existed, shown=shown) from e
    try:
        write_fn(tmp)
        _fsync_file(tmp)
        os.replace(tmp, target)
    except BaseException as error:
        code = None
        if isinstance(error, (OSError, RuntimeError)):  # torch and h5py report I/O errors as RuntimeError
            code = _errno_in_chain(error, (tmp, target))
            if code is None:
                code = _probe(tmp, directory)
        try:
            os.remove(tmp)
        except OSError:
            pass
        if code is None:
            raise
        raise _write_error(target, code, existed, shown=shown) from error
    _fsync_directory(directory)


def atomic_write_text(path: PathLike, text: str, encoding: str = "utf-8", follow_symlinks: bool = False) -> None:
    """Write the string ``text`` to ``path`` atomically."""
    data = text.encode(encoding)

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(path, write, follow_symlinks)


def atomic_write_json(path: PathLike, data: Any, indent: int = 2, follow_symlinks: bool = False) -> None:
    """Write ``data`` as JSON to ``path`` atomically. The JSON text is made
    before anything is written, so unserialisable data leaves no file."""
    atomic_write_text(path, json.dumps(data, indent=indent) + "\n", follow_symlinks=follow_symlinks)


def append_text(path: PathLike, text: str, encoding: str = "utf-8") -> None:
    """Append ``text`` to ``path`` (created if missing; a symbolic link is
    written through), all or nothing: when the write fails part way (the
    file-size limit, a full disk) the file is cut back to its previous
    length, or removed if this call created it, and :class:`FileWriteError`
    names it. For small records such as metric rows; a crash (not an error)
    during the append may still leave part of ``text``."""
    data = memoryview(text.encode(encoding))
    given = os.fspath(path)
    target = os.path.abspath(given)
    existed = _check_target(os.path.realpath(target) if os.path.islink(target) else target, given)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as e:
        raise _write_error(target, e.errno or errno_codes.EIO, existed, shown=given) from e
    try:
        size = os.fstat(fd).st_size
        try:
            while data:
                data = data[os.write(fd, data):]
        except OSError as e:
            try:
                os.ftruncate(fd, size)
                if not existed and size == 0:
                    os.remove(target)
            except OSError:
                pass
            raise _write_error(target, e.errno or errno_codes.EIO, existed, shown=given) from e
    finally:
        os.close(fd)


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
