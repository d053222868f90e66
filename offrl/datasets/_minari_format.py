"""The Minari 0.5 on-disk format, read side: spaces as JSON, finding a
dataset folder, and reading its episodes (HDF5 and Arrow backends, whole or
one episode at a time). :mod:`offrl.datasets.minari` builds datasets from
what is read here and writes the format; its docstring describes the layout."""

from __future__ import annotations

import dataclasses
import math
import os
import pathlib
from typing import Any, Optional, Sequence, Union
import numpy as np
from .. import _safety
from .._optional import optional_dependency
from ._build import episode_layout

MINARI_LAYOUT_VERSION = "0.5.4"
MAIN_FILE = "main_data.hdf5"
METADATA_FILE = "metadata.json"
MISSING_FINAL = "offrl_final_observation_missing"
BEHAVIOUR = "behaviour_probabilities"

PathLike = Union[str, os.PathLike]


# --------------------------------------------------------------- spaces
@dataclasses.dataclass(frozen=True)
class Leaf:
    """One array-valued part of a space: ``path`` of Dict keys / Tuple
    positions from the top, ``kind`` ``"Box"`` or ``"Discrete"``."""

    path: tuple
    kind: str
    shape: tuple
    dtype: np.dtype
    start: int = 0
    n: int = 0


def parse_space(value: Any, where: str) -> dict:
    if isinstance(value, str):
        try:
            value = _safety.load_json(value, where)
        except ValueError as e:
            raise ValueError(f"{e} (expected a JSON space description)") from None
    if not isinstance(value, dict) or "type" not in value:
        raise ValueError(f"{where} is not a space description (a JSON object with a 'type')")
    return value


def space_leaves(space: dict, where: str, path: tuple = ()) -> list[Leaf]:
    """The array leaves of a space, depth first (Dict members in stored order)."""
    kind = space.get("type")
    try:
        if kind == "Box":
            shape = tuple(int(s) for s in space["shape"])
            if any(s < 0 for s in shape):
                raise ValueError(f"negative shape {shape}")
            return [Leaf(path, "Box", shape, np.dtype(space["dtype"]))]
        if kind == "Discrete":
            return [Leaf(path, "Discrete", (), np.dtype(np.int64), int(space.get("start", 0)), int(space["n"]))]
        if kind == "Tuple":
            return [
                leaf for i, sub in enumerate(space["subspaces"]) for leaf in space_leaves(sub, where, path + (i,))
            ]
        if kind == "Dict":
            return [leaf for key, sub in space["subspaces"].items() for leaf in space_leaves(sub, where, path + (key,))]
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ValueError(f"{where}: a {kind} space description is malformed ({type(e).__name__}: {e})") from None
    except RecursionError:
        raise ValueError(f"{where}: the space description is nested too deeply") from None
    raise ValueError(f"{where}: {kind!r} spaces are not supported (Box, Discrete, Tuple and Dict are)")


def leaf_key(leaf: Leaf) -> str:
    """A Dict observation leaf's key: its path joined with ``/`` (nested Dicts)."""
    return "/".join(str(p) for p in leaf.path)


def dict_space_of_keys(keys: Sequence[str], shapes: Sequence[tuple], dtypes: Sequence[np.dtype]) -> dict:
    """A Dict space of unbounded Boxes for dict observation ``keys`` (a key
    with ``/`` becomes a nested Dict, the inverse of :func:`leaf_key`)."""
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
        node["subspaces"][parts[-1]] = unbounded_box(shape, dtype)
    return root


def space_to_dict(space: Any) -> dict:
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
        return {"type": "Tuple", "subspaces": [space_to_dict(s) for s in space.spaces]}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "subspaces": {k: space_to_dict(s) for k, s in space.spaces.items()}}
    raise TypeError(f"cannot write a {type(space).__name__} space: Box, Discrete, Tuple and Dict are supported")


def unbounded_box(shape: Sequence[int], dtype: np.dtype) -> dict:
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


