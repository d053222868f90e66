"""HDF5 files of replay buffers and datasets.

Layout (schema version 1): root attributes ``format = "offrl.dataset"``,
``schema_version``, ``offrl_version``, ``action_space``, ``action_size``,
``n_observation_columns``; datasets ``observations_<k>`` (one per tuple
element), ``actions``, ``rewards`` (rows, including one final-observation row
after each truncated episode that has one), and the episode table
``episode_starts``, ``episode_ends``, ``episode_terminated``,
``episode_has_final``. Files hold arrays only; nothing in them is executed.

Files written by d3rlpy 2.1+'s ``dump`` (root datasets ``version = "2.1"``,
``columns``, ``num_episodes``, and per episode ``observations_<i>`` (or
``observations_<i>_<j>`` for tuple observations), ``actions_<i>``,
``rewards_<i>``, ``terminated_<i>``) are read too, with the same checks.

Schema 1.1 (root attribute ``schema_minor_version = 1``) adds the optional
dataset ``behaviour_probabilities`` (float64, one per row; NaN where a step
has none). Readers accept any 1.x file: a 1.0 file (no minor attribute) loads
without behaviour probabilities, and a 1.0 reader ignores the extra dataset.

Schema 1.2 (``schema_minor_version = 2``) adds the optional root attribute
``observation_keys`` for dict observations: a JSON list of the key names of
``observations_<k>`` in column order (read as data with
``offrl._safety.load_json`` and checked to be distinct valid key names, one
per column: see :mod:`offrl.dataset.keys`). Files without it (1.0, 1.1)
load as array or tuple observations, as before.
"""

from __future__ import annotations

import io
import json
import os
from typing import Any, BinaryIO, Callable, Optional, Sequence, Union

import numpy as np

from .. import _safety
from .._atomic import atomic_write
from .._version import __version__
from ..constants import ActionSpace
from . import checks
from .keys import check_observation_keys
from .episode import EpisodeBase

__all__ = [
    "FORMAT",
    "SCHEMA_VERSION",
    "SCHEMA_MINOR_VERSION",
    "dump_store",
    "dump_episodes",
    "read_dataset_file",
    "describe_dataset_file",
    "describe_h5_sizes",
    "dataset_file_format",
    "check_discrete_action_size",
    "MAX_DISCRETE_ACTION_SIZE",
]

FORMAT = "offrl.dataset"
SCHEMA_VERSION = 1
SCHEMA_MINOR_VERSION = 2

PathOrFile = Union[str, os.PathLike, BinaryIO]


def _file_name(f: Any) -> str:
    if isinstance(f, (str, os.PathLike)):
        return os.fspath(f)
    return str(getattr(f, "name", f"<{type(f).__name__}>"))


def _write_h5(f: PathOrFile, fill: Callable[[Any], None]) -> None:
    """Write an HDF5 file whose content reaches ``f`` only when complete:
    ``fill(h5)`` writes the content into an open h5py file.

    A path goes through :func:`offrl._atomic.atomic_write` (a temporary
    beside the target, fsynced and renamed; a write the system refuses, such
    as the file-size limit or a full disk, is a ``FileWriteError`` naming
    the target, which stays as it was); a file object receives the finished
    bytes in one write.
    """
    import h5py

    if isinstance(f, (str, os.PathLike)):
        def write(tmp: str) -> None:
            with h5py.File(tmp, "w") as h5:
                fill(h5)

        atomic_write(f, write)
    else:
        memory = io.BytesIO()
        with h5py.File(memory, "w") as h5:
            fill(h5)
        f.write(memory.getbuffer())
        if hasattr(f, "flush"):
            f.flush()


