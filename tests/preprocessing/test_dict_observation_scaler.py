"""DictObservationScaler: one scaler per key, fitted on that key's values,
JSON by key, and the tuple scaler over the sorted keys underneath."""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces

from offrl.algos import DQNConfig
from offrl.dataset import MDPDataset
from offrl.preprocessing import (
    DictObservationScaler,
    MinMaxObservationScaler,
    PixelObservationScaler,
    StandardObservationScaler,
)
from offrl.serialization import from_json_value


def _dataset():
    rng = np.random.default_rng(0)
    n = 50
    obs = {"state": rng.normal(size=(n, 3)) * 4 + 2, "camera": rng.integers(0, 256, size=(n, 1, 2, 2), dtype=np.uint8),
           "goal": rng.uniform(-3, 7, size=(n, 2))}
    return MDPDataset(obs, rng.integers(0, 2, n), rng.normal(size=n), np.r_[np.zeros(n - 1), 1], action_size=2), obs


def test_each_key_is_fitted_on_its_own_values():
    dataset, obs = _dataset()
    scaler = DictObservationScaler({"state": StandardObservationScaler(), "goal": MinMaxObservationScaler(),
                                    "camera": PixelObservationScaler()})
    assert scaler.keys == ("camera", "goal", "state")
    scaler.fit(dataset)
    camera, goal, state = scaler.observation_scalers
    state_values = obs["state"].astype(np.float32)
    np.testing.assert_allclose(state.mean, state_values.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(state.std, state_values.std(axis=0), rtol=1e-4)
    np.testing.assert_allclose(goal.minimum, obs["goal"].astype(np.float32).min(axis=0), rtol=1e-6)
    np.testing.assert_allclose(goal.maximum, obs["goal"].astype(np.float32).max(axis=0), rtol=1e-6)
    x = [torch.as_tensor(obs[k][:4].astype(np.float32)) for k in ("camera", "goal", "state")]
    out = scaler.transform(x)
    np.testing.assert_allclose(out[0].numpy(), obs["camera"][:4] / 255.0, rtol=1e-6)
    np.testing.assert_allclose(out[2].numpy(), (state_values[:4] - state_values.mean(0)) / state_values.std(0),
                               rtol=1e-3, atol=1e-5)


def test_none_leaves_a_key_alone_and_json_round_trips():
    scaler = DictObservationScaler({"b": StandardObservationScaler(), "a": None})
    record = scaler.to_dict()
    assert set(record["params"]["observation_scalers"]) == {"a", "b"}
    assert record["params"]["observation_scalers"]["a"] is None
    json.dumps(record)
    rebuilt = from_json_value(record)
    assert isinstance(rebuilt, DictObservationScaler) and rebuilt.keys == ("a", "b")
    assert rebuilt.to_dict() == record


def test_a_config_given_a_dict_wraps_it_and_saves_it_as_json():
    config = DQNConfig(observation_scaler={"state": StandardObservationScaler(), "goal": None})
    assert isinstance(config.observation_scaler, DictObservationScaler)
    rebuilt = DQNConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert rebuilt.observation_scaler.keys == ("goal", "state")
    assert rebuilt.to_dict() == config.to_dict()


def test_fit_with_a_dict_space():
    class Env(gymnasium.Env):
        observation_space = spaces.Dict({"b": spaces.Box(-2, 6, (2,)), "a": spaces.Box(0, 1, (3,))})
        action_space = spaces.Discrete(2)

    scaler = DictObservationScaler({"a": MinMaxObservationScaler(), "b": MinMaxObservationScaler()})
    scaler.fit_with_env(Env())
    np.testing.assert_array_equal(scaler.observation_scalers[1].minimum, [-2, -2])
    np.testing.assert_array_equal(scaler.observation_scalers[0].maximum, [1, 1, 1])


def test_bad_input():
    with pytest.raises(TypeError, match="non-empty dict"):
        DictObservationScaler([StandardObservationScaler()])
    with pytest.raises(TypeError, match=r"observation_scalers\['a'\]"):
        DictObservationScaler({"a": 3})
    with pytest.raises(TypeError, match="keys must be strings"):
        DictObservationScaler({1: StandardObservationScaler()})
    dataset, _ = _dataset()
    with pytest.raises(ValueError, match=r"keys \['a', 'b'\]"):
        DictObservationScaler({"a": StandardObservationScaler(), "b": StandardObservationScaler()}).fit(dataset)


def test_a_one_key_dict_is_scaled_like_its_array():
    rng = np.random.default_rng(3)
    obs = {"state": (rng.normal(size=(40, 3)) * 3 + 5).astype(np.float32)}
    data = MDPDataset(obs, rng.integers(0, 2, 40), rng.normal(size=40), np.r_[np.zeros(39), 1], action_size=2)
    algo = DQNConfig(batch_size=8, observation_scaler={"state": StandardObservationScaler()}).create()
    algo.build_with_dataset(data)
    np.testing.assert_allclose(algo.observation_scaler.observation_scalers[0].mean, obs["state"].mean(0), rtol=1e-5)
    reference = DQNConfig(batch_size=8, observation_scaler=StandardObservationScaler()).create()
    reference.build_with_dataset(MDPDataset(obs["state"], data.to_arrays()["actions"][:, 0], rng.normal(size=40),
                                            np.r_[np.zeros(39), 1], action_size=2))
    x = obs["state"][:4]
    np.testing.assert_allclose(algo.observation_scaler.transform_numpy(x), reference.observation_scaler.transform_numpy(x),
                               rtol=1e-5)
    assert algo.predict({"state": x}).shape == (4,)
