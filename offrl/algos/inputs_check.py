"""Checks and conversions of what users pass to an algorithm: observation
and action batches (real numbers float32 can hold, naming the first bad
row), observation shapes, and the observation shape a dataset gives the
networks."""

from __future__ import annotations

from typing import Any, Sequence, Tuple, Union

import numpy as np
import torch

from ..dataset.signature import observation_columns

__all__ = ["FLOAT32_MAX", "as_array", "check_real_values", "raise_bad_row", "stored_observation_shape",
           "network_observation_shape", "float_observation", "normalise_shape"]

Shape = Union[Tuple[int, ...], Sequence[Tuple[int, ...]]]


#: the largest float32 magnitude: a larger float64 would become inf on conversion
FLOAT32_MAX = float(np.finfo(np.float32).max)
TORCH_REAL = {torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
               torch.bfloat16, torch.float32, torch.float64}


def as_array(x: Any, name: str) -> Any:
    """``x`` as a numpy array (tensors are kept); a ragged nesting raises
    ``ValueError`` naming ``name``."""
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x
    try:
        return np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name} is not a rectangular array of numbers: {e}") from None


def check_real_values(array: Any, name: str) -> None:
    """Raise unless ``array`` (numpy or torch, batch first) is a non-empty
    batch of real numbers that float32 represents: ``TypeError`` for other
    dtypes (strings, objects, complex), ``ValueError`` naming the first bad
    row for NaN, infinite or out-of-range values. One vectorised reduction
    for floats (NaN propagates through ``max``)."""
    if isinstance(array, torch.Tensor):
        if array.dtype not in TORCH_REAL:
            raise TypeError(f"{name} must hold real numbers (bool, int or float), got dtype {array.dtype}")
        if array.ndim == 0 or array.shape[0] == 0:
            raise ValueError(f"{name} is an empty batch: expected at least one row")
        if array.is_floating_point() and not float(array.abs().max()) <= FLOAT32_MAX:
            raise_bad_row(array.detach().cpu().double().numpy(), name)
        return
    kind = array.dtype.kind
    if kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers (bool, int or float), got dtype {array.dtype}")
    if array.ndim == 0 or array.shape[0] == 0:
        raise ValueError(f"{name} is an empty batch: expected at least one row")
    if kind == "f" and not float(np.abs(array).max()) <= FLOAT32_MAX:
        raise_bad_row(array, name)


def raise_bad_row(array: np.ndarray, name: str) -> None:
    rows = np.asarray(array, dtype=np.float64).reshape(array.shape[0], -1)
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(rows) <= FLOAT32_MAX)
    row = int(np.argmax(bad.any(axis=1)))
    value = rows[row][bad[row]][0]
    if np.isnan(value):
        what = "nan"
    elif np.isinf(value):
        what = str(value)
    else:
        what = f"{value:g}, beyond float32's range (+-{FLOAT32_MAX:.4g})"
    raise ValueError(f"{name}[{row}] holds {what}; expected finite numbers")


def stored_observation_shape(dataset: Any) -> Shape:
    signature = dataset.dataset_info.observation_signature
    return [tuple(s) for s in signature.shape] if signature.is_tuple else tuple(signature.shape[0])


def network_observation_shape(dataset: Any) -> Shape:
    """The observation shape the networks see for ``dataset``: that of a
    transition its transition picker gives (frame stacking changes it; the
    first usable transition is picked, so no random numbers are drawn), or
    the stored observations' shape when the dataset has no picker or
    episodes to ask."""
    stored = stored_observation_shape(dataset)
    picker = getattr(dataset, "transition_picker", None)
    try:
        episodes = dataset.episodes
    except (AttributeError, NotImplementedError):
        return stored
    if picker is None:
        return stored
    for episode in episodes:
        # a transition index valid under d3rlpy's picker contract (a user picker may rely on it)
        if episode.size() >= 2 or (episode.size() == 1 and bool(episode.terminated)):
            observation = observation_columns(picker(episode, 0).observation)  # a dict's values in stored order
            if isinstance(observation, (list, tuple)):
                return [tuple(np.shape(o)) for o in observation]
            return tuple(np.shape(observation))
    return stored


def float_observation(x: Any) -> Any:
    if isinstance(x, list):
        return [float_observation(v) for v in x]
    return x if x.is_floating_point() else x.to(torch.float32)


def normalise_shape(shape: Any) -> Shape:
    if isinstance(shape, (list, tuple)) and len(shape) > 0 and isinstance(shape[0], (list, tuple)):
        return [tuple(int(s) for s in sub) for sub in shape]
    try:
        return tuple(int(s) for s in shape)
    except TypeError:
        raise ValueError(f"observation_shape must be a shape or a list of shapes, got {shape!r}") from None
