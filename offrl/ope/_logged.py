"""Logged data as flat, episode-ordered arrays for the importance-sampling
estimators (one pass over the dataset, no per-transition work)."""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..constants import ActionSpace
from ..dataset.signature import observation_columns

__all__ = ["LoggedData", "logged_data", "take_rows", "locate"]

Observations = Union[np.ndarray, List[np.ndarray]]


@dataclasses.dataclass(frozen=True)
class LoggedData:
    """The steps of a dataset in episode order (the order of
    ``np.concatenate([ep.actions for ep in dataset.episodes])``).

    Attributes:
        observations: ``(N, *obs_shape)``, or a list of such arrays for tuple
            observations.
        actions: ``(N,)`` int64 indices (discrete) or ``(N, action_size)``.
        rewards: ``(N,)`` float64.
        lengths: ``(E,)`` steps per episode (all > 0).
        discrete: whether actions are discrete.
        action_size: number of actions (discrete) or action dimensions.
        behaviour_probabilities: the dataset's logged column, ``(N,)``, or None.
    """

    observations: Observations
    actions: np.ndarray
    rewards: np.ndarray
    lengths: np.ndarray
    discrete: bool
    action_size: int
    behaviour_probabilities: Optional[np.ndarray]

    @property
    def n_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def n_episodes(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def starts(self) -> np.ndarray:
        """Row of each episode's first step, ``(E,)``."""
        return np.cumsum(self.lengths) - self.lengths


def take_rows(observations: Observations, rows: Any) -> Observations:
    """``observations[rows]`` for plain and tuple observations."""
    if isinstance(observations, list):
        return [o[rows] for o in observations]
    return observations[rows]


def locate(lengths: np.ndarray, index: int) -> Tuple[int, int]:
    """``(episode, step)`` of flat step ``index``."""
    ends = np.cumsum(lengths)
    episode = int(np.searchsorted(ends, index, side="right"))
    return episode, int(index - (ends[episode] - lengths[episode]))


def _episode_list(dataset: Any) -> Sequence[Any]:
    if hasattr(dataset, "episodes"):
        return list(dataset.episodes)
    if isinstance(dataset, (list, tuple)):
        return list(dataset)
    raise TypeError(
        f"dataset must be a ReplayBuffer / MDPDataset or a list of episodes, got {type(dataset).__name__}"
    )


def logged_data(dataset: Any) -> LoggedData:
    """Flatten a dataset (ReplayBuffer / MDPDataset, or a list of episodes).

    Raises ``ValueError`` for a dataset without episodes, an empty episode,
    or non-finite rewards (naming the episode and step).
    """
    arrays = None
    if hasattr(dataset, "to_arrays"):
        try:
            arrays = dataset.to_arrays()
        except TypeError:  # buffers without columnar storage
            arrays = None
    if arrays is not None:
        lengths = np.asarray(arrays["episode_ends"], dtype=np.int64) - np.asarray(arrays["episode_starts"], dtype=np.int64)
        observations = observation_columns(arrays["observations"])  # a dict's values in stored key order
        actions, rewards = np.asarray(arrays["actions"]), np.asarray(arrays["rewards"])
    else:
        episodes = _episode_list(dataset)
        lengths = np.fromiter((int(ep.size()) for ep in episodes), dtype=np.int64, count=len(episodes))
    if lengths.shape[0] == 0:
        raise ValueError("the dataset has no episodes: the estimators need at least one")
    if (lengths == 0).any():
        i = int(np.argmax(lengths == 0))
        raise ValueError(f"episode {i} is empty (0 steps): every episode needs at least one step")
    if arrays is None:
        columns = [observation_columns(ep.observations) for ep in episodes]
        if isinstance(columns[0], (list, tuple)):
            observations = [np.concatenate([c[k] for c in columns]) for k in range(len(columns[0]))]
        else:
            observations = np.concatenate(columns)
        actions = np.concatenate([np.asarray(ep.actions) for ep in episodes])
        rewards = np.concatenate([np.asarray(ep.rewards).reshape(-1) for ep in episodes])

    info = getattr(dataset, "dataset_info", None)
    if info is not None:
        discrete = info.action_space == ActionSpace.DISCRETE
        action_size = int(info.action_size)
    else:
        discrete = np.issubdtype(actions.dtype, np.integer)
        action_size = int(actions.max()) + 1 if discrete else int(actions.reshape(len(actions), -1).shape[1])
    if discrete:
        actions = actions.reshape(-1).astype(np.int64, copy=False)
    else:
        actions = actions.reshape(actions.shape[0], -1).astype(np.float64, copy=False)
    rewards = rewards.reshape(-1).astype(np.float64, copy=False)
    if not np.isfinite(rewards).all():
        i = int(np.argmax(~np.isfinite(rewards)))
        episode, step = locate(lengths, i)
        raise ValueError(f"rewards[{i}] (episode {episode}, step {step}) is {rewards[i]}, expected a finite number")
    behaviour = getattr(dataset, "behaviour_probabilities", None)
    if behaviour is not None:
        behaviour = np.asarray(behaviour, dtype=np.float64).reshape(-1)
    if isinstance(observations, tuple):
        observations = list(observations)
    return LoggedData(observations, actions, rewards, lengths, bool(discrete), action_size, behaviour)
