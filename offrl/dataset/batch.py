"""Mini-batches of transitions and trajectories, as numpy arrays.

``to_torch(device)`` converts a batch to tensors in one pass (pinned copies
with non-blocking transfers on CUDA).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import numpy as np

from .episode import PartialTrajectory, Transition

__all__ = [
    "TransitionMiniBatch",
    "TrajectoryMiniBatch",
    "TorchTransitionMiniBatch",
    "TorchTrajectoryMiniBatch",
    "stack_observations",
]

ObservationBatch = Union[np.ndarray, Sequence[np.ndarray]]


def stack_observations(observations: Sequence[Any]) -> ObservationBatch:
    """Stack per-item observations (arrays or tuples of arrays) on a new axis 0."""
    first = observations[0]
    if isinstance(first, (list, tuple)):
        return [np.stack([o[k] for o in observations]) for k in range(len(first))]
    return np.stack(observations)


def _to_tensor(array: np.ndarray, device: Any):
    import torch

    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if torch.device(device).type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def _observations_to_tensor(observations: ObservationBatch, device: Any):
    if isinstance(observations, (list, tuple)):
        return [_to_tensor(o, device) for o in observations]
    return _to_tensor(observations, device)


def _shape_of(observations: ObservationBatch):
    if isinstance(observations, (list, tuple)):
        return [o.shape[1:] for o in observations]
    return observations.shape[1:]


@dataclasses.dataclass(frozen=True)
class TransitionMiniBatch:
    """A batch of ``B`` transitions.

    observations / next_observations: ``(B, *obs_shape)`` or a list of such
    arrays for tuple observations; actions / next_actions: ``(B, action_dim)``
    (``(B, 1)`` int64 for discrete actions); rewards, terminals, intervals:
    ``(B, 1)`` float32. From a prioritized buffer also ``weights``, ``(B, 1)``
    float32 importance weights, and ``indices``, ``(B,)`` int64 transition
    ids for ``update_priorities`` (both None otherwise).
    """

    observations: ObservationBatch
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: ObservationBatch
    next_actions: np.ndarray
    terminals: np.ndarray
    intervals: np.ndarray
    weights: Optional[np.ndarray] = None
    indices: Optional[np.ndarray] = None

    @classmethod
    def from_transitions(cls, transitions: Sequence[Transition]) -> "TransitionMiniBatch":
        if len(transitions) == 0:
            raise ValueError("cannot build a mini-batch from no transitions")
        return cls(
            observations=stack_observations([t.observation for t in transitions]),
            actions=np.stack([np.asarray(t.action) for t in transitions]),
            rewards=np.stack([np.asarray(t.reward, dtype=np.float32).reshape(1) for t in transitions]),
            next_observations=stack_observations([t.next_observation for t in transitions]),
            next_actions=np.stack([np.asarray(t.next_action) for t in transitions]),
            terminals=np.array([[t.terminal] for t in transitions], dtype=np.float32),
            intervals=np.array([[t.interval] for t in transitions], dtype=np.float32),
        )

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @property
    def observation_shape(self):
        return _shape_of(self.observations)

    @property
    def action_shape(self):
        return self.actions.shape[1:]

    @property
    def reward_shape(self):
        return self.rewards.shape[1:]

    def to_torch(self, device: Any = "cpu") -> "TorchTransitionMiniBatch":
        return TorchTransitionMiniBatch(
            observations=_observations_to_tensor(self.observations, device),
            actions=_to_tensor(self.actions, device),
            rewards=_to_tensor(self.rewards, device),
            next_observations=_observations_to_tensor(self.next_observations, device),
            next_actions=_to_tensor(self.next_actions, device),
            terminals=_to_tensor(self.terminals, device),
            intervals=_to_tensor(self.intervals, device),
            weights=None if self.weights is None else _to_tensor(self.weights, device),
            indices=None if self.indices is None else _ids_tensor(self.indices),
        )


def _ids_tensor(indices: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64))


@dataclasses.dataclass(frozen=True)
class TorchTransitionMiniBatch:
    """:class:`TransitionMiniBatch` as torch tensors on one device, except
    ``indices`` (bookkeeping ids, not model input), which stays on the CPU."""

    observations: Any
    actions: Any
    rewards: Any
    next_observations: Any
    next_actions: Any
    terminals: Any
    intervals: Any
    weights: Any = None
    indices: Any = None

    def __len__(self) -> int:
        return int(self.actions.shape[0])


@dataclasses.dataclass(frozen=True)
class TrajectoryMiniBatch:
    """A batch of ``B`` trajectory windows of ``length`` steps.

    observations: ``(B, L, *obs_shape)`` (or a list for tuple observations);
    actions: ``(B, L, action_dim)``; rewards, returns_to_go, terminals:
    ``(B, L, 1)`` float32; timesteps: ``(B, L)`` int64; masks: ``(B, L)``
    float32, 0 on front padding.
    """

    observations: ObservationBatch
    actions: np.ndarray
    rewards: np.ndarray
    returns_to_go: np.ndarray
    terminals: np.ndarray
    timesteps: np.ndarray
    masks: np.ndarray
    length: int

    @classmethod
    def from_partial_trajectories(cls, trajectories: Sequence[PartialTrajectory]) -> "TrajectoryMiniBatch":
        if len(trajectories) == 0:
            raise ValueError("cannot build a mini-batch from no trajectories")
        return cls(
            observations=stack_observations([t.observations for t in trajectories]),
            actions=np.stack([t.actions for t in trajectories]),
            rewards=np.stack([t.rewards for t in trajectories]).astype(np.float32, copy=False),
            returns_to_go=np.stack([t.returns_to_go for t in trajectories]).astype(np.float32, copy=False),
            terminals=np.stack([t.terminals for t in trajectories]).astype(np.float32, copy=False),
            timesteps=np.stack([t.timesteps for t in trajectories]).astype(np.int64, copy=False),
            masks=np.stack([t.masks for t in trajectories]).astype(np.float32, copy=False),
            length=trajectories[0].length,
        )

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def to_torch(self, device: Any = "cpu") -> "TorchTrajectoryMiniBatch":
        return TorchTrajectoryMiniBatch(
            observations=_observations_to_tensor(self.observations, device),
            actions=_to_tensor(self.actions, device),
            rewards=_to_tensor(self.rewards, device),
            returns_to_go=_to_tensor(self.returns_to_go, device),
            terminals=_to_tensor(self.terminals, device),
            timesteps=_to_tensor(self.timesteps, device),
            masks=_to_tensor(self.masks, device),
            length=self.length,
        )


@dataclasses.dataclass(frozen=True)
class TorchTrajectoryMiniBatch:
    """:class:`TrajectoryMiniBatch` as torch tensors on one device."""

    observations: Any
    actions: Any
    rewards: Any
    returns_to_go: Any
    terminals: Any
    timesteps: Any
    masks: Any
    length: int

    def __len__(self) -> int:
        return int(self.actions.shape[0])