def data_folder(dataset_id_or_path: PathLike) -> pathlib.Path:
    if not isinstance(dataset_id_or_path, (str, os.PathLike)):
        raise TypeError(f"dataset_id_or_path must be a str or a path, got {type(dataset_id_or_path).__name__}")
    given = pathlib.Path(dataset_id_or_path)
    if given.exists():
        if given.is_file():
            if given.name in (METADATA_FILE, MAIN_FILE):
                return given.parent
            raise ValueError(f"{given} is not a Minari dataset: give its folder, its data/ folder or {MAIN_FILE}")
        for folder in (given, given / "data"):
            if (folder / METADATA_FILE).is_file() or (folder / MAIN_FILE).is_file():
                return folder
        raise ValueError(
            f"{given} holds no Minari dataset: found neither data/{METADATA_FILE} nor data/{MAIN_FILE} in it"
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


def read_metadata(folder: pathlib.Path) -> tuple[dict, pathlib.Path]:
    path = folder / METADATA_FILE
    if path.is_file():
        try:
            with open(path, "rb") as f:
                metadata = _safety.load_json(f.read(), str(path))
        except OSError as e:
            raise ValueError(f"{path} cannot be read: {e.strerror or e}") from None
        if not isinstance(metadata, dict):
            raise ValueError(f"{path} does not hold a JSON object")
        return metadata, path
    import h5py

    path = folder / MAIN_FILE
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
                raise ValueError(f"{name}: {BEHAVIOUR} has {behaviour.shape[0]} rows, actions has {n}")
        self.behaviour.append(behaviour)

    def columns(self, hints: _Hints = _Hints()) -> "Columns":
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
        return Columns(
            self.names, lengths, np.asarray(self.terminated, dtype=bool), has_final,
            [np.concatenate(column) for column in observations], actions, rewards, behaviour,
        )


@dataclasses.dataclass
class Columns:
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


def stored_count(value: Any, where: Any, key: str) -> int:
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
    if total_steps is not None and stored_count(total_steps, name, "total_steps") != n:
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


def _check_leaf_shape(where: str, label: str, leaf: Leaf, shape: Optional[tuple]) -> None:
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

    path = folder / MAIN_FILE
    if not path.is_file():
        raise ValueError(f"{folder} has data_format 'hdf5' but no {MAIN_FILE}")
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


def _h5_episode(
    f: Any, key: str, path: pathlib.Path, obs_leaves: list[Leaf], act_leaf: Leaf,
    max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION,
) -> _H5Episode:
    """The episode group ``key`` checked against Minari's layout and the
    spaces (its flags, read here, checked against ``max_expansion`` first)."""
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
    flag_nodes = []
    for label in ("terminations", "truncations"):
        flags = _h5_dataset(members[label], (), where, label)
        rows = flags.shape[0] if flags.shape else 0
        if rows != n or int(np.prod(flags.shape[1:])) != 1:
            raise ValueError(f"{where}: {label} has shape {flags.shape}, expected ({n},)")
        _safety.check_declared_size(where, label, flags.shape, flags.dtype)
        flag_nodes.append((label, flags))
    _safety.check_expansion(where, flag_nodes, max_expansion)
    ended, final = _check_episode(
        where, n, [o.shape[0] if o.shape else 0 for o in observations], rewards.shape[0] if rewards.shape else 0,
        _h5_all(_h5_dataset(members["terminations"], (), where, "terminations")),
        _h5_all(_h5_dataset(members["truncations"], (), where, "truncations")),
        bool(_h5_attr(group, MISSING_FINAL)), _h5_attr(group, "total_steps"),
    )
    behaviour = _h5_dataset(group, (BEHAVIOUR,), where, key) if group.links.exists(BEHAVIOUR.encode()) else None
    if behaviour is not None and behaviour.shape[0] != n:
        raise ValueError(f"{where}: {BEHAVIOUR} has {behaviour.shape[0]} rows, actions has {n}")
    return _H5Episode(where, n, ended, final, observations, actions, rewards, behaviour)


def _h5_hints(episodes: Sequence[_H5Episode], act_leaf: Leaf) -> _Hints:
    return _Hints(
        behaviour=any(e.behaviour is not None for e in episodes),
        float_actions=act_leaf.kind == "Discrete" and any(e.actions.dtype.kind == "f" for e in episodes),
    )


def _h5_column_types(first: _H5Episode, act_leaf: Leaf, hints: _Hints) -> list[tuple[np.dtype, tuple]]:
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
    episodes: Sequence[_H5Episode], first: _H5Episode, act_leaf: Leaf, hints: _Hints,
) -> Columns:
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
                _h5_read_into(episode.behaviour, behaviour_out[a : a + n], n, where, BEHAVIOUR)
    return Columns(
        [e.where for e in episodes], lengths, np.asarray([e.terminated for e in episodes], dtype=bool), finals,
        observations_out, actions_out, rewards_out, behaviour_out,
    )


