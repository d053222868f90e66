"""``MDPDataset``: an offline dataset built from step-aligned arrays, at
d3rlpy's ``d3rlpy.dataset.compat`` path (also :mod:`offrl.dataset`'s)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from ..constants import ActionSpace
from . import checks
from .pickers import TransitionPickerProtocol
from .replay_buffer import ReplayBuffer
from .slicers import TrajectorySlicerProtocol
from .storage import InfiniteBuffer

__all__ = ["MDPDataset"]


class MDPDataset(ReplayBuffer):
    """An offline dataset built from step-aligned arrays.

    ``observations[i]``, ``actions[i]``, ``rewards[i]`` describe step ``i``;
    an episode ends at a step whose ``terminals`` (terminal state, no
    bootstrap) or ``timeouts`` (cut short) flag is 1, and a final stretch
    with neither flag is kept as a truncated episode.

    Args:
        observations: ``(N, *obs_shape)`` array, a list/tuple of such
            arrays for tuple observations, or a dict of them by key for dict
            observations (stored in sorted key order and read back as dicts:
            ``dataset.episodes[0].observations["image"]``).
        actions: ``(N, action_dim)`` continuous, or ``(N,)`` action indices.
        rewards: ``(N,)`` or ``(N, 1)``.
        terminals, timeouts: ``(N,)`` 0/1 flags.
        action_space, action_size: inferred when not given (integer-valued
            1-D actions are discrete, with ``action_size = max + 1``).
        next_observations: optional ``(N, *obs_shape)`` (as in D4RL files):
            used as the final observation of each truncated episode so its
            last step stays a usable transition.
        behaviour_probabilities: optional ``(N,)`` logged probability of each
            step's action under the data-collecting policy, in (0, 1] for
            discrete actions (a density > 0 for continuous ones); kept for
            importance-sampling off-policy evaluation.
    """

    subsets_keep_type = True  # a split of an MDPDataset is an MDPDataset

    def __init__(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminals: Any,
        timeouts: Any = None,
        transition_picker: Optional[TransitionPickerProtocol] = None,
        trajectory_slicer: Optional[TrajectorySlicerProtocol] = None,
        action_space: Optional[ActionSpace] = None,
        action_size: Optional[int] = None,
        next_observations: Any = None,
        behaviour_probabilities: Any = None,
    ) -> None:
        keys = checks.observation_keys(observations)
        obs_columns = checks.as_observation_columns(observations)
        n = obs_columns[0].shape[0]
        if n == 0:
            raise ValueError("the dataset is empty: observations has 0 rows")
        action_array, space, size = checks.as_actions(
            actions, n, None if action_space is None else ActionSpace.parse(action_space), action_size
        )
        reward_array = checks.as_rewards(rewards, n)
        behaviour = None
        if behaviour_probabilities is not None:
            behaviour = checks.as_behaviour_probabilities(behaviour_probabilities, n, space)
        terminal_flags = checks.as_flags(terminals, "terminals", n)
        if timeouts is None:
            timeout_flags = np.zeros(n, dtype=bool)
        else:
            timeout_flags = checks.as_flags(timeouts, "timeouts", n)
            both = terminal_flags & timeout_flags
            if both.any():
                i = int(np.argmax(both))
                raise ValueError(
                    f"step {i} is flagged both terminal and timeout: terminals[{i}] and timeouts[{i}] are 1"
                )
        ends = np.flatnonzero(terminal_flags | timeout_flags) + 1
        if ends.size == 0 or ends[-1] != n:
            ends = np.append(ends, n)
        starts = np.concatenate(([0], ends[:-1])).astype(np.int64)
        terminated = terminal_flags[ends - 1]
        has_final = np.zeros(ends.shape[0], dtype=bool)

        if next_observations is not None:
            if (checks.observation_keys(next_observations, "next_observations") is None) != (keys is None):
                raise TypeError("next_observations must be a dict exactly when observations is one")
            next_columns = checks.as_observation_columns(next_observations, "next_observations", keys)
            if len(next_columns) != len(obs_columns) or any(
                a.shape != b.shape for a, b in zip(next_columns, obs_columns)
            ):
                raise ValueError(
                    "next_observations must match observations: got "
                    f"{[c.shape for c in next_columns]}, expected {[c.shape for c in obs_columns]}"
                )
            has_final = ~terminated
            insert_at = ends[has_final]
            finals = [c[insert_at - 1] for c in next_columns]
            obs_columns = [
                np.insert(c, insert_at, f.astype(c.dtype, copy=False), axis=0)
                for c, f in zip(obs_columns, finals)
            ]
            action_array = np.insert(action_array, insert_at, 0, axis=0)
            reward_array = np.insert(reward_array, insert_at, 0, axis=0)
            if behaviour is not None:
                behaviour = np.insert(behaviour, insert_at, 1.0)
            shift = np.concatenate(([0], np.cumsum(has_final)[:-1]))
            starts = starts + shift
            ends = ends + shift

        store = InfiniteBuffer()
        store.set_columns(
            obs_columns, action_array, reward_array, starts, ends, terminated, has_final, behaviour,
            observation_keys=keys,
        )
        super().__init__(
            store,
            transition_picker=transition_picker,
            trajectory_slicer=trajectory_slicer,
            action_space=space,
            action_size=size,
        )
