"""What every replay buffer offers (:class:`ReplayBufferBase`, d3rlpy's
interface) and the description of the data it holds (:class:`DatasetInfo`).

:class:`~offrl.dataset.ReplayBuffer` (``replay_buffer.py``) implements it
over a columnar store; :class:`~offrl.dataset.MixedReplayBuffer` over two
buffers.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, BinaryIO, Optional, Sequence, Union

import numpy as np

from ..constants import ActionSpace
from .batch import TrajectoryMiniBatch, TransitionMiniBatch
from .episode import EpisodeBase, PartialTrajectory, Transition
from .signature import Observation, Signature
from .summary import format_summary, summary_dict

__all__ = ["DatasetInfo", "ReplayBufferBase", "EmptyBufferError", "PathOrFile", "as_positive_int", "discrete_action_size"]

PathOrFile = Union[str, os.PathLike, BinaryIO]


@dataclasses.dataclass(frozen=True)
class DatasetInfo:
    """Signatures and action space of the data a buffer holds."""

    observation_signature: Signature
    action_signature: Signature
    reward_signature: Signature
    action_space: ActionSpace
    action_size: int


def as_positive_int(value: Any, name: str) -> int:
    """``value`` as an int > 0 (``TypeError`` for a non-int or bool, ``ValueError`` for <= 0, naming ``name``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return int(value)


class EmptyBufferError(ValueError):
    """A buffer with no data and no signatures was asked what it holds."""


class ReplayBufferBase:
    """What every replay buffer offers (see :class:`ReplayBuffer`)."""

    def append(self, observation: Observation, action: Any, reward: Any) -> None:
        raise NotImplementedError

    def append_episode(self, episode: EpisodeBase) -> None:
        raise NotImplementedError

    def clip_episode(self, terminated: bool, final_observation: Optional[Observation] = None) -> None:
        raise NotImplementedError

    def sample_transition(self) -> Transition:
        raise NotImplementedError

    def sample_transition_batch(self, batch_size: int) -> TransitionMiniBatch:
        raise NotImplementedError

    def sample_trajectory(self, length: int) -> PartialTrajectory:
        raise NotImplementedError

    def sample_trajectory_batch(self, batch_size: int, length: int) -> TrajectoryMiniBatch:
        raise NotImplementedError

    def dump(self, f: PathOrFile) -> None:
        from .io import dump_episodes

        dump_episodes(self.episodes, self.dataset_info, f)

    def size(self) -> int:
        """Number of episodes."""
        return len(self.episodes)

    @property
    def episodes(self) -> Sequence[EpisodeBase]:
        raise NotImplementedError

    @property
    def transition_count(self) -> int:
        raise NotImplementedError

    @property
    def dataset_info(self) -> DatasetInfo:
        raise NotImplementedError

    @property
    def action_space(self) -> ActionSpace:
        return self.dataset_info.action_space

    @property
    def action_size(self) -> int:
        return self.dataset_info.action_size

    def compute_returns(self) -> np.ndarray:
        """Undiscounted return of each episode, float64."""
        return np.array([e.compute_return() for e in self.episodes], dtype=np.float64)

    def summary(self) -> dict:
        """Episodes, transitions, signatures, action space and return statistics."""
        episodes = self.episodes
        info = self.dataset_info
        returns = self.compute_returns()
        lengths = np.array([e.size() for e in episodes], dtype=np.int64)
        terminated = int(sum(bool(e.terminated) for e in episodes)) if len(episodes) < 10_000 else None
        return summary_dict(info, returns, lengths, terminated, self.transition_count)

    def __repr__(self) -> str:
        try:
            return format_summary(type(self).__name__, self.summary())
        except EmptyBufferError:
            return f"{type(self).__name__}(empty)"


def discrete_action_size(episodes: Sequence[EpisodeBase], action_space: Optional[ActionSpace]) -> Optional[int]:
    """d3rlpy's rule for the action size of discrete episodes: the largest
    action index over all of them, plus one (None when the first episode's
    actions are not discrete, or when some actions are not plain indices:
    :meth:`ReplayBuffer.append_episode` then infers and checks as usual, and
    refuses negative, fractional or non-finite actions)."""
    first = np.asarray(episodes[0].actions)
    if action_space is None:
        discrete = np.issubdtype(first.dtype, np.integer) or first.dtype == np.bool_
    else:
        discrete = action_space == ActionSpace.DISCRETE
    if not discrete:
        return None
    largest = -1
    for episode in episodes:
        actions = np.asarray(episode.actions)
        if not (np.issubdtype(actions.dtype, np.number) or actions.dtype == np.bool_) or actions.size == 0:
            continue
        if np.issubdtype(actions.dtype, np.floating) and not np.isfinite(actions).all():
            return None
        largest = max(largest, int(np.max(actions)))
    return largest + 1 if largest >= 0 else None
