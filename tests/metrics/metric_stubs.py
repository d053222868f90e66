"""Algorithms whose Q-function and policy are closed forms, so that every
metric on hand-built episodes can be computed by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from offrl.algos.base import LearnableConfig, QLearningAlgoBase
from offrl.constants import ActionSpace
from offrl.dataset import Episode, create_infinite_replay_buffer


def _flat(x) -> torch.Tensor:
    """Observations as ``(B, features)``; tuple observations concatenated."""
    if isinstance(x, list):
        return torch.cat([part.flatten(1) for part in x], dim=1)
    return x.flatten(1)


@dataclasses.dataclass
class LinearQConfig(LearnableConfig):
    """``Q(s, a) = sum(s) + 2 * sum(a)``; ``pi(s)_j = s[0] / 2 + offset``
    (tuple observations: ``s`` is their concatenation)."""

    offset: float = 0.0

    @classmethod
    def algorithm_class(cls) -> type:
        return LinearQ


class LinearQ(QLearningAlgoBase):
    _action_type = ActionSpace.CONTINUOUS

    def _build(self, observation_shape, action_size: int) -> None:
        pass

    def _predict(self, x) -> torch.Tensor:
        first = _flat(x)[:, :1] / 2.0 + self._config.offset
        return first.expand(-1, self._action_size)

    def _predict_value(self, x, action) -> torch.Tensor:
        return _flat(x).sum(1) + 2.0 * action.sum(1)


@dataclasses.dataclass
class ModuloQConfig(LearnableConfig):
    """Discrete: ``Q(s, a) = sum(s) * (a + 1)``; ``pi(s) = (s[0] + offset) mod A``."""

    offset: int = 0

    @classmethod
    def algorithm_class(cls) -> type:
        return ModuloQ


class ModuloQ(QLearningAlgoBase):
    _action_type = ActionSpace.DISCRETE

    def _build(self, observation_shape, action_size: int) -> None:
        pass

    def _predict(self, x) -> torch.Tensor:
        return (x.flatten(1)[:, 0].round().long() + self._config.offset) % self._action_size

    def _predict_value(self, x, action) -> torch.Tensor:
        return x.flatten(1).sum(1) * (action.reshape(-1).float() + 1.0)


def linear_q(gamma: float = 0.5, offset: float = 0.0, action_size: int = 1, obs_dim: int = 1,
             observation_shape=None, **kwargs) -> LinearQ:
    algo = LinearQConfig(gamma=gamma, offset=offset, **kwargs).create()
    algo.create_impl(observation_shape or (obs_dim,), action_size)
    return algo


def modulo_q(gamma: float = 0.5, offset: int = 0, action_size: int = 2, obs_dim: int = 1) -> ModuloQ:
    algo = ModuloQConfig(gamma=gamma, offset=offset).create()
    algo.create_impl((obs_dim,), action_size)
    return algo


def column(values, dtype=np.float32) -> np.ndarray:
    return np.asarray(values, dtype=dtype).reshape(-1, 1)


def hand_episodes(final: bool = False) -> list:
    """Episode 1 terminates: s = 1, 2, 3; a = 0.5, -1, 2; r = 1, 0, 2 (return 3).
    Episode 2 is cut by a timeout: s = 4, 5, 6; a = 0, 1, 0; r = 1, 1, 0.5
    (return 2.5), with final observation 7 when ``final``."""
    return [
        Episode(column([1, 2, 3]), column([0.5, -1, 2]), column([1, 0, 2]), terminated=True),
        Episode(column([4, 5, 6]), column([0, 1, 0]), column([1, 1, 0.5]), terminated=False,
                final_observation=np.array([7.0], np.float32) if final else None),
    ]


def hand_dataset(final: bool = False, **kwargs):
    return create_infinite_replay_buffer(episodes=hand_episodes(final), **kwargs)


def discrete_episodes() -> list:
    """Episode 1 terminates: s = 0, 1, 2, 3; a = 0, 1, 1, 1.
    Episode 2 is truncated (last step not a transition): s = 4, 5, 6; a = 0, 0, 1."""
    return [
        Episode(column([0, 1, 2, 3]), column([0, 1, 1, 1], np.int64), column([0, 0, 0, 1]), terminated=True),
        Episode(column([4, 5, 6]), column([0, 0, 1], np.int64), column([0, 0, 0]), terminated=False),
    ]
