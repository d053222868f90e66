"""Signatures: the dtype and per-step shape of each array of a field."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from ..constants import ActionSpace
from .keys import check_observation_key, check_observation_keys

__all__ = [
    "Signature",
    "Observation",
    "ObservationSequence",
    "signatures_from_env",
    "normalise_action_signature",
    "dict_observation_keys",
    "observation_from_dict",
    "observation_columns",
    "keyed_observation",
]

#: One observation: an array, a tuple of arrays (e.g. an image and a vector),
#: or a dict of arrays by name (stored as the tuple of its values in the
#: stored key order, the key names kept in the signature, and read back as a
#: dict: see :func:`keyed_observation`).
Observation = Union[np.ndarray, Sequence[np.ndarray], Mapping[str, np.ndarray]]
#: A sequence of observations along the time axis, in the same three forms.
ObservationSequence = Union[np.ndarray, Sequence[np.ndarray], Mapping[str, np.ndarray]]


def dict_observation_keys(observation: Mapping[str, Any], name: str = "observations") -> tuple[str, ...]:
    """The storage order of a dict observation's keys: sorted, as gymnasium's
    ``Dict`` space orders them, so that any dict converts the same way
    without knowing where it came from."""
    if len(observation) == 0:
        raise ValueError(f"{name} is an empty dict")
    for key in observation:
        check_observation_key(key, name)
    return tuple(sorted(observation))


def observation_from_dict(
    observation: Mapping[str, Any],
    keys: Optional[Sequence[str]] = None,
    name: str = "observation",
) -> list:
    """A dict observation (one step or a batch) as the list of its values in
    ``keys`` order (sorted keys when ``keys`` is None). A missing or extra
    key raises ``ValueError`` naming it."""
    if not isinstance(observation, Mapping):
        raise TypeError(f"{name} must be a dict with keys {list(keys or [])}, got {type(observation).__name__}")
    if keys is None:
        keys = dict_observation_keys(observation, name)
    missing = [k for k in keys if k not in observation]
    if missing:
        raise ValueError(f"{name} has no key {missing[0]!r}: expected keys {list(keys)}")
    if len(observation) != len(keys):
        extra = [k for k in observation if k not in set(keys)]
        raise ValueError(f"{name} has an unexpected key {extra[0]!r}: expected keys {list(keys)}")
    return [observation[k] for k in keys]


def observation_columns(observation: Any) -> Any:
    """The columnar form pickers, slicers and algorithms read: a dict's
    values in its key order (the one array of a one-key dict), a tuple's
    elements as a list, an array as itself. The inverse of
    :func:`keyed_observation`; dicts built by offrl are in stored key order."""
    if isinstance(observation, Mapping):
        values = list(observation.values())
        return values[0] if len(values) == 1 else values
    if isinstance(observation, tuple):
        return list(observation)
    return observation


def keyed_observation(columns: Any, keys: Optional[Sequence[str]]) -> Any:
    """The view a user reads: ``columns`` (one array, or a list of arrays in
    stored key order) as a dict by ``keys`` when the data has dict
    observations; ``columns`` unchanged when ``keys`` is None or it already
    is a dict."""
    if keys is None or columns is None or isinstance(columns, Mapping):
        return columns
    if len(keys) == 1 and not isinstance(columns, (list, tuple)):
        return {keys[0]: columns}
    if len(columns) != len(keys):
        raise ValueError(f"{len(columns)} observation columns for the {len(keys)} keys {list(keys)}")
    return dict(zip(keys, columns))


@dataclasses.dataclass(frozen=True)
class Signature:
    """dtypes and per-step shapes of a field.

    A plain observation has one entry; a tuple observation has one entry per
    element. ``Signature(dtype=np.float32, shape=(3,))`` is accepted as a
    shorthand for ``Signature(dtype=[np.float32], shape=[(3,)])``.
    ``keys``: for dict observations, the key of each element (in storage
    order); None for arrays and tuples.
    """

    dtype: Sequence[np.dtype]
    shape: Sequence[Sequence[int]]
    keys: Optional[tuple[str, ...]]

    def __init__(self, dtype: Any, shape: Any, keys: Optional[Sequence[str]] = None) -> None:
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
        if keys is not None:
            if isinstance(keys, str) or not all(isinstance(k, str) for k in keys):
                raise TypeError(f"Signature keys must be a sequence of strings, got {keys!r}")
            keys = check_observation_keys(keys, "Signature keys")
            if len(keys) != len(shapes):
                raise ValueError(f"Signature has {len(keys)} keys but {len(shapes)} shapes")
        object.__setattr__(self, "dtype", dtypes)
        object.__setattr__(self, "shape", shapes)
        object.__setattr__(self, "keys", keys)

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
        out: dict = {"dtype": [d.str for d in self.dtype], "shape": [list(s) for s in self.shape]}
        if self.keys is not None:
            out["keys"] = list(self.keys)
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Signature":
        keys = data.get("keys")
        return cls(dtype=list(data["dtype"]), shape=[tuple(s) for s in data["shape"]], keys=keys)

    def with_keys(self, keys: Optional[Sequence[str]]) -> "Signature":
        """The same dtypes and shapes with ``keys`` (None: a plain/tuple signature)."""
        return Signature(dtype=list(self.dtype), shape=list(self.shape), keys=keys)

    def __repr__(self) -> str:
        parts = [f"{d.name}{tuple(s)}" for d, s in zip(self.dtype, self.shape)]
        if self.keys is not None:
            return "{" + ", ".join(f"{k!r}: {p}" for k, p in zip(self.keys, parts)) + "}"
        return parts[0] if len(parts) == 1 else "(" + ", ".join(parts) + ")"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Signature):
            return NotImplemented
        return (
            list(self.dtype) == list(other.dtype)
            and list(self.shape) == list(other.shape)
            and self.keys == other.keys
        )

    def __hash__(self) -> int:
        return hash((tuple(d.str for d in self.dtype), tuple(self.shape), self.keys))


def signatures_from_env(env: Any, writer: Any):
    """``(observation, action, reward signatures, action space, action size)``
    of a gymnasium environment, observations as ``writer`` stores them."""
    from gymnasium import spaces

    obs_space = env.observation_space
    keys = None
    if isinstance(obs_space, spaces.Tuple):
        parts = list(obs_space.spaces)
    elif isinstance(obs_space, spaces.Dict):
        keys = dict_observation_keys(obs_space.spaces, "the observation space")
        parts = [obs_space.spaces[k] for k in keys]
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
        dtype=[np.asarray(p).dtype for p in processed],
        shape=[np.asarray(p).shape for p in processed],
        keys=keys if keys is not None and len(keys) == len(processed) else None,
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
