"""Signatures: the dtype and per-step shape of each array of a field."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence, Union

import numpy as np

from ..constants import ActionSpace

__all__ = ["Signature", "Observation", "ObservationSequence", "signatures_from_env", "normalise_action_signature"]

#: One observation: an array, or a tuple of arrays (e.g. an image and a vector).
Observation = Union[np.ndarray, Sequence[np.ndarray]]
#: A sequence of observations along the time axis, in the same two forms.
ObservationSequence = Union[np.ndarray, Sequence[np.ndarray]]


@dataclasses.dataclass(frozen=True)
class Signature:
    """dtypes and per-step shapes of a field.

    A plain observation has one entry; a tuple observation has one entry per
    element. ``Signature(dtype=np.float32, shape=(3,))`` is accepted as a
    shorthand for ``Signature(dtype=[np.float32], shape=[(3,)])``.
    """

    dtype: Sequence[np.dtype]
    shape: Sequence[Sequence[int]]

    def __init__(self, dtype: Any, shape: Any) -> None:
        if isinstance(dtype, (list, tuple)):
            dtypes = [np.dtype(d) for d in dtype]
        else:
            dtypes = [np.dtype(dtype)]
        if len(shape) == 0 or isinstance(shape[0], (int, np.integer)):
            shapes = [tuple(int(s) for s in shape)]
        else:
            shapes = [tuple(int(s) for s in sh) for sh in shape]
        if len(dtypes) != len(shapes):
            raise ValueError(
                f"Signature has {len(dtypes)} dtypes but {len(shapes)} shapes"
            )
        for i, sh in enumerate(shapes):
            if any(s < 0 for s in sh):
                raise ValueError(f"Signature shape[{i}] has a negative size: {sh}")
        object.__setattr__(self, "dtype", dtypes)
        object.__setattr__(self, "shape", shapes)

    def __len__(self) -> int:
        return len(self.shape)

    @property
    def is_tuple(self) -> bool:
        """Whether this field holds several arrays per step."""
        return len(self.shape) > 1

    def sample(self) -> list[np.ndarray]:
        """Random arrays of this signature (one per element), for smoke tests."""
        rng = np.random.default_rng()
        out = []
        for dt, sh in zip(self.dtype, self.shape):
            if np.issubdtype(dt, np.integer):
                out.append(rng.integers(0, 256 if dt == np.uint8 else 2, size=sh).astype(dt))
            else:
                out.append(rng.random(sh).astype(dt))
        return out

    def to_dict(self) -> dict:
        return {"dtype": [d.str for d in self.dtype], "shape": [list(s) for s in self.shape]}

    @classmethod
    def from_dict(cls, data: dict) -> "Signature":
        return cls(dtype=list(data["dtype"]), shape=[tuple(s) for s in data["shape"]])

    def __repr__(self) -> str:
        parts = [f"{d.name}{tuple(s)}" for d, s in zip(self.dtype, self.shape)]
        return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Signature):
            return NotImplemented
        return list(self.dtype) == list(other.dtype) and list(self.shape) == list(other.shape)

    def __hash__(self) -> int:
        return hash((tuple(d.str for d in self.dtype), tuple(self.shape)))


def signatures_from_env(env: Any, writer: Any):
    """``(observation, action, reward signatures, action space, action size)``
    of a gymnasium environment, observations as ``writer`` stores them."""
    from gymnasium import spaces

    obs_space = env.observation_space
    if isinstance(obs_space, spaces.Tuple):
        parts = list(obs_space.spaces)
    elif isinstance(obs_space, spaces.Dict):
        parts = list(obs_space.spaces.values())
    else:
        parts = [obs_space]
    sample = []
    for k, space in enumerate(parts):
        if space.shape is None:
            raise ValueError(f"observation space element {k} ({space}) has no fixed shape")
        dt = np.dtype(space.dtype) if space.dtype is not None else np.dtype(np.float32)
        if np.issubdtype(dt, np.floating):
            dt = np.dtype(np.float32)
        sample.append(np.zeros(space.shape, dtype=dt))
    processed = writer.process_observation(sample if len(sample) > 1 else sample[0])
    processed = list(processed) if isinstance(processed, (list, tuple)) else [processed]
    observation_signature = Signature(
        dtype=[np.asarray(p).dtype for p in processed], shape=[np.asarray(p).shape for p in processed]
    )
    act_space = env.action_space
    if isinstance(act_space, spaces.Discrete):
        action_signature = Signature(dtype=[np.int64], shape=[(1,)])
        action_space, action_size = ActionSpace.DISCRETE, int(act_space.n)
    elif isinstance(act_space, spaces.Box):
        if len(act_space.shape) != 1:
            raise ValueError(f"continuous action spaces must be 1-dimensional, got shape {act_space.shape}")
        action_signature = Signature(dtype=[np.float32], shape=[act_space.shape])
        action_space, action_size = ActionSpace.CONTINUOUS, int(act_space.shape[0])
    else:
        raise ValueError(f"unsupported action space {act_space}: expected Discrete or Box")
    reward_signature = Signature(dtype=[np.float32], shape=[(1,)])
    return observation_signature, action_signature, reward_signature, action_space, action_size


def normalise_action_signature(signature: Signature, action_space: Optional[ActionSpace]):
    dt = signature.dtype[0]
    shape = tuple(signature.shape[0]) or (1,)
    space = ActionSpace.parse(action_space) if action_space is not None else None
    if space is None:
        space = ActionSpace.DISCRETE if np.issubdtype(dt, np.integer) else ActionSpace.CONTINUOUS
    if space == ActionSpace.DISCRETE:
        return Signature(dtype=[np.int64], shape=[(1,)]), space
    return Signature(dtype=[np.float32], shape=[shape]), space
