"""Mixing two replay buffers: a fixed share of each batch from a secondary one."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from .._random import get_rng
from .batch import RewardsToGo, TrajectoryMiniBatch, TransitionMiniBatch
from .episode import EpisodeBase, PartialTrajectory, Transition
from .replay_buffer import DatasetInfo, EmptyBufferError, ReplayBuffer, ReplayBufferBase, as_positive_int
from .signature import Observation

__all__ = ["MixedReplayBuffer"]


class MixedReplayBuffer(ReplayBufferBase):
    """Samples a fixed share of each batch from a secondary buffer.

    A batch of ``B`` holds ``round(secondary_mix_ratio * B)`` items from the
    secondary buffer; a single sample comes from it with probability
    ``secondary_mix_ratio``. Writing goes to the primary buffer (e.g. online
    data mixed with an offline dataset).
    """

    def __init__(
        self,
        primary_replay_buffer: ReplayBuffer,
        secondary_replay_buffer: ReplayBuffer,
        secondary_mix_ratio: float,
    ) -> None:
        if not 0.0 <= float(secondary_mix_ratio) <= 1.0:
            raise ValueError(f"secondary_mix_ratio must be in [0, 1], got {secondary_mix_ratio}")
        self._primary = primary_replay_buffer
        self._secondary = secondary_replay_buffer
        self._ratio = float(secondary_mix_ratio)
        try:
            a, b = primary_replay_buffer.dataset_info, secondary_replay_buffer.dataset_info
        except EmptyBufferError:
            return
        if (a.observation_signature, a.action_signature, a.action_space) != (
            b.observation_signature, b.action_signature, b.action_space
        ):
            raise ValueError(
                "primary and secondary buffers hold different data: "
                f"observations {a.observation_signature!r} vs {b.observation_signature!r}, "
                f"actions {a.action_signature!r} ({a.action_space.name}) vs "
                f"{b.action_signature!r} ({b.action_space.name})"
            )

    @property
    def primary_replay_buffer(self) -> ReplayBuffer:
        return self._primary

    @property
    def secondary_replay_buffer(self) -> ReplayBuffer:
        return self._secondary

    @property
    def secondary_mix_ratio(self) -> float:
        return self._ratio

    def append(self, observation: Observation, action: Any, reward: Any) -> None:
        self._primary.append(observation, action, reward)

    def append_episode(self, episode: EpisodeBase) -> None:
        self._primary.append_episode(episode)

    def clip_episode(self, terminated: bool, final_observation: Optional[Observation] = None) -> None:
        self._primary.clip_episode(terminated, final_observation)

    def _split(self, batch_size: int) -> tuple[int, int]:
        secondary = int(round(self._ratio * batch_size))
        return batch_size - secondary, secondary

    def sample_transition(self) -> Transition:
        source = self._secondary if get_rng().random() < self._ratio else self._primary
        return source.sample_transition()

    def sample_transition_batch(self, batch_size: int) -> TransitionMiniBatch:
        batch_size = as_positive_int(batch_size, "batch_size")
        n_primary, n_secondary = self._split(batch_size)
        parts = []
        if n_primary:
            parts.append(self._primary.sample_transition_batch(n_primary))
        if n_secondary:
            parts.append(self._secondary.sample_transition_batch(n_secondary))
        return _concat_batches(parts)

    def sample_trajectory(self, length: int) -> PartialTrajectory:
        source = self._secondary if get_rng().random() < self._ratio else self._primary
        return source.sample_trajectory(length)

    def sample_trajectory_batch(self, batch_size: int, length: int) -> TrajectoryMiniBatch:
        batch_size = as_positive_int(batch_size, "batch_size")
        n_primary, n_secondary = self._split(batch_size)
        parts = []
        if n_primary:
            parts.append(self._primary.sample_trajectory_batch(n_primary, length))
        if n_secondary:
            parts.append(self._secondary.sample_trajectory_batch(n_secondary, length))
        return _concat_batches(parts)

    @property
    def episodes(self) -> Sequence[EpisodeBase]:
        return list(self._primary.episodes) + list(self._secondary.episodes)

    @property
    def transition_count(self) -> int:
        return self._primary.transition_count + self._secondary.transition_count

    @property
    def dataset_info(self) -> DatasetInfo:
        try:
            return self._primary.dataset_info
        except EmptyBufferError:
            return self._secondary.dataset_info


def _concat_batches(parts: list):
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    values = {}
    for field in dataclasses.fields(first):
        items = [getattr(p, field.name) for p in parts]
        if field.name == "length":
            values["length"] = items[0]
        elif any(it is None for it in items):  # optional fields (weights, indices)
            values[field.name] = None
        elif isinstance(items[0], RewardsToGo):
            values[field.name] = RewardsToGo.concatenate(items)
        elif isinstance(items[0], Mapping):  # dict observations, by the first part's keys
            values[field.name] = {key: np.concatenate([it[key] for it in items]) for key in items[0]}
        elif isinstance(items[0], list):
            values[field.name] = [np.concatenate([it[k] for it in items]) for k in range(len(items[0]))]
        else:
            values[field.name] = np.concatenate(items)
    return type(first)(**values)
