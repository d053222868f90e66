"""DiscreteSAC: the losses, gradients and temperature step of one update on
the hand-built discrete batch, the target critics' copies, the fixed and
the absent temperature, acting and importance sampling through the
policy's probabilities, learning on a chain, config validation, copying
policies and critics."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import offrl
from hand_losses import discrete_batch, huber
from offrl.algos import DiscreteBCConfig, DiscreteSAC, DiscreteSACConfig, DQNConfig
from offrl.algos.discrete_sac import ensemble_min_per_action, target_entropy
from offrl.dataset import MDPDataset
from offrl.models import IQNQFunctionFactory, MeanQFunctionFactory, QRQFunctionFactory, VectorEncoderFactory
from offrl.ope import importance_sampling

ENCODER = VectorEncoderFactory(hidden_units=[8])


def small_sac(perturb_target: bool = True, **changes) -> DiscreteSAC:
    """Built for 2-dim observations and 3 actions; the target critics made
    different from the critics so that mixing them up shows."""
    algo = DiscreteSACConfig(actor_encoder_factory=ENCODER, critic_encoder_factory=ENCODER, **changes).create()
    algo.create_impl((2,), 3)
    if perturb_target:
        with torch.no_grad():
            for p in algo.modules["targ_q_function"].parameters():
                p.add_(0.3 * torch.randn_like(p))
    return algo


def softmax_rows(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("n_critics", [1, 2])
def test_one_update_matches_hand_computation(n_critics):
    offrl.seed(0)
    gamma, temp0, temp_lr = 0.9, 0.4, 1e-2
    algo = small_sac(gamma=gamma, n_critics=n_critics, initial_temperature=temp0, temp_learning_rate=temp_lr, target_update_interval=5)
    nets = algo.modules
    policy_before, q_before, targ_before = (copy.deepcopy(nets[n]) for n in ("policy", "q_function", "targ_q_function"))
    batch = discrete_batch()
    obs, nxt = torch.from_numpy(batch.observations), torch.from_numpy(batch.next_observations)
    with torch.no_grad():
        pi_next = softmax_rows(policy_before(nxt).numpy().astype(np.float64))  # (B, A)
        pi_now = softmax_rows(policy_before(obs).numpy().astype(np.float64))
        q_now = q_before.expected(obs).numpy()  # (E, B, A)
        targ_next = targ_before.expected(nxt).numpy()

    # critic: y = r + gamma^k (1 - d) sum_a pi(a|s') (min_j Q'_j(s', a) - alpha log pi(a|s'))
    expected_critic, targets = 0.0, []
    for b in range(4):
        soft = sum(pi_next[b, a] * (min(targ_next[j, b, a] for j in range(n_critics)) - temp0 * math.log(pi_next[b, a])) for a in range(3))
        targets.append(batch.rewards[b, 0] + gamma ** batch.intervals[b, 0] * (1 - batch.terminals[b, 0]) * soft)
    for i in range(n_critics):
        for b in range(4):
            expected_critic += float(huber(np.array(q_now[i, b, batch.actions[b, 0]] - targets[b]))) / 4
    # temperature: -(alpha (sum_a pi log pi + 0.98 log 3)), alpha = exp(log_alpha); gradient wrt log_alpha is the same value
    gaps = [sum(pi_now[b, a] * math.log(pi_now[b, a]) for a in range(3)) + 0.98 * math.log(3) for b in range(4)]
    expected_temp_loss = -temp0 * float(np.mean(gaps))

    metrics = algo.update(batch)

    assert set(metrics) == {"critic_loss", "actor_loss", "temp_loss", "temp"}
    assert metrics["critic_loss"] == pytest.approx(expected_critic, rel=1e-5, abs=1e-6)
    assert metrics["temp_loss"] == pytest.approx(expected_temp_loss, rel=1e-5, abs=1e-6)
    # Adam's first step moves log_alpha by lr against the sign of its gradient
    new_temp = temp0 * math.exp(-temp_lr * np.sign(expected_temp_loss))
    assert metrics["temp"] == pytest.approx(new_temp, rel=1e-5)
    assert float(nets["log_temp"]().detach()) == pytest.approx(new_temp, rel=1e-5)
    # actor: the updated temperature and the updated critics (minimum over the ensemble)
    with torch.no_grad():
        q_after = nets["q_function"].expected(obs).numpy()
    expected_actor = float(np.mean([
        sum(pi_now[b, a] * (new_temp * math.log(pi_now[b, a]) - min(q_after[i, b, a] for i in range(n_critics))) for a in range(3))
        for b in range(4)
    ]))
    assert metrics["actor_loss"] == pytest.approx(expected_actor, rel=1e-5, abs=1e-6)
    # the policy's gradient is that of the actor loss alone (no gradient into the critics)
    policy_copy = copy.deepcopy(policy_before)
    log_pi = torch.log_softmax(policy_copy(obs), dim=-1)
    q_min = torch.from_numpy(q_after.min(axis=0))
    loss = (log_pi.exp() * (new_temp * log_pi - q_min)).sum(dim=1).mean()
    for grad, p in zip(torch.autograd.grad(loss, list(policy_copy.parameters())), nets["policy"].parameters()):
        torch.testing.assert_close(p.grad, grad, rtol=1e-5, atol=1e-7)
    # step 0 is a multiple of target_update_interval: the targets are the critics now
    for a, b in zip(nets["targ_q_function"].parameters(), nets["q_function"].parameters()):
        assert torch.equal(a, b) and not a.requires_grad


def test_target_critics_copied_every_interval_steps():
    offrl.seed(0)
    algo = small_sac(target_update_interval=3, critic_learning_rate=1e-2)
    q, targ = algo.modules["q_function"], algo.modules["targ_q_function"]
    same = []
    for _ in range(7):
        algo.update(discrete_batch())
        same.append(all(torch.equal(a, b) for a, b in zip(q.parameters(), targ.parameters())))
    assert same == [True, False, False, True, False, False, True]  # grad_step 0, 3, 6


def test_fixed_temperature_stays():
    offrl.seed(0)
    algo = small_sac(initial_temperature=0.3, temp_learning_rate=0.0)
    assert "temp_optim" not in algo.optimizers
    for _ in range(3):
        metrics = algo.update(discrete_batch())
        assert metrics["temp"] == pytest.approx(0.3, rel=1e-6) and metrics["temp_loss"] == 0.0


def test_zero_temperature_drops_the_entropy_terms():
    """initial_temperature=0: no temperature parameter; the target is the
    policy-weighted minimum of the target critics and the actor loss
    ``-sum_a pi(a|s) min_i Q_i(s, a)``."""
    offrl.seed(0)
    algo = small_sac(initial_temperature=0.0, temp_learning_rate=0.0, gamma=0.9)
    assert "log_temp" not in algo.modules
    batch = discrete_batch()
    obs, nxt = torch.from_numpy(batch.observations), torch.from_numpy(batch.next_observations)
    with torch.no_grad():
        pi_next = torch.softmax(algo.modules["policy"](nxt), dim=-1)
        next_value = (pi_next * algo.modules["targ_q_function"].expected(nxt).min(dim=0).values).sum(dim=1)
        y = torch.from_numpy(batch.rewards[:, 0]) + 0.9 ** torch.from_numpy(batch.intervals[:, 0]) * (1 - torch.from_numpy(batch.terminals[:, 0])) * next_value
        pred = algo.modules["q_function"].expected(obs).gather(2, torch.from_numpy(batch.actions).view(1, 4, 1).expand(2, 4, 1))[..., 0]
        expected = sum(float(huber((pred[i] - y).numpy()).mean()) for i in range(2))
        pi_now = torch.softmax(algo.modules["policy"](obs), dim=-1)
    metrics = algo.update(batch)
    assert metrics["critic_loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert metrics["temp"] == 0.0
    with torch.no_grad():
        actor = -(pi_now * algo.modules["q_function"].expected(obs).min(dim=0).values).sum(dim=1).mean()
    assert metrics["actor_loss"] == pytest.approx(float(actor), rel=1e-5, abs=1e-6)


def test_target_entropy_is_98_percent_of_uniform():
    assert target_entropy(3) == pytest.approx(0.98 * math.log(3))
    assert target_entropy(1) == 0.0


def test_ensemble_min_per_action_against_a_loop():
    rng = np.random.default_rng(0)
    dist = torch.from_numpy(rng.normal(size=(3, 4, 5, 6)).astype(np.float32))
    out = ensemble_min_per_action(dist).numpy()
    for b in range(4):
        for a in range(5):
            member = int(np.argmin([dist[e, b, a].mean() for e in range(3)]))
            np.testing.assert_array_equal(out[b, a], dist[member, b, a].numpy())
    scalar = dist[..., :1]
    np.testing.assert_array_equal(ensemble_min_per_action(scalar).numpy(), scalar.numpy().min(axis=0))


@pytest.mark.parametrize("factory", [QRQFunctionFactory(n_quantiles=4), IQNQFunctionFactory(n_quantiles=4, n_greedy_quantiles=4, embed_size=8)])
def test_quantile_critics_train(factory):
    offrl.seed(0)
    algo = small_sac(q_func_factory=factory, critic_learning_rate=1e-2)
    first = algo.update(discrete_batch())["critic_loss"]
    for _ in range(30):
        last = algo.update(discrete_batch())["critic_loss"]
    assert np.isfinite(last) and last < first


def test_acting_follows_the_policy_probabilities():
    offrl.seed(0)
    algo = small_sac(perturb_target=False)
    with torch.no_grad():
        algo.modules["policy"].fc.weight.zero_()
        algo.modules["policy"].fc.bias.copy_(torch.tensor([0.0, math.log(3.0), math.log(6.0)]))
    x = np.zeros((4000, 2), dtype=np.float32)
    probs = algo.action_probabilities(x[:2])
    np.testing.assert_allclose(probs, [[0.1, 0.3, 0.6]] * 2, rtol=1e-5)
    assert algo.has_stochastic_policy
    np.testing.assert_array_equal(algo.predict(x[:3]), [2, 2, 2])
    counts = np.bincount(algo.sample_action(x), minlength=3) / len(x)
    np.testing.assert_allclose(counts, [0.1, 0.3, 0.6], atol=0.03)
    with torch.no_grad():
        np.testing.assert_array_equal(algo.policy_module()(torch.from_numpy(x[:3])).numpy(), [2, 2, 2])
    values = algo.predict_value(x[:2], np.array([0, 2]))
    with torch.no_grad():
        q = algo.modules["q_function"].expected(torch.from_numpy(x[:2])).mean(dim=0).numpy()
    np.testing.assert_allclose(values, [q[0, 0], q[1, 2]], rtol=1e-6)


def chain_dataset(n_episodes: int = 200, seed: int = 0) -> MDPDataset:
    """Logged uniform random walk on a 5-state chain (one-hot states);
    action 1 moves right, 0 left (a wall at 0); reaching state 4 pays 1 and ends."""
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


def test_importance_sampling_uses_the_policy_probabilities():
    """A uniform DiscreteSAC policy on data logged by a uniform policy: every
    ratio is 1, so IS is the mean discounted return; a skewed policy is
    evaluated through the same probabilities as a callable giving them."""
    offrl.seed(0)
    dataset = chain_dataset(n_episodes=30)
    algo = DiscreteSACConfig(actor_encoder_factory=ENCODER, critic_encoder_factory=ENCODER, gamma=0.9).create()
    algo.build_with_dataset(dataset)
    with torch.no_grad():
        algo.modules["policy"].fc.weight.zero_()
        algo.modules["policy"].fc.bias.zero_()
    mu = np.full(sum(len(ep.actions) for ep in dataset.episodes), 0.5)
    returns = [sum(0.9**t * r for t, r in enumerate(ep.rewards[:, 0])) for ep in dataset.episodes]
    uniform = importance_sampling(algo, dataset, behaviour_probabilities=mu, n_bootstrap=10)
    assert uniform.value == pytest.approx(float(np.mean(returns)), rel=1e-6)
    with torch.no_grad():
        algo.modules["policy"].fc.bias.copy_(torch.tensor([0.0, 1.0]))
    skewed = importance_sampling(algo, dataset, behaviour_probabilities=mu, n_bootstrap=10)
    as_callable = importance_sampling(algo.action_probabilities, dataset, behaviour_probabilities=mu, n_bootstrap=10, gamma=0.9)
    assert skewed.value == pytest.approx(as_callable.value, rel=1e-9)
    assert skewed.value > uniform.value  # moving right reaches the reward


@pytest.mark.slow
def test_learns_to_move_right_on_a_chain(fit_quietly):
    """With a small fixed temperature (the learned one aims at 98 % of the
    uniform entropy, which for two actions keeps the policy near 50/50)."""
    offrl.seed(0)
    encoder = VectorEncoderFactory(hidden_units=[32])
    algo = DiscreteSACConfig(
        actor_encoder_factory=encoder, critic_encoder_factory=encoder, actor_learning_rate=3e-3, critic_learning_rate=3e-3,
        temp_learning_rate=0.0, initial_temperature=0.01, batch_size=64, gamma=0.9, target_update_interval=50,
    ).create()
    fit_quietly(algo, chain_dataset(), 1500)
    states = np.eye(5, dtype=np.float32)[:4]
    np.testing.assert_array_equal(algo.predict(states), [1, 1, 1, 1])
    assert (algo.action_probabilities(states)[:, 1] > 0.7).all()
    values = algo.predict_value(states, np.ones(4, dtype=np.int64))
    assert np.all(np.diff(values) > 0), values


def test_defaults_mirror_d3rlpy():
    cfg = DiscreteSACConfig()
    assert (cfg.batch_size, cfg.gamma, cfg.n_critics, cfg.initial_temperature, cfg.target_update_interval) == (64, 0.99, 2, 1.0, 8000)
    assert (cfg.actor_learning_rate, cfg.critic_learning_rate, cfg.temp_learning_rate) == (3e-4, 3e-4, 3e-4)
    assert isinstance(cfg.q_func_factory, MeanQFunctionFactory)


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"initial_temperature": -1.0}, "initial_temperature"),
        ({"initial_temperature": 0.0}, "temp_learning_rate"),  # nothing to learn
        ({"temp_learning_rate": -1e-3}, "temp_learning_rate"),
        ({"target_update_interval": 0}, "target_update_interval"),
        ({"n_critics": 0}, "n_critics"),
        ({"actor_learning_rate": 0.0}, "actor_learning_rate"),
    ],
)
def test_bad_config_values(changes, match):
    with pytest.raises(ValueError, match=match):
        DiscreteSACConfig(**changes)


def test_rejects_continuous_data(dataset_factory):
    with pytest.raises(ValueError, match="discrete"):
        DiscreteSACConfig(batch_size=8).create().build_with_dataset(dataset_factory("vector", discrete=False))


def test_copy_policy_from_discrete_bc_and_critics_from_dqn():
    offrl.seed(0)
    sac = small_sac(perturb_target=False)
    bc = DiscreteBCConfig(encoder_factory=ENCODER).create()
    bc.create_impl((2,), 3)
    dqn = DQNConfig(encoder_factory=ENCODER, n_critics=2).create()
    dqn.create_impl((2,), 3)
    x = discrete_batch().observations
    sac.copy_policy_from(bc)
    np.testing.assert_allclose(sac.action_probabilities(x), bc.action_probabilities(x), rtol=1e-6)
    sac.copy_q_function_from(dqn)
    np.testing.assert_array_equal(sac.predict_value(x, np.array([0, 1, 2, 0])), dqn.predict_value(x, np.array([0, 1, 2, 0])))
