"""Split step-aligned arrays into episodes (d3rlpy's ``EpisodeGenerator``)."""

from __future__ import annotations

from typing import Any, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from . import checks
from .episode import Episode

__all__ = ["EpisodeGeneratorProtocol", "EpisodeGenerator"]


@runtime_checkable
class EpisodeGeneratorProtocol(Protocol):
    """Something that, called, returns a sequence of episodes."""

    def __call__(self) -> Sequence[Episode]: ...


class EpisodeGenerator:
    """Episodes from step-aligned arrays.

    An episode ends at a step whose ``terminals`` flag (terminal state) or
    ``timeouts`` flag (cut short) is set. A final stretch with neither flag is
    kept as a truncated episode (d3rlpy drops it); offrl's
    :class:`~offrl.dataset.MDPDataset` keeps it the same way. Episodes are
    views of the given arrays, not copies.

    Args:
        observations: ``(N, *obs_shape)``, a list of such arrays, or a dict
            of them by key (episodes keep the keys).
        actions: ``(N, action_dim)`` or ``(N,)``.
        rewards: ``(N,)`` or ``(N, 1)``.
        terminals, timeouts: ``(N,)`` 0/1 flags.
    """

    def __init__(
        self,
        observations: Any,
        actions: Any,
        rewards: Any,
        terminals: Any,
        timeouts: Optional[Any] = None,
    ) -> None:
        self._keys = checks.observation_keys(observations)
        self._observations = checks.as_observation_columns(observations)
        n = self._observations[0].shape[0]
        actions = np.asarray(actions)
        if actions.ndim == 1:
            actions = actions[:, None]
        if actions.shape[0] != n:
            raise ValueError(f"actions has {actions.shape[0]} rows, observations has {n}")
        self._actions = actions
        self._rewards = checks.as_rewards(rewards, n)
        self._terminals = checks.as_flags(terminals, "terminals", n)
        self._timeouts = np.zeros(n, dtype=bool) if timeouts is None else checks.as_flags(timeouts, "timeouts", n)
        both = self._terminals & self._timeouts
        if both.any():
            i = int(np.argmax(both))
            raise ValueError(f"step {i} is flagged both terminal and timeout: terminals[{i}] and timeouts[{i}] are 1")

    def __call__(self) -> Sequence[Episode]:
        n = self._actions.shape[0]
        ends = np.flatnonzero(self._terminals | self._timeouts) + 1
        if ends.size == 0 or ends[-1] != n:
            ends = np.append(ends, n)
        starts = np.concatenate(([0], ends[:-1]))
        columns = self._observations
        return [
            Episode(
                observations=columns[0][s:e] if len(columns) == 1 else [c[s:e] for c in columns],
                actions=self._actions[s:e],
                rewards=self._rewards[s:e],
                terminated=bool(self._terminals[e - 1]),
                observation_keys=self._keys,
            )
            for s, e in zip(starts.tolist(), ends.tolist())
            if e > s
        ]
