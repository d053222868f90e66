"""NFQ: the loss of one update on the hand-built discrete batch (the target
bootstraps from the online network), the absence of a target network, the
same trajectory as DQN copying its target every step (d3rlpy's NFQ),
learning on a chain, config validation and copying to and from DQN."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import offrl
from hand_losses import discrete_batch, huber
from offrl.algos import NFQ, DQNConfig, NFQConfig
from offrl.dataset import MDPDataset
from offrl.models import MeanQFunctionFactory, QRQFunctionFactory, VectorEncoderFactory


def small_nfq(**changes) -> NFQ:
    algo = NFQConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), **changes).create()
    algo.create_impl((2,), 3)
    return algo


@pytest.mark.parametrize("n_critics", [1, 2])
def test_loss_and_gradient_match_hand_computation(n_critics):
    """``mean_b huber(Q(s, a) - y)`` per critic, summed, with ``y = r + gamma^k (1 - d)
    min_j Q_j(s', a*)``, ``a* = argmax_a mean_j Q_j(s', a)``, all from the
    online network before the step; the gradient is that loss's."""
    offrl.seed(0)
    algo = small_nfq(gamma=0.9, n_critics=n_critics)
    q = algo.modules["q_function"]
    before = copy.deepcopy(q)
    batch = discrete_batch()
    with torch.no_grad():
        now = before.expected(torch.from_numpy(batch.observations)).numpy()  # (E, B, A)
        nxt = before.expected(torch.from_numpy(batch.next_observations)).numpy()
    expected = 0.0
    targets = np.zeros(4, dtype=np.float32)
    for b in range(4):
        a_star = int(np.argmax(nxt[:, b].mean(axis=0)))
        next_value = min(nxt[j, b, a_star] for j in range(n_critics))
        targets[b] = batch.rewards[b, 0] + 0.9 ** batch.intervals[b, 0] * (1 - batch.terminals[b, 0]) * next_value
    for i in range(n_critics):
        for b in range(4):
            expected += float(huber(np.array(now[i, b, batch.actions[b, 0]] - targets[b]))) / 4
    pred = before.expected(torch.from_numpy(batch.observations)).gather(2, torch.from_numpy(batch.actions).view(1, 4, 1).expand(n_critics, 4, 1))[..., 0]
    torch_loss = torch.nn.functional.smooth_l1_loss(pred, torch.from_numpy(targets).expand(n_critics, 4), reduction="none").mean(dim=1).sum()
    grads = torch.autograd.grad(torch_loss, list(before.parameters()))

    loss = algo.update(batch)["loss"]

    assert loss == pytest.approx(expected, rel=1e-5, abs=1e-6)
    for grad, p in zip(grads, q.parameters()):
        torch.testing.assert_close(p.grad, grad, rtol=1e-5, atol=1e-7)


def test_has_no_target_network_and_saves_none(tmp_path):
    algo = small_nfq()
    assert list(algo.modules) == ["q_function"]
    algo.update(discrete_batch())
    algo.save(tmp_path / "nfq.d3")
    loaded = offrl.load_learnable(tmp_path / "nfq.d3")
    assert isinstance(loaded, NFQ) and list(loaded.get_state()["modules"]) == ["q_function"]
    x = discrete_batch().observations
    np.testing.assert_array_equal(loaded.predict_value(x, np.array([0, 1, 2, 0])), algo.predict_value(x, np.array([0, 1, 2, 0])))


