"""Shared pieces of the importers: building an MDPDataset straight from
columnar rows (steps plus one final-observation row after each truncated
episode that has one), and naming the source of an error."""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np

from ..constants import ActionSpace
from ..dataset.compat import MDPDataset
from ..dataset.replay_buffer import ReplayBuffer
from ..dataset.storage import InfiniteBuffer

__all__ = ["episode_layout", "dataset_from_rows", "locate_row"]


def episode_layout(lengths: np.ndarray, has_final: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row layout of episodes of ``lengths`` steps, each followed by one
    final-observation row where ``has_final``: ``(starts, ends, step_rows)``
    where ``step_rows[i]`` is the row of the ``i``-th step overall."""
    lengths = np.asarray(lengths, dtype=np.int64)
    spans = lengths + has_final
    span_ends = np.cumsum(spans)
    starts = span_ends - spans
    step_starts = np.cumsum(lengths) - lengths
    step_rows = np.arange(int(lengths.sum()), dtype=np.int64) + np.repeat(starts - step_starts, lengths)
    return starts, starts + lengths, step_rows


def locate_row(row: int, starts: np.ndarray) -> tuple[int, int]:
    """``(episode position, row within the episode)`` of a store row."""
    episode = int(np.searchsorted(starts, row, side="right")) - 1
    return episode, int(row - starts[episode])


def dataset_from_rows(
    observations: Sequence[np.ndarray],
    actions: np.ndarray,
    rewards: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    terminated: np.ndarray,
    has_final: np.ndarray,
    action_space: ActionSpace,
    action_size: int,
    transition_picker: Any = None,
    trajectory_slicer: Any = None,
    behaviour_probabilities: Optional[np.ndarray] = None,
    episode_names: Optional[Sequence[str]] = None,
    observation_keys: Optional[Sequence[str]] = None,
) -> MDPDataset:
    """An :class:`MDPDataset` over already laid-out rows.

    Observations become float32 (integer observations keep their dtype),
    rewards ``(rows, 1)`` float32, actions float32 ``(rows, size)`` or int64
    ``(rows, 1)``. NaN/inf anywhere raises a ``ValueError`` naming the
    episode (``episode_names[i]``, default ``episode i``) and the step.
    ``behaviour_probabilities``: an already validated float64 ``(rows,)``
    column (NaN where a step has none), or None. ``observation_keys``: the
    key of each observation column for dict observations.
    """
    names = episode_names
    steps = np.zeros(actions.shape[0], dtype=bool)
    steps[episode_layout(ends - starts, has_final)[2]] = True

    def where(row: int) -> str:
        e, i = locate_row(row, starts)
        name = names[e] if names is not None else f"episode {e}"
        if i >= ends[e] - starts[e]:
            return f"{name}: the final observation"
        return f"{name}: step {i}"

    obs_columns = []
    for k, column in enumerate(observations):
        label = "observations" if len(observations) == 1 else f"observations[{k}]"
        if column.ndim == 1:
            column = column[:, None]
        if np.issubdtype(column.dtype, np.floating) or column.dtype == np.bool_:
            column = column.astype(np.float32, copy=False)
            bad = ~np.isfinite(column.reshape(column.shape[0], -1)).all(axis=1)
            if bad.any():
                raise ValueError(f"{where(int(np.argmax(bad)))}: {label} holds nan or inf")
        elif not np.issubdtype(column.dtype, np.number):
            raise TypeError(f"{label} must be numeric, got dtype {column.dtype}")
        obs_columns.append(np.ascontiguousarray(column))

    rewards = np.asarray(rewards, dtype=np.float32).reshape(-1, 1)
    bad = ~np.isfinite(rewards[:, 0]) & steps
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"{where(row)}: reward is {float(rewards[row, 0])}")

    if action_space == ActionSpace.DISCRETE:
        actions = np.asarray(actions).reshape(-1, 1)
        if np.issubdtype(actions.dtype, np.floating):
            bad = steps & ~((actions[:, 0] == np.round(actions[:, 0])) & np.isfinite(actions[:, 0]))
            if bad.any():
                row = int(np.argmax(bad))
                raise ValueError(f"{where(row)}: action is {actions[row, 0]!r}, expected an integer index")
        actions = actions.astype(np.int64)
        bad = steps & ((actions[:, 0] < 0) | (actions[:, 0] >= action_size))
        if bad.any():
            row = int(np.argmax(bad))
            raise ValueError(
                f"{where(row)}: action is {int(actions[row, 0])}, expected an index in [0, {action_size})"
            )
        actions[~steps] = 0
    else:
        actions = np.asarray(actions, dtype=np.float32).reshape(actions.shape[0], -1)
        bad = steps & ~np.isfinite(actions).all(axis=1)
        if bad.any():
            raise ValueError(f"{where(int(np.argmax(bad)))}: action holds nan or inf")
        if actions.shape[1] != action_size:
            raise ValueError(f"actions have {actions.shape[1]} dimensions, expected {action_size}")

    store = InfiniteBuffer()
    store.set_columns(
        obs_columns, np.ascontiguousarray(actions), np.ascontiguousarray(rewards), starts, ends,
        terminated, has_final, behaviour_probabilities, observation_keys=observation_keys,
    )
    out = MDPDataset.__new__(MDPDataset)
    ReplayBuffer.__init__(
        out, store, transition_picker=transition_picker, trajectory_slicer=trajectory_slicer,
        action_space=action_space, action_size=action_size,
    )
    return out
