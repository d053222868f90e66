"""FQE's convergence diagnostic, early stopping and recommended configs.

Fast part: the held-out split and the relative change on exact values, the
logged diagnostic against a hand computation from the same weights, the
warning of a run that has not settled, early stopping on a tabular MDP with
exact values, ``recommended()`` and bad arguments. Slow part (``-m slow``):
accuracy against the environment's discounted return on the built-in
CartPole and Pendulum data (see ``benchmarks/fqe_convergence.py``).
"""

from __future__ import annotations

import copy
import dataclasses
import warnings

import numpy as np
import pytest
import torch
from torch import nn

import offrl
from offrl.algos.base import LearnableConfig, QLearningAlgoBase
from offrl.algos.fqe import (CONVERGENCE_TOLERANCE, CONVERGENCE_WINDOW, OFF_SUPPORT_WARN, RESIDUAL_GROWTH,
                              ConvergenceDiagnostic, heldout_split, is_settled, off_support_fraction,
                              projected_drift, relative_change, replay_convergence)
from offrl.constants import ActionSpace
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.models import DefaultEncoderFactory, VectorEncoderFactory
from offrl.models.encoders import ByShapeEncoderFactory
from offrl.models.modules import Modules
from offrl.ope import DiscreteFQE, DiscreteFQEConfig, FQE, FQEConfig, PolicyValueEstimate
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler
from tabular_mdp import action_values, make_mdp, sample_dataset


# ------------------------------------------------------------------ helpers
@dataclasses.dataclass
class _FixedPolicyConfig(LearnableConfig):
    """Config of the test policy (not registered: no contract run)."""

    @staticmethod
    def get_type() -> str:
        return "test_fixed_policy"


class _Weights(nn.Module):
    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("table", table)


@dataclasses.dataclass(frozen=True)
class _WeightsModules(Modules):
    table: _Weights


class FixedPolicy(QLearningAlgoBase):
    """The discrete policy ``argmax(x @ table)`` on raw observations."""

    _action_type = ActionSpace.DISCRETE
    _modules: _WeightsModules

    def __init__(self, table: np.ndarray) -> None:
        super().__init__(_FixedPolicyConfig())
        self._table = torch.as_tensor(np.asarray(table, dtype=np.float32))
        self.create_impl((self._table.shape[0],), self._table.shape[1])

    def _build(self, observation_shape, action_size: int) -> _WeightsModules:
        return _WeightsModules(table=_Weights(self._table))

    def _predict(self, x) -> torch.Tensor:
        return (x @ self._modules.table.table).argmax(dim=-1)


def _episodes_dataset(n_episodes: int = 20, length: int = 3, seed: int = 0) -> MDPDataset:
    """Random 2-dim observations, 2 actions, every episode ending in a terminal."""
    rng = np.random.default_rng(seed)
    n = n_episodes * length
    terminals = np.zeros(n, dtype=np.float32)
    terminals[length - 1::length] = 1.0
    return MDPDataset(rng.normal(size=(n, 2)).astype(np.float32), rng.integers(0, 2, size=n),
                      rng.normal(size=n).astype(np.float32), terminals, action_size=2)


def _small_config(**changes) -> DiscreteFQEConfig:
    settings = dict(encoder_factory=VectorEncoderFactory(hidden_units=[16]), batch_size=16)
    settings.update(changes)
    return DiscreteFQEConfig(**settings)


def _fit(fqe, dataset, steps: int, per_epoch: int, **kwargs):
    return fqe.fit(dataset, n_steps=steps, n_steps_per_epoch=per_epoch, logger_adapter=NoopAdapterFactory(),
                   show_progress=False, **kwargs)


# ------------------------------------------------------------ exact values
def test_heldout_split_takes_every_kth_episode():
    train, held = heldout_split(25, 0.1)
    np.testing.assert_array_equal(held, [9, 19])
    np.testing.assert_array_equal(train, [i for i in range(25) if i not in (9, 19)])
    np.testing.assert_array_equal(heldout_split(12, 0.25)[1], [3, 7, 11])
    np.testing.assert_array_equal(heldout_split(10, 0.3)[1], [3, 6, 9])  # 0.3 of 10 episodes
    train, held = heldout_split(7, 0.0)
    assert held.shape == (0,) and train.tolist() == list(range(7))
    for n, f in ((100, 0.1), (99, 0.2), (1000, 0.05), (50, 0.5)):
        assert heldout_split(n, f)[1].shape[0] == int(np.floor(n * f + 1e-9))


def test_relative_change_of_the_last_window():
    assert relative_change([10.0, 20.0, 30.0], 2) == pytest.approx((30 - 10) / 20)
    assert relative_change([1.0, 50.0, 49.0, 51.0], 2) == pytest.approx(2.0 / 50.0)  # only the last 3 count
    assert relative_change([5.0, 6.0], 2) == pytest.approx(1.0 / 5.5)  # fewer than window + 1: all of them
    assert np.isnan(relative_change([5.0], 2))
    assert np.isnan(relative_change([1.0, -1.0], 1))  # mean 0
    assert relative_change([-100.0, -98.0], 1) == pytest.approx(2.0 / 99.0)


def test_projected_drift_is_the_least_squares_slope_times_the_window():
    # a line: slope 2 per epoch over 5 epochs = 10, fitted over the last 11 values (100..120, mean 110)
    assert projected_drift([0.0, 50.0] + [100.0 + 2 * k for k in range(11)], 5) == pytest.approx(10.0 / 110.0)
    # least squares by hand: x = -1.5..1.5, y - mean = -2, 0, -1, 3 -> slope (3 + 0 - 0.5 + 4.5) / 5 = 1.4
    assert projected_drift([10.0, 12.0, 11.0, 15.0], 3) == pytest.approx(1.4 * 3 / 12.0)
    assert projected_drift([-200.0, -210.0, -220.0], 2) == pytest.approx(10.0 * 2 / 210.0)  # sign-free
    assert projected_drift([5.0, 5.0, 5.0], 2) == 0.0
    assert projected_drift([1.0, 2.0], 2) == pytest.approx(1.0 * 2 / 1.5)  # fewer than window + 1: all of them
    assert np.isnan(projected_drift([1.0], 2))
    assert np.isnan(projected_drift([1.0, -1.0, 0.0], 2))  # mean 0


