"""Minari datasets on disk, read and written without the ``minari`` package.

The layout followed is Minari 0.5's (``minari_version`` 0.5.x). A dataset is
a folder whose ``data/`` folder holds ``metadata.json``: ``dataset_id``,
``total_episodes``, ``total_steps``, ``data_format`` (``"hdf5"`` or
``"arrow"``), ``observation_space`` and ``action_space`` (gymnasium spaces as
JSON strings: ``{"type": "Box", "dtype", "shape", "low", "high"}``,
``{"type": "Discrete", "n", "start"}``, ``{"type": "Tuple", "subspaces": [..]}``,
``{"type": "Dict", "subspaces": {..}}``) and optionally ``env_spec``
(gymnasium's ``EnvSpec.to_json()``).

* HDF5 backend: ``data/main_data.hdf5`` with one group ``episode_{id}`` per
  episode of ``N`` steps holding ``observations`` (``N + 1`` rows: the reset
  observation and the one after every step; a group keyed like a Dict space,
  or with ``_index_{i}`` members for a Tuple space), ``actions``, ``rewards``,
  ``terminations`` and ``truncations`` (``N`` rows), optional ``infos``
  (ignored here), and attributes ``id`` and ``total_steps``.
* Arrow backend: one folder ``data/{id}/`` per episode with Arrow IPC files
  of ``N + 1`` rows (``actions``, ``rewards`` and the flags padded with one
  row; Box values as fixed-size lists, Dict / Tuple spaces as structs with
  fields named by key / position) and the episode's ``metadata.json``.

Datasets of Minari 0.4 and earlier (metadata as attributes of
``main_data.hdf5``, no ``metadata.json``) are read as well.

offrl adds two things that Minari readers ignore: an optional
``behaviour_probabilities`` member per episode (``N`` values, ``N + 1`` padded
in Arrow), and the episode attribute ``offrl_final_observation_missing`` on a
truncated episode whose observation after the last step was never logged (its
stored last observation is zeros, and offrl reads the episode back without it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import shutil
import warnings
from typing import Any, Optional, Sequence, Union

import numpy as np

from .. import _safety
from .._version import __version__
from ..constants import ActionSpace
from ..dataset.disk_writer import DiskDatasetWriter
from ..dataset.replay_buffer import MDPDataset, ReplayBufferBase
from ..envs.wrappers import GoalConcatWrapper
from ._build import dataset_from_rows, episode_layout

__all__ = ["get_minari", "to_minari", "MINARI_LAYOUT_VERSION"]

#: the largest Discrete ``n`` a dataset may declare
MAX_DISCRETE_ACTION_SIZE = 2**24

MINARI_LAYOUT_VERSION = "0.5.4"
_MAIN_FILE = "main_data.hdf5"
_METADATA_FILE = "metadata.json"
_MISSING_FINAL = "offrl_final_observation_missing"
_BEHAVIOUR = "behaviour_probabilities"

PathLike = Union[str, os.PathLike]


# --------------------------------------------------------------- spaces
@dataclasses.dataclass(frozen=True)
class _Leaf:
    """One array-valued part of a space: ``path`` of Dict keys / Tuple
    positions from the top, ``kind`` ``"Box"`` or ``"Discrete"``."""

    path: tuple
    kind: str
    shape: tuple
    dtype: np.dtype
    start: int = 0
    n: int = 0


def _parse_space(value: Any, where: str) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{where} is not a JSON space description: {e}") from None
    if not isinstance(value, dict) or "type" not in value:
        raise ValueError(f"{where} is not a space description (a JSON object with a 'type')")
    return value


def _leaves(space: dict, where: str, path: tuple = ()) -> list[_Leaf]:
    """The array leaves of a space, depth first (Dict members in stored order)."""
    kind = space.get("type")
    try:
        if kind == "Box":
            shape = tuple(int(s) for s in space["shape"])
            if any(s < 0 for s in shape):
                raise ValueError(f"negative shape {shape}")
            return [_Leaf(path, "Box", shape, np.dtype(space["dtype"]))]
        if kind == "Discrete":
            return [_Leaf(path, "Discrete", (), np.dtype(np.int64), int(space.get("start", 0)), int(space["n"]))]
        if kind == "Tuple":
            return [
                leaf for i, sub in enumerate(space["subspaces"]) for leaf in _leaves(sub, where, path + (i,))
            ]
        if kind == "Dict":
            return [leaf for key, sub in space["subspaces"].items() for leaf in _leaves(sub, where, path + (key,))]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{where}: a {kind} space description is malformed ({type(e).__name__}: {e})") from None
    except RecursionError:
        raise ValueError(f"{where}: the space description is nested too deeply") from None
    raise ValueError(f"{where}: {kind!r} spaces are not supported (Box, Discrete, Tuple and Dict are)")


def _leaf_key(leaf: _Leaf) -> str:
    """A Dict observation leaf's key: its path joined with ``/`` (nested Dicts)."""
    return "/".join(str(p) for p in leaf.path)


def _dict_space_of_keys(keys: Sequence[str], shapes: Sequence[tuple], dtypes: Sequence[np.dtype]) -> dict:
    """A Dict space of unbounded Boxes for dict observation ``keys`` (a key
    with ``/`` becomes a nested Dict, the inverse of :func:`_leaf_key`)."""
    root: dict = {"type": "Dict", "subspaces": {}}
    for key, shape, dtype in zip(keys, shapes, dtypes):
        parts = key.split("/")
        node = root
        for part in parts[:-1]:
            child = node["subspaces"].setdefault(part, {"type": "Dict", "subspaces": {}})
            if child.get("type") != "Dict":
                raise ValueError(f"observation key {key!r} nests under {part!r}, which is itself a key")
            node = child
        if parts[-1] in node["subspaces"]:
            raise ValueError(f"observation key {key!r} is also the prefix of a nested key")
        node["subspaces"][parts[-1]] = _unbounded_box(shape, dtype)
    return root


