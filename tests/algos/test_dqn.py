"""DQN / DoubleDQN: loss maths on a hand-built batch, target network, learning."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import offrl
from hand_losses import discrete_batch, huber, quantile_huber_per_sample
from offrl.algos import DoubleDQNConfig, DQNConfig
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.models import QRQFunctionFactory, VectorEncoderFactory


@pytest.mark.parametrize("double", [False, True])
def test_loss_matches_hand_computation(double):
    offrl.seed(0)
    cls = DoubleDQNConfig if double else DQNConfig
    algo = cls(encoder_factory=VectorEncoderFactory(hidden_units=[8]), gamma=0.9).create()
    algo.create_impl((2,), 3)
    q, targ = algo.modules["q_function"], algo.modules["targ_q_function"]
    # make the target network differ from the online one
    with torch.no_grad():
        for p in targ.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = discrete_batch()
    with torch.no_grad():
        q_now = q.expected(torch.from_numpy(batch.observations))[0].numpy()
        q_next_online = q.expected(torch.from_numpy(batch.next_observations))[0].numpy()
        q_next_target = targ.expected(torch.from_numpy(batch.next_observations))[0].numpy()
    chooser = q_next_online if double else q_next_target
    a_star = chooser.argmax(axis=1)
    next_value = q_next_target[np.arange(4), a_star]
    y = batch.rewards[:, 0] + 0.9 ** batch.intervals[:, 0] * (1 - batch.terminals[:, 0]) * next_value
    pred = q_now[np.arange(4), batch.actions[:, 0]]
    expected = huber(pred - y).mean()
    loss = algo.update(batch)["loss"]
    assert loss == pytest.approx(float(expected), rel=1e-5, abs=1e-6)


def test_target_network_synchronises_on_interval():
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), target_update_interval=3, learning_rate=1e-2).create()
    algo.create_impl((2,), 3)
    q, targ = algo.modules["q_function"], algo.modules["targ_q_function"]

    def same() -> bool:
        return all(torch.equal(a, b) for a, b in zip(q.parameters(), targ.parameters()))

    # d3rlpy 2.8.1's schedule: copied after the updates of steps 0, 3, 6, ...
    assert same()
    algo.update(discrete_batch())  # step 0: copied
    assert same()
    algo.update(discrete_batch())
    assert not same()
    algo.update(discrete_batch())
    assert not same()
    algo.update(discrete_batch())  # step 3: copied
    assert same()
    assert all(not p.requires_grad for p in targ.parameters())


def test_quantile_loss_matches_hand_computation():
    offrl.seed(1)
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), q_func_factory=QRQFunctionFactory(n_quantiles=4), gamma=0.5).create()
    algo.create_impl((2,), 3)
    q = algo.modules["q_function"]
    batch = discrete_batch()
    with torch.no_grad():
        dist = q.distribution(torch.from_numpy(batch.observations))[0].numpy()  # (B, A, N)
        nxt = q.distribution(torch.from_numpy(batch.next_observations))[0].numpy()
    a_star = nxt.mean(axis=2).argmax(axis=1)
    target = batch.rewards + 0.5 ** batch.intervals * (1 - batch.terminals) * nxt[np.arange(4), a_star]  # (B, N)
    pred = dist[np.arange(4), batch.actions[:, 0]]  # (B, N)
    total = quantile_huber_per_sample(target, pred).sum()
    assert algo.update(batch)["loss"] == pytest.approx(total / 4, abs=1e-5)


def chain_dataset(n_episodes: int = 200, seed: int = 0) -> MDPDataset:
    """Logged random walk on a 5-state chain; reaching state 4 pays 1 and ends."""
    rng = np.random.default_rng(seed)
    obs, act, rew, term = [], [], [], []
    for _ in range(n_episodes):
        s = int(rng.integers(0, 4))
        for t in range(12):
            a = int(rng.integers(2))
            ns = min(s + 1, 4) if a == 1 else max(s - 1, 0)
            o = np.zeros(5, dtype=np.float32)
            o[s] = 1.0
            obs.append(o)
            act.append(a)
            rew.append(1.0 if ns == 4 else 0.0)
            term.append(1.0 if ns == 4 else 0.0)
            s = ns
            if ns == 4:
                break
    return MDPDataset(np.array(obs), np.array(act), np.array(rew), np.array(term), action_size=2)


@pytest.mark.parametrize("cls", [DQNConfig, DoubleDQNConfig])
def test_learns_optimal_action_on_chain(cls):
    offrl.seed(0)
    dataset = chain_dataset()
    algo = cls(encoder_factory=VectorEncoderFactory(hidden_units=[32]), learning_rate=3e-3, batch_size=64, target_update_interval=50, gamma=0.9).create()
    algo.fit(dataset, n_steps=1500, n_steps_per_epoch=1500, logger_adapter=NoopAdapterFactory(), show_progress=False)
    states = np.eye(5, dtype=np.float32)[:4]
    np.testing.assert_array_equal(algo.predict(states), [1, 1, 1, 1])
    values = algo.predict_value(states, np.ones(4, dtype=np.int64))
    # Q(s, right) = gamma^(steps to the goal - 1)
    np.testing.assert_allclose(values, 0.9 ** np.array([3, 2, 1, 0]), atol=0.1)


def test_rejects_continuous_data():
    dataset = MDPDataset(np.zeros((4, 2)), np.random.rand(4, 2), np.zeros(4), [0, 0, 0, 1])
    with pytest.raises(ValueError, match="discrete actions"):
        DQNConfig().create().fit(dataset, n_steps=1, logger_adapter=NoopAdapterFactory(), show_progress=False)


def test_predict_value_checks_actions():
    algo = DQNConfig().create()
    algo.create_impl((2,), 3)
    x = np.zeros((2, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        algo.predict_value(x, np.array([0, 3]))
    with pytest.raises(ValueError, match="shape"):
        algo.predict_value(x, np.zeros((2, 2)))


@pytest.mark.parametrize("name", ["DQNConfig", "DoubleDQNConfig", "NFQConfig"])
def test_single_critic_path_takes_the_generic_paths_steps(name):
    """One mean critic without importance weights trains on ``(B, A)``
    values (``DQN._update_single``); the ensemble/distribution path must
    give the same losses and weights step after step."""
    import copy as copy_module

    config = getattr(offrl.algos, name)(encoder_factory=VectorEncoderFactory(hidden_units=[8]), learning_rate=1e-2,
                                         gamma=0.9, **({} if name == "NFQConfig" else {"target_update_interval": 2}))
    offrl.seed(0)
    fast = config.create()
    fast.create_impl((2,), 3)
    generic = copy_module.deepcopy(fast)
    generic._single_mean_q = False
    calls = {"single": 0}
    original = type(fast)._update_single

    def counting(self, batch, grad_step):
        calls["single"] += 1
        return original(self, batch, grad_step)

    fast._update_single = counting.__get__(fast)
    for step in range(5):
        batch = discrete_batch(last_reward=float(step))
        assert fast.update(batch)["loss"] == pytest.approx(generic.update(batch)["loss"], rel=1e-5, abs=1e-6), step
    assert calls["single"] == 5
    for a, b in zip(fast.modules["q_function"].parameters(), generic.modules["q_function"].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_single_values_need_one_critic():
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), n_critics=2).create()
    algo.create_impl((2,), 3)
    with pytest.raises(ValueError, match="n_critics == 1"):
        algo.modules["q_function"].single(torch.zeros(4, 2))
