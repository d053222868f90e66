"""Validation and conversion of user arrays into the store's dtypes.

Every check names the field and the first offending index, and runs before
anything is built.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from ..constants import ActionSpace
from .signature import dict_observation_keys, observation_from_dict

__all__ = [
    "as_observation_columns",
    "observation_keys",
    "check_finite",
    "check_float32",
    "as_flags",
    "as_rewards",
    "as_actions",
    "as_behaviour_probabilities",
    "episode_columns",
    "first_index",
]


def _show(value: Any) -> str:
    """A value as users write it (``-1``, ``2.0``), not numpy's ``np.int64(-1)``."""
    return repr(value.item()) if isinstance(value, np.generic) else repr(value)


def first_index(mask: np.ndarray) -> int:
    """Index along the first axis of the first row where ``mask`` holds."""
    rows = mask.reshape(mask.shape[0], -1).any(axis=1) if mask.ndim > 1 else mask
    return int(np.argmax(rows))


def _as_rows(value: Any, name: str, n: int, must: str) -> np.ndarray:
    """``value`` as a 1-D array of ``n`` rows (a ``(n, 1)`` column flattened);
    ``must`` completes the message of a wrong shape: "``name`` must ... ``shape``"."""
    array = _as_array(value, name)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ValueError(f"{name} must {must} {array.shape}")
    if array.shape[0] != n:
        raise ValueError(f"{name} has {array.shape[0]} rows, observations has {n}")
    return array


def first_non_flag(values: np.ndarray) -> Optional[int]:
    """Index of the first of 1-D ``values`` that is neither 0 nor 1 (None: all are)."""
    bad = (values != 0) & (values != 1)
    return first_index(bad) if bad.any() else None


def _as_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "c":
            raise TypeError(f"{name} must hold real numbers, got complex dtype {value.dtype}")
        return value
    if hasattr(value, "to_numpy"):  # pandas objects
        value = value.to_numpy()
    elif hasattr(value, "detach") and hasattr(value, "cpu"):  # torch tensors
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be array-like, got {type(value).__name__}: {e}") from None
    if array.dtype == object:
        raise TypeError(
            f"{name} must be a numeric array, got an object array "
            "(rows of different shapes, or non-numeric values)"
        )
    if array.dtype.kind == "c":
        # a cast to a real dtype would silently drop the imaginary parts
        raise TypeError(f"{name} must hold real numbers, got complex dtype {array.dtype}")
    return array


def check_finite(array: np.ndarray, name: str) -> None:
    """Raise naming ``name[i]`` when ``array`` holds NaN or inf."""
    if not np.issubdtype(array.dtype, np.floating):
        return
    finite = np.isfinite(array)
    if finite.all():
        return
    i = first_index(~finite)
    row = array[i]
    kind = "nan" if np.isnan(row).any() else "inf"
    raise ValueError(f"{name}[{i}] is {kind}")


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_float32(array: np.ndarray, name: str) -> None:
    """:func:`check_finite`, and for floats wider than float32 also refuse
    values that would become ``inf`` when stored as float32 (naming
    ``name[i]``). One pass over the data when everything is in range."""
    if not np.issubdtype(array.dtype, np.floating):
        return
    if array.dtype.itemsize <= 4:
        check_finite(array, name)
        return
    with np.errstate(invalid="ignore"):
        in_range = np.abs(array) <= _FLOAT32_MAX  # False for nan and inf too
    if in_range.all():
        return
    check_finite(array, name)
    i = first_index(~in_range)
    row = np.asarray(array[i]).reshape(-1)
    value = row[np.argmax(np.abs(row) > _FLOAT32_MAX)]
    raise ValueError(
        f"{name}[{i}] is {_show(value)}, outside float32's range (±{_FLOAT32_MAX:.4g}): "
        "it would be stored as inf"
    )


def _observation_dtype(array: np.ndarray) -> np.dtype:
    if np.issubdtype(array.dtype, np.floating) or array.dtype == np.bool_:
        return np.dtype(np.float32)
    if np.issubdtype(array.dtype, np.number):
        return array.dtype
    raise TypeError(f"observations must be numeric, got dtype {array.dtype}")


