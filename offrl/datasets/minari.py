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
import os
import pathlib
import shutil
import warnings
from typing import Any, Optional, Sequence

import numpy as np

from .. import _safety
from .._optional import optional_dependency
from .._version import __version__
from ..constants import ActionSpace
from ..dataset.keys import check_observation_keys
from ..dataset.signature import observation_columns
from ..dataset.io import check_discrete_action_size
from ..dataset.disk_writer import DiskDatasetWriter
from ..dataset.compat import MDPDataset
from ..dataset.replay_buffer import ReplayBufferBase
from ..envs.wrappers import GoalConcatWrapper
from ._build import dataset_from_rows, episode_layout
from ._minari_format import (
    ArrowStream,
    BEHAVIOUR,
    Columns,
    Hdf5Stream,
    Leaf,
    MAIN_FILE,
    METADATA_FILE,
    MINARI_LAYOUT_VERSION,
    MISSING_FINAL,
    PathLike,
    data_folder,
    dict_space_of_keys,
    leaf_key,
    parse_space,
    read_arrow,
    read_hdf5,
    read_metadata,
    space_leaves,
    space_to_dict,
    stored_count,
    unbounded_box,
)
from .streaming import check_layout

__all__ = ["get_minari", "describe_minari", "to_minari", "MINARI_LAYOUT_VERSION"]


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
        parsed = _safety.load_json(env_spec, f"{where}: env_spec") if isinstance(env_spec, str) else env_spec
    except ValueError as e:
        warnings.warn(f"{e}; env is None")
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
    layout: Optional[str] = None,
    max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION,
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
        layout: with ``to``, the disk layout written
            (:class:`offrl.dataset.DiskDatasetWriter`'s): ``"rows"`` (what
            ``None``, the default, writes: each step's fields in one
            record, one read per sampled transition) or ``"columns"`` (one
            file per field, schema version 1, readable by offrls before the
            rows layout). Both read back identically. A ``layout`` not in
            ``("rows", "columns")``, or given without ``to``, is a
            ``ValueError`` raised before anything is read.
        max_expansion: HDF5 data whose compressed arrays would expand to
            more than this many times the bytes stored for them is refused
            before they are read (None: no bound; see SECURITY.md).

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
    disk_layout = check_layout(layout, to is not None)
    _safety.check_max_expansion(max_expansion)
    folder = data_folder(dataset_id_or_path)
    try:
        return _get_minari(folder, transition_picker, trajectory_slicer, render_mode, load_env, to, tuple_observation,
                           disk_layout, max_expansion)
    except _WriteError as e:
        raise e.error from None
    except (KeyError, IndexError, AttributeError, OSError) as e:
        # a half-written or foreign folder: say which, not a bare KeyError
        raise ValueError(
            f"{folder} is not a complete Minari dataset ({type(e).__name__}: {e}); "
            "it may be half-written or in a layout offrl does not read"
        ) from None


def describe_minari(dataset_id_or_path: PathLike) -> dict:
    """What a Minari dataset holds, from its ``metadata.json`` (or Minari
    <= 0.4's root attributes) only: no episode array is read and no
    environment is made."""
    folder = data_folder(dataset_id_or_path)
    metadata, meta_path = read_metadata(folder)

    def space_text(key: str) -> str:
        value = metadata.get(key)
        if value is None:
            return "not recorded"
        space = parse_space(value, f"{meta_path}: {key}")
        leaves = space_leaves(space, f"{meta_path}: {key}")
        texts = [f"Discrete(n={leaf.n})" if leaf.kind == "Discrete" else f"Box {leaf.dtype.name}{leaf.shape}"
                 for leaf in leaves]
        if len(leaves) == 1 and not leaves[0].path:
            return texts[0]
        parts = [f"{'/'.join(map(str, leaf.path))}: {text}" for leaf, text in zip(leaves, texts)]
        return f"{space.get('type')} {{" + ", ".join(parts[:16]) + (", ..." if len(parts) > 16 else "") + "}"

    env_spec = metadata.get("env_spec")
    env_id = None
    if isinstance(env_spec, str):
        try:
            parsed = _safety.load_json(env_spec, f"{meta_path}: env_spec")
            env_id = parsed.get("id") if isinstance(parsed, dict) else None
        except ValueError:
            env_id = None
    return {
        "format": f"Minari dataset ({metadata.get('data_format', 'hdf5')}), {meta_path}",
        "dataset_id": metadata.get("dataset_id", "not recorded"),
        "episodes": metadata.get("total_episodes", "not recorded"),
        "steps": metadata.get("total_steps", "not recorded"),
        "observation_space": space_text("observation_space"),
        "action_space": space_text("action_space"),
        "environment": env_id if isinstance(env_id, str) else "not recorded",
    }


