"""Dict observation keys survive ``params.json``: an algorithm rebuilt with
``from_json`` knows its keys and checks a dict input key by key; params
written before keys existed still load (any keys, taken in sorted order)."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import offrl
from offrl.algos import DQN, DQNConfig
from offrl.dataset import MDPDataset
from offrl.logging import FileAdapterFactory
from offrl.models import DefaultEncoderFactory


def _dict_dataset() -> tuple:
    rng = np.random.default_rng(0)
    n = 24
    observations = {
        "state": rng.normal(size=(n, 3)).astype(np.float32),
        "joints": rng.uniform(-1.0, 1.0, size=(n, 2)).astype(np.float32),
    }
    terminals = np.zeros(n, dtype=np.float32)
    terminals[[7, 15, 23]] = 1.0
    dataset = MDPDataset(observations, rng.integers(0, 2, size=n), rng.normal(size=n).astype(np.float32), terminals,
                         action_size=2)
    return dataset, observations


def _trained(tmp_path: pathlib.Path) -> tuple:
    """A DQN fitted for 2 steps on dict observations, logging to files;
    returns ``(algo, observations, params.json path)``."""
    dataset, observations = _dict_dataset()
    algo = DQNConfig(batch_size=4, encoder_factory=DefaultEncoderFactory()).create()
    offrl.seed(0)
    algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, experiment_name="keys", with_timestamp=False,
             logger_adapter=FileAdapterFactory(root_dir=str(tmp_path / "logs")), show_progress=False)
    return algo, observations, tmp_path / "logs" / "keys" / "params.json"


def test_from_json_knows_the_keys_and_checks_them_by_name(tmp_path):
    algo, observations, params_path = _trained(tmp_path)
    assert json.loads(params_path.read_text())["observation_keys"] == ["joints", "state"]
    rebuilt = DQN.from_json(str(params_path))
    assert rebuilt.observation_keys == ("joints", "state")
    model = tmp_path / "model.d3"
    algo.save(str(model))
    rebuilt.load_model(str(model))
    x = {"state": observations["state"][:5], "joints": observations["joints"][:5]}
    np.testing.assert_array_equal(rebuilt.predict(x), algo.predict(x))
    np.testing.assert_array_equal(rebuilt.predict(x), algo.predict([x["joints"], x["state"]]))
    with pytest.raises(ValueError, match="no key 'state'"):
        rebuilt.predict({"joints": x["joints"], "velocity": x["state"]})
    with pytest.raises(ValueError, match="unexpected key 'extra'"):
        rebuilt.predict({**x, "extra": x["state"]})
    # the module-level rebuild gives the same
    assert offrl.serialization.algo_from_params_json(str(params_path)).observation_keys == ("joints", "state")


def test_params_written_before_keys_existed_still_load(tmp_path):
    algo, observations, params_path = _trained(tmp_path)
    params = json.loads(params_path.read_text())
    del params["observation_keys"]
    old = tmp_path / "old_params.json"
    old.write_text(json.dumps(params))
    rebuilt = DQN.from_json(str(old))
    assert rebuilt.observation_keys is None
    model = tmp_path / "model.d3"
    algo.save(str(model))
    rebuilt.load_model(str(model))  # the model file's keys are read back
    assert rebuilt.observation_keys == ("joints", "state")
    again = DQN.from_json(str(old))
    again.load_state(algo.get_state(), "state")  # a state without params keeps the model keyless
    assert again.observation_keys is None
    # keyless: any two keys are accepted, taken in sorted order
    x = {"a": observations["joints"][:3], "b": observations["state"][:3]}
    np.testing.assert_array_equal(again.predict(x), algo.predict({"joints": x["a"], "state": x["b"]}))


@pytest.mark.parametrize("keys", [["joints"], ["joints", "joints"], ["joints", 3], "joints"])
def test_bad_recorded_keys_are_refused_naming_the_field(tmp_path, keys):
    _, _, params_path = _trained(tmp_path)
    params = json.loads(params_path.read_text())
    params["observation_keys"] = keys
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(params))
    with pytest.raises(ValueError, match=r"bad\.json: observation_keys is .*expected 2 distinct key names"):
        DQN.from_json(str(bad))


def test_observation_keys_setter_checks_its_input():
    dataset, _ = _dict_dataset()
    algo = DQNConfig(batch_size=4, encoder_factory=DefaultEncoderFactory()).create()
    with pytest.raises(RuntimeError):
        algo.observation_keys = ("a", "b")  # not built yet
    algo.build_with_dataset(dataset)
    algo.observation_keys = ["b", "a"]
    assert algo.observation_keys == ("b", "a")
    with pytest.raises(TypeError, match="observation_keys must be a list of strings"):
        algo.observation_keys = "ab"
    with pytest.raises(ValueError, match="observation_keys is \\['a'\\]; expected 2 distinct key names"):
        algo.observation_keys = ["a"]
    algo.observation_keys = None
    assert algo.observation_keys is None
