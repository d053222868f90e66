"""Guards for reading files that may be hostile: sizes a file declares are
checked against the memory this machine has before anything is allocated,
HDF5 objects are opened only when they hold plain numbers stored in the file
itself, and paths are refused when they are not regular files (a named pipe
would make a reader wait forever).

Nothing here imports or calls anything a file names.
"""

from __future__ import annotations

import math
import os
import stat
import uuid
from typing import Any, Optional, Sequence

import numpy as np

__all__ = [
    "available_memory",
    "format_bytes",
    "check_regular_file",
    "check_declared_size",
    "checked_h5_dataset",
    "check_h5_dataset_id",
    "read_h5_dataset",
    "sibling_temporary_name",
    "load_json",
    "JSON_MAX_DEPTH",
    "DEFAULT_MAX_EXPANSION",
    "check_max_expansion",
    "h5_bytes",
    "check_expansion",
    "NUMERIC_KINDS",
]

#: deepest nesting of arrays and objects accepted in JSON read from a file
#: or a command line (offrl's own files nest fewer than 16 levels)
JSON_MAX_DEPTH = 64

#: numpy dtype kinds of plain numbers: bool, signed, unsigned, float.
NUMERIC_KINDS = "biuf"


def available_memory() -> Optional[int]:
    """Bytes of memory available to allocate now (Linux ``MemAvailable``,
    else free physical pages), or None when the system does not say."""
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def format_bytes(n: int) -> str:
    """``68 TB``, ``23 GB``, ``512 B``: decimal units, as disks are sold."""
    for unit, scale in (("EB", 10**18), ("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def _format_count(n: int) -> str:
    if n >= 10**6:
        exponent = int(math.floor(math.log10(n)))
        mantissa = n / 10**exponent
        return f"10^{exponent}" if abs(mantissa - 1) < 1e-9 else f"{mantissa:.3g}×10^{exponent}"
    return str(n)


def check_regular_file(path: Any, what: str = "file") -> str:
    """``path`` as a string, after checking it is a regular file (not a
    folder, a device or a named pipe, which would block a reader)."""
    name = os.fspath(path)
    try:
        mode = os.stat(name).st_mode
    except FileNotFoundError:
        raise ValueError(f"{name}: no such {what}") from None
    except OSError as e:
        raise ValueError(f"{name}: cannot read this {what} ({e.strerror})") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ValueError(f"{name} is {kind}, expected a regular {what}")
    return name


def check_declared_size(
    where: str, field: str, shape: Sequence[int], dtype: Any, extra_bytes: int = 0
) -> int:
    """Bytes needed to hold ``shape`` × ``dtype``; raises ValueError saying
    what was declared when that (plus ``extra_bytes`` already committed)
    exceeds the memory available now. Computed with Python ints: no overflow."""
    dtype = np.dtype(dtype)
    count = 1
    for s in shape:
        count *= int(s)
    needed = count * dtype.itemsize
    available = available_memory()
    if available is not None and needed + extra_bytes > available:
        rows = int(shape[0]) if len(shape) else 1
        width = count // rows if rows else 0
        declared = f"{_format_count(rows)} rows × {width} {dtype.name}" if len(shape) > 1 else (
            f"{_format_count(rows)} {dtype.name}"
        )
        more = f" (on top of {format_bytes(extra_bytes)} for the other fields)" if extra_bytes else ""
        raise ValueError(
            f"{where}: {field} declares {declared} = {format_bytes(needed)}{more}; "
            f"this machine has {format_bytes(available)} available"
        )
    return needed


def checked_h5_dataset(group: Any, key: str, where: str, field: Optional[str] = None) -> Any:
    """The h5py dataset ``group[key]`` after checking it is data stored in
    this file and holding plain numbers: a hard link (no external link to
    another file), not a virtual dataset, no external raw storage, a
    bool/int/float dtype (no strings, compound, variable-length, complex or
    object values), and, when stored uncompressed, as many bytes on disk
    as its shape declares (fewer means a truncated or forged file)."""
    import h5py
    from h5py import h5d

    field = field or key
    link = group.get(key, getlink=True)
    if link is None:
        raise ValueError(f"{where} has no {field!r}")
    if not isinstance(link, (h5py.HardLink, h5py.SoftLink)):
        raise ValueError(f"{where}: {field} is a link to another file; offrl reads only data stored in the file itself")
    try:
        node = group[key]
    except (KeyError, OSError, ValueError) as e:
        raise ValueError(f"{where}: {field} cannot be opened ({e})") from None
    if not isinstance(node, h5py.Dataset):
        raise ValueError(f"{where}: {field} is a group, expected a dataset")
    dcpl = node.id.get_create_plist()
    layout = dcpl.get_layout()
    if layout not in (h5d.COMPACT, h5d.CONTIGUOUS, h5d.CHUNKED):
        raise ValueError(f"{where}: {field} is a virtual dataset; offrl reads only data stored in the file itself")
    if dcpl.get_external_count() > 0:
        raise ValueError(f"{where}: {field} keeps its values in an external file; offrl reads only data stored in the file itself")
    dtype = node.dtype
    if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        what = {"c": "complex numbers", "S": "bytes", "U": "strings", "O": "variable-length or object values",
                "V": "compound or opaque records"}.get(dtype.kind, f"dtype {dtype}")
        raise TypeError(f"{where}: {field} holds {what} (dtype {dtype}), expected numbers (bool, int or float)")
    shape = node.shape
    if shape is None:
        raise ValueError(f"{where}: {field} has no shape (an empty dataspace)")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize if shape else dtype.itemsize
    if dcpl.get_nfilters() == 0 and declared > 0 and node.id.get_storage_size() < declared:
        raise ValueError(
            f"{where}: {field} declares shape {shape} {dtype.name} ({format_bytes(declared)}) but the file stores "
            f"only {format_bytes(node.id.get_storage_size())} of it: the file is truncated or forged"
        )
    return node


def check_h5_dataset_id(dataset: Any, where: str, field: str) -> None:
    """:func:`checked_h5_dataset`'s checks on a low-level ``h5py.h5d.DatasetID``
    (readers that walk many small datasets use those, for speed)."""
    from h5py import h5d

    dcpl = dataset.get_create_plist()
    if dcpl.get_layout() not in (h5d.COMPACT, h5d.CONTIGUOUS, h5d.CHUNKED):
        raise ValueError(f"{where}: {field} is a virtual dataset; offrl reads only data stored in the file itself")
    if dcpl.get_external_count() > 0:
        raise ValueError(f"{where}: {field} keeps its values in an external file; offrl reads only data stored in the file itself")
    dtype = dataset.dtype
    if dtype.kind not in NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError(f"{where}: {field} has dtype {dtype}, expected numbers (bool, int or float)")
    shape = dataset.shape
    if shape is None:
        raise ValueError(f"{where}: {field} has no shape (an empty dataspace)")
    declared = int(np.prod(shape, dtype=object)) * dtype.itemsize if shape else dtype.itemsize
    if dcpl.get_nfilters() == 0 and declared > 0 and dataset.get_storage_size() < declared:
        raise ValueError(
            f"{where}: {field} declares shape {shape} {dtype.name} ({format_bytes(declared)}) but the file stores "
            f"only {format_bytes(dataset.get_storage_size())} of it: the file is truncated or forged"
        )


def read_h5_dataset(
    group: Any, key: str, where: str, field: Optional[str] = None, min_ndim: int = 1, extra_bytes: int = 0
) -> np.ndarray:
    """Read ``group[key]`` after :func:`checked_h5_dataset` and a check that
    its declared size fits in memory; ``min_ndim`` refuses scalars."""
    field = field or key
    node = checked_h5_dataset(group, key, where, field)
    if len(node.shape) < min_ndim:
        raise ValueError(f"{where}: {field} has shape {node.shape}, expected at least {min_ndim} dimension(s) (steps first)")
    check_declared_size(where, field, node.shape, node.dtype, extra_bytes)
    try:
        return node[()]
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{where}: {field} cannot be read, the file is corrupt or truncated ({e})") from None


def sibling_temporary_name(path: Any, purpose: str = "tmp") -> str:
    """A fresh name next to ``path`` (same folder, so a rename is atomic),
    hidden and unpredictable: ``.<name>.<purpose>-<random>``."""
    path = os.path.abspath(os.fspath(path))
    directory, base = os.path.split(path.rstrip(os.sep))
    return os.path.join(directory, f".{base}.{purpose}-{uuid.uuid4().hex[:12]}")


def _json_depth(text: str) -> int:
    """Deepest nesting of ``[`` / ``{`` in ``text`` outside strings (a
    linear scan, no recursion: it runs before the parser can recurse)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif ch in "]}":
            depth -= 1
    return deepest


def load_json(text: Any, source: str, max_depth: int = JSON_MAX_DEPTH) -> Any:
    """``json.loads(text)`` for text from a file or a command line: a
    ``ValueError`` naming ``source`` for text that is not JSON, not UTF-8,
    or nested deeper than ``max_depth`` levels (instead of a
    ``RecursionError`` from the parser)."""
    import json

    if isinstance(text, (bytes, bytearray)):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as e:
            raise ValueError(f"{source}: not UTF-8 text (byte {e.start})") from None
    if not isinstance(text, str):
        raise TypeError(f"{source}: expected JSON text, got {type(text).__name__}")
    depth = _json_depth(text)
    if depth > max_depth:
        raise ValueError(f"{source}: JSON nested {depth} levels deep; at most {max_depth} are accepted")
    try:
        return json.loads(text)
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise ValueError(f"{source}: JSON nested too deeply") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{source}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except ValueError as e:  # e.g. an integer longer than Python's int-string conversion limit
        raise ValueError(f"{source}: not valid JSON ({e})") from None


# ------------------------------------------------ compressed HDF5 columns
#: the largest expansion (the bytes an HDF5 file's arrays declare over the
#: bytes it stores for them) a loader reads unless the caller raises it.
#: deflate (``gzip``), the strongest filter h5py reads without plugins,
#: cannot exceed about 1032x even on all-zero data; real datasets measure
#: 1-10x overall (see SECURITY.md). Only a forged file (chunks never
#: written, whose fill value a reader would expand) or a degenerate one
#: (all zeros) goes beyond it.
DEFAULT_MAX_EXPANSION = 1000.0

#: declared bytes below which any expansion is accepted (small flag and
#: table columns compress far beyond the bound harmlessly)
EXPANSION_FLOOR = 64 * 2**20


def check_max_expansion(max_expansion: Any) -> Optional[float]:
    """``max_expansion`` checked: a finite number >= 1, or None (no bound)."""
    if max_expansion is None:
        return None
    if isinstance(max_expansion, bool) or not isinstance(max_expansion, (int, float, np.integer, np.floating)):
        raise TypeError(f"max_expansion must be a number >= 1 or None, got {type(max_expansion).__name__}")
    value = float(max_expansion)
    if not (math.isfinite(value) and value >= 1):
        raise ValueError(f"max_expansion must be a finite number >= 1 or None (no bound), got {max_expansion!r}")
    return value


def h5_bytes(node: Any) -> tuple:
    """``(declared, stored)``: the bytes an h5py dataset (or low-level
    ``DatasetID``) holds once read, and the bytes the file stores for it.
    Reads metadata only."""
    dataset_id = node if hasattr(node, "get_storage_size") else node.id  # a DatasetID's .id is its number
    shape = node.shape
    itemsize = node.dtype.itemsize
    declared = (math.prod(int(s) for s in shape) if shape else 1) * itemsize if shape is not None else 0
    return declared, int(dataset_id.get_storage_size())


def check_expansion(where: str, nodes: Any, max_expansion: Any = DEFAULT_MAX_EXPANSION) -> int:
    """Refuse HDF5 arrays that would expand beyond ``max_expansion`` times
    the bytes the file stores for them, before any is read; returns the
    declared bytes. ``nodes``: ``(field, h5py dataset or DatasetID)``
    pairs, counted together (a bomb split over many columns is one bomb).
    Totals under :data:`EXPANSION_FLOOR` bytes always pass. The error states
    the expanded size, the stored size and how to raise the bound."""
    bound = check_max_expansion(max_expansion)
    declared = stored = 0
    worst: Optional[tuple] = None
    for field, node in nodes:
        d, s = h5_bytes(node)
        declared += d
        stored += s
        ratio = d / max(s, 1)
        if worst is None or ratio > worst[0]:
            worst = (ratio, field, node.shape, node.dtype, d, s)
    if worst is None or bound is None or declared <= EXPANSION_FLOOR or declared <= bound * stored:
        return declared
    ratio, field, shape, dtype, d, s = worst
    overall = "no bytes at all" if stored == 0 else f"{format_bytes(stored)} (a {declared / stored:,.0f}x expansion)"
    raise ValueError(
        f"{where}: its arrays expand to {format_bytes(declared)} but the file stores {overall}; most of it is "
        f"{field} (shape {tuple(shape)} {np.dtype(dtype).name}: {format_bytes(d)} from {format_bytes(s)} on disk). "
        f"offrl reads at most {bound:g}x unless asked: pass max_expansion=<ratio> (offrl --max-expansion) "
        "to read a file you trust"
    )