def _write(
    f: PathOrFile,
    observations: Sequence[np.ndarray],
    actions: np.ndarray,
    rewards: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    terminated: np.ndarray,
    has_final: np.ndarray,
    info: Any,
    compression: Optional[str],
    behaviour_probabilities: Optional[np.ndarray] = None,
) -> None:
    def fill(h5: Any) -> None:
        h5.attrs["format"] = FORMAT
        h5.attrs["schema_version"] = SCHEMA_VERSION
        h5.attrs["schema_minor_version"] = SCHEMA_MINOR_VERSION
        h5.attrs["offrl_version"] = __version__
        h5.attrs["action_space"] = info.action_space.name.lower()
        h5.attrs["action_size"] = int(info.action_size)
        h5.attrs["n_observation_columns"] = len(observations)
        keys = getattr(info.observation_signature, "keys", None)
        if keys is not None:
            h5.attrs["observation_keys"] = json.dumps(list(keys))
        for k, column in enumerate(observations):
            h5.create_dataset(f"observations_{k}", data=column, compression=compression)
        h5.create_dataset("actions", data=actions, compression=compression)
        h5.create_dataset("rewards", data=rewards, compression=compression)
        h5.create_dataset("episode_starts", data=np.asarray(starts, dtype=np.int64))
        h5.create_dataset("episode_ends", data=np.asarray(ends, dtype=np.int64))
        h5.create_dataset("episode_terminated", data=np.asarray(terminated, dtype=bool))
        h5.create_dataset("episode_has_final", data=np.asarray(has_final, dtype=bool))
        if behaviour_probabilities is not None:
            h5.create_dataset(
                "behaviour_probabilities",
                data=np.asarray(behaviour_probabilities, dtype=np.float64),
                compression=compression,
            )

    _write_h5(f, fill)


def dump_store(store: Any, info: Any, f: PathOrFile, compression: Optional[str] = None) -> None:
    """Write the live rows and episodes of a columnar store."""
    if getattr(store, "is_view", False):  # a split of a disk dataset: its episodes are not one row range
        return dump_episodes(store.episodes, info, f, compression)
    head, tail = store.head, store.tail
    starts, ends, terminated, has_final = store.episode_table()
    behaviour = store.behaviour_probabilities
    if isinstance(f, (str, os.PathLike)) and compression is None:  # the size is known: refuse a full disk up front
        from .disk import check_free_space

        columns = [*store.observations, store.actions, store.rewards] + ([] if behaviour is None else [behaviour])
        check_free_space(f, sum(c[0].nbytes for c in columns) * (tail - head) + 18 * len(starts))
    _write(
        f,
        [o[head:tail] for o in store.observations],
        store.actions[head:tail],
        store.rewards[head:tail],
        starts - head,
        ends - head,
        terminated,
        has_final,
        info,
        compression,
        None if behaviour is None else behaviour[head:tail],
    )


def dump_episodes(episodes: Sequence[EpisodeBase], info: Any, f: PathOrFile, compression: Optional[str] = None) -> None:
    """Write episodes from any buffer (user buffers, mixed buffers)."""
    from .storage import InfiniteBuffer

    store = InfiniteBuffer()
    for episode in episodes:
        obs, actions, rewards, final, behaviour = checks.episode_columns(episode, store)
        if not store.is_initialized:
            from .episode import get_observation_signature
            from .signature import Signature

            keys = getattr(episode, "observation_keys", None) or checks.observation_keys(episode.observations)
            store.initialize(
                get_observation_signature(obs, keys),
                Signature(dtype=[actions.dtype], shape=[actions.shape[1:]]),
                Signature(dtype=[np.float32], shape=[(1,)]),
            )
        store.add_episode(obs, actions, rewards, bool(episode.terminated), final, behaviour)
    if not store.is_initialized:
        raise ValueError("cannot dump a buffer with no episodes")
    dump_store(store, info, f, compression)


#: the largest discrete action_size a file may declare (a Q-network head of
#: that many outputs is already far beyond what offrl's algorithms can learn).
MAX_DISCRETE_ACTION_SIZE = 2**24


