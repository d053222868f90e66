"""The disk dataset format (:mod:`offrl.dataset.disk` describes it): its
names and limits, the manifest's rules, and the directory's files opened
relative to the directory (:class:`DatasetMembers`). :func:`~offrl.dataset.disk.open_disk_dataset`
builds a :class:`~offrl.dataset.disk.DiskStore` on them;
:mod:`offrl.dataset.disk_writer` writes by the same names and rules.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

import numpy as np

from .. import _safety
from .._version import __version__
from ..constants import ActionSpace
from ._disk_files import ValueRule, open_member, read_exact

__all__ = [
    "DISK_FORMAT", "DISK_SCHEMA_VERSION", "LAYOUT_VERSIONS", "LAYOUTS", "RECORDS_FILE", "MANIFEST", "TABLE_COLUMNS",
    "MAX_OBSERVATION_COLUMNS", "OPEN_ATTEMPTS", "DirectoryReplaced", "DatasetMembers", "corrupt_dataset",
    "dtype_string", "is_disk_dataset", "read_manifest", "int_field", "column_spec", "record_specs", "field_names",
    "value_rule",
]

DISK_FORMAT = "offrl.disk_dataset"
#: the newest schema version this offrl writes and reads; a ``layout="columns"``
#: dataset is written as version 1 (readable by offrls before the rows layout)
DISK_SCHEMA_VERSION = 2
#: schema version of each layout
LAYOUT_VERSIONS = {"columns": 1, "rows": 2}
LAYOUTS = tuple(LAYOUT_VERSIONS)
#: the record file of ``layout="rows"`` (a fixed name, never taken from the manifest)
RECORDS_FILE = "records.bin"
_MAX_RECORD_BYTES = 1 << 24
MANIFEST = "manifest.json"
_MAX_MANIFEST_BYTES = 1 << 20
MAX_OBSERVATION_COLUMNS = 1024
#: dtypes a column may have (little-endian or single-byte): no objects, no strings
_ALLOWED_DTYPES = {
    "|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8",
}
TABLE_COLUMNS = (("episode_starts", "<i8"), ("episode_ends", "<i8"), ("episode_terminated", "|b1"), ("episode_has_final", "|b1"))


def dtype_string(dtype: Any) -> str:
    return np.dtype(dtype).newbyteorder("<").str if np.dtype(dtype).itemsize > 1 else np.dtype(dtype).str


# ------------------------------------------------------------- disk space
def is_disk_dataset(path: Any) -> bool:
    """Whether ``path`` is a directory holding a disk dataset's manifest."""
    try:
        return os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST))
    except TypeError:
        return False


def corrupt_dataset(path: str, message: str) -> ValueError:
    return ValueError(f"{path} is not a valid offrl disk dataset: {message}")


class DirectoryReplaced(Exception):
    """The dataset's directory was replaced (or removed) while it was being
    opened: a writer dumping over it. Opening starts again."""


#: times opening starts again when the directory is replaced meanwhile
OPEN_ATTEMPTS = 8


