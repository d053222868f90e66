"""Episodes, transitions and partial trajectories.

An :class:`Episode` built by a replay buffer is a view into the buffer's
columnar storage: its arrays are numpy slices, not copies.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Protocol, runtime_checkable

import numpy as np

from .signature import (
    Observation,
    ObservationSequence,
    Signature,
    dict_observation_keys,
    keyed_observation,
    observation_columns,
    observation_from_dict,
)

__all__ = [
    "EpisodeBase",
    "Episode",
    "Transition",
    "PartialTrajectory",
    "create_zero_observation",
    "retrieve_observation",
    "get_observation_signature",
]


def retrieve_observation(observations: ObservationSequence, index: Any) -> Observation:
    """``observations[index]`` for plain, tuple and dict observation sequences
    (a dict gives a dict with the same keys)."""
    if isinstance(observations, Mapping):
        return {key: value[index] for key, value in observations.items()}
    if isinstance(observations, (list, tuple)):
        return [o[index] for o in observations]
    return observations[index]


def create_zero_observation(observation: Observation) -> Observation:
    """An all-zero observation of the same dtype and shape (and keys)."""
    if isinstance(observation, Mapping):
        return {key: np.zeros_like(value) for key, value in observation.items()}
    if isinstance(observation, (list, tuple)):
        return [np.zeros_like(o) for o in observation]
    return np.zeros_like(observation)


def get_observation_signature(observations: ObservationSequence, keys: Optional[Any] = None) -> Signature:
    """The signature of a sequence of observations (time on the first axis);
    ``keys``: the key of each element for dict observations (a dict without
    ``keys`` is taken in sorted key order)."""
    if isinstance(observations, Mapping):
        if keys is None:
            keys = dict_observation_keys(observations)
        observations = observation_from_dict(observations, keys, "observations")
    if isinstance(observations, (list, tuple)):
        return Signature(
            dtype=[o.dtype for o in observations], shape=[o.shape[1:] for o in observations], keys=keys
        )
    return Signature(dtype=[observations.dtype], shape=[observations.shape[1:]], keys=keys)


def _single_observation_signature(observation: Observation) -> Signature:
    """The signature of one observation (no time axis)."""
    if isinstance(observation, Mapping):
        arrays = [np.asarray(o) for o in observation.values()]
        return Signature(dtype=[a.dtype for a in arrays], shape=[a.shape for a in arrays], keys=tuple(observation))
    if isinstance(observation, (list, tuple)):
        arrays = [np.asarray(o) for o in observation]
        return Signature(dtype=[a.dtype for a in arrays], shape=[a.shape for a in arrays])
    array = np.asarray(observation)
    return Signature(dtype=[array.dtype], shape=[array.shape])


@runtime_checkable
class EpisodeBase(Protocol):
    """What a transition picker or trajectory slicer may read from an episode."""

    @property
    def observations(self) -> ObservationSequence: ...

    @property
    def actions(self) -> np.ndarray: ...

    @property
    def rewards(self) -> np.ndarray: ...

    @property
    def terminated(self) -> bool: ...

    def size(self) -> int: ...

    def compute_return(self) -> float: ...

    @property
    def transition_count(self) -> int: ...


class _StepSignatures:
    """``action_signature`` and ``reward_signature`` of a sequence holding
    per-step ``actions`` and ``rewards`` arrays (steps on the first axis)."""

    actions: np.ndarray
    rewards: np.ndarray

    @property
    def action_signature(self) -> Signature:
        return Signature(dtype=[self.actions.dtype], shape=[self.actions.shape[1:]])

    @property
    def reward_signature(self) -> Signature:
        return Signature(dtype=[self.rewards.dtype], shape=[self.rewards.shape[1:]])


@dataclasses.dataclass(frozen=True)
class Episode(_StepSignatures):
    """One episode of ``T`` steps.

    Attributes:
        observations: ``(T, *obs_shape)`` array, a list of such arrays for
            tuple observations, or a dict of them by key for dict
            observations (``episode.observations["image"]``).
        actions: ``(T, action_dim)``; discrete actions are ``(T, 1)`` int64.
        rewards: ``(T, 1)`` float32.
        terminated: whether the episode ended in a terminal state (no
            bootstrap after its last step). ``False`` for an episode cut by a
            timeout, by the end of the log, or still being written.
        final_observation: the observation reached after the last step of a
            truncated episode when the data gives it (online writing, formats
            storing ``T + 1`` observations). With it, the last step is a
            usable transition; without it, the last step has no next
            observation and is not a transition.
        behaviour_probabilities: ``(T,)`` float64 logged probability (discrete
            actions) or density (continuous actions) of each step's action
            under the policy that collected the data; None when not logged.
            Used by importance-sampling off-policy evaluation.
        observation_keys: for dict observations, the key of each element in
            stored order (sorted for dicts given without it, see
            :func:`~offrl.dataset.signature.dict_observation_keys`). Given with a list
            of arrays (the columnar form), that list is read back as a dict
            by these keys; :attr:`observation_columns` gives the columnar
            form pickers and slicers read.
    """

    observations: ObservationSequence
    actions: np.ndarray
    rewards: np.ndarray
    terminated: bool
    final_observation: Optional[Observation] = None
    behaviour_probabilities: Optional[np.ndarray] = None
    observation_keys: Optional[tuple[str, ...]] = None

    def __post_init__(self) -> None:
        keys = self.observation_keys
        if isinstance(self.observations, Mapping):
            if keys is None:
                keys = dict_observation_keys(self.observations)
            values = observation_from_dict(self.observations, keys, "observations")
            object.__setattr__(self, "observations", dict(zip(keys, values)))
        elif keys is not None:
            object.__setattr__(self, "observations", keyed_observation(self.observations, keys))
        if isinstance(self.final_observation, Mapping):
            if keys is None:
                raise TypeError("final_observation is a dict but observations is not")
            values = observation_from_dict(self.final_observation, keys, "final_observation")
            object.__setattr__(self, "final_observation", dict(zip(keys, values)))
        elif keys is not None:
            object.__setattr__(self, "final_observation", keyed_observation(self.final_observation, keys))
        if keys is not None:
            object.__setattr__(self, "observation_keys", tuple(keys))

    @property
    def observation_columns(self) -> ObservationSequence:
        """:attr:`observations` in columnar form: the array, or the list of
        arrays of a tuple or dict observation (a dict's in key order)."""
        return observation_columns(self.observations)

    def size(self) -> int:
        """Number of steps."""
        return int(self.actions.shape[0])

    def __len__(self) -> int:
        return self.size()

    @property
    def transition_count(self) -> int:
        """Number of ``(s, a, r, s')`` transitions this episode provides."""
        n = self.size()
        if self.terminated or self.final_observation is not None:
            return n
        return max(n - 1, 0)

    def compute_return(self) -> float:
        """Undiscounted sum of rewards."""
        return float(np.sum(self.rewards, dtype=np.float64))

    @property
    def observation_signature(self) -> Signature:
        return get_observation_signature(self.observations, self.observation_keys)


    def serialize(self) -> dict[str, Any]:
        """The episode's fields as a dict of arrays and flags (d3rlpy's
        ``Episode.serialize``; offrl also keeps ``final_observation`` and
        ``behaviour_probabilities`` when present; dict observations are
        given back as dicts)."""
        data: dict[str, Any] = {
            "observations": self.observations,
            "actions": self.actions,
            "rewards": self.rewards,
            "terminated": self.terminated,
        }
        if self.final_observation is not None:
            data["final_observation"] = self.final_observation
        if self.behaviour_probabilities is not None:
            data["behaviour_probabilities"] = self.behaviour_probabilities
        return data

    @classmethod
    def deserialize(cls, serializedData: dict[str, Any]) -> "Episode":  # noqa: N803 (d3rlpy's name)
        """Rebuild an episode from :meth:`serialize`'s dict."""
        if not isinstance(serializedData, dict):
            raise TypeError(f"serializedData must be a dict, got {type(serializedData).__name__}")
        missing = [k for k in ("observations", "actions", "rewards", "terminated") if k not in serializedData]
        if missing:
            raise ValueError(f"serializedData lacks the keys {missing}")
        return cls(
            observations=serializedData["observations"],
            actions=serializedData["actions"],
            rewards=serializedData["rewards"],
            terminated=bool(serializedData["terminated"]),
            final_observation=serializedData.get("final_observation"),
            behaviour_probabilities=serializedData.get("behaviour_probabilities"),
        )

    def next_observation(self, index: int) -> Optional[Observation]:
        """The observation after step ``index``: zeros after a terminal step,
        the final observation after the last step of a truncated episode
        (``None`` if the data does not give it)."""
        n = self.size()
        if not 0 <= index < n:
            raise IndexError(f"step index {index} is out of range for an episode of {n} steps")
        if index < n - 1:
            return retrieve_observation(self.observations, index + 1)
        if self.terminated:
            return create_zero_observation(retrieve_observation(self.observations, index))
        return self.final_observation

    def __repr__(self) -> str:
        return (
            f"Episode(size={self.size()}, terminated={self.terminated}, "
            f"return={self.compute_return():.4g}, observations={self.observation_signature!r}, "
            f"actions={self.action_signature!r})"
        )


@dataclasses.dataclass(frozen=True)
class Transition:
    """One ``(s, a, r, s')`` sample.

    ``reward`` is ``(1,)``; for multi-step pickers it is the discounted sum
    of ``interval`` rewards and ``next_observation`` is ``interval`` steps
    ahead. ``terminal`` is 1.0 when the episode terminated within the
    interval (then ``next_observation`` is zeros). ``next_action`` is the
    logged action at ``next_observation`` (zeros where there is none).
    ``rewards_to_go`` is ``(L, 1)``: the rewards from this step to the end of
    the episode (d3rlpy's field, used for Monte-Carlo returns-to-go); None
    when a user's picker does not fill it.
    """

    observation: Observation
    action: np.ndarray
    reward: np.ndarray
    next_observation: Observation
    next_action: np.ndarray
    terminal: float
    interval: int
    rewards_to_go: Optional[np.ndarray] = None

    @property
    def observation_signature(self) -> Signature:
        return _single_observation_signature(self.observation)

    @property
    def action_signature(self) -> Signature:
        action = np.asarray(self.action)
        return Signature(dtype=[action.dtype], shape=[action.shape])

    @property
    def reward_signature(self) -> Signature:
        reward = np.asarray(self.reward)
        return Signature(dtype=[reward.dtype], shape=[reward.shape])


@dataclasses.dataclass(frozen=True)
class PartialTrajectory(_StepSignatures):
    """A window of ``length`` steps ending at a sampled step, front-padded
    with zeros (``masks`` is 0 on padding) when the episode is shorter.

    ``returns_to_go[t]`` is the undiscounted sum of rewards from step ``t``
    to the end of the episode; ``timesteps`` are positions in the episode.
    """

    observations: ObservationSequence  # (L, *obs_shape); a dict by key for dict observations
    actions: np.ndarray  # (L, action_dim)
    rewards: np.ndarray  # (L, 1)
    returns_to_go: np.ndarray  # (L, 1)
    terminals: np.ndarray  # (L, 1)
    timesteps: np.ndarray  # (L,)
    masks: np.ndarray  # (L,)
    length: int

    def __len__(self) -> int:
        return self.length

    def get_transition_count(self) -> int:
        """Transitions in the window: ``length`` when it ends on a terminal
        step, else ``length - 1`` (d3rlpy's count)."""
        return self.length if bool(np.asarray(self.terminals)[-1]) else self.length - 1

    @property
    def observation_signature(self) -> Signature:
        keys = tuple(self.observations) if isinstance(self.observations, Mapping) else None
        return get_observation_signature(self.observations, keys)

