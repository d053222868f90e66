"""save_policy: format by extension, verification against predict, no half-written files."""

from __future__ import annotations

import numpy as np
import pytest

import offrl.export
from offrl.algos import DQNConfig, RandomPolicyConfig
from offrl.models import VectorEncoderFactory


def _algo():
    algo = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    algo.create_impl((3,), 2)
    return algo


def test_unknown_extension(tmp_path):
    with pytest.raises(ValueError, match=r"\.pt .*\.onnx"):
        _algo().save_policy(tmp_path / "policy.zip")


def test_mismatch_is_an_error_and_leaves_no_file(tmp_path, monkeypatch):
    algo = _algo()
    original = offrl.export._expected
    monkeypatch.setattr(offrl.export, "_expected", lambda a, inputs: 1 - original(a, inputs))
    for ext in (".pt", ".onnx"):
        with pytest.raises(offrl.export.ExportError, match="other actions"):
            algo.save_policy(tmp_path / f"policy{ext}")
    assert list(tmp_path.iterdir()) == []


def test_policy_without_network_cannot_be_exported(tmp_path):
    algo = RandomPolicyConfig().create()
    algo.create_impl((3,), 2)
    with pytest.raises(ValueError, match="no policy network"):
        algo.save_policy(tmp_path / "policy.onnx")
    assert list(tmp_path.iterdir()) == []


def test_unbuilt_algorithm(tmp_path):
    with pytest.raises(ValueError, match="not built"):
        DQNConfig().create().save_policy(tmp_path / "policy.pt")


def test_missing_directory(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        _algo().save_policy(tmp_path / "nope" / "policy.onnx")


def test_loaded_policies_have_predict(tmp_path):
    algo = _algo()
    x = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    for ext, load in ((".pt", offrl.export.load_torchscript_policy), (".onnx", offrl.export.load_onnx_policy)):
        algo.save_policy(tmp_path / f"p{ext}")
        np.testing.assert_array_equal(load(tmp_path / f"p{ext}").predict(x), algo.predict(x))
