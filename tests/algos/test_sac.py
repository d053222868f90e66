"""SAC: losses on a hand-built batch, target/temperature updates, learning,
config validation, copying between algorithms."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import offrl
import offrl.algos.sac as sac_module
from hypothesis import given, settings
from hypothesis import strategies as st
from offrl.models import plain_mlp
from offrl.algos.sac import SACConfig
from offrl.models import SGDFactory, VectorEncoderFactory


@pytest.fixture(autouse=True)
def _restore_switch():
    yield
    plain_mlp.plain_backward_enabled(True)


def test_defaults_mirror_d3rlpy():
    config = SACConfig()
    assert (config.batch_size, config.gamma, config.tau, config.n_critics) == (256, 0.99, 0.005, 2)
    assert (config.actor_learning_rate, config.critic_learning_rate, config.temp_learning_rate) == (3e-4, 3e-4, 3e-4)
    assert config.initial_temperature == 1.0
    assert [f for f in config.get_params()][:5] == ["batch_size", "gamma", "observation_scaler", "action_scaler", "reward_scaler"]


def test_losses_match_hand_computation(monkeypatch, small_encoder, hand_batch, fixed_sample, batch_tensors, build_algo):
    monkeypatch.setattr(sac_module, "squashed_sample", fixed_sample)
    # autograd's step (the written-out one draws its own noise; it equals this step: the tests at the end)
    plain_mlp.plain_backward_enabled(False)
    offrl.seed(0)
    gamma, tau, temp0 = 0.9, 0.1, 0.5
    config = SACConfig(
        actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, gamma=gamma, tau=tau, initial_temperature=temp0,
        temp_learning_rate=1e-2,
    )
    # the target critics differ from the critics
    algo = build_algo(config, perturb=["targ_q_function"], scale=0.3)
    nets = algo.modules
    policy_before = copy.deepcopy(nets["policy"])
    q_before = copy.deepcopy(nets["q_function"])
    targ_before = copy.deepcopy(nets["targ_q_function"])
    batch = hand_batch()
    obs, act, nxt, r, d, k = batch_tensors(batch)

    metrics = algo.update(batch)

    with torch.no_grad():
        # critic: y = r + gamma^k (1 - d) (min_j Q'_j(s', a') - alpha log pi(a'|s'))
        mean, logstd = policy_before(nxt)
        a_next, logp_next = fixed_sample(mean, logstd)
        next_q = torch.stack([targ_before.expected(nxt, a_next)[j, :, 0] for j in range(2)]).min(dim=0).values
        y = r + gamma**k * (1 - d) * (next_q - temp0 * logp_next)
        pred = q_before.expected(obs, act)[:, :, 0]
        critic_loss = sum(((pred[i] - y) ** 2).mean() for i in range(2))
        # temperature first (d3rlpy 2.8.1's maths and order): -alpha (log pi(a|s) + H), H = -2
        mean, logstd = policy_before(obs)
        a_pi, logp = fixed_sample(mean, logstd)
        temp_loss = -(temp0 * (logp - 2.0)).mean()
        # Adam's first step moves log_temp by lr against the sign of its gradient -alpha (mean log pi + H)
        temp1 = temp0 * np.exp(1e-2 * np.sign(float((logp - 2.0).mean())))
        # actor (against the updated critics, with the updated temperature): alpha log pi(a|s) - min_i Q_i(s, a)
        q_pi = nets["q_function"].expected(obs, a_pi)[:, :, 0].min(dim=0).values
        actor_loss = (temp1 * logp - q_pi).mean()
    assert metrics["critic_loss"] == pytest.approx(float(critic_loss), rel=1e-5, abs=1e-5)
    assert metrics["actor_loss"] == pytest.approx(float(actor_loss), rel=1e-5, abs=1e-5)
    assert metrics["temp_loss"] == pytest.approx(float(temp_loss), rel=1e-5, abs=1e-5)
    assert metrics["temp"] == pytest.approx(temp1, rel=1e-5)
    assert float(nets["log_temp"]().detach()) == pytest.approx(temp1, rel=1e-5)
    # Polyak averaging: targ <- (1 - tau) targ + tau q
    for t_after, t_before, q_after in zip(nets["targ_q_function"].parameters(), targ_before.parameters(), nets["q_function"].parameters()):
        torch.testing.assert_close(t_after, (1 - tau) * t_before + tau * q_after, atol=1e-6, rtol=0)


def test_actor_step_leaves_critic_gradients_alone(small_encoder, hand_batch, build_algo):
    offrl.seed(0)
    algo = build_algo(SACConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
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


def test_fixed_temperature_when_learning_rate_is_zero(small_encoder, hand_batch, build_algo):
    algo = build_algo(SACConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, temp_learning_rate=0.0, initial_temperature=0.3))
    for _ in range(3):
        metrics = algo.update(hand_batch())
    assert metrics["temp"] == pytest.approx(0.3, rel=1e-6) and metrics["temp_loss"] == 0.0
    assert set(metrics) == {"critic_loss", "actor_loss", "temp_loss", "temp"}


def test_predict_is_squashed_mean_and_samples_vary(small_encoder, hand_batch, build_algo):
    offrl.seed(0)
    algo = build_algo(SACConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
    x = hand_batch().observations
    with torch.no_grad():
        expected = torch.tanh(algo.modules["policy"](torch.from_numpy(x))[0]).numpy()
    np.testing.assert_allclose(algo.predict(x), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(algo.policy_module()(torch.from_numpy(x)).detach().numpy(), expected, rtol=1e-5, atol=1e-6)
    samples = np.stack([algo.sample_action(x) for _ in range(20)])
    assert np.abs(samples).max() <= 1.0 and samples.std(axis=0).min() > 1e-3
    with torch.no_grad():
        q = algo.modules["q_function"].expected(torch.from_numpy(x), torch.from_numpy(hand_batch().actions))
    np.testing.assert_allclose(algo.predict_value(x, hand_batch().actions), q.mean(dim=0)[:, 0].numpy(), rtol=1e-5, atol=1e-6)


def test_learns_best_logged_action_on_one_step_problem(one_step_dataset, fit_quietly):
    offrl.seed(0)
    dataset, obs = one_step_dataset()
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    algo = SACConfig(batch_size=64, actor_encoder_factory=encoder, critic_encoder_factory=encoder, initial_temperature=0.1).create()
    algo.build_with_dataset(dataset)
    before = np.abs(algo.predict(obs[:1]) - 0.5).max()
    fit_quietly(algo, dataset, 800)
    after = np.abs(algo.predict(obs[:1]) - 0.5).max()
    assert after < 0.25 and after < before


@pytest.mark.slow
def test_learns_best_logged_action_with_random_observations(one_step_dataset, fit_quietly):
    offrl.seed(0)
    dataset, obs = one_step_dataset(constant=False)
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    algo = SACConfig(batch_size=64, actor_encoder_factory=encoder, critic_encoder_factory=encoder).create()
    fit_quietly(algo, dataset, 2000)
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


def test_bad_factory_types(small_encoder):
    with pytest.raises(TypeError, match="actor_optim_factory"):
        SACConfig(actor_optim_factory="adam")
    with pytest.raises(TypeError, match="critic_encoder_factory"):
        SACConfig(critic_encoder_factory=SGDFactory())
    with pytest.raises(TypeError, match="q_func_factory"):
        SACConfig(q_func_factory=small_encoder)


def test_continuous_only():
    from offrl.constants import ActionSpace

    assert SACConfig().create().get_action_type() == ActionSpace.CONTINUOUS


# ---------------------------------------- the temperature step written out (SAC, CQL, CalQL, DiscreteSAC)
def _temperature_pair(initial: float):
    from offrl.models.parameters import ScalarParameter

    pair = []
    for _ in range(2):
        log_temp = ScalarParameter(initial)
        # Adam's eps above float rounding: with 1e-8 a gradient near zero, summed in another order, moves the
        # parameter by up to the learning rate either way on a first step (see tests/algos/test_plain_step.py)
        pair.append((log_temp, offrl.optimizers.AdamFactory(eps=1e-4).create([("log_temp", log_temp)], lr=0.05)))
    return pair


@settings(max_examples=25, deadline=None)
@given(initial=st.floats(0.01, 10.0), seed=st.integers(0, 2**16), n=st.integers(1, 64))
def test_the_temperature_step_written_out_equals_autograd(initial, seed, n):
    from offrl.algos._common import temperature_step

    (plain, plain_optim), (autograd, autograd_optim) = _temperature_pair(initial)
    rng = np.random.default_rng(seed)
    tolerance, largest = 0.0, 0.0
    for _ in range(4):
        gap = torch.as_tensor(rng.normal(scale=3.0, size=(n, 1)), dtype=torch.float32)
        a = temperature_step(plain, plain_optim, gap)
        plain_mlp.plain_backward_enabled(False)
        try:
            b = temperature_step(autograd, autograd_optim, gap)
        finally:
            plain_mlp.plain_backward_enabled(True)
        # the loss is a mean of alpha * gap over rows of both signs: float32's rounding relative to its terms' scale
        scale = float((autograd.log_value.detach().exp() * gap.abs()).mean()) * 1e-6 + 1e-7
        torch.testing.assert_close(a, b, rtol=1e-6, atol=scale)
        torch.testing.assert_close(plain.log_value.grad, autograd.log_value.grad, rtol=1e-5, atol=scale)
        tolerance, largest = max(tolerance, scale), max(largest, abs(float(autograd.log_value.grad)))
        torch.testing.assert_close(plain.log_value, autograd.log_value, rtol=1e-5, atol=1e-6)
    sa, sb = plain_optim.optim.state[plain.log_value], autograd_optim.optim.state[autograd.log_value]
    # the moments carry the gradients' differences: m by up to them, v by up to 2 |g| times them
    torch.testing.assert_close(sa["exp_avg"], sb["exp_avg"], rtol=1e-5, atol=tolerance)
    torch.testing.assert_close(sa["exp_avg_sq"], sb["exp_avg_sq"], rtol=1e-5, atol=2 * largest * tolerance + 1e-12)
    assert plain_optim.__dict__.get("_offrl_direct") is not None and autograd_optim.__dict__.get("_offrl_direct") is None


def test_a_hooked_temperature_or_a_gap_with_a_gradient_steps_through_autograd():
    from offrl.algos._common import temperature_step

    (hooked, optim), _ = _temperature_pair(1.0)
    seen = []
    hooked.register_forward_hook(lambda m, inputs, output: seen.append(1))
    temperature_step(hooked, optim, torch.ones(4, 1))
    assert seen and optim.__dict__.get("_offrl_direct") is None
    (plain, optim), _ = _temperature_pair(1.0)
    gap = torch.ones(4, 1, requires_grad=True)
    temperature_step(plain, optim, gap)
    assert gap.grad is not None  # autograd's step: the gradient reached the gap too


# ------------------------------------ SAC's critics and actor written out (CQL's actor and temperature too)
SAC_WRITTEN = [("SAC", {}), ("SAC", {"n_critics": 3}), ("SAC", {"n_critics": 1}), ("SAC", {"temp_learning_rate": 0.0}),
               ("SAC", {"initial_temperature": 0.05}), ("CQL", {"n_action_samples": 3})]


@pytest.mark.parametrize("name, kwargs", SAC_WRITTEN)
def test_sac_written_out_steps_follow_the_autograd_steps(name, kwargs, monkeypatch):
    from test_plain_step import assert_same_weights_and_moments, continuous_batch, counting_backward, make_actor_critic, run_seeded

    calls = counting_backward(monkeypatch)
    plain = make_actor_critic(name, **kwargs)
    with torch.no_grad():  # one log-std dimension beyond max_logstd: the clamp passes no gradient there
        plain.modules["policy"].logstd.bias[0] = 3.0
    assert plain._written_out_step_available() is (name == "SAC")  # CQL: the actor's step only
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(12)
    for step, (a, b) in enumerate(run_seeded(plain, autograd, [continuous_batch(rng, 32, 5, 2) for _ in range(8)])):
        assert a.keys() == b.keys()
        for k in a:
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5, abs=1e-6), (step, k)
    assert calls["n"] == (16 if name == "SAC" else 8)  # the critics' and the policy's each step (CQL: the policy's)
    assert_same_weights_and_moments(plain, autograd)
    grad = plain.modules["policy"].logstd.bias.grad
    assert grad[0] == 0.0 and grad[1] != 0.0


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 40), hidden=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       gamma=st.floats(0.0, 1.0), temperature=st.floats(0.01, 5.0), n_critics=st.integers(1, 4))
def test_one_sac_step_equals_autograd_on_random_problems(seed, n, hidden, gamma, temperature, n_critics):
    from test_plain_step import assert_one_step_matches, continuous_batch, make_actor_critic

    plain = make_actor_critic("SAC", hidden=hidden, gamma=gamma, initial_temperature=temperature, n_critics=n_critics)
    # the actor loss is a mean of alpha log pi - Q over rows of both signs: 1e-4 relative, as the other such tests
    assert_one_step_matches(plain, continuous_batch(np.random.default_rng(seed), n, 5, 2), seeded=True, rtol=1e-4, atol=1e-5)


def test_sac_hooks_and_other_networks_train_through_autograd(monkeypatch):
    from test_plain_step import assert_hooks_route, continuous_batch, counting_backward, make_actor_critic

    calls = counting_backward(monkeypatch)
    rng = np.random.default_rng(13)
    batch = continuous_batch(rng, 8, 5, 2)
    layer_norm = make_actor_critic("SAC", encoder=VectorEncoderFactory([16], use_layer_norm=True))
    layer_norm.update(batch)
    assert calls["n"] == 0 and not layer_norm._written_out_step_available()
    algo = make_actor_critic("SAC")
    algo.update(batch)
    assert calls["n"] == 2
    policy, q = algo.modules["policy"], algo.modules["q_function"]
    # a hook on the policy: its step through autograd, the critics' written out; on the critics: both autograd's
    assert_hooks_route(algo, batch, calls, [(policy.logstd, 1), (policy.mu, 1), (policy.encoder.mlp.layers[0], 1),
                                            (q.head, 0), (q.encoder.mlp.layers[0], 0)])
    # a gradient hook on a parameter (gradient clipping by hooks, say): autograd must call it
    for param, register, steps in [(q.head.weight, "register_hook", 0),
                                   (policy.mu.bias, "register_post_accumulate_grad_hook", 1)]:
        seen = []
        handle = getattr(param, register)(lambda *args: seen.append(1))
        before = calls["n"]
        algo.update(batch)
        handle.remove()
        assert calls["n"] - before == steps and seen, register


def test_a_gradient_hook_on_the_temperature_steps_through_autograd():
    from offrl.algos._common import temperature_step

    (plain, optim), _ = _temperature_pair(1.0)
    seen = []
    plain.log_value.register_hook(lambda g: seen.append(1))
    temperature_step(plain, optim, torch.ones(4, 1))
    assert seen and optim.__dict__.get("_offrl_direct") is None
