"""``dump`` / ``load`` of episode lists (d3rlpy.dataset.dump / load) in
offrl's HDF5 dataset format (see :mod:`offrl.dataset.io`)."""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Sequence, Type, TypeVar, Union

from .episode import Episode, EpisodeBase
from .io import read_dataset_file
from .storage import InfiniteBuffer

__all__ = ["dump", "load", "DATASET_VERSION"]

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