def check_discrete_action_size(
    action_size: Any, where: str, actions: Optional[np.ndarray] = None, field: str = "the discrete action_size",
    first_row: int = 0,
) -> int:
    """The one rule every dataset file reader (offrl and d3rlpy HDF5, D4RL,
    Minari, tables) applies to a discrete action space: ``action_size``
    (declared, or inferred as the largest action index + 1) is an int in
    ``[1, MAX_DISCRETE_ACTION_SIZE]``. With the ``actions`` it was inferred
    from, the error names the first action beyond the bound (as
    ``actions[first_row + i] is ...``, after ``where: `` when ``where`` is
    given)."""
    prefix = f"{where}: " if where else ""
    if isinstance(action_size, bool) or not isinstance(action_size, (int, np.integer)):
        raise ValueError(f"{prefix}{field} is {action_size!r}, expected an integer")
    size = int(action_size)
    if 1 <= size <= MAX_DISCRETE_ACTION_SIZE:
        return size
    if actions is not None and size > MAX_DISCRETE_ACTION_SIZE:
        flat = np.asarray(actions).reshape(-1)
        beyond = flat >= MAX_DISCRETE_ACTION_SIZE
        if beyond.any():
            i = int(np.argmax(beyond))
            raise ValueError(
                f"{prefix}actions[{first_row + i}] is {flat[i].item()!r}, beyond the {MAX_DISCRETE_ACTION_SIZE} discrete actions "
                f"offrl reads from a file (indices 0..{MAX_DISCRETE_ACTION_SIZE - 1})"
            )
    raise ValueError(f"{prefix}{field} is {size}, expected an integer in [1, {MAX_DISCRETE_ACTION_SIZE}]")


_MAX_OBSERVATION_COLUMNS = 1024
_TABLE_KEYS = ("episode_starts", "episode_ends", "episode_terminated", "episode_has_final")


def _offrl_layout_nodes(h5: Any, name: str, n_columns: int) -> dict[str, Any]:
    """The checked datasets of an offrl-layout file by key (observation
    columns, actions, rewards, the episode table, then behaviour
    probabilities where present); none is read."""
    keys = [f"observations_{k}" for k in range(n_columns)] + ["actions", "rewards", *_TABLE_KEYS]
    missing = [k for k in keys if k not in h5]
    if missing:
        raise ValueError(f"{name} is not a complete offrl dataset file: it is missing {missing}")
    if "behaviour_probabilities" in h5:
        keys.append("behaviour_probabilities")
    return {k: _safety.checked_h5_dataset(h5, k, name) for k in keys}


def _d3rlpy_layout_counts(h5: Any, name: str) -> tuple[int, int]:
    """A d3rlpy-layout file's episode count (checked against the datasets it
    stores) and observation columns (0: one array observation per episode)."""
    n_episodes = _small_h5_value(h5, "num_episodes", name, 1)
    if isinstance(n_episodes, bool) or not isinstance(n_episodes, int) or n_episodes < 1:
        raise ValueError(f"{name}: num_episodes is {n_episodes!r}, expected a positive integer")
    if n_episodes * len(_D3RLPY_COLUMNS) > len(h5):
        raise ValueError(f"{name} declares {n_episodes} episodes but stores only {len(h5)} datasets")
    n_columns = 0
    while f"observations_0_{n_columns}" in h5 and n_columns < _MAX_OBSERVATION_COLUMNS:
        n_columns += 1
    return n_episodes, n_columns


def _observation_keys(h5: Any, name: str, n_columns: int) -> Optional[tuple[str, ...]]:
    """The dict observation key names a 1.2 file stores (None when absent)."""
    raw = _attribute(h5, "observation_keys", name)
    if raw is None:
        return None
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", errors="replace")
    if not isinstance(raw, str) or len(raw) > 1_000_000:
        raise ValueError(f"{name}: the attribute 'observation_keys' must be a JSON list of strings")
    source = f"{name}: the attribute 'observation_keys'"
    keys = _safety.load_json(raw, source)  # a ValueError naming the file: not JSON, or nested too deeply
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise ValueError(f"{name}: the attribute 'observation_keys' must be a JSON list of strings, got {raw[:80]!r}")
    if len(keys) != n_columns:
        raise ValueError(
            f"{name}: the attribute 'observation_keys' names {len(keys)} keys, the file has {n_columns} observation columns"
        )
    return check_observation_keys(keys, source)


