"""CRR: the losses and gradients of one update on the hand-built batch for
every advantage and weight type, hard and soft target updates, the policy
update interval, config validation, and learning on the one-step problem."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import offrl
from offrl.algos import CRRConfig
from offrl.algos import crr as crr_module

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
TARGETS = ("targ_q_function", "targ_policy")  # perturbed, so that using an online network in place of a target shows


def fixed_gaussian_sample(mean: torch.Tensor, logstd: torch.Tensor, n: int = 0) -> torch.Tensor:
    """Deterministic stand-in for ``gaussian_sample``: ``tanh(mean) + 0.5 std``
    (with ``n``: offsets spread over [-1.5, 1.5] std), clipped to [-1, 1]."""
    loc, std = torch.tanh(mean), logstd.exp()
    if n > 0:
        offsets = torch.linspace(-1.5, 1.5, n).view(1, n, 1)
        return (loc.unsqueeze(1) + offsets * std.unsqueeze(1)).clamp(-1.0, 1.0)
    return (loc + 0.5 * std).clamp(-1.0, 1.0)


def q_values(q, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """``Q_i(obs_b, actions_b)`` as float64, ``(E, B)``."""
    with torch.no_grad():
        return q.expected(torch.from_numpy(obs), torch.from_numpy(actions.astype(np.float32))).numpy()[..., 0].astype(np.float64)


def params(module: torch.nn.Module) -> list:
    return [p.detach().clone() for p in module.parameters()]


@pytest.fixture
def small_config(small_encoder):
    def make(**changes):
        return CRRConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, **changes)

    return make


@pytest.mark.parametrize("advantage_type", ["mean", "max"])
@pytest.mark.parametrize("weight_type,beta,max_weight", [("exp", 0.5, 20.0), ("exp", 0.05, 1.5), ("binary", 1.0, 20.0)])
def test_one_update_matches_hand_computation(advantage_type, weight_type, beta, max_weight, hand_batch, build_algo, small_config, monkeypatch):
    """Critic loss from the target critics at the target policy's next
    action (min over the ensemble); actor loss and gradients from the
    updated critics' advantages (mean over the ensemble, mean or max over
    the samples) through the weight filter."""
    monkeypatch.setattr(crr_module, "gaussian_sample", fixed_gaussian_sample)
    offrl.seed(0)
    n = 3
    cfg = small_config(
        gamma=0.9, n_critics=2, n_action_samples=n, advantage_type=advantage_type, weight_type=weight_type,
        beta=beta, max_weight=max_weight,
    )
    algo = build_algo(cfg, perturb=TARGETS, scale=0.3)
    nets = algo.modules
    batch = hand_batch()
    obs, act, nxt = batch.observations, batch.actions, batch.next_observations
    policy_before = copy.deepcopy(nets["policy"])

    with torch.no_grad():
        next_actions = fixed_gaussian_sample(*nets["targ_policy"](torch.from_numpy(nxt))).numpy()
    next_q = q_values(nets["targ_q_function"], nxt, next_actions)
    pred = q_values(nets["q_function"], obs, act)
    expected_critic = 0.0
    for i in range(2):
        for b in range(4):
            y = batch.rewards[b, 0] + 0.9 ** batch.intervals[b, 0] * (1.0 - batch.terminals[b, 0]) * next_q[:, b].min()
            expected_critic += (pred[i, b] - y) ** 2 / 4

    losses = algo.update(batch)

    with torch.no_grad():
        mean, logstd = policy_before(torch.from_numpy(obs))
    sampled = fixed_gaussian_sample(mean, logstd, n).numpy()
    q_after = nets["q_function"]
    weights = []
    for b in range(4):
        q_data = q_values(q_after, obs[b:b + 1], act[b:b + 1])[:, 0].mean()
        values = [q_values(q_after, obs[b:b + 1], sampled[b, k][None])[:, 0].mean() for k in range(n)]
        advantage = q_data - (np.mean(values) if advantage_type == "mean" else max(values))
        if weight_type == "binary":
            weights.append(1.0 if advantage > 0 else 0.0)
        else:
            weights.append(min(math.exp(advantage / beta), max_weight))
    log_probs = []
    for b in range(4):
        lp = 0.0
        for j in range(2):
            m, ls = float(mean[b, j]), float(logstd[b, j])
            lp += -0.5 * ((act[b, j] - math.tanh(m)) / math.exp(ls)) ** 2 - ls - LOG_SQRT_2PI
        log_probs.append(lp)
    expected_actor = -sum(w * lp for w, lp in zip(weights, log_probs)) / 4

    assert losses["critic_loss"] == pytest.approx(expected_critic, rel=1e-5, abs=1e-6)
    assert losses["actor_loss"] == pytest.approx(expected_actor, rel=1e-5, abs=1e-6)
    if weight_type == "exp" and max_weight < 2:
        assert max_weight in weights  # the cap is exercised
    x, a = torch.from_numpy(obs), torch.from_numpy(act)
    m, ls = policy_before(x)
    log_prob = (-0.5 * ((a - torch.tanh(m)) / ls.exp()) ** 2 - ls - LOG_SQRT_2PI).sum(dim=1)
    hand_loss = -(torch.tensor(weights, dtype=torch.float32) * log_prob).mean()
    grads = torch.autograd.grad(hand_loss, list(policy_before.parameters()))
    for grad, p in zip(grads, nets["policy"].parameters()):
        torch.testing.assert_close(p.grad, grad, rtol=1e-4, atol=1e-6)


def test_binary_weights_keep_only_positive_advantages(hand_batch, build_algo, small_config, monkeypatch):
    """With the "max" baseline and many samples few logged actions beat the
    best sample: the binary filter is 0 or 1 and not all 1."""
    monkeypatch.setattr(crr_module, "gaussian_sample", fixed_gaussian_sample)
    offrl.seed(0)
    algo = build_algo(small_config(weight_type="binary", advantage_type="max", n_action_samples=8))
    batch = hand_batch()
    x, a = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    with torch.no_grad():
        w = algo._weights(x, a, *algo.modules["policy"](x))
    assert set(w.tolist()) <= {0.0, 1.0} and w.sum() < 4


@pytest.mark.parametrize("interval", [1, 3])
def test_hard_target_copy_every_interval_steps(interval, hand_batch, build_algo, small_config):
    """Targets stay put between copies and equal the online networks right after one."""
    offrl.seed(0)
    algo = build_algo(small_config(target_update_type="hard", target_update_interval=interval), perturb=TARGETS)
    nets = algo.modules
    for step in range(6):  # the first update is grad_step 0, as in d3rlpy
        before = params(nets["targ_q_function"]) + params(nets["targ_policy"])
        algo.update(hand_batch())
        after = params(nets["targ_q_function"]) + params(nets["targ_policy"])
        online = params(nets["q_function"]) + params(nets["policy"])
        if step % interval == 0:
            for t, o in zip(after, online):
                assert torch.equal(t, o)
        else:
            for t, b in zip(after, before):
                assert torch.equal(t, b)
            assert any(not torch.equal(t, o) for t, o in zip(after, online))


def test_soft_target_update_every_step(hand_batch, build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config(target_update_type="soft", tau=0.2, target_update_interval=1000), perturb=TARGETS)
    nets = algo.modules
    for _ in range(2):
        before = params(nets["targ_q_function"]) + params(nets["targ_policy"])
        algo.update(hand_batch())
        after = list(nets["targ_q_function"].parameters()) + list(nets["targ_policy"].parameters())
        online = list(nets["q_function"].parameters()) + list(nets["policy"].parameters())
        for old, t, o in zip(before, after, online):
            torch.testing.assert_close(t, 0.8 * old + 0.2 * o, rtol=1e-6, atol=1e-6)


def test_policy_moves_every_update_actor_interval_steps(hand_batch, build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config(update_actor_interval=2))
    policy = algo.modules["policy"]
    reported = []
    for step in range(6):  # the first update is grad_step 0, as in d3rlpy
        before = params(policy)
        reported.append(algo.update(hand_batch())["actor_loss"])
        moved = any(not torch.equal(a, b) for a, b in zip(before, policy.parameters()))
        assert moved == (step % 2 == 0), step
    assert reported[1] == reported[0] != reported[2] == reported[3]  # the last actor loss is repeated


def test_defaults_mirror_d3rlpy():
    cfg = CRRConfig()
    assert (cfg.batch_size, cfg.gamma, cfg.actor_learning_rate, cfg.critic_learning_rate) == (100, 0.99, 3e-4, 3e-4)
    assert (cfg.beta, cfg.n_action_samples, cfg.advantage_type, cfg.weight_type, cfg.max_weight) == (1.0, 4, "mean", "exp", 20.0)
    assert (cfg.n_critics, cfg.target_update_type, cfg.tau, cfg.target_update_interval, cfg.update_actor_interval) == (1, "hard", 0.005, 100, 1)
    assert list(cfg.get_params())[-10:] == [
        "beta", "n_action_samples", "advantage_type", "weight_type", "max_weight", "n_critics",
        "target_update_type", "tau", "target_update_interval", "update_actor_interval",
    ]


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"advantage_type": "median"}, "advantage_type"),
        ({"weight_type": "softmax"}, "weight_type"),
        ({"target_update_type": "polyak"}, "target_update_type"),
        ({"beta": 0.0}, "beta"),
        ({"max_weight": -1.0}, "max_weight"),
        ({"n_action_samples": 0}, "n_action_samples"),
        ({"tau": 0.0}, "tau"),
        ({"target_update_interval": 0}, "target_update_interval"),
        ({"update_actor_interval": 0}, "update_actor_interval"),
        ({"update_actor_interval": 1.5}, "update_actor_interval"),
        ({"n_critics": 0}, "n_critics"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ValueError, match=match):
        CRRConfig(**changes)
    with pytest.raises(ValueError, match=match):
        CRRConfig().create().set_params(**changes)


def test_rejects_discrete_data(dataset_factory):
    with pytest.raises(ValueError, match="continuous"):
        CRRConfig(batch_size=8).create().build_with_dataset(dataset_factory("vector", discrete=True))


def test_predict_is_the_mean_action(build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config())
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    with torch.no_grad():
        expected = torch.tanh(algo.modules["policy"](torch.from_numpy(x))[0]).numpy()
    np.testing.assert_array_equal(algo.predict(x), expected)
    np.testing.assert_array_equal(algo.predict(x), algo.predict(x))
    draws = np.stack([algo.sample_action(x) for _ in range(3)])
    assert np.abs(draws).max() <= 1.0 and not np.allclose(draws[0], draws[1])


def _one_step_config(**changes):
    def make(factory):
        return CRRConfig(batch_size=64, actor_encoder_factory=factory, critic_encoder_factory=factory, **changes)

    return make


@pytest.mark.slow
@pytest.mark.parametrize(
    "changes,expected",
    [
        ({}, 0.244),
        ({"weight_type": "binary", "advantage_type": "max"}, 0.5),
        ({"target_update_type": "soft", "beta": 0.1}, 0.493),
    ],
    ids=["defaults", "binary-max", "soft-exp"],
)
def test_learns_the_filtered_logged_action_on_the_one_step_problem(changes, expected, fit_one_step_problem):
    """Logged actions uniform in [-1, 1], reward -(a - 0.5)^2 (best 0.5).
    The "exp" filter's fixed point is the mean of the logged actions
    weighted by exp(-(a - 0.5)^2 / beta): 0.244 with beta=1 (d3rlpy's
    default: a strong pull towards the data), 0.493 with beta=0.1; the
    binary filter keeps only actions better than the policy's, so it goes
    to 0.5. About 4 s each."""
    prediction = fit_one_step_problem(_one_step_config(**changes), seed=0, n_steps=2000)
    assert abs(prediction.mean() - expected) < 0.08, prediction.mean()
    assert np.quantile(np.abs(prediction - expected), 0.9) < 0.2, prediction