@dataclasses.dataclass
class _Layout:
    """What ``metadata.json`` (and the env it names) say about the data."""

    metadata: dict
    meta_path: pathlib.Path
    data_format: str
    dict_observations: bool
    obs_leaves: list
    act_leaf: Leaf
    action_space: ActionSpace
    action_size: Optional[int]  # None for Box actions: the width read
    goal_form: Optional[bool] = None  # get_minari's tuple_observation for a goal-conditioned Dict
    max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION  # get_minari's bound on compressed HDF5 arrays


def _get_minari(
    folder: pathlib.Path, transition_picker: Any, trajectory_slicer: Any, render_mode: Optional[str], load_env: bool,
    to: Optional[PathLike] = None, tuple_observation: Optional[bool] = None, disk_layout: str = "rows",
    max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION,
) -> tuple[MDPDataset, Any]:
    if tuple_observation is not None and not isinstance(tuple_observation, (bool, np.bool_)):
        raise TypeError(f"tuple_observation must be None or a bool, got {type(tuple_observation).__name__}")
    metadata, meta_path = read_metadata(folder)
    env = _recover_env(metadata.get("env_spec"), render_mode, meta_path) if load_env else None
    spaces = {}
    for key in ("observation_space", "action_space"):
        if key in metadata:
            spaces[key] = parse_space(metadata[key], f"{meta_path}: {key}")
        elif env is not None:
            spaces[key] = space_to_dict(getattr(env, key))
        else:
            raise ValueError(
                f"{meta_path} has no {key} and no env_spec gymnasium can build here, so the data cannot be decoded"
            )
    obs_leaves = space_leaves(spaces["observation_space"], f"{meta_path}: observation_space")
    act_leaves = space_leaves(spaces["action_space"], f"{meta_path}: action_space")
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
    if dict_observations:  # before any array is read; nested members as 'outer/inner'
        check_observation_keys([leaf_key(leaf) for leaf in obs_leaves], f"{meta_path}: observation_space")
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
    layout = _Layout(metadata, meta_path, data_format, dict_observations, obs_leaves, act_leaf, space, size, goal_form,
                     max_expansion)
    if to is not None:
        return _stream(folder, layout, to, transition_picker, trajectory_slicer, disk_layout), env
    if data_format == "hdf5":
        data = read_hdf5(folder, obs_leaves, act_leaf, max_expansion)
    else:
        data = read_arrow(folder, obs_leaves, act_leaf)
    _check_totals(layout, data.lengths)
    return _dataset_of_columns(data, layout, transition_picker, trajectory_slicer), env


def _check_totals(layout: _Layout, lengths: Sequence[int]) -> None:
    metadata, meta_path = layout.metadata, layout.meta_path
    for key, found in (("total_episodes", len(lengths)), ("total_steps", int(np.sum(lengths, dtype=np.int64)))):
        if key in metadata and stored_count(metadata[key], meta_path, key) != found:
            raise ValueError(f"{meta_path} says {key}={metadata[key]!r} but the data holds {found}")