def _episode_arrays(e: _H5Episode) -> list:
    """``(field, DatasetID)`` of the arrays an episode's columns are read from."""
    named = [(f"observations[{k}]", d) for k, d in enumerate(e.observations)]
    return [(f"{e.where}/{n}", d) for n, d in named + [("actions", e.actions), ("rewards", e.rewards),
                                                        (BEHAVIOUR, e.behaviour)] if d is not None]


def read_hdf5(
    folder: pathlib.Path, obs_leaves: list[Leaf], act_leaf: Leaf,
    max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION,
) -> Columns:
    """Two passes over the episode groups: shapes and flags first, then every
    array (its memory and expansion checked) read into its rows of the columns."""
    f, path, keys = _h5_open(folder)
    with f:
        episodes = [_h5_episode(f, key, path, obs_leaves, act_leaf, max_expansion) for key in keys]
        hints = _h5_hints(episodes, act_leaf)
        rows = sum(e.n + int(e.has_final) for e in episodes)
        _h5_check_memory(str(path), "all episodes", episodes[0], act_leaf, hints, rows)
        _safety.check_expansion(str(path), [a for e in episodes for a in _episode_arrays(e)], max_expansion)
        return _h5_columns(episodes, episodes[0], act_leaf, hints)


def _h5_check_memory(where: str, what: str, first: _H5Episode, act_leaf: Leaf, hints: _Hints, rows: int) -> None:
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


class Hdf5Stream:
    """The HDF5 backend one episode at a time: a light first pass over the
    groups (which episodes log behaviour probabilities, whether Discrete
    actions are stored as floats, how many steps there are), then each
    episode checked and read alone, so only one episode's arrays are ever in
    memory (and the first error found is raised)."""

    def __init__(self, folder: pathlib.Path, obs_leaves: list[Leaf], act_leaf: Leaf, metadata: dict,
                 max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION) -> None:
        from h5py import h5d, h5g, h5o

        self.obs_leaves, self.act_leaf, self.max_expansion = obs_leaves, act_leaf, max_expansion
        self.f, self.path, self.keys = _h5_open(folder)
        try:
            behaviour = float_actions = False
            steps = 0
            for key in self.keys:
                group = h5g.open(self.f.id, key.encode())
                behaviour |= group.links.exists(BEHAVIOUR.encode())
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
            episode = _h5_episode(self.f, key, self.path, self.obs_leaves, self.act_leaf, self.max_expansion)
            _safety.check_expansion(episode.where, _episode_arrays(episode), self.max_expansion)
            if first is None:
                first = episode
            rows = episode.n + int(episode.has_final)
            if rows * sum(int(np.prod(d.shape[1:], dtype=np.int64)) for d in episode.observations) > 1 << 22:
                # a long episode: its columns must fit the memory (a short one surely does)
                _h5_check_memory(episode.where, "this episode", episode, self.act_leaf, self.hints, rows)
            yield _h5_columns([episode], first, self.act_leaf, self.hints)

    def close(self) -> None:
        self.f.close()


def _disk_bytes(rows: int, obs_leaves: list[Leaf], act_leaf: Leaf, behaviour: bool) -> int:
    """Bytes ``rows`` rows take in a disk dataset, from the spaces: float32
    observations (integers keep the declared type, Discrete ones int64),
    int64 Discrete or float32 Box actions, a float32 reward, a float64
    behaviour probability."""
    row_bytes = 4 + 8 * behaviour + (8 if act_leaf.kind == "Discrete" else 4 * int(np.prod(act_leaf.shape)))
    for leaf in obs_leaves:
        itemsize = 8 if leaf.kind == "Discrete" else 4 if leaf.dtype.kind in "fb" else leaf.dtype.itemsize
        row_bytes += itemsize * int(np.prod(leaf.shape, dtype=np.int64))
    return rows * row_bytes