def test_default_rule_is_five_epochs_at_three_percent():
    assert (CONVERGENCE_WINDOW, CONVERGENCE_TOLERANCE) == (5, 0.03)
    import inspect

    params = inspect.signature(DiscreteFQE.fit).parameters
    assert params["convergence_window"].default == 5 and params["convergence_tolerance"].default == 0.03


# per-epoch V(s0) and held-out residuals of recorded runs (benchmarks/fqe_convergence.py --configs recommended-cap,
# 1,000-update epochs, the value before training taken as 0): Pendulum CQL (true -390.12) drifted down by under 3 %
# per 3 epochs; Pendulum IQL (true -460.02) sat near -172 for 11 epochs, then diverged; CartPole BC / DiscreteCQL
# (true 100.00) and Pendulum BC (true -368.14, still drifting down at the cap) must keep meeting the 10 % target
CQL_CURVE = [0.0, -205.5, -251.5, -255.5, -249.0, -257.5, -272.9, -277.4, -295.3, -302.0, -309.2, -304.9, -308.3,
             -301.1, -310.0, -327.6, -328.9, -335.3, -345.5, -336.2, -352.9]
CQL_RESIDUALS = [18.66, 16.46, 15.87, 8.91, 7.64, 10.08, 9.73, 12.04, 9.10, 11.88, 10.49, 10.70, 11.30, 14.69,
                 14.18, 13.30, 15.22, 22.96, 20.32, 19.50]
IQL_CURVE = [0.0, -179.9, -172.1, -164.4, -171.5, -172.6, -170.6, -175.1, -194.1, -176.1, -169.4, -181.9, -228.8,
             -239.8, -282.4, -319.9, -518.0, -916.5, -1493.3, -2779.2, -5075.3]
IQL_RESIDUALS = [15.75, 22.31, 24.43, 34.18, 40.54, 39.92, 39.21, 37.90, 41.48, 45.08, 44.74, 39.13, 18.56, 25.31,
                 76.53, 338.37, 2005.08, 8394.75, 23163.85, 87814.01]
GOOD_CURVES = {  # case: (truth, values, residuals)
    "cartpole-bc": (100.0, [0.0, 37.57, 62.42, 74.03, 81.11, 88.36, 92.77, 96.98, 98.09, 100.52, 99.15, 101.74, 99.97,
                            99.77, 98.31, 100.29, 99.35, 98.5, 98.47, 99.24, 99.4],
                    [1.425, 1.787, 1.953, 1.772, 1.553, 1.563, 1.399, 1.175, 1.325, 1.257, 1.145, 1.182, 1.006, 0.961,
                     1.169, 0.809, 0.835, 0.887, 0.801, 0.778]),
    "cartpole-cql": (100.0, [0.0, 37.63, 60.06, 71.44, 80.53, 89.45, 95.29, 99.5, 101.82, 103.04, 101.02, 102.21, 99.6,
                             100.61, 99.55, 101.33, 100.54, 101.02, 101.68, 101.37, 101.72],
                     [1.457, 1.708, 1.884, 1.699, 1.566, 1.584, 1.464, 1.409, 1.536, 1.402, 1.161, 1.144, 1.187, 1.087,
                      1.42, 0.922, 1.099, 1.087, 1.001, 1.004]),
    "pendulum-bc": (-368.14, [0.0, -211.03, -272.89, -292.55, -305.45, -317.66, -324.65, -318.96, -333.86, -339.01,
                              -321.35, -319.84, -321.87, -328.78, -339.48, -345.93, -350.15, -345.68, -349.82, -340.13,
                              -355.06],
                    [16.431, 11.567, 8.658, 10.09, 10.123, 9.551, 8.482, 7.713, 6.548, 8.506, 6.452, 7.158, 6.857,
                     6.667, 7.879, 6.191, 6.535, 8.442, 6.209, 7.886]),
}


def _spread_only(values, residuals, window):
    """The rule before the trend test: the spread and the residual only."""
    values, residuals = np.asarray(values), np.asarray(residuals)
    return np.array([k >= window and relative_change(values[:k + 1], window) <= 0.03
                     and residuals[k - 1] <= RESIDUAL_GROWTH * residuals[max(0, k - 1 - window):k].min()
                     for k in range(1, values.shape[0])])


def test_replay_of_the_recorded_drifting_curves():
    """Pendulum CQL and IQL replayed: the earlier rule (3 epochs, spread
    only) settles CQL at epoch 12 on -308.3 (+21 %) and IQL at epoch 7 on
    -175.1 (+62 %), as the runs did; the default rule settles neither, and
    refuses CQL's drift from the values alone (no residuals)."""
    old_cql = _spread_only(CQL_CURVE, CQL_RESIDUALS, 3)
    old_iql = _spread_only(IQL_CURVE, IQL_RESIDUALS, 3)
    assert int(np.argmax(old_cql)) + 1 == 12 and CQL_CURVE[12] == -308.3
    assert int(np.argmax(old_iql)) + 1 == 7 and IQL_CURVE[7] == -175.1
    assert not replay_convergence(CQL_CURVE, CQL_RESIDUALS).any()
    assert not replay_convergence(IQL_CURVE, IQL_RESIDUALS).any()
    assert not replay_convergence(CQL_CURVE).any()
    # epochs 9-14 of CQL lie within 3 %: the spread passes, the trend over epochs 4-14 (10 %) does not
    assert relative_change(CQL_CURVE[:15], 5) <= 0.03 and projected_drift(CQL_CURVE[:15], 5) > 0.1


