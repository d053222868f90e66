"""Small helpers on observations, shapes and dtypes (d3rlpy.dataset's
public helper functions), for custom pickers, slicers and writers.

An observation is an array or a list/tuple of arrays (tuple observations);
an observation sequence has time (or batch) on the first axis of each array.
"""

from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np

from ..constants import ActionSpace
from .batch import stack_observations
from .signature import Observation, ObservationSequence

__all__ = [
    "batch_pad_array",
    "batch_pad_observations",
    "cast_flat_shape",
    "cast_recursively",
    "cast_tuple_shape",
    "check_dtype",
    "check_non_1d_array",
    "detect_action_size_from_env",
    "detect_action_space",
    "detect_action_space_from_env",
    "get_axis_size",
    "get_batch_dim",
    "get_dtype_from_observation",
    "get_dtype_from_observation_sequence",
    "get_shape_from_observation",
    "get_shape_from_observation_sequence",
    "is_tuple_shape",
    "slice_observations",
    "stack_observations",
    "stack_recent_observations",
]

Shape = Union[Sequence[int], Sequence[Sequence[int]]]


def _is_tuple(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _non_negative_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return int(value)


def is_tuple_shape(shape: Shape) -> bool:
    """Whether ``shape`` is a list of shapes (a tuple observation's)."""
    return len(shape) > 0 and _is_tuple(shape[0])


def cast_flat_shape(shape: Shape) -> Sequence[int]:
    """``shape`` as one flat shape; a list of shapes is a TypeError."""
    if is_tuple_shape(shape):
        raise TypeError(f"expected a flat shape, got the tuple shape {shape}")
    return shape  # type: ignore[return-value]


def cast_tuple_shape(shape: Shape) -> Sequence[Sequence[int]]:
    """``shape`` as a list of shapes; a flat shape is a TypeError."""
    if not is_tuple_shape(shape):
        raise TypeError(f"expected a tuple shape (a list of shapes), got {shape}")
    return shape  # type: ignore[return-value]


def get_shape_from_observation(observation: Observation) -> Shape:
    """The shape of one observation (a list of shapes for a tuple one)."""
    if _is_tuple(observation):
        return [np.shape(o) for o in observation]
    return np.shape(observation)


def get_shape_from_observation_sequence(observations: ObservationSequence) -> Shape:
    """The per-step shape of an observation sequence (first axis dropped)."""
    if _is_tuple(observations):
        return [np.shape(o)[1:] for o in observations]
    return np.shape(observations)[1:]


def get_dtype_from_observation(observation: Observation) -> Any:
    """The dtype of an observation (a list of dtypes for a tuple one)."""
    if _is_tuple(observation):
        return [np.asarray(o).dtype for o in observation]
    return np.asarray(observation).dtype


def get_dtype_from_observation_sequence(observations: ObservationSequence) -> Any:
    """The dtype of an observation sequence (a list for tuple observations)."""
    return get_dtype_from_observation(observations)


def get_axis_size(array: ObservationSequence, axis: int) -> int:
    """Size of ``axis`` (of the first array for tuple observations)."""
    first = array[0] if _is_tuple(array) else array
    return int(np.shape(first)[axis])


def get_batch_dim(array: ObservationSequence) -> int:
    """Size of the first (batch or time) axis."""
    return get_axis_size(array, 0)


def check_dtype(array: ObservationSequence, dtype: Any) -> bool:
    """Whether every array has ``dtype``."""
    arrays = array if _is_tuple(array) else [array]
    return all(np.asarray(a).dtype == np.dtype(dtype) for a in arrays)


def check_non_1d_array(array: ObservationSequence) -> bool:
    """Whether every array has at least 2 dimensions (batch + features)."""
    arrays = array if _is_tuple(array) else [array]
    return all(np.ndim(a) > 1 for a in arrays)


def cast_recursively(array: ObservationSequence, dtype: Any) -> ObservationSequence:
    """``array`` (or each array of a list) converted to ``dtype``."""
    if _is_tuple(array):
        return [np.asarray(a, dtype=dtype) for a in array]
    return np.asarray(array, dtype=dtype)


def slice_observations(observations: ObservationSequence, start: int, end: int) -> ObservationSequence:
    """Steps ``start:end`` of an observation sequence (views)."""
    if _is_tuple(observations):
        return [o[start:end] for o in observations]
    return observations[start:end]


def batch_pad_array(array: np.ndarray, pad_size: int) -> np.ndarray:
    """``array`` with ``pad_size`` rows of zeros put in front (the padding
    a trajectory window gets when the episode is shorter than the window)."""
    pad_size = _non_negative_int(pad_size, "pad_size")
    array = np.asarray(array)
    zeros = np.zeros((pad_size,) + array.shape[1:], dtype=array.dtype)
    return np.concatenate([zeros, array], axis=0)


def batch_pad_observations(observations: ObservationSequence, pad_size: int) -> ObservationSequence:
    """:func:`batch_pad_array` on an observation sequence (each array of a
    tuple observation padded alike)."""
    if _is_tuple(observations):
        return [batch_pad_array(o, pad_size) for o in observations]
    return batch_pad_array(observations, pad_size)


def stack_recent_observations(observations: ObservationSequence, index: int, n_frames: int) -> ObservationSequence:
    """The ``n_frames`` observations ending at step ``index`` concatenated on
    their first (channel) axis, oldest first; steps before 0 are zeros."""
    index = _non_negative_int(index, "index")
    n_frames = _non_negative_int(n_frames, "n_frames")
    if n_frames == 0:
        raise ValueError("n_frames must be >= 1, got 0")

    def stack(column: np.ndarray) -> np.ndarray:
        if index >= column.shape[0]:
            raise IndexError(f"index {index} is out of range for {column.shape[0]} observations")
        start = index - n_frames + 1
        frames = column[max(start, 0) : index + 1]
        if start < 0:
            frames = batch_pad_array(frames, -start)
        return frames.reshape((n_frames * column.shape[1],) + column.shape[2:])

    if _is_tuple(observations):
        return [stack(np.asarray(o)) for o in observations]
    return stack(np.asarray(observations))


def detect_action_space(actions: np.ndarray) -> ActionSpace:
    """DISCRETE when every action is an integer value in one column (or a
    1-D array), CONTINUOUS otherwise."""
    actions = np.asarray(actions)
    one_column = actions.ndim == 1 or (actions.ndim == 2 and actions.shape[1] == 1)
    if one_column and np.issubdtype(actions.dtype, np.integer):
        return ActionSpace.DISCRETE
    if one_column and np.issubdtype(actions.dtype, np.floating) and actions.size:
        if np.all(np.isfinite(actions)) and np.all(np.round(actions) == actions):
            return ActionSpace.DISCRETE
    return ActionSpace.CONTINUOUS


def detect_action_space_from_env(env: Any) -> ActionSpace:
    """DISCRETE for a ``Discrete`` action space, CONTINUOUS for a ``Box``."""
    from gymnasium import spaces

    space = env.action_space
    if isinstance(space, spaces.Discrete):
        return ActionSpace.DISCRETE
    if isinstance(space, spaces.Box):
        return ActionSpace.CONTINUOUS
    raise ValueError(f"env.action_space is {space}, expected Discrete or Box")


def detect_action_size_from_env(env: Any) -> int:
    """Number of actions (Discrete) or the action dimension (Box)."""
    from gymnasium import spaces

    space = env.action_space
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.Box):
        return int(np.prod(space.shape))
    raise ValueError(f"env.action_space is {space}, expected Discrete or Box")