def _attribute(h5: Any, key: str, name: str) -> Any:
    """A root attribute as a Python value (None when absent); strings may be
    stored as bytes. Arrays and other records are refused."""
    try:
        if key not in h5.attrs:
            return None
        value = h5.attrs[key]
    except (OSError, TypeError, ValueError) as e:
        raise ValueError(f"{name}: the attribute {key!r} cannot be read ({e})") from None
    if isinstance(value, np.ndarray):
        if value.shape != ():
            raise ValueError(f"{name}: the attribute {key!r} is an array of shape {value.shape}, expected one value")
        value = value[()]
    if isinstance(value, (bytes, np.bytes_)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{name}: the attribute {key!r} is not UTF-8 text") from None
    if isinstance(value, np.generic):
        return value.item()
    return value


def _int_attribute(h5: Any, key: str, name: str, low: int, high: Optional[int] = None) -> int:
    value = _attribute(h5, key, name)
    if value is None:
        raise ValueError(f"{name} is not a complete offrl dataset file: it has no {key!r} attribute")
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: the attribute {key!r} is {value!r}, expected an integer")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name}: the attribute {key!r} is {value}, expected an integer {bound}")
    return value


def _open_h5(f: PathOrFile, name: str) -> Any:
    import h5py

    if isinstance(f, (str, os.PathLike)):
        _safety.check_regular_file(f, "offrl dataset file")  # a named pipe would block the open forever
    try:
        return h5py.File(f, "r")
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{name} is not an offrl dataset file: it is not HDF5 or it is truncated ({e})") from None


def read_dataset_file(f: PathOrFile, max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION) -> dict:
    """Read and check a file written by ``dump`` (or by d3rlpy 2.1+'s).

    Raises ``ValueError`` (``TypeError`` for a column of non-numbers) naming
    the file and the field when it is not an offrl dataset, is truncated or
    corrupt, declares more data than fits in memory or than it stores, has
    an unknown schema version, or has compressed arrays that would expand
    to more than ``max_expansion`` times the bytes the file stores for them
    (None: no bound; see :func:`offrl._safety.check_expansion`). Nothing
    named in the file is imported or called, and a path that is not a
    regular file is refused before opening.
    """
    _safety.check_max_expansion(max_expansion)
    name = _file_name(f)
    h5 = _open_h5(f, name)
    with h5:
        found = _attribute(h5, "format", name)
        if found is None and _is_d3rlpy_layout(h5):
            data = _read_d3rlpy_layout(h5, name, max_expansion)
            _check_layout(name, data, data["action_space"], data["action_size"])
            return data
        if found != FORMAT:
            raise ValueError(
                f"{name} is not an offrl dataset file: its 'format' attribute is {found!r}, expected {FORMAT!r}"
            )
        version = _int_attribute(h5, "schema_version", name, 0)
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"{name} has dataset schema version {version}; this offrl "
                f"({__version__}) reads version {SCHEMA_VERSION}.x"
            )
        n_columns = _int_attribute(h5, "n_observation_columns", name, 1, _MAX_OBSERVATION_COLUMNS)
        observation_keys = _observation_keys(h5, name, n_columns)
        space_name = _attribute(h5, "action_space", name)
        try:
            action_space = ActionSpace.parse(str(space_name))
        except (KeyError, ValueError, TypeError):
            raise ValueError(
                f"{name}: the attribute 'action_space' is {space_name!r}, expected 'continuous' or 'discrete'"
            ) from None
        if action_space == ActionSpace.BOTH:
            raise ValueError(f"{name}: the attribute 'action_space' is 'both', expected 'continuous' or 'discrete'")
        action_size = _int_attribute(h5, "action_size", name, 1)
        if action_space == ActionSpace.DISCRETE:
            check_discrete_action_size(action_size, name, field="the attribute 'action_size'")

        nodes = _offrl_layout_nodes(h5, name, n_columns)
        keys = list(nodes)
        committed = 0
        for key in keys:  # every declared size checked before the first read
            committed += _safety.check_declared_size(name, key, nodes[key].shape, nodes[key].dtype, committed)
        _safety.check_expansion(name, nodes.items(), max_expansion)
        data = {}
        for key in keys:
            min_ndim = 2 if key in ("actions", "rewards") else 1
            data[key] = _safety.read_h5_dataset(h5, key, name, min_ndim=min_ndim)
    data["observations"] = [data.pop(f"observations_{k}") for k in range(n_columns)]
    _check_layout(name, data, action_space, action_size)
    data["observation_keys"] = observation_keys
    data["action_space"] = action_space
    data["action_size"] = action_size
    return data


