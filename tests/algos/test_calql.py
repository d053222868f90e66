"""CalQL: the returns-to-go a batch brings (against a per-step loop, with and
without a reward scaler), the clipped conservative term against a hand
computation, CQL unchanged when the bound never binds, the checks on the
dataset and the batch, config values and a learning check."""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings

import numpy as np
import pytest
import torch

import offrl
import offrl.algos.cql as cql_module
import offrl.algos.sac as sac_module
from offrl.algos import CalQLConfig, CQLConfig
from offrl.dataset import MDPDataset
from offrl.dataset.batch import RewardsToGo
from offrl.preprocessing import MultiplyRewardScaler

GAMMA = 0.9
#: remaining rewards of the four hand-batch transitions and their discounted sums
REMAINING = [[5.0], [-5.0], [0.1, -0.2], [0.5, 0.0, 1.0]]
RETURNS = [5.0, -5.0, 0.1 - 0.2 * GAMMA, 0.5 + 1.0 * GAMMA**2]


def with_returns(batch):
    return dataclasses.replace(batch, rewards_to_go=RewardsToGo.from_arrays([np.array(r) for r in REMAINING]))


def test_calql_config_is_cqls_with_d3rlpys_name():
    c = CalQLConfig()
    assert CalQLConfig.get_type() == "cal_ql"
    assert dataclasses.asdict(c) == dataclasses.asdict(CQLConfig())
    assert c.create().need_returns_to_go and not CQLConfig().create().need_returns_to_go


@pytest.mark.parametrize("scale", [None, 2.0])
def test_batch_returns_to_go_are_discounted_sums_of_scaled_rewards(scale, small_encoder, hand_batch, build_algo):
    config = CalQLConfig(
        actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, gamma=GAMMA,
        reward_scaler=None if scale is None else MultiplyRewardScaler(scale),
    )
    algo = build_algo(config)
    returns = algo.preprocess_batch(with_returns(hand_batch())).returns_to_go
    expected = np.array(RETURNS) * (1.0 if scale is None else scale)
    np.testing.assert_allclose(returns.numpy()[:, 0], expected, rtol=1e-6, atol=1e-6)
    # CQL does not ask for them
    cql = build_algo(CQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
    assert cql.preprocess_batch(with_returns(hand_batch())).returns_to_go is None


def test_returns_to_go_from_a_dataset_match_a_loop_over_episodes(small_encoder, fit_quietly):
    # observation = (episode, step): every sampled transition says where it comes from
    rng = np.random.default_rng(3)
    lengths = [4, 1, 6, 3]
    rewards = [rng.normal(size=n).astype(np.float32) for n in lengths]
    obs = np.concatenate([np.stack([np.full(n, e), np.arange(n), np.zeros(n)], axis=1) for e, n in enumerate(lengths)]).astype(np.float32)
    terminals = np.concatenate([np.eye(1, n, n - 1)[0] for n in lengths]).astype(np.float32)
    actions = rng.uniform(-1, 1, size=(sum(lengths), 2)).astype(np.float32)
    dataset = MDPDataset(obs, actions, np.concatenate(rewards), terminals)
    algo = CalQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, gamma=GAMMA).create()
    algo.build_with_dataset(dataset)
    batch = dataset.sample_transition_batch(64)
    got = algo.preprocess_batch(batch).returns_to_go.numpy()[:, 0]
    for row, value in zip(batch.observations, got):
        episode, step = int(row[0]), int(row[1])
        expected = 0.0
        for k, r in enumerate(rewards[episode][step:]):
            expected += GAMMA**k * float(r)
        assert value == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_calql_losses_match_hand_computation(monkeypatch, small_encoder, hand_batch, fixed_sample, batch_tensors, build_algo):
    n, temp0, alpha0, weight, threshold = 3, 0.5, 0.7, 2.0, 1.5
    rng = np.random.default_rng(0)
    uniform = torch.tensor(rng.uniform(-1.0, 1.0, size=(4, n, 2)), dtype=torch.float32)
    monkeypatch.setattr(cql_module, "squashed_sample", fixed_sample)
    monkeypatch.setattr(sac_module, "squashed_sample", fixed_sample)
    monkeypatch.setattr(cql_module, "_uniform_actions", lambda batch, k, size, device: uniform.clone())
    offrl.seed(0)
    config = CalQLConfig(
        actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, gamma=GAMMA, n_action_samples=n,
        initial_temperature=temp0, initial_alpha=alpha0, conservative_weight=weight, alpha_threshold=threshold,
    )
    algo = build_algo(config, perturb=["targ_q_function"], scale=0.3)
    nets = algo.modules
    policy_before, q_before = copy.deepcopy(nets["policy"]), copy.deepcopy(nets["q_function"])
    targ_before = copy.deepcopy(nets["targ_q_function"])
    batch = with_returns(hand_batch())
    obs, act, nxt, r, d, k = batch_tensors(batch)
    bound = torch.tensor(RETURNS, dtype=torch.float32)

    metrics = algo.update(batch)

    with torch.no_grad():
        mean, _ = policy_before(nxt)
        y = r + GAMMA**k * (1 - d) * targ_before.expected(nxt, torch.tanh(mean))[:, :, 0].min(dim=0).values
        pred = q_before.expected(obs, act)[:, :, 0]  # (E, B)
        td_loss = sum(((pred[i] - y) ** 2).mean() for i in range(2))
        a_s, logp_s = fixed_sample(*policy_before(obs), n)
        a_n, logp_n = fixed_sample(*policy_before(nxt), n)
        clipped = 0
        lse = torch.zeros(2, 4)
        for i in range(2):
            for b in range(4):
                total = 0.0
                for j in range(n):
                    total += math.exp(float(q_before.expected(obs[b : b + 1], uniform[b : b + 1, j])[i, 0, 0]) - 2 * math.log(0.5))
                    for actions, logp in ((a_s, logp_s), (a_n, logp_n)):
                        value = float(q_before.expected(obs[b : b + 1], actions[b : b + 1, j])[i, 0, 0])
                        clipped += value < float(bound[b])
                        total += math.exp(max(value, float(bound[b])) - float(logp[b, j]))
                lse[i, b] = math.log(total)
        conservative = alpha0 * sum(weight * ((lse[i] - pred[i]).mean() - threshold) for i in range(2))

    assert 0 < clipped < 2 * 2 * 4 * n  # the bound binds for some sampled values, not all
    assert metrics["conservative_loss"] == pytest.approx(float(conservative), rel=1e-5, abs=1e-5)
    assert metrics["critic_loss"] == pytest.approx(float(td_loss + conservative), rel=1e-5, abs=1e-5)


