"""d3rlpy docs, "Tips / Reproducibility" and the environment wrappers, run
with ``import offrl``. (The image-observation and multi-step tips are in
test_compat_dataset.py, the "Improve performance" tip in
test_compat_models.py.)

Changes other than the import (marked ``# docs:``): ``gym.make('Hopper-v2')``
-> gymnasium's Pendulum-v1 (no MuJoCo here).
"""

from __future__ import annotations

import gymnasium as gym  # docs: import gym
import numpy as np
import torch

import offrl


def _run_once():
    # set random seeds in random module, numpy module and PyTorch module.
    offrl.seed(313)
    # set environment seed
    env = gym.make("Pendulum-v1")  # docs: 'Hopper-v2'
    offrl.envs.seed_env(env, 313)
    # the environment's next reset continues from the seeded generator
    observation, _ = env.reset()
    algo = offrl.algos.SACConfig().create()
    algo.build_with_env(env)
    return observation, np.random.random(), torch.rand(1).item(), algo.predict(observation[None])


def test_seed_and_seed_env_reproduce_a_run() -> None:
    first = _run_once()
    second = _run_once()
    np.testing.assert_array_equal(first[0], second[0])
    assert first[1] == second[1] and first[2] == second[2]
    # the networks are initialised identically, so the policy acts identically
    np.testing.assert_array_equal(first[3], second[3])


def test_seed_env_matches_reset_with_seed() -> None:
    env = gym.make("Pendulum-v1")
    offrl.envs.seed_env(env, 5)
    a, _ = env.reset()
    # seed_env resets with the seed, as d3rlpy's does: the next reset draws
    # the same state as the second reset of an environment reset with seed 5
    c = gym.make("Pendulum-v1")
    c.reset(seed=5)
    np.testing.assert_array_equal(a, c.reset()[0])
    d = gym.make("Pendulum-v1")
    d.reset(seed=6)
    assert not np.array_equal(a, d.reset()[0])


def test_channel_first_and_frame_stack_wrappers() -> None:
    class Pixels(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.t = 0
            return np.zeros((8, 8, 3), np.uint8), {}

        def step(self, action):
            self.t += 1
            return np.full((8, 8, 3), self.t, np.uint8), 0.0, False, self.t >= 5, {}

    env = offrl.envs.ChannelFirst(Pixels())
    observation, _ = env.reset()
    assert observation.shape == (3, 8, 8)
    stacked = offrl.envs.FrameStack(offrl.envs.ChannelFirst(Pixels()), num_stack=4)
    observation, _ = stacked.reset()
    observation, *_ = stacked.step(0)
    observation = np.asarray(observation)
    assert observation.shape[0] == 4
    # the newest frame last, the reset frame repeated before it
    assert np.asarray(observation[-1]).max() == 1 and np.asarray(observation[0]).max() == 0
