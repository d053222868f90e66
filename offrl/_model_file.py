"""The bytes of a model file: a safetensors file holding offrl's JSON.

Format version 2 (``algo.save``, ``save_model``, training checkpoints) is one
safetensors file: 8 bytes giving the header's length, the header (JSON), then
the tensors' raw bytes. The header's ``__metadata__`` holds three strings:

* ``format``: ``"offrl.model"``; ``format_version``: ``"2"``;
* ``offrl``: the model's payload as JSON (``offrl_version``, ``params``,
  ``grad_step``, the non-tensor parts of optimizer and scheduler states, a
  checkpoint's ``resume`` record), each tensor replaced by
  ``{"$tensor": name}``, its name the dotted path to it
  (``modules.q_function.head.weight``, ``optimizers.optim.state.0.exp_avg``).
  Python values JSON lacks are tagged: ``{"$tuple": [...]}`` and
  ``{"$dict": [[key, value], ...]}`` for a dict with keys other than text
  (an optimizer's state by parameter index).

Reading never unpickles: offrl checks the header itself before anything is
allocated (its length against a cap, its JSON nesting, every tensor's
dtype, shape and byte range, the ranges tiling the data exactly, the total
against the memory available), then reads each tensor's bytes into a tensor
of its own.

Format version 1 was a ``torch.save`` archive of the same payload, read with
``torch.load(weights_only=True)``. That unpickler had code-execution flaws
(CVE-2025-32434, fixed in torch 2.6; CVE-2026-24747, fixed in torch 2.10), so
version-1 files are read only on torch 2.10 or later and refused, with how to
convert them, on older torch.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ._atomic import atomic_write
from ._safety import available_memory, format_bytes, load_json

__all__ = ["write_payload", "read_payload", "weights_only_is_safe", "MAX_HEADER_BYTES", "SAFE_WEIGHTS_ONLY_TORCH"]

MODEL_FORMAT = "offrl.model"
#: the header of an offrl model file is a few kB to a few hundred kB (a large
#: transformer's optimizer parameter lists); a longer one is refused unread
MAX_HEADER_BYTES = 16 * 2**20
#: the first torch release whose ``torch.load(weights_only=True)`` has no known code-execution flaw
SAFE_WEIGHTS_ONLY_TORCH = (2, 10)
#: a tensor has at most this many dimensions in a model file
MAX_DIMS = 32
_ZIP_MAGIC = b"PK\x03\x04"  # a torch.save archive (format version 1)
_METADATA_KEYS = ("format", "format_version", "offrl")
#: safetensors dtype names offrl reads, their torch dtypes and sizes in bytes
_DTYPES = {"BOOL": ("bool", 1), "U8": ("uint8", 1), "I8": ("int8", 1), "I16": ("int16", 2), "I32": ("int32", 4),
           "I64": ("int64", 8), "F16": ("float16", 2), "BF16": ("bfloat16", 2), "F32": ("float32", 4),
           "F64": ("float64", 8)}


class _Refused(ValueError):
    """The container is not what offrl writes (the message says where)."""


# ------------------------------------------------------------------ writing
def _tensor_name(path: List[str], taken: Dict[str, Any]) -> str:
    name = ".".join(path) or "tensor"
    if name not in taken:
        return name
    n = 2
    while f"{name}#{n}" in taken:
        n += 1
    return f"{name}#{n}"


def _encode(value: Any, path: List[str], tensors: Dict[str, Any], storages: set) -> Any:
    """``value`` as JSON, its tensors moved into ``tensors`` by name."""
    import torch

    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.layout != torch.strided:
            raise TypeError(f"cannot write the {tensor.layout} tensor at {'.'.join(path)} into a model file")
        if tensor.device.type != "cpu":
            tensor = tensor.cpu()
        if not tensor.is_contiguous():
            tensor = tensor.contiguous()
        storage = tensor.untyped_storage().data_ptr()
        if storage in storages and tensor.numel():  # safetensors writes no tensors sharing memory
            tensor = tensor.clone()
            storage = tensor.untyped_storage().data_ptr()
        storages.add(storage)
        name = _tensor_name(path, tensors)
        tensors[name] = tensor
        return {"$tensor": name}
    if value is None or isinstance(value, (bool, str, int, float)):
        return value
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, tuple):
        return {"$tuple": [_encode(v, path + [str(i)], tensors, storages) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, path + [str(i)], tensors, storages) for i, v in enumerate(value)]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: _encode(v, path + [k], tensors, storages) for k, v in value.items()}
        pairs = []
        for key, item in value.items():
            if isinstance(key, bool) or not isinstance(key, (int, str)):
                raise TypeError(f"cannot write the {type(key).__name__} key {key!r} at {'.'.join(path)} into a model file")
            pairs.append([key, _encode(item, path + [str(key)], tensors, storages)])
        return {"$dict": pairs}
    raise TypeError(f"cannot write a {type(value).__name__} at {'.'.join(path)} into a model file")


def _canonical_header(data: bytes) -> bytes:
    """The same safetensors bytes with the header's entries in one fixed
    order (``__metadata__`` first, its keys sorted, then the tensors by
    their offsets): safetensors writes them from a hash map, in an order
    that changes from one process or call to the next, so two saves of the
    same algorithm would differ. The data section is unchanged (each
    tensor's offsets are in its entry); the header keeps its 8-byte
    padding."""
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    ordered: Dict[str, Any] = {}
    if "__metadata__" in header:
        ordered["__metadata__"] = dict(sorted(header.pop("__metadata__").items()))
    ordered.update(sorted(header.items(), key=lambda kv: (kv[1]["data_offsets"], kv[0])))
    return _header_bytes(ordered) + data[8 + n:]


def _header_bytes(header: Dict[str, Any]) -> bytes:
    """A safetensors header: its length (8 bytes, little-endian), then the
    JSON text padded with spaces to a multiple of 8 bytes."""
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text


def write_payload(payload: Dict[str, Any], fname: Any) -> None:
    """Write a model payload (``format``, ``format_version``, then any of
    offrl's entries: JSON values and tensors) to ``fname`` atomically, or to
    a binary file object (``io.BytesIO``, an open file: d3rlpy's
    ``impl.save_model(f)``) at its position."""
    from safetensors.torch import save

    body = {k: v for k, v in payload.items() if k not in ("format", "format_version")}
    tensors: Dict[str, Any] = {}
    record = json.dumps(_encode(body, [], tensors, set()), allow_nan=True, separators=(",", ":"))
    metadata = {"format": str(payload.get("format", MODEL_FORMAT)),
                "format_version": str(payload.get("format_version")), "offrl": record}
    if tensors:
        data = _canonical_header(save(tensors, metadata=metadata))  # written by Python: a failed write is an OSError
    else:
        # safetensors 0.4.0 writes a header that is not JSON ('{},"__metadata__":...') for no tensors
        data = _header_bytes({"__metadata__": dict(sorted(metadata.items()))})
    if callable(getattr(fname, "write", None)) and not isinstance(fname, (str, bytes)):
        fname.write(data)
        return

    def write(tmp: str) -> None:
        with open(tmp, "wb") as f:
            f.write(data)

    atomic_write(fname, write)


# ------------------------------------------------------------------ torch versions
def weights_only_is_safe(version: Optional[str] = None) -> bool:
    """Whether ``torch.load(weights_only=True)`` of torch ``version`` (the
    installed one by default) has no known code-execution flaw: releases
    from 2.10 on (pre-releases of 2.10 may predate the fix)."""
    if version is None:
        import torch

        version = torch.__version__
    match = re.match(r"(\d+)\.(\d+)(?:\.\d+)?(.*)", str(version))
    if match is None:
        return False
    release = (int(match[1]), int(match[2]))
    if release != SAFE_WEIGHTS_ONLY_TORCH:
        return release > SAFE_WEIGHTS_ONLY_TORCH
    return re.match(r"\.?(a|b|rc|dev)", match[3]) is None


def _read_v1(name: str) -> Dict[str, Any]:
    import torch

    if not weights_only_is_safe():
        raise ValueError(
            f"{name} is a torch archive (offrl model format version 1), read only with torch.load(weights_only=True); "
            f"torch {torch.__version__}'s weights_only unpickler has known code-execution flaws (CVE-2025-32434, fixed "
            f"in torch 2.6; CVE-2026-24747, fixed in torch 2.10), so offrl reads version-1 files only with torch >= "
            f"2.10. To convert it, load it where torch >= 2.10 is installed and save it again "
            f"(offrl.load_learnable(path).save(path)): format version 2 needs no unpickler and loads with any torch"
        )
    try:
        payload = torch.load(name, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types here (unpickling refused, bad zip, EOF ...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{name} is not a readable offrl model file (corrupt, truncated, or saved by another program "
            f"with objects that are not plain tensors): {first}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != MODEL_FORMAT:
        raise ValueError(f"{name} is not an offrl model file: it has no {MODEL_FORMAT!r} format mark")
    if payload.get("format_version") != 1:
        raise ValueError(f"{name} is a torch archive with model format version {payload.get('format_version')!r}; "
                         f"torch archives hold format version 1")
    return payload


# ------------------------------------------------------------------ reading
def _where(path: Tuple[Any, ...]) -> str:
    """``modules['q_function']['head.weight']`` for a path of keys."""
    return str(path[0]) + "".join(f"[{k!r}]" for k in path[1:]) if path else "the record"


def _references(value: Any, path: Tuple[Any, ...], found: Dict[str, str]) -> None:
    """Check the tags of the decoded JSON record and collect its tensor
    references (name -> where) into ``found``."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            _references(item, path + (i,), found)
        return
    if not isinstance(value, dict):
        return
    tags = [k for k in value if k.startswith("$")]
    if not tags:
        for key, item in value.items():
            _references(item, path + (key,), found)
        return
    if len(value) != 1 or tags[0] not in ("$tensor", "$tuple", "$dict"):
        raise _Refused(f"{_where(path)} is an unknown tagged value {sorted(value)[:4]}")
    tag, item = tags[0], value[tags[0]]
    if tag == "$tensor":
        if not isinstance(item, str):
            raise _Refused(f"{_where(path)} names a tensor with a {type(item).__name__}; expected its name")
        if item in found:
            raise _Refused(f"{_where(path)} and {found[item]} both name the tensor {item!r}")
        found[item] = _where(path)
    elif tag == "$tuple":
        if not isinstance(item, list):
            raise _Refused(f"{_where(path)} is a tuple of a {type(item).__name__}; expected a list")
        for i, element in enumerate(item):
            _references(element, path + (i,), found)
    else:
        if not isinstance(item, list):
            raise _Refused(f"{_where(path)} is a dict of a {type(item).__name__}; expected [key, value] pairs")
        keys = set()
        for pair in item:
            if (not isinstance(pair, list) or len(pair) != 2 or isinstance(pair[0], bool)
                    or not isinstance(pair[0], (int, str)) or pair[0] in keys):
                raise _Refused(f"{_where(path)} holds {str(pair)[:60]}; expected distinct [int or text key, value] pairs")
            keys.add(pair[0])
            _references(pair[1], path + (pair[0],), found)


def _decode(value: Any, tensors: Dict[str, Any]) -> Any:
    """The Python value of a record :func:`_references` checked."""
    if isinstance(value, list):
        return [_decode(v, tensors) for v in value]
    if not isinstance(value, dict):
        return value
    if "$tensor" in value:
        return tensors[value["$tensor"]]
    if "$tuple" in value:
        return tuple(_decode(v, tensors) for v in value["$tuple"])
    if "$dict" in value:
        return {key: _decode(item, tensors) for key, item in value["$dict"]}
    return {k: _decode(v, tensors) for k, v in value.items()}


def _tensor_entries(header: Dict[str, Any], references: Dict[str, str], data_bytes: int) -> List[Tuple]:
    """``(begin, end, name, dtype name, shape, where)`` for every tensor of
    the header, in file order, after checking that each is one the record
    names, of a real dtype offrl reads, its byte range the size its shape
    declares, and the ranges tiling the ``data_bytes`` after the header."""
    names = set(header) - {"__metadata__"}
    unnamed = sorted(names - set(references))
    if unnamed:
        raise _Refused(f"it holds tensors the offrl record does not name: {unnamed[:5]}")
    missing = sorted(set(references) - names)
    if missing:
        raise _Refused(f"{references[missing[0]]} names the tensor {missing[0]!r}, which the file does not hold")
    entries = []
    for name in sorted(names):
        where, spec = references[name], header[name]
        if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
            raise _Refused(f"{where}: its header entry is not a tensor's dtype, shape and data_offsets")
        dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
        if dtype in ("C64", "C128"):
            raise _Refused(f"{where} holds complex numbers (dtype {dtype}); expected real numbers")
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise _Refused(f"{where} has dtype {str(dtype)[:20]!r}; offrl model files hold {sorted(_DTYPES)}")
        if (not isinstance(shape, list) or len(shape) > MAX_DIMS
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
            raise _Refused(f"{where} has shape {str(shape)[:60]}; expected at most {MAX_DIMS} non-negative ints")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise _Refused(f"{where} has data_offsets {str(offsets)[:60]}; expected [begin, end] with 0 <= begin <= end")
        declared = math.prod(shape) * _DTYPES[dtype][1]
        if offsets[1] - offsets[0] != declared:
            raise _Refused(f"{where} declares shape {tuple(shape)} of {dtype} ({format_bytes(declared)}), but its "
                           f"data_offsets span {format_bytes(offsets[1] - offsets[0])}")
        if offsets[1] > data_bytes:
            raise _Refused(f"{where} declares bytes {offsets[0]} to {offsets[1]} of the tensor data, but the file holds "
                           f"{data_bytes} (truncated, or a declared size that is not there)")
        entries.append((offsets[0], offsets[1], name, dtype, tuple(shape), where))
    entries.sort(key=lambda e: (e[0], e[1]))
    position = 0
    for begin, end, _, _, _, where in entries:
        if begin != position:
            what = "overlaps the tensor before it" if begin < position else f"leaves bytes {position} to {begin} unused"
            raise _Refused(f"{where}'s data_offsets [{begin}, {end}] {what}")
        position = end
    if position != data_bytes:
        raise _Refused(f"its tensors end at byte {position} of the data, but the file holds {data_bytes} after the header")
    return entries


def _read_tensors(f: Any, entries: List[Tuple], data_start: int) -> Dict[str, Any]:
    import torch

    tensors = {}
    for begin, end, name, dtype, shape, where in entries:
        raw = torch.empty(end - begin, dtype=torch.uint8)
        if end > begin:
            f.seek(data_start + begin)
            if f.readinto(memoryview(raw.numpy())) != end - begin:
                raise _Refused(f"{where}: the file ended before its bytes (truncated while reading?)")
        if dtype == "BOOL" and end > begin and int(raw.max()) > 1:
            raise _Refused(f"{where} is a bool tensor holding bytes other than 0 and 1")
        tensors[name] = raw.view(getattr(torch, _DTYPES[dtype][0])).reshape(shape)
    return tensors


def _read_v2(f: Any, name: str, size: int) -> Dict[str, Any]:
    prefix = f.read(8)
    if len(prefix) != 8:
        raise _Refused(f"it has {size} bytes, fewer than a safetensors header's 8-byte length")
    header_bytes = int.from_bytes(prefix, "little")
    if header_bytes > MAX_HEADER_BYTES:
        raise _Refused(f"it declares a header of {format_bytes(header_bytes)}; at most "
                       f"{format_bytes(MAX_HEADER_BYTES)} are accepted")
    if header_bytes > size - 8:
        raise _Refused(f"it declares a header of {header_bytes} bytes, but holds {size - 8} after the length (truncated?)")
    try:
        header = load_json(f.read(header_bytes), "its safetensors header")
    except ValueError as e:
        raise _Refused(str(e)) from None
    if not isinstance(header, dict):
        raise _Refused("its safetensors header is not a JSON object")
    metadata = header.get("__metadata__")
    if (not isinstance(metadata, dict) or metadata.get("format") != MODEL_FORMAT):
        raise ValueError(f"{name} is not an offrl model file: it has no {MODEL_FORMAT!r} format mark")
    if set(metadata) != set(_METADATA_KEYS) or not all(isinstance(v, str) for v in metadata.values()):
        raise _Refused(f"its header metadata is {sorted(map(str, metadata))[:6]}; expected the texts {list(_METADATA_KEYS)}")
    if metadata["format_version"] != "2":
        raise ValueError(f"{name} has model format version {metadata['format_version'][:20]!r}; this offrl reads "
                         f"version 2 (and version 1, torch archives, with torch >= 2.10)")
    try:
        record = load_json(metadata["offrl"], "its offrl record")
    except ValueError as e:
        raise _Refused(str(e)) from None
    if not isinstance(record, dict):
        raise _Refused("its offrl record is not a JSON object")
    for key in record:
        if key in _METADATA_KEYS or key.startswith("$"):
            raise _Refused(f"its offrl record holds {key!r}, which it may not")
    references: Dict[str, str] = {}
    _references(record, (), references)
    data_start = 8 + header_bytes
    entries = _tensor_entries(header, references, size - data_start)
    free = available_memory()
    if free is not None and size - data_start > free:
        raise ValueError(f"{name} holds {format_bytes(size - data_start)} of tensors; this machine has "
                         f"{format_bytes(free)} available")
    payload = _decode(record, _read_tensors(f, entries, data_start))
    return {"format": MODEL_FORMAT, "format_version": 2, **payload}


def read_payload(fname: Any) -> Dict[str, Any]:
    """A model file's payload (``format``, ``format_version`` and its
    entries, tensors on the CPU): the container checked, not yet the
    entries (see :func:`offrl.serialization.read_model_file`). Raises
    ``ValueError`` naming the file."""
    name = os.fspath(fname)
    try:
        f = open(name, "rb")
    except OSError as e:
        raise ValueError(f"{name}: cannot read this model file ({e.strerror or e})") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if f.read(4) == _ZIP_MAGIC:
            return _read_v1(name)
        f.seek(0)
        try:
            return _read_v2(f, name, size)
        except _Refused as e:
            raise ValueError(f"{name} is not a readable offrl model file: {e}") from None
        except ValueError as e:
            message = str(e)
            raise ValueError(message if message.startswith(name) else f"{name}: {message}") from None