def observation_keys(observations: Any, name: str = "observations") -> Optional[tuple[str, ...]]:
    """The storage key order of dict observations; None for arrays and tuples."""
    if isinstance(observations, Mapping):
        return dict_observation_keys(observations, name)
    return None


def as_observation_columns(
    observations: Any, name: str = "observations", keys: Optional[tuple[str, ...]] = None
) -> list[np.ndarray]:
    """Observations as a list of columns (one per tuple element, or one per
    key of a dict in sorted key order / ``keys`` order), each with steps on
    the first axis; floats become float32, uint8 images stay uint8."""
    if isinstance(observations, Mapping):
        order = keys if keys is not None else dict_observation_keys(observations, name)
        values = observation_from_dict(observations, order, name)
        raw = [_as_array(o, f"{name}[{k!r}]") for k, o in zip(order, values)]
        names = [f"{name}[{k!r}]" for k in order]
    elif isinstance(observations, (list, tuple)):
        if len(observations) == 0:
            raise ValueError(f"{name} is an empty tuple")
        raw = [_as_array(o, f"{name}[{k}]") for k, o in enumerate(observations)]
        names = [f"{name}[{k}]" for k in range(len(raw))]
    else:
        raw = [_as_array(observations, name)]
        names = [name]
    columns = []
    for array, field in zip(raw, names):
        if array.ndim == 0:
            raise ValueError(f"{field} must have a step axis, got a scalar")
        if array.ndim == 1:
            array = array[:, None]
        check_float32(array, field)
        columns.append(np.array(array, dtype=_observation_dtype(array), order="C", copy=True))
    n = columns[0].shape[0]
    for column, field in zip(columns[1:], names[1:]):
        if column.shape[0] != n:
            raise ValueError(f"{field} has {column.shape[0]} rows, {names[0]} has {n}")
    return columns


def as_flags(value: Any, name: str, n: int) -> np.ndarray:
    """0/1 flags of length ``n`` as a bool array."""
    array = _as_rows(value, name, n, "be 1-dimensional, got shape")
    if array.dtype == np.bool_:
        return array
    i = first_non_flag(array)
    if i is not None:
        raise ValueError(f"{name}[{i}] is {_show(array[i])}, expected 0 or 1")
    return array.astype(bool)


def as_rewards(value: Any, n: Optional[int], name: str = "rewards") -> np.ndarray:
    """Rewards as ``(n, 1)`` float32."""
    array = _as_array(value, name)
    if array.ndim == 1:
        array = array[:, None]
    if array.ndim != 2 or array.shape[1] != 1:
        raise ValueError(f"{name} must have shape (n,) or (n, 1), got {array.shape}")
    if n is not None and array.shape[0] != n:
        raise ValueError(f"{name} has {array.shape[0]} rows, observations has {n}")
    if not np.issubdtype(array.dtype, np.number) and array.dtype != np.bool_:
        raise TypeError(f"{name} must be numeric, got dtype {array.dtype}")
    check_float32(array, name)
    return np.array(array, dtype=np.float32, order="C", copy=True)


def _looks_discrete(array: np.ndarray) -> bool:
    if array.ndim == 2 and array.shape[1] != 1:
        return False
    if np.issubdtype(array.dtype, np.integer) or array.dtype == np.bool_:
        return True
    if np.issubdtype(array.dtype, np.floating):
        finite = np.isfinite(array)
        return bool(finite.all() and np.all(array == np.round(array)) and np.all(array >= 0))
    return False


