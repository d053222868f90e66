"""DDPG and TD3: losses and gradients of one update on the hand-built batch,
target smoothing, delayed and Polyak target updates, learning on the
one-step problem, config validation, and moving networks between TD3+BC
and TD3 (offline-to-online finetuning)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import offrl
from offrl.algos import DDPG, TD3, DDPGConfig, TD3Config, TD3PlusBCConfig
from offrl.models.encoders import VectorEncoderFactory
from offrl.models.q_functions import MeanQFunctionFactory, QRQFunctionFactory

TARGETS = ("targ_q_function", "targ_policy")  # perturbed, so that using an online network in place of a target shows
CONFIGS = {"ddpg": DDPGConfig, "td3": TD3Config}


@pytest.fixture
def small_config(small_encoder):
    """Builder of DDPG / TD3 configs with small encoders."""

    def make(name: str, **changes):
        return CONFIGS[name](actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, **changes)

    return make


def params(module: torch.nn.Module) -> list:
    return [p.detach().clone() for p in module.parameters()]


def critic_loss_by_hand(q, next_q: np.ndarray, batch, gamma: float) -> float:
    """``sum_i mean_b (Q_i(s_b, a_b) - y_b)^2`` with ``y = r + gamma^k (1 - d) min_j next_q[j]``, as loops."""
    with torch.no_grad():
        pred = q.expected(torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)).numpy()[..., 0]  # (E, B)
    total = 0.0
    for i in range(pred.shape[0]):
        for b in range(pred.shape[1]):
            y = batch.rewards[b, 0] + gamma ** batch.intervals[b, 0] * (1.0 - batch.terminals[b, 0]) * next_q[:, b].min()
            total += (float(pred[i, b]) - float(y)) ** 2 / pred.shape[1]
    return total


def target_values(algo, batch, next_actions: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return algo.modules["targ_q_function"].expected(torch.from_numpy(batch.next_observations), next_actions).numpy()[..., 0]


def actor_grads_by_hand(policy, q, obs: torch.Tensor):
    """``-mean_b Q_1(s_b, pi(s_b))`` and its gradient in the policy's weights."""
    policy = copy.deepcopy(policy)
    loss = -q.expected(obs, policy(obs))[0].mean()
    return float(loss.detach()), torch.autograd.grad(loss, list(policy.parameters()))


@pytest.mark.parametrize("name", ["ddpg", "td3"])
@pytest.mark.parametrize("n_critics", [1, 2])
def test_one_update_matches_hand_computation(name, n_critics, hand_batch, build_algo, small_config):
    """Critic loss and gradients from the targets; actor loss and gradients
    against the updated first critic; Polyak-averaged targets."""
    offrl.seed(0)
    extra = {"target_smoothing_sigma": 0.0} if name == "td3" else {}
    cfg = small_config(name, gamma=0.9, tau=0.1, n_critics=n_critics, **extra)
    algo = build_algo(cfg, perturb=TARGETS)
    nets = algo.modules
    batch = hand_batch()
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    policy_before, q_before = copy.deepcopy(nets["policy"]), copy.deepcopy(nets["q_function"])
    targ_q_before, targ_policy_before = params(nets["targ_q_function"]), params(nets["targ_policy"])
    with torch.no_grad():
        next_q = target_values(algo, batch, nets["targ_policy"](torch.from_numpy(batch.next_observations)))
    expected_critic = critic_loss_by_hand(q_before, next_q, batch, cfg.gamma)
    # the critic's gradient, by autograd on a copy
    y = torch.from_numpy(batch.rewards) + cfg.gamma ** torch.from_numpy(batch.intervals) * (
        1 - torch.from_numpy(batch.terminals)) * torch.from_numpy(next_q.min(axis=0)).unsqueeze(-1)
    critic_grads = torch.autograd.grad(((q_before.expected(obs, act) - y) ** 2).mean(dim=(1, 2)).sum(), list(q_before.parameters()))

    losses = algo.update(batch)

    assert set(losses) == {"critic_loss", "actor_loss"}
    assert losses["critic_loss"] == pytest.approx(expected_critic, rel=1e-5, abs=1e-6)
    for grad, p in zip(critic_grads, nets["q_function"].parameters()):
        torch.testing.assert_close(p.grad, grad, rtol=1e-5, atol=1e-7)  # the actor step wrote nothing into them
    actor_loss, actor_grads = actor_grads_by_hand(policy_before, nets["q_function"], obs)
    assert losses["actor_loss"] == pytest.approx(actor_loss, rel=1e-5, abs=1e-6)
    for grad, p in zip(actor_grads, nets["policy"].parameters()):
        torch.testing.assert_close(p.grad, grad, rtol=1e-5, atol=1e-7)
    for old, targ, online in zip(targ_q_before, nets["targ_q_function"].parameters(), nets["q_function"].parameters()):
        torch.testing.assert_close(targ, 0.9 * old + 0.1 * online, rtol=1e-6, atol=1e-6)
    for old, targ, online in zip(targ_policy_before, nets["targ_policy"].parameters(), nets["policy"].parameters()):
        torch.testing.assert_close(targ, 0.9 * old + 0.1 * online, rtol=1e-6, atol=1e-6)