def _dataset_of_columns(data: Columns, layout: _Layout, transition_picker: Any, trajectory_slicer: Any) -> MDPDataset:
    """The dataset of the episodes a backend read: Discrete actions shifted
    to indices and checked, behaviour probabilities checked, Dict
    observations in sorted key order."""
    lengths, act_leaf = data.lengths, layout.act_leaf
    starts, ends, _ = episode_layout(lengths, data.has_final)
    actions = data.actions
    space, size = layout.action_space, layout.action_size
    if space == ActionSpace.DISCRETE:
        check_discrete_action_size(size, str(layout.meta_path), field="action_space Discrete(n)")
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
                f"{data.names[e]}: {BEHAVIOUR}[{row - starts[e]}] is {behaviour[row]}, "
                "expected a probability in (0, 1] (a density > 0 for continuous actions)"
            )

    observations, keys = list(data.observations), None
    if layout.goal_form is not None:
        observations = _goal_observations(observations, layout)
    elif layout.dict_observations:
        # dict observations: stored in sorted key order, keys in the signature
        leaf_keys = [leaf_key(leaf) for leaf in layout.obs_leaves]
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
    by_key = {leaf_key(leaf): column for leaf, column in zip(layout.obs_leaves, columns)}
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
    disk_layout: str = "rows",
) -> MDPDataset:
    """``get_minari(..., to=...)``: each episode read, checked and converted
    as the in-memory read does (one episode's rows at a time), then
    appended to a :class:`DiskDatasetWriter`."""
    if not isinstance(to, (str, os.PathLike)):
        raise TypeError(f"to must be a str or a path, got {type(to).__name__}")
    if layout.data_format == "hdf5":
        source = Hdf5Stream(folder, layout.obs_leaves, layout.act_leaf, layout.metadata, layout.max_expansion)
    else:
        source = ArrowStream(folder, layout.obs_leaves, layout.act_leaf, layout.metadata)
    try:
        try:
            writer = DiskDatasetWriter(to, action_space=layout.action_space, action_size=layout.action_size,
                                       expected_bytes=source.expected_bytes, layout=disk_layout)
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
def _nest(leaves: list[Leaf], values: list[Any]) -> Any:
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
        obs_space = space_to_dict(observation_space)
    elif obs_sig.keys is not None:
        obs_space = dict_space_of_keys(obs_sig.keys, obs_sig.shape, obs_sig.dtype)
    elif len(obs_sig.shape) == 1:
        obs_space = unbounded_box(obs_sig.shape[0], obs_sig.dtype[0])
    else:
        obs_space = {"type": "Tuple", "subspaces": [unbounded_box(s, d) for s, d in zip(obs_sig.shape, obs_sig.dtype)]}
    discrete = info.action_space == ActionSpace.DISCRETE
    if action_space is not None:
        act_space = space_to_dict(action_space)
    elif discrete:
        act_space = {"type": "Discrete", "dtype": "int64", "start": 0, "n": int(info.action_size)}
    else:
        act_space = unbounded_box((int(info.action_size),), np.dtype(np.float32))
    obs_leaves = space_leaves(obs_space, "observation_space")
    if len(obs_leaves) != len(obs_sig.shape):
        raise ValueError(
            f"observation_space has {len(obs_leaves)} parts, the dataset's observations have {len(obs_sig.shape)}"
        )
    if obs_sig.keys is not None:
        # pair each stored column (sorted key order) with its space's leaf by key
        by_key = {leaf_key(leaf): leaf for leaf in obs_leaves}
        for key in obs_sig.keys:
            if key not in by_key:
                raise ValueError(f"observation_space has no key {key!r}: its keys are {sorted(by_key)}")
        obs_leaves = [by_key[key] for key in obs_sig.keys]
    act_leaves = space_leaves(act_space, "action_space")
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
    folder: pathlib.Path, root: pathlib.Path, episodes: list, obs_leaves: list, act_leaf: Leaf,
    leaves_by_path: dict, discrete: bool, data_format: str, dataset_id: Optional[str], obs_space: dict,
    act_space: dict, env: Any, metadata: Optional[dict],
) -> None:
    """Write the episodes and ``metadata.json`` into the (new, empty) ``folder``."""
    import h5py

    total_steps = 0
    h5 = h5py.File(folder / MAIN_FILE, "w", track_order=True) if data_format == "hdf5" else None
    try:
        for i, episode in enumerate(episodes):
            obs = observation_columns(episode.observations)
            columns = list(obs) if isinstance(obs, (list, tuple)) else [obs]
            n = int(episode.actions.shape[0])
            final = observation_columns(episode.final_observation)
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
            behaviour = getattr(episode, BEHAVIOUR, None)
            total_steps += n
            if h5 is not None:
                group = h5.create_group(f"episode_{i}")
                group.attrs["id"] = i
                group.attrs["total_steps"] = n
                if missing:
                    group.attrs[MISSING_FINAL] = True
                _write_hdf5_tree(group, "observations", _nest(obs_leaves, full))
                group.create_dataset("actions", data=actions)
                group.create_dataset("rewards", data=rewards)
                group.create_dataset("terminations", data=terminations)
                group.create_dataset("truncations", data=truncations)
                if behaviour is not None:
                    group.create_dataset(BEHAVIOUR, data=np.asarray(behaviour, dtype=np.float64))
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
    with open(folder / METADATA_FILE, "w") as f:
        json.dump(record, f)


def _write_arrow_episode(
    directory: pathlib.Path, episode_id: int, n: int, missing: bool, observations: Any, actions: np.ndarray,
    rewards: np.ndarray, terminations: np.ndarray, truncations: np.ndarray, behaviour: Any,
    leaves_by_path: dict, act_leaf: Leaf,
) -> None:
    with optional_dependency("writing Minari's Arrow format needs pyarrow: pip install 'offrl[minari]'"):
        import pyarrow as pa
        import pyarrow.ipc
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
        columns[BEHAVIOUR] = pa.array(np.append(np.asarray(behaviour, dtype=np.float64), 1.0))
    batch = pa.RecordBatch.from_pydict(columns)
    with pa.OSFile(str(directory / "part-0.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
    meta = {"id": episode_id, "total_steps": n}
    if missing:
        meta[MISSING_FINAL] = True
    with open(directory / METADATA_FILE, "w") as f:
        json.dump(meta, f)