def as_actions(
    value: Any,
    n: Optional[int],
    action_space: Optional[ActionSpace],
    action_size: Optional[int],
    name: str = "actions",
) -> tuple[np.ndarray, ActionSpace, int]:
    """Actions in the store's layout: continuous ``(n, size)`` float32,
    discrete ``(n, 1)`` int64. Infers the space and size when not given."""
    array = _as_array(value, name)
    if array.ndim == 0 or array.ndim > 2:
        raise ValueError(f"{name} must have shape (n,) or (n, action_size), got {array.shape}")
    if n is not None and array.shape[0] != n:
        raise ValueError(f"{name} has {array.shape[0]} rows, observations has {n}")
    if not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise TypeError(f"{name} must be numeric, got dtype {array.dtype}")
    if action_size is not None:
        if isinstance(action_size, bool) or not isinstance(action_size, (int, np.integer)):
            raise TypeError(f"action_size must be an int, got {type(action_size).__name__}")
        if action_size <= 0:
            raise ValueError(f"action_size must be > 0, got {action_size}")
        action_size = int(action_size)
    if action_space is None:
        action_space = ActionSpace.DISCRETE if _looks_discrete(array) else ActionSpace.CONTINUOUS
    else:
        action_space = ActionSpace.parse(action_space)
        if action_space == ActionSpace.BOTH:
            raise ValueError("a dataset's action_space is CONTINUOUS or DISCRETE, not BOTH")
    if array.ndim == 1:
        array = array[:, None]

    if action_space == ActionSpace.CONTINUOUS:
        check_float32(array, name)
        width = array.shape[1]
        if action_size is not None and width != action_size:
            raise ValueError(
                f"{name} has width {width}, expected action_size={action_size} "
                "continuous action dimensions"
            )
        return np.array(array, dtype=np.float32, order="C", copy=True), action_space, width

    # discrete
    if array.shape[1] != 1:
        raise ValueError(
            f"discrete {name} must have shape (n,) or (n, 1) holding action indices, "
            f"got {array.shape}"
        )
    if np.issubdtype(array.dtype, np.floating):
        check_finite(array, name)
        bad = array != np.round(array)
        if bad.any():
            i = first_index(bad)
            raise ValueError(f"{name}[{i}] is {_show(array[i, 0])}, expected an integer action index")
        huge = array >= np.float64(2.0**63)  # would wrap around when cast to int64 (compared in float64)
        if huge.any():
            i = first_index(huge)
            raise ValueError(f"{name}[{i}] is {_show(array[i, 0])}, too large for an action index")
    if array.size:
        negative = array < 0
        if negative.any():
            i = first_index(negative)
            raise ValueError(f"{name}[{i}] is {_show(array[i, 0])}, expected a non-negative action index")
    actions = np.array(array, dtype=np.int64, order="C", copy=True)
    if action_size is None:
        action_size = int(actions.max()) + 1 if actions.size else 1
    elif actions.size:
        too_big = actions >= action_size
        if too_big.any():
            i = first_index(too_big)
            raise ValueError(
                f"{name}[{i}] is {int(actions[i, 0])}, expected an index below action_size={action_size}"
            )
    return actions, action_space, action_size


def as_behaviour_probabilities(
    value: Any, n: int, action_space: ActionSpace, name: str = "behaviour_probabilities"
) -> np.ndarray:
    """Logged behaviour probabilities as ``(n,)`` float64: probabilities in
    (0, 1] for discrete actions, densities > 0 for continuous ones."""
    array = _as_rows(value, name, n, "have shape (n,) or (n, 1), got")
    if not (np.issubdtype(array.dtype, np.number) and not np.issubdtype(array.dtype, np.complexfloating)):
        raise TypeError(f"{name} must be numeric, got dtype {array.dtype}")
    array = np.array(array, dtype=np.float64, order="C", copy=True)
    check_finite(array, name)
    discrete = ActionSpace.parse(action_space) == ActionSpace.DISCRETE
    bad = (array <= 0) | (array > 1) if discrete else array <= 0
    if bad.any():
        i = first_index(bad)
        expected = "a probability in (0, 1]" if discrete else "a density > 0"
        raise ValueError(f"{name}[{i}] is {_show(array[i])}, expected {expected}")
    return array