def test_replay_of_the_recorded_good_curves():
    """CartPole BC and DiscreteCQL settle within 20,000 updates and within
    2 % of the truth; Pendulum BC, still drifting down at the cap (-319 at
    11,000, -355 at 20,000), is not called settled (the earlier rule
    settled it at 13,000 on -328.8, +10.7 %)."""
    for case, (at, error) in {"cartpole-bc": (17, 0.015), "cartpole-cql": (16, 0.006)}.items():
        truth, values, residuals = GOOD_CURVES[case]
        settled = replay_convergence(values, residuals)
        assert int(np.argmax(settled)) + 1 == at and settled.any(), case
        assert abs(values[at] - truth) <= error * abs(truth), case
    truth, values, residuals = GOOD_CURVES["pendulum-bc"]
    assert not replay_convergence(values, residuals).any()
    assert int(np.argmax(_spread_only(values, residuals, 3))) + 1 == 13
    assert abs(values[-1] - truth) <= 0.04 * abs(truth)  # at the cap, flagged unsettled


def test_a_steady_drift_under_the_spread_tolerance_is_not_settled():
    """1 % per epoch for 15 epochs: every 3-epoch spread and trend is
    under 3 %, so a 3-epoch window calls it settled; the default 5-epoch
    window's spread and projected trend (both about 5 %) refuse it."""
    values = [0.0] + [-300.0 * 1.01 ** k for k in range(15)]
    assert relative_change(values, 3) <= 0.03 and is_settled(values, None, window=3)
    assert relative_change(values, 5) > 0.03 and projected_drift(values, 5) == pytest.approx(0.0497, rel=1e-3)
    assert not replay_convergence(values).any()
    # the warning names both figures
    from offrl.algos.fqe import not_settled_message

    diagnostic = ConvergenceDiagnostic(tuple(values), (1.0,) * 15, relative_change(values, 5), 1.0, 2, 5, 0.03,
                                       15000, False, value_drift=projected_drift(values, 5))
    message = not_settled_message("FQE", diagnostic)
    assert "spread by 5.0% over the last 5 epochs" in message and "trend projects 5.0% over the next 5 epochs" in message
    assert "climbing" not in message


def test_a_flat_noisy_curve_settles():
    """+-1 % noise around -300, no trend: settled from the first epoch whose
    trend window (11 values) has left the climb from 0."""
    rng = np.random.default_rng(0)
    noise = rng.uniform(-0.01, 0.01, size=16)
    values = [0.0, -150.0] + list(-300.0 * (1.0 + noise))
    residuals = [5.0] * 17
    settled = replay_convergence(values, residuals)
    assert not settled[:11].any()  # trend windows holding 0 or -150
    assert settled[11:].all()
    assert is_settled(values, residuals) and is_settled(values, None)


def test_a_curve_that_settles_then_climbs_again_is_not_settled():
    """Flat at -300 for 14 epochs, then climbing by 2 % an epoch: settled on
    the plateau, not once the climb is in the window."""
    values = [0.0] + [-300.0] * 14 + [-300.0 * 1.02 ** k for k in range(1, 6)]
    settled = replay_convergence(values, [5.0] * (len(values) - 1))
    assert not settled[:10].any() and settled[10:14].all()  # epochs 11-14: 0 has left the trend window
    assert not settled[15:].any()  # epochs 16-19: the window holds two or more climbing epochs
    assert not is_settled(values, None)
    # a residual that climbs on the plateau: not settled either
    assert is_settled([0.0] + [-300.0] * 12, [5.0] * 12)
    assert not is_settled([0.0] + [-300.0] * 12, [5.0] * 9 + [6.0, 6.5, 7.0])


