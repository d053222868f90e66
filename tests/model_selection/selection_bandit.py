"""A contextual bandit with a clear best policy, for the search's tests.

Each episode is one step: an observation ``s ~ N(0, I_2)``, two actions,
reward 1 when the action is ``s[0] > 0`` and 0 otherwise. The log was
collected uniformly at random (the probability of each logged action, 0.5,
is recorded), so importance sampling is exact, the best policy's return is
1 and a random one's 0.5.
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium
import numpy as np

from offrl.algos import DQNConfig
from offrl.dataset import MDPDataset
from offrl.models import VectorEncoderFactory


def bandit_dataset(n: int = 400, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    observations = rng.normal(size=(n, 2)).astype(np.float32)
    actions = rng.integers(0, 2, size=n)
    rewards = (actions == (observations[:, 0] > 0)).astype(np.float32)
    return MDPDataset(observations, actions, rewards, np.ones(n, np.float32), behaviour_probabilities=np.full(n, 0.5))


class BanditEnv(gymnasium.Env):
    """The bandit as an environment (one step per episode)."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, render_mode: Optional[str] = None) -> None:
        self.render_mode = render_mode

    def reset(self, *, seed: Optional[int] = None, options: Any = None):
        super().reset(seed=seed)
        self._state = self.np_random.normal(size=2).astype(np.float32)
        return self._state, {}

    def step(self, action):
        reward = float(int(action) == int(self._state[0] > 0))
        return self._state.copy(), reward, True, False, {}


def tiny_dqn(**changes: Any) -> DQNConfig:
    return DQNConfig(**{"encoder_factory": VectorEncoderFactory([16]), "batch_size": 32, **changes})


def learning_rate_score(algo: Any, dataset: Any) -> float:
    """A scorer that reads the answer off the config (higher learning rate, higher score)."""
    return 1000.0 * algo.config.learning_rate
