"""Trajectory slicers: how a sampled step becomes a window of steps
(for Decision-Transformer-style algorithms).

Per item: ``slicer(episode, end_index, size) -> PartialTrajectory``
(:class:`TrajectorySlicerProtocol`). The built-in slicers also build a whole
batch at once from the columnar store (``slice_batch``).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from .batch import TrajectoryMiniBatch
from .episode import EpisodeBase, PartialTrajectory
from .pickers import check_n_frames, stacks_frames
from .signature import keyed_observation, observation_columns
from .storage import ColumnStore

__all__ = [
    "TrajectorySlicerProtocol",
    "BasicTrajectorySlicer",
    "FrameStackTrajectorySlicer",
]


@runtime_checkable
class TrajectorySlicerProtocol(Protocol):
    """Builds the window of ``size`` steps ending at step ``end_index``."""

    def __call__(self, episode: EpisodeBase, end_index: int, size: int) -> PartialTrajectory: ...


def _columns(observations):
    return list(observations) if isinstance(observations, (list, tuple)) else [observations]


def _unwrap(columns):
    return columns[0] if len(columns) == 1 else columns


def _front_pad(array: np.ndarray, pad: int) -> np.ndarray:
    if pad == 0:
        return array
    return np.concatenate([np.zeros((pad,) + array.shape[1:], dtype=array.dtype), array])


class BasicTrajectorySlicer:
    """Windows of raw steps, front-padded with zeros."""

    def _observation_window(self, column: np.ndarray, start: int, end: int) -> np.ndarray:
        return column[start:end]

    def _transforms(self, keys: Any, column: np.ndarray) -> bool:
        """Whether this slicer's observation transform applies to ``column``
        (the frame-stack slicer stacks only a dict's image keys)."""
        return True

    def __call__(self, episode: EpisodeBase, end_index: int, size: int) -> PartialTrajectory:
        n = episode.size()
        if not 0 <= end_index < n:
            raise IndexError(f"end_index {end_index} is out of range for an episode of {n} steps")
        end = end_index + 1
        start = max(end - size, 0)
        actual = end - start
        pad = size - actual
        rewards = np.asarray(episode.rewards[start:end], dtype=np.float32)
        returns_to_go = np.array(
            [[float(np.sum(episode.rewards[t:], dtype=np.float64))] for t in range(start, end)],
            dtype=np.float32,
        )
        terminals = np.zeros((actual, 1), dtype=np.float32)
        if episode.terminated and end_index == n - 1:
            terminals[-1, 0] = 1.0
        keys = getattr(episode, "observation_keys", None)
        observations = [
            _front_pad(self._observation_window(c, start, end) if self._transforms(keys, c) else c[start:end], pad)
            for c in _columns(observation_columns(episode.observations))
        ]
        return PartialTrajectory(
            observations=keyed_observation(_unwrap(observations), keys),
            actions=_front_pad(np.asarray(episode.actions[start:end]), pad),
            rewards=_front_pad(rewards, pad),
            returns_to_go=_front_pad(returns_to_go, pad),
            terminals=_front_pad(terminals, pad),
            timesteps=_front_pad(np.arange(start, end, dtype=np.int64), pad),
            masks=_front_pad(np.ones(actual, dtype=np.float32), pad),
            length=size,
        )

    def _gather_observations(self, column: np.ndarray, window: np.ndarray, starts: np.ndarray) -> np.ndarray:
        return column[window]

    def slice_batch(
        self, store: ColumnStore, episode_ids: np.ndarray, end_rows: np.ndarray, size: int
    ) -> TrajectoryMiniBatch:
        ep_starts, ep_ends, terminated, _ = store.episode_table()
        starts, ends = ep_starts[episode_ids], ep_ends[episode_ids]
        window = end_rows[:, None] + np.arange(-size + 1, 1)
        valid = window >= starts[:, None]
        window = np.where(valid, window, end_rows[:, None])
        any_padding = not valid.all()
        padding = ~valid

        def gather(array: np.ndarray) -> np.ndarray:
            out = array[window]
            if any_padding:
                out[padding] = 0
            return out

        observations = []
        keys = store.observation_signature.keys
        for column in store.observations:
            obs = self._gather_observations(column, window, starts) if self._transforms(keys, column) else column[window]
            if any_padding:
                obs[padding] = 0
            observations.append(obs)
        prefix = store.reward_prefix_sums()
        returns_to_go = prefix[ends - 1][:, None] - prefix[window] + store.rewards[window, 0]
        if any_padding:
            returns_to_go[padding] = 0
        terminals = np.zeros(window.shape + (1,), dtype=np.float32)
        terminals[:, -1, 0] = terminated[episode_ids] & (end_rows == ends - 1)
        timesteps = np.where(valid, window - starts[:, None], 0)
        return TrajectoryMiniBatch(
            observations=store.observation_view(observations),
            actions=gather(store.actions),
            rewards=gather(store.rewards),
            returns_to_go=returns_to_go.astype(np.float32)[..., None],
            terminals=terminals,
            timesteps=timesteps.astype(np.int64),
            masks=valid.astype(np.float32),
            length=size,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class FrameStackTrajectorySlicer(BasicTrajectorySlicer):
    """Windows whose observations stack the ``n_frames`` most recent frames
    of each step along the channel axis (zeros before the episode start).
    Dict observations stack per key where the key is an image (3-D per
    step); tuple observations stack every element."""

    def _transforms(self, keys: Any, column: np.ndarray) -> bool:
        return stacks_frames(keys, np.ndim(column) - 1)

    def __init__(self, n_frames: int) -> None:
        self.n_frames = check_n_frames(n_frames)

    def _observation_window(self, column: np.ndarray, start: int, end: int) -> np.ndarray:
        steps = []
        for t in range(start, end):
            frames = [column[k] if k >= 0 else np.zeros_like(column[0]) for k in range(t - self.n_frames + 1, t + 1)]
            steps.append(np.concatenate(frames, axis=0))
        return np.stack(steps) if steps else np.zeros((0,), dtype=column.dtype)

    def _gather_observations(self, column: np.ndarray, window: np.ndarray, starts: np.ndarray) -> np.ndarray:
        n = self.n_frames
        frames_index = window[..., None] + np.arange(-n + 1, 1)  # (B, L, n)
        before_start = frames_index < starts[:, None, None]
        frames = column[np.where(before_start, window[..., None], frames_index)]
        if before_start.any():
            frames[before_start] = 0
        shape = column.shape[1:]
        return frames.reshape(window.shape + (n * shape[0],) + shape[1:])

    def __repr__(self) -> str:
        return f"FrameStackTrajectorySlicer(n_frames={self.n_frames})"
