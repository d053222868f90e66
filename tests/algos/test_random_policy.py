"""RandomPolicy / DiscreteRandomPolicy: action ranges and distributions,
action scaler mapping, reproducibility, and that they cannot be trained."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

import offrl
from offrl.algos.random_policy import (
    DiscreteRandomPolicy,
    DiscreteRandomPolicyConfig,
    RandomPolicy,
    RandomPolicyConfig,
)
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler

N = 20000
X = np.zeros((N, 3), dtype=np.float32)


def _built(config, action_size: int = 2):
    algo = config.create()
    algo.create_impl((3,), action_size)
    return algo


def _dataset(discrete: bool, n: int = 40) -> MDPDataset:
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    if discrete:
        actions = rng.integers(0, 4, size=n)
    else:
        actions = np.stack([rng.uniform(-2.0, 3.0, size=n), rng.uniform(100.0, 101.0, size=n)], axis=1).astype(np.float32)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[9::10] = 1.0
    return MDPDataset(obs, actions, np.zeros(n, dtype=np.float32), terminals, action_size=4 if discrete else None)


class _Env:
    """Just the spaces of a gymnasium environment."""

    observation_space = spaces.Box(low=-1.0, high=1.0, shape=(3,), dtype=np.float32)
    action_space = spaces.Box(low=np.array([-2.0, 0.0], dtype=np.float32), high=np.array([2.0, 5.0], dtype=np.float32))


# -------------------------------------------------------- distributions
def test_uniform_actions_cover_minus_one_to_one():
    offrl.seed(0)
    algo = _built(RandomPolicyConfig())
    for actions in (algo.predict(X), algo.sample_action(X)):
        assert actions.shape == (N, 2) and actions.dtype == np.float32
        assert (actions >= -1.0).all() and (actions <= 1.0).all()
        np.testing.assert_allclose(actions.mean(axis=0), [0.0, 0.0], atol=0.02)
        np.testing.assert_allclose(actions.std(axis=0), [1 / np.sqrt(3)] * 2, rtol=0.02)
        # the quartiles of U(-1, 1)
        np.testing.assert_allclose(np.quantile(actions, [0.25, 0.75], axis=0), [[-0.5, -0.5], [0.5, 0.5]], atol=0.03)


def test_normal_actions_honour_normal_std():
    offrl.seed(0)
    actions = _built(RandomPolicyConfig(distribution="normal", normal_std=0.2)).predict(X)
    np.testing.assert_allclose(actions.mean(axis=0), [0.0, 0.0], atol=0.01)
    np.testing.assert_allclose(actions.std(axis=0), [0.2, 0.2], rtol=0.03)


def test_wide_normal_actions_are_clipped_to_minus_one_to_one():
    offrl.seed(0)
    actions = _built(RandomPolicyConfig(distribution="normal", normal_std=2.0)).sample_action(X)
    assert (np.abs(actions) <= 1.0).all()
    # P(|N(0, 2^2)| > 1) = P(|z| > 0.5) = 0.617
    assert np.mean(np.abs(actions) == 1.0) == pytest.approx(0.617, abs=0.015)


def test_discrete_actions_are_uniform_indices():
    offrl.seed(0)
    algo = _built(DiscreteRandomPolicyConfig(), action_size=4)
    for actions in (algo.predict(X), algo.sample_action(X)):
        assert actions.shape == (N,) and actions.dtype == np.int64
        np.testing.assert_allclose(np.bincount(actions, minlength=4) / N, [0.25] * 4, atol=0.015)
        assert set(np.unique(actions)) == {0, 1, 2, 3}


def test_observations_are_ignored_but_shapes_are_checked():
    offrl.seed(0)
    algo = _built(RandomPolicyConfig())
    a, b = algo.predict(X[:5]), algo.predict(np.full((5, 3), 100.0, dtype=np.float32))
    assert a.shape == b.shape == (5, 2) and not np.array_equal(a, b)
    with pytest.raises(ValueError, match="shape"):
        algo.predict(np.zeros((5, 4), dtype=np.float32))


def test_tuple_observations():
    offrl.seed(0)
    algo = DiscreteRandomPolicyConfig().create()
    algo.create_impl([(3,), (2, 4)], 5)
    actions = algo.predict([np.zeros((7, 3), np.float32), np.zeros((7, 2, 4), np.float32)])
    assert actions.shape == (7,) and ((actions >= 0) & (actions < 5)).all()


# -------------------------------------------------------- action scaler
@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_explicit_action_scaler_maps_to_its_bounds(distribution):
    offrl.seed(0)
    scaler = MinMaxActionScaler(minimum=[0.0, 10.0], maximum=[1.0, 20.0])
    actions = _built(RandomPolicyConfig(distribution=distribution, normal_std=0.5, action_scaler=scaler)).predict(X)
    assert (actions >= [0.0, 10.0]).all() and (actions <= [1.0, 20.0]).all()
    np.testing.assert_allclose(actions.mean(axis=0), [0.5, 15.0], atol=0.1)
    if distribution == "uniform":
        np.testing.assert_allclose(actions.min(axis=0), [0.0, 10.0], atol=0.01)
        np.testing.assert_allclose(actions.max(axis=0), [1.0, 20.0], atol=0.01)


def test_action_scaler_fitted_by_build_with_dataset():
    offrl.seed(0)
    dataset = _dataset(discrete=False)
    config = RandomPolicyConfig(action_scaler=MinMaxActionScaler(), observation_scaler=StandardObservationScaler())
    algo = config.create()
    algo.build_with_dataset(dataset)
    assert config.action_scaler.built is False  # the config's scaler is untouched
    logged = dataset.to_arrays()["actions"]
    actions = algo.predict(X)
    assert (actions >= logged.min(axis=0) - 1e-5).all() and (actions <= logged.max(axis=0) + 1e-5).all()
    np.testing.assert_allclose(actions.mean(axis=0), (logged.min(axis=0) + logged.max(axis=0)) / 2, atol=0.05)


def test_action_scaler_fitted_by_build_with_env():
    offrl.seed(0)
    algo = RandomPolicyConfig(action_scaler=MinMaxActionScaler()).create()
    algo.build_with_env(_Env())
    assert algo.action_size == 2 and algo.observation_shape == (3,)
    actions = algo.predict(X)
    assert (actions >= [-2.0, 0.0]).all() and (actions <= [2.0, 5.0]).all()
    np.testing.assert_allclose(actions.mean(axis=0), [0.0, 2.5], atol=0.05)


def test_build_with_dataset_takes_the_discrete_action_size():
    algo = DiscreteRandomPolicyConfig().create()
    algo.build_with_dataset(_dataset(discrete=True))
    assert algo.action_size == 4
    assert set(np.unique(algo.predict(X[:2000]))) == {0, 1, 2, 3}


def test_wrong_action_space_is_refused():
    with pytest.raises(ValueError, match="continuous actions"):
        RandomPolicyConfig().create().build_with_dataset(_dataset(discrete=True))
    with pytest.raises(ValueError, match="discrete actions"):
        DiscreteRandomPolicyConfig().create().build_with_dataset(_dataset(discrete=False))


# ------------------------------------------------------ reproducibility
@pytest.mark.parametrize(
    "config,action_size",
    [(RandomPolicyConfig(), 2), (RandomPolicyConfig(distribution="normal"), 2), (DiscreteRandomPolicyConfig(), 4)],
)
def test_offrl_seed_makes_draws_reproducible(config, action_size):
    algo = _built(config, action_size)
    draws = []
    for seed in (5, 5, 6):
        offrl.seed(seed)
        draws.append((algo.predict(X[:50]), algo.sample_action(X[:50])))
    np.testing.assert_array_equal(draws[0][0], draws[1][0])
    np.testing.assert_array_equal(draws[0][1], draws[1][1])
    assert not np.array_equal(draws[0][0], draws[2][0])
    assert not np.array_equal(draws[0][0], draws[0][1])  # successive calls differ


# ---------------------------------------------------------- no training
@pytest.mark.parametrize("discrete", [False, True])
def test_cannot_be_trained(discrete):
    config = DiscreteRandomPolicyConfig() if discrete else RandomPolicyConfig()
    algo = config.create()
    assert algo.is_trainable is False and algo.predicts_stochastically is True
    dataset = _dataset(discrete)
    with pytest.raises(RuntimeError, match="cannot be trained"):
        algo.fit(dataset, n_steps=10, logger_adapter=NoopAdapterFactory(), show_progress=False)
    with pytest.raises(RuntimeError, match="cannot be trained"):
        algo.fitter(dataset, n_steps=10)
    assert not algo.is_built
    algo.build_with_dataset(dataset)
    with pytest.raises(RuntimeError, match="cannot be trained"):
        algo.update(dataset.sample_transition_batch(4))
    assert algo.grad_step == 0
    assert len(algo.modules) == 0


@pytest.mark.parametrize("discrete", [False, True])
def test_no_value_function_and_no_exportable_policy(discrete):
    algo = _built(DiscreteRandomPolicyConfig() if discrete else RandomPolicyConfig(), 2)
    action = np.zeros(3, dtype=np.int64) if discrete else np.zeros((3, 2), dtype=np.float32)
    with pytest.raises(NotImplementedError):
        algo.predict_value(X[:3], action)
    with pytest.raises(NotImplementedError):
        algo.policy_module()


def test_save_and_load_keeps_the_fitted_action_scaler(tmp_path):
    algo = RandomPolicyConfig(action_scaler=MinMaxActionScaler()).create()
    algo.build_with_env(_Env())
    algo.save(tmp_path / "random.d3")
    loaded = offrl.load_learnable(tmp_path / "random.d3")
    assert isinstance(loaded, RandomPolicy)
    actions = loaded.predict(X)
    assert (actions >= [-2.0, 0.0]).all() and (actions <= [2.0, 5.0]).all()
    np.testing.assert_allclose(actions.max(axis=0), [2.0, 5.0], atol=0.01)


# ------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"distribution": "gaussian"}, "distribution"),
        ({"distribution": None}, "distribution"),
        ({"normal_std": 0.0}, "normal_std"),
        ({"normal_std": -1.0}, "normal_std"),
        ({"normal_std": float("nan")}, "normal_std"),
        ({"batch_size": -1}, "batch_size"),
    ],
)
def test_bad_hyperparameters_raise_value_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RandomPolicyConfig(**kwargs)


def test_defaults_mirror_d3rlpy():
    config = RandomPolicyConfig()
    assert (config.batch_size, config.gamma, config.distribution, config.normal_std) == (256, 0.99, "uniform", 1.0)
    assert (DiscreteRandomPolicyConfig().batch_size, DiscreteRandomPolicyConfig().gamma) == (256, 0.99)
    assert isinstance(config.create(), RandomPolicy)
    assert isinstance(DiscreteRandomPolicyConfig().create(), DiscreteRandomPolicy)
    with pytest.raises(ValueError, match="normal_std"):
        config.create().set_params(normal_std=-2.0)