def test_replay_convergence_checks_its_arguments():
    with pytest.raises(ValueError, match=r"residuals: expected one per epoch \(3"):
        replay_convergence([0.0, 1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="convergence_window"):
        replay_convergence([0.0, 1.0], window=0)
    with pytest.raises(ValueError, match="convergence_tolerance"):
        replay_convergence([0.0, 1.0], tolerance=-0.1)
    assert replay_convergence([0.0]).shape == (0,)


def test_diagnostic_matches_a_hand_computation_from_the_same_weights():
    """The logged figures: V(s0) over all episodes' first observations, the
    Bellman residual over the held-out episodes 9 and 19 only, the change
    over the window; FQE trained on the other episodes (its scaler's mean)."""
    dataset = _episodes_dataset()
    policy = FixedPolicy(np.array([[1.0, -1.0], [0.5, 0.2]]))
    offrl.seed(0)
    fqe = DiscreteFQE(algo=policy, config=_small_config(observation_scaler=StandardObservationScaler(), gamma=0.9))
    results = _fit(fqe, dataset, steps=8, per_epoch=2, convergence_window=2)
    diagnostic = fqe.convergence
    assert isinstance(diagnostic, ConvergenceDiagnostic)
    assert [m["fqe_initial_value"] for _, m in results] == list(diagnostic.initial_values[1:])  # [0]: before training
    assert [m["fqe_heldout_residual"] for _, m in results] == list(diagnostic.heldout_residuals)
    assert len(diagnostic.initial_values) == 5 and diagnostic.steps == 8 and diagnostic.n_heldout_episodes == 2
    assert all(np.isfinite(v) for _, m in results for v in m.values())  # every logged figure is finite
    values = diagnostic.initial_values
    assert results[0][1]["fqe_value_change"] == pytest.approx(abs(values[1] - values[0]) / abs(np.mean(values[:2])))
    assert results[3][1]["fqe_value_change"] == pytest.approx(relative_change(values[2:], 2))
    assert diagnostic.value_change == results[3][1]["fqe_value_change"]

    arrays = dataset.to_arrays()
    obs, actions, rewards = arrays["observations"], arrays["actions"].reshape(-1), arrays["rewards"].reshape(-1)
    firsts = obs[0::3]
    v0 = fqe.predict_value(firsts, policy.predict(firsts)).astype(np.float64)
    assert diagnostic.initial_values[-1] == pytest.approx(v0.mean(), rel=1e-5, abs=1e-6)
    residuals = []
    for episode in (9, 19):
        rows = np.arange(3 * episode, 3 * episode + 3)
        q = fqe.predict_value(obs[rows], actions[rows]).astype(np.float64)
        nxt = obs[rows[1:]]
        next_v = np.append(fqe.predict_value(nxt, policy.predict(nxt)).astype(np.float64), 0.0)  # terminal last
        residuals.extend(q - rewards[rows] - 0.9 * next_v)
    assert diagnostic.heldout_residual == pytest.approx(np.mean(np.square(residuals)), rel=1e-5)
    train_rows = np.concatenate([np.arange(3 * e, 3 * e + 3) for e in range(20) if e not in (9, 19)])
    np.testing.assert_allclose(np.asarray(fqe.observation_scaler.mean), obs[train_rows].mean(axis=0), rtol=1e-5)

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        estimate = fqe.estimate_policy_value(dataset, seed=0)
    assert estimate.diagnostic is diagnostic
    assert estimate.converged == diagnostic.converged
    assert estimate.heldout_residual == diagnostic.heldout_residual
    assert estimate.value_change == diagnostic.value_change
    assert len(record) == (0 if diagnostic.converged else 1)  # a warning exactly when not settled


def test_holdout_fraction_zero_trains_on_everything_and_residual_is_in_sample():
    dataset = _episodes_dataset(n_episodes=6)
    policy = FixedPolicy(np.eye(2))
    offrl.seed(1)
    fqe = DiscreteFQE(algo=policy, config=_small_config(observation_scaler=StandardObservationScaler()))
    _fit(fqe, dataset, steps=2, per_epoch=2, holdout_fraction=0.0)
    assert fqe.convergence.n_heldout_episodes == 0
    obs = dataset.to_arrays()["observations"]
    np.testing.assert_allclose(np.asarray(fqe.observation_scaler.mean), obs.mean(axis=0), rtol=1e-5)
    td = offrl.metrics.TDErrorEvaluator()(fqe, dataset)
    assert fqe.convergence.heldout_residual == pytest.approx(td, rel=1e-6)


def test_a_climbing_heldout_residual_blocks_convergence():
    """V(s0) steady but the residual up by more than RESIDUAL_GROWTH over the
    window: not settled; the same values with a steady residual: settled."""
    from offrl.algos.fqe import ConvergenceMonitor

    dataset = _episodes_dataset()
    fqe = DiscreteFQE(algo=FixedPolicy(np.eye(2)), config=_small_config())
    fqe.build_with_dataset(dataset)
    for residuals, settled in (([1.0, 1.0, 1.0, 1.1, 1.2, 1.3], False), ([1.0, 1.1, 1.0, 1.2, 1.0, 1.2], True)):
        feed = iter(residuals)
        monitor = ConvergenceMonitor(fqe, initial_observations_of(dataset), lambda algo: next(feed), 2, 3, 0.03)
        monitor.start()
        for _ in residuals:
            diagnostic = monitor.measure()  # V(s0) is the same every time: the weights do not change
        assert diagnostic.value_change == 0.0
        assert diagnostic.converged is settled
        assert fqe.convergence is diagnostic


def initial_observations_of(dataset):
    return offrl.ope.initial_observations(dataset)


def test_run_that_has_not_settled_warns_and_says_what_to_change():
    """d3rlpy's defaults after a few hundred updates on a long-horizon
    problem: V(s0) still climbs, converged is False, the warning names
    recommended() and more steps."""
    dataset = _episodes_dataset(n_episodes=20, length=30, seed=3)
    rewards_one = MDPDataset(dataset.to_arrays()["observations"], dataset.to_arrays()["actions"].reshape(-1),
                             np.ones(600, dtype=np.float32), dataset.to_arrays()["terminals"].reshape(-1),
                             action_size=2)
    offrl.seed(2)
    fqe = DiscreteFQE(algo=FixedPolicy(np.eye(2)), config=_small_config(learning_rate=1e-3))
    _fit(fqe, rewards_one, steps=400, per_epoch=100, convergence_window=2)
    values = fqe.convergence.initial_values
    assert values[-1] > values[-2] > values[-3]  # still climbing
    assert fqe.convergence.value_change > 0.03 and not fqe.convergence.converged
    with pytest.warns(UserWarning, match=r"has not settled.*recommended\(\)") as record:
        estimate = fqe.estimate_policy_value(rewards_one, seed=0)
    assert "n_steps" in str(record[0].message)
    assert estimate.converged is False and estimate.value_change == fqe.convergence.value_change

    fresh = DiscreteFQE(algo=FixedPolicy(np.eye(2)), config=_small_config())
    fresh.build_with_dataset(rewards_one)
    with pytest.warns(UserWarning, match="no convergence record"):
        unknown = fresh.estimate_policy_value(rewards_one, seed=0)
    assert unknown.converged is False and unknown.diagnostic is None and np.isnan(unknown.heldout_residual)
    # too few epochs for the window: the warning says to use shorter epochs
    short = DiscreteFQE(algo=FixedPolicy(np.eye(2)), config=_small_config())
    _fit(short, rewards_one, steps=4, per_epoch=4)
    with pytest.warns(UserWarning, match="shorter epochs"):
        short.estimate_policy_value(rewards_one, seed=0)


def test_early_stopping_stops_before_the_cap_on_a_tabular_mdp():
    """A finite-horizon tabular MDP (the step is in the observation, so the
    time limit is a true terminal): with the recommended settings and early
    stopping FQE stops well before the 6,000-step cap, says it converged,
    and lands within 5 % of the exact value."""
    gamma = 0.9
    mdp = make_mdp(n_states=3, n_actions=2, horizon=4, reward_noise=0.1, seed=4)
    logged = sample_dataset(mdp, np.full((3, 2), 0.5), n_episodes=300, seed=5)
    arrays = logged.dataset.to_arrays()
    ends = np.maximum(arrays["terminals"], arrays["timeouts"]).reshape(-1)
    dataset = MDPDataset(arrays["observations"], arrays["actions"].reshape(-1), arrays["rewards"].reshape(-1), ends,
                         action_size=2)
    target = np.eye(2)[mdp.rewards.argmax(axis=1)]  # greedy in the immediate reward
    table = np.zeros((3 + mdp.horizon, 2), dtype=np.float32)
    table[:3] = target
    policy = FixedPolicy(table)
    _, truth = action_values(mdp, target, gamma)
    # the dataset's first states, not the initial distribution: the exact value at them
    q, _ = action_values(mdp, target, gamma)
    first_states = mdp.decode(arrays["observations"][dataset_first_rows(dataset)])[0]
    exact = float((q[0][first_states] * target[first_states]).sum(axis=1).mean())

    # recommended()'s weight average (decay 0.9995) lags by ~2,000 updates, sized for 1,000-update epochs and a
    # 20,000 cap; with 200-update epochs it stopped after 7,600 updates 5.2 % low, 0.999 after 5,200, 2.1 % low
    config = DiscreteFQEConfig.recommended(gamma=gamma, encoder_factory=VectorEncoderFactory(hidden_units=[32, 32]),
                                           batch_size=64, ema_decay=0.999)
    offrl.seed(0)
    fqe = DiscreteFQE(algo=policy, config=config)
    results = _fit(fqe, dataset, steps=6000, per_epoch=200, early_stopping=True)
    assert len(results) < 30 and fqe.grad_step == 200 * len(results) and len(results) >= CONVERGENCE_WINDOW
    assert fqe.convergence.converged and results[-1][1]["fqe_value_change"] <= fqe.convergence.tolerance == 0.03
    assert results[-1][1]["fqe_value_drift"] <= 0.03
    # it stopped at the first epoch the rule allows: the replay of its own record agrees
    replayed = replay_convergence(fqe.convergence.initial_values, fqe.convergence.heldout_residuals)
    assert replayed[-1] and not replayed[:-1].any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        estimate = fqe.estimate_policy_value(dataset, seed=0)
    assert estimate.converged is True
    assert estimate.value == pytest.approx(exact, rel=0.05)
    assert abs(truth - exact) < 0.3  # the dataset's starts resemble the initial distribution


def dataset_first_rows(dataset: MDPDataset) -> np.ndarray:
    lengths = np.array([ep.size() for ep in dataset.episodes])
    return np.concatenate([[0], np.cumsum(lengths)[:-1]])


# ------------------------------------------------------ off-support check
def _naive_off_support(obs, logged, acting, ref_obs, ref_act, quantile=0.95):
    ref = np.concatenate([ref_obs, ref_act.reshape(len(ref_act), -1)], 1).astype(np.float64)
    mean, scale = ref.mean(0), ref.std(0)
    scale[scale == 0] = 1.0

    def nearest(o, a):
        out = []
        for i in range(len(o)):
            z = (np.concatenate([o[i], np.atleast_1d(a[i])]) - mean) / scale
            out.append(min(np.sqrt(np.sum((z - (r - mean) / scale) ** 2)) for r in ref))
        return np.array(out)

    threshold = np.quantile(nearest(obs, logged), quantile)
    return float(np.mean(nearest(obs, acting) > threshold))


def test_off_support_fraction_exact_cases():
    """Reference actions in [-1, 1] on a grid of states: logged query
    actions give 1 - quantile (the threshold is their own quantile),
    actions at 3 are all off, the logged actions moved by 0.01 none."""
    grid = np.linspace(-1.0, 1.0, 21)
    ref_obs, ref_act = np.repeat(grid, 21)[:, None], np.tile(grid, 21)[:, None]
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, size=(20, 1))
    logged = rng.uniform(-1, 1, size=(20, 1))
    assert off_support_fraction(obs, logged, logged, ref_obs, ref_act) == 0.05  # one of 20 above its 95 % quantile
    assert off_support_fraction(obs, logged, np.full((20, 1), 3.0), ref_obs, ref_act) == 1.0
    assert off_support_fraction(obs, logged, np.full(20, 3.0), ref_obs, ref_act.ravel()) == 1.0  # (n,) actions
    assert off_support_fraction(obs, logged, np.clip(logged, -0.99, 0.99), ref_obs, ref_act, quantile=0.5) <= 0.5
    half = np.where(np.arange(20)[:, None] < 10, logged, 3.0)
    assert 0.5 <= off_support_fraction(obs, logged, half, ref_obs, ref_act) <= 0.55


