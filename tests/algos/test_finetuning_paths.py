"""Finetuning paths users take with CalQL, ReBRAC and TD3: offline fit then
``fit_online`` (continuing from the fitted weights; CalQL's online batches
still bring exact returns-to-go), and ``copy_policy_from`` /
``copy_q_function_from`` between compatible algorithms (TD3+BC -> TD3,
CQL -> CalQL) with equal predictions after the copy, and a clear error
between incompatible ones."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from envs import ContinuousCorridor, Corridor

import offrl
from offrl.algos import CalQLConfig, CQLConfig, DQNConfig, RandomPolicyConfig, ReBRACConfig, SACConfig, TD3Config, TD3PlusBCConfig
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory

ENC = VectorEncoderFactory(hidden_units=[16])
POSITIONS = np.linspace(0.0, 1.0, 9, dtype=np.float32)[:, None]
ACTIONS = np.linspace(-1.0, 1.0, 9, dtype=np.float32)[:, None]
GAMMA = 0.9


def quiet(**kwargs):
    return dict(logger_adapter=NoopAdapterFactory(), show_progress=False, **kwargs)


def continuous_dataset(n_steps: int = 300):
    offrl.seed(0)
    return RandomPolicyConfig().create().collect(ContinuousCorridor(12), n_steps=n_steps, show_progress=False)


def actor_critic(config_class, **changes):
    return config_class(batch_size=16, actor_encoder_factory=ENC, critic_encoder_factory=ENC, **changes).create()


def state_dicts_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def fit_offline(algo, dataset, n_steps: int) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="CalQL: .* did not end in a terminal state")  # timeouts: see test_calql
        algo.fit(dataset, n_steps=n_steps, **quiet())


# ------------------------------------------------------- offline then online
def test_calql_offline_then_online_with_exact_returns_to_go():
    dataset = continuous_dataset()
    algo = actor_critic(CalQLConfig, gamma=GAMMA)
    fit_offline(algo, dataset, 20)
    fitted = algo.predict(POSITIONS)
    first_online = []
    checked = []
    preprocess = algo.preprocess_batch

    def checking(batch):
        torch_batch = preprocess(batch)
        expected = [sum(GAMMA**k * float(r) for k, r in enumerate(batch.rewards_to_go[i][:, 0])) for i in range(len(batch))]
        np.testing.assert_allclose(torch_batch.returns_to_go.numpy()[:, 0], expected, rtol=1e-5, atol=1e-5)
        checked.append(len(batch))
        return torch_batch

    def record(algo, epoch, step):
        if step == 1:
            first_online.append(algo.predict(POSITIONS))

    algo.preprocess_batch = checking
    algo.fit_online(ContinuousCorridor(12), buffer=dataset, n_steps=30, update_start_step=5, callback=record, **quiet())
    np.testing.assert_array_equal(first_online[0], fitted)  # online starts where offline stopped
    assert algo.grad_step == 20 + 25 and len(checked) == 25
    assert dataset.transition_count == 300 + 30
    assert not np.array_equal(algo.predict(POSITIONS), fitted)


def test_rebrac_offline_then_online():
    dataset = continuous_dataset()
    algo = actor_critic(ReBRACConfig)
    algo.fit(dataset, n_steps=20, **quiet())
    fitted, values = algo.predict(POSITIONS), algo.predict_value(POSITIONS, ACTIONS)
    first_online = []

    def record(algo, epoch, step):
        if step == 1:
            first_online.append((algo.predict(POSITIONS), algo.predict_value(POSITIONS, ACTIONS)))

    results = algo.fit_online(ContinuousCorridor(12), buffer=dataset, n_steps=30, update_start_step=5, callback=record, **quiet())
    np.testing.assert_array_equal(first_online[0][0], fitted)
    np.testing.assert_array_equal(first_online[0][1], values)
    assert algo.grad_step == 20 + 25
    assert all(np.isfinite(v) for _, metrics in results for k, v in metrics.items() if k.endswith("loss"))
    assert not np.array_equal(algo.predict_value(POSITIONS, ACTIONS), values)


# --------------------------------------------------------------- copying
def test_td3_plus_bc_to_td3_copies_policy_targets_and_critics():
    dataset = continuous_dataset()
    source = actor_critic(TD3PlusBCConfig)
    source.fit(dataset, n_steps=10, **quiet())
    target = actor_critic(TD3Config)
    env = ContinuousCorridor(12)
    target.build_with_env(env)
    target.copy_policy_from(source)
    target.copy_q_function_from(source)
    np.testing.assert_array_equal(target.predict(POSITIONS), source.predict(POSITIONS))
    np.testing.assert_array_equal(target.predict_value(POSITIONS, ACTIONS), source.predict_value(POSITIONS, ACTIONS))
    for name in ("targ_policy", "targ_q_function"):  # finetuning bootstraps from the source's targets, not random ones
        assert state_dicts_equal(target.modules[name], source.modules[name])
    target.copy_policy_optim_from(source)
    target.copy_q_function_optim_from(source)
    target.fit_online(env, n_steps=40, update_start_step=10, **quiet())
    assert target.grad_step > 0 and not np.array_equal(target.predict(POSITIONS), source.predict(POSITIONS))


def test_a_policy_without_target_fills_the_target_policy():
    dataset = continuous_dataset()
    source = offrl.algos.BCConfig(batch_size=16, encoder_factory=ENC).create()
    source.fit(dataset, n_steps=5, **quiet())
    target = actor_critic(TD3Config)
    target.build_with_env(ContinuousCorridor(12))
    target.copy_policy_from(source)
    np.testing.assert_array_equal(target.predict(POSITIONS), source.predict(POSITIONS))
    assert state_dicts_equal(target.modules["targ_policy"], target.modules["policy"])


def test_cql_to_calql():
    dataset = continuous_dataset()
    cql = actor_critic(CQLConfig)
    cql.fit(dataset, n_steps=10, **quiet())
    calql = actor_critic(CalQLConfig)
    env = ContinuousCorridor(12)
    calql.build_with_env(env)
    calql.copy_policy_from(cql)
    calql.copy_q_function_from(cql)
    np.testing.assert_array_equal(calql.predict(POSITIONS), cql.predict(POSITIONS))
    np.testing.assert_array_equal(calql.predict_value(POSITIONS, ACTIONS), cql.predict_value(POSITIONS, ACTIONS))
    assert state_dicts_equal(calql.modules["targ_q_function"], cql.modules["targ_q_function"])
    calql.fit_online(env, n_steps=40, update_start_step=10, **quiet())
    assert calql.grad_step > 0  # updates start once the fresh buffer holds a batch
    assert not np.array_equal(calql.predict_value(POSITIONS, ACTIONS), cql.predict_value(POSITIONS, ACTIONS))


def test_incompatible_copies_say_what_does_not_fit():
    env = ContinuousCorridor(12)
    td3 = actor_critic(TD3Config)
    sac = actor_critic(SACConfig)
    wide = TD3Config(batch_size=16, actor_encoder_factory=VectorEncoderFactory(hidden_units=[32]),
                     critic_encoder_factory=VectorEncoderFactory(hidden_units=[32]), n_critics=3).create()
    for algo in (td3, sac, wide):
        algo.build_with_env(env)
    with pytest.raises(ValueError, match="the policy of SAC does not fit TD3's"):
        td3.copy_policy_from(sac)  # a Gaussian policy is not a deterministic one
    with pytest.raises(ValueError, match="the policy of TD3 does not fit TD3's .*encoders"):
        td3.copy_policy_from(wide)
    with pytest.raises(ValueError, match="the Q-function of TD3 does not fit TD3's .*n_critics"):
        td3.copy_q_function_from(wide)
    dqn = DQNConfig(batch_size=16, encoder_factory=ENC).create()
    dqn.build_with_env(Corridor(5, 12))
    with pytest.raises(ValueError, match="DQN"):
        td3.copy_policy_from(dqn)  # DQN has no policy network

