"""``dump`` / ``load`` of episode lists (d3rlpy.dataset.dump / load) in
offrl's HDF5 dataset format (see :mod:`offrl.dataset.io`)."""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Optional, Sequence, Type, TypeVar, Union

import numpy as np

from .. import _safety
from .episode import Episode, EpisodeBase
from .io import read_dataset_file
from .storage import InfiniteBuffer

__all__ = ["dump", "load", "load_v1", "DATASET_VERSION"]

PathOrFile = Union[str, os.PathLike, BinaryIO]
_TEpisode = TypeVar("_TEpisode")

#: The version of offrl's dataset file format that :func:`dump` writes.
DATASET_VERSION = "offrl.dataset-1"


def dump(episodes: Sequence[EpisodeBase], f: PathOrFile) -> None:
    """Write ``episodes`` to ``f`` (a path or a binary file object) as an
    offrl HDF5 dataset file; a path is written to a temporary file first and
    renamed into place."""
    from .replay_buffer import ReplayBuffer

    episodes = list(episodes)
    if not episodes:
        raise ValueError("episodes is empty: there is nothing to dump")
    ReplayBuffer(InfiniteBuffer(), episodes=episodes).dump(f)


def load(episode_cls: Type[_TEpisode], f: PathOrFile) -> Sequence[_TEpisode]:
    """Read the episodes of a file written by :func:`dump` (or
    ``ReplayBuffer.dump``). ``episode_cls`` builds each episode: offrl's
    :class:`Episode` keeps final observations and behaviour probabilities;
    any other class is called with d3rlpy's four fields
    (``observations``, ``actions``, ``rewards``, ``terminated``). Nothing
    named in the file is imported or called."""
    if not isinstance(episode_cls, type):
        raise TypeError(f"episode_cls must be a class, got {type(episode_cls).__name__}")
    data = read_dataset_file(f)
    store = InfiniteBuffer()
    store.set_columns(
        data["observations"], data["actions"], data["rewards"], data["episode_starts"],
        data["episode_ends"], data["episode_terminated"], data["episode_has_final"],
        data.get("behaviour_probabilities"),
    )
    episodes: list[Any] = list(store.episodes)
    if issubclass(episode_cls, Episode):
        return [
            e if type(e) is episode_cls else episode_cls(**{k: getattr(e, k) for k in Episode.__dataclass_fields__})
            for e in episodes
        ]
    return [
        episode_cls(observations=e.observations, actions=e.actions, rewards=e.rewards, terminated=e.terminated)
        for e in episodes
    ]


_V1_COLUMNS = ("observations", "actions", "rewards", "terminals")


def load_v1(f: PathOrFile, max_expansion: Optional[float] = _safety.DEFAULT_MAX_EXPANSION) -> Sequence[Episode]:
    """Read a dataset file of d3rlpy 1.x (``MDPDataset.dump``: root arrays
    ``observations``, ``actions``, ``rewards``, ``terminals`` and, when
    present, ``episode_terminals``) as episodes, as d3rlpy 2.x's
    ``load_v1`` does: an episode ends at a terminal step or at an episode
    end that is not terminal (a timeout). Only arrays of numbers are read
    (each size, and the expansion of compressed arrays against
    ``max_expansion``, checked before reading); nothing in the file is run.
    Errors (a NaN reward, a flag that is not 0/1 ...) name the file."""
    import h5py

    from .episode_generator import EpisodeGenerator

    name = str(f) if isinstance(f, (str, os.PathLike)) else str(getattr(f, "name", f"<{type(f).__name__}>"))
    if isinstance(f, (str, os.PathLike)):
        _safety.check_regular_file(f, "d3rlpy 1.x dataset file")
    try:
        h5 = h5py.File(f, "r")
    except (OSError, ValueError, TypeError) as e:
        raise ValueError(f"{name} is not a d3rlpy 1.x dataset file: it is not HDF5 or it is truncated ({e})") from None
    with h5:
        missing = [k for k in _V1_COLUMNS if k not in h5]
        if missing:
            raise ValueError(f"{name} is not a d3rlpy 1.x dataset file: it is missing {missing}")
        keys = list(_V1_COLUMNS) + (["episode_terminals"] if "episode_terminals" in h5 else [])
        committed = 0
        nodes = []
        for key in keys:  # every declared size checked before the first read
            node = _safety.checked_h5_dataset(h5, key, name)
            committed += _safety.check_declared_size(name, key, node.shape, node.dtype, committed)
            nodes.append((key, node))
        _safety.check_expansion(name, nodes, max_expansion)
        data = {key: _safety.read_h5_dataset(h5, key, name) for key in keys}
    rows = data["actions"].shape[0] if data["actions"].ndim else 0
    for key, column in data.items():
        if column.ndim == 0 or column.shape[0] != rows:
            raise ValueError(f"{name} is corrupt: {key} has shape {column.shape}, actions has {rows} rows")
    flags = {}
    for key in ("terminals", "episode_terminals"):
        if key in data:
            column = data[key]
            if column.size != rows:
                raise ValueError(f"{name} is corrupt: {key} has shape {column.shape}, expected one flag per step")
            column = column.reshape(rows)
            bad = ~((column == 0) | (column == 1))  # nan included
            if bad.any():
                i = int(np.argmax(bad))
                raise ValueError(f"{name}: {key}[{i}] is {column[i].item()!r}, expected 0 or 1")
            flags[key] = column != 0
    terminals = flags["terminals"]
    timeouts = flags["episode_terminals"] & ~terminals if "episode_terminals" in flags else None
    try:
        return EpisodeGenerator(
            observations=data["observations"],
            actions=data["actions"],
            rewards=data["rewards"],
            terminals=terminals.astype(np.float32),
            timeouts=None if timeouts is None else timeouts.astype(np.float32),
        )()
    except (ValueError, TypeError) as e:  # NaN values, bad shapes ...: say which file
        raise type(e)(f"{name}: {e}") from None