def test_off_support_fraction_matches_a_naive_loop():
    rng = np.random.default_rng(1)
    for trial in range(5):
        ref_obs, ref_act = rng.normal(size=(60, 3)), rng.normal(size=(60, 2))
        obs, logged = rng.normal(size=(15, 3)), rng.normal(size=(15, 2))
        acting = logged + rng.normal(scale=trial, size=(15, 2))
        fast = off_support_fraction(obs, logged, acting, ref_obs, ref_act, chunk=4)
        assert fast == _naive_off_support(obs, logged, acting, ref_obs, ref_act)


@pytest.mark.parametrize("kwargs,match", [
    ({"quantile": 1.0}, "quantile"),
    ({"quantile": 0.0}, "quantile"),
])
def test_off_support_fraction_bad_arguments(kwargs, match):
    x = np.zeros((4, 2))
    with pytest.raises(ValueError, match=match):
        off_support_fraction(x, x[:, :1], x[:, :1], x, x[:, :1], **kwargs)
    with pytest.raises(ValueError, match="policy_actions"):
        off_support_fraction(x, x[:, :1], x[:3, :1], x, x[:, :1])
    with pytest.raises(ValueError, match="widths"):
        off_support_fraction(x, x[:, :1], x, x, x[:, :1])


class ContinuousFixedPolicy(QLearningAlgoBase):
    """The continuous policy ``a = tanh(scale * x[:, 0]) + shift`` on raw observations."""

    _action_type = ActionSpace.CONTINUOUS
    _modules: _WeightsModules

    def __init__(self, scale: float, shift: float) -> None:
        super().__init__(_FixedPolicyConfig())
        self._table = torch.tensor([scale, shift])
        self.create_impl((2,), 1)

    def _build(self, observation_shape, action_size: int) -> _WeightsModules:
        return _WeightsModules(table=_Weights(self._table))

    def _predict(self, x) -> torch.Tensor:
        scale, shift = self._modules.table.table
        return (torch.tanh(scale * x[:, :1]) + shift).float()


def _continuous_dataset(n_episodes: int = 40, length: int = 10, seed: int = 0) -> MDPDataset:
    """Logged actions tanh(x0) + noise 0.05: the policy ContinuousFixedPolicy(1, 0) acts like the data."""
    rng = np.random.default_rng(seed)
    n = n_episodes * length
    obs = rng.normal(size=(n, 2)).astype(np.float32)
    actions = (np.tanh(obs[:, :1]) + rng.normal(scale=0.05, size=(n, 1))).astype(np.float32)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[length - 1::length] = 1.0
    return MDPDataset(obs, actions, rng.normal(size=n).astype(np.float32), terminals)


