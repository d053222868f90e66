# Ported mechanically from d3rlpy 2.8.1 tests/dummy_env.py by port.py (MIT,
# Copyright (c) 2021 Takuma Seno); see README.md.  Do not edit: edit
# upstream/tests/dummy_env.py or port.py and regenerate.
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Discrete

from offrl.types import NDArray


class DummyAtari(gym.Env[NDArray, int]):
    def __init__(self, grayscale: bool = True, squeeze: bool = False):
        if grayscale:
            shape = (84, 84) if squeeze else (84, 84, 1)
        else:
            shape = (84, 84, 3)
        self.observation_space = Box(
            low=np.zeros(shape),
            high=np.zeros(shape) + 255,
            dtype=np.uint8,
        )
        self.action_space = Discrete(4)
        self.t = 1

    def step(
        self, action: int
    ) -> tuple[NDArray, float, bool, bool, dict[str, Any]]:
        observation = self.observation_space.sample()
        reward = np.random.random()
        return observation, reward, False, self.t % 80 == 0, {}

    def reset(self, **kwargs: Any) -> tuple[NDArray, dict[str, Any]]:
        self.t = 1
        return self.observation_space.sample(), {}