def _space_to_dict(space: Any) -> dict:
    """A gymnasium space in Minari's JSON layout."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return {
            "type": "Box", "dtype": str(space.dtype), "shape": list(space.shape),
            "low": space.low.tolist(), "high": space.high.tolist(),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "dtype": "int64", "start": int(space.start), "n": int(space.n)}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "subspaces": [_space_to_dict(s) for s in space.spaces]}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "subspaces": {k: _space_to_dict(s) for k, s in space.spaces.items()}}
    raise TypeError(f"cannot write a {type(space).__name__} space: Box, Discrete, Tuple and Dict are supported")


def _unbounded_box(shape: Sequence[int], dtype: np.dtype) -> dict:
    size = int(np.prod(shape)) if len(shape) else 1
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        low, high = [int(info.min)] * size, [int(info.max)] * size
    else:
        low, high = [-math.inf] * size, [math.inf] * size
    return {
        "type": "Box", "dtype": str(np.dtype(dtype)), "shape": list(shape),
        "low": np.reshape(low, shape).tolist(), "high": np.reshape(high, shape).tolist(),
    }


# --------------------------------------------------------------- finding
def _default_root() -> pathlib.Path:
    root = os.environ.get("MINARI_DATASETS_PATH")
    return pathlib.Path(root) if root else pathlib.Path.home() / ".minari" / "datasets"


def _data_folder(dataset_id_or_path: PathLike) -> pathlib.Path:
    if not isinstance(dataset_id_or_path, (str, os.PathLike)):
        raise TypeError(f"dataset_id_or_path must be a str or a path, got {type(dataset_id_or_path).__name__}")
    given = pathlib.Path(dataset_id_or_path)
    if given.exists():
        if given.is_file():
            if given.name in (_METADATA_FILE, _MAIN_FILE):
                return given.parent
            raise ValueError(f"{given} is not a Minari dataset: give its folder, its data/ folder or {_MAIN_FILE}")
        for folder in (given, given / "data"):
            if (folder / _METADATA_FILE).is_file() or (folder / _MAIN_FILE).is_file():
                return folder
        raise ValueError(
            f"{given} holds no Minari dataset: found neither data/{_METADATA_FILE} nor data/{_MAIN_FILE} in it"
        )
    root = _default_root()
    folder = root / str(dataset_id_or_path) / "data"
    if folder.is_dir():
        return folder
    raise ValueError(
        f"unknown Minari dataset {str(dataset_id_or_path)!r}: it is not a path, and there is no {folder} "
        "(the local Minari root is $MINARI_DATASETS_PATH or ~/.minari/datasets; offrl does not download "
        "datasets: fetch it with minari first, or give the dataset's path)"
    )


def _read_metadata(folder: pathlib.Path) -> tuple[dict, pathlib.Path]:
    path = folder / _METADATA_FILE
    if path.is_file():
        try:
            with open(path) as f:
                metadata = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise ValueError(f"{path} is not readable JSON: {e}") from None
        if not isinstance(metadata, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        return metadata, path
    import h5py

    path = folder / _MAIN_FILE
    try:
        with h5py.File(path, "r") as f:  # Minari <= 0.4: metadata as root attributes
            metadata = {k: _attr(v) for k, v in f.attrs.items()}
    except OSError as e:
        raise ValueError(f"{path} is not a readable HDF5 file: {e}") from None
    metadata.setdefault("data_format", "hdf5")
    return metadata, path


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


# ----------------------------------------------------------- environment
def _recover_env(env_spec: Any, render_mode: Optional[str], where: Any) -> Any:
    """The environment a stored env spec names, made from gymnasium's
    registry of already-registered ids, or None (with a warning saying why).

    Only the spec's ``id`` (and its plain JSON ``kwargs`` and
    ``max_episode_steps``) are taken from the file: the environment is made
    with the *registered* spec's entry point and wrappers, never with an
    entry point, wrapper or module named in the file, and an id is looked up
    in the registry as a plain key (gymnasium's ``"module:Env-v0"`` import
    syntax is not honoured).
    """
    if not env_spec:
        return None
    try:
        parsed = json.loads(env_spec) if isinstance(env_spec, str) else env_spec
    except json.JSONDecodeError as e:
        warnings.warn(f"{where}: env_spec is not JSON ({e}); env is None")
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("id"), str):
        warnings.warn(f"{where}: env_spec has no string 'id'; env is None")
        return None
    import gymnasium
    from gymnasium.envs.registration import registry

    env_id = parsed["id"]
    registered = registry.get(env_id)
    if registered is None:
        warnings.warn(
            f"{where}: the dataset's environment {env_id!r} is not registered with gymnasium here; env is None "
            "(offrl builds environments only from registered ids: import the package that registers it first)"
        )
        return None
    kwargs = parsed.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        kwargs = {}
    kwargs = {k: v for k, v in kwargs.items() if k != "render_mode"}
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    steps = parsed.get("max_episode_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps > 0:
        kwargs["max_episode_steps"] = steps
    try:
        return gymnasium.make(registered, **kwargs)
    except Exception as e:  # the registered environment's own code may raise anything
        warnings.warn(f"{where}: environment {env_id!r} cannot be made here ({type(e).__name__}: {e}); env is None")
        return None


# --------------------------------------------------------------- reading
@dataclasses.dataclass(frozen=True)
class _Hints:
    """Facts about the whole dataset that a one-episode read follows, so that
    episodes read one at a time give the rows a read of all of them gives:
    ``behaviour``, some episode logs behaviour probabilities (the others get
    NaN); ``float_actions``, some episode stores its Discrete actions as
    floats (all are then read as float64, so 0.5 is refused, not truncated);
    ``dtypes``, for Arrow, the dtype of each observation column and of the
    actions that concatenating every episode's values gives."""

    behaviour: bool = False
    float_actions: bool = False
    dtypes: Optional[tuple] = None


class _Episodes:
    """Per-episode arrays collected by a backend reader."""

    def __init__(self, n_obs: int) -> None:
        self.names: list[str] = []
        self.lengths: list[int] = []
        self.terminated: list[bool] = []
        self.has_final: list[bool] = []
        self.observations: list[list[np.ndarray]] = [[] for _ in range(n_obs)]
        self.actions: list[np.ndarray] = []
        self.rewards: list[np.ndarray] = []
        self.behaviour: list[Optional[np.ndarray]] = []

    def add(
        self, name: str, observations: list[np.ndarray], actions: np.ndarray, rewards: np.ndarray,
        terminations: np.ndarray, truncations: np.ndarray, final_missing: bool,
        behaviour: Optional[np.ndarray], total_steps: Any,
    ) -> None:
        n = actions.shape[0]
        for label, array in (("rewards", rewards), ("terminations", terminations), ("truncations", truncations)):
            if array.dtype.kind not in _safety.NUMERIC_KINDS:
                raise TypeError(f"{name}: {label} has dtype {array.dtype}, expected numbers")
        terminated, has_final = _check_episode(
            name, n, [o.shape[0] for o in observations], rewards.shape[0], terminations, truncations,
            final_missing, total_steps,
        )
        keep = n + int(has_final)
        self.names.append(name)
        self.lengths.append(n)
        self.terminated.append(terminated)
        self.has_final.append(has_final)
        for column, obs in zip(self.observations, observations):
            column.append(obs[:keep])
        self.actions.append(actions)
        self.rewards.append(rewards.reshape(n))
        if behaviour is not None:
            behaviour = np.asarray(behaviour, dtype=np.float64).reshape(-1)[:n]
            if behaviour.shape[0] != n:
                raise ValueError(f"{name}: {_BEHAVIOUR} has {behaviour.shape[0]} rows, actions has {n}")
        self.behaviour.append(behaviour)

    def columns(self, hints: _Hints = _Hints()) -> "_Columns":
        """The episodes laid out as store rows (see :func:`episode_layout`)."""
        lengths = np.asarray(self.lengths, dtype=np.int64)
        has_final = np.asarray(self.has_final, dtype=bool)
        _, ends, step_rows = episode_layout(lengths, has_final)
        rows = int(ends[-1] + has_final[-1])
        observations = self.observations
        step_actions = np.concatenate(self.actions)
        if hints.dtypes is not None:
            observations = [[o.astype(d, copy=False) for o in c] for c, d in zip(observations, hints.dtypes)]
            step_actions = step_actions.astype(hints.dtypes[-1], copy=False)
        actions = np.zeros((rows,) + step_actions.shape[1:], dtype=step_actions.dtype)
        actions[step_rows] = step_actions
        rewards = np.zeros(rows, dtype=np.float32)
        rewards[step_rows] = np.concatenate(self.rewards)
        behaviour = None
        if hints.behaviour or any(b is not None for b in self.behaviour):
            behaviour = np.ones(rows, dtype=np.float64)
            behaviour[step_rows] = np.concatenate(
                [np.full(n, np.nan) if b is None else b for b, n in zip(self.behaviour, lengths)]
            )
        return _Columns(
            self.names, lengths, np.asarray(self.terminated, dtype=bool), has_final,
            [np.concatenate(column) for column in observations], actions, rewards, behaviour,
        )


@dataclasses.dataclass
class _Columns:
    """Episodes read by a backend, as store rows: ``observations`` and
    ``actions`` hold a final-observation row after each episode with
    ``has_final`` (actions there are placeholders); actions are raw stored
    values (Discrete ones still offset by the space's ``start``)."""

    names: list
    lengths: np.ndarray
    terminated: np.ndarray
    has_final: np.ndarray
    observations: list
    actions: np.ndarray
    rewards: np.ndarray
    behaviour: Optional[np.ndarray]


def _count(value: Any, where: Any, key: str) -> int:
    """A stored count (``total_steps``, ``total_episodes``) as an int."""
    if isinstance(value, (np.integer, np.ndarray)) and np.ndim(value) == 0:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{where}: {key} is {value!r}, expected a non-negative integer")
    return value


