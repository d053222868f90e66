"""AWAC: the losses and gradients of one update on the hand-built batch
(critic target from the policy's next action, advantage weights normalised
over the batch), the Polyak target update, the one-call value baseline
against a loop, config validation, offline fit then ``fit_online``, and
learning on the one-step problem."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from envs import ContinuousCorridor
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.algos import AWACConfig, RandomPolicyConfig
from offrl.algos import awac as awac_module
from offrl.logging import NoopAdapterFactory
from offrl.models import DefaultEncoderFactory, MeanQFunctionFactory, VectorEncoderFactory

LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


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


def policy_outputs(policy, obs: np.ndarray):
    with torch.no_grad():
        mean, logstd = policy(torch.from_numpy(obs))
    return mean, logstd


def gaussian_log_density(action: np.ndarray, mean: np.ndarray, logstd: np.ndarray) -> float:
    """``log N(action; tanh(mean), exp(logstd))`` summed over the action's entries, as a loop."""
    total = 0.0
    for a, m, ls in zip(action, mean, logstd):
        total += -0.5 * ((a - math.tanh(m)) / math.exp(ls)) ** 2 - ls - LOG_SQRT_2PI
    return total


@pytest.fixture
def small_config(small_encoder):
    def make(**changes):
        return AWACConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, **changes)

    return make


@pytest.mark.parametrize("n_critics,n_action_samples,lam", [(2, 1, 1.0), (3, 4, 0.3), (1, 3, 2.0)])
def test_one_update_matches_hand_computation(n_critics, n_action_samples, lam, hand_batch, build_algo, small_config, monkeypatch):
    """Critic loss from the target critics at the policy's next action; actor
    loss and gradients from the updated critics' advantages (min over the
    ensemble, baseline the mean over samples), weights B softmax(A / lam);
    Polyak-averaged target critics."""
    monkeypatch.setattr(awac_module, "gaussian_sample", fixed_gaussian_sample)
    offrl.seed(0)
    cfg = small_config(gamma=0.9, tau=0.1, n_critics=n_critics, n_action_samples=n_action_samples, lam=lam)
    algo = build_algo(cfg, perturb=["targ_q_function"], scale=0.3)
    nets = algo.modules
    batch = hand_batch()
    obs, act, nxt = batch.observations, batch.actions, batch.next_observations
    policy_before = copy.deepcopy(nets["policy"])
    targ_before = [p.detach().clone() for p in nets["targ_q_function"].parameters()]

    # critic: y_b = r_b + gamma^k_b (1 - d_b) min_j Q'_j(s'_b, a'_b)
    next_actions = fixed_gaussian_sample(*policy_outputs(policy_before, nxt)).numpy()
    next_q = q_values(nets["targ_q_function"], nxt, next_actions)
    pred = q_values(nets["q_function"], obs, act)
    expected_critic = 0.0
    for i in range(n_critics):
        for b in range(4):
            y = batch.rewards[b, 0] + 0.9 ** batch.intervals[b, 0] * (1.0 - batch.terminals[b, 0]) * next_q[:, b].min()
            expected_critic += (pred[i, b] - y) ** 2 / 4

    losses = algo.update(batch)

    # actor, against the updated critics
    mean, logstd = policy_outputs(policy_before, obs)
    sampled = fixed_gaussian_sample(mean, logstd, n_action_samples).numpy()  # (B, N, A)
    q_after = nets["q_function"]
    advantages = []
    for b in range(4):
        q_data = q_values(q_after, obs[b:b + 1], act[b:b + 1])[:, 0].min()
        baseline = np.mean([q_values(q_after, obs[b:b + 1], sampled[b, n][None])[:, 0].min() for n in range(n_action_samples)])
        advantages.append(q_data - baseline)
    exps = [math.exp(a / lam) for a in advantages]
    weights = [4 * e / sum(exps) for e in exps]
    log_probs = [gaussian_log_density(act[b], mean[b].numpy(), logstd[b].numpy()) for b in range(4)]
    expected_actor = -sum(w * lp for w, lp in zip(weights, log_probs)) / 4

    assert set(losses) == {"critic_loss", "actor_loss"}
    assert losses["critic_loss"] == pytest.approx(expected_critic, rel=1e-5, abs=1e-6)
    assert losses["actor_loss"] == pytest.approx(expected_actor, rel=1e-5, abs=1e-6)
    # the actor's gradient: the same loss by autograd, the weights held fixed
    x, a = torch.from_numpy(obs), torch.from_numpy(act)
    m, ls = policy_before(x)
    log_prob = (-0.5 * ((a - torch.tanh(m)) / ls.exp()) ** 2 - ls - LOG_SQRT_2PI).sum(dim=1)
    hand_loss = -(torch.tensor(weights, dtype=torch.float32) * log_prob).mean()
    grads = torch.autograd.grad(hand_loss, list(policy_before.parameters()))
    for grad, p in zip(grads, nets["policy"].parameters()):
        torch.testing.assert_close(p.grad, grad, rtol=1e-4, atol=1e-6)
    for old, targ, online in zip(targ_before, nets["targ_q_function"].parameters(), nets["q_function"].parameters()):
        torch.testing.assert_close(targ, 0.9 * old + 0.1 * online, rtol=1e-6, atol=1e-6)


