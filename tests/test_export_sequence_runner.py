"""export/run_sequence_policy.py: an exported Decision Transformer runs with
numpy + onnxruntime only and acts exactly as offrl's stateful wrapper
(context window, return-to-go and timesteps kept across an episode)."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import gymnasium
import numpy as np
import pytest

import offrl
from offrl.algos import DecisionTransformerConfig, DiscreteDecisionTransformerConfig
from offrl.models import VectorEncoderFactory
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler, StandardRewardScaler

RUNNER = pathlib.Path(__file__).resolve().parents[1] / "export" / "run_sequence_policy.py"
BLOCKER = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "offrl"):
            raise ImportError(name + " is blocked in this deployment test")
        return None
sys.meta_path.insert(0, _Block())
"""
SMALL = dict(encoder_factory=VectorEncoderFactory(hidden_units=[16]), num_layers=1, num_heads=2, context_size=4,
             attn_dropout=0.0, resid_dropout=0.0, embed_dropout=0.0)


def _runner_module():
    spec = importlib.util.spec_from_file_location("run_sequence_policy", RUNNER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scaled_dt(tmp_path):
    offrl.seed(0)
    rng = np.random.default_rng(0)
    n = 40
    terminals = np.zeros(n)
    terminals[[19, 39]] = 1.0
    data = offrl.dataset.MDPDataset(rng.normal(size=(n, 3)) * 2 + 1, rng.uniform(-2, 2, size=(n, 1)),
                                    rng.normal(size=n), terminals)
    algo = DecisionTransformerConfig(observation_scaler=StandardObservationScaler(), action_scaler=MinMaxActionScaler(),
                                     reward_scaler=StandardRewardScaler(), max_timestep=300, **SMALL).create()
    algo.build_with_dataset(data)
    path = tmp_path / "dt.onnx"
    algo.save_policy(path)
    return algo, path


@pytest.mark.parametrize("discrete", [False, True])
def test_runner_acts_like_the_stateful_wrapper(discrete, tmp_path):
    if discrete:
        offrl.seed(0)
        algo = DiscreteDecisionTransformerConfig(**SMALL).create()
        algo.create_impl((3,), 3)
        path = tmp_path / "dt.onnx"
        algo.save_policy(path)
    else:
        algo, path = _scaled_dt(tmp_path)
    policy = _runner_module().SequencePolicy(str(path), target_return=7.0)
    sampler = offrl.algos.GreedyTransformerActionSampler() if discrete else None  # the runner is greedy
    actor = algo.as_stateful_wrapper(target_return=7.0, action_sampler=sampler)
    rng = np.random.default_rng(1)
    for episode in range(2):  # the second episode checks reset
        policy.reset()
        actor.reset()
        reward = 0.0
        for _ in range(9):  # beyond context_size=4: the window slides
            observation = rng.normal(size=3).astype(np.float32)
            got, expected = policy.act(observation, reward), actor.predict(observation, reward)
            if discrete:
                assert got == expected
            else:
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
            reward = float(rng.normal())


def test_runner_refuses_a_policy_that_is_not_a_sequence_model(tmp_path):
    algo = offrl.algos.BCConfig(batch_size=4).create()
    algo.create_impl((3,), 1)
    algo.save_policy(tmp_path / "bc.onnx")
    with pytest.raises(ValueError, match="not an exported sequence policy"):
        _runner_module().SequencePolicy(str(tmp_path / "bc.onnx"), target_return=1.0)


def test_runner_runs_an_episode_without_torch_or_offrl(tmp_path):
    offrl.seed(0)
    algo = DecisionTransformerConfig(max_timestep=300, **SMALL).create()
    algo.build_with_env(gymnasium.make("Pendulum-v1"))
    algo.save_policy(tmp_path / "dt.onnx")
    (tmp_path / "sitecustomize.py").write_text(BLOCKER)
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(RUNNER), str(tmp_path / "dt.onnx"), "--target-return", "-100",
                           "--env", "Pendulum-v1", "--episodes", "1"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "mean return over 1 episodes" in done.stdout
    assert '"algorithm": "decision_transformer"' in done.stdout