@pytest.mark.parametrize("factory", [MeanQFunctionFactory(), QRQFunctionFactory(n_quantiles=4)])
def test_same_steps_as_dqn_copying_its_target_every_step(factory):
    """d3rlpy 2.8.1 builds NFQ as DQN whose target network is re-synchronised
    after every step; the same weights give the same losses step after step."""
    offrl.seed(0)
    nfq = small_nfq(learning_rate=1e-2, q_func_factory=factory)
    dqn = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), learning_rate=1e-2, q_func_factory=factory,
                    target_update_interval=1).create()
    dqn.create_impl((2,), 3)
    dqn.copy_q_function_from(nfq)
    for step in range(5):
        batch = discrete_batch(last_reward=float(step))
        assert nfq.update(batch)["loss"] == pytest.approx(dqn.update(batch)["loss"], rel=1e-6, abs=1e-7), step
    for a, b in zip(nfq.modules["q_function"].parameters(), dqn.modules["q_function"].parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def test_prioritized_batches_give_td_errors():
    algo = small_nfq()
    weights = np.array([[1.0], [0.5], [2.0], [0.0]], dtype=np.float32)
    result = algo.training_step(discrete_batch(weights=weights))
    assert result.td_errors is not None and tuple(result.td_errors.shape) == (4,)


def test_defaults_mirror_d3rlpy():
    cfg = NFQConfig()
    assert (cfg.batch_size, cfg.gamma, cfg.learning_rate, cfg.n_critics) == (32, 0.99, 6.25e-5, 1)
    assert isinstance(cfg.q_func_factory, MeanQFunctionFactory)
    assert not hasattr(cfg, "target_update_interval")


@pytest.mark.parametrize("field,value", [("learning_rate", 0.0), ("n_critics", 0), ("batch_size", -1), ("gamma", 1.5)])
def test_bad_config_values(field, value):
    with pytest.raises(ValueError, match=field):
        NFQConfig(**{field: value})


def test_rejects_continuous_data(dataset_factory):
    with pytest.raises(ValueError, match="discrete"):
        NFQConfig(batch_size=8).create().build_with_dataset(dataset_factory("vector", discrete=False))


def test_copy_q_function_to_and_from_dqn():
    offrl.seed(0)
    nfq = small_nfq()
    dqn = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    dqn.create_impl((2,), 3)
    dqn.copy_q_function_from(nfq)  # into both the online and the target network
    for name in ("q_function", "targ_q_function"):
        for a, b in zip(dqn.modules[name].parameters(), nfq.modules["q_function"].parameters()):
            assert torch.equal(a, b)
    dqn.update(discrete_batch())
    nfq.copy_q_function_from(dqn)
    x = discrete_batch().observations
    np.testing.assert_array_equal(nfq.predict(x), dqn.predict(x))


def chain_dataset(n_episodes: int = 200, seed: int = 0) -> MDPDataset:
    """Logged random walk on a 5-state chain (one-hot states); action 1 moves
    right, 0 left (a wall at 0); reaching state 4 pays 1 and ends."""
    rng = np.random.default_rng(seed)
    obs, act, rew, term = [], [], [], []
    for _ in range(n_episodes):
        s = int(rng.integers(0, 4))
        for _ in range(12):
            a = int(rng.integers(2))
            ns = min(s + 1, 4) if a == 1 else max(s - 1, 0)
            obs.append(np.eye(5, dtype=np.float32)[s])
            act.append(a)
            rew.append(float(ns == 4))
            term.append(float(ns == 4))
            s = ns
            if ns == 4:
                break
    return MDPDataset(np.array(obs), np.array(act), np.array(rew, dtype=np.float32), np.array(term, dtype=np.float32), action_size=2)


@pytest.mark.slow
def test_learns_to_move_right_on_a_chain(fit_quietly):
    """Q(s, right) converges to gamma^(steps to the goal - 1)."""
    offrl.seed(0)
    algo = NFQConfig(encoder_factory=VectorEncoderFactory(hidden_units=[32]), learning_rate=3e-3, batch_size=64, gamma=0.9).create()
    fit_quietly(algo, chain_dataset(), 1500)
    states = np.eye(5, dtype=np.float32)[:4]
    np.testing.assert_array_equal(algo.predict(states), [1, 1, 1, 1])
    np.testing.assert_allclose(algo.predict_value(states, np.ones(4, dtype=np.int64)), 0.9 ** np.array([3, 2, 1, 0]), atol=0.1)
