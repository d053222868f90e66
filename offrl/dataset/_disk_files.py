"""Reading rows of a disk dataset's files (:mod:`offrl.dataset.disk`):
the files opened only when they are regular files of the dataset's
directory (:func:`open_member`), positional reads of the column or record
files, kept so that the gathers of one batch that follow need no read,
the rules every row read is checked against (:class:`ValueRule`), and the
column arrays whose reads go through all that (:class:`DiskColumn`).

Why reads and not the memory maps: a map of a file that another process
truncates raises SIGBUS (the process dies) on the first access past the
new end, where a positional read returns fewer bytes, which is reported
as :class:`DiskDatasetChangedError`. So every read of a column is a
positional read except the gathers of ``read_mode="mmap"``, which check
the file's size (one ``fstat``) first."""

from __future__ import annotations

import errno
import math
import os
import stat
import threading
import weakref
from itertools import repeat
from typing import Any, Optional, Union

import numpy as np

from .. import _safety
from ._split_reads import read_rows

__all__ = [
    "ColumnFile", "DiskColumn", "DiskDatasetChangedError", "RecordField", "RecordFile", "ValueRule",
    "open_member", "read_exact", "record_dtype",
]


class DiskDatasetChangedError(RuntimeError):
    """A disk dataset's files changed after it was opened."""


