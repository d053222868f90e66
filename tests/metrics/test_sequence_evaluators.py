"""The action evaluators, EnvironmentEvaluator and rollout_returns judge a
sequence model (the Decision Transformer family) at a target return."""

from __future__ import annotations

import math
from typing import Any, List, Optional

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces

import offrl
from offrl.algos import DecisionTransformerConfig, DiscreteCQLConfig, DiscreteDecisionTransformerConfig
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.metrics import (
    CompareContinuousActionDiffEvaluator,
    CompareDiscreteActionMatchEvaluator,
    ContinuousActionDiffEvaluator,
    DiscreteActionMatchEvaluator,
    EnvironmentEvaluator,
    rollout_returns,
)
from offrl.models import VectorEncoderFactory
from offrl.ope import SequencePolicy

QUIET = dict(logger_adapter=NoopAdapterFactory(), show_progress=False)
LENGTHS = [2, 5, 1, 7]


def tiny(discrete: bool, seed: int = 0):
    cls = DiscreteDecisionTransformerConfig if discrete else DecisionTransformerConfig
    offrl.seed(seed)
    algo = cls(encoder_factory=VectorEncoderFactory(hidden_units=[8]), num_layers=1, num_heads=2, context_size=3,
               max_timestep=30, attn_dropout=0.0, resid_dropout=0.0, embed_dropout=0.0, batch_size=4).create()
    algo.create_impl((3,), 2)
    return algo


def dataset(discrete: bool) -> MDPDataset:
    rng = np.random.default_rng(3)
    n = sum(LENGTHS)
    terminals = np.zeros(n, np.float32)
    terminals[np.cumsum(LENGTHS) - 1] = 1.0
    actions = rng.integers(0, 2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), actions, rng.normal(size=n).astype(np.float32),
                      terminals, action_size=2 if discrete else None)


def stepped_greedy(algo, data: MDPDataset, target_return: float) -> List[np.ndarray]:
    """The naive loop: per episode, the stateful wrapper fed the logged
    observations and rewards, keeping the logged actions in its context;
    the greedy action (argmax of the logits for discrete control) per step."""
    out: List[np.ndarray] = []
    discrete = algo.get_action_type().name == "DISCRETE"
    for episode in data.episodes:
        step = [0]

        def sampler(output: np.ndarray, episode=episode):
            out.append(np.argmax(output) if discrete else np.asarray(output))
            logged = np.asarray(episode.actions[step[0]])
            return logged.reshape(()) if discrete else logged

        actor = algo.as_stateful_wrapper(target_return, sampler)
        for t in range(episode.size()):
            step[0] = t
            actor.predict(episode.observations[t], float(episode.rewards[t - 1, 0]) if t else 0.0)
    return out


def test_action_match_equals_the_stepped_wrapper():
    data = dataset(True)
    algo = tiny(True)
    greedy = np.array(stepped_greedy(algo, data, 4.0))
    logged = np.concatenate([np.asarray(e.actions).reshape(-1) for e in data.episodes])
    expected = float(np.mean(greedy == logged))
    assert 0.0 < expected < 1.0
    assert DiscreteActionMatchEvaluator(target_return=4.0)(algo, data) == pytest.approx(expected, abs=1e-12)
    assert DiscreteActionMatchEvaluator()(SequencePolicy(algo, 4.0), data) == pytest.approx(expected, abs=1e-12)
    # on a subset of episodes given to the evaluator
    sub = DiscreteActionMatchEvaluator(episodes=data.episodes[1:2], target_return=4.0)(algo, data)
    assert sub == pytest.approx(float(np.mean(greedy[2:7] == logged[2:7])), abs=1e-12)


def test_action_diff_equals_the_stepped_wrapper():
    data = dataset(False)
    algo = tiny(False)
    greedy = np.stack(stepped_greedy(algo, data, -2.0)).astype(np.float64)
    logged = np.concatenate([e.actions for e in data.episodes]).astype(np.float64)
    expected = float(np.mean(np.sum((logged - greedy) ** 2, axis=1)))
    got = ContinuousActionDiffEvaluator(target_return=-2.0)(algo, data)
    assert got == pytest.approx(expected, rel=1e-5)