def _check_episode(
    name: str, n: int, observation_rows: list[int], reward_rows: int, terminations: np.ndarray,
    truncations: np.ndarray, final_missing: bool, total_steps: Any,
) -> tuple[bool, bool]:
    """Check one stored episode of ``n`` steps against Minari's layout;
    returns ``(terminated, has_final)``."""
    if n == 0:
        raise ValueError(f"{name} has no steps")
    if total_steps is not None and _count(total_steps, name, "total_steps") != n:
        raise ValueError(f"{name} says total_steps={total_steps!r} but holds {n} actions")
    for label, rows in (("rewards", reward_rows), ("terminations", terminations.shape[0]),
                        ("truncations", truncations.shape[0])):
        if rows != n:
            raise ValueError(f"{name}: {label} has {rows} rows, actions has {n}")
    for k, rows in enumerate(observation_rows):
        if rows != n + 1:
            label = "observations" if len(observation_rows) == 1 else f"observations[{k}]"
            raise ValueError(f"{name}: {label} has {rows} rows, expected {n + 1} (one more than its {n} steps)")
    terminations = terminations.reshape(n, -1)[:, 0].astype(bool)
    truncations = truncations.reshape(n, -1)[:, 0].astype(bool)
    early = (terminations | truncations)[:-1]
    if early.any():
        i = int(np.argmax(early))
        flag = "terminations" if terminations[i] else "truncations"
        raise ValueError(
            f"{name}: {flag}[{i}] is True but the episode goes on to {n} steps "
            "(an episode ends at its first termination or truncation)"
        )
    terminated = bool(terminations[-1])
    return terminated, not terminated and not final_missing


def _episode_ids(names: Sequence[str], prefix: str, where: Any) -> list[tuple[int, str]]:
    out = []
    for name in names:
        suffix = name[len(prefix):]
        if not suffix.isdigit():
            continue
        out.append((int(suffix), name))
    if not out:
        raise ValueError(f"{where} holds no episodes")
    return sorted(out)


def _h5_dataset(parent: Any, path: tuple, where: str, label: str) -> Any:
    """The low-level dataset id at ``path`` (Dict keys / Tuple positions)
    under ``parent``. A Minari file has a few small datasets per episode,
    where h5py's high-level objects cost more than the reads themselves."""
    from h5py import h5d, h5o

    node = parent
    for part in path:
        key = f"_index_{part}" if isinstance(part, int) else part
        try:
            node = h5o.open(node, key.encode())
        except (KeyError, ValueError):
            raise ValueError(f"{where} has no {label}/{key}") from None
        label = f"{label}/{key}"
    if not isinstance(node, h5d.DatasetID):
        raise ValueError(f"{where}: {label} is a group, expected a dataset")
    _safety.check_h5_dataset_id(node, where, label)
    return node


def _h5_read_into(dataset: Any, out: np.ndarray, rows: int, where: str = "", label: str = "dataset") -> None:
    """Read the first ``rows`` rows of ``dataset`` into the contiguous
    ``out`` (HDF5 converts to ``out``'s dtype)."""
    from h5py import h5s

    # h5py's low-level read trusts the buffer: a dataset with more values per
    # row than ``out`` holds would write past its end, so check first
    count = (rows,) + tuple(dataset.shape[1:])
    if len(dataset.shape) == 0 or rows > dataset.shape[0] or out.size != int(np.prod(count, dtype=np.int64)) \
            or not out.flags.c_contiguous:
        raise ValueError(f"{where}: {label} has shape {dataset.shape}, expected {rows} rows of {out.shape[1:] or 'one value'}")
    if rows == dataset.shape[0]:
        dataset.read(h5s.ALL, h5s.ALL, out)
        return
    file_space = dataset.get_space()
    file_space.select_hyperslab((0,) * len(count), count)
    dataset.read(h5s.create_simple(count), file_space, out)


def _h5_all(dataset: Any) -> np.ndarray:
    out = np.empty(dataset.shape, dtype=dataset.dtype)
    if out.size:
        _h5_read_into(dataset, out, dataset.shape[0])
    return out


def _h5_attr(group: Any, name: str) -> Any:
    from h5py import h5a

    if not h5a.exists(group, name.encode()):
        return None
    attr = h5a.open(group, name.encode())
    out = np.empty(attr.shape, dtype=attr.dtype)
    attr.read(out)
    return out.item() if out.size == 1 else out


def _check_leaf_shape(where: str, label: str, leaf: _Leaf, shape: Optional[tuple]) -> None:
    """The per-step shape stored for ``leaf`` must be the one its space declares."""
    if shape is None:
        raise ValueError(f"{where}: {label} is a scalar, expected one row per step")
    expected = leaf.shape if leaf.kind == "Box" else ()
    if shape != expected and not (leaf.kind == "Discrete" and shape == (1,)):
        part = "".join(f"[{p!r}]" for p in leaf.path)
        raise ValueError(
            f"{where}: {label}{part} has per-step shape {shape}, but its {leaf.kind} space declares {expected}"
        )


@dataclasses.dataclass
class _H5Episode:
    """One episode group, checked: its flags and counts read, its arrays
    open as low-level dataset ids (one per observation leaf)."""

    where: str
    n: int
    terminated: bool
    has_final: bool
    observations: list
    actions: Any
    rewards: Any
    behaviour: Any


def _h5_open(folder: pathlib.Path) -> tuple[Any, pathlib.Path, list[str]]:
    """``main_data.hdf5`` opened, its path, and its episode groups in id order."""
    import h5py

    path = folder / _MAIN_FILE
    if not path.is_file():
        raise ValueError(f"{folder} has data_format 'hdf5' but no {_MAIN_FILE}")
    try:
        f = h5py.File(path, "r")
    except OSError as e:
        raise ValueError(f"{path} is not a readable HDF5 file: {e}") from None
    try:
        keys = [key for _, key in _episode_ids(list(f.keys()), "episode_", path)]
    except BaseException:
        f.close()
        raise
    return f, path, keys


def _h5_episode(f: Any, key: str, path: pathlib.Path, obs_leaves: list[_Leaf], act_leaf: _Leaf) -> _H5Episode:
    """The episode group ``key`` checked against Minari's layout and the spaces."""
    from h5py import h5g, h5o

    where = f"{path}: {key}"
    group = h5g.open(f.id, key.encode())
    members = {}
    for required in ("observations", "actions", "rewards", "terminations", "truncations"):
        try:
            members[required] = h5o.open(group, required.encode())
        except (KeyError, ValueError):
            raise ValueError(f"{where} has no {required!r}") from None
    observations = [_h5_dataset(members["observations"], leaf.path, where, "observations") for leaf in obs_leaves]
    actions = _h5_dataset(members["actions"], act_leaf.path, where, "actions")
    rewards = _h5_dataset(members["rewards"], (), where, "rewards")
    n = actions.shape[0] if actions.shape else 0
    for label, leaf, dataset in [("actions", act_leaf, actions)] + [
        ("observations", leaf, d) for leaf, d in zip(obs_leaves, observations)
    ]:
        _check_leaf_shape(where, label, leaf, tuple(dataset.shape[1:]) if dataset.shape else None)
    for label in ("terminations", "truncations"):
        flags = _h5_dataset(members[label], (), where, label)
        rows = flags.shape[0] if flags.shape else 0
        if rows != n or int(np.prod(flags.shape[1:])) != 1:
            raise ValueError(f"{where}: {label} has shape {flags.shape}, expected ({n},)")
        _safety.check_declared_size(where, label, flags.shape, flags.dtype)
    ended, final = _check_episode(
        where, n, [o.shape[0] if o.shape else 0 for o in observations], rewards.shape[0] if rewards.shape else 0,
        _h5_all(_h5_dataset(members["terminations"], (), where, "terminations")),
        _h5_all(_h5_dataset(members["truncations"], (), where, "truncations")),
        bool(_h5_attr(group, _MISSING_FINAL)), _h5_attr(group, "total_steps"),
    )
    behaviour = _h5_dataset(group, (_BEHAVIOUR,), where, key) if group.links.exists(_BEHAVIOUR.encode()) else None
    if behaviour is not None and behaviour.shape[0] != n:
        raise ValueError(f"{where}: {_BEHAVIOUR} has {behaviour.shape[0]} rows, actions has {n}")
    return _H5Episode(where, n, ended, final, observations, actions, rewards, behaviour)


