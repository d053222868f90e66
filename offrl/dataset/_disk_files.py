"""Reading rows of a disk dataset's files (:mod:`offrl.dataset.disk`):
positional reads of the column or record files, kept so that the gathers
of one batch that follow need no read, and the column arrays whose row
gathers go through them."""

from __future__ import annotations

import os
import weakref
from itertools import repeat
from typing import Any, Optional

import numpy as np

from ._split_reads import read_rows

__all__ = ["ColumnFile", "DiskColumn", "DiskDatasetChangedError", "RecordField", "RecordFile", "record_dtype"]


class DiskDatasetChangedError(RuntimeError):
    """A disk dataset's files changed after it was opened."""


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

    def __init__(self, file: str, rows: int, row_bytes: int) -> None:
        self.file, self.rows, self.row_bytes = file, rows, row_bytes
        self.fd = os.open(file, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
        weakref.finalize(self, os.close, self.fd)
        #: False: gathers go through the memory map (read_mode "mmap")
        self.positional = True
        #: the reads of large scattered gathers split over the reader thread (DiskStore.split_reads)
        self.split = True
        #: the last scattered gather: its rows and the bytes of rows - 1, rows and rows + 1
        self._last: Optional[tuple[np.ndarray, np.ndarray]] = None

    def recent(self, rows: np.ndarray) -> Optional[np.ndarray]:
        """A gather served without reading (None: a column file reads every gather)."""
        return None

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

    def __init__(self, file: str, rows: int, record_bytes: int) -> None:
        super().__init__(file, rows, record_bytes)
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

    @property
    def positional(self) -> bool:
        return self.records.positional

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


class DiskColumn(np.ndarray):
    """One column of a disk dataset: an ndarray over its read-only memory
    map (slices and reductions read through the map) whose row gathers by
    an integer array are positional reads of the file unless the store's
    ``read_mode`` is ``"mmap"``. Arrays derived from it (slices, results)
    are plain ndarrays or carry no file, so they index as ndarrays."""

    _file: Any = None  # a ColumnFile or a RecordField

    def __getitem__(self, key: Any) -> Any:
        file = self._file
        if file is not None and file.positional:
            found = _row_key(key)
            if found is not None and found[0].size:
                return self._gather(file, *found)
        return np.ndarray.__getitem__(self.view(np.ndarray), key)

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
            data = file.gather(flat)
        out = data.view(self.dtype).reshape(rows.shape + self.shape[1:])
        return out[(slice(None),) * rows.ndim + rest] if rest else out

    def __array_wrap__(self, array: Any, context: Any = None, return_scalar: bool = False) -> Any:
        # results of ufuncs on a column are plain arrays (they are not the file)
        array = array.view(np.ndarray) if isinstance(array, np.ndarray) else array
        return array[()] if return_scalar else array