# ------------------------------------------------------------ opening files
#: open a member file read-only, never through a symbolic link, without
#: blocking on a named pipe (refused after the open), not inherited
_MEMBER_FLAGS = (
    os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0) | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NONBLOCK", 0)
)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_member(directory_fd: Optional[int], directory: str, name: str) -> tuple[int, os.stat_result]:
    """Open the file ``name`` of the dataset directory ``directory``
    (``directory_fd``: that directory, opened, or None where the platform
    cannot open relative to one) for reading: ``(fd, stat)``.

    Refused with a ``ValueError`` naming the file unless it is a regular
    file of that directory with no other name: a symbolic link (to
    anything) or a hard link would make a file outside the directory part
    of the dataset. The checks are made on the opened file (no window
    between checking and opening). ``FileNotFoundError`` when there is no
    such file (or it was removed while being opened)."""
    where = os.path.join(directory, name)
    if directory_fd is None:  # no openat: refuse a link by its own entry first
        if stat.S_ISLNK(os.lstat(where).st_mode):
            raise ValueError(f"{where} is a symbolic link; a disk dataset's files must be regular files inside "
                             "its directory (offrl does not follow links out of it)")
    try:
        fd = os.open(name, _MEMBER_FLAGS, dir_fd=directory_fd) if directory_fd is not None else (
            os.open(where, _MEMBER_FLAGS))
    except OSError as e:
        if e.errno in (errno.ELOOP, getattr(errno, "EMLINK", -1), getattr(errno, "EFTYPE", -1)):
            raise ValueError(f"{where} is a symbolic link; a disk dataset's files must be regular files inside "
                             "its directory (offrl does not follow links out of it)") from None
        if isinstance(e, FileNotFoundError):
            raise
        raise ValueError(f"{where}: cannot open this file of the disk dataset ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{where} is {_kind(st.st_mode)}; a disk dataset's files must be regular files")
        if st.st_nlink == 0:
            raise FileNotFoundError(errno.ENOENT, "removed while being opened", where)
        if st.st_nlink != 1:
            raise ValueError(
                f"{where} has {st.st_nlink} hard links; a disk dataset's files must have no other name (a hard "
                "link can make a file outside its directory part of it): copy the files to make them its own"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd, st


_SEEK_LOCK = threading.Lock()


def _pread(fd: int, size: int, offset: int) -> bytes:
    """``os.pread``, or a seek and a read under a lock where it is missing."""
    if hasattr(os, "pread"):
        return os.pread(fd, size, offset)
    with _SEEK_LOCK:  # pragma: no cover - platforms without pread
        os.lseek(fd, offset, os.SEEK_SET)
        return os.read(fd, size)


#: bytes one positional read of a range may ask for (a whole column is read in pieces)
_RANGE_CHUNK = 8 << 20


def read_exact(fd: int, nbytes: int, offset: int, where: str, out: Optional[np.ndarray] = None) -> np.ndarray:
    """The ``nbytes`` bytes at ``offset`` of ``fd`` as ``(nbytes,)`` uint8
    (into ``out``, a contiguous uint8 array of that size, when given), in
    reads of at most 8 MB. Fewer bytes in the file raise
    :class:`DiskDatasetChangedError` naming ``where``."""
    out = np.empty(nbytes, np.uint8) if out is None else out.reshape(nbytes)
    done = 0
    while done < nbytes:
        size = min(nbytes - done, _RANGE_CHUNK)
        if hasattr(os, "preadv"):  # straight into the array: no bytes object to copy from
            got = os.preadv(fd, [memoryview(out[done : done + size])], offset + done)
        else:
            data = _pread(fd, size, offset + done)
            got = len(data)
            out[done : done + got] = np.frombuffer(data, np.uint8)
        if not got:
            raise DiskDatasetChangedError(
                f"{where}: read {done} of {nbytes} bytes at offset {offset}: the file is shorter than when the "
                "dataset was opened (another process truncated it); reopen the dataset"
            )
        done += got
    return out


# ------------------------------------------------------------ value rules
class ValueRule:
    """What the values of one column of a disk dataset must be, checked on
    every row read from it (a file from elsewhere can hold anything):

    - ``"finite"``: no NaN or infinity (float observations, continuous
      actions, rewards);
    - ``"index"``: an action index in ``[0, limit)`` (discrete actions);
    - ``"probability"`` / ``"density"``: in (0, 1] / > 0, or NaN where no
      probability was logged (behaviour probabilities).

    A violation raises ``ValueError`` naming the file, the field and the
    row (``.../records.bin: rewards[512] is nan``)."""

    __slots__ = ("where", "field", "kind", "limit", "note")

    #: what a violation in a disk dataset's file means
    FILE_NOTE = "offrl refuses it: the dataset was not written by offrl, or was modified since"

    def __init__(self, where: str, field: str, kind: str, limit: int = 0, note: str = FILE_NOTE) -> None:
        if kind not in ("finite", "index", "probability", "density"):
            raise ValueError(f"unknown value rule {kind!r}")
        self.where, self.field, self.kind, self.limit, self.note = where, field, kind, int(limit), note

    def check(self, values: np.ndarray, rows: Union[int, np.ndarray]) -> None:
        """Check ``values`` (rows on the first axis); ``rows``: the file
        row of ``values[0]`` (a range) or of each of them (1-D, or a
        function returning them, called only for the message)."""
        kind = self.kind
        if kind == "finite":
            if np.isfinite(values).all():
                return
            bad = ~np.isfinite(values)
        elif kind == "index":
            if not values.size or int(values.view(np.uint64).max()) < self.limit:  # a negative index is huge
                return
            bad = values.view(np.uint64) >= self.limit
        else:
            with np.errstate(invalid="ignore"):
                bad = (values <= 0) | np.isinf(values)  # NaN: not logged, allowed
                if kind == "probability":
                    bad |= values > 1
            if not bad.any():
                return
        flat = bad.reshape(bad.shape[0], -1).any(axis=1) if bad.ndim > 1 else bad
        i = int(np.argmax(flat))
        if callable(rows):
            rows = rows()
        row = rows + i if isinstance(rows, (int, np.integer)) else int(np.asarray(rows).reshape(-1)[i])
        value = np.asarray(values[i]).reshape(-1)
        value = value[np.argmax(bad[i].reshape(-1))] if bad.ndim > 1 else values[i]
        raise ValueError(f"{self.where}: {self.field}[{row}] is {self._show(value)}, {self._expected()} "
                         f"({self.note})")

    def _expected(self) -> str:
        return {
            "finite": "expected a finite number",
            "index": f"expected an action index in [0, {self.limit})",
            "probability": "expected a probability in (0, 1] (or NaN where none was logged)",
            "density": "expected a density > 0 (or NaN where none was logged)",
        }[self.kind]

    @staticmethod
    def _show(value: Any) -> str:
        value = value.item() if isinstance(value, np.generic) else value
        if isinstance(value, float) and value != value:
            return "nan"
        if isinstance(value, float) and value in (float("inf"), float("-inf")):
            return "inf" if value > 0 else "-inf"
        return repr(value)


#: rows up to this size are read with their neighbours (see ColumnFile.gather)
_WINDOW_ROW_BYTES = 4096


class ColumnFile:
    """The open file behind one column of a disk dataset: rows gathered by
    positional reads (one ``os.pread`` per run of consecutive rows).

    A transition batch gathers a column at ``rows`` and at (mostly)
    ``rows + 1`` (next observations, next actions), in either order:
    scattered small rows are read together with the rows before and after
    them (the same system call) and the last such gather is kept, so the
    other gather reads only the rows it does not already have."""

    def __init__(self, fd: int, file: str, rows: int, row_bytes: int) -> None:
        """``fd``: the file opened by :func:`open_member` (closed with this
        object); ``file``: its path, for messages."""
        self.file, self.rows, self.row_bytes = file, rows, row_bytes
        self.fd = fd
        self.size = rows * row_bytes
        weakref.finalize(self, os.close, self.fd)
        #: False: sampled gathers go through the memory map (read_mode "mmap")
        self.positional = hasattr(os, "pread")
        #: the reads of large scattered gathers split over the reader thread (DiskStore.split_reads)
        self.split = True
        #: the last scattered gather: its rows and the bytes of rows - 1, rows and rows + 1
        self._last: Optional[tuple[np.ndarray, np.ndarray]] = None

    def recent(self, rows: np.ndarray) -> Optional[np.ndarray]:
        """A gather served without reading (None: a column file reads every gather)."""
        return None

    def check_size(self) -> None:
        """Raise :class:`DiskDatasetChangedError` when the file is now shorter
        than when it was opened (one ``fstat``, ~1 us): called before a read
        through the memory map, where a truncated file would raise SIGBUS."""
        size = os.fstat(self.fd).st_size
        if size < self.size:
            raise DiskDatasetChangedError(
                f"{self.file} holds {size} bytes, {self.size} when the dataset was opened: another process "
                "truncated it; reopen the dataset"
            )

    def read_range(self, start: int, stop: int, out: Optional[np.ndarray] = None) -> np.ndarray:
        """Rows ``start:stop`` (in range), ``(stop - start, row_bytes)``
        uint8 (a new array, or written into ``out``, contiguous), read by
        positional reads of at most 8 MB."""
        n = stop - start
        data = read_exact(self.fd, n * self.row_bytes, start * self.row_bytes, self.file, out)
        return data.reshape(n, self.row_bytes)

    def _check(self, data: bytes, n: int, size: int) -> None:
        if len(data) != n * size:
            raise DiskDatasetChangedError(
                f"{self.file}: read {len(data)} bytes for {n} rows of {size} bytes: the file is shorter than "
                "when the dataset was opened (another process truncated it); reopen the dataset"
            )

    def _runs(self, rows: np.ndarray) -> np.ndarray:
        n, size = rows.shape[0], self.row_bytes
        breaks = np.flatnonzero(np.diff(rows) != 1) + 1
        first = np.concatenate(([0], breaks))
        lengths = np.diff(np.concatenate((first, [n])))
        data = b"".join(map(os.pread, repeat(self.fd, first.shape[0]), (lengths * size).tolist(),
                            (rows[first] * size).tolist()))
        self._check(data, n, size)
        return np.frombuffer(data, np.uint8).reshape(n, size)

    def gather(self, rows: np.ndarray) -> np.ndarray:
        """The bytes of ``rows`` (1-D, in range, non-negative) in that
        order, ``(len(rows), row_bytes)`` uint8 (a new, writable array)."""
        n, size = rows.shape[0], self.row_bytes
        last = self._last
        if last is not None and last[0].shape[0] == n:
            previous, windows = last
            offset = rows - previous + 1  # 0, 1, 2: the row before, the row, the row after
            held = (offset >= 0) & (offset <= 2)
            if held.any():
                out = windows.reshape(n, 3, size)[np.arange(n), np.where(held, offset, 1)]
                if not held.all():
                    out[~held] = self._runs(rows[~held])
                return out
        if (
            n > 1 and size <= _WINDOW_ROW_BYTES and int(rows.min()) >= 1 and int(rows.max()) < self.rows - 1
            and not np.any(np.diff(rows) == 1)
        ):
            # scattered rows: each read with its neighbours, kept for a gather of the next (or previous) rows
            data = read_rows(self.fd, (rows - 1) * size, 3 * size, self.split)
            self._check(data, 3 * n, size)
            windows = np.frombuffer(data, np.uint8).reshape(n, 3 * size)
            self._last = (rows.copy(), windows)
            return windows[:, size : 2 * size].copy()
        return self._runs(rows).copy()


#: ``layout="rows"``: records around each scattered row read in the same call
_RECORD_WINDOW = 3
#: scattered gathers read windows only while they stay this small (bytes per row)
_WINDOW_RECORD_BYTES = 4096
#: gathers of records remembered by content (see RecordFile.records)
_RECENT_GATHERS = 3
#: a gather is remembered only while its records take at most this many bytes
_RECENT_BYTES = 1 << 20


class RecordFile(ColumnFile):
    """The open record file of a ``layout="rows"`` dataset: every step's
    fields in one fixed-size record, so one positional read returns all
    the fields of a step and of its neighbours.

    A scattered gather (no two rows adjacent) reads the window of
    ``_RECORD_WINDOW`` records around each row (one ``os.pread`` per row)
    and keeps it: a gather of the rows next to these (next observations
    and next actions at ``rows + 1``) is served from it without a system
    call. The records of the last few gathers are remembered by the bytes
    of their row array, so the fields of one batch gathered at the same
    rows one after another (observations, actions, rewards) cost one
    gather of whole records and a copy of each field. A gather of runs of
    adjacent rows (episode slices, trajectories) is one read per run."""

    def __init__(self, fd: int, file: str, rows: int, record_bytes: int) -> None:
        super().__init__(fd, file, rows, record_bytes)
        #: the last scattered read: first row of each window, the windows as
        #: ``(n * width, record_bytes)`` uint8, width, ``arange(n) * width``
        self._windows: Optional[tuple[np.ndarray, np.ndarray, int, np.ndarray]] = None
        #: ``(rows.tobytes(), records)`` of the last gathers, oldest first;
        #: replaced, never mutated, so a reader's snapshot stays consistent
        self._recent: tuple[tuple[bytes, np.ndarray], ...] = ()

    def served(self, rows: np.ndarray) -> Optional[np.ndarray]:
        """The records at ``rows`` (1-D int64) without a read, else None:
        rows gathered lately (the same bytes) or all inside the last
        windows (so in range either way). Shared: copy fields."""
        # only small gathers are remembered: a large one is not turned into bytes
        key = rows.tobytes() if rows.shape[0] * self.row_bytes <= _RECENT_BYTES else None
        if key is not None:
            for known, records in self._recent:
                if known == key:
                    return records
        cached = self._windows
        if cached is not None and cached[0].shape[0] == rows.shape[0]:
            firsts, windows, width, base = cached
            position = rows - firsts
            if (position.view(np.uint64) < width).all():  # a negative position is huge as uint64
                records = np.take(windows, base + position, axis=0)
                if key is not None:
                    self._remember(key, records)
                return records
        return None

    def records(self, rows: np.ndarray) -> np.ndarray:
        """The whole records at ``rows`` (1-D int64, in range),
        ``(len(rows), record_bytes)`` uint8; shared with later calls:
        callers copy what they return."""
        records = self.served(rows)
        if records is None:
            records = self._read_records(rows)
            if records.nbytes <= _RECENT_BYTES:
                self._remember(rows.tobytes(), records)
        return records

    def _remember(self, key: bytes, records: np.ndarray) -> None:
        self._recent = self._recent[1 - _RECENT_GATHERS:] + ((key, records),)

    def _read_records(self, rows: np.ndarray) -> np.ndarray:
        n, size = rows.shape[0], self.row_bytes
        cached = self._windows
        if cached is not None and cached[0].shape[0] == n:
            firsts, windows, width, base = cached
            position = rows - firsts
            held = position.view(np.uint64) < width
            count = int(np.count_nonzero(held))
            if 2 * count >= n:  # mostly held: read the others (a next action past an episode's end)
                out = np.take(windows, base + np.where(held, position, 0), axis=0)
                out[~held] = self._runs(rows[~held])
                return out
        if size > _WINDOW_RECORD_BYTES or 2 * int(np.count_nonzero(rows[1:] - rows[:-1] == 1)) > n:
            return self._runs(rows)
        width = min(_RECORD_WINDOW, self.rows)
        firsts = np.minimum(np.maximum(rows - (_RECORD_WINDOW // 2), 0), self.rows - width)
        data = read_rows(self.fd, firsts * size, width * size, self.split)
        self._check(data, width * n, size)
        windows = np.frombuffer(data, np.uint8).reshape(n * width, size)
        base = np.arange(0, n * width, width)
        self._windows = (firsts, windows, width, base)
        return np.take(windows, base + (rows - firsts), axis=0)

    def gather_field(self, rows: np.ndarray, offset: int, nbytes: int) -> np.ndarray:
        """Bytes ``offset:offset + nbytes`` of the records at ``rows`` (1-D,
        in range), ``(len(rows), nbytes)`` uint8, a new contiguous array."""
        return self.records(rows)[:, offset : offset + nbytes].copy()


class RecordField:
    """One field of a record file, gathered like a column file."""

    def __init__(self, records: RecordFile, offset: int, nbytes: int) -> None:
        self.records, self.offset, self.nbytes = records, offset, nbytes
        self.file = records.file

    @property
    def positional(self) -> bool:
        return self.records.positional

    def check_size(self) -> None:
        self.records.check_size()

    def read_range(self, start: int, stop: int, out: Optional[np.ndarray] = None) -> np.ndarray:
        """The field of records ``start:stop``, ``(stop - start, nbytes)``
        uint8 (a new array, or written into ``out``), the records read 8 MB
        at a time."""
        records = self.records
        out = np.empty((stop - start, self.nbytes), np.uint8) if out is None else out.reshape(stop - start, self.nbytes)
        step = max(1, _RANGE_CHUNK // records.row_bytes)
        for first in range(start, stop, step):
            last = min(stop, first + step)
            out[first - start : last - start] = records.read_range(first, last)[:, self.offset : self.offset + self.nbytes]
        return out

    def recent(self, rows: np.ndarray) -> Optional[np.ndarray]:
        """The field at ``rows`` when the record file gathered these rows
        lately (a new array), else None."""
        records = self.records.served(rows)
        return None if records is None else records[:, self.offset : self.offset + self.nbytes].copy()

    def gather(self, rows: np.ndarray) -> np.ndarray:
        return self.records.gather_field(rows, self.offset, self.nbytes)


def record_dtype(fields: list[tuple[str, Any, tuple[int, ...]]]) -> np.dtype:
    """The record of ``layout="rows"``: ``(name, dtype, row shape)`` fields
    in that order, each at an offset that is a multiple of its item size,
    the record padded to a multiple of the largest item size (so every
    field of every record is aligned, and a field's stride is a multiple of
    its item size, which numpy and torch views need)."""
    names, formats, offsets = [], [], []
    offset, align = 0, 1
    for name, dtype, shape in fields:
        dtype = np.dtype(dtype)
        item = dtype.itemsize
        offset = -(-offset // item) * item
        names.append(name)
        formats.append((dtype, tuple(shape)) if tuple(shape) else dtype)
        offsets.append(offset)
        offset += item * int(np.prod(shape, dtype=np.int64))
        align = max(align, item)
    itemsize = max(-(-offset // align) * align, 1)
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": itemsize})


def _row_key(key: Any) -> Optional[tuple[np.ndarray, tuple]]:
    """``(rows, rest)`` when ``key`` gathers rows by an integer array
    (``column[rows]``, ``column[rows, 0]``), else None."""
    if type(key) is np.ndarray:
        return (key, ()) if key.dtype.kind in "iu" else None
    if (
        type(key) is tuple and key and type(key[0]) is np.ndarray and key[0].dtype.kind in "iu"
        and all(isinstance(k, (int, np.integer, slice)) or k is Ellipsis for k in key[1:])
        and not any(isinstance(k, bool) for k in key[1:])
    ):
        return key[0], key[1:]
    return None


#: in read_mode "mmap", gathers larger than this read by positional reads
#: all the same: a gather through the map after the size check can still
#: meet a truncation while it copies, so the copy is kept short
MAPPED_GATHER_BYTES = 1 << 20

#: copies of a column larger than this are checked against the memory available first
_CHECKED_ALLOCATION_BYTES = 64 << 20

#: numpy functions that read no values (a column's shape, not its rows)
_METADATA_FUNCTIONS = {np.shape, np.ndim, np.size, np.iscomplexobj, np.isrealobj, np.may_share_memory,
                       np.shares_memory}


def _plain(value: Any) -> Any:
    """``value`` with every :class:`DiskColumn` in it (in lists, tuples,
    dicts) replaced by a checked copy of its rows."""
    if isinstance(value, DiskColumn):
        return value._copy()
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value) if type(value) in (list, tuple) else value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class DiskColumn(np.ndarray):
    """One column of a disk dataset: an ndarray over its read-only memory
    map whose reads go through the file instead: indexing (row gathers by
    an integer array, slices, single rows, masks), ufuncs, reductions and
    numpy functions return checked copies read by positional reads
    (sampled gathers through the map with ``read_mode="mmap"``, after a
    size check), each row's values checked against the column's
    :class:`ValueRule`. Arrays derived from it (``reshape``, ``view``,
    ``T``) carry no file: they index as ndarrays after the size check.

    ``np.asarray(column)``, ``torch.as_tensor(column)`` and other C-level
    readers of the array's memory read the map itself, unchecked (a file
    truncated meanwhile raises SIGBUS): read ``column[:]`` instead."""

    _file: Any = None  # a ColumnFile or a RecordField
    #: the file whose size is checked before this array's map is read (derived arrays keep it)
    _guard: Any = None
    _rule: Optional[ValueRule] = None
    #: the field, as messages call it
    _name = "column"

    def __array_finalize__(self, obj: Any) -> None:
        if obj is not None:
            self._guard = getattr(obj, "_guard", None)

    def __getitem__(self, key: Any) -> Any:
        file = self._file
        if file is None:  # a derived array: numpy's indexing of the map, after the size check
            if self._guard is not None:
                self._guard.check_size()
            return np.ndarray.__getitem__(self.view(np.ndarray), key)
        found = _row_key(key)
        if found is not None:
            if not found[0].size:  # no rows: nothing is read
                return np.ndarray.__getitem__(self.view(np.ndarray), key)
            return self._gather(file, *found)
        return self._index(key)

    def _gather(self, file: Any, rows: np.ndarray, rest: tuple) -> np.ndarray:
        flat = rows if rows.ndim == 1 and rows.dtype == np.int64 else rows.reshape(-1).astype(np.int64)
        data = file.recent(flat)  # rows gathered just before (checked then): no bounds check, no read
        if data is None:
            n = self.shape[0]
            low, high = int(flat.min()), int(flat.max())
            if low < -n or high >= n:
                raise IndexError(f"index {high if high >= n else low} is out of bounds for axis 0 with size {n}")
            if low < 0:
                flat = np.where(flat < 0, flat + n, flat)
            if not file.positional and flat.shape[0] * self.itemsize * math.prod(self.shape[1:]) <= MAPPED_GATHER_BYTES:
                file.check_size()  # read_mode "mmap": through the map, the file still its opened size
                out = np.ndarray.__getitem__(self.view(np.ndarray), flat)
            else:
                out = file.gather(flat).view(self.dtype).reshape(flat.shape + self.shape[1:])
        else:
            out = data.view(self.dtype).reshape(flat.shape + self.shape[1:])
        if self._rule is not None:
            self._rule.check(out, flat)
        out = out.reshape(rows.shape + self.shape[1:])
        return out[(slice(None),) * rows.ndim + rest] if rest else out

    def _range(self, start: int, stop: int) -> np.ndarray:
        """Rows ``start:stop`` (in range) read by positional reads and
        checked: a new ``(stop - start, ...)`` array."""
        shape = (max(stop - start, 0),) + self.shape[1:]
        if shape[0] * self.itemsize * math.prod(shape[1:]) > _CHECKED_ALLOCATION_BYTES:
            # a large copy (a whole column): a clear error rather than the kernel's out-of-memory killer
            _safety.check_declared_size(self._file.file, f"{self._name}[{start}:{stop}]", shape, self.dtype)
        out = np.empty(shape, self.dtype)
        if stop <= start:
            return out
        self._file.read_range(start, stop, out.view(np.uint8))
        if self._rule is not None:
            self._rule.check(out, start)
        return out

    def _copy(self) -> np.ndarray:
        """Every row, read and checked (a derived array: copied after the size check)."""
        if self._file is None:
            if self._guard is not None:
                self._guard.check_size()
            return np.array(self.view(np.ndarray))
        return self._range(0, self.shape[0])

    def _index(self, key: Any) -> Any:
        """Any key other than an integer-array gather."""
        n = self.shape[0]
        parts = key if type(key) is tuple else (key,)
        first, rest = (parts[0], parts[1:]) if parts else (slice(None), ())
        if isinstance(first, (int, np.integer)) and not isinstance(first, (bool, np.bool_)):
            i = int(first)
            if i < -n or i >= n:
                raise IndexError(f"index {i} is out of bounds for axis 0 with size {n}")
            row = self._range(i % n, i % n + 1)[0]
            return row[rest] if rest else row
        if isinstance(first, slice):
            start, stop, step = first.indices(n)
            if step == 1:
                out = self._range(start, max(start, stop))
            else:
                rows = np.arange(start, stop, step, dtype=np.int64)
                out = self._gather(self._file, rows, ()) if rows.size else self._range(0, 0)
            return out[(slice(None),) + rest] if rest else out
        if isinstance(first, list):  # a list of row indices, as numpy reads it
            array = np.asarray(first)
            if array.dtype.kind in "iu" and array.size:
                return self[(array,) + rest]
        return self._copy()[key]  # masks, Ellipsis, new axes: numpy's indexing of a checked copy

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        out = kwargs.get("out")
        if out is not None and any(isinstance(o, DiskColumn) for o in out):
            raise TypeError("a disk dataset's columns are read-only")
        return getattr(ufunc, method)(*_plain(inputs), **kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        if func in _METADATA_FUNCTIONS:
            return func(*(a.view(np.ndarray) if isinstance(a, DiskColumn) else a for a in args), **kwargs)
        return func(*_plain(args), **_plain(kwargs))

    # ndarray methods that read the memory without a ufunc: through a checked copy
    def copy(self, order: str = "C") -> np.ndarray:  # type: ignore[override]
        return self._copy().copy(order)

    def astype(self, *args: Any, **kwargs: Any) -> np.ndarray:  # type: ignore[override]
        return self._copy().astype(*args, **kwargs)

    def tobytes(self, order: str = "C") -> bytes:  # type: ignore[override]
        return self._copy().tobytes(order)

    def tolist(self) -> Any:  # type: ignore[override]
        return self._copy().tolist()

    def __iter__(self) -> Any:
        return iter(self._copy())

    def __reduce__(self) -> Any:
        return self._copy().__reduce__()

    def __copy__(self) -> np.ndarray:
        return self._copy()

    def __deepcopy__(self, memo: Any) -> np.ndarray:
        return self._copy()

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        # results of ufuncs on a column are plain arrays (they are not the file)
        array = array.view(np.ndarray) if isinstance(array, np.ndarray) else array
        return array[()] if return_scalar else array