def test_weights_have_mean_one_and_favour_better_actions(hand_batch, build_algo, small_config, monkeypatch):
    """B softmax(A / lam): mean 1 whatever lam; a smaller lam puts more of
    the weight on the action with the largest advantage."""
    monkeypatch.setattr(awac_module, "gaussian_sample", fixed_gaussian_sample)
    batch = hand_batch()
    x, a = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    top = []
    for lam in (10.0, 0.01):
        offrl.seed(0)  # the same networks for both
        algo = build_algo(small_config(lam=lam, n_action_samples=2))
        with torch.no_grad():
            mean, logstd = algo.modules["policy"](x)
            w = algo._advantage_weights(x, a, mean, logstd)
        assert w.shape == (4,)
        assert float(w.mean()) == pytest.approx(1.0, rel=1e-5)
        top.append(float(w.max()))
    assert top[0] < 1.5 < 3.5 < top[1]


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 5),
    n=st.integers(1, 4),
    n_critics=st.integers(1, 3),
    reduction=st.sampled_from(["min", "mean"]),
    tuple_obs=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_sampled_action_values_match_a_loop(batch, n, n_critics, reduction, tuple_obs, seed):
    """One critic call on the logged and sampled actions equals calling the
    ensemble once per (state, action) and reducing over its members."""
    torch.manual_seed(seed)
    shapes = [(3,), (2,)] if tuple_obs else (3,)
    q = MeanQFunctionFactory().create(DefaultEncoderFactory(), shapes, 2, n_critics, discrete=False)
    obs = [torch.randn(batch, 3), torch.randn(batch, 2)] if tuple_obs else torch.randn(batch, 3)
    actions, sampled = torch.rand(batch, 2) * 2 - 1, torch.rand(batch, n, 2) * 2 - 1
    with torch.no_grad():
        data_values, sampled_values = awac_module.sampled_action_values(q, obs, actions, sampled, reduction)
    assert data_values.shape == (batch,) and sampled_values.shape == (batch, n)

    def one(b: int, action: torch.Tensor) -> float:
        row = [o[b:b + 1] for o in obs] if tuple_obs else obs[b:b + 1]
        with torch.no_grad():
            members = q.expected(row, action[None])[:, 0, 0]
        return float(members.min() if reduction == "min" else members.mean())

    for b in range(batch):
        assert float(data_values[b]) == pytest.approx(one(b, actions[b]), rel=1e-5, abs=1e-6)
        for k in range(n):
            assert float(sampled_values[b, k]) == pytest.approx(one(b, sampled[b, k]), rel=1e-5, abs=1e-6)


def test_gaussian_sample_is_clipped_and_centred_on_tanh_mean():
    torch.manual_seed(0)
    mean = torch.tensor([[0.3, -2.0]]).expand(20000, -1)
    logstd = torch.log(torch.tensor([[0.1, 0.5]])).expand(20000, -1)
    draws = awac_module.gaussian_sample(mean, logstd)
    assert draws.shape == (20000, 2)
    assert float(draws.abs().max()) <= 1.0
    assert float(draws[:, 0].mean()) == pytest.approx(math.tanh(0.3), abs=0.005)
    assert float(draws[:, 0].std()) == pytest.approx(0.1, rel=0.05)
    assert float((draws[:, 1] == -1.0).float().mean()) > 0.3  # tanh(-2) = -0.96: much of the mass is clipped
    assert awac_module.gaussian_sample(mean[:3], logstd[:3], 5).shape == (3, 5, 2)


def test_defaults_mirror_d3rlpy():
    cfg = AWACConfig()
    assert (cfg.batch_size, cfg.gamma, cfg.actor_learning_rate, cfg.critic_learning_rate) == (1024, 0.99, 3e-4, 3e-4)
    assert (cfg.tau, cfg.lam, cfg.n_action_samples, cfg.n_critics) == (0.005, 1.0, 1, 2)
    assert list(cfg.get_params())[-4:] == ["tau", "lam", "n_action_samples", "n_critics"]