# ------------------------------------------------ metadata only (offrl info)
def describe_h5_sizes(nodes: Any) -> str:
    """``"1.4 MB in memory, 9.2 kB on disk (152x)"`` for ``(field, dataset)``
    pairs: shapes and storage sizes only, nothing read."""
    declared = stored = 0
    for _, node in nodes:
        d, s = _safety.h5_bytes(node)
        declared, stored = declared + d, stored + s
    ratio = "no bytes stored" if stored == 0 else f"{declared / stored:,.3g}x"
    return f"{_safety.format_bytes(declared)} in memory, {_safety.format_bytes(stored)} on disk ({ratio})"


def _signature_text(nodes: Sequence[Any], keys: Optional[Sequence[str]] = None) -> str:
    parts = [f"{node.dtype.name}{tuple(node.shape[1:])}" for node in nodes]
    if keys is not None and len(keys) == len(parts):
        return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(keys, parts)) + "}"
    return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"


def describe_dataset_file(f: PathOrFile, max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION) -> dict:
    """What an offrl (or d3rlpy 2.1+) dataset file holds, from its metadata:
    format, episode and step counts, per-step dtypes and shapes, action
    space and the size in memory against the size on disk. No per-step
    array is read (only offrl's small per-episode table, after its size and
    expansion are checked), so a file that would expand to gigabytes is
    described in milliseconds. Raises ``ValueError`` naming the file for a
    file that is not one."""
    name = _file_name(f)
    h5 = _open_h5(f, name)
    with h5:
        found = _attribute(h5, "format", name)
        if found is None and _is_d3rlpy_layout(h5):
            return _describe_d3rlpy_layout(h5, name)
        if found != FORMAT:
            raise ValueError(
                f"{name} is not an offrl dataset file: its 'format' attribute is {found!r}, expected {FORMAT!r}"
            )
        version = _int_attribute(h5, "schema_version", name, 0)
        minor = _attribute(h5, "schema_minor_version", name) or 0
        n_columns = _int_attribute(h5, "n_observation_columns", name, 1, _MAX_OBSERVATION_COLUMNS)
        keys = _observation_keys(h5, name, n_columns)
        space = str(_attribute(h5, "action_space", name))
        action_size = _int_attribute(h5, "action_size", name, 1)
        nodes = _offrl_layout_nodes(h5, name, n_columns)
        table_nodes = [(k, nodes[k]) for k in _TABLE_KEYS]
        for key, node in table_nodes:
            _safety.check_declared_size(name, key, node.shape, node.dtype)
        _safety.check_expansion(name, table_nodes, max_expansion)
        table = {k: _safety.read_h5_dataset(h5, k, name) for k in _TABLE_KEYS}
        sizes = np.asarray(table["episode_ends"], dtype=np.int64) - np.asarray(table["episode_starts"], dtype=np.int64)
        ended = np.asarray(table["episode_terminated"]).astype(bool) | np.asarray(table["episode_has_final"]).astype(bool)
        if sizes.shape != ended.shape:
            raise ValueError(f"{name} is corrupt: the episode table columns have different lengths")
        return {
            "format": f"offrl dataset, schema {version}.{minor} (written by offrl {_attribute(h5, 'offrl_version', name)})",
            "episodes": int(sizes.shape[0]),
            "terminated_episodes": int(np.count_nonzero(np.asarray(table["episode_terminated"]))),
            "transitions": int(np.maximum(sizes - ~ended, 0).sum()),
            "steps": int(sizes.sum()),
            "observation_signature": _signature_text([nodes[f"observations_{k}"] for k in range(n_columns)], keys),
            "action_signature": _signature_text([nodes["actions"]]),
            "reward_signature": _signature_text([nodes["rewards"]]),
            "action_space": space,
            "action_size": action_size,
            "behaviour_probabilities": "behaviour_probabilities" in nodes,
            "size": describe_h5_sizes(nodes.items()),
        }


