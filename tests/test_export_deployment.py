"""The deployment side runs with numpy + onnxruntime only (torch and offrl blocked)."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np

from offrl.algos import DQNConfig, TD3PlusBCConfig
from offrl.dataset import MDPDataset
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler

RUNNER = pathlib.Path(__file__).resolve().parents[1] / "export" / "run_policy.py"

BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "offrl"):
            raise ImportError(name + " is blocked in this deployment test")
        return None
sys.meta_path.insert(0, _Block())
"""


def _run(tmp_path, *args, stdin=None):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, str(RUNNER), *args], input=stdin, capture_output=True, text=True, env=env, timeout=120)


def _continuous(tmp_path):
    rng = np.random.default_rng(0)
    data = MDPDataset(rng.normal(size=(64, 3)) * 2 + 1, rng.uniform(-2, 2, size=(64, 1)), rng.normal(size=64), np.r_[np.zeros(63), 1])
    algo = TD3PlusBCConfig(batch_size=8, observation_scaler=StandardObservationScaler(), action_scaler=MinMaxActionScaler()).create()
    algo.build_with_dataset(data)
    path = tmp_path / "policy.onnx"
    algo.save_policy(path)
    return algo, path


def test_blocker_really_blocks(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    out = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode != 0 and "blocked" in out.stderr


def test_csv_in_csv_out_matches_predict(tmp_path):
    algo, path = _continuous(tmp_path)
    x = np.random.default_rng(1).normal(size=(6, 3)).astype(np.float32)
    np.savetxt(tmp_path / "obs.csv", x, delimiter=",")
    result = _run(tmp_path, str(path), "--csv", str(tmp_path / "obs.csv"), "--out", str(tmp_path / "actions.csv"))
    assert result.returncode == 0, result.stderr
    actions = np.loadtxt(tmp_path / "actions.csv", delimiter=",", ndmin=2)
    np.testing.assert_allclose(actions, algo.predict(x), rtol=1e-5, atol=1e-5)


def test_stdin_and_discrete_indices(tmp_path):
    rng = np.random.default_rng(2)
    data = MDPDataset(rng.normal(size=(64, 4)), rng.integers(0, 3, 64), rng.normal(size=64), np.r_[np.zeros(63), 1], action_size=3)
    algo = DQNConfig(batch_size=8).create()
    algo.build_with_dataset(data)
    algo.save_policy(tmp_path / "dqn.onnx")
    x = rng.normal(size=(5, 4)).astype(np.float32)
    text = "\n".join(",".join(str(v) for v in row) for row in x)
    result = _run(tmp_path, str(tmp_path / "dqn.onnx"), "--stdin", stdin=text)
    assert result.returncode == 0, result.stderr
    assert [int(line) for line in result.stdout.split()] == algo.predict(x).tolist()


def test_environment_episodes(tmp_path):
    _, path = _continuous(tmp_path)
    result = _run(tmp_path, str(path), "--env", "Pendulum-v1", "--episodes", "1")
    assert result.returncode == 0, result.stderr
    assert "mean return over 1 episodes" in result.stdout


SNIPPET = """
import sys
import numpy as np
import onnxruntime as ort
data = np.load(sys.argv[2])
session = ort.InferenceSession(sys.argv[1])
feed = {f"input_{k}": data[f"x{k}"] for k in range(len(data.files))}
np.save(sys.argv[3], session.run(None, feed)[0])
"""


def _snippet(tmp_path, policy, inputs):
    """d3rlpy's documented deployment code, in a process where torch and offrl are blocked."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    (tmp_path / "snippet.py").write_text(SNIPPET)
    np.savez(tmp_path / "x.npz", **{f"x{k}": x for k, x in enumerate(inputs)})
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run([sys.executable, str(tmp_path / "snippet.py"), str(policy), str(tmp_path / "x.npz"), str(tmp_path / "y.npy")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    return np.load(tmp_path / "y.npy")


def test_d3rlpy_deployment_snippet_vector(tmp_path):
    algo, path = _continuous(tmp_path)
    x = np.random.default_rng(3).normal(size=(5, 3)).astype(np.float32)
    np.testing.assert_allclose(_snippet(tmp_path, path, [x]), algo.predict(x), rtol=1e-5, atol=1e-5)


def test_d3rlpy_deployment_snippet_tuple(tmp_path):
    from offrl.preprocessing import TupleObservationScaler

    rng = np.random.default_rng(4)
    observations = [rng.normal(size=(48, 3)) * 2 + 1, rng.normal(size=(48, 2)) - 3]
    data = MDPDataset(observations, rng.integers(0, 3, 48), rng.normal(size=48), np.r_[np.zeros(47), 1], action_size=3)
    scaler = TupleObservationScaler([StandardObservationScaler(), StandardObservationScaler()])
    algo = DQNConfig(batch_size=8, observation_scaler=scaler).create()
    algo.build_with_dataset(data)
    algo.save_policy(tmp_path / "tuple.onnx")
    x = [rng.normal(size=(6, 3)).astype(np.float32) * 2 + 1, rng.normal(size=(6, 2)).astype(np.float32) - 3]
    np.testing.assert_array_equal(_snippet(tmp_path, tmp_path / "tuple.onnx", x), algo.predict(x))


def test_runner_reads_files_with_the_old_names(tmp_path, monkeypatch):
    """A policy exported before the d3rlpy names (``observation`` -> ``action``) still runs."""
    import offrl.export

    monkeypatch.setattr(offrl.export, "_input_names", lambda algo: ["observation"])
    monkeypatch.setattr(offrl.export, "OUTPUT_NAME", "action")
    algo, path = _continuous(tmp_path)
    monkeypatch.undo()
    x = np.random.default_rng(5).normal(size=(4, 3)).astype(np.float32)
    np.savetxt(tmp_path / "obs.csv", x, delimiter=",")
    result = _run(tmp_path, str(path), "--csv", str(tmp_path / "obs.csv"), "--out", str(tmp_path / "actions.csv"))
    assert result.returncode == 0, result.stderr
    np.testing.assert_allclose(np.loadtxt(tmp_path / "actions.csv", delimiter=",", ndmin=2), algo.predict(x), rtol=1e-5, atol=1e-5)