@pytest.mark.parametrize(
    "changes,match",
    [
        ({"lam": 0.0}, "lam"),
        ({"lam": float("inf")}, "lam"),
        ({"n_action_samples": 0}, "n_action_samples"),
        ({"n_action_samples": 1.5}, "n_action_samples"),
        ({"tau": 0.0}, "tau"),
        ({"tau": 1.5}, "tau"),
        ({"n_critics": 0}, "n_critics"),
        ({"actor_learning_rate": -1e-3}, "actor_learning_rate"),
    ],
)
def test_config_validation(changes, match):
    with pytest.raises(ValueError, match=match):
        AWACConfig(**changes)
    with pytest.raises(ValueError, match=match):
        AWACConfig().create().set_params(**changes)


def test_rejects_discrete_data(dataset_factory):
    with pytest.raises(ValueError, match="continuous"):
        AWACConfig(batch_size=8).create().build_with_dataset(dataset_factory("vector", discrete=True))


def test_predict_is_the_mean_and_sample_action_draws_around_it(build_algo, small_config):
    offrl.seed(0)
    algo = build_algo(small_config())
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    with torch.no_grad():
        expected = torch.tanh(algo.modules["policy"](torch.from_numpy(x))[0]).numpy()
    np.testing.assert_array_equal(algo.predict(x), expected)
    draws = np.stack([algo.sample_action(x) for _ in range(200)])
    assert draws.shape == (200, 6, 2) and np.abs(draws).max() <= 1.0
    assert not np.allclose(draws[0], draws[1])
    np.testing.assert_allclose(draws.mean(axis=0), np.clip(expected, -1, 1), atol=0.1)
    assert algo.has_stochastic_policy


def test_fit_then_fit_online_continues_from_the_offline_weights():
    """The finetuning path: offline AWAC, then fit_online on the same object
    with the offline data seeding the buffer; online training starts from
    the offline weights and moves them."""
    env = ContinuousCorridor(12)
    offrl.seed(0)
    dataset = RandomPolicyConfig().create().collect(env, n_steps=300, show_progress=False)
    enc = VectorEncoderFactory(hidden_units=[16])
    algo = AWACConfig(batch_size=16, actor_encoder_factory=enc, critic_encoder_factory=enc).create()
    quiet = dict(logger_adapter=NoopAdapterFactory(), show_progress=False)
    algo.fit(dataset, n_steps=30, n_steps_per_epoch=30, **quiet)
    positions = np.linspace(0.0, 1.0, 9, dtype=np.float32)[:, None]
    actions = np.linspace(-1.0, 1.0, 9, dtype=np.float32)[:, None]
    after_fit = (algo.predict(positions), algo.predict_value(positions, actions))
    at_first_step = []

    def record(algo, epoch, step):
        if step == 1:
            at_first_step.append((algo.predict(positions), algo.predict_value(positions, actions)))

    algo.fit_online(env, buffer=dataset, n_steps=40, update_start_step=5, callback=record, **quiet)
    for before, first in zip(after_fit, at_first_step[0]):
        np.testing.assert_array_equal(first, before)
    assert algo.grad_step == 30 + 35
    assert dataset.transition_count == 300 + 40
    assert not np.array_equal(algo.predict(positions), after_fit[0])
    assert not np.array_equal(algo.predict_value(positions, actions), after_fit[1])



def test_critics_move_to_sac_and_the_policy_copy_is_refused(build_algo, small_config, small_encoder, hand_batch):
    """AWAC's critic ensemble has SAC's layout (copy_q_function_from gives
    the same values); its policy (one learned std per action) does not, and
    the copy says so instead of loading part of it."""
    offrl.seed(0)
    awac = build_algo(small_config())
    awac.update(hand_batch())
    sac = build_algo(offrl.algos.SACConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
    sac.copy_q_function_from(awac)
    x = np.random.default_rng(2).normal(size=(5, 3)).astype(np.float32)
    a = np.random.default_rng(3).uniform(-1, 1, size=(5, 2)).astype(np.float32)
    np.testing.assert_array_equal(sac.predict_value(x, a), awac.predict_value(x, a))
    with pytest.raises(ValueError, match="policy of AWAC does not fit SAC"):
        sac.copy_policy_from(awac)

@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_learns_the_best_logged_action_on_the_one_step_problem(seed, fit_one_step_problem):
    """Logged actions uniform in [-1, 1], reward -(a - 0.5)^2: with lam=0.1
    the advantage-weighted regression target is a truncated Gaussian around
    0.5 (weighted mean about 0.49), so the greedy action goes there."""

    def make(factory):
        return AWACConfig(batch_size=64, lam=0.1, n_action_samples=4, actor_encoder_factory=factory, critic_encoder_factory=factory)

    prediction = fit_one_step_problem(make, seed=seed, n_steps=2000)  # about 4 s
    # (with d3rlpy's lam=1 the weighted target is about 0.2: the pull towards the data is strong)
    assert abs(prediction.mean() - 0.5) < 0.05, prediction.mean()
    assert np.quantile(np.abs(prediction - 0.5), 0.9) < 0.15, prediction