def test_compare_evaluators_take_sequence_models_on_either_side():
    data = dataset(True)
    dt, other = tiny(True), tiny(True, seed=1)
    assert CompareDiscreteActionMatchEvaluator(dt, target_return=4.0)(dt, data) == 1.0
    ours = np.array(stepped_greedy(dt, data, 4.0))
    theirs = np.array(stepped_greedy(other, data, 4.0))
    expected = float(np.mean(ours == theirs))
    assert CompareDiscreteActionMatchEvaluator(other, target_return=4.0)(dt, data) == pytest.approx(expected)
    cql = DiscreteCQLConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    cql.build_with_dataset(data)
    observations = np.concatenate([e.observations for e in data.episodes])
    expected = float(np.mean(cql.predict(observations) == ours))
    assert CompareDiscreteActionMatchEvaluator(cql, target_return=4.0)(dt, data) == pytest.approx(expected)
    assert CompareDiscreteActionMatchEvaluator(SequencePolicy(dt, 4.0))(cql, data) == pytest.approx(expected)

    data = dataset(False)
    dt, other = tiny(False), tiny(False, seed=1)
    ours = np.stack(stepped_greedy(dt, data, 1.0)).astype(np.float64)
    theirs = np.stack(stepped_greedy(other, data, 1.0)).astype(np.float64)
    expected = float(np.mean(np.sum((ours - theirs) ** 2, axis=1)))
    got = CompareContinuousActionDiffEvaluator(SequencePolicy(other, 1.0))(SequencePolicy(dt, 1.0), data)
    assert got == pytest.approx(expected, rel=1e-5)
    assert CompareContinuousActionDiffEvaluator(dt, target_return=1.0)(dt, data) == 0.0


def test_fit_logs_an_action_evaluator_of_a_decision_transformer():
    data = dataset(True)
    algo = tiny(True)
    results = algo.fit(data, n_steps=2, n_steps_per_epoch=1,
                       evaluators={"match": DiscreteActionMatchEvaluator(target_return=4.0)}, **QUIET)
    assert [0.0 <= metrics["match"] <= 1.0 for _, metrics in results] == [True, True]


