"""Datasets that live on disk: sampled without being loaded into memory.

A *disk dataset* is a directory in one of two layouts (``DiskDatasetWriter``'s
``layout``, recorded in the manifest)::

    manifest.json            format, schema version, layout, signatures, sizes
    records.bin              layout "rows" (the default, schema version 2):
                             one fixed-size record per step holding all its
                             fields (observation columns, action, reward,
                             behaviour probability), each field aligned
    observations_<k>.bin     layout "columns" (schema version 1, what offrl
    actions.bin              wrote before the record file): one raw column
    rewards.bin              per field, steps on the first axis (C order),
    behaviour_probabilities.bin   exactly the rows of an in-memory ColumnStore
    episode_starts.bin  episode_ends.bin  episode_terminated.bin
    episode_has_final.bin    the small episode table (read into memory)

Why these layouts (measured in ``benchmarks/scale.py disk``): a random
mini-batch touches a few fields of one step and of the step after it. In
the record file they are one contiguous range, so a transition is one
positional read (``os.pread``) of the records around its step, where the
column layout needs one per column (768 reads for a batch of 256 against
256: on 25,000,000 steps 527 us of CPU per batch against 1138 us, memory
180 us). On a 2.4 GB file a random 288-byte read costs 0.85 us when the
page cache holds the file in large (2 MB) folios, as after a read from
disk or ``DiskDatasetWriter``'s buffered writes, and 1.1-1.3 us in small
folios (a file written in ~100 kB pieces), so the count of reads is the
cost. Records are padded so that every field is
aligned (its offset and the record size multiples of its item size): a
column is then a strided numpy view of the mapped record file.
HDF5 fancy indexing (``h5py``) costs a library call per selection and
needs sorted unique indices; on 25,000,000 steps it was 41x slower per
batch of 256 than the memory maps with a warm page cache (31.6 ms against
0.76 ms) and 45x slower from a cold one (339 ms against 7.5 ms), so the
files are raw (no chunking, no compression: both would make a row a
whole-chunk decode).

Reading sampled rows (:attr:`DiskStore.read_mode`): by default a gather
of rows (``column[rows]``, what pickers and slicers do) is positional
reads served by the page cache: for scattered rows one read per row of
the records (or column rows) around it, kept so that the gathers of the
same batch that follow (other fields, next observations, next actions)
need no read; for runs of consecutive rows one read per run. Nothing is
mapped into the process, so its resident memory stays its own however
many rows training samples. A one-step transition batch of the rows
layout skips the per-column gathers (:meth:`DiskStore.one_step_fields`):
one read of each transition's two records (its step and the next), every
field taken from them, and the reads of a batch split between the calling
thread and a reader thread (:mod:`._split_reads`: its share goes to the
kernel in one io_uring or AIO call, so both CPUs read at once;
:attr:`DiskStore.split_reads`). Each small read costs ~0.8 us of kernel
time (a page-cache lookup and copy; the same through io_uring), so the
count of reads is the cost. Measured on 25,000,000 steps (2 CPUs, load
~0.8; ``benchmarks/scale.py disk``, medians of 5 interleaved rounds):
``sample_transition_batch(256)`` 221-242 us against 123-143 us in memory
(1.73-1.78x) with the reads split, for 307-335 us of CPU time (both
threads); 246-286 us (2.0x) in one thread, of which the 256 reads are
188-209 us. ``read_mode="mmap"`` gathers
through the memory maps instead: faster per batch (0.77x memory), but every
random row maps the cached pages around it (the kernel's 64 kB
"fault-around", and on Linux 6.18 with large folios the whole folio,
whatever the madvise hint, ``MADV_NOHUGEPAGE`` included: 428 MB after one
batch) into the process, whose resident set then grows towards the whole
file (see :attr:`DiskStore.resident_limit`). Everything else (episode
slices, single rows, whole-column reductions, numpy functions of a column,
``in_memory=True`` loads and dumps) is positional reads too, whatever the
read mode: the maps (advised ``MADV_RANDOM``: no read-ahead from disk
around a row) are read only by ``"mmap"`` gathers.

Safety: the directory is opened once and every file of it relative to
that (``openat``), only when the file is a regular file with one link:
symbolic links (to anything), hard links, pipes and folders are refused
naming the file, so no file outside the directory is ever read, and a
directory replaced while it is being opened (a writer dumping over it)
is opened again (old or new, never a mix). The manifest is JSON read
with a size cap and a nesting limit and checked field by field (dtypes
from a fixed list, shapes of non-negative ints with no zero-width row,
byte sizes that must equal the files' sizes; record fields aligned,
inside the record and not overlapping), the episode table's bools must
be bytes 0 or 1; file names are fixed, never taken from the manifest;
nothing is unpickled, imported or called.

A file truncated by another process while the store is open must not
kill the process: a read of a memory map past the file's new end raises
SIGBUS, a positional read returns fewer bytes, reported as
:class:`DiskDatasetChangedError`. So only ``"mmap"`` gathers read the maps,
each after one ``fstat`` of its file (its size still the opened one) and
at most 1 MB at a time; what is left is the microseconds between that
``fstat`` and the end of the copy (a truncation inside them still raises
SIGBUS), and code that reads a column's memory without indexing it
(``np.asarray(column)``, ``torch.as_tensor(column)``; see
:class:`~offrl.dataset._disk_files.DiskColumn`).

Values are checked as rows are read, whatever the manifest says (a file
from elsewhere can hold anything; offrl's writers check them before
writing and record ``"values_checked": true``): float observations,
continuous actions and rewards finite, discrete actions in ``[0,
action_size)``, behaviour probabilities in (0, 1] (densities > 0) or NaN
(not logged). A bad value raises ``ValueError`` naming the file, the field
and the row, when it is read: ``in_memory=True`` reads (so checks) every
row at load, sampling in place only the rows it samples, and
:meth:`DiskStore.verify` checks every row now. Measured on 4,000,000 steps
(384 MB; 2 CPUs shared, load 8-12): the checks (and the ``fstat`` of
``"mmap"``) add 5-28 us to ``sample_transition_batch(256)`` (1-10 %, the
most in ``"mmap"`` mode, whose batches are the cheapest); ``verify``
checks about 1.2 GB/s from a warm page cache. Figures in
``docs/LARGE_DATASETS.md``.

:class:`DiskStore` is a read-only :class:`~offrl.dataset.InfiniteBuffer`
whose columns are arrays over memory maps, so pickers, slicers, evaluators, OPE and
splits work on it unchanged (a split is a view over the same files with its
own episode table); the episode table (and returns-to-go, computed on
demand) stay in memory. :meth:`DiskStore.check` raises
:class:`DiskDatasetChangedError` when another process replaced, truncated or
rewrote a file after it was opened (size, mtime and inode recorded at open;
sizes checked against the manifest at open); training calls it before every
epoch.

The format's names and limits, the manifest's rules and the directory's
files opened relative to it live in :mod:`offrl.dataset.disk_format`.

Writing (:mod:`offrl.dataset.disk_writer`): ``DiskDatasetWriter`` streams
episodes into a new dataset (a hidden sibling directory renamed into place
on success), ``dump_disk_dataset`` writes a buffer in chunks of rows.
:class:`DiskFIFOBuffer` is the online counterpart: a FIFO replay buffer in
fixed-size memory-mapped files.
"""

