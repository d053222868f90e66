"""d3rlpy docs, "API Reference / Metrics", run with ``import offrl``: the fit
example with evaluators, a user's own evaluator, and each documented
evaluator's value against a plain loop of what its documentation says.

Changes other than the import (marked ``# docs:``): sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

import offrl

NOOP = {"show_progress": False, "logger_adapter": offrl.logging.NoopAdapterFactory()}


@pytest.fixture(scope="module")
def trained(cartpole):
    dataset, _ = cartpole
    dqn = offrl.algos.DQNConfig().create()
    dqn.fit(dataset, n_steps=10, n_steps_per_epoch=10, **NOOP)
    return dqn


def test_fit_with_documented_evaluators(cartpole) -> None:
    dataset, env = cartpole
    # use partial episodes as test data
    test_episodes = dataset.episodes[:10]
    dqn = offrl.algos.DQNConfig().create()
    result = dqn.fit(
        dataset,
        n_steps=10,  # docs: 100000
        n_steps_per_epoch=5,
        evaluators={
            "td_error": offrl.metrics.TDErrorEvaluator(test_episodes),
            "value_scale": offrl.metrics.AverageValueEstimationEvaluator(test_episodes),
            "environment": offrl.metrics.EnvironmentEvaluator(env, n_trials=1),  # docs: 10 trials
        },
        **NOOP,
    )
    assert len(result) == 2
    for _, metrics in result:
        assert {"td_error", "value_scale", "environment"} <= set(metrics)
    # the logged value is what the evaluator returns for the model at the epoch's end
    value_scale = offrl.metrics.AverageValueEstimationEvaluator(test_episodes)(dqn, dataset)
    assert result[-1][1]["value_scale"] == pytest.approx(value_scale, rel=1e-5)


class CustomEvaluator(offrl.metrics.EvaluatorProtocol):
    """The docs' own-metric example: any callable (algo, dataset) -> float."""

    def __call__(self, algo: offrl.algos.QLearningAlgoBase, dataset: offrl.dataset.ReplayBuffer) -> float:
        # do some evaluation: here, the mean greedy action on the first observations
        x = np.stack([ep.observations[0] for ep in dataset.episodes])
        return float(np.mean(algo.predict(x)))


def test_custom_evaluator_in_fit(cartpole) -> None:
    dataset, _ = cartpole
    dqn = offrl.algos.DQNConfig().create()
    result = dqn.fit(dataset, n_steps=4, n_steps_per_epoch=2, evaluators={"custom": CustomEvaluator()}, **NOOP)
    assert [("custom" in m) for _, m in result] == [True, True]
    assert 0.0 <= result[-1][1]["custom"] <= 1.0
    assert result[-1][1]["custom"] == pytest.approx(CustomEvaluator()(dqn, dataset))


def test_average_and_initial_value_estimation(cartpole, trained) -> None:
    dataset, _ = cartpole
    episodes = dataset.episodes[:6]
    obs = np.concatenate([ep.observations for ep in episodes])
    expected = np.mean(trained.predict_value(obs, trained.predict(obs)))
    got = offrl.metrics.AverageValueEstimationEvaluator(episodes)(trained, dataset)
    assert got == pytest.approx(expected, rel=1e-5)

    first = np.stack([ep.observations[0] for ep in episodes])
    expected = np.mean(trained.predict_value(first, trained.predict(first)))
    got = offrl.metrics.InitialStateValueEstimationEvaluator(episodes)(trained, dataset)
    assert got == pytest.approx(expected, rel=1e-5)


def test_soft_opc(cartpole, trained) -> None:
    dataset, _ = cartpole
    episodes = dataset.episodes[:20]
    returns = np.array([ep.rewards.sum() for ep in episodes])
    threshold = float(np.median(returns))

    def values(eps):
        obs = np.concatenate([ep.observations for ep in eps])
        acts = np.concatenate([ep.actions for ep in eps]).reshape(-1)
        return trained.predict_value(obs, acts)

    success = [ep for ep, r in zip(episodes, returns) if r >= threshold]
    expected = np.mean(values(success)) - np.mean(values(episodes))
    got = offrl.metrics.SoftOPCEvaluator(return_threshold=threshold, episodes=episodes)(trained, dataset)
    assert got == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_action_match_and_compare(cartpole, trained) -> None:
    dataset, _ = cartpole
    episodes = dataset.episodes[:6]
    obs = np.concatenate([ep.observations for ep in episodes])
    acts = np.concatenate([ep.actions for ep in episodes]).reshape(-1)
    expected = np.mean(trained.predict(obs) == acts)
    got = offrl.metrics.DiscreteActionMatchEvaluator(episodes)(trained, dataset)
    assert got == pytest.approx(expected)

    other = offrl.algos.DQNConfig().create()
    other.build_with_dataset(dataset)
    expected = np.mean(trained.predict(obs) == other.predict(obs))
    got = offrl.metrics.CompareDiscreteActionMatchEvaluator(other, episodes)(trained, dataset)
    assert got == pytest.approx(expected)
    assert offrl.metrics.CompareDiscreteActionMatchEvaluator(trained, episodes)(trained, dataset) == 1.0


def test_continuous_action_diff_and_compare(pendulum) -> None:
    dataset, _ = pendulum
    episodes = dataset.episodes[:3]
    sac = offrl.algos.SACConfig().create()
    sac.build_with_dataset(dataset)
    other = offrl.algos.SACConfig().create()
    other.build_with_dataset(dataset)
    obs = np.concatenate([ep.observations for ep in episodes])
    acts = np.concatenate([ep.actions for ep in episodes])
    expected = np.mean(np.sum((sac.predict(obs) - acts) ** 2, axis=1))
    got = offrl.metrics.ContinuousActionDiffEvaluator(episodes)(sac, dataset)
    assert got == pytest.approx(expected, rel=1e-5)
    expected = np.mean(np.sum((sac.predict(obs) - other.predict(obs)) ** 2, axis=1))
    got = offrl.metrics.CompareContinuousActionDiffEvaluator(other, episodes)(sac, dataset)
    assert got == pytest.approx(expected, rel=1e-5)


def test_td_error_and_advantage_are_floats(cartpole, trained) -> None:
    dataset, _ = cartpole
    episodes = dataset.episodes[:4]
    td = offrl.metrics.TDErrorEvaluator(episodes)(trained, dataset)
    adv = offrl.metrics.DiscountedSumOfAdvantageEvaluator(episodes)(trained, dataset)
    assert isinstance(td, float) and td >= 0.0
    # the advantage of the greedy policy against the data's actions is never positive
    assert isinstance(adv, float) and adv <= 1e-6


class DuckPolicy:
    """Any object with ``predict``, as d3rlpy's evaluators accept."""

    def predict(self, x: np.ndarray) -> np.ndarray:
        return (x[:, 2] > 0).astype(np.int64)  # push towards where the pole falls


def test_environment_evaluators_take_any_object_with_predict(cartpole) -> None:
    _, env = cartpole
    score = offrl.metrics.EnvironmentEvaluator(env, n_trials=2)(DuckPolicy(), dataset=None)
    assert 1.0 <= score <= 500.0
    score = offrl.metrics.evaluate_qlearning_with_environment(DuckPolicy(), env, n_trials=2)
    assert 1.0 <= score <= 500.0