def _h5_hints(episodes: Sequence[_H5Episode], act_leaf: _Leaf) -> _Hints:
    return _Hints(
        behaviour=any(e.behaviour is not None for e in episodes),
        float_actions=act_leaf.kind == "Discrete" and any(e.actions.dtype.kind == "f" for e in episodes),
    )


def _h5_column_types(first: _H5Episode, act_leaf: _Leaf, hints: _Hints) -> list[tuple[np.dtype, tuple]]:
    """``(dtype, per-row shape)`` of the observation columns, then of the
    actions, as read into memory (floats as float32)."""
    out = []
    for dataset in first.observations:
        dtype = np.dtype(np.float32) if np.issubdtype(dataset.dtype, np.floating) else dataset.dtype
        out.append((dtype, tuple(dataset.shape[1:])))
    if act_leaf.kind == "Discrete":
        out.append((np.dtype(np.float64 if hints.float_actions else np.int64), ()))
    else:
        dtype = np.dtype(np.float32) if np.issubdtype(first.actions.dtype, np.floating) else first.actions.dtype
        out.append((dtype, (int(np.prod(first.actions.shape[1:])),)))
    return out


def _h5_columns(
    episodes: Sequence[_H5Episode], first: _H5Episode, act_leaf: _Leaf, hints: _Hints,
) -> _Columns:
    """``episodes`` read straight into their rows of new columns (shapes
    checked against the dataset's first episode, ``first``)."""
    lengths = np.asarray([e.n for e in episodes], dtype=np.int64)
    finals = np.asarray([e.has_final for e in episodes], dtype=bool)
    starts, _, _ = episode_layout(lengths, finals)
    rows = int(starts[-1] + lengths[-1] + finals[-1])
    types = _h5_column_types(first, act_leaf, hints)
    observations_out = [np.zeros((rows,) + shape, dtype=dtype) for dtype, shape in types[:-1]]
    actions_out = np.zeros((rows,) + types[-1][1], dtype=types[-1][0])
    rewards_out = np.zeros(rows, dtype=np.float32)
    behaviour_out = np.ones(rows, dtype=np.float64) if hints.behaviour else None
    for e, episode in enumerate(episodes):
        a, n, where = int(starts[e]), episode.n, episode.where
        keep = n + int(finals[e])
        for out, dataset in zip(observations_out, episode.observations):
            if dataset.shape[1:] != out.shape[1:]:
                raise ValueError(f"{where}: observations have shape {dataset.shape[1:]}, episode 0 has {out.shape[1:]}")
            _h5_read_into(dataset, out[a : a + keep], keep, where, "observations")
        actions = episode.actions
        if int(np.prod(actions.shape[1:])) != int(np.prod(actions_out.shape[1:])):
            raise ValueError(f"{where}: actions have shape {actions.shape[1:]}, episode 0 has {first.actions.shape[1:]}")
        _h5_read_into(actions, actions_out[a : a + n], n, where, "actions")
        _h5_read_into(episode.rewards, rewards_out[a : a + n], n, where, "rewards")
        if behaviour_out is not None:
            if episode.behaviour is None:
                behaviour_out[a : a + n] = np.nan
            else:
                _h5_read_into(episode.behaviour, behaviour_out[a : a + n], n, where, _BEHAVIOUR)
    return _Columns(
        [e.where for e in episodes], lengths, np.asarray([e.terminated for e in episodes], dtype=bool), finals,
        observations_out, actions_out, rewards_out, behaviour_out,
    )


def _read_hdf5(folder: pathlib.Path, obs_leaves: list[_Leaf], act_leaf: _Leaf) -> _Columns:
    """Two passes over the episode groups: shapes and flags first, then every
    array read straight into its rows of the preallocated columns."""
    f, path, keys = _h5_open(folder)
    with f:
        episodes = [_h5_episode(f, key, path, obs_leaves, act_leaf) for key in keys]
        hints = _h5_hints(episodes, act_leaf)
        rows = sum(e.n + int(e.has_final) for e in episodes)
        _h5_check_memory(str(path), "all episodes", episodes[0], act_leaf, hints, rows)
        return _h5_columns(episodes, episodes[0], act_leaf, hints)


def _h5_check_memory(where: str, what: str, first: _H5Episode, act_leaf: _Leaf, hints: _Hints, rows: int) -> None:
    """The columns of ``rows`` rows shaped like ``first``'s must fit the memory."""
    committed = 0
    for label, dataset in [(f"observations[{k}]", d) for k, d in enumerate(first.observations)] + [
        ("actions", first.actions)
    ]:
        dtype = np.dtype(np.float32) if dataset.dtype.kind in "fb" else dataset.dtype
        if label == "actions" and act_leaf.kind == "Discrete":
            dtype = np.dtype(np.float64 if hints.float_actions else np.int64)
        committed += _safety.check_declared_size(
            where, f"{label} ({what})", (rows,) + tuple(dataset.shape[1:]), dtype, committed
        )


class _Hdf5Stream:
    """The HDF5 backend one episode at a time: a light first pass over the
    groups (which episodes log behaviour probabilities, whether Discrete
    actions are stored as floats, how many steps there are), then each
    episode checked and read alone, so only one episode's arrays are ever in
    memory (and the first error found is raised)."""

    def __init__(self, folder: pathlib.Path, obs_leaves: list[_Leaf], act_leaf: _Leaf, metadata: dict) -> None:
        from h5py import h5d, h5g, h5o

        self.obs_leaves, self.act_leaf = obs_leaves, act_leaf
        self.f, self.path, self.keys = _h5_open(folder)
        try:
            behaviour = float_actions = False
            steps = 0
            for key in self.keys:
                group = h5g.open(self.f.id, key.encode())
                behaviour |= group.links.exists(_BEHAVIOUR.encode())
                try:  # metadata only: the full checks come when the episode is read
                    actions = h5o.open(group, b"actions")
                    for part in act_leaf.path:
                        actions = h5o.open(actions, (f"_index_{part}" if isinstance(part, int) else part).encode())
                except (KeyError, ValueError):
                    continue  # refused, naming the episode, when it is read
                if not isinstance(actions, h5d.DatasetID):
                    continue
                float_actions |= actions.dtype.kind == "f"
                steps += actions.shape[0] if actions.shape else 0
            self.hints = _Hints(behaviour, act_leaf.kind == "Discrete" and float_actions)
            self.expected_bytes = _disk_bytes(steps + len(self.keys), obs_leaves, act_leaf, behaviour)
        except BaseException:
            self.f.close()
            raise

    def __iter__(self) -> Any:
        first = None
        for key in self.keys:
            episode = _h5_episode(self.f, key, self.path, self.obs_leaves, self.act_leaf)
            if first is None:
                first = episode
            rows = episode.n + int(episode.has_final)
            if rows * sum(int(np.prod(d.shape[1:], dtype=np.int64)) for d in episode.observations) > 1 << 22:
                # a long episode: its columns must fit the memory (a short one surely does)
                _h5_check_memory(episode.where, "this episode", episode, self.act_leaf, self.hints, rows)
            yield _h5_columns([episode], first, self.act_leaf, self.hints)

    def close(self) -> None:
        self.f.close()


def _disk_bytes(rows: int, obs_leaves: list[_Leaf], act_leaf: _Leaf, behaviour: bool) -> int:
    """Bytes ``rows`` rows take in a disk dataset, from the spaces: float32
    observations (integers keep the declared type, Discrete ones int64),
    int64 Discrete or float32 Box actions, a float32 reward, a float64
    behaviour probability."""
    row_bytes = 4 + 8 * behaviour + (8 if act_leaf.kind == "Discrete" else 4 * int(np.prod(act_leaf.shape)))
    for leaf in obs_leaves:
        itemsize = 8 if leaf.kind == "Discrete" else 4 if leaf.dtype.kind in "fb" else leaf.dtype.itemsize
        row_bytes += itemsize * int(np.prod(leaf.shape, dtype=np.int64))
    return rows * row_bytes