from __future__ import annotations

import contextlib
import errno
import math
import mmap
import os
import shutil
import stat
import time
from typing import Any, Optional

import numpy as np

from .. import _safety
from .._atomic import FileWriteError
from ..constants import ActionSpace
from ._disk_files import (
    MAPPED_GATHER_BYTES, ColumnFile, DiskColumn, DiskDatasetChangedError, RecordField, RecordFile, record_dtype,
)
from ._split_reads import read_rows
from .disk_format import (
    DISK_FORMAT, DISK_SCHEMA_VERSION, LAYOUTS, MAX_OBSERVATION_COLUMNS, RECORDS_FILE, OPEN_ATTEMPTS, TABLE_COLUMNS, DatasetMembers,
    DirectoryReplaced, column_spec, corrupt_dataset, field_names, int_field, is_disk_dataset, read_manifest,
    record_specs, value_rule,
)
from .episode import Episode
from .signature import Signature
from .storage import InfiniteBuffer

__all__ = [
    "DISK_FORMAT",
    "DISK_SCHEMA_VERSION",
    "LAYOUTS",
    "READ_MODES",
    "DiskDatasetChangedError",
    "DiskStore",
    "check_free_space",
    "record_dtype",
    "open_disk_dataset",
    "is_disk_dataset",
    "read_disk_dataset",
    "subset_view",
]

#: bytes kept free on the target file system beyond the data itself
SPACE_MARGIN = 16 << 20
#: resident bytes one random row of one column may add: Linux maps the
#: cached pages around a faulting one too ("fault-around", 64 kB by
#: default, whatever the madvise hint): measured 50 kB per random row on a
#: 17-float column of a warm file
TOUCH_BYTES = 64 << 10


#: how a :class:`DiskStore` gathers sampled rows (see :attr:`DiskStore.read_mode`)
READ_MODES = ("pread", "mmap")