def test_td3_target_adds_clipped_gaussian_noise(hand_batch, build_algo, small_config):
    """With sigma > 0 the target action is clip(pi'(s') + clip(sigma eps, -c, c), -1, 1)
    for the eps drawn from the seeded generator."""
    offrl.seed(0)
    cfg = small_config("td3", gamma=0.9, target_smoothing_sigma=0.7, target_smoothing_clip=0.3)
    algo = build_algo(cfg, perturb=TARGETS)
    batch = hand_batch()
    with torch.no_grad():
        base = algo.modules["targ_policy"](torch.from_numpy(batch.next_observations))
    torch.manual_seed(123)
    eps = torch.randn_like(base)
    smoothed = (base + (0.7 * eps).clamp(-0.3, 0.3)).clamp(-1.0, 1.0)
    assert not torch.allclose(smoothed, base)
    expected = critic_loss_by_hand(algo.modules["q_function"], target_values(algo, batch, smoothed), batch, cfg.gamma)
    unsmoothed = critic_loss_by_hand(algo.modules["q_function"], target_values(algo, batch, base), batch, cfg.gamma)
    assert expected != pytest.approx(unsmoothed, rel=1e-3)
    torch.manual_seed(123)
    assert algo.update(batch)["critic_loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_ddpg_target_has_no_smoothing(hand_batch, build_algo, small_config):
    """DDPG's target is the target policy's action, whatever the random state."""
    offrl.seed(0)
    algo = build_algo(small_config("ddpg", gamma=0.9), perturb=TARGETS)
    batch = hand_batch()
    with torch.no_grad():
        next_actions = algo.modules["targ_policy"](torch.from_numpy(batch.next_observations))
    expected = critic_loss_by_hand(algo.modules["q_function"], target_values(algo, batch, next_actions), batch, 0.9)
    assert algo.update(batch)["critic_loss"] == pytest.approx(expected, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name,interval", [("ddpg", 1), ("td3", 3)])
def test_policy_and_targets_move_every_interval_steps(name, interval, hand_batch, build_algo, small_config):
    offrl.seed(0)
    extra = {"update_actor_interval": interval} if name == "td3" else {}
    algo = build_algo(small_config(name, tau=0.1, **extra), perturb=TARGETS)
    nets = algo.modules
    reported = []
    for step in range(6):
        policy_before, targ_before = params(nets["policy"]), params(nets["targ_q_function"]) + params(nets["targ_policy"])
        reported.append(algo.update(hand_batch())["actor_loss"])
        moved = any(not torch.equal(a, b) for a, b in zip(policy_before, nets["policy"].parameters()))
        targets_moved = any(not torch.equal(a, b) for a, b in zip(targ_before, list(nets["targ_q_function"].parameters()) + list(nets["targ_policy"].parameters())))
        assert moved == targets_moved == (step % interval == 0), step
    if interval > 1:
        assert reported[1] == reported[2] == reported[0]  # the last actor loss is repeated
        assert reported[3] != reported[0]


@pytest.mark.parametrize("name", ["ddpg", "td3"])
def test_quantile_critics_train(name, hand_batch, build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config(name, q_func_factory=QRQFunctionFactory(n_quantiles=8)), perturb=TARGETS)
    first = algo.update(hand_batch())["critic_loss"]
    for _ in range(30):
        last = algo.update(hand_batch())["critic_loss"]
    assert np.isfinite(last) and last < first


def test_defaults_mirror_d3rlpy():
    ddpg, td3 = DDPGConfig(), TD3Config()
    for cfg in (ddpg, td3):
        assert (cfg.batch_size, cfg.gamma, cfg.actor_learning_rate, cfg.critic_learning_rate, cfg.tau) == (256, 0.99, 3e-4, 3e-4, 0.005)
        assert isinstance(cfg.q_func_factory, MeanQFunctionFactory)
    assert ddpg.n_critics == 1
    assert (td3.n_critics, td3.target_smoothing_sigma, td3.target_smoothing_clip, td3.update_actor_interval) == (2, 0.2, 0.5, 2)
    assert list(td3.get_params())[-4:] == ["n_critics", "target_smoothing_sigma", "target_smoothing_clip", "update_actor_interval"]


@pytest.mark.parametrize(
    "name,changes,match",
    [
        ("ddpg", {"tau": 0.0}, "tau"),
        ("ddpg", {"tau": 1.5}, "tau"),
        ("ddpg", {"n_critics": 0}, "n_critics"),
        ("ddpg", {"actor_learning_rate": 0.0}, "actor_learning_rate"),
        ("ddpg", {"critic_learning_rate": float("nan")}, "critic_learning_rate"),
        ("td3", {"update_actor_interval": 0}, "update_actor_interval"),
        ("td3", {"update_actor_interval": 2.5}, "update_actor_interval"),
        ("td3", {"target_smoothing_sigma": -0.1}, "target_smoothing_sigma"),
        ("td3", {"target_smoothing_clip": -1.0}, "target_smoothing_clip"),
        ("td3", {"gamma": 1.5}, "gamma"),
    ],
)
def test_config_validation(name, changes, match):
    with pytest.raises(ValueError, match=match):
        CONFIGS[name](**changes)
    with pytest.raises(ValueError, match=match):
        CONFIGS[name]().create().set_params(**changes)


def test_rejects_discrete_data(dataset_factory):
    algo = TD3Config(batch_size=8).create()
    with pytest.raises(ValueError, match="continuous"):
        algo.build_with_dataset(dataset_factory("vector", discrete=True))


def test_predict_is_the_deterministic_policy(build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config("ddpg"))
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    with torch.no_grad():
        expected = algo.modules["policy"](torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(algo.predict(x), expected)
    np.testing.assert_array_equal(algo.sample_action(x), expected)
    assert not algo.has_stochastic_policy


def test_td3_plus_bc_policy_and_critics_move_to_td3(hand_batch, build_algo, small_encoder):
    """Offline TD3+BC, then TD3 (the online finetuning step): the networks
    share their layout, so the copies reproduce predictions and values."""
    offrl.seed(0)
    offline = build_algo(TD3PlusBCConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
    for _ in range(3):
        offline.update(hand_batch())
    online = build_algo(TD3Config(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
    online.copy_policy_from(offline)
    online.copy_q_function_from(offline)
    online.copy_policy_optim_from(offline)
    online.copy_q_function_optim_from(offline)
    x = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    a = np.random.default_rng(3).uniform(-1, 1, size=(5, 2)).astype(np.float32)
    np.testing.assert_array_equal(online.predict(x), offline.predict(x))
    np.testing.assert_array_equal(online.predict_value(x, a), offline.predict_value(x, a))
    assert isinstance(online, TD3) and isinstance(online, DDPG)
    assert np.isfinite(online.update(hand_batch())["critic_loss"])


def _one_step_config(cls):
    def make(factory: VectorEncoderFactory):
        return cls(batch_size=64, actor_encoder_factory=factory, critic_encoder_factory=factory)
    return make


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("cls", [DDPGConfig, TD3Config])
def test_learns_the_best_action_on_the_one_step_problem(cls, seed, fit_one_step_problem):
    """Logged actions are uniform in [-1, 1] and the reward -(a - 0.5)^2:
    without a behaviour-cloning pull the policy goes to 0.5 (after 1,000
    steps it still sits at the saturated edge 1.0 while the critic learns
    the curvature; by 3,000 it has come back), about 4 s each."""
    prediction = fit_one_step_problem(_one_step_config(cls), seed=seed, n_steps=3000)
    assert abs(prediction.mean() - 0.5) < 0.1, prediction.mean()
    assert np.median(np.abs(prediction - 0.5)) < 0.1, prediction
    assert np.quantile(np.abs(prediction - 0.5), 0.9) < 0.25, prediction