@pytest.mark.parametrize("shift,off", [(0.0, False), (2.0, True)])
def test_fit_measures_off_support_and_the_estimate_warns(shift, off):
    """A policy acting like the data: a small share, no support warning; the
    same policy shifted by 2 (outside every logged action): nearly all
    held-out states off the data, recorded and warned about."""
    dataset = _continuous_dataset()
    policy = ContinuousFixedPolicy(1.0, shift)
    offrl.seed(0)
    config = FQEConfig(encoder_factory=VectorEncoderFactory(hidden_units=[16]), batch_size=16)
    fqe = FQE(algo=policy, config=config)
    _fit(fqe, dataset, steps=4, per_epoch=2)
    share = fqe.convergence.off_support
    assert (share > 0.9) if off else (share <= 0.1), share
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        estimate = fqe.estimate_policy_value(dataset, n_bootstrap=10, seed=0)
    assert estimate.off_support == share
    support_warnings = [w for w in record if "acts off the data" in str(w.message)]
    assert len(support_warnings) == (1 if share > OFF_SUPPORT_WARN else 0)
    # nothing held out: not measured
    unheld = FQE(algo=policy, config=config)
    _fit(unheld, dataset, steps=2, per_epoch=2, holdout_fraction=0.0)
    assert np.isnan(unheld.convergence.off_support)


def test_discrete_fqe_does_not_measure_support():
    dataset = _episodes_dataset(n_episodes=20)
    fqe = DiscreteFQE(algo=FixedPolicy(np.eye(2)), config=_small_config())
    _fit(fqe, dataset, steps=2, per_epoch=2)
    assert fqe.convergence.n_heldout_episodes == 2 and np.isnan(fqe.convergence.off_support)


# -------------------------------------------------------------- configs
@pytest.mark.parametrize("cls", [FQEConfig, DiscreteFQEConfig])
def test_recommended_configs_are_valid_and_leave_the_defaults_alone(cls):
    config = cls.recommended()
    assert type(config) is cls
    assert (config.learning_rate, config.batch_size, config.target_update_interval) == (2e-3, 256, 20)
    assert config.ema_decay == 0.9995  # values read from the weights' moving average
    assert config.encoder_factory == ByShapeEncoderFactory(vector_hidden_units=[256, 256, 256], vector_layer_norm=True)
    assert isinstance(config.observation_scaler, StandardObservationScaler) and config.reward_scaler is None
    assert cls.from_dict(config.to_dict()).to_dict() == config.to_dict()
    assert cls.recommended(gamma=0.9, batch_size=64).batch_size == 64
    with pytest.raises(ValueError, match="batch_size"):
        cls.recommended(batch_size=0)
    default = cls()
    assert (default.learning_rate, default.batch_size, default.target_update_interval) == (1e-4, 100, 100)
    assert default.ema_decay is None and isinstance(default.encoder_factory, DefaultEncoderFactory)
    assert cls.recommended().observation_scaler is not cls.recommended().observation_scaler  # fresh each call


