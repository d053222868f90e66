"""Model files hold JSON and tensors only; bad files give clear errors."""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import pytest
import torch
from torch import nn

import offrl
from offrl.algos import DQNConfig
from offrl.models import AdamFactory, EncoderFactory, OptimizerFactory, VectorEncoderFactory, register_encoder_factory
from offrl.serialization import from_json_value


def _trained(tmp_path):
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.create_impl((3,), 2)
    path = tmp_path / "model.d3"
    algo.save(path)
    return algo, path


def test_round_trip_and_no_leftover_temp_files(tmp_path):
    algo, path = _trained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["model.d3"]
    loaded = offrl.load_learnable(path)
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x), algo.predict(x))


def test_file_loads_with_weights_only(tmp_path):
    _, path = _trained(tmp_path)
    payload = torch.load(path, weights_only=True)
    assert payload["format"] == "offrl.model"
    assert json.loads(payload["params"])["algorithm"] == "dqn"


def test_truncated_file(tmp_path):
    _, path = _trained(tmp_path)
    data = path.read_bytes()
    cut = tmp_path / "cut.d3"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.d3 is not a readable offrl model file"):
        offrl.load_learnable(cut)


def test_garbage_and_empty_files(tmp_path):
    for name, content in [("garbage.d3", b"\x00\x01not a model" * 10), ("empty.d3", b"")]:
        p = tmp_path / name
        p.write_bytes(content)
        with pytest.raises(ValueError, match=name):
            offrl.load_learnable(p)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_pickled_objects_are_refused(tmp_path):
    p = tmp_path / "evil.d3"
    torch.save({"format": "offrl.model", "payload": _Evil()}, p)
    with pytest.raises(ValueError, match="evil.d3 is not a readable offrl model file"):
        offrl.load_learnable(p)


def test_foreign_torch_file(tmp_path):
    p = tmp_path / "foreign.pt"
    torch.save({"weights": torch.zeros(3)}, p)
    with pytest.raises(ValueError, match="foreign.pt is not an offrl model file"):
        offrl.load_learnable(p)


def test_unknown_algorithm_type(tmp_path):
    _, path = _trained(tmp_path)
    payload = torch.load(path, weights_only=True)
    params = json.loads(payload["params"])
    params["config"]["type"] = "not_an_algorithm"
    payload["params"] = json.dumps(params)
    bad = tmp_path / "bad.d3"
    torch.save(payload, bad)
    with pytest.raises(ValueError, match=r"bad.d3: unknown algorithm type 'not_an_algorithm'"):
        offrl.load_learnable(bad)


def test_missing_weights(tmp_path):
    _, path = _trained(tmp_path)
    payload = torch.load(path, weights_only=True)
    del payload["modules"]["q_function"]
    bad = tmp_path / "partial.d3"
    torch.save(payload, bad)
    with pytest.raises(ValueError, match=r"partial.d3 has no weights for \['q_function'\]"):
        offrl.load_learnable(bad)


def test_missing_file():
    with pytest.raises(FileNotFoundError, match="no model file"):
        offrl.load_learnable("/nonexistent/model.d3")


@dataclasses.dataclass
class TinyEncoderFactory(EncoderFactory):
    feature_size: int = 4

    @staticmethod
    def get_type() -> str:
        return "tiny_test_encoder"

    def create(self, observation_shape):
        return nn.Sequential(nn.Flatten(), nn.Linear(int(np.prod(observation_shape)), self.feature_size), nn.ReLU())

    def create_with_action(self, observation_shape, action_size, discrete_action=False):
        raise NotImplementedError


def test_custom_encoder_needs_registration(tmp_path):
    algo = DQNConfig(encoder_factory=TinyEncoderFactory(feature_size=5)).create()
    algo.create_impl((3,), 2)
    path = tmp_path / "custom.d3"
    algo.save(path)
    with pytest.raises(ValueError, match=r"unknown encoder type 'tiny_test_encoder'.*register_encoder_factory"):
        offrl.load_learnable(path)
    register_encoder_factory(TinyEncoderFactory)
    loaded = offrl.load_learnable(path)
    x = np.ones((2, 3), dtype=np.float32)
    np.testing.assert_array_equal(loaded.predict_value(x, [0, 1]), algo.predict_value(x, [0, 1]))


def test_save_is_atomic(tmp_path, monkeypatch):
    algo, path = _trained(tmp_path)
    before = path.read_bytes()

    def broken_save(obj, f, *args, **kwargs):
        with open(f, "wb") as fh:
            fh.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        algo.save(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["model.d3"]


def test_optimizer_factories_round_trip():
    for factory in [OptimizerFactory(torch.optim.RMSprop, alpha=0.9), OptimizerFactory("SGD", momentum=0.5, clip_grad_norm=1.0), AdamFactory(weight_decay=1e-4)]:
        rebuilt = from_json_value(json.loads(json.dumps(factory.to_dict())))
        assert rebuilt.to_dict() == factory.to_dict()
    with pytest.raises(ValueError, match="torch.optim"):
        from_json_value({"kind": "optimizer", "type": "optimizer", "params": {"optim_cls": "os.system", "clip_grad_norm": None, "kwargs": {}}})


def test_load_model_checks_algorithm_type(tmp_path):
    _, path = _trained(tmp_path)
    from offrl.algos import DoubleDQNConfig

    other = DoubleDQNConfig().create()
    with pytest.raises(ValueError, match="'dqn' model"):
        other.load_model(path)