def _arrow_values(array: Any, leaf: _Leaf, where: str, label: str) -> np.ndarray:
    import pyarrow as pa

    for part in leaf.path:
        array = array.field(part if isinstance(part, str) else str(part))
    if pa.types.is_fixed_size_list(array.type) or pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        flat = array.flatten().to_numpy(zero_copy_only=False)
        expected = len(array) * int(np.prod(leaf.shape, dtype=np.int64))
        if leaf.kind != "Box" or flat.shape[0] != expected:
            raise ValueError(
                f"{where}: {label} holds {flat.shape[0]} values for {len(array)} rows, but its {leaf.kind} space "
                f"declares per-step shape {leaf.shape if leaf.kind == 'Box' else ()}"
            )
        values = flat.reshape((len(array),) + leaf.shape)
    else:
        values = array.to_numpy(zero_copy_only=False)
        if leaf.kind == "Box" and leaf.shape not in ((), (1,)):
            raise ValueError(f"{where}: {label} holds one value per row, but its Box space declares shape {leaf.shape}")
    if values.dtype.kind not in _safety.NUMERIC_KINDS:
        raise TypeError(f"{where}: {label} has dtype {values.dtype} ({array.type}), expected numbers")
    return values


def _pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.ipc  # noqa: F401 (loads pa.ipc)
    except ImportError:
        raise ImportError(
            "reading a Minari dataset in Arrow format needs pyarrow: pip install 'offrl[minari]'"
        ) from None
    return pa


def _arrow_episode_dirs(folder: pathlib.Path) -> list[str]:
    return [name for _, name in _episode_ids([d.name for d in folder.iterdir() if d.is_dir()], "", folder)]


def _arrow_files(directory: pathlib.Path) -> list[pathlib.Path]:
    files = sorted(
        p for p in directory.iterdir()
        if p.is_file() and not p.name.startswith(("_", ".")) and p.name != _METADATA_FILE
    )
    if not files:
        raise ValueError(f"{directory} holds no Arrow file")
    return files


def _arrow_episode(episodes: _Episodes, directory: pathlib.Path, obs_leaves: list[_Leaf], act_leaf: _Leaf) -> None:
    """Read the episode folder ``directory`` and add it to ``episodes``."""
    pa = _pyarrow()
    where = f"{directory}"
    files = _arrow_files(directory)
    try:
        tables = [pa.ipc.open_file(p).read_all() for p in files]
    except (OSError, pa.ArrowInvalid) as e:
        raise ValueError(f"{where} holds a file that is not Arrow IPC: {e}") from None
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    for required in ("observations", "actions", "rewards", "terminations", "truncations"):
        if required not in table.column_names:
            raise ValueError(f"{where} has no {required!r} column")
    meta: Any = {}
    if (directory / _METADATA_FILE).is_file():
        try:
            with open(directory / _METADATA_FILE) as f:
                meta = json.load(f)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{directory / _METADATA_FILE} is not readable JSON: {e}") from None
        if not isinstance(meta, dict):
            raise ValueError(f"{directory / _METADATA_FILE} does not hold a JSON object")
    column = {k: table.column(k).combine_chunks() for k in table.column_names}
    observations = [_arrow_values(column["observations"], leaf, where, "observations") for leaf in obs_leaves]
    rows = len(table)
    actions = _arrow_values(column["actions"], act_leaf, where, "actions")[: rows - 1]
    behaviour = column[_BEHAVIOUR].to_numpy(zero_copy_only=False)[: rows - 1] if _BEHAVIOUR in column else None
    episodes.add(
        where, observations, actions,
        column["rewards"].to_numpy(zero_copy_only=False)[: rows - 1],
        column["terminations"].to_numpy(zero_copy_only=False)[: rows - 1],
        column["truncations"].to_numpy(zero_copy_only=False)[: rows - 1],
        bool(meta.get(_MISSING_FINAL, False)), behaviour, meta.get("total_steps"),
    )


def _read_arrow(folder: pathlib.Path, obs_leaves: list[_Leaf], act_leaf: _Leaf) -> _Columns:
    _pyarrow()
    episodes = _Episodes(len(obs_leaves))
    for name in _arrow_episode_dirs(folder):
        _arrow_episode(episodes, folder / name, obs_leaves, act_leaf)
    return episodes.columns()