# ------------------------------------------------------- weight averaging
def _flat_weights(module) -> list:
    return [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize("discrete", [True, False])
def test_averaged_network_is_the_moving_average_of_the_weights(discrete):
    """avg_0 = the initial weights, avg_t = d avg_(t-1) + (1 - d) theta_t
    after every update, by hand from the online weights recorded after each
    step; values (V(s0) in the diagnostic, predict_value) are read from it."""
    decay = 0.8
    if discrete:
        dataset, algo = _episodes_dataset(), FixedPolicy(np.array([[1.0, -1.0], [0.5, 0.2]]))
        config, fqe_cls = _small_config(ema_decay=decay, learning_rate=1e-2), DiscreteFQE
    else:
        dataset, algo = _continuous_dataset(n_episodes=10), ContinuousFixedPolicy(1.0, 0.0)
        config = FQEConfig(encoder_factory=VectorEncoderFactory(hidden_units=[16]), batch_size=16, ema_decay=decay,
                           learning_rate=1e-2)
        fqe_cls = FQE
    offrl.seed(0)
    fqe = fqe_cls(algo=algo, config=config)
    fqe.build_with_dataset(dataset)
    expected = _flat_weights(fqe.modules["q_function"])
    assert all(torch.equal(a, b) for a, b in zip(expected, _flat_weights(fqe.modules["averaged_q_function"])))

    def record(algo, epoch, step):
        for avg, theta in zip(expected, _flat_weights(algo.modules["q_function"])):
            avg.mul_(decay).add_((1.0 - decay) * theta)

    _fit(fqe, dataset, steps=6, per_epoch=3, callback=record)
    averaged, online = _flat_weights(fqe.modules["averaged_q_function"]), _flat_weights(fqe.modules["q_function"])
    for got, want in zip(averaged, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert any(not torch.allclose(a, b) for a, b in zip(averaged, online))  # the average lags the online weights

    arrays = dataset.to_arrays()
    obs, actions = arrays["observations"][:8], arrays["actions"][:8]
    by_hand = copy.deepcopy(fqe.modules["q_function"])
    with torch.no_grad():
        for p, want in zip(by_hand.parameters(), expected):
            p.copy_(want)
        x = fqe._observation_tensor(obs)
        if discrete:
            want_q = by_hand.expected(x).mean(dim=0).gather(1, torch.as_tensor(actions).long().view(-1, 1)).squeeze(1)
        else:
            want_q = by_hand.expected(x, torch.as_tensor(actions, dtype=torch.float32)).mean(dim=0).squeeze(1)
    np.testing.assert_allclose(fqe.predict_value(obs, actions), want_q.numpy(), rtol=1e-5, atol=1e-6)
    firsts = np.asarray(offrl.ope.initial_observations(dataset))
    v0 = fqe.predict_value(firsts, algo.predict(firsts)).astype(np.float64).mean()
    assert fqe.convergence.initial_values[-1] == pytest.approx(v0, rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("cls", [FQEConfig, DiscreteFQEConfig])
def test_weight_averaging_is_off_by_default(cls):
    assert cls().ema_decay is None
    offrl.seed(0)
    fqe = DiscreteFQE(algo=FixedPolicy(np.eye(2)), config=_small_config())
    _fit(fqe, _episodes_dataset(n_episodes=4), steps=4, per_epoch=2)
    assert "averaged_q_function" not in fqe.modules  # d3rlpy's FQE: values read from the trained network


def test_weight_averaging_survives_save_and_load(tmp_path):
    dataset, policy = _episodes_dataset(), FixedPolicy(np.array([[1.0, -1.0], [0.5, 0.2]]))
    offrl.seed(0)
    fqe = DiscreteFQE(algo=policy, config=_small_config(ema_decay=0.9, learning_rate=1e-2))
    _fit(fqe, dataset, steps=6, per_epoch=3)
    path = tmp_path / "fqe.d3"
    fqe.save(str(path))
    loaded = DiscreteFQE.load(str(path), algo=policy)
    assert loaded.config.ema_decay == 0.9
    obs = dataset.to_arrays()["observations"]
    actions = policy.predict(obs)
    np.testing.assert_array_equal(loaded.predict_value(obs, actions), fqe.predict_value(obs, actions))
    for a, b in zip(_flat_weights(loaded.modules["averaged_q_function"]), _flat_weights(fqe.modules["averaged_q_function"])):
        assert torch.equal(a, b)
    online = DiscreteFQE(algo=policy, config=_small_config(learning_rate=1e-2))  # without averaging: other values
    online.build_with_dataset(dataset)
    online.modules["q_function"].load_state_dict(fqe.modules["q_function"].state_dict())
    assert not np.allclose(online.predict_value(obs, actions), fqe.predict_value(obs, actions))


def test_copy_q_function_from_sets_the_averaged_network_too():
    dataset, policy = _episodes_dataset(), FixedPolicy(np.eye(2))
    averaged = DiscreteFQE(algo=policy, config=_small_config(ema_decay=0.9))
    averaged.build_with_dataset(dataset)
    plain = DiscreteFQE(algo=policy, config=_small_config())
    plain.build_with_dataset(dataset)
    averaged.copy_q_function_from(plain)
    for a, b in zip(_flat_weights(averaged.modules["averaged_q_function"]), _flat_weights(plain.modules["q_function"])):
        assert torch.equal(a, b)  # values are read from the copied weights, not the old initial ones
    obs = dataset.to_arrays()["observations"]
    np.testing.assert_array_equal(averaged.predict_value(obs, policy.predict(obs)), plain.predict_value(obs, policy.predict(obs)))


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.0, -0.5, 1.5, float("nan"), float("inf"), "0.99", True])
@pytest.mark.parametrize("cls", [FQEConfig, DiscreteFQEConfig])
def test_bad_ema_decay_names_the_field_and_range(cls, value):
    with pytest.raises(ValueError, match=r"ema_decay must be None \(off\) or a number in \(0, 1\)"):
        cls(ema_decay=value)
    with pytest.raises(ValueError, match="ema_decay"):
        cls.recommended(ema_decay=value)


@pytest.mark.parametrize("shape,conv", [((1, 36, 36), True), ((4,), False)])
def test_recommended_keeps_convolutions_for_images_and_a_deeper_mlp_for_vectors(shape, conv):
    """recommended()'s encoder chooses by the observation shape when FQE is
    built: Nature-DQN convolutions for images, a 3-layer MLP with layer
    normalisation for vectors (in the trained and the averaged network)."""
    policy = offrl.algos.DiscreteBCConfig(encoder_factory=DefaultEncoderFactory()).create()
    policy.create_impl(shape, 2)
    fqe = DiscreteFQE(algo=policy, config=DiscreteFQEConfig.recommended(observation_scaler=None))  # nothing to fit
    fqe.create_impl(shape, 2)
    for name in ("q_function", "averaged_q_function"):
        modules = list(fqe.modules[name].modules())
        assert any(isinstance(m, nn.Conv2d) for m in modules) == conv
        if not conv:
            assert sum(isinstance(m, nn.LayerNorm) for m in modules) == 3
            assert sum(isinstance(m, nn.Linear) for m in modules) == 4  # 3 hidden layers and the head
    obs = np.zeros((2, *shape), dtype=np.float32)
    assert fqe.predict_value(obs, np.array([0, 1])).shape == (2,)


# ---------------------------------------------------------- bad arguments
@pytest.mark.parametrize("kwargs,field", [
    ({"early_stopping": "yes"}, "early_stopping"),
    ({"early_stopping": 1}, "early_stopping"),
    ({"holdout_fraction": 1.0}, "holdout_fraction"),
    ({"holdout_fraction": -0.1}, "holdout_fraction"),
    ({"holdout_fraction": float("nan")}, "holdout_fraction"),
    ({"holdout_fraction": "0.1"}, "holdout_fraction"),
    ({"convergence_window": 0}, "convergence_window"),
    ({"convergence_tolerance": 0.0}, "convergence_tolerance"),
    ({"convergence_tolerance": float("inf")}, "convergence_tolerance"),
])
def test_bad_convergence_arguments_name_the_field(kwargs, field):
    dataset = _episodes_dataset(n_episodes=4)
    fqe = DiscreteFQE(algo=FixedPolicy(np.eye(2)), config=_small_config())
    with pytest.raises(ValueError, match=field):
        _fit(fqe, dataset, steps=2, per_epoch=2, **kwargs)
    assert not fqe.is_built  # refused before anything was built


def test_evaluator_names_clashing_with_the_diagnostic_are_refused():
    dataset = _episodes_dataset(n_episodes=4)
    fqe = DiscreteFQE(algo=FixedPolicy(np.eye(2)), config=_small_config())
    with pytest.raises(ValueError, match="fqe_initial_value"):
        _fit(fqe, dataset, steps=2, per_epoch=2, evaluators={"fqe_initial_value": lambda algo, data: 0.0})


def test_policy_value_estimate_keeps_its_old_constructor():
    estimate = PolicyValueEstimate(1.5, 1.0, 2.0, np.array([1.5]), 0.95, 10)
    assert float(estimate) == 1.5 and estimate.converged is False and np.isnan(estimate.value_change)


# ------------------------------------------------------ accuracy (slow)
GAMMA_ENV = 0.99
#: case -> (environment, policy config, policy training steps)
ENV_CASES = {
    "cartpole-bc": ("cartpole", "DiscreteBCConfig", 3000),
    "cartpole-cql": ("cartpole", "DiscreteCQLConfig", 5000),
    "pendulum-bc": ("pendulum", "BCConfig", 3000),
    "pendulum-iql": ("pendulum", "IQLConfig", 4000),
    "pendulum-cql": ("pendulum", "CQLConfig", 4000),
}


def _env_policy(case: str, dataset):
    _, config_name, steps = ENV_CASES[case]
    kwargs: dict = {}
    if config_name == "DiscreteCQLConfig":
        kwargs["observation_scaler"] = StandardObservationScaler()
    if config_name in ("IQLConfig", "CQLConfig"):  # Pendulum's torques lie in [-2, 2]; a tanh policy acts in [-1, 1]
        kwargs["action_scaler"] = MinMaxActionScaler(minimum=np.array([-2.0]), maximum=np.array([2.0]))
    offrl.seed(0)
    algo = getattr(offrl.algos, config_name)(**kwargs).create(device="cpu")
    algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, logger_adapter=NoopAdapterFactory(), show_progress=False)
    return algo


