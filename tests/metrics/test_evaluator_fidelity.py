"""Evaluators against d3rlpy 2.8.1's public behaviour with duck-typed
algorithms (plain classes with ``predict`` / ``predict_value``): the
numbers below are what d3rlpy 2.8.1 returns for the same episodes and the
same plain class, and each is also worked out by hand in a comment."""

from __future__ import annotations

import numpy as np
import pytest

from offrl.dataset import BasicTransitionPicker, Episode, InfiniteBuffer, ReplayBuffer
from offrl.metrics import (
    AverageValueEstimationEvaluator,
    CompareContinuousActionDiffEvaluator,
    ContinuousActionDiffEvaluator,
    DiscountedSumOfAdvantageEvaluator,
    EnvironmentEvaluator,
    InitialStateValueEstimationEvaluator,
    SoftOPCEvaluator,
    TDErrorEvaluator,
    evaluate_qlearning_with_environment,
    evaluate_transformer_with_environment,
    make_batches,
)


class PlainAlgo:
    """No offrl base class: ``pi(s) = 0.5``, ``Q(s, a) = s[0]``."""

    gamma = 0.9
    reward_scaler = None

    def predict(self, x):
        return np.zeros((np.asarray(x).shape[0], 1)) + 0.5

    def predict_value(self, x, action):
        return np.asarray(x)[:, 0].astype(np.float64)


def _episodes():
    terminated = Episode(np.arange(6, dtype=np.float32).reshape(3, 2), np.full((3, 1), 0.2, np.float32),
                         np.ones((3, 1), np.float32), terminated=True)  # return 3
    truncated = Episode(np.arange(6, dtype=np.float32).reshape(3, 2) + 10, np.ones((3, 1), np.float32),
                        np.zeros((3, 1), np.float32), terminated=False)  # return 0, 2 transitions
    return terminated, truncated


def _dataset():
    return ReplayBuffer(InfiniteBuffer(), episodes=list(_episodes()))


def test_dataset_evaluators_give_d3rlpys_numbers_for_a_plain_class():
    algo, dataset = PlainAlgo(), _dataset()
    # Q values of the transitions' observations: 0 2 4 | 10 12
    # TD: terminated: (0-1-.9*2)^2 + (2-1-.9*4)^2 + (4-1)^2 = 7.84+6.76+9; truncated: (10-.9*12)^2 + (12-.9*14)^2
    assert TDErrorEvaluator()(algo, dataset) == pytest.approx((7.84 + 6.76 + 9 + 0.64 + 0.36) / 5, rel=1e-12)
    assert DiscountedSumOfAdvantageEvaluator()(algo, dataset) == 0.0  # Q ignores the action
    assert AverageValueEstimationEvaluator()(algo, dataset) == pytest.approx(28 / 5, rel=1e-12)
    assert InitialStateValueEstimationEvaluator()(algo, dataset) == pytest.approx(5.0, rel=1e-12)  # (0 + 10) / 2
    # success (return >= 1): the terminated episode, mean Q 2; all: 5.6
    assert SoftOPCEvaluator(1.0)(algo, dataset) == pytest.approx(2.0 - 5.6, rel=1e-12)
    assert SoftOPCEvaluator(-5.0)(algo, dataset) == pytest.approx(0.0, abs=1e-12)
    # 3 * (0.2 - 0.5)^2 + 2 * (1 - 0.5)^2 over 5 transitions
    assert ContinuousActionDiffEvaluator()(algo, dataset) == pytest.approx((0.27 + 0.5) / 5, rel=1e-6)
    assert CompareContinuousActionDiffEvaluator(PlainAlgo())(algo, dataset) == 0.0


def test_soft_opc_is_nan_when_no_episode_succeeds():
    assert np.isnan(SoftOPCEvaluator(100.0)(PlainAlgo(), _dataset()))
    assert np.isnan(SoftOPCEvaluator(0.5, episodes=[_episodes()[1]])(PlainAlgo(), None))


