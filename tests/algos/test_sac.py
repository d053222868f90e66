"""SAC: losses on a hand-built batch, target/temperature updates, learning,
config validation, copying between algorithms."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import offrl
import offrl.algos.sac as sac_module
from offrl.algos.sac import SACConfig
from offrl.dataset import MDPDataset, TransitionMiniBatch
from offrl.logging import NoopAdapterFactory
from offrl.models import SGDFactory, VectorEncoderFactory

SMALL = VectorEncoderFactory(hidden_units=[8])


def hand_batch() -> TransitionMiniBatch:
    """Four transitions: 3-dim observations, 2-dim actions in [-1, 1]."""
    obs = np.array([[0.1, 0.2, -0.3], [0.3, -0.1, 0.0], [-0.5, 0.4, 0.2], [0.0, 1.0, -1.0]], dtype=np.float32)
    nxt = np.array([[0.2, 0.1, 0.0], [0.0, 0.0, 0.5], [0.6, -0.3, 0.1], [1.0, 1.0, 1.0]], dtype=np.float32)
    return TransitionMiniBatch(
        observations=obs,
        actions=np.array([[0.5, -0.2], [-0.9, 0.1], [0.0, 0.7], [0.3, 0.3]], dtype=np.float32),
        rewards=np.array([[1.0], [0.0], [-1.0], [0.5]], dtype=np.float32),
        next_observations=nxt,
        next_actions=np.zeros((4, 2), dtype=np.float32),
        terminals=np.array([[0.0], [1.0], [0.0], [0.0]], dtype=np.float32),
        intervals=np.array([[1.0], [1.0], [2.0], [1.0]], dtype=np.float32),
    )


def fixed_sample(mean: torch.Tensor, logstd: torch.Tensor, n: int = 0):
    """A deterministic stand-in for ``squashed_sample``: ``u = mean + 0.5 std``
    (with ``n``: ``n`` samples at offsets spread over [-1, 1] std) and an
    arbitrary differentiable log-density ``-|u|^2``."""
    if n > 0:
        offsets = torch.linspace(-1.0, 1.0, n).view(1, n, 1)
        u = mean.unsqueeze(1) + offsets * logstd.exp().unsqueeze(1)
    else:
        u = mean + 0.5 * logstd.exp()
    return torch.tanh(u), -(u**2).sum(dim=-1)


def one_step_dataset(n: int = 512, seed: int = 0, constant: bool = True):
    """One-step episodes: reward -(a - 0.5)^2, logged actions uniform in [-1, 1]."""
    rng = np.random.default_rng(seed)
    obs = (np.zeros((n, 3)) if constant else rng.normal(size=(n, 3))).astype(np.float32)
    actions = rng.uniform(-1.0, 1.0, size=(n, 1)).astype(np.float32)
    rewards = -((actions[:, 0] - 0.5) ** 2)
    return MDPDataset(obs, actions, rewards, np.ones(n, dtype=np.float32)), obs


def _fit(algo, dataset, n_steps):
    return algo.fit(dataset, n_steps=n_steps, n_steps_per_epoch=n_steps, logger_adapter=NoopAdapterFactory(), show_progress=False)


def test_defaults_mirror_d3rlpy():
    config = SACConfig()
    assert (config.batch_size, config.gamma, config.tau, config.n_critics) == (256, 0.99, 0.005, 2)
    assert (config.actor_learning_rate, config.critic_learning_rate, config.temp_learning_rate) == (3e-4, 3e-4, 3e-4)
    assert config.initial_temperature == 1.0
    assert [f for f in config.get_params()][:5] == ["batch_size", "gamma", "observation_scaler", "action_scaler", "reward_scaler"]


def test_losses_match_hand_computation(monkeypatch):
    monkeypatch.setattr(sac_module, "squashed_sample", fixed_sample)
    offrl.seed(0)
    gamma, tau, temp0 = 0.9, 0.1, 0.5
    algo = SACConfig(
        actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, gamma=gamma, tau=tau, initial_temperature=temp0,
        temp_learning_rate=1e-2,
    ).create()
    algo.create_impl((3,), 2)
    nets = algo.modules
    with torch.no_grad():  # make the target critics differ from the critics
        for p in nets["targ_q_function"].parameters():
            p.add_(0.3 * torch.randn_like(p))
    policy_before = copy.deepcopy(nets["policy"])
    q_before = copy.deepcopy(nets["q_function"])
    targ_before = copy.deepcopy(nets["targ_q_function"])
    batch = hand_batch()
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    nxt = torch.from_numpy(batch.next_observations)
    r, d, k = (torch.from_numpy(a)[:, 0] for a in (batch.rewards, batch.terminals, batch.intervals))

    metrics = algo.update(batch)

    with torch.no_grad():
        # critic: y = r + gamma^k (1 - d) (min_j Q'_j(s', a') - alpha log pi(a'|s'))
        mean, logstd = policy_before(nxt)
        a_next, logp_next = fixed_sample(mean, logstd)
        next_q = torch.stack([targ_before.expected(nxt, a_next)[j, :, 0] for j in range(2)]).min(dim=0).values
        y = r + gamma**k * (1 - d) * (next_q - temp0 * logp_next)
        pred = q_before.expected(obs, act)[:, :, 0]
        critic_loss = sum(((pred[i] - y) ** 2).mean() for i in range(2))
        # actor (against the updated critics): alpha log pi(a|s) - min_i Q_i(s, a)
        mean, logstd = policy_before(obs)
        a_pi, logp = fixed_sample(mean, logstd)
        q_pi = nets["q_function"].expected(obs, a_pi)[:, :, 0].min(dim=0).values
        actor_loss = (temp0 * logp - q_pi).mean()
        temp_loss = -(np.log(temp0) * (logp - 2.0)).mean()
    assert metrics["critic_loss"] == pytest.approx(float(critic_loss), abs=1e-5)
    assert metrics["actor_loss"] == pytest.approx(float(actor_loss), abs=1e-5)
    assert metrics["temp_loss"] == pytest.approx(float(temp_loss), abs=1e-5)
    assert metrics["temp"] == pytest.approx(temp0, abs=1e-6)
    # Adam's first step moves log_temp by lr against the sign of its gradient -(mean log pi + H)
    step = float(nets["log_temp"].log_value.detach()) - np.log(temp0)
    assert step == pytest.approx(1e-2 * np.sign(float((logp - 2.0).mean())), abs=1e-6)
    # Polyak averaging: targ <- (1 - tau) targ + tau q
    for t_after, t_before, q_after in zip(nets["targ_q_function"].parameters(), targ_before.parameters(), nets["q_function"].parameters()):
        torch.testing.assert_close(t_after, (1 - tau) * t_before + tau * q_after, atol=1e-6, rtol=0)


def test_actor_step_leaves_critic_gradients_alone():
    offrl.seed(0)
    algo = SACConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL).create()
    algo.create_impl((3,), 2)
    q = algo.modules["q_function"]
    calls = []
    handles = [p.register_hook(lambda g, i=i: calls.append(i)) for i, p in enumerate(q.parameters())]
    algo.update(hand_batch())
    for h in handles:
        h.remove()
    n = len(list(q.parameters()))
    assert sorted(calls) == list(range(n)), "each critic parameter gets exactly one gradient (from the critic loss)"
    assert all(p.requires_grad for p in q.parameters())
    assert not any(p.requires_grad for p in algo.modules["targ_q_function"].parameters())


def test_fixed_temperature_when_learning_rate_is_zero():
    algo = SACConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL, temp_learning_rate=0.0, initial_temperature=0.3).create()
    algo.create_impl((3,), 2)
    for _ in range(3):
        metrics = algo.update(hand_batch())
    assert metrics["temp"] == pytest.approx(0.3, rel=1e-6) and metrics["temp_loss"] == 0.0
    assert set(metrics) == {"critic_loss", "actor_loss", "temp_loss", "temp"}


def test_predict_is_squashed_mean_and_samples_vary():
    offrl.seed(0)
    algo = SACConfig(actor_encoder_factory=SMALL, critic_encoder_factory=SMALL).create()
    algo.create_impl((3,), 2)
    x = hand_batch().observations
    with torch.no_grad():
        expected = torch.tanh(algo.modules["policy"](torch.from_numpy(x))[0]).numpy()
    np.testing.assert_allclose(algo.predict(x), expected, atol=1e-6)
    np.testing.assert_allclose(algo.policy_module()(torch.from_numpy(x)).detach().numpy(), expected, atol=1e-6)
    samples = np.stack([algo.sample_action(x) for _ in range(20)])
    assert np.abs(samples).max() <= 1.0 and samples.std(axis=0).min() > 1e-3
    with torch.no_grad():
        q = algo.modules["q_function"].expected(torch.from_numpy(x), torch.from_numpy(hand_batch().actions))
    np.testing.assert_allclose(algo.predict_value(x, hand_batch().actions), q.mean(dim=0)[:, 0].numpy(), atol=1e-6)


def test_learns_best_logged_action_on_one_step_problem():
    offrl.seed(0)
    dataset, obs = one_step_dataset()
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    algo = SACConfig(batch_size=64, actor_encoder_factory=encoder, critic_encoder_factory=encoder, initial_temperature=0.1).create()
    algo.build_with_dataset(dataset)
    before = np.abs(algo.predict(obs[:1]) - 0.5).max()
    _fit(algo, dataset, 800)
    after = np.abs(algo.predict(obs[:1]) - 0.5).max()
    assert after < 0.25 and after < before


@pytest.mark.slow
def test_learns_best_logged_action_with_random_observations():
    offrl.seed(0)
    dataset, obs = one_step_dataset(constant=False)
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    algo = SACConfig(batch_size=64, actor_encoder_factory=encoder, critic_encoder_factory=encoder).create()
    _fit(algo, dataset, 2000)
    assert np.abs(algo.predict(obs[:50]) - 0.5).max() < 0.25


@pytest.mark.parametrize(
    "field,value",
    [
        ("actor_learning_rate", 0.0),
        ("critic_learning_rate", -1e-3),
        ("temp_learning_rate", -1e-3),
        ("tau", 0.0),
        ("tau", 1.5),
        ("n_critics", 0),
        ("initial_temperature", 0.0),
        ("batch_size", 0),
        ("gamma", 1.5),
    ],
)
def test_bad_config_values(field, value):
    with pytest.raises(ValueError, match=field):
        SACConfig(**{field: value})


def test_bad_factory_types():
    with pytest.raises(TypeError, match="actor_optim_factory"):
        SACConfig(actor_optim_factory="adam")
    with pytest.raises(TypeError, match="critic_encoder_factory"):
        SACConfig(critic_encoder_factory=SGDFactory())
    with pytest.raises(TypeError, match="q_func_factory"):
        SACConfig(q_func_factory=SMALL)


def test_continuous_only():
    from offrl.constants import ActionSpace

    assert SACConfig().create().get_action_type() == ActionSpace.CONTINUOUS
