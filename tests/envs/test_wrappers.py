"""offrl.envs: d3rlpy's environment wrappers on small hand-made environments."""

from __future__ import annotations

import importlib.util

import gymnasium
import numpy as np
import pytest
from gymnasium.spaces import Box, Dict, Discrete, Tuple

from offrl.envs import Atari, AtariPreprocessing, ChannelFirst, FrameStack, GoalConcatWrapper, seed_env


class Counter(gymnasium.Env):
    """Observation at step t is ``np.full(shape, t)``; reward t; 5 steps."""

    def __init__(self, shape=(4, 3, 2), dtype=np.uint8):
        self.observation_space = Box(0, 255, shape=shape, dtype=dtype)
        self.action_space = Discrete(2)
        self.t = 0
        self.shape, self.dtype = shape, dtype

    def _obs(self):
        return np.arange(int(np.prod(self.shape)), dtype=self.dtype).reshape(self.shape) + self.t

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        return self._obs(), float(self.t), self.t >= 5, False, {}


class Goal(gymnasium.Env):
    def __init__(self):
        self.observation_space = Dict({
            "observation": Box(-1, 1, shape=(3,), dtype=np.float32),
            "desired_goal": Box(-2, 2, shape=(2,), dtype=np.float32),
        })
        self.action_space = Box(-1, 1, shape=(1,), dtype=np.float32)

    def _obs(self):
        return {"observation": np.array([1, 2, 3], np.float32), "desired_goal": np.array([7, 8], np.float32)}

    def reset(self, *, seed=None, options=None):
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def test_channel_first_hwc_and_hw():
    env = ChannelFirst(Counter((4, 3, 2)))
    assert env.observation_space.shape == (2, 4, 3)
    observation, _ = env.reset()
    raw = np.arange(24, dtype=np.uint8).reshape(4, 3, 2)
    np.testing.assert_array_equal(observation, raw.transpose(2, 0, 1))
    observation, reward, *_ = env.step(0)
    np.testing.assert_array_equal(observation, (raw + 1).transpose(2, 0, 1))
    assert env.observation_space.contains(observation)
    gray = ChannelFirst(Counter((4, 3)))
    assert gray.observation_space.shape == (1, 4, 3)
    assert gray.reset()[0].shape == (1, 4, 3)
    with pytest.raises(ValueError, match="image"):
        ChannelFirst(Counter((4,)))


def test_frame_stack_zero_pads_then_rolls():
    env = FrameStack(Counter((2,)), num_stack=3)
    assert env.observation_space.shape == (3, 2)
    observation, _ = env.reset()
    np.testing.assert_array_equal(observation, [[0, 0], [0, 0], [0, 1]])
    for _ in range(3):
        observation, *_ = env.step(0)
    np.testing.assert_array_equal(observation, [[1, 2], [2, 3], [3, 4]])
    assert observation.dtype == np.uint8
    with pytest.raises(ValueError, match="num_stack"):
        FrameStack(Counter((2,)), 0)


def test_seed_env_repeats_resets_and_action_samples():
    env = gymnasium.make("CartPole-v1")
    seed_env(env, 3)
    first = env.action_space.sample()
    a, _ = env.reset(seed=None)
    seed_env(env, 3)
    assert env.action_space.sample() == first
    b, _ = env.reset(seed=3)
    seed_env(env, 3)
    c, _ = env.reset(seed=3)
    np.testing.assert_array_equal(b, c)
    with pytest.raises(TypeError, match="seed"):
        seed_env(env, "3")


def test_goal_concat_wrapper():
    env = GoalConcatWrapper(Goal())
    observation, _ = env.reset()
    np.testing.assert_array_equal(observation, [1, 2, 3, 7, 8])
    np.testing.assert_array_equal(env.observation_space.low, [-1, -1, -1, -2, -2])
    pair = GoalConcatWrapper(Goal(), tuple_observation=True)
    observation, *_ = pair.step(np.zeros(1, np.float32))
    assert isinstance(pair.observation_space, Tuple)
    np.testing.assert_array_equal(observation[1], [7, 8])
    with pytest.raises(ValueError, match="goal_key"):
        GoalConcatWrapper(Goal(), goal_key="achieved_goal")


@pytest.mark.skipif(
    importlib.util.find_spec("ale_py") is not None and importlib.util.find_spec("cv2") is not None,
    reason="the 'atari' extra is installed here, so there is no ImportError to check",
)
@pytest.mark.parametrize("wrapper", [Atari, AtariPreprocessing])
def test_atari_without_the_extra_names_it(wrapper):
    with pytest.raises(ImportError, match=r"offrl\[atari\]"):
        wrapper(Counter((210, 160, 3)))