def test_episodes_without_transitions_are_left_out_or_refused():
    one_step = Episode(np.zeros((1, 2), np.float32), np.ones((1, 1), np.float32), np.zeros((1, 1), np.float32), False)
    terminated = _episodes()[0]
    # d3rlpy 2.8.1 fails with an IndexError on both; offrl leaves the episode without a transition out ...
    assert InitialStateValueEstimationEvaluator(episodes=[terminated, one_step])(PlainAlgo(), None) == 0.0
    assert AverageValueEstimationEvaluator(episodes=[terminated, one_step])(PlainAlgo(), None) == 2.0
    # ... and says so when none is left
    with pytest.raises(ValueError, match="no transitions"):
        TDErrorEvaluator(episodes=[one_step])(PlainAlgo(), None)


class _CountingEnv:
    """Observation = step number; reward 1 per step; ends after 4 steps."""

    class _Space:
        def sample(self):
            return np.zeros(1)

    action_space = _Space()

    def __init__(self) -> None:
        self.t = 0
        self.actions = []

    def reset(self, seed=None):
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.actions.append(np.asarray(action))
        self.t += 1
        return np.array([float(self.t)], dtype=np.float32), 1.0, self.t >= 4, False, {}


class _PlainPolicy:
    """Only ``predict``: no is_built, no config, no offrl base class."""

    def __init__(self) -> None:
        self.shapes = []

    def predict(self, x):
        self.shapes.append(np.asarray(x).shape)
        return np.asarray(x) * 2.0


def test_environment_evaluation_takes_any_object_with_predict():
    policy, env = _PlainPolicy(), _CountingEnv()
    assert evaluate_qlearning_with_environment(policy, env, n_trials=2) == 4.0
    assert policy.shapes == [(1, 1)] * 8  # one batched observation per step
    np.testing.assert_array_equal(env.actions[3], [6.0])  # 2 * observation 3
    assert EnvironmentEvaluator(_CountingEnv(), n_trials=3)(_PlainPolicy(), None) == 4.0
    with pytest.raises(TypeError, match="algo must have predict"):
        evaluate_qlearning_with_environment(object(), _CountingEnv())


def test_evaluate_transformer_with_environment_resets_and_feeds_the_last_reward():
    class StatefulPolicy:
        def __init__(self):
            self.resets, self.seen = 0, []

        def reset(self):
            self.resets += 1

        def predict(self, observation, reward):
            self.seen.append((float(observation[0]), reward))
            return np.zeros(1)

    policy = StatefulPolicy()
    assert evaluate_transformer_with_environment(policy, _CountingEnv(), n_trials=2) == 4.0
    assert policy.resets == 2
    assert policy.seen[:4] == [(0.0, 0.0), (1.0, 1.0), (2.0, 1.0), (3.0, 1.0)]
    with pytest.raises(TypeError, match="reset"):
        evaluate_transformer_with_environment(_PlainPolicy(), _CountingEnv())
    with pytest.raises(ValueError, match="n_trials"):
        evaluate_transformer_with_environment(policy, _CountingEnv(), n_trials=0)


def test_make_batches_windows_and_user_picker_indices():
    terminated, truncated = _episodes()
    batches = list(make_batches(terminated, 2, BasicTransitionPicker()))
    assert [len(b.observations) for b in batches] == [2, 1]
    np.testing.assert_array_equal(batches[1].observations, [[4.0, 5.0]])
    calls = []

    def user_picker(episode, index):
        calls.append(index)
        return BasicTransitionPicker()(episode, index)

    with_final = Episode(truncated.observations, truncated.actions, truncated.rewards, False,
                         final_observation=np.zeros(2, np.float32))
    assert [len(b.observations) for b in make_batches(with_final, 1024, user_picker)] == [2]
    assert calls == [0, 1]
    assert [len(b.observations) for b in make_batches(with_final, 1024, BasicTransitionPicker())] == [3]
    with pytest.raises(ValueError, match="window_size"):
        list(make_batches(terminated, 0, BasicTransitionPicker()))
