"""rollout_returns: undiscounted and discounted returns of greedy episodes."""

from __future__ import annotations

import gymnasium as gym
import pytest

from offrl.algos import DiscreteRandomPolicyConfig
from offrl.datasets.builtin import CartPoleController
from offrl.metrics.utility import evaluate_qlearning_with_environment, rollout_returns


def test_discounted_returns_match_the_geometric_sum():
    env = gym.make("CartPole-v1", max_episode_steps=60)
    algo = CartPoleController()
    algo.build_with_env(env)
    # CartPole pays 1 per step; the controller balances, so every episode is cut at 60 steps
    assert rollout_returns(algo, env, n_trials=2, seed=0) == [60.0, 60.0]
    discounted = rollout_returns(algo, env, n_trials=2, seed=0, gamma=0.9)
    assert discounted == pytest.approx([(1 - 0.9**60) / 0.1] * 2)
    assert evaluate_qlearning_with_environment(algo, env, n_trials=2) == 60.0


def test_bad_arguments():
    env = gym.make("CartPole-v1")
    algo = DiscreteRandomPolicyConfig().create()
    with pytest.raises(ValueError, match="is not built"):
        rollout_returns(algo, env, 1)
    algo.build_with_env(env)
    for kwargs, message in (({"n_trials": 0}, "n_trials must be a positive int"),
                            ({"epsilon": 1.5}, r"epsilon must be a number in \[0, 1\]"),
                            ({"gamma": -0.1}, r"gamma must be a number in \[0, 1\]")):
        with pytest.raises(ValueError, match=message):
            rollout_returns(algo, env, **kwargs)