def _describe_d3rlpy_layout(h5: Any, name: str) -> dict:
    """:func:`describe_dataset_file` for d3rlpy 2.1+'s layout: shapes and the
    per-episode ``terminated`` scalars only."""
    n_episodes, n_columns = _d3rlpy_layout_counts(h5, name)
    nodes, steps, transitions, terminated = [], 0, 0, 0
    for i in range(n_episodes):
        obs_keys = [f"observations_{i}_{k}" for k in range(n_columns)] if n_columns else [f"observations_{i}"]
        keys = obs_keys + [f"actions_{i}", f"rewards_{i}"]
        missing = [k for k in keys + [f"terminated_{i}"] if k not in h5]
        if missing:
            raise ValueError(f"{name} is not a complete d3rlpy dataset file: it is missing {missing}")
        episode = [(k, _safety.checked_h5_dataset(h5, k, name)) for k in keys]
        nodes += episode
        rows = int(episode[-2][1].shape[0]) if episode[-2][1].shape else 0
        flag = bool(_small_h5_value(h5, f"terminated_{i}", name, 1))
        steps, terminated = steps + rows, terminated + flag
        transitions += rows if flag else max(rows - 1, 0)
    first = nodes[: max(n_columns, 1) + 2]
    actions = first[-2][1]
    discrete = actions.dtype.kind in "iu"
    return {
        "format": f"d3rlpy dataset, version {_small_h5_value(h5, 'version', name, 1)}",
        "episodes": n_episodes,
        "terminated_episodes": terminated,
        "transitions": transitions,
        "steps": steps,
        "observation_signature": _signature_text([node for _, node in first[:-2]]),
        "action_signature": _signature_text([actions]),
        "reward_signature": _signature_text([first[-1][1]]),
        "action_space": "discrete" if discrete else "continuous",
        "action_size": "the largest action + 1 (read on load)" if discrete else int(np.prod(actions.shape[1:])),
        "size": describe_h5_sizes(nodes),
    }


# ------------------------------------------------ d3rlpy 2.x dataset files
#: the dataset format version d3rlpy 2.1+ writes with ``dump``
D3RLPY_DATASET_VERSION = "2.1"
_D3RLPY_COLUMNS = ("observations", "actions", "rewards", "terminated")


def dataset_file_format(f: PathOrFile) -> Optional[str]:
    """``"offrl"`` for a file with offrl's format mark or d3rlpy 2.1+'s
    layout (both read by :func:`read_dataset_file`), None for another HDF5
    file; ``ValueError`` for a file that is not HDF5. Reads attributes and
    names only."""
    name = _file_name(f)
    with _open_h5(f, name) as h5:
        return "offrl" if _attribute(h5, "format", name) is not None or _is_d3rlpy_layout(h5) else None


def _is_d3rlpy_layout(h5: Any) -> bool:
    """Whether a file without offrl's format mark has d3rlpy 2.x's layout
    (root datasets ``version``, ``columns``, ``num_episodes``)."""
    return all(key in h5 for key in ("version", "columns", "num_episodes"))


def _small_h5_value(h5: Any, key: str, name: str, max_items: int) -> Any:
    """A small root dataset (a scalar or a short vector of numbers or text)
    read as Python values; refuses anything larger than ``max_items``."""
    node = h5.get(key, getlink=True)
    import h5py

    if not isinstance(node, h5py.HardLink) or not isinstance(h5[key], h5py.Dataset):
        raise ValueError(f"{name}: {key} is not a dataset stored in this file")
    dataset = h5[key]
    size = int(np.prod(dataset.shape)) if dataset.shape else 1
    if size > max_items:
        raise ValueError(f"{name}: {key} holds {size} values, expected at most {max_items}")
    kind = dataset.dtype.kind
    if kind not in "biufSO" or dataset.dtype.fields is not None:
        raise TypeError(f"{name}: {key} has dtype {dataset.dtype}, expected numbers or text")
    if kind == "O" and h5py.check_string_dtype(dataset.dtype) is None:
        raise TypeError(f"{name}: {key} holds objects that are not text")
    value = dataset[()]
    if isinstance(value, np.ndarray):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value.tolist()]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value.item() if isinstance(value, np.generic) else value