def _arrow_leaf_dtype(schema: Any, column: str, leaf: _Leaf) -> Optional[np.dtype]:
    """The numpy dtype of ``leaf``'s values in ``column`` of an Arrow schema,
    or None when the schema does not say (the read then refuses it)."""
    import pyarrow as pa

    try:
        kind = schema.field(column).type
        for part in leaf.path:
            kind = kind.field(str(part)).type
        if pa.types.is_fixed_size_list(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
            kind = kind.value_type
        dtype = np.dtype(kind.to_pandas_dtype())
    except (KeyError, TypeError, ValueError, NotImplementedError, AttributeError):
        return None
    return dtype if dtype.kind in _safety.NUMERIC_KINDS else None


class _ArrowStream:
    """The Arrow backend one episode at a time: the files' schemas are read
    first (which episodes log behaviour probabilities, whether Discrete
    actions are stored as floats), then each episode folder alone."""

    def __init__(self, folder: pathlib.Path, obs_leaves: list[_Leaf], act_leaf: _Leaf, metadata: dict) -> None:
        pa = _pyarrow()
        self.folder, self.obs_leaves, self.act_leaf = folder, obs_leaves, act_leaf
        self.names = _arrow_episode_dirs(folder)
        behaviour = False
        dtypes: list = [None] * (len(obs_leaves) + 1)
        for name in self.names:
            for p in _arrow_files(folder / name):
                try:
                    schema = pa.ipc.open_file(p).schema
                except (OSError, pa.ArrowInvalid) as e:
                    raise ValueError(f"{folder / name} holds a file that is not Arrow IPC: {e}") from None
                behaviour |= _BEHAVIOUR in schema.names
                found = [_arrow_leaf_dtype(schema, "observations", leaf) for leaf in obs_leaves]
                found.append(_arrow_leaf_dtype(schema, "actions", act_leaf))
                dtypes = [d if f is None else f if d is None else np.promote_types(d, f) for d, f in zip(dtypes, found)]
        self.hints = _Hints(behaviour, dtypes=tuple(dtypes))
        self.expected_bytes = None
        try:  # from the declared step count, when there is one (a final row at most for each episode)
            steps = _count(metadata["total_steps"], "", "")
        except (KeyError, ValueError):
            return
        self.expected_bytes = _disk_bytes(steps + len(self.names), obs_leaves, act_leaf, behaviour)

    def __iter__(self) -> Any:
        for name in self.names:
            episodes = _Episodes(len(self.obs_leaves))
            _arrow_episode(episodes, self.folder / name, self.obs_leaves, self.act_leaf)
            yield episodes.columns(self.hints)

    def close(self) -> None:
        pass


class _WriteError(Exception):
    """An error of the disk dataset being written (not of the Minari data)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


def get_minari(
    dataset_id_or_path: PathLike,
    transition_picker: Any = None,
    trajectory_slicer: Any = None,
    render_mode: Optional[str] = None,
    tuple_observation: Optional[bool] = None,
    load_env: bool = True,
    to: Optional[PathLike] = None,
) -> tuple[MDPDataset, Any]:
    """Read a Minari dataset from disk (no ``minari`` package needed).

    Args:
        dataset_id_or_path: a dataset folder, its ``data/`` folder or its
            ``main_data.hdf5``; or a dataset id (``"D4RL/door/human-v2"``)
            looked up under ``$MINARI_DATASETS_PATH`` (default
            ``~/.minari/datasets``). Nothing is downloaded.
        transition_picker, trajectory_slicer: for the returned dataset.
        render_mode: passed to ``gymnasium.make`` for the environment.
        tuple_observation: d3rlpy's goal-conditioned forms. ``None`` (offrl's
            default) reads a Dict observation space as dict observations.
            ``False`` / ``True`` need a Dict with ``observation`` and
            ``desired_goal`` members (d3rlpy reads no other Dict) and give
            d3rlpy's observations: one vector ``[observation, goal]``
            (``False``, d3rlpy's default) or the pair ``(observation, goal)``
            (``True``), a Dict goal flattened in sorted key order; the
            environment is then wrapped in
            :class:`offrl.envs.GoalConcatWrapper` to match. Ignored for a
            Box observation space, as in d3rlpy.
        load_env: make the environment the dataset names. ``False`` reads
            the data only (``env`` is ``None``) and runs no environment code.
        to: a new directory: write the dataset there as a disk dataset
            (:class:`offrl.dataset.DiskDatasetWriter`) one episode at a time
            and return it opened with ``in_memory=False``, so a dataset
            larger than memory imports holding one episode at a time. The
            data and the errors are those of the in-memory read; the free
            space is checked before writing (from the episodes' sizes for
            HDF5, from ``total_steps`` and ``total_episodes`` for Arrow), and
            an error leaves nothing at ``to``.

    Returns:
        ``(dataset, env)``: an :class:`MDPDataset` and the environment whose
        id the stored env spec names, made from gymnasium's registry of
        already-registered ids with the registered entry point (nothing the
        file names is imported or called), or ``None`` (with a warning) when
        that id is not registered here or cannot be made. Episodes keep Minari's order (by id); an episode
        ending in a termination is terminated, otherwise truncated, and the
        observation after a truncated episode's last step is kept as its final
        observation. A Tuple observation space becomes tuple observations,
        one element per Box/Discrete leaf, depth first. A Dict observation
        space becomes dict observations: one key per leaf (a nested Dict's
        keys joined with ``/``), kept in the dataset's observation signature
        and stored in sorted key order.
        Discrete actions become indices ``value - start``.
    """
    folder = _data_folder(dataset_id_or_path)
    try:
        return _get_minari(folder, transition_picker, trajectory_slicer, render_mode, load_env, to, tuple_observation)
    except _WriteError as e:
        raise e.error from None
    except (KeyError, IndexError, AttributeError, OSError) as e:
        # a half-written or foreign folder: say which, not a bare KeyError
        raise ValueError(
            f"{folder} is not a complete Minari dataset ({type(e).__name__}: {e}); "
            "it may be half-written or in a layout offrl does not read"
        ) from None


@dataclasses.dataclass
class _Layout:
    """What ``metadata.json`` (and the env it names) say about the data."""

    metadata: dict
    meta_path: pathlib.Path
    data_format: str
    dict_observations: bool
    obs_leaves: list
    act_leaf: _Leaf
    action_space: ActionSpace
    action_size: Optional[int]  # None for Box actions: the width read
    goal_form: Optional[bool] = None  # get_minari's tuple_observation for a goal-conditioned Dict


def _get_minari(
    folder: pathlib.Path, transition_picker: Any, trajectory_slicer: Any, render_mode: Optional[str], load_env: bool,
    to: Optional[PathLike] = None, tuple_observation: Optional[bool] = None,
) -> tuple[MDPDataset, Any]:
    if tuple_observation is not None and not isinstance(tuple_observation, (bool, np.bool_)):
        raise TypeError(f"tuple_observation must be None or a bool, got {type(tuple_observation).__name__}")
    metadata, meta_path = _read_metadata(folder)
    env = _recover_env(metadata.get("env_spec"), render_mode, meta_path) if load_env else None
    spaces = {}
    for key in ("observation_space", "action_space"):
        if key in metadata:
            spaces[key] = _parse_space(metadata[key], f"{meta_path}: {key}")
        elif env is not None:
            spaces[key] = _space_to_dict(getattr(env, key))
        else:
            raise ValueError(
                f"{meta_path} has no {key} and no env_spec gymnasium can build here, so the data cannot be decoded"
            )
    obs_leaves = _leaves(spaces["observation_space"], f"{meta_path}: observation_space")
    act_leaves = _leaves(spaces["action_space"], f"{meta_path}: action_space")
    if len(act_leaves) != 1:
        raise ValueError(
            f"{meta_path}: the action space has {len(act_leaves)} parts; offrl datasets take one Box or Discrete action"
        )
    act_leaf = act_leaves[0]
    space, size = ActionSpace.CONTINUOUS, None
    if act_leaf.kind == "Discrete":
        space, size = ActionSpace.DISCRETE, act_leaf.n

    data_format = metadata.get("data_format", "hdf5")
    if not isinstance(data_format, str):
        raise ValueError(f"{meta_path}: data_format is {data_format!r}, expected 'hdf5' or 'arrow'")
    if data_format not in ("hdf5", "arrow"):
        raise ValueError(f"{meta_path}: data_format {data_format!r} is not supported (hdf5 and arrow are)")
    dict_observations = spaces["observation_space"].get("type") == "Dict"
    goal_form = None
    if tuple_observation is not None and spaces["observation_space"].get("type") != "Box":
        top = spaces["observation_space"].get("subspaces", {}) if dict_observations else {}
        if not (isinstance(top, dict) and "observation" in top and "desired_goal" in top):
            raise ValueError(
                f"{meta_path}: tuple_observation={tuple_observation} reads a goal-conditioned Dict observation space "
                f"(members 'observation' and 'desired_goal'), got a {spaces['observation_space'].get('type')} space"
                + (f" with members {sorted(top)}" if dict_observations and isinstance(top, dict) else "")
                + "; leave tuple_observation=None to read it as offrl's dict / tuple observations"
            )
        goal_form = bool(tuple_observation)
        if env is not None:
            env = GoalConcatWrapper(env, tuple_observation=goal_form)
    layout = _Layout(metadata, meta_path, data_format, dict_observations, obs_leaves, act_leaf, space, size, goal_form)
    if to is not None:
        return _stream(folder, layout, to, transition_picker, trajectory_slicer), env
    read = _read_hdf5 if data_format == "hdf5" else _read_arrow
    data = read(folder, obs_leaves, act_leaf)
    _check_totals(layout, data.lengths)
    return _dataset_of_columns(data, layout, transition_picker, trajectory_slicer), env


def _check_totals(layout: _Layout, lengths: Sequence[int]) -> None:
    metadata, meta_path = layout.metadata, layout.meta_path
    for key, found in (("total_episodes", len(lengths)), ("total_steps", int(np.sum(lengths, dtype=np.int64)))):
        if key in metadata and _count(metadata[key], meta_path, key) != found:
            raise ValueError(f"{meta_path} says {key}={metadata[key]!r} but the data holds {found}")


def _dataset_of_columns(data: _Columns, layout: _Layout, transition_picker: Any, trajectory_slicer: Any) -> MDPDataset:
    """The dataset of the episodes a backend read: Discrete actions shifted
    to indices and checked, behaviour probabilities checked, Dict
    observations in sorted key order."""
    lengths, act_leaf = data.lengths, layout.act_leaf
    starts, ends, _ = episode_layout(lengths, data.has_final)
    actions = data.actions
    space, size = layout.action_space, layout.action_size
    if space == ActionSpace.DISCRETE:
        if not 1 <= size <= MAX_DISCRETE_ACTION_SIZE:
            raise ValueError(
                f"{layout.meta_path}: action_space is Discrete(n={size}), expected n in [1, {MAX_DISCRETE_ACTION_SIZE}]"
            )
        actions = actions.reshape(-1, 1)
        if actions.dtype.kind in "iub":
            actions = actions.astype(np.int64) - act_leaf.start
        else:  # float values stay float so that 0.5 is refused, not truncated to 0
            actions = actions.astype(np.float64) - act_leaf.start
            steps = np.zeros(actions.shape[0], dtype=bool)
            steps[episode_layout(lengths, data.has_final)[2]] = True
            bad = steps & ~((actions[:, 0] == np.round(actions[:, 0])) & (actions[:, 0] >= 0) & (actions[:, 0] < size))
            if bad.any():
                row = int(np.argmax(bad))
                e = int(np.searchsorted(starts, row, side="right")) - 1
                raise ValueError(
                    f"{data.names[e]}: actions[{row - starts[e]}] is {float(actions[row, 0] + act_leaf.start)!r}, "
                    f"expected an integer in [{act_leaf.start}, {act_leaf.start + size}) (Discrete(n={size}, "
                    f"start={act_leaf.start}))"
                )
            actions = actions.astype(np.int64)
    else:
        actions = actions.reshape(actions.shape[0], -1)
        size = actions.shape[1]

    behaviour = data.behaviour
    if behaviour is not None:
        bad = ~(behaviour > 0) & ~np.isnan(behaviour)
        if space == ActionSpace.DISCRETE:
            bad |= behaviour > 1
        if bad.any():
            row = int(np.argmax(bad))
            e = int(np.searchsorted(starts, row, side="right")) - 1
            raise ValueError(
                f"{data.names[e]}: {_BEHAVIOUR}[{row - starts[e]}] is {behaviour[row]}, "
                "expected a probability in (0, 1] (a density > 0 for continuous actions)"
            )

    observations, keys = list(data.observations), None
    if layout.goal_form is not None:
        observations = _goal_observations(observations, layout)
    elif layout.dict_observations:
        # dict observations: stored in sorted key order, keys in the signature
        leaf_keys = [_leaf_key(leaf) for leaf in layout.obs_leaves]
        order = sorted(range(len(leaf_keys)), key=lambda i: leaf_keys[i])
        observations, keys = [observations[i] for i in order], tuple(leaf_keys[i] for i in order)
    return dataset_from_rows(
        observations, actions, data.rewards, starts, ends, data.terminated, data.has_final, space, size,
        transition_picker, trajectory_slicer, behaviour, data.names, observation_keys=keys,
    )


def _goal_observations(columns: list, layout: _Layout) -> list:
    """d3rlpy's goal-conditioned observations from a Dict's leaf columns:
    ``[observation, goal]`` as one column, or the two columns (the goal's
    leaves, a Dict goal's in sorted key order, concatenated)."""
    by_key = {_leaf_key(leaf): column for leaf, column in zip(layout.obs_leaves, columns)}
    goal_keys = ["desired_goal"] if "desired_goal" in by_key else sorted(
        k for k in by_key if k.startswith("desired_goal/"))

    def flat(key: str) -> np.ndarray:
        column = by_key[key]
        if column.ndim != 2:
            raise ValueError(f"{layout.meta_path}: observation member {key!r} has per-step shape {column.shape[1:]}; "
                             "the goal-conditioned forms concatenate vectors (leave tuple_observation=None)")
        return column

    observation = flat("observation")
    goal = np.concatenate([flat(k) for k in goal_keys], axis=1) if len(goal_keys) > 1 else flat(goal_keys[0])
    if layout.goal_form:
        return [observation, goal.astype(observation.dtype, copy=False)]
    return [np.concatenate([observation, goal.astype(observation.dtype, copy=False)], axis=1)]


def _stream(
    folder: pathlib.Path, layout: _Layout, to: PathLike, transition_picker: Any, trajectory_slicer: Any,
) -> MDPDataset:
    """``get_minari(..., to=...)``: each episode read, checked and converted
    as the in-memory read does (one episode's rows at a time), then
    appended to a :class:`DiskDatasetWriter`."""
    if not isinstance(to, (str, os.PathLike)):
        raise TypeError(f"to must be a str or a path, got {type(to).__name__}")
    source_type = _Hdf5Stream if layout.data_format == "hdf5" else _ArrowStream
    source = source_type(folder, layout.obs_leaves, layout.act_leaf, layout.metadata)
    try:
        try:
            writer = DiskDatasetWriter(to, action_space=layout.action_space, action_size=layout.action_size,
                                       expected_bytes=source.expected_bytes)
        except OSError as e:
            raise _WriteError(e) from None
        try:
            lengths = []
            for data in source:
                episode = _dataset_of_columns(data, layout, None, None).episodes[0]
                if data.behaviour is not None and np.isnan(episode.behaviour_probabilities).all():
                    # none logged for this episode: the writer stores NaN for its steps
                    episode = dataclasses.replace(episode, behaviour_probabilities=None)
                try:
                    writer.add_episode(episode)
                except OSError as e:
                    raise _WriteError(e) from None
                except (ValueError, TypeError) as e:  # an episode unlike the first one
                    raise type(e)(f"{data.names[0]}: {e}") from None
                lengths.append(int(data.lengths[0]))
            _check_totals(layout, lengths)
            try:
                writer.close()
            except OSError as e:
                raise _WriteError(e) from None
        except BaseException:
            writer.abort()
            raise
    finally:
        source.close()
    return MDPDataset.load(to, transition_picker=transition_picker, trajectory_slicer=trajectory_slicer,
                           in_memory=False)


# --------------------------------------------------------------- writing
def _nest(leaves: list[_Leaf], values: list[Any]) -> Any:
    """Leaf values back into the nesting of their space (dicts keyed like it)."""
    if len(leaves) == 1 and leaves[0].path == ():
        return values[0]
    tree: dict = {}
    for leaf, value in zip(leaves, values):
        node = tree
        for part in leaf.path[:-1]:
            node = node.setdefault(part, {})
        node[leaf.path[-1]] = value
    return tree


def _write_hdf5_tree(group: Any, name: str, tree: Any) -> None:
    if isinstance(tree, dict):
        sub = group.create_group(name)
        for key, value in tree.items():
            _write_hdf5_tree(sub, f"_index_{key}" if isinstance(key, int) else key, value)
    else:
        group.create_dataset(name, data=tree)


def _arrow_array(tree: Any, leaves_by_path: dict, path: tuple = ()) -> Any:
    import pyarrow as pa

    if isinstance(tree, dict):
        names = [str(k) for k in tree]
        arrays = [_arrow_array(v, leaves_by_path, path + (k,)) for k, v in tree.items()]
        return pa.StructArray.from_arrays(arrays, names=names)
    leaf = leaves_by_path[path]
    values = np.ascontiguousarray(tree)
    if leaf.kind == "Discrete":
        return pa.array(values.reshape(-1).astype(np.int32))
    width = int(np.prod(values.shape[1:])) if values.ndim > 1 else 1
    flat = values.reshape(values.shape[0], width)
    return pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1)), width)