class NoSpaceError(FileWriteError):
    """``OSError(ENOSPC)`` raised before writing, a :class:`FileWriteError`
    whose ``filename`` is the target: its message names the target and the
    bytes needed and free (writers pass it on unchanged)."""


def check_free_space(path: Any, needed: int, what: str = "the dataset") -> None:
    """Raise ``OSError(ENOSPC)`` (:class:`NoSpaceError`) naming the bytes needed and free when the
    file system holding ``path`` (or its nearest existing parent) has less
    than ``needed`` + a 16 MB margin free. Called before writing starts."""
    probe = os.path.abspath(os.fspath(path))
    while not os.path.exists(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    free = int(shutil.disk_usage(probe).free)
    if int(needed) + SPACE_MARGIN > free:
        target = os.fspath(path)
        state = f"{target} keeps its previous content" if os.path.isfile(target) else "nothing was written"
        raise NoSpaceError(
            errno.ENOSPC,
            os.strerror(errno.ENOSPC),
            target,
            message=f"cannot write {target}: {os.strerror(errno.ENOSPC)} (writing {what} needs {int(needed)} bytes "
            f"({_safety.format_bytes(int(needed))}) plus a {_safety.format_bytes(SPACE_MARGIN)} margin; "
            f"{free} bytes ({_safety.format_bytes(free)}) are free there); {state}",
        )


# --------------------------------------------------------------- the store
class DiskStore(InfiniteBuffer):
    """Read-only columnar store whose columns are memory-mapped files.

    Built by :func:`open_disk_dataset`. Writing to it raises ``TypeError``;
    copy what you need into an in-memory buffer (``ReplayBuffer.load(path)``
    with the default ``in_memory=True``) to append.
    """

    #: no in-memory per-transition table: it would take 29 bytes a transition
    keeps_transition_table = False

    def __init__(self) -> None:
        super().__init__()
        self.path: str = ""
        self._stats: dict[str, tuple[int, int, int]] = {}
        self._manifest_text: str = ""
        self._maps: list[np.memmap] = []
        self._files: list[ColumnFile] = []
        #: True for a split's view: its episodes are a subset of the files' rows
        self.is_view = False
        #: the manifest says its writer checked the values (offrl writes it);
        #: rows are checked as they are read whatever it says
        self.values_checked = False
        self._batch_columns: Optional[list[tuple[str, DiskColumn]]] = None
        self._batch_row_bytes: Optional[int] = None

    # read-only: every write path of ColumnStore goes through one of these
    def _read_only(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            f"the dataset at {self.path} is read-only on disk: load it with in_memory=True to "
            "append, or write a new one with DiskDatasetWriter"
        )

    append_step = close_episode = add_episode = append = _read_only  # type: ignore[assignment]

    def set_columns(self, observations: list[np.ndarray], actions: np.ndarray, rewards: np.ndarray,
                    starts: np.ndarray, ends: np.ndarray, terminated: np.ndarray, has_final: np.ndarray,
                    behaviour_probabilities: Optional[np.ndarray] = None,
                    observation_keys: Optional[tuple[str, ...]] = None) -> None:
        super().set_columns(observations, actions, rewards, starts, ends, terminated, has_final, None,
                            observation_keys)
        # the column itself (an in-memory store makes it contiguous: here that would read it whole)
        self._behaviour = behaviour_probabilities

    def _named_columns(self) -> dict[str, DiskColumn]:
        columns = {f"observations_{k}": o for k, o in enumerate(self.observations)}
        columns.update(actions=self.actions, rewards=self.rewards)
        if self.behaviour_probabilities is not None:
            columns["behaviour_probabilities"] = self.behaviour_probabilities
        return columns  # type: ignore[return-value]

    def read_fields(self, start: int, stop: int) -> dict[str, np.ndarray]:
        """Rows ``start:stop`` of every stored field (``observations_<k>``,
        ``actions``, ``rewards``, ``behaviour_probabilities``), read by
        positional reads (the record file once, 8 MB at a time) and checked
        against each field's value rule: new arrays."""
        columns = self._named_columns()
        out = {name: np.empty((stop - start,) + column.shape[1:], column.dtype) for name, column in columns.items()}

        def keep(first: int, last: int, chunk: dict[str, np.ndarray]) -> None:
            for name, values in chunk.items():
                out[name][first - start : last - start] = values

        self._read_checked(start, stop, keep)
        return out

    def _read_checked(self, start: int, stop: int, use: Any) -> None:
        """Read rows ``start:stop`` in chunks of about 8 MB, check every
        field's values, and call ``use(first, last, {name: values})`` on
        each chunk (the values are the reader's buffers, reused: copy them)."""
        columns = self._named_columns()
        records = self._files[0] if self._files else None
        if type(records) is not RecordFile:
            row_bytes = max(c.itemsize * math.prod(c.shape[1:]) for c in columns.values())
            step = max(1, (8 << 20) // max(row_bytes, 1))
            for first in range(start, stop, step):
                last = min(stop, first + step)
                use(first, last, {name: column._range(first, last) for name, column in columns.items()})
            return
        dtype = self._maps[0].dtype
        step = max(1, (8 << 20) // records.row_bytes)
        buffer = np.empty(min(step, max(stop - start, 0)) * records.row_bytes, np.uint8)  # reused chunk to chunk
        for first in range(start, stop, step):
            last = min(stop, first + step)
            chunk = records.read_range(first, last, buffer[: (last - first) * records.row_bytes])
            steps = chunk.view(dtype).reshape(last - first)
            fields = {name: steps[name] for name in columns}
            for name, column in columns.items():
                if column._rule is not None:
                    column._rule.check(fields[name], first)
            use(first, last, fields)

    def episode(self, position: int) -> Episode:
        """The live episode at ``position``: its rows read (a copy), checked."""
        i = self._ep_head + position
        start, end, has_final = int(self._ep_start[i]), int(self._ep_end[i]), bool(self._ep_has_final[i])
        fields = self.read_fields(start, end + has_final)
        observations = [fields[f"observations_{k}"] for k in range(len(self.observations))]
        final = None
        if has_final:
            final = observations[0][-1] if len(observations) == 1 else [o[-1] for o in observations]
        behaviour = fields.get("behaviour_probabilities")
        return Episode(
            observations=observations[0][: end - start] if len(observations) == 1
            else [o[: end - start] for o in observations],
            actions=fields["actions"][: end - start],
            rewards=fields["rewards"][: end - start],
            terminated=bool(self._ep_terminated[i]),
            final_observation=final,
            behaviour_probabilities=None if behaviour is None else behaviour[: end - start],
            observation_keys=self.observation_signature.keys,
        )

    def verify(self) -> None:
        """Read every row of the files and check every value (as reads do
        row by row: finite floats, discrete actions in range, behaviour
        probabilities valid), raising ``ValueError`` naming the file, field
        and first bad row. Positional reads of 8 MB at a time: no memory
        map, memory bounded by a chunk per field."""
        self._read_checked(0, self.tail, lambda first, last, chunk: None)

    def initialize(self, observation_signature: Signature, action_signature: Signature,
                   reward_signature: Signature) -> None:
        if not self.is_initialized:
            self._read_only()
        super().initialize(observation_signature, action_signature, reward_signature)

    @property
    def read_mode(self) -> str:
        """How sampled rows are read: ``"pread"`` (the default where the
        platform has ``os.pread``) or ``"mmap"``.

        ``"pread"``: a gather of rows by an integer array (pickers,
        slicers, ``column[rows]``) is positional reads served by the page
        cache (with ``layout="rows"`` one per sampled transition for all
        the fields of a transition batch; one per run of consecutive rows
        for slices); nothing is mapped, so
        the process's resident memory does not grow with sampling. Measured
        in ``benchmarks/scale.py disk``: IQL trains from a 2.4 GB file with
        its resident memory at torch's own footprint.

        ``"mmap"``: gathers read through the memory maps: fewer system
        calls (about 1 us each) per batch, so sampling is faster, but each
        random row maps 64 kB of cached pages around it into the process
        and a long run's resident set grows towards the whole file (clean
        pages the kernel may drop, counted in its RSS; released before each
        epoch and by :attr:`resident_limit`).

        A store and its split views share the setting (the same open files).
        """
        return "pread" if self._files and self._files[0].positional else "mmap"

    @read_mode.setter
    def read_mode(self, mode: str) -> None:
        if mode not in READ_MODES:
            raise ValueError(f"read_mode must be one of {READ_MODES}, got {mode!r}")
        if mode == "pread" and not hasattr(os, "pread"):
            raise ValueError("read_mode 'pread' needs os.pread, which this platform lacks: use 'mmap'")
        for file in self._files:
            file.positional = mode == "pread"

    @property
    def split_reads(self) -> bool:
        """With ``read_mode="pread"``: split the reads of a scattered gather
        of 32 rows or more (a sampled batch) between the calling thread and
        a reader thread (:func:`offrl.dataset._split_reads.read_rows`; Linux
        with io_uring or AIO and two CPUs per process, else ignored). Measured in
        ``benchmarks/scale.py disk``: ``sample_transition_batch(256)`` ~15 %
        less wall time for ~20 % more CPU time. False: every read in the
        calling thread. A store and its split views share the setting."""
        return bool(self._files) and self._files[0].split

    @split_reads.setter
    def split_reads(self, split: bool) -> None:
        if not isinstance(split, (bool, np.bool_)):
            raise TypeError(f"split_reads must be a bool, got {type(split).__name__}")
        for file in self._files:
            file.split = bool(split)

    #: with ``read_mode="mmap"``: bytes of mapped column pages this process
    #: may keep resident between calls of :meth:`release_pages` (None, the
    #: default: released only before each training epoch). Random rows
    #: touch a page per column each, so over a long epoch the process's
    #: resident set grows towards the whole file: clean page-cache pages
    #: the kernel may drop at any time, but counted in its RSS. A limit
    #: bounds that at a price: every page is then faulted in again
    #: (measured in ``benchmarks/scale.py disk``: several times slower
    #: sampling than ``read_mode="pread"``, which maps nothing).
    resident_limit: Optional[int] = None

    def _touched(self, rows: int) -> None:
        """Count ``rows`` about to be read; release pages when over the limit."""
        limit = self.resident_limit
        if limit is None or self.read_mode == "pread":
            return
        self._touched_bytes = getattr(self, "_touched_bytes", 0) + rows * (len(self._maps) + 1) * TOUCH_BYTES
        if self._touched_bytes > limit:
            self.release_pages()

    def locate_transitions(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._touched(int(np.size(indices)))
        return super().locate_transitions(indices)

    def locate_steps(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._touched(int(np.size(indices)))
        return super().locate_steps(indices)

    def one_step_fields(self, rows: np.ndarray, next_rows: np.ndarray) -> Optional[tuple]:
        """Every field of a one-step transition batch at once, values checked.

        ``layout="rows"`` with ``read_mode="pread"``: the two records of
        each transition (its step and the next) in one positional read, the
        batch's reads split over two CPUs where :mod:`._split_reads` can
        (else all in this thread), and every field taken from them.
        ``read_mode="mmap"`` (both layouts): each file's size checked once
        (one ``fstat``), then each column gathered through its map at the
        steps and the next steps together. None (the picker gathers the
        columns) for the columns layout with ``"pread"``, a next row past
        the file's last record, or a batch too large to copy through the
        maps in one go."""
        files = self._files
        n = rows.shape[0]
        if not files or not n:
            return None
        records = files[0]
        if not records.positional:
            return self._mapped_fields(rows, next_rows)
        if type(records) is not RecordFile or records.rows < 2:
            return None
        size = records.row_bytes
        firsts = np.minimum(rows, records.rows - 2)
        current, following = rows - firsts, next_rows - firsts
        # both records inside each window (a negative position is huge as uint64), windows inside the file
        if (current.view(np.uint64) > 1).any() or (following.view(np.uint64) > 1).any() or int(firsts.min()) < 0:
            return None
        data = read_rows(records.fd, firsts * size, 2 * size, records.split)
        records._check(data, 2 * n, size)
        steps = data.view(self._maps[0].dtype)
        # every record read is checked (the records of the batch's steps and next steps, all rows of the file)
        for name, column in self._checked_columns():
            column._rule.check(steps[name], lambda: (firsts[:, None] + np.arange(2)).reshape(-1))
        base = np.arange(0, 2 * n, 2)
        current += base
        following += base
        observations = [steps[f"observations_{k}"][current] for k in range(len(self.observations))]
        next_observations = [steps[f"observations_{k}"][following] for k in range(len(self.observations))]
        actions = steps["actions"]
        return observations, actions[current], steps["rewards"][current], next_observations, actions[following]

    def _checked_columns(self) -> list[tuple[str, DiskColumn]]:
        """``(name, column)`` of the columns of a transition batch (no
        behaviour probabilities) that have a value rule."""
        columns = self._batch_columns
        if columns is None:
            named = self._named_columns()
            named.pop("behaviour_probabilities", None)
            columns = self._batch_columns = [(k, c) for k, c in named.items() if c._rule is not None]
        return columns

    def _mapped_fields(self, rows: np.ndarray, next_rows: np.ndarray) -> Optional[tuple]:
        """:meth:`one_step_fields` with ``read_mode="mmap"``."""
        n = rows.shape[0]
        both = np.concatenate((rows, next_rows))
        row_bytes = self._batch_row_bytes
        if row_bytes is None:
            columns = (*self.observations, self.actions, self.rewards)
            row_bytes = self._batch_row_bytes = sum(c.itemsize * math.prod(c.shape[1:]) for c in columns)
        if int(both.min()) < 0 or int(both.max()) >= self._files[0].rows or 2 * n * row_bytes > MAPPED_GATHER_BYTES:
            return None
        for file in self._files:
            file.check_size()  # the file still its opened size: the gathers below cannot meet a truncated map
        gathered = []
        for column in (*self.observations, self.actions, self.rewards):
            values = np.ndarray.__getitem__(column.view(np.ndarray), both)
            if column._rule is not None:
                column._rule.check(values, both)
            gathered.append(values)
        k = len(self.observations)
        actions = gathered[k]
        return ([o[:n] for o in gathered[:k]], actions[:n], gathered[k + 1][:n], [o[n:] for o in gathered[:k]],
                actions[n:])

    def check(self) -> None:
        """Raise :class:`DiskDatasetChangedError` when any file of the dataset
        (manifest or column) has a different size, modification time or
        inode than when it was opened, is now a link, or an opened file is
        shorter: another process rewrote it, and its rows must not be read
        silently."""
        for name, expected in self._stats.items():
            file = os.path.join(self.path, name)
            try:
                st = os.lstat(file)
            except OSError as e:
                raise DiskDatasetChangedError(
                    f"{file}: the disk dataset's file is gone since it was opened ({e.strerror})"
                ) from None
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                now = (f"now has {st.st_nlink} hard links" if stat.S_ISREG(st.st_mode)
                       else "is now a symbolic link" if stat.S_ISLNK(st.st_mode) else "is now not a regular file")
                raise DiskDatasetChangedError(
                    f"{file} {now} (it was a regular file with one name when the dataset was opened): another "
                    "process changed the dataset; reopen it"
                )
            found = (st.st_size, st.st_mtime_ns, st.st_ino)
            if found != expected:
                raise DiskDatasetChangedError(
                    f"{file} changed since the dataset was opened (size {expected[0]} -> {found[0]} bytes, "
                    f"mtime_ns {expected[1]} -> {found[1]}, inode {expected[2]} -> {found[2]}): another "
                    "process modified it; reopen the dataset to use the new data"
                )
        for file in self._files:  # the files opened (the names may have been given to others meanwhile)
            file.check_size()

    def release_pages(self) -> None:
        """Drop this process's mappings of column pages it has read (they
        stay in the page cache): keeps resident memory from growing with the
        pages random sampling has touched. Safe at any time: a later read
        maps the page again."""
        self._touched_bytes = 0
        for column in self._mapped_columns():
            mm = getattr(column, "_mmap", None)
            if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
                with contextlib.suppress(OSError, ValueError):
                    mm.madvise(mmap.MADV_DONTNEED)

    def _mapped_columns(self) -> list[np.memmap]:
        return list(self._maps)

    @property
    def nbytes(self) -> int:
        """Bytes of the mapped columns on disk."""
        return sum(int(c.nbytes) for c in self._mapped_columns())

    def __repr__(self) -> str:
        return f"DiskStore({self.path!r}, episodes={self.episode_count}, transitions={self.transition_count})"


def open_disk_dataset(path: Any) -> tuple[DiskStore, ActionSpace, int]:
    """Open the disk dataset at ``path``: ``(store, action_space, action_size)``.

    Every file is opened relative to the directory opened once, and only
    when it is a regular file with no other link (symbolic or hard links
    are refused); every declared size is checked against the files before
    the first one is mapped; the episode table is read into memory (its
    declared size checked against available memory first) and checked
    against the rows. A directory replaced while it is being opened (a
    writer dumping over it) is opened again: the store is the old dataset
    or the new one, never a mix.
    """
    path = os.path.abspath(os.fspath(path))
    if not os.path.exists(path):
        raise ValueError(f"{path} is not a directory: a disk dataset is a directory written by DiskDatasetWriter")
    for attempt in range(OPEN_ATTEMPTS):
        members = None
        try:
            members = DatasetMembers(path)
            return _open(members)
        except DirectoryReplaced:
            time.sleep(0.001 * (attempt + 1))  # the writer's two renames are microseconds apart
        finally:
            if members is not None:
                members.close()
    raise DiskDatasetChangedError(
        f"{path} was replaced by another process {OPEN_ATTEMPTS} times while it was being opened (a writer "
        "dumping over it?); open it again once that writer is done"
    )


def _open(members: DatasetMembers) -> tuple[DiskStore, ActionSpace, int]:
    path = members.path
    manifest, text = read_manifest(members)
    rows = int_field(path, manifest, "rows", 1)
    episodes = int_field(path, manifest, "episodes", 1)
    n_columns = int_field(path, manifest, "n_observation_columns", 1, MAX_OBSERVATION_COLUMNS)
    space_name = manifest.get("action_space")
    if space_name not in ("continuous", "discrete"):
        raise corrupt_dataset(path, f"'action_space' is {space_name!r}, expected 'continuous' or 'discrete'")
    action_space = ActionSpace.DISCRETE if space_name == "discrete" else ActionSpace.CONTINUOUS
    action_size = int_field(path, manifest, "action_size", 1, 2**24 if space_name == "discrete" else None)
    keys = manifest.get("observation_keys")
    if keys is not None:
        if (
            not isinstance(keys, list) or len(keys) != n_columns
            or not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys)
        ):
            raise corrupt_dataset(path, f"'observation_keys' is {keys!r}, expected {n_columns} distinct strings")
        keys = tuple(keys)

    names = [f"observations_{k}" for k in range(n_columns)] + ["actions", "rewards"]
    if isinstance(manifest.get("columns"), dict) and "behaviour_probabilities" in manifest["columns"]:
        names.append("behaviour_probabilities")
    layout = manifest.get("layout", "columns")
    if layout == "rows":
        specs, records_dtype = record_specs(members, manifest, names, rows)
    else:
        specs = {name: column_spec(members, manifest, name, rows) for name in names}
    table_specs = {}
    committed = 0
    for name, dtype_str in TABLE_COLUMNS:
        dtype, shape, _ = column_spec(members, manifest, name, episodes)
        if dtype.str != dtype_str or len(shape) != 1:
            raise corrupt_dataset(path, f"column {name!r} is {dtype.str} {list(shape)}, expected {dtype_str} [{episodes}]")
        committed += _safety.check_declared_size(path, name, shape, dtype, committed)
        table_specs[name] = (dtype, shape)
    # schema: the dtypes an in-memory store would hold
    for name in ("rewards",):
        dtype, shape, _ = specs[name]
        if dtype != np.float32 or shape[1:] != (1,):
            raise corrupt_dataset(path, f"rewards is {dtype} {list(shape)}, expected float32 [{rows}, 1]")
    dtype, shape, _ = specs["actions"]
    if action_space == ActionSpace.DISCRETE:
        if dtype != np.int64 or shape[1:] != (1,):
            raise corrupt_dataset(path, f"discrete actions are {dtype} {list(shape)}, expected int64 [{rows}, 1]")
    elif dtype != np.float32 or shape[1:] != (action_size,):
        raise corrupt_dataset(path, f"continuous actions are {dtype} {list(shape)}, expected float32 [{rows}, {action_size}]")
    for k in range(n_columns):
        dtype, shape, _ = specs[f"observations_{k}"]
        if dtype.kind == "f" and dtype != np.float32:
            raise corrupt_dataset(path, f"observations_{k} is {dtype}, expected float32 (or an integer type)")
        if len(shape) < 2:
            raise corrupt_dataset(path, f"observations_{k} has shape {list(shape)}, expected [{rows}, ...] with at least "
                                 "one dimension after the rows")
        if dtype.kind == "b":
            raise corrupt_dataset(path, f"observations_{k} is bool, expected float32 or an integer type")
    if "behaviour_probabilities" in specs:
        dtype, shape, _ = specs["behaviour_probabilities"]
        if dtype != np.float64 or len(shape) != 1:
            raise corrupt_dataset(path, f"behaviour_probabilities is {dtype} {list(shape)}, expected float64 [{rows}]")

    table = {}
    for name, (dtype, shape) in table_specs.items():
        raw = members.read(f"{name}.bin", "the column file")
        if dtype == np.bool_:
            bad = raw > 1
            if bad.any():
                i = int(np.argmax(bad))
                raise corrupt_dataset(path, f"{name}.bin byte {i} is {int(raw[i])}, expected 0 or 1 (a bool)")
        table[name] = raw.view(dtype)
    starts, ends = table["episode_starts"], table["episode_ends"]
    terminated, has_final = table["episode_terminated"], table["episode_has_final"]
    spans_end = ends + has_final
    if (
        starts[0] != 0 or np.any(ends <= starts) or np.any(starts[1:] != spans_end[:-1])
        or spans_end[-1] != rows or np.any(terminated & has_final)
    ):
        raise corrupt_dataset(path, f"its episode table does not match its {rows} rows")

    # every member is open (from the same directory) and checked: map and wrap them
    fields = field_names(n_columns, keys)
    maps: list[np.memmap] = []
    files: list[ColumnFile] = []

    def memory_map(name: str, dtype: np.dtype, shape: tuple[int, ...]) -> np.memmap:
        fd = members.opened[name][0]
        with os.fdopen(os.dup(fd), "rb") as f:  # the map holds its own descriptor of the same file
            return np.memmap(f, dtype=dtype, mode="r", shape=shape)

    records: Optional[RecordFile] = None
    if layout == "rows":
        maps.append(memory_map(RECORDS_FILE, records_dtype, (rows,)))
        records = RecordFile(members.take(RECORDS_FILE), os.path.join(path, RECORDS_FILE), rows,
                             records_dtype.itemsize)
        files.append(records)

    def column(name: str) -> np.ndarray:
        if layout == "rows":
            dtype, shape, offset = specs[name]
            # a strided view of the record map, read through the record file
            view = maps[0].view(np.ndarray)[name].view(DiskColumn)
            view._file = RecordField(records, offset, view.itemsize * int(np.prod(shape[1:], dtype=np.int64)))
            view._guard = records
            where = records.file
        else:
            dtype, shape, nbytes = specs[name]
            mapped = memory_map(f"{name}.bin", dtype, shape)
            maps.append(mapped)
            # a view of the map that skips np.memmap's subclass bookkeeping (measurable per batch)
            view = mapped.view(DiskColumn)
            where = os.path.join(path, f"{name}.bin")
            view._file = view._guard = ColumnFile(members.take(f"{name}.bin"), where, shape[0], nbytes // shape[0])
            files.append(view._file)
        view._rule = value_rule(where, fields[name], name, view.dtype, action_space, action_size)
        view._name = fields[name]
        return view

    store = DiskStore()
    store._maps = maps
    store.path = path
    store.set_columns(
        [column(f"observations_{k}") for k in range(n_columns)], column("actions"), column("rewards"),
        starts, ends, terminated, has_final,
        column("behaviour_probabilities") if "behaviour_probabilities" in specs else None,
        observation_keys=keys,
    )
    store._files = files
    for mapped in store._maps:
        mm = getattr(mapped, "_mmap", None)
        if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, "MADV_RANDOM"):
            with contextlib.suppress(OSError, ValueError):
                mm.madvise(mmap.MADV_RANDOM)  # random rows: no read-ahead
    store._stats = dict(members.stats)
    store._manifest_text = text
    store.values_checked = manifest.get("values_checked", False)
    return store, action_space, action_size


def subset_view(store: DiskStore, episode_indices: np.ndarray) -> DiskStore:
    """A :class:`DiskStore` over the same mapped files holding the given
    live episodes of ``store`` in that order (a split): nothing is read, only
    the in-memory episode table is new."""
    starts, ends, terminated, has_final = store.episode_table()
    idx = np.asarray(episode_indices, dtype=np.int64)
    view = DiskStore()
    view.path, view._stats, view._maps = store.path, dict(store._stats), list(store._maps)
    view._files = list(store._files)
    view._manifest_text, view.resident_limit = store._manifest_text, store.resident_limit
    view.values_checked = store.values_checked
    view.is_view = True
    view.set_columns(
        list(store.observations), store.actions, store.rewards, starts[idx], ends[idx], terminated[idx],
        has_final[idx], store.behaviour_probabilities, observation_keys=store.observation_signature.keys,
    )
    view._tail = store.tail
    return view


def before_epoch(dataset: Any) -> None:
    """Training's per-epoch hook: when ``dataset`` samples from a
    :class:`DiskStore`, check its files are unchanged (raising
    :class:`DiskDatasetChangedError` otherwise) and release mapped pages."""
    store = getattr(dataset, "buffer", None)
    if isinstance(store, DiskStore):
        store.check()
        store.release_pages()


def read_disk_dataset(path: Any) -> dict:
    """A disk dataset's columns copied into memory, in the layout
    ``offrl.dataset.io.read_dataset_file`` returns (for ``in_memory=True``):
    read by positional reads, every value checked (:meth:`DiskStore.verify`'s
    rules)."""
    store, space, size = open_disk_dataset(path)
    committed = 0
    for name, column in store._named_columns().items():
        committed += _safety.check_declared_size(store.path, name, column.shape, column.dtype, committed)
    starts, ends, terminated, has_final = store.episode_table()
    columns = store.read_fields(0, store.tail)
    behaviour = columns.get("behaviour_probabilities")
    return {
        "observations": [columns[f"observations_{k}"] for k in range(len(store.observations))],
        "actions": columns["actions"],
        "rewards": columns["rewards"],
        "behaviour_probabilities": behaviour,
        "episode_starts": starts.copy(), "episode_ends": ends.copy(),
        "episode_terminated": terminated.copy(), "episode_has_final": has_final.copy(),
        "observation_keys": store.observation_signature.keys,
        "action_space": space, "action_size": size,
    }
