"""fit_online / collect refuse an environment's reward that is not a real
number (a string is not parsed), naming the step, and keep earlier steps."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from envs import ScriptedEnv

from offrl.algos import DiscreteRandomPolicyConfig
from offrl.dataset import create_infinite_replay_buffer


class _RewardAt(gymnasium.Wrapper):
    """Replaces the reward of global step ``at`` (1-based) by ``value``."""

    def __init__(self, env: gymnasium.Env, at: int, value) -> None:
        super().__init__(env)
        self.at, self.value, self.count = at, value, 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.count += 1
        return obs, (self.value if self.count == self.at else reward), terminated, truncated, info


@pytest.mark.parametrize("value, shown", [("1.5", r"'1.5' \(str\)"), ("abc", r"'abc' \(str\)"), (b"1", r"b'1' \(bytes\)"),
                                          (1 + 2j, r"\(1\+2j\) \(complex\)"), (None, r"None \(NoneType\)")])
def test_a_non_numeric_reward_is_named_with_its_step(value, shown):
    env = _RewardAt(ScriptedEnv(), at=5, value=value)
    buffer = create_infinite_replay_buffer(env=env)
    with pytest.raises(ValueError, match=rf"the environment returned reward {shown} at step 5 \(episode 1, step 2 of "
                                         r"the episode\); expected a real number"):
        DiscreteRandomPolicyConfig().create().collect(env, buffer, n_steps=10, show_progress=False)
    assert buffer.transition_count == 4  # the first episode (3 steps) and the open one's first step
    np.testing.assert_array_equal(np.concatenate([e.rewards.reshape(-1) for e in buffer.episodes]),
                                  np.array([1.0, 2.0, 3.0, 11.0], np.float32))
