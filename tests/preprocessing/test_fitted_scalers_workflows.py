"""offrl fits scalers on the algorithm's copy and never mutates the user's
config (d3rlpy fits the config's own scaler objects); the config the
algorithm reports (``algo.config``) names the fitted scalers, so d3rlpy's
``algo.config.create()`` habit carries them (issue 33). These tests run every
documented d3rlpy workflow that carries a fitted model elsewhere and check
that each reproduces the fitted model exactly: ``save`` / ``load_learnable``,
``params.json`` + ``from_json`` + ``load_model``, ``copy_policy_from`` /
``copy_q_function_from`` and ``algo.config.create()``."""

from __future__ import annotations

import os

import numpy as np
import pytest

import offrl
from offrl.algos import SAC, SACConfig
from offrl.dataset import MDPDataset
from offrl.logging import FileAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.preprocessing import (
    MinMaxActionScaler,
    StandardObservationScaler,
    StandardRewardScaler,
)

N_STEPS = 4


def _dataset() -> MDPDataset:
    rng = np.random.default_rng(0)
    n = 60
    observations = (rng.normal(size=(n, 3)) * [1.0, 20.0, 0.1] + [5.0, -40.0, 2.0]).astype(np.float32)
    actions = rng.uniform(-3.0, 5.0, size=(n, 2)).astype(np.float32)
    rewards = (rng.normal(size=n) * 10 + 3).astype(np.float32)
    terminals = np.zeros(n)
    terminals[19::20] = 1.0
    return MDPDataset(observations, actions, rewards, terminals)


def _config(**scalers) -> SACConfig:
    small = VectorEncoderFactory(hidden_units=[16])
    defaults = dict(observation_scaler=StandardObservationScaler(), action_scaler=MinMaxActionScaler(),
                    reward_scaler=StandardRewardScaler())
    defaults.update(scalers)
    return SACConfig(actor_encoder_factory=small, critic_encoder_factory=small, batch_size=8, **defaults)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A SAC fitted with all three scalers, its config, dataset and log directory."""
    offrl.seed(0)
    root = tmp_path_factory.mktemp("logs")
    config = _config()
    dataset = _dataset()
    algo = config.create()
    algo.fit(dataset, n_steps=N_STEPS, n_steps_per_epoch=N_STEPS, experiment_name="exp", with_timestamp=False,
             logger_adapter=FileAdapterFactory(root_dir=str(root)), show_progress=False)
    return {"algo": algo, "config": config, "dataset": dataset, "logdir": os.path.join(str(root), "exp")}


def _probe(dataset: MDPDataset) -> tuple:
    arrays = dataset.to_arrays()
    return arrays["observations"][:16], arrays["actions"][:16]


def _assert_same_model(a, b, dataset) -> None:
    observations, actions = _probe(dataset)
    np.testing.assert_array_equal(a.predict(observations), b.predict(observations))
    np.testing.assert_array_equal(a.predict_value(observations, actions), b.predict_value(observations, actions))
    for name in ("observation_scaler", "action_scaler", "reward_scaler"):
        assert getattr(a, name) == getattr(b, name), name  # same statistics, to the last bit


def test_fit_leaves_the_config_unfitted_and_fits_the_algorithms_copy(trained):
    algo, config, dataset = trained["algo"], trained["config"], trained["dataset"]
    assert not config.observation_scaler.built and not config.action_scaler.built and not config.reward_scaler.built
    # the algorithm reports a config naming its fitted scalers (a copy: the user's stays as given)
    assert algo.config is not config and algo.config is algo.config
    assert algo.config.observation_scaler is algo.observation_scaler and algo.observation_scaler.built
    assert algo.config.action_scaler is algo.action_scaler and algo.config.reward_scaler is algo.reward_scaler
    assert algo.config.batch_size == config.batch_size and algo.get_params()["config"] is config
    observations = dataset.to_arrays()["observations"].astype(np.float64)
    np.testing.assert_allclose(algo.observation_scaler.mean, observations.mean(axis=0), rtol=1e-12)
    np.testing.assert_array_equal(algo.action_scaler.maximum, dataset.to_arrays()["actions"].max(axis=0))
    assert isinstance(algo.reward_scaler.std, float)


def test_save_and_load_learnable_reproduce_the_fitted_model(trained, tmp_path):
    algo = trained["algo"]
    path = str(tmp_path / "sac.d3")
    algo.save(path)
    loaded = offrl.load_learnable(path)
    _assert_same_model(algo, loaded, trained["dataset"])
    assert loaded.config.observation_scaler.built  # the statistics come with the file


def test_params_json_from_json_and_load_model_reproduce_the_fitted_model(trained):
    logdir = trained["logdir"]
    rebuilt = SAC.from_json(os.path.join(logdir, "params.json"))
    observations, _ = _probe(trained["dataset"])
    # params.json holds the config as the user wrote it: the statistics come with the model file
    with pytest.raises(RuntimeError, match="StandardObservationScaler is not fitted"):
        rebuilt.predict(observations)
    rebuilt.load_model(os.path.join(logdir, f"model_{N_STEPS}.d3"))
    _assert_same_model(trained["algo"], rebuilt, trained["dataset"])


def test_copy_from_an_algorithm_built_on_the_same_dataset(trained):
    algo, dataset = trained["algo"], trained["dataset"]
    target = algo.config.create()
    target.build_with_dataset(dataset)  # fits its own scaler copies: the same statistics
    target.copy_policy_from(algo)
    target.copy_q_function_from(algo)
    _assert_same_model(algo, target, dataset)


def test_copy_to_a_config_given_the_fitted_scalers(trained):
    """The offrl spelling of d3rlpy's 'reuse the fitted scaler objects':
    pass ``algo.observation_scaler`` (the fitted copy) to the new config."""
    algo, dataset = trained["algo"], trained["dataset"]
    config = _config(observation_scaler=algo.observation_scaler, action_scaler=algo.action_scaler,
                     reward_scaler=algo.reward_scaler)
    target = config.create()
    target.create_impl(algo.observation_shape, algo.action_size)  # as the d3rlpy docs' transfer example
    target.copy_policy_from(algo)
    target.copy_q_function_from(algo)
    _assert_same_model(algo, target, dataset)
    target.observation_scaler.mean = np.zeros(3)  # the target holds its own copy
    assert not np.array_equal(algo.observation_scaler.mean, np.zeros(3))


def test_config_create_on_no_data_carries_the_fitted_scalers(trained):
    """d3rlpy's habit: ``algo.config.create()`` then ``copy_*_from`` gives a
    ready algorithm (d3rlpy's fit fitted the config's scalers in place;
    offrl's ``algo.config`` names the fitted copies)."""
    algo = trained["algo"]
    target = algo.config.create()
    target.create_impl(algo.observation_shape, algo.action_size)
    target.copy_policy_from(algo)
    target.copy_q_function_from(algo)
    _assert_same_model(algo, target, trained["dataset"])
    target.observation_scaler.mean = np.zeros(3)  # the new algorithm holds its own copy
    assert not np.array_equal(algo.observation_scaler.mean, np.zeros(3))
    assert not trained["config"].observation_scaler.built