class DatasetMembers:
    """The files of one dataset directory opened by :func:`open_member`
    relative to that directory (all from the same directory, whatever
    renames happen meanwhile), their stats, and the fds not handed over
    to a :class:`ColumnFile` yet (closed by :meth:`close`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.dir_fd: Optional[int] = None
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
        if os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY"):
            try:
                self.dir_fd = os.open(path, flags)
            except FileNotFoundError:
                raise DirectoryReplaced() from None
            except NotADirectoryError:
                raise ValueError(f"{path} is not a directory: a disk dataset is a directory written by "
                                 "DiskDatasetWriter") from None
        elif not os.path.isdir(path):  # pragma: no cover - platforms without openat
            raise DirectoryReplaced()
        self.opened: dict[str, tuple[int, os.stat_result]] = {}
        self.stats: dict[str, tuple[int, int, int]] = {}

    def open(self, name: str, what: str) -> tuple[int, os.stat_result]:
        """``(fd, stat)`` of the member ``name`` (``what``: how a message
        calls it when it is missing)."""
        if name not in self.opened:
            try:
                fd, st = open_member(self.dir_fd, self.path, name)
            except FileNotFoundError:
                if self.replaced():
                    raise DirectoryReplaced() from None
                raise corrupt_dataset(self.path, f"{what} {name} is missing") from None
            self.opened[name] = (fd, st)
            self.stats[name] = (st.st_size, st.st_mtime_ns, st.st_ino)
        return self.opened[name]

    def take(self, name: str) -> int:
        """The fd of ``name``, no longer closed by :meth:`close`."""
        return self.opened.pop(name)[0]

    def replaced(self) -> bool:
        """Whether ``path`` no longer names the directory opened."""
        if self.dir_fd is None:  # pragma: no cover - platforms without openat
            return not os.path.isdir(self.path)
        try:
            now = os.stat(self.path)
        except OSError:
            return True
        opened = os.fstat(self.dir_fd)
        return (now.st_ino, now.st_dev) != (opened.st_ino, opened.st_dev)

    def read(self, name: str, what: str) -> np.ndarray:
        """All the bytes of the member ``name`` (uint8)."""
        fd, st = self.open(name, what)
        return read_exact(fd, st.st_size, 0, os.path.join(self.path, name))

    def close(self) -> None:
        for fd, _ in self.opened.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.opened.clear()
        if self.dir_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.dir_fd)
            self.dir_fd = None


def read_manifest(members: DatasetMembers) -> tuple[dict, str]:
    path = members.path
    _, st = members.open(MANIFEST, "its manifest")
    if st.st_size > _MAX_MANIFEST_BYTES:
        raise corrupt_dataset(path, f"{MANIFEST} is {st.st_size} bytes, more than the {_MAX_MANIFEST_BYTES} a manifest may have")
    raw = members.read(MANIFEST, "its manifest").tobytes()
    try:
        manifest = _safety.load_json(raw, MANIFEST)
    except ValueError as e:
        raise corrupt_dataset(path, f"{e}; it may be truncated or edited by hand") from None
    text = raw.decode("utf-8")
    if not isinstance(manifest, dict):
        raise corrupt_dataset(path, f"{MANIFEST} holds a {type(manifest).__name__}, expected a JSON object")
    if manifest.get("format") != DISK_FORMAT:
        raise corrupt_dataset(path, f"{MANIFEST} 'format' is {manifest.get('format')!r}, expected {DISK_FORMAT!r}")
    version = manifest.get("schema_version")
    if isinstance(version, bool) or version not in LAYOUT_VERSIONS.values():
        raise ValueError(
            f"{path}: disk dataset schema version {version!r}; this offrl "
            f"({__version__}) reads versions {sorted(LAYOUT_VERSIONS.values())}"
        )
    layout = manifest.get("layout", "columns")
    if not isinstance(layout, str) or layout not in LAYOUT_VERSIONS or LAYOUT_VERSIONS[layout] != version:
        raise corrupt_dataset(path, f"{MANIFEST} 'layout' is {layout!r} with schema version {version}, expected "
                             + " or ".join(f"{k!r} with {v}" for k, v in LAYOUT_VERSIONS.items()))
    checked = manifest.get("values_checked", False)
    if not isinstance(checked, bool):
        raise corrupt_dataset(path, f"{MANIFEST} 'values_checked' is {checked!r}, expected true or false")
    return manifest, text


def int_field(path: str, manifest: dict, key: str, low: int, high: Optional[int] = None) -> int:
    value = manifest.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        bound = f"an int >= {low}" + ("" if high is None else f" and <= {high}")
        raise corrupt_dataset(path, f"{MANIFEST} field {key!r} is {value!r}, expected {bound}")
    return value


def _declared_field(path: str, manifest: dict, key: str, rows: int, what: str) -> tuple[dict, np.dtype, list]:
    """A column's (``what``: "column") or record field's ("field") manifest
    entry with its dtype and shape checked: ``(entry, dtype, shape)``."""
    columns = manifest.get("columns")
    if not isinstance(columns, dict) or not isinstance(columns.get(key), dict):
        raise corrupt_dataset(path, f"{MANIFEST} has no entry for {what} {key!r} under 'columns'")
    spec = columns[key]
    dtype_str = spec.get("dtype")
    if not isinstance(dtype_str, str) or dtype_str not in _ALLOWED_DTYPES:
        raise corrupt_dataset(path, f"{what} {key!r} has dtype {dtype_str!r}, expected one of {sorted(_ALLOWED_DTYPES)}")
    shape = spec.get("shape")
    if (
        not isinstance(shape, list) or not 1 <= len(shape) <= 8
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in shape)
    ):
        raise corrupt_dataset(path, f"{what} {key!r} has shape {shape!r}, expected a list of 1 to 8 non-negative ints")
    if shape[0] != rows:
        raise corrupt_dataset(path, f"{what} {key!r} declares {shape[0]} rows, the manifest {rows}")
    if any(s == 0 for s in shape[1:]):
        raise corrupt_dataset(path, f"{what} {key!r} has shape {shape!r}: a row of zero width (every dimension after "
                             "the rows must be at least 1)")
    return spec, np.dtype(dtype_str), shape


def column_spec(members: DatasetMembers, manifest: dict, key: str, rows: int) -> tuple[np.dtype, tuple[int, ...], int]:
    """A column's declared dtype and shape, checked, and its byte size."""
    path = members.path
    spec, dtype, shape = _declared_field(path, manifest, key, rows, "column")
    count = 1
    for s in shape:
        count *= s
    nbytes = count * dtype.itemsize
    declared = spec.get("bytes")
    if declared != nbytes:
        raise corrupt_dataset(path, f"column {key!r} declares {declared!r} bytes, its dtype and shape make {nbytes}")
    _, st = members.open(f"{key}.bin", "the column file")
    if st.st_size != nbytes:
        raise corrupt_dataset(
            path, f"{key}.bin holds {st.st_size} bytes, the manifest declares {nbytes} "
            f"({'truncated' if st.st_size < nbytes else 'extra data'})"
        )
    return dtype, tuple(shape), nbytes


