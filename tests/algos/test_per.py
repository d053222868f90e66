"""Prioritized replay in the DQN family: importance-weighted losses and TD
errors computed by hand, priorities fed back by ``fit``, unsupported
algorithms, and learning with prioritized sampling."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import offrl
from hand_losses import discrete_batch, huber, quantile_huber_per_sample
from offrl.algos import DiscreteBCConfig, DiscreteCQLConfig, DoubleDQNConfig, DQNConfig
from offrl.training.fit import train_step
from offrl.dataset import MDPDataset, PrioritizedReplayBuffer
from offrl.logging import NoopAdapterFactory
from offrl.models import MeanQFunctionFactory, QRQFunctionFactory, VectorEncoderFactory

WEIGHTS = np.array([[1.0], [0.25], [0.5], [0.8]], dtype=np.float32)


def _perturb_target(algo) -> None:
    with torch.no_grad():
        for p in algo.modules["targ_q_function"].parameters():
            p.add_(0.3 * torch.randn_like(p))


def _q_values(module, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return module.expected(torch.from_numpy(x)).numpy()  # (E, B, A)


@pytest.mark.parametrize("cls, n_critics", [(DQNConfig, 1), (DoubleDQNConfig, 1), (DQNConfig, 2), (DoubleDQNConfig, 3)])
def test_weighted_loss_and_td_errors_match_hand_computation(cls, n_critics):
    offrl.seed(0)
    algo = cls(encoder_factory=VectorEncoderFactory(hidden_units=[8]), gamma=0.9, n_critics=n_critics).create()
    algo.create_impl((2,), 3)
    _perturb_target(algo)
    batch = discrete_batch(2.5, WEIGHTS)
    q_now = _q_values(algo.modules["q_function"], batch.observations)
    q_next_online = _q_values(algo.modules["q_function"], batch.next_observations)
    q_next_target = _q_values(algo.modules["targ_q_function"], batch.next_observations)
    rows = np.arange(4)
    chooser = q_next_online if cls is DoubleDQNConfig else q_next_target
    a_star = chooser.mean(axis=0).argmax(axis=1)
    next_value = q_next_target[:, rows, a_star].min(axis=0)  # ensemble minimum
    y = batch.rewards[:, 0] + 0.9 ** batch.intervals[:, 0] * (1 - batch.terminals[:, 0]) * next_value
    pred = q_now[:, rows, batch.actions[:, 0]]  # (E, B)
    w = WEIGHTS[:, 0]
    expected_loss = sum((w * huber(pred[e] - y)).mean() for e in range(n_critics))
    result = algo.training_step(batch)
    assert float(result.metrics["loss"]) == pytest.approx(float(expected_loss), abs=1e-5)
    np.testing.assert_allclose(result.td_errors.numpy(), np.abs(y - pred).mean(axis=0), atol=1e-5)
    assert not result.td_errors.requires_grad


def test_unit_weights_give_the_unweighted_loss():
    offrl.seed(1)
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.create_impl((2,), 3)
    twin = copy.deepcopy(algo)
    weighted = algo.update(discrete_batch(2.5, np.ones((4, 1), np.float32)))["loss"]
    plain = twin.training_step(discrete_batch(2.5))
    assert weighted == pytest.approx(float(plain.metrics["loss"]), rel=1e-5)
    assert plain.td_errors is None  # no prioritized batch, no TD errors computed


def test_weighted_quantile_loss_matches_hand_computation():
    offrl.seed(2)
    algo = DQNConfig(
        encoder_factory=VectorEncoderFactory(hidden_units=[8]), q_func_factory=QRQFunctionFactory(n_quantiles=4), gamma=0.5
    ).create()
    algo.create_impl((2,), 3)
    q = algo.modules["q_function"]
    batch = discrete_batch(2.5, WEIGHTS)
    with torch.no_grad():
        dist = q.distribution(torch.from_numpy(batch.observations))[0].numpy()  # (B, A, N)
        nxt = q.distribution(torch.from_numpy(batch.next_observations))[0].numpy()
    a_star = nxt.mean(axis=2).argmax(axis=1)
    target = batch.rewards + 0.5**batch.intervals * (1 - batch.terminals) * nxt[np.arange(4), a_star]  # (B, N)
    pred = dist[np.arange(4), batch.actions[:, 0]]  # (B, N)
    total = (WEIGHTS[:, 0] * quantile_huber_per_sample(target, pred)).sum()
    result = algo.training_step(batch)
    assert float(result.metrics["loss"]) == pytest.approx(total / 4, abs=1e-5)
    np.testing.assert_allclose(result.td_errors.numpy(), np.abs(target.mean(1) - pred.mean(1)), atol=1e-5)


def test_discrete_cql_weights_its_td_loss_only():
    offrl.seed(3)
    algo = DiscreteCQLConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), gamma=0.9, alpha=0.7).create()
    algo.create_impl((2,), 3)
    _perturb_target(algo)
    batch = discrete_batch(2.5, WEIGHTS)
    rows = np.arange(4)
    q_now = _q_values(algo.modules["q_function"], batch.observations)[0]
    a_star = _q_values(algo.modules["q_function"], batch.next_observations)[0].argmax(axis=1)  # double DQN
    next_value = _q_values(algo.modules["targ_q_function"], batch.next_observations)[0][rows, a_star]
    y = batch.rewards[:, 0] + 0.9 ** batch.intervals[:, 0] * (1 - batch.terminals[:, 0]) * next_value
    pred = q_now[rows, batch.actions[:, 0]]
    td = (WEIGHTS[:, 0] * huber(pred - y)).mean()
    logsumexp = np.log(np.exp(q_now).sum(axis=1))
    conservative = (logsumexp - pred).mean()
    result = algo.training_step(batch)
    losses = {k: float(v) for k, v in result.metrics.items()}
    assert losses["td_loss"] == pytest.approx(float(td), abs=1e-5)
    assert losses["conservative_loss"] == pytest.approx(float(conservative), abs=1e-5)
    assert losses["loss"] == pytest.approx(float(td + 0.7 * conservative), abs=1e-5)
    np.testing.assert_allclose(result.td_errors.numpy(), np.abs(y - pred), atol=1e-5)


def _dataset(n: int = 64, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    terminals = (np.arange(n) % 8 == 7).astype(np.float32)
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), rng.integers(0, 2, n), rng.normal(size=n) * 3, terminals, action_size=2)


def _fit(algo, dataset, n_steps: int) -> None:
    algo.fit(dataset, n_steps=n_steps, n_steps_per_epoch=n_steps, logger_adapter=NoopAdapterFactory(), show_progress=False)


@pytest.mark.parametrize("config", [DQNConfig, DiscreteCQLConfig])
def test_fit_feeds_the_td_errors_back_as_priorities(config):
    offrl.seed(4)
    algo = config(encoder_factory=VectorEncoderFactory(hidden_units=[8]), batch_size=16, gamma=0.9).create()
    algo.create_impl((3,), 2)
    before = copy.deepcopy(algo)
    buffer = PrioritizedReplayBuffer.from_dataset(_dataset(), alpha=0.6, epsilon=0.01)
    shadow = PrioritizedReplayBuffer.from_dataset(_dataset())  # the same data, to replay the draw
    offrl.seed(5)
    _fit(algo, buffer, 1)
    offrl.seed(5)
    batch = shadow.sample_transition_batch(16)  # the batch fit drew
    errors = before.training_step(batch).td_errors.numpy()  # TD errors of the pre-step networks on it
    expected = np.ones(64)
    expected[batch.indices] = (errors + 0.01) ** 0.6
    np.testing.assert_allclose(buffer.priorities, expected, rtol=1e-5)
    assert buffer.sampled_batches == 1


def test_fit_runs_many_steps_with_a_fifo_prioritized_buffer():
    from offrl.dataset import FIFOBuffer

    offrl.seed(6)
    buffer = PrioritizedReplayBuffer.from_episode_generator(_dataset().episodes, FIFOBuffer(40), beta_steps=20)
    algo = DoubleDQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), batch_size=8).create()
    _fit(algo, buffer, 25)
    assert buffer.sampled_batches == 25 and buffer.beta == 1.0
    assert len(np.unique(buffer.priorities)) > 10  # priorities were set from TD errors


def test_unsupported_algorithm_is_refused_before_training(tmp_path):
    buffer = PrioritizedReplayBuffer.from_dataset(_dataset())
    algo = DiscreteBCConfig().create()
    with pytest.raises(ValueError, match="DiscreteBC does not support prioritized replay"):
        _fit(algo, buffer, 1)
    assert buffer.sampled_batches == 0
    algo.build_with_dataset(buffer)
    with pytest.raises(ValueError, match="DiscreteBC does not support prioritized replay"):
        train_step(algo, buffer, 4, prioritized=True)


def test_feeding_priorities_needs_a_prioritized_batch():
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    data = _dataset()
    algo.build_with_dataset(data)
    with pytest.raises(ValueError, match="sample it from the prioritized buffer"):
        train_step(algo, data, 4, prioritized=True)


def _rare_reward_chain(n_episodes: int = 300, seed: int = 0) -> MDPDataset:
    """Logged random walk on a 6-state chain; only reaching state 5 pays (1)
    and ends the episode, which few random episodes do."""
    rng = np.random.default_rng(seed)
    obs, act, rew, term = [], [], [], []
    for _ in range(n_episodes):
        s = int(rng.integers(0, 3))
        for _ in range(10):
            a = int(rng.integers(2))
            ns = min(s + 1, 5) if a == 1 else max(s - 1, 0)
            obs.append(np.eye(6, dtype=np.float32)[s])
            act.append(a)
            rew.append(float(ns == 5))
            term.append(float(ns == 5))
            s = ns
            if ns == 5:
                break
    return MDPDataset(np.array(obs), np.array(act), np.array(rew), np.array(term), action_size=2)


@pytest.mark.slow
def test_dqn_with_prioritized_replay_learns_the_chain():
    offrl.seed(0)
    buffer = PrioritizedReplayBuffer.from_dataset(_rare_reward_chain(), beta_steps=2000)
    algo = DQNConfig(
        encoder_factory=VectorEncoderFactory(hidden_units=[32]), q_func_factory=MeanQFunctionFactory(),
        learning_rate=3e-3, batch_size=64, target_update_interval=50, gamma=0.9,
    ).create()
    _fit(algo, buffer, 2500)
    states = np.eye(6, dtype=np.float32)[:5]
    np.testing.assert_array_equal(algo.predict(states), [1, 1, 1, 1, 1])
    values = algo.predict_value(states, np.ones(5, dtype=np.int64))
    np.testing.assert_allclose(values, 0.9 ** np.array([4, 3, 2, 1, 0]), atol=0.1)