def _return_from_dataset_starts(algo, env_id: str, starts: np.ndarray, horizon: int = 1000) -> float:
    """The policy's mean discounted return from each of the dataset's first
    observations set as the (deterministic) environment's state, without
    the time limit FQE bootstraps through (see benchmarks/fqe_convergence.py)."""
    import gymnasium

    envs = [gymnasium.make(env_id, max_episode_steps=horizon) for _ in range(starts.shape[0])]
    observations = starts.astype(np.float32).copy()
    for i, (env, start) in enumerate(zip(envs, starts)):
        env.reset(seed=i)
        if env_id.startswith("Pendulum"):
            env.unwrapped.state = np.array([np.arctan2(start[1], start[0]), start[2]], dtype=np.float64)
        else:
            env.unwrapped.state = np.array(start, dtype=np.float64)
    returns, alive, discount = np.zeros(len(envs)), np.ones(len(envs), dtype=bool), 1.0
    for _ in range(horizon):
        actions = algo.predict(observations)
        for i in np.flatnonzero(alive):
            observation, reward, terminated, truncated, _ = envs[i].step(actions[i])
            returns[i] += discount * float(reward)
            observations[i] = observation
            alive[i] = not (terminated or truncated)
        discount *= GAMMA_ENV
        if not alive.any():
            break
    return float(returns.mean())


#: not strict: one FQE seed measured inside 10 %, and the cause of the earlier failure (states the data lacks) remains
PENDULUM_IQL_SHORTFALL = pytest.mark.xfail(
    strict=False,
    reason="measured with today's recommended() (3x256 layer-normed MLP, lr 2e-3, ema_decay 0.9995): -438.3 "
           "against the true -460.0 at the 20,000 cap (+4.7 %, unsettled, FQE seed 0 only). With the earlier "
           "recommended() (2x256, lr 1e-3) the estimate sat near -165 to -195 for ~11,000 updates, then "
           "diverged (-5075 at 20,000): the policy spins the pendulum into states the data barely covers "
           "(40 % of its visited states beyond the data's 95th-percentile neighbour distance, BC 7 %), "
           "where FQE's Q is a guess; see benchmarks/README.md",
)
SHORTFALLS = {"pendulum-iql": PENDULUM_IQL_SHORTFALL}


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, marks=SHORTFALLS[c]) if c in SHORTFALLS else c
                                  for c in ENV_CASES])
def test_recommended_fqe_with_early_stopping_is_within_10_percent_of_the_environment(case):
    """recommended() + early stopping on the built-in replay data: within
    10 % of the policy's discounted return in the environment, measured from
    the dataset's initial states, in at most 20,000 updates. For
    cartpole-bc also the issue's figure: d3rlpy's defaults after 4,000
    updates estimate about a third of the value. Measured with the
    benchmark's cached policies (benchmarks/README.md, FQE seed 0):
    cartpole-bc +1.9 % settled at 19,000, cartpole-cql +1.8 % and
    pendulum-cql +0.2 % at the cap unsettled, pendulum-bc +5.8 % settled at
    18,000; within 10 % over FQE seeds 0-2 in all four."""
    env_name = ENV_CASES[case][0]
    dataset, env = (offrl.datasets.get_cartpole if env_name == "cartpole" else offrl.datasets.get_pendulum)("replay")
    algo = _env_policy(case, dataset)
    truth = _return_from_dataset_starts(algo, env.spec.id, np.asarray(offrl.ope.initial_observations(dataset)))
    discrete = env_name == "cartpole"
    config_cls, fqe_cls = (DiscreteFQEConfig, DiscreteFQE) if discrete else (FQEConfig, FQE)
    offrl.seed(0)
    fqe = fqe_cls(algo=algo, config=config_cls.recommended(gamma=GAMMA_ENV), device="cpu")
    _fit(fqe, dataset, steps=20000, per_epoch=1000, early_stopping=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # a run that reached the cap unsettled still has to be accurate
        estimate = fqe.estimate_policy_value(dataset, n_bootstrap=10, seed=0)
    assert fqe.grad_step <= 20000
    assert abs(estimate.value - truth) <= 0.10 * abs(truth), (estimate.value, truth, fqe.grad_step)
    if case == "cartpole-bc":
        offrl.seed(0)
        default = DiscreteFQE(algo=algo, config=DiscreteFQEConfig(gamma=GAMMA_ENV), device="cpu")
        _fit(default, dataset, steps=4000, per_epoch=1000)
        # 4 epochs: fewer than the rule's 10, so the warning says so
        with pytest.warns(UserWarning, match="may not have settled: 4 epoch"):
            underestimate = default.estimate_policy_value(dataset, n_bootstrap=10, seed=0)
        assert underestimate.value < 0.5 * truth and not underestimate.converged