def record_specs(members: DatasetMembers, manifest: dict, names: list[str], rows: int) -> tuple[dict, np.dtype]:
    """``layout="rows"``: each field's declared dtype, shape and offset,
    checked (aligned, inside the record, not overlapping), the record's
    dtype, and the record file's size against ``rows`` records."""
    path = members.path
    record_bytes = int_field(path, manifest, "record_bytes", 1, _MAX_RECORD_BYTES)
    specs: dict[str, tuple[np.dtype, tuple[int, ...], int]] = {}
    for key in names:
        spec, dtype, shape = _declared_field(path, manifest, key, rows, "field")
        offset = spec.get("offset")
        count = 1
        for s in shape[1:]:
            count *= s
        if (
            isinstance(offset, bool) or not isinstance(offset, int) or offset < 0
            or offset % dtype.itemsize or offset + count * dtype.itemsize > record_bytes
        ):
            raise corrupt_dataset(path, f"field {key!r} has offset {offset!r}: expected a multiple of {dtype.itemsize} "
                                 f"with its {count * dtype.itemsize} bytes inside the {record_bytes}-byte record")
        specs[key] = (dtype, tuple(shape), offset)
    spans = sorted((o, o + d.itemsize * int(np.prod(sh[1:], dtype=np.int64)), k) for k, (d, sh, o) in specs.items())
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        if start < end:
            raise corrupt_dataset(path, f"fields {first!r} and {second!r} overlap in the record")
    align = max(d.itemsize for d, _, _ in specs.values())
    if record_bytes % align:
        raise corrupt_dataset(path, f"'record_bytes' is {record_bytes}, expected a multiple of {align} (the largest item size)")
    dtype = np.dtype({
        "names": names, "formats": [(specs[k][0], specs[k][1][1:]) if len(specs[k][1]) > 1 else specs[k][0]
                                     for k in names],
        "offsets": [specs[k][2] for k in names], "itemsize": record_bytes,
    })
    _, st = members.open(RECORDS_FILE, "the record file")
    size, expected = st.st_size, rows * record_bytes
    if size != expected:
        raise corrupt_dataset(
            path, f"{RECORDS_FILE} holds {size} bytes, the manifest declares {rows} records of {record_bytes} bytes "
            f"= {expected} ({'truncated' if size < expected else 'extra data'})"
        )
    return specs, dtype


def field_names(n_columns: int, keys: Optional[tuple[str, ...]]) -> dict[str, str]:
    """How messages call each stored field: ``observations`` (one
    column), ``observations[1]`` (tuples), ``observations['pos']`` (dicts)."""
    out = {}
    for k in range(n_columns):
        out[f"observations_{k}"] = (
            "observations" if n_columns == 1 else f"observations[{keys[k]!r}]" if keys is not None
            else f"observations[{k}]"
        )
    out.update(actions="actions", rewards="rewards", behaviour_probabilities="behaviour_probabilities")
    return out


def value_rule(where: str, field: str, name: str, dtype: np.dtype, action_space: ActionSpace,
               action_size: int, note: str = ValueRule.FILE_NOTE) -> Optional[ValueRule]:
    """The rule the values of the stored field ``name`` are checked against
    as they are read or written (None: integer observations, where any
    value is valid)."""
    if name == "behaviour_probabilities":
        kind = "probability" if action_space == ActionSpace.DISCRETE else "density"
        return ValueRule(where, field, kind, note=note)
    if name == "actions" and action_space == ActionSpace.DISCRETE:
        return ValueRule(where, field, "index", action_size, note=note)
    if dtype.kind == "f":
        return ValueRule(where, field, "finite", note=note)
    return None
