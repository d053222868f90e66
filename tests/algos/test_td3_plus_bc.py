"""TD3+BC: the losses on a hand-built batch, the delayed policy and target
updates, target policy smoothing, learning on a one-step problem, config
validation and copying networks between algorithms."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import offrl
from offrl.algos.iql import IQLConfig
from offrl.algos.td3_plus_bc import TD3PlusBC, TD3PlusBCConfig, smooth_target_action
from offrl.dataset.batch import TransitionMiniBatch
from offrl.models.encoders import VectorEncoderFactory
from offrl.models.q_functions import (
    IQNQFunctionFactory,
    MeanQFunctionFactory,
    QRQFunctionFactory,
)

TARGETS = ("targ_q_function", "targ_policy")  # perturbed, so that using an online network in place of a target shows


@pytest.fixture
def small_config(small_encoder):
    """Builder of TD3+BC configs with small encoders."""

    def make(**changes) -> TD3PlusBCConfig:
        return TD3PlusBCConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, **changes)

    return make


def numpy_of(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float64)


def params(module: torch.nn.Module) -> list:
    return [p.detach().clone() for p in module.parameters()]


def expected_critic_loss(algo: TD3PlusBC, batch: TransitionMiniBatch, gamma: float) -> float:
    nets = algo.modules
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    next_obs = torch.from_numpy(batch.next_observations)
    with torch.no_grad():
        next_action = nets["targ_policy"](next_obs)  # no smoothing noise with sigma = 0
        next_q = numpy_of(nets["targ_q_function"].expected(next_obs, next_action))[..., 0]  # (E, B)
        q = numpy_of(nets["q_function"].expected(obs, act))[..., 0]
    r, d, k = batch.rewards[:, 0], batch.terminals[:, 0], batch.intervals[:, 0]
    y = r + gamma**k * (1.0 - d) * next_q.min(axis=0)
    return float(sum(np.mean((q[i] - y) ** 2) for i in range(q.shape[0])))


def expected_actor_loss(q_function, policy_actions: np.ndarray, obs: np.ndarray, logged: np.ndarray, alpha: float) -> float:
    with torch.no_grad():
        q_first = numpy_of(q_function.expected(torch.from_numpy(obs), torch.from_numpy(policy_actions).float())[0])[:, 0]
    lam = alpha / np.mean(np.abs(q_first))
    return float(-lam * np.mean(q_first) + np.mean((policy_actions - logged) ** 2))


@pytest.mark.parametrize("n_critics", [1, 2, 3])
def test_losses_on_hand_built_batch(n_critics, hand_batch, build_algo, small_config):
    offrl.seed(0)
    cfg = small_config(gamma=0.9, alpha=1.7, n_critics=n_critics, target_smoothing_sigma=0.0)
    algo = build_algo(cfg, perturb=TARGETS)
    batch = hand_batch()
    critic_loss = expected_critic_loss(algo, batch, cfg.gamma)
    with torch.no_grad():
        policy_actions = algo.modules["policy"](torch.from_numpy(batch.observations)).numpy()

    losses = algo.update(batch)

    assert set(losses) == {"critic_loss", "actor_loss"}
    assert losses["critic_loss"] == pytest.approx(critic_loss, rel=1e-5, abs=1e-5)
    # the policy step follows the critic step: it sees the updated first critic
    actor_loss = expected_actor_loss(algo.modules["q_function"], policy_actions, batch.observations, batch.actions, cfg.alpha)
    assert losses["actor_loss"] == pytest.approx(actor_loss, rel=1e-5, abs=1e-5)


def test_clipped_noise_is_zero_with_zero_clip(hand_batch, build_algo, small_config):
    """sigma > 0 but clip = 0: the target is the unsmoothed one."""
    offrl.seed(0)
    cfg = small_config(target_smoothing_sigma=5.0, target_smoothing_clip=0.0)
    algo = build_algo(cfg, perturb=TARGETS)
    batch = hand_batch()
    expected = expected_critic_loss(algo, batch, cfg.gamma)
    assert algo.update(batch)["critic_loss"] == pytest.approx(expected, rel=1e-5, abs=1e-5)


def test_policy_and_targets_update_every_interval_steps(hand_batch, build_algo, small_config):
    offrl.seed(0)
    cfg = small_config(update_actor_interval=3, tau=0.1)
    algo = build_algo(cfg, perturb=TARGETS)
    batch = hand_batch()
    nets = algo.modules
    reported = []
    for step in range(7):
        policy_before, targ_q_before, targ_policy_before = params(nets["policy"]), params(nets["targ_q_function"]), params(nets["targ_policy"])
        reported.append(algo.update(batch)["actor_loss"])
        policy_moved = any(not torch.equal(a, b) for a, b in zip(policy_before, nets["policy"].parameters()))
        assert policy_moved == (step % 3 == 0), step
        if step % 3 == 0:
            for old, targ, online in zip(targ_q_before, nets["targ_q_function"].parameters(), nets["q_function"].parameters()):
                torch.testing.assert_close(targ, 0.9 * old + 0.1 * online, rtol=1e-6, atol=1e-6)
            for old, targ, online in zip(targ_policy_before, nets["targ_policy"].parameters(), nets["policy"].parameters()):
                torch.testing.assert_close(targ, 0.9 * old + 0.1 * online, rtol=1e-6, atol=1e-6)
        else:
            assert all(torch.equal(a, b) for a, b in zip(targ_q_before, nets["targ_q_function"].parameters()))
            assert all(torch.equal(a, b) for a, b in zip(targ_policy_before, nets["targ_policy"].parameters()))
    # steps without a policy update repeat the last actor loss
    assert reported[1] == reported[2] == reported[0]
    assert reported[4] == reported[5] == reported[3]
    assert reported[3] != reported[0]


def test_first_steps_before_any_policy_update_report_zero(hand_batch, build_algo, small_config):
    """Resuming at a grad_step that is not a multiple of the interval."""
    algo = build_algo(small_config(update_actor_interval=2), perturb=TARGETS)
    algo.set_grad_step(1)
    assert algo.update(hand_batch())["actor_loss"] == 0.0
    assert algo.update(hand_batch())["actor_loss"] != 0.0


def test_policy_step_leaves_critic_gradients_alone(hand_batch, build_algo, small_config):
    """The critics' gradients after an update are those of the critic loss
    only (the policy step does not write into them) and they stay trainable."""
    offrl.seed(0)
    cfg = small_config(target_smoothing_sigma=0.0)
    algo = build_algo(cfg, perturb=TARGETS)
    batch = hand_batch()
    q = copy.deepcopy(algo.modules["q_function"])
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    next_obs = torch.from_numpy(batch.next_observations)
    with torch.no_grad():
        next_q = algo.modules["targ_q_function"].expected(next_obs, algo.modules["targ_policy"](next_obs)).min(dim=0).values
        y = torch.from_numpy(batch.rewards) + cfg.gamma ** torch.from_numpy(batch.intervals) * (1 - torch.from_numpy(batch.terminals)) * next_q
    loss = ((q.expected(obs, act) - y) ** 2).mean(dim=(1, 2)).sum()
    grads = torch.autograd.grad(loss, list(q.parameters()))
    algo.update(batch)
    for grad, p in zip(grads, algo.modules["q_function"].parameters()):
        assert p.requires_grad
        torch.testing.assert_close(p.grad, grad, rtol=1e-5, atol=1e-7)


@settings(max_examples=50, deadline=None)
@given(
    action=arrays(np.float32, (5, 2), elements=st.floats(-1.0, 1.0, width=32)),
    sigma=st.floats(0.0, 5.0),
    clip=st.floats(0.0, 1.0),
)
def test_smoothed_target_action_stays_in_range_and_near(action, sigma, clip):
    a = torch.from_numpy(action)
    smoothed = smooth_target_action(a, sigma, clip)
    assert smoothed.shape == a.shape
    assert (smoothed >= -1.0).all() and (smoothed <= 1.0).all()
    assert ((smoothed - a).abs() <= clip + 1e-6).all()
    if sigma == 0.0 or clip == 0.0:
        assert torch.equal(smoothed, a)


def test_smoothing_noise_is_gaussian_then_clipped():
    torch.manual_seed(0)
    smoothed = smooth_target_action(torch.zeros(20000, 1), 0.2, 0.5)
    assert float(smoothed.std()) == pytest.approx(0.2, rel=0.05)
    hits = smooth_target_action(torch.zeros(20000, 1), 1.0, 0.5)
    assert float(hits.abs().max()) == pytest.approx(0.5)
    assert float((hits.abs() == 0.5).float().mean()) == pytest.approx(0.617, abs=0.02)  # P(|N(0,1)| > 0.5)


@pytest.mark.parametrize("factory", [MeanQFunctionFactory(), QRQFunctionFactory(n_quantiles=8), IQNQFunctionFactory(n_quantiles=8, n_greedy_quantiles=4, embed_size=8)])
def test_distributional_critics_train(factory, hand_batch, build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config(q_func_factory=factory), perturb=TARGETS)
    for _ in range(3):
        losses = algo.update(hand_batch())
        assert all(np.isfinite(v) for v in losses.values())
    assert algo.predict_value(hand_batch().observations, hand_batch().actions).shape == (4,)


def test_predict_is_the_deterministic_policy(build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config(), perturb=TARGETS)
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    with torch.no_grad():
        expected = algo.modules["policy"](torch.from_numpy(x)).numpy()
        q = algo.modules["q_function"].expected(torch.from_numpy(x), torch.zeros(6, 2))
    np.testing.assert_array_equal(algo.predict(x), expected)
    np.testing.assert_array_equal(algo.sample_action(x), expected)
    assert np.abs(expected).max() <= 1.0
    np.testing.assert_allclose(algo.predict_value(x, np.zeros((6, 2), np.float32)), q.mean(dim=0)[:, 0].numpy(), rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        np.testing.assert_array_equal(algo.policy_module()(torch.from_numpy(x)).numpy(), expected)


def one_step_config(factory: VectorEncoderFactory) -> TD3PlusBCConfig:
    """The config fitted on the one-step problem."""
    return TD3PlusBCConfig(batch_size=64, actor_encoder_factory=factory, critic_encoder_factory=factory)


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
        ({"update_actor_interval": 0}, "update_actor_interval"),
        ({"update_actor_interval": 1.5}, "update_actor_interval"),
        ({"target_smoothing_sigma": -0.1}, "target_smoothing_sigma"),
        ({"target_smoothing_clip": -0.1}, "target_smoothing_clip"),
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"n_critics": 0}, "n_critics"),
        ({"tau": -0.1}, "tau"),
        ({"actor_learning_rate": 0.0}, "actor_learning_rate"),
        ({"critic_learning_rate": -1.0}, "critic_learning_rate"),
        ({"gamma": 1.5}, "gamma"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ValueError, match=match):
        TD3PlusBCConfig(**changes)
    config = TD3PlusBCConfig()
    with pytest.raises(ValueError, match=match):
        config.set_params(**changes)


def test_config_rejects_wrong_factory_types():
    with pytest.raises(TypeError, match="q_func_factory"):
        TD3PlusBCConfig(q_func_factory="mean")
    with pytest.raises(TypeError, match="actor_encoder_factory"):
        TD3PlusBCConfig(actor_encoder_factory=MeanQFunctionFactory())


def test_defaults_mirror_d3rlpy():
    cfg = TD3PlusBCConfig()
    assert (cfg.batch_size, cfg.gamma, cfg.actor_learning_rate, cfg.critic_learning_rate) == (256, 0.99, 3e-4, 3e-4)
    assert (cfg.tau, cfg.n_critics, cfg.target_smoothing_sigma, cfg.target_smoothing_clip) == (0.005, 2, 0.2, 0.5)
    assert (cfg.alpha, cfg.update_actor_interval) == (2.5, 2)
    assert isinstance(cfg.q_func_factory, MeanQFunctionFactory)


def test_copy_policy_and_q_function_between_instances(build_algo, small_config):
    offrl.seed(0)
    a, b = build_algo(small_config()), build_algo(small_config())
    x = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    actions = np.random.default_rng(3).uniform(-1, 1, size=(5, 2)).astype(np.float32)
    assert not np.allclose(a.predict(x), b.predict(x))
    assert not np.allclose(a.predict_value(x, actions), b.predict_value(x, actions))
    b.copy_policy_from(a)
    np.testing.assert_array_equal(a.predict(x), b.predict(x))
    b.copy_q_function_from(a)
    np.testing.assert_array_equal(a.predict_value(x, actions), b.predict_value(x, actions))
    for mine, theirs in zip(b.modules["targ_q_function"].parameters(), a.modules["targ_q_function"].parameters()):
        assert torch.equal(mine, theirs)
    b.copy_policy_optim_from(a)
    b.copy_q_function_optim_from(a)


def test_copy_rejects_networks_that_do_not_fit(small_encoder, build_algo, small_config):
    offrl.seed(0)
    td3 = build_algo(small_config())
    three_critics = build_algo(small_config(n_critics=3))
    with pytest.raises(ValueError, match="Q-function"):
        td3.copy_q_function_from(three_critics)
    iql = build_algo(IQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, value_encoder_factory=small_encoder))
    with pytest.raises(ValueError, match="policy"):
        td3.copy_policy_from(iql)  # a Gaussian policy does not fit a deterministic one
    td3.copy_q_function_from(iql)  # same critics: mean Q-functions, same encoder and ensemble size
    x = np.zeros((2, 3), np.float32)
    np.testing.assert_array_equal(td3.predict_value(x, np.zeros((2, 2), np.float32)), iql.predict_value(x, np.zeros((2, 2), np.float32)))