def to_minari(
    dataset: ReplayBufferBase,
    path: PathLike,
    dataset_id: Optional[str] = None,
    data_format: str = "hdf5",
    env: Any = None,
    observation_space: Any = None,
    action_space: Any = None,
    metadata: Optional[dict] = None,
    overwrite: bool = False,
) -> pathlib.Path:
    """Write ``dataset`` as a Minari dataset folder ``path`` (``path/data/...``).

    Args:
        dataset: a replay buffer or :class:`MDPDataset`.
        path: the dataset folder to create (for ``minari.load_dataset``, put
            it at ``~/.minari/datasets/<dataset_id>``).
        dataset_id: stored as ``dataset_id``; defaults to the folder name.
        data_format: ``"hdf5"`` or ``"arrow"`` (needs pyarrow).
        env: a gymnasium env whose spaces and spec are stored (so the
            environment can be rebuilt when the dataset is read).
        observation_space, action_space: gymnasium spaces to store instead;
            by default unbounded Boxes (a Tuple of them for tuple
            observations, a Dict of them by key for dict observations) and
            ``Discrete(action_size)``. A given Dict space must have the
            dataset's keys; each key is written under its name.
        metadata: extra JSON-serialisable entries for ``metadata.json``
            (``author``, ``algorithm_name``, ...).
        overwrite: replace an existing dataset at ``path``.

    Each episode of ``N`` steps is written with ``N + 1`` observations: the
    final observation of a truncated episode when the dataset has it, zeros
    after a terminal step, and zeros marked with the episode attribute
    ``offrl_final_observation_missing`` when a truncated episode has none.
    Behaviour probabilities, when present, are written per episode.

    Returns:
        the dataset folder.
    """
    if data_format not in ("hdf5", "arrow"):
        raise ValueError(f"data_format must be 'hdf5' or 'arrow', got {data_format!r}")
    root = pathlib.Path(path)
    final_folder = root / "data"
    if final_folder.exists() and not overwrite:
        raise ValueError(f"{final_folder} already exists: pass overwrite=True to replace it")
    episodes = list(dataset.episodes)
    if not episodes:
        raise ValueError("cannot write a dataset with no episodes to Minari format")
    info = dataset.dataset_info

    obs_sig = info.observation_signature
    if observation_space is None and env is not None:
        observation_space = env.observation_space
    if action_space is None and env is not None:
        action_space = env.action_space
    if observation_space is not None:
        obs_space = _space_to_dict(observation_space)
    elif obs_sig.keys is not None:
        obs_space = _dict_space_of_keys(obs_sig.keys, obs_sig.shape, obs_sig.dtype)
    elif len(obs_sig.shape) == 1:
        obs_space = _unbounded_box(obs_sig.shape[0], obs_sig.dtype[0])
    else:
        obs_space = {"type": "Tuple", "subspaces": [_unbounded_box(s, d) for s, d in zip(obs_sig.shape, obs_sig.dtype)]}
    discrete = info.action_space == ActionSpace.DISCRETE
    if action_space is not None:
        act_space = _space_to_dict(action_space)
    elif discrete:
        act_space = {"type": "Discrete", "dtype": "int64", "start": 0, "n": int(info.action_size)}
    else:
        act_space = _unbounded_box((int(info.action_size),), np.dtype(np.float32))
    obs_leaves = _leaves(obs_space, "observation_space")
    if len(obs_leaves) != len(obs_sig.shape):
        raise ValueError(
            f"observation_space has {len(obs_leaves)} parts, the dataset's observations have {len(obs_sig.shape)}"
        )
    if obs_sig.keys is not None:
        # pair each stored column (sorted key order) with its space's leaf by key
        by_key = {_leaf_key(leaf): leaf for leaf in obs_leaves}
        for key in obs_sig.keys:
            if key not in by_key:
                raise ValueError(f"observation_space has no key {key!r}: its keys are {sorted(by_key)}")
        obs_leaves = [by_key[key] for key in obs_sig.keys]
    act_leaves = _leaves(act_space, "action_space")
    if len(act_leaves) != 1 or (act_leaves[0].kind == "Discrete") != discrete:
        raise ValueError(f"action_space {act_space['type']} does not match the dataset's {info.action_space.name} actions")
    act_leaf = act_leaves[0]
    leaves_by_path = {leaf.path: leaf for leaf in obs_leaves}

    # written beside the final folder and swapped in when complete: a kill
    # mid-write leaves the previous dataset (or nothing) at root/data
    root.mkdir(parents=True, exist_ok=True)
    folder = pathlib.Path(_safety.sibling_temporary_name(final_folder, "partial"))
    folder.mkdir()
    try:
        _write_minari_folder(
            folder, root, episodes, obs_leaves, act_leaf, leaves_by_path, discrete, data_format, dataset_id,
            obs_space, act_space, env, metadata,
        )
        _swap_into_place(folder, final_folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return root


def _swap_into_place(folder: pathlib.Path, final: pathlib.Path) -> None:
    """Rename the complete ``folder`` to ``final``; an existing ``final`` is
    renamed aside first and removed only once the new one is in place."""
    if not final.exists():
        os.rename(folder, final)
        return
    aside = pathlib.Path(_safety.sibling_temporary_name(final, "old"))
    os.rename(final, aside)
    try:
        os.rename(folder, final)
    except BaseException:
        os.rename(aside, final)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def _write_minari_folder(
    folder: pathlib.Path, root: pathlib.Path, episodes: list, obs_leaves: list, act_leaf: _Leaf,
    leaves_by_path: dict, discrete: bool, data_format: str, dataset_id: Optional[str], obs_space: dict,
    act_space: dict, env: Any, metadata: Optional[dict],
) -> None:
    """Write the episodes and ``metadata.json`` into the (new, empty) ``folder``."""
    import h5py

    total_steps = 0
    h5 = h5py.File(folder / _MAIN_FILE, "w", track_order=True) if data_format == "hdf5" else None
    try:
        for i, episode in enumerate(episodes):
            obs = episode.observations
            columns = list(obs) if isinstance(obs, (list, tuple)) else [obs]
            n = int(episode.actions.shape[0])
            final = episode.final_observation
            missing = final is None and not episode.terminated
            if final is None:
                finals = [np.zeros_like(c[0]) for c in columns]
            else:
                finals = list(final) if isinstance(final, (list, tuple)) else [final]
            full = [
                np.concatenate([np.asarray(c), np.asarray(f, dtype=c.dtype).reshape((1,) + c.shape[1:])])
                for c, f in zip(columns, finals)
            ]
            full = [
                c.reshape((c.shape[0],) + tuple(leaf.shape)) if leaf.kind == "Box" else c.reshape(-1)
                for c, leaf in zip(full, obs_leaves)
            ]
            actions = np.asarray(episode.actions)
            if discrete:
                actions = actions.reshape(-1).astype(np.int64) + act_leaf.start
            else:
                actions = actions.reshape((n,) + act_leaf.shape).astype(act_leaf.dtype, copy=False)
            rewards = np.asarray(episode.rewards, dtype=np.float64).reshape(n)
            terminations = np.zeros(n, dtype=bool)
            truncations = np.zeros(n, dtype=bool)
            (terminations if episode.terminated else truncations)[-1] = True
            behaviour = getattr(episode, _BEHAVIOUR, None)
            total_steps += n
            if h5 is not None:
                group = h5.create_group(f"episode_{i}")
                group.attrs["id"] = i
                group.attrs["total_steps"] = n
                if missing:
                    group.attrs[_MISSING_FINAL] = True
                _write_hdf5_tree(group, "observations", _nest(obs_leaves, full))
                group.create_dataset("actions", data=actions)
                group.create_dataset("rewards", data=rewards)
                group.create_dataset("terminations", data=terminations)
                group.create_dataset("truncations", data=truncations)
                if behaviour is not None:
                    group.create_dataset(_BEHAVIOUR, data=np.asarray(behaviour, dtype=np.float64))
            else:
                _write_arrow_episode(
                    folder / str(i), i, n, missing, _nest(obs_leaves, full), actions, rewards,
                    terminations, truncations, behaviour, leaves_by_path, act_leaf,
                )
    finally:
        if h5 is not None:
            h5.close()

    record = {
        "dataset_id": dataset_id if dataset_id is not None else root.name,
        "total_episodes": len(episodes),
        "total_steps": total_steps,
        "data_format": data_format,
        "observation_space": json.dumps(obs_space),
        "action_space": json.dumps(act_space),
        "minari_version": MINARI_LAYOUT_VERSION,
        "offrl_version": __version__,
    }
    spec = getattr(env, "spec", None)
    if spec is not None:
        try:
            record["env_spec"] = spec.to_json()
        except Exception as e:  # specs with callables in kwargs cannot be serialised
            warnings.warn(f"the env spec is not JSON-serialisable ({e}); it is not stored")
    for key, value in (metadata or {}).items():
        if key in record:
            raise ValueError(f"metadata[{key!r}] is written by to_minari itself")
        record[key] = value
    with open(folder / _METADATA_FILE, "w") as f:
        json.dump(record, f)


def _write_arrow_episode(
    directory: pathlib.Path, episode_id: int, n: int, missing: bool, observations: Any, actions: np.ndarray,
    rewards: np.ndarray, terminations: np.ndarray, truncations: np.ndarray, behaviour: Any,
    leaves_by_path: dict, act_leaf: _Leaf,
) -> None:
    try:
        import pyarrow as pa
        import pyarrow.ipc
    except ImportError:
        raise ImportError("writing Minari's Arrow format needs pyarrow: pip install 'offrl[minari]'") from None
    directory.mkdir()
    pad_actions = np.concatenate([actions, np.zeros((1,) + actions.shape[1:], actions.dtype)])
    columns = {
        "observations": _arrow_array(observations, leaves_by_path),
        "actions": _arrow_array(pad_actions, {(): act_leaf}),
        "rewards": pa.array(np.append(rewards, 0.0)),
        "terminations": pa.array(np.append(terminations, False)),
        "truncations": pa.array(np.append(truncations, False)),
    }
    if behaviour is not None:
        columns[_BEHAVIOUR] = pa.array(np.append(np.asarray(behaviour, dtype=np.float64), 1.0))
    batch = pa.RecordBatch.from_pydict(columns)
    with pa.OSFile(str(directory / "part-0.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
    meta = {"id": episode_id, "total_steps": n}
    if missing:
        meta[_MISSING_FINAL] = True
    with open(directory / _METADATA_FILE, "w") as f:
        json.dump(meta, f)
