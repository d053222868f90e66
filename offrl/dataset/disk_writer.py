"""Writing disk datasets (see :mod:`offrl.dataset.disk` for the layout):
:class:`DiskDatasetWriter` streams episodes into a new dataset directory,
:func:`dump_disk_dataset` writes a buffer's episodes in column chunks.
Both write into a hidden sibling directory renamed into place on success,
and check the free disk space before writing (when the size is known) and
as the data grows. A write that fails (a full disk, a file-size limit)
removes the hidden directory and raises an ``OSError`` naming the target
and the reason; a dataset already at the target is left as it was.

Values are checked before they are written (``add_episode`` as
``ReplayBuffer.append_episode`` checks them, ``dump_disk_dataset`` each
chunk of rows: finite floats, discrete actions in range, behaviour
probabilities valid) and the manifest records ``"values_checked": true``;
readers check rows as they read them all the same (a manifest proves
nothing about a file from elsewhere)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
from typing import Any, Iterable, Optional

import numpy as np

from .. import _safety
from .._version import __version__
from ..constants import ActionSpace
from ._disk_files import record_dtype
from .disk import DiskStore, NoSpaceError, check_free_space
from .disk_format import (
    DISK_FORMAT, LAYOUT_VERSIONS, LAYOUTS, MANIFEST, RECORDS_FILE, TABLE_COLUMNS, dtype_string, field_names,
    is_disk_dataset, value_rule,
)
from .episode import EpisodeBase
from .storage import ColumnStore, InfiniteBuffer

__all__ = ["DiskDatasetWriter", "dump_disk_dataset"]

_COPY_ROWS = 1 << 18  # rows copied per chunk when dumping a buffer
#: the record file is written through a buffer of this size: written in
#: episodes of ~100 kB, the page cache holds it in small folios, in which a
#: random 288-byte ``os.pread`` costs ~1.2 us against ~0.8 us in the 2 MB
#: folios that multi-megabyte writes get (measured on Linux 6.18, ext4: 256
#: reads 310 us against 196 us; what sampling right after writing pays).
#: 4 MB: the bytes held here plus the 8 MB written between free-space checks
#: stay below the 16 MB margin each check keeps free
_RECORD_WRITE_BUFFER = 4 << 20


def _sibling(path: str, purpose: str) -> str:
    """A hidden, unique sibling of ``path`` for ``purpose`` (its name kept
    within the 255 bytes a file name may have, however long ``path``'s is)."""
    name = _safety.sibling_temporary_name(path, purpose)
    base = os.path.basename(path)
    if len(os.fsencode(os.path.basename(name))) > 255:
        name = _safety.sibling_temporary_name(os.path.join(os.path.dirname(path), base[:64]), purpose)
    return name


def _write_array(f: Any, array: np.ndarray) -> None:
    """Append ``array``'s bytes (C order) to the open file ``f``: a failed
    write raises the system's ``OSError`` (``ndarray.tofile`` reports a
    short write with no errno)."""
    array = np.ascontiguousarray(array)
    if array.size:
        f.write(memoryview(array.reshape(-1)).cast("B"))


def _failure(path: str, error: OSError, kept: bool) -> OSError:
    """The ``OSError`` a failed write raises: the target, the reason, what is left."""
    reason = error.strerror or str(error) or type(error).__name__
    left = "the dataset already there is unchanged" if kept else "nothing was left there"
    return OSError(error.errno, f"writing the disk dataset {path} failed: {reason} ({left})")


def _row_spans(store: ColumnStore) -> list[tuple[int, int]]:
    """Row ranges holding the live episodes in table order, adjacent ones merged."""
    starts, ends, _, has_final = store.episode_table()
    spans: list[tuple[int, int]] = []
    for a, b in zip(starts.tolist(), (ends + has_final).tolist()):
        if spans and spans[-1][1] == a:
            spans[-1] = (spans[-1][0], b)
        else:
            spans.append((a, b))
    return spans


class DiskDatasetWriter:
    """Stream episodes into a new disk dataset at ``path``.

    ::

        with DiskDatasetWriter("data/") as writer:
            for episode in episodes:
                writer.add_episode(episode)

    Episodes are validated and converted exactly as
    ``ReplayBuffer.append_episode`` does (the first one sets the
    signatures), then appended to the column files of a hidden sibling
    directory; :meth:`close` (leaving the ``with`` block normally) writes
    the episode table and manifest and renames the directory to ``path``.
    An exception inside the block removes the partial directory.

    Args:
        path: the directory to create (must not exist unless ``overwrite``).
        action_space: as for ``append_episode``; by default integer actions
            are discrete.
        action_size: for discrete actions, the number of actions (default:
            the largest action written + 1).
        expected_bytes: bytes the data will take, when known: checked
            against the free disk space before anything is written.
        overwrite: replace an existing disk dataset at ``path`` on close.
        layout: ``"rows"`` (the default): one record file, each step's
            fields (observations, action, reward, behaviour probability)
            packed in one fixed-size record, so sampling a transition is
            one positional read; ``"columns"``: one file per field (the
            layout of offrl before the record file; schema version 1,
            readable by those versions). Both read back identically; see
            :mod:`offrl.dataset.disk`.
    """

    def __init__(
        self,
        path: Any,
        action_space: Optional[ActionSpace] = None,
        action_size: Optional[int] = None,
        expected_bytes: Optional[int] = None,
        overwrite: bool = False,
        layout: str = "rows",
    ) -> None:
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        self.layout = layout
        self.path = os.path.abspath(os.fspath(path))
        if os.path.exists(self.path) and not (overwrite and is_disk_dataset(self.path)):
            raise ValueError(
                f"path {self.path} already exists; choose a new directory"
                + ("" if overwrite else " or pass overwrite=True to replace a disk dataset")
            )
        parent = os.path.dirname(self.path)
        if not os.path.isdir(parent):
            existing = parent
            while not os.path.exists(existing) and os.path.dirname(existing) != existing:
                existing = os.path.dirname(existing)
            if existing == parent or not os.path.isdir(existing):
                raise ValueError(f"path {self.path}: {existing} is not a directory, so the dataset cannot be "
                                 "written there")
            raise ValueError(f"path {self.path}: its parent directory {parent} does not exist")
        if expected_bytes is not None:
            check_free_space(self.path, int(expected_bytes))
        self._action_space = None if action_space is None else ActionSpace.parse(action_space)
        self._declared_size = None if action_size is None else int(action_size)
        self._tmp = _sibling(self.path, "writing")
        try:
            os.mkdir(self._tmp)
        except OSError as e:
            raise _failure(self.path, e, os.path.exists(self.path)) from None
        self._files: dict[str, Any] = {}
        self._shapes: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        self._rows = 0
        self._table: dict[str, list] = {name: [] for name, _ in TABLE_COLUMNS}
        self._info: Any = None
        self._max_action = -1
        self._closed = False
        self._written_since_check = 0
        self._record: Optional[np.dtype] = None  # layout "rows": the record's dtype

    # ------------------------------------------------------------ helpers
    @contextlib.contextmanager
    def _writing(self) -> Any:
        """Around every write: an ``OSError`` discards what was written (the
        hidden directory) and is raised again naming the target."""
        try:
            yield
        except NoSpaceError:
            self.abort()
            raise
        except OSError as e:
            self.abort()
            raise _failure(self.path, e, os.path.exists(self.path)) from None

    def _start(self, fields: list[tuple[str, Any, tuple[int, ...]]]) -> None:
        """Open the data files for ``(name, dtype, row shape)`` fields."""
        if self.layout == "columns":
            for name, dtype, shape in fields:
                self._open_column(name, dtype, shape)
            return
        for name, dtype, shape in fields:
            self._shapes[name] = (np.dtype(dtype), tuple(shape))
        self._record = record_dtype(fields)
        self._files["records"] = open(os.path.join(self._tmp, RECORDS_FILE), "wb", buffering=_RECORD_WRITE_BUFFER)

    def _write(self, columns: dict[str, np.ndarray]) -> None:
        """Append rows of every field (``columns``: name -> rows, all fields)."""
        if self.layout == "columns":
            for name, column in columns.items():
                _write_array(self._files[name], column)
            return
        n = next(iter(columns.values())).shape[0]
        records = np.zeros(n, self._record)  # zeros: the padding bytes are written as 0
        for name, column in columns.items():
            records[name] = column
        self._files["records"].write(records.view(np.uint8))  # through the file's buffer (tofile bypasses it)

    def _add_behaviour_column(self) -> None:
        """Behaviour probabilities first seen after ``self._rows`` rows
        without them: NaN for those rows."""
        name = "behaviour_probabilities"
        if self.layout == "columns":
            f = self._open_column(name, np.dtype(np.float64), ())
            nan = np.full(min(self._rows, _COPY_ROWS), np.nan)
            for start in range(0, self._rows, _COPY_ROWS):
                _write_array(f, nan[: min(_COPY_ROWS, self._rows - start)])
            return
        # rows: rewrite the records written so far with the wider record, in chunks
        old = self._record
        self._shapes[name] = (np.dtype(np.float64), ())
        new = record_dtype([(k, d, sh) for k, (d, sh) in self._shapes.items()])
        check_free_space(self.path, self._rows * new.itemsize, "the records rewritten with behaviour probabilities")
        self._files["records"].close()
        file = os.path.join(self._tmp, RECORDS_FILE)
        wider = os.path.join(self._tmp, RECORDS_FILE + ".wider")
        with open(file, "rb") as src, open(wider, "wb") as dst:
            for start in range(0, self._rows, _COPY_ROWS):
                chunk = np.fromfile(src, dtype=old, count=min(_COPY_ROWS, self._rows - start))
                out = np.zeros(chunk.shape[0], new)
                for k in old.names:
                    out[k] = chunk[k]
                out[name] = np.nan
                _write_array(dst, out)
        os.replace(wider, file)
        self._record = new
        self._files["records"] = open(file, "ab", buffering=_RECORD_WRITE_BUFFER)

    def _open_column(self, name: str, dtype: np.dtype, row_shape: tuple[int, ...]) -> Any:
        self._shapes[name] = (np.dtype(dtype), tuple(row_shape))
        f = open(os.path.join(self._tmp, f"{name}.bin"), "wb")
        self._files[name] = f
        return f

    def _validate(self, episode: EpisodeBase) -> ColumnStore:
        """The episode in a one-episode in-memory store, converted to the
        dataset's dtypes (its signatures set by the first episode)."""
        from .replay_buffer import ReplayBuffer

        if self._info is None:
            size = self._declared_size
            if size is None and self._action_space == ActionSpace.DISCRETE:
                size = 2**24
            buffer = ReplayBuffer(InfiniteBuffer(), action_space=self._action_space, action_size=size)
            buffer.append_episode(episode, action_space=self._action_space, action_size=size)
            info = buffer.dataset_info
            if info.action_space == ActionSpace.DISCRETE and self._declared_size is None:
                # the size is the largest action of all episodes + 1, set on close
                info = dataclasses.replace(info, action_size=2**24)
            self._info = info
        else:
            info = self._info
            buffer = ReplayBuffer(
                InfiniteBuffer(), observation_signature=info.observation_signature,
                action_signature=info.action_signature, reward_signature=info.reward_signature,
                action_space=info.action_space, action_size=info.action_size,
            )
            buffer.append_episode(episode)
        return buffer.buffer  # type: ignore[return-value]

    def add_episode(self, episode: EpisodeBase) -> None:
        """Validate ``episode`` and append it to the files."""
        if self._closed:
            raise ValueError("this DiskDatasetWriter is closed")
        try:
            store = self._validate(episode)
        except (ValueError, TypeError) as e:
            raise type(e)(f"episode {len(self._table['episode_starts'])}: {e}") from None
        head, tail = store.head, store.tail
        columns = {f"observations_{k}": o[head:tail] for k, o in enumerate(store.observations)}
        columns["actions"] = store.actions[head:tail]
        columns["rewards"] = store.rewards[head:tail]
        behaviour = store.behaviour_probabilities
        if behaviour is not None:
            columns["behaviour_probabilities"] = behaviour[head:tail]
        n = tail - head
        nbytes = sum(int(c.nbytes) for c in columns.values())
        self._written_since_check += nbytes
        with self._writing():
            # checked again after every 8 MB written: less than the 16 MB margin each check keeps free
            if self._written_since_check >= (8 << 20) or not self._files:
                check_free_space(self.path, nbytes, "the next episode")
                self._written_since_check = 0
            if not self._files:
                self._start([(name, column.dtype, column.shape[1:]) for name, column in columns.items()])
            if "behaviour_probabilities" in columns and "behaviour_probabilities" not in self._shapes:
                self._add_behaviour_column()
            if "behaviour_probabilities" in self._shapes and "behaviour_probabilities" not in columns:
                column = np.full(n, np.nan)
                if store.episode_table()[3][0]:
                    column[-1] = 1.0  # a final-observation row
                columns["behaviour_probabilities"] = column
            self._write(columns)
        starts, ends, terminated, has_final = store.episode_table()
        self._table["episode_starts"].append(self._rows + int(starts[0]) - head)
        self._table["episode_ends"].append(self._rows + int(ends[0]) - head)
        self._table["episode_terminated"].append(bool(terminated[0]))
        self._table["episode_has_final"].append(bool(has_final[0]))
        if self._info.action_space == ActionSpace.DISCRETE:
            rows = slice(head, int(ends[0]))
            self._max_action = max(self._max_action, int(store.actions[rows].max()))
        self._rows += n

    def add_episodes(self, episodes: Iterable[EpisodeBase]) -> None:
        """:meth:`add_episode` for each of ``episodes``."""
        for episode in episodes:
            self.add_episode(episode)

    def close(self) -> str:
        """Finish the dataset and move it into place; returns its path."""
        if self._closed:
            return self.path
        if not self._table["episode_starts"]:
            self.abort()
            raise ValueError(f"no episodes were written to {self.path}: nothing to save")
        with self._writing():
            self._finish()
        self._closed = True
        return self.path

    def _finish(self) -> None:
        """Write the table and manifest, then rename the directory into place."""
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        info = self._info
        if info.action_space == ActionSpace.DISCRETE:
            size = self._declared_size if self._declared_size is not None else self._max_action + 1
        else:
            size = int(info.action_size)
        episodes = len(self._table["episode_starts"])
        columns = {}
        for name, (dtype, row_shape) in self._shapes.items():
            shape = [self._rows, *row_shape]
            if self.layout == "rows":
                columns[name] = {"dtype": dtype_string(dtype), "shape": shape,
                                 "offset": int(self._record.fields[name][1])}
            else:
                columns[name] = {"dtype": dtype_string(dtype), "shape": shape,
                                 "bytes": int(np.prod(shape, dtype=np.int64)) * dtype.itemsize}
        for name, dtype_str in TABLE_COLUMNS:
            array = np.asarray(self._table[name], dtype=np.dtype(dtype_str))
            with open(os.path.join(self._tmp, f"{name}.bin"), "wb") as f:
                _write_array(f, array)
            columns[name] = {"dtype": dtype_str, "shape": [episodes], "bytes": int(array.nbytes)}
        keys = info.observation_signature.keys
        manifest = {
            "format": DISK_FORMAT,
            "schema_version": LAYOUT_VERSIONS[self.layout],
            "offrl_version": __version__,
            "layout": self.layout,
            "action_space": info.action_space.name.lower(),
            "action_size": int(size),
            "rows": self._rows,
            "episodes": episodes,
            "n_observation_columns": len(info.observation_signature.dtype),
            "observation_keys": None if keys is None else list(keys),
            # every value was checked before it was written (readers check rows as they read them all the same)
            "values_checked": True,
            "columns": columns,
        }
        if self.layout == "rows":
            manifest["record_bytes"] = int(self._record.itemsize)
        with open(os.path.join(self._tmp, MANIFEST), "w", encoding="utf-8") as f:
            json.dump(manifest, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        old = None
        if os.path.exists(self.path):
            old = _sibling(self.path, "replaced")
            os.rename(self.path, old)
        try:
            os.rename(self._tmp, self.path)
        except OSError:
            if old is not None:
                os.rename(old, self.path)  # the old dataset back in place
            raise
        with contextlib.suppress(OSError):  # make the rename durable where the platform allows
            fd = os.open(os.path.dirname(self.path), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)

    def abort(self) -> None:
        """Discard everything written; ``path`` is left untouched."""
        for f in self._files.values():
            with contextlib.suppress(OSError, ValueError):
                f.close()
        self._files = {}
        shutil.rmtree(self._tmp, ignore_errors=True)
        self._closed = True

    def __enter__(self) -> "DiskDatasetWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"DiskDatasetWriter({self.path!r}, episodes={len(self._table['episode_starts'])}, rows={self._rows})"


def _store_of(dataset: Any) -> ColumnStore:
    store = getattr(dataset, "buffer", dataset)
    if not isinstance(store, ColumnStore):
        raise TypeError(
            f"dump_disk_dataset needs a buffer with columnar storage (InfiniteBuffer or FIFOBuffer), "
            f"got {type(store).__name__}"
        )
    return store


def _write_rules(store: ColumnStore, info: Any, path: str) -> dict:
    """The value rules of each stored field of an in-memory ``store``
    (checked on every chunk ``dump_disk_dataset`` writes)."""
    fields = field_names(len(store.observations), store.observation_signature.keys)
    columns = {f"observations_{k}": o for k, o in enumerate(store.observations)}
    columns.update(actions=store.actions, rewards=store.rewards)
    if store.behaviour_probabilities is not None:
        columns["behaviour_probabilities"] = store.behaviour_probabilities
    rules = {}
    for name, column in columns.items():
        rule = value_rule("the buffer being dumped", fields[name], name, column.dtype, info.action_space,
                          int(info.action_size), note=f"nothing was written to {path}")
        if rule is not None:
            rules[name] = rule
    return rules


def dump_disk_dataset(dataset: Any, path: Any, overwrite: bool = False, layout: str = "rows") -> str:
    """Write a ``ReplayBuffer``'s live episodes as a disk dataset at
    ``path`` in ``layout`` (see :class:`DiskDatasetWriter`), copying rows in
    chunks (a disk-backed source is never loaded whole). The bytes needed
    are checked against the free space before anything is written, the
    values of every chunk before it is written (``ValueError`` naming the
    field and the buffer's row), and a disk-backed source's files against
    the ones it opened (:meth:`DiskStore.check`: no file replaced or turned
    into a link since). Returns the path."""
    store = _store_of(dataset)
    info = dataset.dataset_info
    starts, ends, terminated, has_final = store.episode_table()
    if starts.size == 0:
        raise ValueError("cannot dump a buffer with no episodes")
    if store.has_open_episode:
        raise ValueError("an episode is being written with append(); call clip_episode() before dumping")
    on_disk = isinstance(store, DiskStore)
    if on_disk:
        store.check()
    sources = {f"observations_{k}": o for k, o in enumerate(store.observations)}
    sources["actions"] = store.actions
    sources["rewards"] = store.rewards
    if store.behaviour_probabilities is not None:
        sources["behaviour_probabilities"] = store.behaviour_probabilities
    rules = {} if on_disk else _write_rules(store, info, os.path.abspath(os.fspath(path)))
    row_bytes = sum(int(np.prod(c.shape[1:], dtype=np.int64)) * c.dtype.itemsize for c in sources.values())
    if layout == "rows":  # with the padding that aligns the fields
        row_bytes = record_dtype([(k, c.dtype, c.shape[1:]) for k, c in sources.items()]).itemsize
    spans = _row_spans(store)  # one span [head, tail) unless the store is a view (a split)
    rows = sum(b - a for a, b in spans)
    needed = row_bytes * rows + 18 * int(starts.size)
    writer = DiskDatasetWriter(path, expected_bytes=needed, overwrite=overwrite, layout=layout)
    try:
        with writer._writing():
            writer._start([(name, column.dtype, column.shape[1:]) for name, column in sources.items()])
            for first, last in spans:
                for a in range(first, last, _COPY_ROWS):
                    b = min(a + _COPY_ROWS, last)
                    if on_disk:  # read by positional reads, every value checked
                        chunk = store.read_fields(a, b)
                    else:
                        chunk = {name: column[a:b] for name, column in sources.items()}
                        for name, rule in rules.items():
                            rule.check(chunk[name], a)
                    writer._write(chunk)
        sizes = ends + has_final - starts
        new_starts = np.cumsum(sizes) - sizes
        writer._info = info
        writer._rows = rows
        writer._table = {
            "episode_starts": list(new_starts), "episode_ends": list(new_starts + ends - starts),
            "episode_terminated": list(terminated), "episode_has_final": list(has_final),
        }
        writer._declared_size = int(info.action_size)
        return writer.close()
    except BaseException:
        writer.abort()
        raise
