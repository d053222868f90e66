"""FQE with independent ensemble members (``independent_critics=True``):
each member's own target, the estimate as the members' mean, and an
interval that resamples members as well as episodes."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.algos.fqe_diagnostics import bootstrap_interval, ensemble_bootstrap_interval
from offrl.logging import NoopAdapterFactory
from offrl.models import QRQFunctionFactory, VectorEncoderFactory
from offrl.ope import DiscreteFQE, DiscreteFQEConfig, FQE, FQEConfig, initial_observations

from test_fqe import TablePolicy, _batch, _dataset, _perturb

SMALL = VectorEncoderFactory(hidden_units=[8])


def _members_fqe(discrete: bool, independent: bool = True, n_critics: int = 3):
    offrl.seed(0)
    table = np.array([[1.0, 0.0, 0.5], [0.0, 2.0, 0.0], [0.0, 0.0, 1.0]], dtype=np.float32)
    policy = TablePolicy(table if discrete else table[:, :2], discrete=discrete)
    cls, config_cls = (DiscreteFQE, DiscreteFQEConfig) if discrete else (FQE, FQEConfig)
    config = config_cls(encoder_factory=SMALL, gamma=0.8, n_critics=n_critics, independent_critics=independent)
    fqe = cls(algo=policy, config=config)
    fqe.create_impl((3,), 3 if discrete else 2)
    return fqe, table


@pytest.mark.parametrize("discrete", [False, True])
def test_each_member_regresses_on_its_own_targets_value(discrete):
    """Loss = sum over members k of mean_b (Q_k(s, a) - r - gamma^i (1 - d) Q'_k(s', pi(s')))^2:
    member k's own target copy, not the ensemble minimum (which the default keeps)."""
    fqe, table = _members_fqe(discrete)
    q, targ = fqe.modules["q_function"], fqe.modules["targ_q_function"]
    _perturb(targ, 4)  # the members' targets differ
    batch = _batch(discrete)
    obs, nxt = torch.from_numpy(batch.observations), torch.from_numpy(batch.next_observations)
    with torch.no_grad():
        if discrete:
            next_action = (batch.next_observations @ table).argmax(axis=1)
            next_q = targ.expected(nxt).numpy()[:, np.arange(4), next_action]  # (E, 4)
            pred = q.expected(obs).numpy()[:, np.arange(4), batch.actions[:, 0]]
        else:
            next_action = np.tanh(batch.next_observations @ table[:, :2])
            next_q = targ.expected(nxt, torch.from_numpy(next_action.astype(np.float32)))[..., 0].numpy()
            pred = q.expected(obs, torch.from_numpy(batch.actions))[..., 0].numpy()
    discount = 0.8 ** batch.intervals[:, 0] * (1 - batch.terminals[:, 0])
    own = batch.rewards[:, 0] + discount * next_q  # (E, 4): each member's target
    minimum = batch.rewards[:, 0] + discount * next_q.min(axis=0)
    expected = ((pred - own) ** 2).mean(axis=1).sum()
    assert abs(expected - ((pred - minimum) ** 2).mean(axis=1).sum()) > 1e-3  # the two rules differ here
    assert fqe.update(batch)["loss"] == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("discrete", [False, True])
def test_one_member_is_the_plain_fqe(discrete):
    batch = _batch(discrete)
    losses = []
    for independent in (False, True):
        fqe, _ = _members_fqe(discrete, independent=independent, n_critics=1)
        _perturb(fqe.modules["targ_q_function"], 4)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no shape-mismatch warning from the loss
            losses.append(fqe.update(batch)["loss"])
    assert losses[0] == losses[1]


@pytest.mark.parametrize("discrete", [False, True])
def test_values_are_the_members_mean(discrete):
    fqe, _ = _members_fqe(discrete)
    _perturb(fqe.modules["q_function"], 5)
    x = _batch(discrete).observations
    members = fqe.predict_member_state_values(x)
    assert members.shape == (3, 4)
    assert np.ptp(members, axis=0).min() > 0  # the members differ at every state
    np.testing.assert_allclose(fqe.predict_state_value(x), members.mean(axis=0), rtol=1e-6, atol=1e-6)


def test_the_interval_resamples_members_too():
    # every episode alike, members 0 and 10: resampling two members gives 0, 5 or 10 (1/4, 1/2, 1/4)
    values = np.array([[0.0] * 50, [10.0] * 50])
    assert ensemble_bootstrap_interval(values, 0.95, 1000, seed=0) == (0.0, 10.0)
    assert bootstrap_interval(values.mean(axis=0), 0.95, 1000, seed=0) == (5.0, 5.0)  # episodes alone: no width
    one = np.random.default_rng(1).normal(size=(1, 30))
    assert ensemble_bootstrap_interval(one, 0.9, 300, seed=2) == bootstrap_interval(one[0], 0.9, 300, seed=2)


@settings(max_examples=25, deadline=None)
@given(k=st.integers(2, 4), n=st.integers(1, 12), n_bootstrap=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_the_interval_matches_a_loop_over_resamples(k, n, n_bootstrap, seed):
    values = np.random.default_rng(seed).normal(size=(k, n)) * 3.0
    rng = np.random.default_rng(seed)
    episodes = rng.integers(0, n, size=(n_bootstrap, n))  # one chunk at these sizes, drawn in this order
    members = rng.integers(0, k, size=(n_bootstrap, k))
    means = [np.mean([values[m, episodes[b]].mean() for m in members[b]]) for b in range(n_bootstrap)]
    expected = np.quantile(means, [0.05, 0.95])
    np.testing.assert_allclose(ensemble_bootstrap_interval(values, 0.9, n_bootstrap, seed), expected, rtol=1e-12)


@pytest.mark.parametrize("discrete", [False, True])
def test_estimate_interval_holds_the_members_spread_and_the_model_round_trips(discrete, tmp_path):
    offrl.seed(3)
    dataset = _dataset("vector", discrete=discrete)
    policy = TablePolicy(np.eye(3, dtype=np.float32)[:, :2], discrete=discrete)  # the data's 2 actions
    cls, config_cls = (DiscreteFQE, DiscreteFQEConfig) if discrete else (FQE, FQEConfig)
    fqe = cls(algo=policy, config=config_cls(encoder_factory=SMALL, batch_size=16, n_critics=4,
                                             independent_critics=True, learning_rate=1e-2))
    fqe.fit(dataset, n_steps=20, n_steps_per_epoch=10, logger_adapter=NoopAdapterFactory(), show_progress=False)
    with pytest.warns(UserWarning):  # 20 updates have not settled
        estimate = fqe.estimate_policy_value(dataset, n_bootstrap=500, seed=0)
    members = fqe.predict_member_state_values(initial_observations(dataset))
    assert estimate.value == pytest.approx(float(members.mean()), rel=1e-9)
    np.testing.assert_allclose(estimate.initial_values, members.mean(axis=0), rtol=1e-9)
    assert (estimate.lower, estimate.upper) == ensemble_bootstrap_interval(members, 0.95, 500, 0)
    member_means = members.mean(axis=1)
    assert estimate.upper - estimate.lower >= 0.5 * np.ptp(member_means)  # wider than the members' spread's half

    path = str(tmp_path / "fqe.d3")
    fqe.save(path)
    loaded = cls.load(path, algo=policy)
    assert loaded.config.independent_critics is True
    np.testing.assert_array_equal(loaded.predict_member_state_values(initial_observations(dataset)), members)


def test_the_field_is_offrl_only_and_checked():
    assert "independent_critics" not in json.dumps(FQEConfig().serialize())  # d3rlpy's JSON at the default
    data = json.loads(FQEConfig(n_critics=2, independent_critics=True).serialize())
    assert data["independent_critics"] is True
    with pytest.raises(ValueError, match="independent_critics"):
        FQEConfig(independent_critics="yes")
    with pytest.raises(ValueError, match="independent_critics=True needs the mean Q-function"):
        FQEConfig(n_critics=2, independent_critics=True, q_func_factory=QRQFunctionFactory())