def _arrow_values(array: Any, leaf: Leaf, where: str, label: str) -> np.ndarray:
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
    with optional_dependency("reading a Minari dataset in Arrow format needs pyarrow: pip install 'offrl[minari]'"):
        import pyarrow as pa
        import pyarrow.ipc  # noqa: F401 (loads pa.ipc)
    return pa


def _arrow_episode_dirs(folder: pathlib.Path) -> list[str]:
    return [name for _, name in _episode_ids([d.name for d in folder.iterdir() if d.is_dir()], "", folder)]


def _arrow_files(directory: pathlib.Path) -> list[pathlib.Path]:
    files = sorted(
        p for p in directory.iterdir()
        if p.is_file() and not p.name.startswith(("_", ".")) and p.name != METADATA_FILE
    )
    if not files:
        raise ValueError(f"{directory} holds no Arrow file")
    return files


def _arrow_episode(episodes: _Episodes, directory: pathlib.Path, obs_leaves: list[Leaf], act_leaf: Leaf) -> None:
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
    if (directory / METADATA_FILE).is_file():
        try:
            with open(directory / METADATA_FILE, "rb") as f:
                meta = _safety.load_json(f.read(), str(directory / METADATA_FILE))
        except OSError as e:
            raise ValueError(f"{directory / METADATA_FILE} cannot be read: {e.strerror or e}") from None
        if not isinstance(meta, dict):
            raise ValueError(f"{directory / METADATA_FILE} does not hold a JSON object")
    column = {k: table.column(k).combine_chunks() for k in table.column_names}
    observations = [_arrow_values(column["observations"], leaf, where, "observations") for leaf in obs_leaves]
    rows = len(table)
    actions = _arrow_values(column["actions"], act_leaf, where, "actions")[: rows - 1]
    behaviour = column[BEHAVIOUR].to_numpy(zero_copy_only=False)[: rows - 1] if BEHAVIOUR in column else None
    episodes.add(
        where, observations, actions,
        column["rewards"].to_numpy(zero_copy_only=False)[: rows - 1],
        column["terminations"].to_numpy(zero_copy_only=False)[: rows - 1],
        column["truncations"].to_numpy(zero_copy_only=False)[: rows - 1],
        bool(meta.get(MISSING_FINAL, False)), behaviour, meta.get("total_steps"),
    )


def read_arrow(folder: pathlib.Path, obs_leaves: list[Leaf], act_leaf: Leaf) -> Columns:
    _pyarrow()
    episodes = _Episodes(len(obs_leaves))
    for name in _arrow_episode_dirs(folder):
        _arrow_episode(episodes, folder / name, obs_leaves, act_leaf)
    return episodes.columns()


def _arrow_leaf_dtype(schema: Any, column: str, leaf: Leaf) -> Optional[np.dtype]:
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


class ArrowStream:
    """The Arrow backend one episode at a time: the files' schemas are read
    first (which episodes log behaviour probabilities, whether Discrete
    actions are stored as floats), then each episode folder alone."""

    def __init__(self, folder: pathlib.Path, obs_leaves: list[Leaf], act_leaf: Leaf, metadata: dict) -> None:
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
                behaviour |= BEHAVIOUR in schema.names
                found = [_arrow_leaf_dtype(schema, "observations", leaf) for leaf in obs_leaves]
                found.append(_arrow_leaf_dtype(schema, "actions", act_leaf))
                dtypes = [d if f is None else f if d is None else np.promote_types(d, f) for d, f in zip(dtypes, found)]
        self.hints = _Hints(behaviour, dtypes=tuple(dtypes))
        self.expected_bytes = None
        try:  # from the declared step count, when there is one (a final row at most for each episode)
            steps = stored_count(metadata["total_steps"], "", "")
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
