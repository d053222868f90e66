"""ReBRAC: d3rlpy's defaults, the critic target's and the actor's
behaviour-cloning penalties on a hand-built batch (as plain loops), the
delayed policy update, config values and a learning check."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

import offrl
from offrl.algos import ReBRACConfig, TD3Config
from offrl.models import QRQFunctionFactory

TARGETS = ("targ_q_function", "targ_policy")
NEXT_ACTIONS = np.array([[0.4, -0.6], [0.0, 0.0], [-0.8, 0.9], [0.2, 0.1]], dtype=np.float32)


@pytest.fixture
def small_config(small_encoder):
    def make(**changes) -> ReBRACConfig:
        return ReBRACConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, **changes)

    return make


def test_rebrac_defaults_mirror_d3rlpy():
    c = ReBRACConfig()
    assert ReBRACConfig.get_type() == "rebrac"
    assert (c.batch_size, c.gamma, c.tau, c.n_critics) == (1024, 0.99, 0.005, 2)
    assert (c.actor_learning_rate, c.critic_learning_rate) == (1e-3, 1e-3)
    assert (c.target_smoothing_sigma, c.target_smoothing_clip, c.update_actor_interval) == (0.2, 0.5, 2)
    assert (c.actor_beta, c.critic_beta) == (0.001, 0.01)


@pytest.mark.parametrize("n_critics", [1, 2])
def test_rebrac_losses_match_hand_computation(n_critics, hand_batch, build_algo, small_config):
    gamma, actor_beta, critic_beta = 0.9, 0.3, 0.7
    offrl.seed(0)
    algo = build_algo(
        small_config(gamma=gamma, actor_beta=actor_beta, critic_beta=critic_beta, n_critics=n_critics, target_smoothing_sigma=0.0),
        perturb=TARGETS, scale=0.3,
    )
    batch = dataclasses.replace(hand_batch(), next_actions=NEXT_ACTIONS)
    nets = algo.modules
    q_before, targ_q, targ_policy, policy = (copy.deepcopy(nets[k]) for k in ("q_function", "targ_q_function", "targ_policy", "policy"))

    losses = algo.update(batch)

    obs, act, nxt = (torch.from_numpy(a) for a in (batch.observations, batch.actions, batch.next_observations))
    with torch.no_grad():
        a_next = targ_policy(nxt).numpy()  # sigma = 0: no smoothing noise
        next_q = targ_q.expected(nxt, torch.from_numpy(a_next)).numpy()[:, :, 0]  # (E, B)
        pred = q_before.expected(obs, act).numpy()[:, :, 0]
        pi = policy(obs)
        q_pi = nets["q_function"].expected(obs, pi).numpy()[:, :, 0]  # the critic after its step
    pi = pi.numpy()
    critic_loss = 0.0
    for i in range(n_critics):
        for b in range(4):
            penalty = sum((a_next[b, j] - NEXT_ACTIONS[b, j]) ** 2 for j in range(2))
            y = batch.rewards[b, 0] + gamma ** batch.intervals[b, 0] * (1 - batch.terminals[b, 0]) * (
                min(next_q[e, b] for e in range(n_critics)) - critic_beta * penalty
            )
            critic_loss += (pred[i, b] - y) ** 2 / 4
    q_min = [min(q_pi[e, b] for e in range(n_critics)) for b in range(4)]
    lam = 1.0 / (sum(abs(v) for v in q_min) / 4)
    actor_loss = sum(-lam * q_min[b] + actor_beta * sum((pi[b, j] - batch.actions[b, j]) ** 2 for j in range(2)) for b in range(4)) / 4

    assert losses["critic_loss"] == pytest.approx(critic_loss, rel=1e-5, abs=1e-6)
    assert losses["actor_loss"] == pytest.approx(actor_loss, rel=1e-5, abs=1e-6)


def test_rebrac_with_zero_betas_is_td3_with_the_minimum_critic(hand_batch, build_algo, small_config, small_encoder):
    # beta_2 = 0 leaves TD3's critic target; the critic steps then agree exactly
    results = []
    for config in (
        small_config(actor_beta=0.0, critic_beta=0.0, n_critics=1),
        TD3Config(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, n_critics=1),
    ):
        offrl.seed(3)
        algo = build_algo(config)
        offrl.seed(4)
        results.append(algo.update(dataclasses.replace(hand_batch(), next_actions=NEXT_ACTIONS))["critic_loss"])
    assert results[0] == results[1]


def test_rebrac_updates_the_policy_every_update_actor_interval(hand_batch, build_algo, small_config):
    algo = build_algo(small_config(update_actor_interval=3))
    before = [p.detach().clone() for p in algo.modules["policy"].parameters()]
    changed = []
    for _ in range(4):
        algo.update(hand_batch())
        now = [p.detach().clone() for p in algo.modules["policy"].parameters()]
        changed.append(any(not torch.equal(a, b) for a, b in zip(before, now)))
        before = now
    assert changed == [True, False, False, True]


def test_rebrac_runs_with_quantile_critics(hand_batch, build_algo, small_config):
    algo = build_algo(small_config(q_func_factory=QRQFunctionFactory(n_quantiles=4)))
    for _ in range(2):
        losses = algo.update(dataclasses.replace(hand_batch(), next_actions=NEXT_ACTIONS))
    assert all(np.isfinite(v) for v in losses.values())


@pytest.mark.parametrize(
    "field,value",
    [
        ("actor_beta", -0.1),
        ("critic_beta", -1.0),
        ("update_actor_interval", 0),
        ("tau", 0.0),
        ("batch_size", 0),
        ("n_critics", 0),
        ("target_smoothing_sigma", -1.0),
        ("actor_learning_rate", 0.0),
    ],
)
def test_rebrac_bad_config_values(field, value):
    with pytest.raises(ValueError, match=field):
        ReBRACConfig(**{field: value})


@pytest.mark.slow
def test_rebrac_learns_best_logged_action_on_one_step_problem(fit_one_step_problem):
    actions = fit_one_step_problem(
        lambda encoder: ReBRACConfig(batch_size=64, actor_encoder_factory=encoder, critic_encoder_factory=encoder), 0, 1500
    )
    assert np.abs(np.median(actions) - 0.5) < 0.15
