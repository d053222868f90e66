"""Mini-batches of transitions and trajectories, as numpy arrays.

``to_torch(device)`` converts a batch to tensors in one pass (pinned copies
with non-blocking transfers on CUDA).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Union

import numpy as np

from .episode import PartialTrajectory, Transition
from .signature import keyed_observation, observation_columns, observation_from_dict

__all__ = [
    "RewardsToGo",
    "TransitionMiniBatch",
    "TrajectoryMiniBatch",
    "TorchTransitionMiniBatch",
    "TorchTrajectoryMiniBatch",
    "stack_observations",
]

ObservationBatch = Union[np.ndarray, Sequence[np.ndarray], Mapping[str, np.ndarray]]


def stack_observations(observations: Sequence[Any]) -> ObservationBatch:
    """Stack per-item observations (arrays, tuples of arrays or dicts of
    arrays) on a new axis 0."""
    first = observations[0]
    if isinstance(first, Mapping):
        return {key: np.stack([o[key] for o in observations]) for key in first}
    if isinstance(first, (list, tuple)):
        return [np.stack([o[k] for o in observations]) for k in range(len(first))]
    return np.stack(observations)


def _converter(device: Any) -> Callable[[np.ndarray], Any]:
    """A function turning a numpy array into a tensor on ``device`` (the
    device is resolved once per batch, not per array)."""
    import torch

    kind = device.type if isinstance(device, torch.device) else torch.device(device).type
    from_numpy, contiguous = torch.from_numpy, np.ascontiguousarray
    if kind == "cpu":
        return lambda array: from_numpy(contiguous(array))
    if kind == "cuda":
        return lambda array: from_numpy(contiguous(array)).pin_memory().to(device, non_blocking=True)
    return lambda array: from_numpy(contiguous(array)).to(device)


def _observations_to_tensor(observations: ObservationBatch, convert: Callable[[np.ndarray], Any]):
    """Tensors in columnar form: a dict's values in its key order (what
    encoders read), a tuple's elements as a list."""
    observations = observation_columns(observations)
    if isinstance(observations, (list, tuple)):
        return [convert(o) for o in observations]
    return convert(observations)


def _shape_of(observations: ObservationBatch):
    observations = observation_columns(observations)
    if isinstance(observations, (list, tuple)):
        return [o.shape[1:] for o in observations]
    return observations.shape[1:]


def _needs_keys(observations: ObservationBatch, keys: Sequence[str]) -> bool:
    """Whether ``observations`` is not yet a dict in ``keys`` order."""
    return not isinstance(observations, Mapping) or tuple(observations) != tuple(keys)


def _in_key_order(observations: ObservationBatch, keys: Sequence[str], name: str) -> ObservationBatch:
    if isinstance(observations, Mapping):
        return dict(zip(keys, observation_from_dict(observations, keys, name)))
    return keyed_observation(observations, keys)