def test_calql_is_cql_when_the_returns_never_bind(small_encoder, hand_batch, build_algo):
    batch = dataclasses.replace(hand_batch(), rewards_to_go=RewardsToGo.from_arrays([np.array([-1e6])] * 4))
    results = []
    for config_class in (CQLConfig, CalQLConfig):
        offrl.seed(7)
        algo = build_algo(config_class(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
        offrl.seed(8)
        results.append(algo.update(batch))
    assert results[0] == results[1]


def test_calql_refuses_a_batch_without_returns_to_go(small_encoder, hand_batch, build_algo):
    algo = build_algo(CalQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
    with pytest.raises(ValueError, match="rewards_to_go"):
        algo.update(hand_batch())  # a hand-made batch that says nothing of the remaining rewards
    torch_batch = algo.preprocess_batch(with_returns(hand_batch()))
    with pytest.raises(ValueError, match="CalQL needs returns_to_go"):
        algo.update(dataclasses.replace(torch_batch, returns_to_go=None))


def test_calql_warns_naming_truncated_episodes(small_encoder, fit_quietly):
    rng = np.random.default_rng(0)
    n = 40
    terminals = np.zeros(n, dtype=np.float32)
    timeouts = np.zeros(n, dtype=np.float32)
    terminals[9] = 1.0  # episode 0 ends in a terminal state
    timeouts[[19, 29, 39]] = 1.0  # episodes 1, 2, 3 are cut by a time limit
    dataset = MDPDataset(
        rng.normal(size=(n, 3)).astype(np.float32), rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
        rng.normal(size=n).astype(np.float32), terminals, timeouts=timeouts,
    )
    algo = CalQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, batch_size=8).create()
    with pytest.warns(UserWarning, match=r"3 of 4 episodes .*episodes 1 \(10 steps\), 2 \(10 steps\), 3 \(10 steps\).*assume zero reward"):
        fit_quietly(algo, dataset, 2)
    terminal_only = MDPDataset(
        rng.normal(size=(n, 3)).astype(np.float32), rng.uniform(-1, 1, size=(n, 2)).astype(np.float32),
        rng.normal(size=n).astype(np.float32), np.eye(1, n, n - 1)[0].astype(np.float32),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        CalQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, batch_size=8).create().build_with_dataset(terminal_only)


@pytest.mark.parametrize(
    "field,value",
    [("tau", 0.0), ("n_action_samples", 0), ("initial_alpha", 0.0), ("conservative_weight", -1.0), ("alpha_learning_rate", -1.0)],
)
def test_calql_bad_config_values(field, value):
    with pytest.raises(ValueError, match=field):
        CalQLConfig(**{field: value})


@pytest.mark.slow
def test_calql_learns_best_logged_action_on_one_step_problem(one_step_dataset, fit_quietly):
    from offrl.models import VectorEncoderFactory

    offrl.seed(0)
    dataset, obs = one_step_dataset()
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    algo = CalQLConfig(
        batch_size=64, actor_encoder_factory=encoder, critic_encoder_factory=encoder, actor_learning_rate=3e-4,
        initial_temperature=0.1, conservative_weight=1.0,
    ).create()
    algo.build_with_dataset(dataset)
    before = np.abs(algo.predict(obs[:1]) - 0.5).max()
    fit_quietly(algo, dataset, 1000)
    after = np.abs(algo.predict(obs[:1]) - 0.5).max()
    assert after < 0.25 and after < before
