"""IQL: the losses on a hand-built batch, the target update, learning on a
one-step problem, config validation."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import offrl
from offrl.algos.iql import IQL, IQLConfig
from offrl.dataset.batch import TransitionMiniBatch
from offrl.models.encoders import VectorEncoderFactory
from offrl.models.optimizers import SGDFactory


def numpy_of(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


def expected_losses(algo: IQL, batch: TransitionMiniBatch, cfg: IQLConfig, value_after=None) -> dict:
    """The IQL losses computed by hand from the networks' outputs; the
    actor's advantage weight uses ``value_after`` (the value function after
    the critic step, as d3rlpy 2.8.1) when given, else the current one."""
    nets = algo.modules
    obs = torch.from_numpy(batch.observations)
    next_obs = torch.from_numpy(batch.next_observations)
    act = torch.from_numpy(batch.actions)
    with torch.no_grad():
        q = numpy_of(nets["q_function"].expected(obs, act))[..., 0]  # (E, B)
        targ_q = numpy_of(nets["targ_q_function"].expected(obs, act))[..., 0]
        v = numpy_of(nets["value_function"](obs))[:, 0]
        next_v = numpy_of(nets["value_function"](next_obs))[:, 0]
        mean, logstd = (numpy_of(t) for t in nets["policy"](obs))
    r, d, k = batch.rewards[:, 0], batch.terminals[:, 0], batch.intervals[:, 0]
    y = r + cfg.gamma**k * (1.0 - d) * next_v
    q_loss = sum(np.mean((q[i] - y) ** 2) for i in range(q.shape[0]))
    u = targ_q.min(axis=0) - v
    v_loss = np.mean(np.where(u > 0, cfg.expectile, 1.0 - cfg.expectile) * u**2)
    if value_after is not None:
        with torch.no_grad():
            u_actor = targ_q.min(axis=0) - numpy_of(value_after(obs))[:, 0]
    else:
        u_actor = u
    weight = np.minimum(np.exp(cfg.weight_temp * u_actor), cfg.max_weight)
    std = np.exp(logstd)
    log_prob = np.sum(-0.5 * ((batch.actions - np.tanh(mean)) / std) ** 2 - logstd - 0.5 * math.log(2 * math.pi), axis=1)
    actor_loss = -np.mean(weight * log_prob)
    return {
        "q_loss": q_loss, "v_loss": v_loss, "critic_loss": q_loss + v_loss, "actor_loss": actor_loss,
        "advantage": u, "weight": weight,
    }


@pytest.mark.parametrize("weight_temp,max_weight", [(3.0, 100.0), (200.0, 2.0)])
def test_losses_on_hand_built_batch(weight_temp, max_weight, small_encoder, hand_batch, build_algo):
    offrl.seed(0)
    cfg = IQLConfig(
        gamma=0.9, expectile=0.8, weight_temp=weight_temp, max_weight=max_weight, n_critics=3,
        actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, value_encoder_factory=small_encoder,
    )
    # make the critics differ from their targets so that min over targets is not min over critics
    algo = build_algo(cfg, perturb=["targ_q_function"])
    batch = hand_batch()
    # shift V so that the advantages have both signs (both expectile branches)
    advantage = expected_losses(algo, batch, cfg)["advantage"]
    with torch.no_grad():
        algo.modules["value_function"].fc.bias.add_(float(np.median(advantage)))
    expected = expected_losses(algo, batch, cfg)
    assert (expected["advantage"] > 0).sum() == 2 and (expected["advantage"] < 0).sum() == 2
    if max_weight == 2.0:
        assert (expected["weight"] == max_weight).any(), "the weight clip should be exercised"
    targ_before = [p.detach().clone() for p in algo.modules["targ_q_function"].parameters()]
    before = copy.deepcopy(algo)

    losses = algo.update(batch)

    assert set(losses) == {"critic_loss", "q_loss", "v_loss", "actor_loss"}
    for name in ("critic_loss", "q_loss", "v_loss"):
        assert losses[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-5), name
    # the actor's weight: the target critics before their Polyak step, V after the critic step (d3rlpy's order)
    stepped_value = algo.modules["value_function"]
    actor = expected_losses(before, batch, cfg, value_after=stepped_value)["actor_loss"]
    assert losses["actor_loss"] == pytest.approx(actor, rel=1e-5, abs=1e-5)
    assert losses["actor_loss"] != pytest.approx(expected["actor_loss"], rel=1e-5, abs=1e-5)  # V before its step would fail
    # Polyak averaging of the target critics, after the critic step
    for old, targ, online in zip(targ_before, algo.modules["targ_q_function"].parameters(), algo.modules["q_function"].parameters()):
        torch.testing.assert_close(targ, (1 - cfg.tau) * old + cfg.tau * online, rtol=1e-6, atol=1e-6)
    assert algo.grad_step == 1


def test_critic_optimizer_covers_q_and_value_function(small_encoder, build_algo):
    cfg = IQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, value_encoder_factory=small_encoder)
    algo = build_algo(cfg, action_size=1)
    nets = algo.modules

    def ids(optim):
        return {id(p) for group in optim.optim.param_groups for p in group["params"]}

    assert ids(algo.optimizers["critic_optim"]) == {id(p) for p in nets["q_function"].parameters()} | {
        id(p) for p in nets["value_function"].parameters()
    }
    assert ids(algo.optimizers["actor_optim"]) == {id(p) for p in nets["policy"].parameters()}


def test_value_function_gets_gradients_from_the_value_loss_only(small_encoder, hand_batch, build_algo):
    """The advantage weight is a constant for the actor loss: with SGD on the
    critics, V moves by exactly ``-lr * grad L_V``."""
    offrl.seed(0)
    lr = 0.1
    cfg = IQLConfig(
        critic_learning_rate=lr, critic_optim_factory=SGDFactory(),
        actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, value_encoder_factory=small_encoder,
    )
    algo = build_algo(cfg)
    batch = hand_batch()
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    value_function = copy.deepcopy(algo.modules["value_function"])
    with torch.no_grad():
        targ_q = algo.modules["targ_q_function"].expected(obs, act).min(dim=0).values
    u = targ_q - value_function(obs)
    v_loss = (torch.where(u > 0, cfg.expectile, 1 - cfg.expectile) * u**2).mean()
    grads = torch.autograd.grad(v_loss, list(value_function.parameters()))
    algo.update(batch)
    for old, grad, new in zip(value_function.parameters(), grads, algo.modules["value_function"].parameters()):
        torch.testing.assert_close(new.detach(), old.detach() - lr * grad, rtol=1e-5, atol=1e-7)


def test_predict_sample_and_value(small_encoder, build_algo):
    offrl.seed(0)
    cfg = IQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, value_encoder_factory=small_encoder)
    algo = build_algo(cfg)
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    with torch.no_grad():
        mean, logstd = algo.modules["policy"](torch.from_numpy(x))
        q = algo.modules["q_function"].expected(torch.from_numpy(x), torch.zeros(6, 2))
    np.testing.assert_allclose(algo.predict(x), np.tanh(mean.numpy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(algo.predict_value(x, np.zeros((6, 2), np.float32)), q.mean(dim=0)[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    samples = np.stack([algo.sample_action(x) for _ in range(200)])
    assert samples.min() >= -1.0 and samples.max() <= 1.0
    assert not np.allclose(samples[0], samples[1])
    with torch.no_grad():
        exported = algo.policy_module()(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(exported, algo.predict(x), rtol=1e-5, atol=1e-6)


def one_step_config(factory: VectorEncoderFactory) -> IQLConfig:
    """The config fitted on the one-step problem."""
    return IQLConfig(batch_size=64, actor_encoder_factory=factory, critic_encoder_factory=factory, value_encoder_factory=factory)


def test_learns_the_best_logged_action(fit_one_step_problem):
    """The logged actions average 0; the greedy action moves to about 0.5."""
    prediction = fit_one_step_problem(one_step_config, seed=0, n_steps=1500)
    assert abs(prediction.mean() - 0.5) < 0.25, prediction.mean()
    assert np.median(np.abs(prediction - 0.5)) < 0.25, prediction


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_learns_the_best_logged_action_in_most_states(seed, fit_one_step_problem):
    prediction = fit_one_step_problem(one_step_config, seed=seed, n_steps=3000)
    assert abs(prediction.mean() - 0.5) < 0.2, prediction.mean()
    assert np.quantile(np.abs(prediction - 0.5), 0.9) < 0.25, prediction


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"expectile": 0.0}, "expectile"),
        ({"expectile": 1.0}, "expectile"),
        ({"expectile": float("nan")}, "expectile"),
        ({"weight_temp": -1.0}, "weight_temp"),
        ({"max_weight": 0.0}, "max_weight"),
        ({"n_critics": 0}, "n_critics"),
        ({"tau": 1.5}, "tau"),
        ({"actor_learning_rate": 0.0}, "actor_learning_rate"),
        ({"critic_learning_rate": -1e-3}, "critic_learning_rate"),
        ({"batch_size": 0}, "batch_size"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ValueError, match=match):
        IQLConfig(**changes)
    config = IQLConfig()
    with pytest.raises(ValueError, match=match):
        config.set_params(**changes)


def test_config_rejects_wrong_factory_types():
    with pytest.raises(TypeError, match="value_encoder_factory"):
        IQLConfig(value_encoder_factory="default")


def test_defaults_mirror_d3rlpy(build_algo):
    cfg = IQLConfig()
    assert (cfg.batch_size, cfg.gamma, cfg.actor_learning_rate, cfg.critic_learning_rate) == (256, 0.99, 3e-4, 3e-4)
    assert (cfg.tau, cfg.n_critics, cfg.expectile, cfg.weight_temp, cfg.max_weight) == (0.005, 2, 0.7, 3.0, 100.0)
    assert cfg.observation_scaler is None and cfg.action_scaler is None and cfg.reward_scaler is None
    algo = build_algo(cfg)
    policy = algo.modules["policy"]
    assert (policy.min_logstd, policy.max_logstd, policy.use_std_parameter) == (-5.0, 2.0, True)


def test_copy_q_function_and_policy_between_iql_instances(small_encoder, build_algo):
    offrl.seed(0)
    cfg = IQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, value_encoder_factory=small_encoder)
    a, b = build_algo(cfg), build_algo(cfg)
    x = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    actions = np.zeros((5, 2), np.float32)
    assert not np.allclose(a.predict(x), b.predict(x))
    b.copy_policy_from(a)
    b.copy_q_function_from(a)
    np.testing.assert_array_equal(a.predict(x), b.predict(x))
    np.testing.assert_array_equal(a.predict_value(x, actions), b.predict_value(x, actions))


# ------------------------------------------- the critics' and V's step written out (tests/algos/test_plain_step.py)
@pytest.fixture
def restore_switch():
    from offrl.models import plain_mlp

    yield plain_mlp
    plain_mlp.plain_backward_enabled(True)


@pytest.mark.parametrize("kwargs", [{"n_critics": 1}, {"n_critics": 3, "expectile": 0.9}])
def test_iql_written_out_critic_and_value_steps_follow_the_autograd_steps(kwargs, restore_switch, monkeypatch):
    from test_plain_step import assert_same_weights_and_moments, continuous_batch, counting_backward, make_advantage_weighted, run_seeded

    calls = counting_backward(monkeypatch)
    plain = make_advantage_weighted("IQL", **kwargs)
    autograd = copy.deepcopy(plain)
    rng = np.random.default_rng(14)
    for step, (a, b) in enumerate(run_seeded(plain, autograd, [continuous_batch(rng, 32, 5, 2) for _ in range(6)])):
        for k in a:
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-5, abs=1e-6), (step, k)
    assert calls["n"] == 18  # the critics', V's and the policy's, each step
    assert_same_weights_and_moments(plain, autograd)


def test_iql_other_value_networks_and_hooks_train_through_autograd(restore_switch, monkeypatch):
    from test_plain_step import assert_hooks_route, continuous_batch, counting_backward, make_advantage_weighted

    calls = counting_backward(monkeypatch)
    batch = continuous_batch(np.random.default_rng(15), 8, 5, 2)
    normalised = make_advantage_weighted("IQL", value_encoder_factory=VectorEncoderFactory([16], use_layer_norm=True))
    normalised.update(batch)
    assert calls["n"] == 1 and not normalised._written_out_step_available()  # the policy's step only
    algo = make_advantage_weighted("IQL")
    before = calls["n"]
    algo.update(batch)
    assert calls["n"] - before == 3
    value, q = algo.modules["value_function"], algo.modules["q_function"]
    # one optimizer: the critics and V both through autograd, the policy's step written out
    assert_hooks_route(algo, batch, calls, [(value.fc, 1), (value.encoder.mlp.layers[0], 1), (q.head, 1)])
    before = calls["n"]
    algo.update(batch)
    assert calls["n"] - before == 3