def _read_d3rlpy_layout(h5: Any, name: str, max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION) -> dict:
    """Read a dataset file written by d3rlpy 2.1+'s ``dump`` (one group of
    arrays per episode: ``<column>_<episode>`` or, for tuple observations,
    ``observations_<episode>_<element>``) into offrl's columns. Only arrays
    of numbers are read; nothing in the file is imported or called."""
    version = _small_h5_value(h5, "version", name, 1)
    if version != D3RLPY_DATASET_VERSION:
        raise ValueError(f"{name} is a d3rlpy dataset file of version {version!r}; offrl reads version "
                         f"{D3RLPY_DATASET_VERSION} (d3rlpy 2.1 and later)")
    columns = _small_h5_value(h5, "columns", name, 16)
    if not isinstance(columns, list) or sorted(columns) != sorted(_D3RLPY_COLUMNS):
        raise ValueError(f"{name}: d3rlpy columns are {columns!r}, expected {list(_D3RLPY_COLUMNS)}")
    n_episodes, n_columns = _d3rlpy_layout_counts(h5, name)
    tuple_observations = n_columns > 0
    n_columns = max(n_columns, 1)
    parts: dict = {"observations": [[] for _ in range(n_columns)], "actions": [], "rewards": []}
    terminated = np.zeros(n_episodes, dtype=bool)
    sizes = np.zeros(n_episodes, dtype=np.int64)
    committed = 0
    episode_keys, nodes = [], []
    for i in range(n_episodes):  # every declared size and the expansion checked before the first read
        keys = [f"observations_{i}_{k}" for k in range(n_columns)] if tuple_observations else [f"observations_{i}"]
        keys += [f"actions_{i}", f"rewards_{i}"]
        missing = [k for k in keys + [f"terminated_{i}"] if k not in h5]
        if missing:
            raise ValueError(f"{name} is not a complete d3rlpy dataset file: it is missing {missing}")
        for key in keys:
            node = _safety.checked_h5_dataset(h5, key, name)
            committed += _safety.check_declared_size(name, key, node.shape, node.dtype, committed)
            nodes.append((key, node))
        episode_keys.append(keys)
    _safety.check_expansion(name, nodes, max_expansion)
    for i, keys in enumerate(episode_keys):
        arrays = [_safety.read_h5_dataset(h5, key, name) for key in keys]
        rows = arrays[-2].shape[0]
        if rows == 0 or any(a.shape[0] != rows for a in arrays):
            raise ValueError(f"{name} is corrupt: episode {i} has columns of different lengths or no steps")
        for k in range(n_columns):
            parts["observations"][k].append(arrays[k])
        actions, rewards = arrays[-2], arrays[-1]
        parts["actions"].append(actions.reshape(rows, -1))
        parts["rewards"].append(rewards.reshape(rows, -1))
        flag = _small_h5_value(h5, f"terminated_{i}", name, 1)
        if not isinstance(flag, (bool, int)) or flag not in (0, 1):
            raise ValueError(f"{name}: terminated_{i} is {flag!r}, expected a boolean")
        terminated[i] = bool(flag)
        sizes[i] = rows
    actions = np.concatenate(parts["actions"])
    discrete = actions.dtype.kind in "iu"
    if discrete:
        if actions.shape[1] != 1 or actions.min() < 0:
            raise ValueError(f"{name} is corrupt: discrete actions must be one non-negative integer per step")
        action_size = check_discrete_action_size(int(actions.max()) + 1, name, actions)
    else:
        action_size = int(actions.shape[1])
    ends = np.cumsum(sizes)
    return {
        "observations": [np.concatenate(column) for column in parts["observations"]],
        "actions": actions,
        "rewards": np.concatenate(parts["rewards"]),
        "episode_starts": ends - sizes,
        "episode_ends": ends,
        "episode_terminated": terminated,
        "episode_has_final": np.zeros(n_episodes, dtype=bool),
        "action_space": ActionSpace.DISCRETE if discrete else ActionSpace.CONTINUOUS,
        "action_size": action_size,
    }


def _as_float32(array: np.ndarray, name: str, field: str) -> np.ndarray:
    checks.check_float32(array, f"{name}: {field}")
    return np.ascontiguousarray(array, dtype=np.float32)