def as_single_observation(observation: Any, signature, name: str = "observation") -> list[np.ndarray]:
    """One observation (no step axis) as a list of arrays in the signature's dtypes."""
    keys = getattr(signature, "keys", None)
    if isinstance(observation, Mapping):
        if keys is None:
            raise TypeError(f"{name} is a dict, but the data holds {'tuple' if signature.is_tuple else 'array'} observations")
        items = observation_from_dict(observation, keys, name)
    # a list in key order is the internal form of a dict observation
    elif signature.is_tuple or isinstance(observation, (list, tuple)):
        if not isinstance(observation, (list, tuple)):
            raise TypeError(f"{name} must be a tuple of {len(signature)} arrays")
        items = list(observation)
    else:
        items = [observation]
    if len(items) != len(signature):
        raise ValueError(f"{name} has {len(items)} elements, expected {len(signature)}")
    out = []
    for k, (item, dt, sh) in enumerate(zip(items, signature.dtype, signature.shape)):
        if keys is not None:
            field = f"{name}[{keys[k]!r}]"
        else:
            field = f"{name}[{k}]" if signature.is_tuple else name
        array = _as_array(item, field)
        if array.shape != tuple(sh):
            if array.size == int(np.prod(sh)) and array.ndim <= 1 and len(sh) <= 1:
                array = array.reshape(sh)
            else:
                raise ValueError(f"{field} has shape {array.shape}, expected {tuple(sh)}")
        if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
            raise ValueError(f"{field} holds nan or inf")
        if np.issubdtype(dt, np.floating) and array.dtype.itemsize > 4 and np.any(np.abs(array) > _FLOAT32_MAX):
            raise ValueError(f"{field} holds a value outside float32's range (it would be stored as inf)")
        out.append(array.astype(dt, copy=False))
    return out


def _check_same_keys(keys: Optional[tuple], expected: Optional[tuple], name: str) -> None:
    """Raise naming the first key that differs between ``keys`` and ``expected``."""
    if expected is None:
        raise TypeError(f"{name} is a dict, but the data holds array or tuple observations")
    extra = [k for k in keys if k not in expected]
    if extra:
        raise ValueError(f"{name} has an unexpected key {extra[0]!r}: expected keys {list(expected)}")
    missing = [k for k in expected if k not in keys]
    if missing:
        raise ValueError(f"{name} has no key {missing[0]!r}: expected keys {list(expected)}")
    raise ValueError(f"{name} has keys in order {list(keys)}, expected {list(expected)}")


def episode_columns(
    episode: Any, store: Any
) -> tuple[list[np.ndarray], np.ndarray, np.ndarray, Optional[list[np.ndarray]], Optional[np.ndarray]]:
    """An episode's arrays validated and converted to ``store``'s dtypes:
    ``(observations, actions, rewards, final_observation, behaviour_probabilities)``."""
    keys = getattr(episode, "observation_keys", None) or observation_keys(episode.observations, "episode.observations")
    store_signature = store.observation_signature
    # a list in the stored key order is a dict observation's internal form
    if store_signature is not None and keys is not None and keys != store_signature.keys:
        _check_same_keys(keys, store_signature.keys, "episode.observations")
    if store_signature is not None and keys is None:
        keys = store_signature.keys
    observations = as_observation_columns(episode.observations, "episode.observations", keys)
    n = observations[0].shape[0]
    if n == 0:
        raise ValueError("episode has no steps")
    action_space = None
    if store.action_signature is not None:
        is_discrete = np.issubdtype(store.action_signature.dtype[0], np.integer)
        action_space = ActionSpace.DISCRETE if is_discrete else ActionSpace.CONTINUOUS
    actions, action_space, _ = as_actions(episode.actions, n, action_space, None, "episode.actions")
    rewards = as_rewards(episode.rewards, n, "episode.rewards")
    behaviour = getattr(episode, "behaviour_probabilities", None)
    if behaviour is not None:
        behaviour = as_behaviour_probabilities(
            behaviour, n, action_space, "episode.behaviour_probabilities"
        )
    final = getattr(episode, "final_observation", None)
    final_columns = None
    if final is not None:
        from .episode import get_observation_signature

        signature = get_observation_signature(observations, keys)
        final_columns = as_single_observation(final, signature, "episode.final_observation")
    if store.observation_signature is not None:
        observations = [
            o.astype(d, copy=False) for o, d in zip(observations, store.observation_signature.dtype)
        ]
    return observations, actions, rewards, final_columns, behaviour