class RewardsToGo:
    """The remaining rewards of each transition of a batch, kept as views.

    Item ``i`` is ``rewards[starts[i]:ends[i]]`` (``(L_i, 1)``): the rewards
    from the transition's step to the end of its episode, which is d3rlpy's
    ``Transition.rewards_to_go``. Where ``override[i]`` is not NaN, item ``i``
    is the single reward ``[[override[i]]]`` instead (the sparse-reward
    picker's failure return). Nothing is copied until
    :meth:`compute_returns` gathers what it needs.
    """

    #: window entries gathered at once by :meth:`compute_returns` (memory bound)
    _CHUNK_ELEMENTS = 1 << 20

    def __init__(
        self,
        rewards: np.ndarray,
        starts: np.ndarray,
        ends: np.ndarray,
        override: Optional[np.ndarray] = None,
    ) -> None:
        self.rewards = rewards
        self.starts = np.asarray(starts, dtype=np.int64)
        self.ends = np.asarray(ends, dtype=np.int64)
        if self.starts.shape != self.ends.shape or self.starts.ndim != 1:
            raise ValueError(f"starts {self.starts.shape} and ends {self.ends.shape} must be equal 1-D shapes")
        self.override = None if override is None else np.asarray(override, dtype=np.float64)
        self._parts: Optional[list["RewardsToGo"]] = None

    @classmethod
    def _trusted(cls, rewards: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> "RewardsToGo":
        """:class:`RewardsToGo` of int64 ``starts`` and ``ends`` of one
        shape, without checking them (the sampler's per-batch path)."""
        out = cls.__new__(cls)
        out.rewards, out.starts, out.ends, out.override, out._parts = rewards, starts, ends, None, None
        return out

    @classmethod
    def concatenate(cls, parts: Sequence["RewardsToGo"]) -> "RewardsToGo":
        """The items of ``parts`` in order (e.g. the two halves of a mixed
        batch drawn from different buffers), without copying rewards."""
        flat: list[RewardsToGo] = []
        for part in parts:
            flat.extend(part._parts if part._parts is not None else [part])
        out = cls(np.zeros((0, 1), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64))
        out._parts = flat
        return out

    @classmethod
    def from_arrays(cls, arrays: Sequence[np.ndarray]) -> "RewardsToGo":
        """From one ``(L_i, 1)`` (or ``(L_i,)``) array per transition."""
        columns = [np.asarray(a, dtype=np.float32).reshape(-1, 1) for a in arrays]
        lengths = np.array([c.shape[0] for c in columns], dtype=np.int64)
        ends = np.cumsum(lengths)
        flat = np.concatenate(columns) if columns else np.zeros((0, 1), np.float32)
        return cls(flat, ends - lengths, ends)

    def __len__(self) -> int:
        if self._parts is not None:
            return sum(len(p) for p in self._parts)
        return int(self.starts.shape[0])

    def __getitem__(self, index: int) -> np.ndarray:
        """Item ``index`` as a ``(L, 1)`` float32 array."""
        index = int(index)
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"rewards_to_go index {index} is out of range for {len(self)} transitions")
        if self._parts is not None:
            for part in self._parts:
                if index < len(part):
                    return part[index]
                index -= len(part)
        if self.override is not None and not np.isnan(self.override[index]):
            return np.array([[self.override[index]]], dtype=np.float32)
        rewards = self.rewards[self.starts[index] : self.ends[index]]
        return np.asarray(rewards, dtype=np.float32).reshape(-1, 1)

    def compute_returns(
        self,
        gamma: float,
        reward_transform: Optional[Callable[[np.ndarray], np.ndarray]] = None,
        tolerance: float = 1e-12,
    ) -> np.ndarray:
        """Discounted returns-to-go ``sum_k gamma**k * f(r[t + k])``, ``(B, 1)``
        float32, where ``f`` is ``reward_transform`` (elementwise, e.g. a
        reward scaler's numpy transform) or the identity.

        For ``gamma < 1`` the sum stops after the horizon where
        ``gamma**k < tolerance``; the dropped tail is at most
        ``tolerance / (1 - gamma)`` times the largest reward.
        """
        gamma = float(gamma)
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")
        if self._parts is not None:
            return np.concatenate(
                [p.compute_returns(gamma, reward_transform, tolerance) for p in self._parts]
            )
        batch = len(self)
        lengths = self.ends - self.starts
        out = np.zeros(batch, dtype=np.float64)
        horizon = int(lengths.max()) if batch else 0
        if gamma == 0.0:
            horizon = min(horizon, 1)
        elif gamma < 1.0:
            horizon = min(horizon, int(math.ceil(math.log(tolerance) / math.log(gamma))) + 1)
        flat = self.rewards.reshape(self.rewards.shape[0], -1)[:, 0] if self.rewards.ndim > 1 else self.rewards
        chunk = max(1, self._CHUNK_ELEMENTS // max(batch, 1))
        for offset in range(0, horizon, chunk):
            steps = np.arange(offset, min(offset + chunk, horizon), dtype=np.int64)
            valid = steps < lengths[:, None]
            index = np.where(valid, self.starts[:, None] + steps, self.starts[:, None])
            rewards = flat[index].astype(np.float64)
            if reward_transform is not None:
                rewards = np.asarray(reward_transform(rewards), dtype=np.float64)
            out += np.sum(np.where(valid, rewards * gamma**steps, 0.0), axis=1)
        if self.override is not None:
            replace = ~np.isnan(self.override)
            if replace.any():
                values = self.override[replace]
                if reward_transform is not None:
                    values = np.asarray(reward_transform(values), dtype=np.float64)
                out[replace] = values
        return out.astype(np.float32)[:, None]

    def __repr__(self) -> str:
        return f"RewardsToGo({len(self)} transitions)"


@dataclasses.dataclass(frozen=True)
class TransitionMiniBatch:
    """A batch of ``B`` transitions.

    observations / next_observations: ``(B, *obs_shape)``, a list of such
    arrays for tuple observations or a dict of them by key for dict
    observations (``batch.observations["image"]``); ``to_torch`` gives
    a dict's values as a list in its key order; actions / next_actions: ``(B, action_dim)``
    (``(B, 1)`` int64 for discrete actions); rewards, terminals, intervals:
    ``(B, 1)`` float32. From a prioritized buffer also ``weights``, ``(B, 1)``
    float32 importance weights, and ``indices``, ``(B,)`` int64 transition
    ids for ``update_priorities`` (both None otherwise). ``rewards_to_go``:
    each transition's remaining rewards (:class:`RewardsToGo`; None when a
    user picker gives none); ``rewards_to_go.compute_returns(gamma)`` gives
    the Monte-Carlo returns-to-go d3rlpy puts in its torch batch.
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
    rewards_to_go: Optional[RewardsToGo] = dataclasses.field(default=None, compare=False)

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
            rewards_to_go=(
                None
                if any(getattr(t, "rewards_to_go", None) is None for t in transitions)
                else RewardsToGo.from_arrays([t.rewards_to_go for t in transitions])
            ),
        )

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    def with_observation_keys(self, keys: Optional[Sequence[str]]) -> "TransitionMiniBatch":
        """This batch with its observations as dicts in ``keys`` order: columnar
        observations (the stored key order of a dict-observation dataset)
        by key, or dicts in another order reordered (``ValueError`` naming a
        missing or extra key). The batch itself when ``keys`` is None or
        nothing changes."""
        if keys is None or not _needs_keys(self.observations, keys):
            return self
        return dataclasses.replace(
            self,
            observations=_in_key_order(self.observations, keys, "observations"),
            next_observations=_in_key_order(self.next_observations, keys, "next_observations"),
        )

    @property
    def observation_shape(self):
        return _shape_of(self.observations)

    @property
    def action_shape(self):
        return self.actions.shape[1:]

    @property
    def reward_shape(self):
        return self.rewards.shape[1:]

    def compute_returns_to_go(
        self, gamma: float, reward_transform: Optional[Callable[[np.ndarray], np.ndarray]] = None
    ) -> np.ndarray:
        """``(B, 1)`` float32 discounted returns-to-go (see :class:`RewardsToGo`)."""
        if self.rewards_to_go is None:
            raise ValueError(
                "this batch has no rewards_to_go: its transition picker did not fill Transition.rewards_to_go"
            )
        return self.rewards_to_go.compute_returns(gamma, reward_transform)

    def to_torch(
        self,
        device: Any = "cpu",
        returns_to_go_gamma: Optional[float] = None,
        reward_transform: Optional[Callable[[np.ndarray], np.ndarray]] = None,
    ) -> "TorchTransitionMiniBatch":
        """Tensors on ``device``. With ``returns_to_go_gamma`` the torch batch
        also holds ``returns_to_go`` (``(B, 1)``, see
        :meth:`compute_returns_to_go`); otherwise that field is None."""
        convert = _converter(device)
        returns_to_go = None
        if returns_to_go_gamma is not None:
            returns_to_go = convert(self.compute_returns_to_go(returns_to_go_gamma, reward_transform))
        return TorchTransitionMiniBatch(
            observations=_observations_to_tensor(self.observations, convert),
            actions=convert(self.actions),
            rewards=convert(self.rewards),
            next_observations=_observations_to_tensor(self.next_observations, convert),
            next_actions=convert(self.next_actions),
            terminals=convert(self.terminals),
            intervals=convert(self.intervals),
            weights=None if self.weights is None else convert(self.weights),
            indices=None if self.indices is None else _ids_tensor(self.indices),
            returns_to_go=returns_to_go,
        )


def _ids_tensor(indices: np.ndarray):
    import torch

    return torch.from_numpy(np.ascontiguousarray(indices, dtype=np.int64))


@dataclasses.dataclass(frozen=True)
class TorchTransitionMiniBatch:
    """:class:`TransitionMiniBatch` as torch tensors on one device, except
    ``indices`` (bookkeeping ids, not model input), which stays on the CPU.
    ``returns_to_go`` is ``(B, 1)`` when requested from ``to_torch``, else None."""

    observations: Any
    actions: Any
    rewards: Any
    next_observations: Any
    next_actions: Any
    terminals: Any
    intervals: Any
    weights: Any = None
    indices: Any = None
    returns_to_go: Any = None

    def __len__(self) -> int:
        return int(self.actions.shape[0])

    @classmethod
    def from_batch(cls, batch: TransitionMiniBatch, gamma: float, compute_returns_to_go: bool, device: Any,
                   observation_scaler: Any = None, action_scaler: Any = None,
                   reward_scaler: Any = None) -> "TorchTransitionMiniBatch":
        """d3rlpy's ``TorchMiniBatch.from_batch``: ``batch`` on ``device``
        with the scalers applied (observations and next observations,
        actions and next actions, rewards); ``returns_to_go`` is the
        discounted sum of the scaled rewards-to-go when
        ``compute_returns_to_go``, zeros otherwise (d3rlpy's placeholder)."""
        reward_transform = getattr(reward_scaler, "transform_numpy", None) if reward_scaler is not None else None
        out = batch.to_torch(device, returns_to_go_gamma=gamma if compute_returns_to_go else None,
                             reward_transform=reward_transform)
        observations, next_observations = out.observations, out.next_observations
        actions, next_actions, rewards = out.actions, out.next_actions, out.rewards
        if observation_scaler is not None:
            observations = observation_scaler.transform(observations)
            next_observations = observation_scaler.transform(next_observations)
        if action_scaler is not None:
            actions = action_scaler.transform(actions)
            next_actions = action_scaler.transform(next_actions)
        if reward_scaler is not None:
            rewards = reward_scaler.transform(rewards)
        returns_to_go = out.returns_to_go if compute_returns_to_go else out.rewards.new_zeros(out.rewards.shape)
        return dataclasses.replace(out, observations=observations, next_observations=next_observations,
                                   actions=actions, next_actions=next_actions, rewards=rewards,
                                   returns_to_go=returns_to_go)


@dataclasses.dataclass(frozen=True)
class TrajectoryMiniBatch:
    """A batch of ``B`` trajectory windows of ``length`` steps.

    observations: ``(B, L, *obs_shape)`` (a list for tuple observations, a
    dict by key for dict observations);
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

    def with_observation_keys(self, keys: Optional[Sequence[str]]) -> "TrajectoryMiniBatch":
        """This batch with its columnar observations given back as a dict by
        ``keys`` (see :meth:`TransitionMiniBatch.with_observation_keys`)."""
        if keys is None or not _needs_keys(self.observations, keys):
            return self
        return dataclasses.replace(self, observations=_in_key_order(self.observations, keys, "observations"))

    def to_torch(self, device: Any = "cpu") -> "TorchTrajectoryMiniBatch":
        convert = _converter(device)
        return TorchTrajectoryMiniBatch(
            observations=_observations_to_tensor(self.observations, convert),
            actions=convert(self.actions),
            rewards=convert(self.rewards),
            returns_to_go=convert(self.returns_to_go),
            terminals=convert(self.terminals),
            timesteps=convert(self.timesteps),
            masks=convert(self.masks),
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

    @classmethod
    def from_batch(cls, batch: TrajectoryMiniBatch, device: Any, observation_scaler: Any = None,
                   action_scaler: Any = None, reward_scaler: Any = None) -> "TorchTrajectoryMiniBatch":
        """d3rlpy's ``TorchTrajectoryMiniBatch.from_batch``: ``batch`` on
        ``device`` with the scalers applied (the reward scaler to rewards
        and returns-to-go alike)."""
        out = batch.to_torch(device)
        changes: Dict[str, Any] = {}
        if observation_scaler is not None:
            changes["observations"] = observation_scaler.transform(out.observations)
        if action_scaler is not None:
            changes["actions"] = action_scaler.transform(out.actions)
        if reward_scaler is not None:
            changes["rewards"] = reward_scaler.transform(out.rewards)
            changes["returns_to_go"] = reward_scaler.transform(out.returns_to_go)
        return dataclasses.replace(out, **changes) if changes else out
