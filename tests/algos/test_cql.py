"""CQL and DiscreteCQL: losses on hand-built batches (the conservative term
against a plain one-sample-at-a-time loop), the Lagrange multiplier,
learning, conservatism, config validation, copying between algorithms."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from hand_losses import discrete_batch, huber

import offrl
import offrl.algos.cql as cql_module
import offrl.algos.sac as sac_module
from offrl.algos.cql import CQLConfig, DiscreteCQLConfig
from offrl.algos.dqn import DQNConfig
from offrl.algos.sac import SACConfig
from offrl.dataset import MDPDataset
from offrl.models import QRQFunctionFactory, VectorEncoderFactory, plain_mlp


@pytest.fixture(autouse=True)
def _restore_switch():
    yield
    plain_mlp.plain_backward_enabled(True)


# ---------------------------------------------------------------- continuous
def test_cql_defaults_mirror_d3rlpy():
    c = CQLConfig()
    assert (c.batch_size, c.gamma, c.tau, c.n_critics) == (256, 0.99, 0.005, 2)
    assert (c.actor_learning_rate, c.critic_learning_rate, c.temp_learning_rate, c.alpha_learning_rate) == (1e-4, 3e-4, 1e-4, 1e-4)
    assert (c.initial_temperature, c.initial_alpha, c.alpha_threshold, c.conservative_weight) == (1.0, 1.0, 10.0, 5.0)
    assert (c.n_action_samples, c.soft_q_backup) == (10, False)


@pytest.mark.parametrize("soft_q_backup", [False, True])
def test_cql_losses_match_hand_computation(monkeypatch, soft_q_backup, small_encoder, hand_batch, fixed_sample, batch_tensors, build_algo):
    n, gamma, temp0, alpha0, weight, threshold, alpha_lr = 3, 0.9, 0.5, 0.7, 2.0, 1.5, 1e-2
    rng = np.random.default_rng(0)
    uniform = torch.tensor(rng.uniform(-1.0, 1.0, size=(4, n, 2)), dtype=torch.float32)
    monkeypatch.setattr(cql_module, "squashed_sample", fixed_sample)
    monkeypatch.setattr(sac_module, "squashed_sample", fixed_sample)
    monkeypatch.setattr(cql_module, "_uniform_actions", lambda batch, k, size, device: uniform.clone())
    plain_mlp.plain_backward_enabled(False)  # the actor's step through autograd: the fixed sample above reaches it
    offrl.seed(0)
    config = CQLConfig(
        actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, gamma=gamma, n_action_samples=n,
        initial_temperature=temp0, initial_alpha=alpha0, conservative_weight=weight, alpha_threshold=threshold,
        alpha_learning_rate=alpha_lr, soft_q_backup=soft_q_backup,
    )
    algo = build_algo(config, perturb=["targ_q_function"], scale=0.3)
    nets = algo.modules
    policy_before, q_before = copy.deepcopy(nets["policy"]), copy.deepcopy(nets["q_function"])
    targ_before = copy.deepcopy(nets["targ_q_function"])
    batch = hand_batch()
    obs, act, nxt, r, d, k = batch_tensors(batch)

    metrics = algo.update(batch)

    with torch.no_grad():
        mean, logstd = policy_before(nxt)
        if soft_q_backup:
            a_next, logp_next = fixed_sample(mean, logstd)
            next_value = targ_before.expected(nxt, a_next)[:, :, 0].min(dim=0).values - temp0 * logp_next
        else:
            next_value = targ_before.expected(nxt, torch.tanh(mean))[:, :, 0].min(dim=0).values
        y = r + gamma**k * (1 - d) * next_value
        pred = q_before.expected(obs, act)[:, :, 0]  # (E, B)
        td_loss = sum(((pred[i] - y) ** 2).mean() for i in range(2))

        # log-sum-exp estimate, one sampled action at a time
        a_s, logp_s = fixed_sample(*policy_before(obs), n)
        a_n, logp_n = fixed_sample(*policy_before(nxt), n)
        terms = [q_before.expected(obs, uniform[:, j])[:, :, 0] - 2 * math.log(0.5) for j in range(n)]
        terms += [q_before.expected(obs, a_s[:, j])[:, :, 0] - logp_s[:, j] for j in range(n)]
        terms += [q_before.expected(obs, a_n[:, j])[:, :, 0] - logp_n[:, j] for j in range(n)]
        lse = torch.log(torch.stack(terms).exp().sum(dim=0))  # (E, B)
        gaps = [weight * ((lse[i] - pred[i]).mean() - threshold) for i in range(2)]
        conservative = alpha0 * sum(gaps)
        alpha_loss = -alpha0 * sum(gaps) / 2

        a_pi, logp = fixed_sample(*policy_before(obs))
        # SAC's temperature step comes first: Adam moves log_temp by lr against its gradient's sign
        temp1 = temp0 * math.exp(config.temp_learning_rate * np.sign(float((logp - 2.0).mean())))
        actor_loss = (temp1 * logp - nets["q_function"].expected(obs, a_pi)[:, :, 0].min(dim=0).values).mean()

    assert metrics["conservative_loss"] == pytest.approx(float(conservative), rel=1e-5, abs=1e-5)
    assert metrics["critic_loss"] == pytest.approx(float(td_loss + conservative), rel=1e-5, abs=1e-5)
    assert metrics["alpha_loss"] == pytest.approx(float(alpha_loss), rel=1e-5, abs=1e-5)
    assert metrics["alpha"] == pytest.approx(alpha0, abs=1e-6)
    assert metrics["actor_loss"] == pytest.approx(float(actor_loss), rel=1e-5, abs=1e-5)
    assert metrics["temp"] == pytest.approx(temp1, rel=1e-6)
    assert set(metrics) == {"critic_loss", "actor_loss", "temp_loss", "temp", "alpha_loss", "alpha", "conservative_loss"}
    # Adam's first step moves log_alpha by lr, up while the gap exceeds the threshold
    step = float(nets["log_alpha"].log_value.detach()) - math.log(alpha0)
    assert step == pytest.approx(alpha_lr * np.sign(float(sum(gaps))), abs=1e-6)


def test_cql_evaluates_all_sampled_actions_in_one_critic_call(monkeypatch, small_encoder, hand_batch, build_algo):
    algo = build_algo(CQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, n_action_samples=7))
    plain_mlp.plain_backward_enabled(False)  # the actor's step through the critics' module call too (tests/algos/test_sac.py)
    q = algo.modules["q_function"]
    rows = []
    original = q.expected

    def counting(x, action=None):
        rows.append(x.shape[0])
        return original(x, action)

    monkeypatch.setattr(q, "expected", counting)
    algo.update(hand_batch())
    # the actor's call, and one call for the dataset's actions and every sampled action
    assert sorted(rows) == [4, 4 + 4 * 3 * 7]


@pytest.mark.parametrize("net", ["critic", "actor"])
def test_cql_keeps_calls_apart_when_batch_norm_would_mix_rows(monkeypatch, small_encoder, hand_batch, build_algo, net):
    norm = VectorEncoderFactory(hidden_units=[8], use_batch_norm=True)
    algo = build_algo(CQLConfig(actor_encoder_factory=norm if net == "actor" else small_encoder,
                                critic_encoder_factory=norm if net == "critic" else small_encoder, n_action_samples=3))
    rows: dict = {"q": [], "policy": []}
    for name in ("q_function", "policy"):
        module = algo.modules[name].encoder if name == "q_function" else algo.modules[name]  # every critic call encodes
        original = module.forward

        def counting(x, *args, original=original, key="q" if name == "q_function" else "policy"):
            rows[key].append(x.shape[0])
            return original(x, *args)

        monkeypatch.setattr(module, "forward", counting)
    algo.update(hand_batch())
    if net == "critic":  # the dataset's actions apart from the 4 * 3 * 3 proposals (and the actor's call)
        assert sorted(rows["q"]) == [4, 4, 4 * 3 * 3]
        assert sorted(rows["policy"]) == [4, 8]  # the policy has no batch norm: s and s' in one pass
    else:
        assert sorted(rows["q"]) == [4, 4 + 4 * 3 * 3]
        assert sorted(rows["policy"]) == [4, 4, 4]  # s' and s apart, then the actor's step


def test_cql_lagrange_multiplier_fixed_or_projected(small_encoder, hand_batch, build_algo):
    fixed = build_algo(CQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, alpha_learning_rate=0.0, initial_alpha=2.5))
    for _ in range(3):
        metrics = fixed.update(hand_batch())
    assert metrics["alpha"] == pytest.approx(2.5, rel=1e-6) and metrics["alpha_loss"] == 0.0
    assert "alpha_optim" not in fixed.optimizers

    learned = build_algo(CQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, alpha_threshold=-100.0, alpha_learning_rate=1.0))
    with torch.no_grad():
        learned.modules["log_alpha"].log_value.fill_(math.log(1e6) - 0.1)
    learned.update(hand_batch())  # the gap exceeds the threshold: alpha grows, up to the bound
    assert float(learned.modules["log_alpha"]().detach()) == pytest.approx(1e6, rel=1e-5)


@pytest.mark.parametrize("soft_q_backup", [False, True])
def test_cql_runs_with_quantile_critics(soft_q_backup, small_encoder, hand_batch, build_algo):
    algo = build_algo(CQLConfig(
        actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder, q_func_factory=QRQFunctionFactory(n_quantiles=5),
        soft_q_backup=soft_q_backup,
    ))
    for _ in range(2):
        metrics = algo.update(hand_batch())
    assert all(np.isfinite(v) for v in metrics.values())
    assert algo.predict_value(hand_batch().observations, hand_batch().actions).shape == (4,)


def test_cql_learns_best_logged_action_on_one_step_problem(one_step_dataset, fit_quietly):
    # weaker penalty than the default: with uniformly logged actions the
    # importance-sampled log-sum-exp digs a dip where a narrow policy sits
    offrl.seed(0)
    dataset, obs = one_step_dataset()
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    algo = CQLConfig(
        batch_size=64, actor_encoder_factory=encoder, critic_encoder_factory=encoder, actor_learning_rate=3e-4,
        initial_temperature=0.1, conservative_weight=1.0,
    ).create()
    algo.build_with_dataset(dataset)
    before = np.abs(algo.predict(obs[:1]) - 0.5).max()
    fit_quietly(algo, dataset, 1000)
    after = np.abs(algo.predict(obs[:1]) - 0.5).max()
    assert after < 0.25 and after < before


def test_cql_values_out_of_distribution_actions_lower(fit_quietly):
    # logged actions in [-0.2, 0.2], reward 1 for all of them
    offrl.seed(0)
    rng = np.random.default_rng(0)
    n = 512
    obs = np.zeros((n, 3), dtype=np.float32)
    actions = rng.uniform(-0.2, 0.2, size=(n, 1)).astype(np.float32)
    dataset = MDPDataset(obs, actions, np.ones(n, dtype=np.float32), np.ones(n, dtype=np.float32))
    encoder = VectorEncoderFactory(hidden_units=[64, 64])
    algo = CQLConfig(batch_size=64, actor_encoder_factory=encoder, critic_encoder_factory=encoder).create()
    fit_quietly(algo, dataset, 500)
    x = obs[:5]
    in_data = algo.predict_value(x, np.linspace(-0.15, 0.15, 5, dtype=np.float32)[:, None])
    out_of_data = algo.predict_value(x, np.array([[-1.0], [-0.9], [-0.8], [0.8], [0.9]], dtype=np.float32))
    assert out_of_data.max() < in_data.min() - 0.5


@pytest.mark.parametrize(
    "field,value",
    [
        ("actor_learning_rate", 0.0),
        ("critic_learning_rate", -1.0),
        ("temp_learning_rate", -1e-4),
        ("alpha_learning_rate", -1e-4),
        ("tau", 0.0),
        ("n_critics", 0),
        ("initial_temperature", -1.0),
        ("initial_alpha", 0.0),
        ("alpha_threshold", float("nan")),
        ("conservative_weight", -1.0),
        ("n_action_samples", 0),
        ("soft_q_backup", "yes"),
    ],
)
def test_cql_bad_config_values(field, value):
    with pytest.raises(ValueError, match=field):
        CQLConfig(**{field: value})


def test_copy_between_cql_and_sac(small_encoder, hand_batch, build_algo):
    offrl.seed(0)
    x, actions = hand_batch().observations, hand_batch().actions
    cql = build_algo(CQLConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
    sac = build_algo(SACConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder))
    cql.update(hand_batch())
    assert not np.allclose(sac.predict(x), cql.predict(x))
    sac.copy_policy_from(cql)
    sac.copy_q_function_from(cql)
    np.testing.assert_array_equal(sac.predict(x), cql.predict(x))
    np.testing.assert_array_equal(sac.predict_value(x, actions), cql.predict_value(x, actions))
    for a, b in zip(sac.modules["targ_q_function"].parameters(), cql.modules["targ_q_function"].parameters()):
        assert torch.equal(a, b)
    sac.copy_policy_optim_from(cql)
    sac.copy_q_function_optim_from(cql)
    sac.update(hand_batch())  # the copied optimizer states fit
    cql.copy_policy_from(sac)
    np.testing.assert_array_equal(sac.predict(x), cql.predict(x))


# ------------------------------------------------------------------ discrete
def test_discrete_cql_defaults_mirror_d3rlpy():
    c = DiscreteCQLConfig()
    assert (c.batch_size, c.gamma, c.learning_rate, c.n_critics, c.target_update_interval, c.alpha) == (32, 0.99, 6.25e-5, 1, 8000, 1.0)


def test_discrete_cql_loss_matches_hand_computation(small_encoder, build_algo):
    offrl.seed(0)
    alpha, gamma = 0.7, 0.9
    config = DiscreteCQLConfig(encoder_factory=small_encoder, gamma=gamma, n_critics=2, alpha=alpha)
    algo = build_algo(config, action_size=3, observation_shape=(2,), perturb=["targ_q_function"], scale=0.3)
    q, targ = algo.modules["q_function"], algo.modules["targ_q_function"]
    batch = discrete_batch()
    with torch.no_grad():
        q_now = q.expected(torch.from_numpy(batch.observations)).numpy()  # (E, B, A)
        q_next_online = q.expected(torch.from_numpy(batch.next_observations)).numpy()
        q_next_target = targ.expected(torch.from_numpy(batch.next_observations)).numpy()
    rows, a = np.arange(4), batch.actions[:, 0]
    a_star = q_next_online.mean(axis=0).argmax(axis=1)  # Double DQN: the online ensemble chooses
    next_value = q_next_target[:, rows, a_star].min(axis=0)
    y = batch.rewards[:, 0] + gamma ** batch.intervals[:, 0] * (1 - batch.terminals[:, 0]) * next_value
    td = sum(huber(q_now[i, rows, a] - y).mean() for i in range(2))
    conservative = sum((np.log(np.exp(q_now[i]).sum(axis=1)) - q_now[i, rows, a]).mean() for i in range(2))
    metrics = algo.update(batch)
    assert metrics["td_loss"] == pytest.approx(float(td), rel=1e-5, abs=1e-5)
    assert metrics["conservative_loss"] == pytest.approx(float(conservative), rel=1e-5, abs=1e-5)
    assert metrics["loss"] == pytest.approx(float(td + alpha * conservative), rel=1e-5, abs=1e-5)


def test_discrete_cql_conservative_term_with_quantile_critics(small_encoder, build_algo):
    offrl.seed(0)
    config = DiscreteCQLConfig(encoder_factory=small_encoder, q_func_factory=QRQFunctionFactory(n_quantiles=4), alpha=0.5)
    algo = build_algo(config, action_size=3, observation_shape=(2,))
    batch = discrete_batch()
    with torch.no_grad():
        q_now = algo.modules["q_function"].expected(torch.from_numpy(batch.observations))[0].numpy()
    rows, a = np.arange(4), batch.actions[:, 0]
    conservative = (np.log(np.exp(q_now).sum(axis=1)) - q_now[rows, a]).mean()
    metrics = algo.update(batch)
    assert metrics["conservative_loss"] == pytest.approx(float(conservative), rel=1e-5, abs=1e-5)
    assert metrics["loss"] == pytest.approx(metrics["td_loss"] + 0.5 * metrics["conservative_loss"], rel=1e-5, abs=1e-5)


def _chain_dataset(n_states: int = 5, n_episodes: int = 200, seed: int = 0) -> MDPDataset:
    """Random-walk logs of a chain: actions 0 = left, 1 = right; stepping off
    the left end ends the episode with reward 0, reaching the right end
    ends it with reward 1."""
    rng = np.random.default_rng(seed)
    obs, actions, rewards, terminals = [], [], [], []
    for _ in range(n_episodes):
        state = int(rng.integers(0, n_states - 1))
        while True:
            action = int(rng.integers(0, 2))
            obs.append(np.eye(n_states, dtype=np.float32)[state])
            actions.append(action)
            state += 1 if action == 1 else -1
            rewards.append(1.0 if state == n_states - 1 else 0.0)
            done = state in (-1, n_states - 1)
            terminals.append(float(done))
            if done:
                break
    return MDPDataset(np.stack(obs), np.array(actions), np.array(rewards, dtype=np.float32), np.array(terminals, dtype=np.float32), action_size=2)


def test_discrete_cql_chooses_right_on_a_chain(fit_quietly):
    offrl.seed(0)
    dataset = _chain_dataset()
    algo = DiscreteCQLConfig(
        encoder_factory=VectorEncoderFactory(hidden_units=[32]), learning_rate=1e-3, gamma=0.9, target_update_interval=50,
    ).create()
    fit_quietly(algo, dataset, 1500)
    states = np.eye(5, dtype=np.float32)[:4]
    np.testing.assert_array_equal(algo.predict(states), np.ones(4, dtype=np.int64))
    values = algo.predict_value(states, np.ones(4, dtype=np.int64))
    assert np.all(np.diff(values) > 0), "values grow towards the reward"


@pytest.mark.parametrize("field,value", [("alpha", -1.0), ("alpha", float("nan")), ("learning_rate", 0.0), ("n_critics", 0), ("target_update_interval", 0)])
def test_discrete_cql_bad_config_values(field, value):
    with pytest.raises(ValueError, match=field):
        DiscreteCQLConfig(**{field: value})


def test_copy_from_discrete_cql_to_dqn(small_encoder, build_algo):
    offrl.seed(0)
    cql = build_algo(DiscreteCQLConfig(encoder_factory=small_encoder, learning_rate=1e-2), action_size=3, observation_shape=(2,))
    dqn = build_algo(DQNConfig(encoder_factory=small_encoder), action_size=3, observation_shape=(2,))
    for _ in range(3):
        cql.update(discrete_batch())
    x, actions = discrete_batch().observations, discrete_batch().actions[:, 0]
    dqn.copy_q_function_from(cql)
    dqn.copy_q_function_optim_from(cql)
    np.testing.assert_array_equal(dqn.predict(x), cql.predict(x))
    np.testing.assert_array_equal(dqn.predict_value(x, actions), cql.predict_value(x, actions))
    dqn.update(discrete_batch())
    sac = build_algo(SACConfig(actor_encoder_factory=small_encoder, critic_encoder_factory=small_encoder), action_size=3, observation_shape=(2,))
    with pytest.raises(ValueError, match="Q-function"):
        sac.copy_q_function_from(cql)