class CountEnv(gymnasium.Env):
    """Deterministic 4-step episodes: observation ``[t, 1, -1]``, reward
    ``1 + t`` when action 1 is taken (discrete) else ``t``."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-10.0, 10.0, (3,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, 1.0, -1.0], np.float32)

    def reset(self, *, seed: Optional[int] = None, options: Any = None):
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        reward = float(self.t + (int(action) == 1))
        self.t += 1
        return self._obs(), reward, self.t >= 4, False, {}


def manual_return(algo, target_return: float, gamma: float = 1.0) -> float:
    env, actor = CountEnv(), algo.as_stateful_wrapper(target_return, offrl.algos.GreedyTransformerActionSampler())
    observation, _ = env.reset()
    reward, total, discount, done = 0.0, 0.0, 1.0, False
    while not done:
        observation, reward, terminated, truncated, _ = env.step(actor.predict(observation, reward))
        total += discount * reward
        discount *= gamma
        done = terminated or truncated
    return total


def test_rollout_returns_and_environment_evaluator_step_the_stateful_wrapper():
    algo = tiny(True)
    greedy = SequencePolicy(algo, 3.0, offrl.algos.GreedyTransformerActionSampler())
    assert rollout_returns(greedy, CountEnv(), n_trials=2, gamma=0.5) == [manual_return(algo, 3.0, 0.5)] * 2
    assert EnvironmentEvaluator(CountEnv(), n_trials=2)(greedy) == manual_return(algo, 3.0)
    returns = rollout_returns(algo, CountEnv(), n_trials=3, target_return=3.0)  # softmax sampling by default
    assert len(returns) == 3 and all(math.isfinite(r) for r in returns)
    value = EnvironmentEvaluator(CountEnv(), n_trials=2, target_return=3.0)(algo)
    assert 6.0 <= value <= 10.0


def test_a_missing_or_bad_target_return_is_refused_naming_it():
    data = dataset(True)
    algo = tiny(True)
    with pytest.raises(ValueError, match="target_return"):
        DiscreteActionMatchEvaluator()(algo, data)
    with pytest.raises(ValueError, match="target_return"):
        CompareDiscreteActionMatchEvaluator(algo)(algo, data)
    with pytest.raises(ValueError, match="target_return"):
        DiscreteActionMatchEvaluator(target_return=float("nan"))
    with pytest.raises(ValueError, match="target_return"):
        EnvironmentEvaluator(CountEnv(), target_return=float("nan"))
    with pytest.raises(ValueError, match="target_return"):
        EnvironmentEvaluator(CountEnv())(algo)
    with pytest.raises(ValueError, match="target_return"):
        rollout_returns(algo, CountEnv(), n_trials=1)
    with pytest.raises(ValueError, match="target_return"):
        rollout_returns(algo, CountEnv(), n_trials=1, target_return=float("inf"))
    with pytest.raises(ValueError, match="target_return is only for sequence models"):
        cql = DiscreteCQLConfig().create()
        cql.build_with_dataset(data)
        rollout_returns(cql, CountEnv(), n_trials=1, target_return=1.0)
    with pytest.raises(ValueError, match="differs"):
        DiscreteActionMatchEvaluator(target_return=2.0)(SequencePolicy(algo, 3.0), data)
    with pytest.raises(ValueError, match="epsilon"):
        rollout_returns(algo, CountEnv(), n_trials=1, epsilon=0.5, target_return=1.0)


def test_the_evaluators_target_return_is_ignored_for_other_algorithms():
    data = dataset(True)
    cql = DiscreteCQLConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    cql.build_with_dataset(data)
    assert DiscreteActionMatchEvaluator(target_return=4.0)(cql, data) == DiscreteActionMatchEvaluator()(cql, data)


def test_value_evaluators_of_an_fqe_of_a_sequence_policy_use_the_replayed_actions():
    from offrl.metrics import (AverageValueEstimationEvaluator, DiscountedSumOfAdvantageEvaluator,
                               InitialStateValueEstimationEvaluator)
    from offrl.ope import DiscreteFQE, DiscreteFQEConfig

    data = dataset(True)
    algo = tiny(True)
    fqe = DiscreteFQE(algo=SequencePolicy(algo, 4.0),
                      config=DiscreteFQEConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), batch_size=8))
    fqe.fit(data, n_steps=2, n_steps_per_epoch=2, **QUIET)
    observations = np.concatenate([e.observations for e in data.episodes])
    logged = np.concatenate([np.asarray(e.actions).reshape(-1) for e in data.episodes])
    greedy = np.array(stepped_greedy(algo, data, 4.0))
    values = fqe.predict_value(observations, greedy).astype(np.float64)
    assert AverageValueEstimationEvaluator()(fqe, data) == pytest.approx(values.mean(), rel=1e-5, abs=1e-6)
    firsts = np.cumsum(LENGTHS) - LENGTHS
    assert InitialStateValueEstimationEvaluator()(fqe, data) == pytest.approx(values[firsts].mean(), rel=1e-5, abs=1e-6)
    with pytest.warns(UserWarning, match="settled"):
        assert fqe.estimate_policy_value(data, n_bootstrap=10).value == pytest.approx(values[firsts].mean(), rel=1e-5, abs=1e-6)
    advantages = fqe.predict_value(observations, logged).astype(np.float64) - values
    expected = []  # the discounted sum of advantages to each episode's end, per step
    for s, n in zip(firsts, LENGTHS):
        for t in range(n):
            expected.append(sum(algo.gamma ** (k - t) * advantages[s + k] for k in range(t, n)))
    assert DiscountedSumOfAdvantageEvaluator()(fqe, data) == pytest.approx(float(np.mean(expected)), rel=1e-5, abs=1e-6)