def _check_layout(name: str, data: dict, action_space: ActionSpace, action_size: int) -> None:
    """Check the columns against each other and convert them, in place, to
    the store's dtypes: float observations, rewards and continuous actions
    as float32 (refusing values float32 cannot hold), discrete actions int64."""
    actions = data["actions"]
    rows = actions.shape[0]
    for k, column in enumerate(data["observations"]):
        field = f"observations_{k}"
        if column.shape[0] != rows:
            raise ValueError(f"{name} is corrupt: {field} has {column.shape[0]} rows, actions has {rows}")
        if np.issubdtype(column.dtype, np.floating) or column.dtype == np.bool_:
            data["observations"][k] = _as_float32(column, name, field)
    if data["rewards"].shape != (rows, 1):
        raise ValueError(f"{name} is corrupt: rewards has shape {data['rewards'].shape}, expected ({rows}, 1)")
    data["rewards"] = _as_float32(data["rewards"], name, "rewards")
    behaviour = data.get("behaviour_probabilities")
    discrete = action_space == ActionSpace.DISCRETE
    if behaviour is not None:
        if behaviour.shape != (rows,) or not np.issubdtype(behaviour.dtype, np.floating):
            raise ValueError(
                f"{name} is corrupt: behaviour_probabilities has shape {behaviour.shape} "
                f"and dtype {behaviour.dtype}, expected ({rows},) floats"
            )
        behaviour = behaviour.astype(np.float64, copy=False)
        bad = ~(behaviour > 0) & ~np.isnan(behaviour)  # NaN marks a step without one
        bad |= np.isinf(behaviour)
        if discrete:
            bad |= behaviour > 1
        if bad.any():
            i = checks.first_index(bad)
            expected = "a probability in (0, 1]" if discrete else "a density > 0"
            raise ValueError(
                f"{name} is corrupt: behaviour_probabilities[{i}] is {float(behaviour[i])}, expected {expected}"
            )
        data["behaviour_probabilities"] = behaviour
    for key in _TABLE_KEYS:
        column = data[key]
        if column.ndim != 1:
            raise ValueError(f"{name} is corrupt: {key} has shape {column.shape}, expected one value per episode")
    starts, ends = data["episode_starts"], data["episode_ends"]
    for key, column in (("episode_starts", starts), ("episode_ends", ends)):
        if column.dtype.kind not in "iu":
            raise TypeError(f"{name} is corrupt: {key} has dtype {column.dtype}, expected integers")
    flags = {}
    for key in ("episode_terminated", "episode_has_final"):
        column = data[key]
        if column.dtype != np.bool_:
            if column.dtype.kind not in "iu" or np.any((column != 0) & (column != 1)):
                raise ValueError(f"{name} is corrupt: {key} holds values other than 0/1 (dtype {column.dtype})")
            column = column.astype(bool)
        flags[key] = data[key] = column
    terminated, has_final = flags["episode_terminated"], flags["episode_has_final"]
    n = starts.shape[0]
    if n == 0:
        raise ValueError(f"{name} holds no episodes")
    if not (ends.shape == terminated.shape == has_final.shape == (n,)):
        raise ValueError(f"{name} is corrupt: the episode table columns have different lengths")
    starts = data["episode_starts"] = starts.astype(np.int64)
    ends = data["episode_ends"] = ends.astype(np.int64)  # uint64 beyond int64 wraps negative: refused below
    spans_end = ends + has_final
    if (
        starts[0] != 0
        or np.any(ends <= starts)
        or np.any(starts[1:] != spans_end[:-1])
        or spans_end[-1] != rows
        or np.any(terminated & has_final)
    ):
        raise ValueError(f"{name} is corrupt: its episode table does not match its {rows} rows")
    if discrete:
        if actions.ndim != 2 or actions.shape[1] != 1 or actions.dtype.kind not in "iu":
            raise ValueError(
                f"{name} is corrupt: discrete actions must be (n, 1) integers, got shape {actions.shape} "
                f"dtype {actions.dtype}"
            )
        bad = (actions < 0) | (actions >= action_size)
        bad[spans_end[has_final] - 1] = False  # final rows carry a placeholder action
        if bad.any():
            i = checks.first_index(bad)
            raise ValueError(f"{name} is corrupt: actions[{i}] is {int(actions[i, 0])}, outside [0, {action_size})")
        data["actions"] = actions.astype(np.int64)
    else:
        if actions.ndim != 2 or actions.shape[1] != action_size:
            raise ValueError(
                f"{name} is corrupt: continuous actions have shape {actions.shape}, expected (n, {action_size})"
            )
        data["actions"] = _as_float32(actions, name, "actions")
