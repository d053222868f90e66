"""Exported policies of dict observations: ONNX inputs named by key, fed by
name (offrl's loaders and export/run_policy.py with torch/offrl blocked)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from offrl.algos import DQNConfig, SACConfig
from offrl.dataset import MDPDataset
from offrl.export import load_onnx_policy, load_torchscript_policy
from offrl.preprocessing import MinMaxObservationScaler, StandardObservationScaler

RUNNER_DIR = pathlib.Path(__file__).resolve().parents[1] / "export"

BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "offrl"):
            raise ImportError(name + " is blocked in this deployment test")
        return None
sys.meta_path.insert(0, _Block())
"""

SNIPPET = """
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from run_policy import Policy
policy = Policy(sys.argv[2])
data = np.load(sys.argv[3])
np.save(sys.argv[4], policy.act({k: data[k] for k in data.files}))
"""


def _dict_algo(discrete: bool):
    rng = np.random.default_rng(0)
    observations = {"velocity": rng.normal(size=(48, 2)) * 3 - 1, "position": rng.normal(size=(48, 3)) * 2 + 1}
    actions = rng.integers(0, 3, 48) if discrete else rng.uniform(-1, 1, size=(48, 2))
    data = MDPDataset(observations, actions, rng.normal(size=48), np.r_[np.zeros(47), 1], action_size=3 if discrete else None)
    scalers = {"velocity": StandardObservationScaler(), "position": MinMaxObservationScaler()}
    algo = (DQNConfig if discrete else SACConfig)(batch_size=8, observation_scaler=scalers).create()
    algo.build_with_dataset(data)
    x = {"velocity": rng.normal(size=(6, 2)).astype(np.float32), "position": rng.normal(size=(6, 3)).astype(np.float32)}
    return algo, x


@pytest.mark.parametrize("discrete", [True, False])
def test_onnx_inputs_are_the_keys(discrete, tmp_path):
    algo, x = _dict_algo(discrete)
    path = tmp_path / "policy.onnx"
    algo.save_policy(path)
    policy = load_onnx_policy(path)
    assert policy.names == ["position", "velocity"]
    assert json.loads(policy.metadata["inputs"]) == ["position", "velocity"]
    expected = algo.predict(x)
    if discrete:
        np.testing.assert_array_equal(policy.predict(x), expected)
    else:
        np.testing.assert_allclose(policy.predict(x), expected, rtol=1e-5, atol=1e-5)
    # fed by name: the dict's own order does not matter
    reordered = {"velocity": x["velocity"], "position": x["position"]}
    np.testing.assert_array_equal(policy.predict(reordered), policy.predict(x))
    with pytest.raises(ValueError, match="'velocity'"):
        policy.predict({"position": x["position"]})
    with pytest.raises(ValueError, match="'extra'"):
        policy.predict({**x, "extra": x["position"]})


def test_torchscript_takes_dicts_by_recorded_inputs(tmp_path):
    algo, x = _dict_algo(True)
    path = tmp_path / "policy.pt"
    algo.save_policy(path)
    policy = load_torchscript_policy(path)
    np.testing.assert_array_equal(policy.predict(x), algo.predict(x))


def test_run_policy_feeds_dicts_by_name_without_torch(tmp_path):
    algo, x = _dict_algo(True)
    algo.save_policy(tmp_path / "policy.onnx")
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    (tmp_path / "snippet.py").write_text(SNIPPET)
    np.savez(tmp_path / "x.npz", **x)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, str(tmp_path / "snippet.py"), str(RUNNER_DIR), str(tmp_path / "policy.onnx"),
         str(tmp_path / "x.npz"), str(tmp_path / "y.npy")],
        capture_output=True, text=True, env=env, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), algo.predict(x))
