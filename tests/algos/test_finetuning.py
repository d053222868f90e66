"""Finetuning: offline fit then fit_online on the same algorithm, after
load_learnable, and across algorithms with copy_*_from (weights and
optimizer states); scalers fitted offline keep applying online."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from envs import ContinuousCorridor, Corridor

import offrl
from offrl.algos import (
    CQLConfig,
    DiscreteCQLConfig,
    DiscreteRandomPolicyConfig,
    DQNConfig,
    RandomPolicyConfig,
    SACConfig,
)
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.preprocessing import StandardRewardScaler
from offrl.serialization import load_learnable

NOOP = NoopAdapterFactory()
ENC = VectorEncoderFactory(hidden_units=[16])
LENGTH = 5
STATES = np.eye(LENGTH, dtype=np.float32)
POSITIONS = np.linspace(0.0, 1.0, 9, dtype=np.float32)[:, None]


def quiet(**kwargs):
    return dict(logger_adapter=NOOP, show_progress=False, **kwargs)


def corridor_dataset(n_steps: int = 300):
    offrl.seed(0)
    return DiscreteRandomPolicyConfig().create().collect(Corridor(LENGTH, 12), n_steps=n_steps, show_progress=False)


def continuous_dataset(n_steps: int = 300):
    offrl.seed(0)
    return RandomPolicyConfig().create().collect(ContinuousCorridor(12), n_steps=n_steps, show_progress=False)


def all_q_values(algo):
    return np.stack([algo.predict_value(STATES, np.full(LENGTH, a)) for a in range(2)], axis=1)


def state_dicts_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def adam_state(algo, name):
    state = algo.optimizers[name].state_dict()["state"]
    return [{k: v.clone() for k, v in s.items()} for _, s in sorted(state.items())]


def assert_adam_states_equal(a, b):
    assert len(a) == len(b) > 0
    for sa, sb in zip(a, b):
        for key in sa:
            torch.testing.assert_close(sa[key], sb[key], rtol=0, atol=0)


def test_fit_then_fit_online_continues_from_the_fitted_weights():
    dataset = corridor_dataset()
    algo = DQNConfig(batch_size=16, encoder_factory=ENC, learning_rate=1e-3).create()
    algo.fit(dataset, n_steps=30, **quiet())
    after_fit = all_q_values(algo)
    at_first_step = []

    def record(algo, epoch, step):
        if step == 1:
            at_first_step.append(all_q_values(algo))

    # the offline data seeds the online buffer, so updates can start at once
    algo.fit_online(Corridor(LENGTH, 12), buffer=dataset, n_steps=40, update_start_step=5, callback=record, **quiet())
    np.testing.assert_array_equal(at_first_step[0], after_fit)
    assert algo.grad_step == 30 + 35  # offline steps, then one per online step after step 5
    assert dataset.transition_count == 300 + 40
    assert not np.array_equal(all_q_values(algo), after_fit)


def test_load_learnable_then_fit_online(tmp_path):
    dataset = corridor_dataset()
    algo = DQNConfig(batch_size=16, encoder_factory=ENC, reward_scaler=StandardRewardScaler()).create()
    algo.fit(dataset, n_steps=20, **quiet())
    path = str(tmp_path / "dqn.d3")
    algo.save(path)
    loaded = load_learnable(path)
    np.testing.assert_array_equal(all_q_values(loaded), all_q_values(algo))
    # no update can happen (the buffer never holds more than batch_size transitions): nothing is rebuilt
    loaded.fit_online(Corridor(LENGTH, 12), n_steps=10, **quiet())
    assert loaded.grad_step == 20
    np.testing.assert_array_equal(all_q_values(loaded), all_q_values(algo))
    assert loaded.reward_scaler.mean.item() == pytest.approx(algo.reward_scaler.mean.item())
    loaded.fit_online(Corridor(LENGTH, 12), n_steps=40, **quiet())
    assert loaded.grad_step > 20


def test_discrete_cql_to_dqn():
    dataset = corridor_dataset()
    cql = DiscreteCQLConfig(batch_size=16, encoder_factory=ENC).create()
    cql.fit(dataset, n_steps=30, **quiet())
    dqn = DQNConfig(batch_size=16, encoder_factory=ENC).create()
    env = Corridor(LENGTH, 12)
    dqn.build_with_env(env)
    dqn.copy_q_function_from(cql)
    np.testing.assert_array_equal(all_q_values(dqn), all_q_values(cql))
    np.testing.assert_array_equal(dqn.predict(STATES), cql.predict(STATES))
    assert state_dicts_equal(dqn.modules["targ_q_function"], cql.modules["targ_q_function"])
    # the optimizer variant: DQN's Adam continues from DiscreteCQL's moments
    dqn.copy_q_function_optim_from(cql)
    assert_adam_states_equal(adam_state(dqn, "optim"), adam_state(cql, "optim"))
    dqn.fit_online(env, n_steps=10, **quiet())  # no update yet: the copy is what fit_online starts from
    np.testing.assert_array_equal(all_q_values(dqn), all_q_values(cql))
    dqn.fit_online(env, n_steps=30, **quiet())
    steps = [float(s["step"]) for s in adam_state(dqn, "optim")]
    assert steps == [30.0 + dqn.grad_step] * len(steps)


def test_cql_to_sac():
    dataset = continuous_dataset()
    kwargs = dict(batch_size=16, actor_encoder_factory=ENC, critic_encoder_factory=ENC)
    cql = CQLConfig(**kwargs).create()
    cql.fit(dataset, n_steps=10, **quiet())
    sac = SACConfig(**kwargs).create()
    env = ContinuousCorridor(12)
    sac.build_with_env(env)
    sac.copy_q_function_from(cql)
    sac.copy_policy_from(cql)
    np.testing.assert_array_equal(sac.predict(POSITIONS), cql.predict(POSITIONS))
    actions = np.linspace(-1.0, 1.0, 9, dtype=np.float32)[:, None]
    np.testing.assert_array_equal(sac.predict_value(POSITIONS, actions), cql.predict_value(POSITIONS, actions))
    sac.copy_policy_optim_from(cql)
    sac.copy_q_function_optim_from(cql)
    assert_adam_states_equal(adam_state(sac, "actor_optim"), adam_state(cql, "actor_optim"))
    assert_adam_states_equal(adam_state(sac, "critic_optim"), adam_state(cql, "critic_optim"))
    sac.fit_online(env, n_steps=10, **quiet())
    np.testing.assert_array_equal(sac.predict(POSITIONS), cql.predict(POSITIONS))
    sac.fit_online(env, n_steps=30, **quiet())
    assert sac.grad_step > 0
    assert not np.array_equal(sac.predict(POSITIONS), cql.predict(POSITIONS))


def test_reward_scaler_fitted_offline_applies_online():
    dataset = corridor_dataset()
    rewards = dataset.to_arrays()["rewards"][:, 0].astype(np.float64)
    mean, std = rewards.mean(), rewards.std()
    assert 0.0 < mean < 1.0  # the random data reaches the goal sometimes
    algo = DQNConfig(batch_size=16, encoder_factory=ENC, reward_scaler=StandardRewardScaler()).create()
    algo.fit(dataset, n_steps=5, **quiet())
    seen = []
    step = algo.training_step

    def spy(batch):
        seen.append(algo.preprocess_batch(batch).rewards.detach().numpy().copy())  # what the update sees
        return step(batch)

    algo.training_step = spy
    algo.fit_online(Corridor(LENGTH, 6), n_steps=60, **quiet())
    values = np.unique(np.concatenate(seen))
    scaled = (np.array([0.0, 1.0]) - mean) / (std + 1e-3)
    assert np.isin(values, scaled.astype(np.float32)).all(), (values, scaled)
    assert scaled[0].astype(np.float32) in values  # raw reward 0 was seen, scaled
    assert algo.reward_scaler.mean.item() == pytest.approx(mean)  # not refitted online
    assert algo.reward_scaler.std.item() == pytest.approx(std)
