import os

import numpy as np
import onnxruntime
import pytest

TINY = ["--dataset-steps", "600", "--steps", "20", "--episodes", "1", "--latency-repeats", "20"]


def test_exported_policy_runs_without_torch_and_matches(tutorial, tmp_path):
    result = tutorial("deployment_onnx").main(TINY + ["--out", str(tmp_path)])
    algo = result["algo"]
    observations = result["observations"]

    # CSV actions written by export/run_policy.py (torch and offrl blocked) equal predict's
    assert os.path.isfile(tmp_path / "actions.csv")
    assert result["deployed_actions"].shape == (len(observations), 1)
    np.testing.assert_allclose(result["deployed_actions"], algo.predict(observations), rtol=1e-5, atol=1e-5)
    assert result["max_difference"] <= 1e-5
    assert np.abs(result["deployed_actions"]).max() <= 2.0  # environment units, action scaler inside
    scaler = algo.action_scaler
    assert (scaler.minimum.tolist(), scaler.maximum.tolist()) == ([-2.0], [2.0])  # Pendulum's torque range

    # the same file, opened here, takes raw observations and carries its metadata
    session = onnxruntime.InferenceSession(result["onnx_path"], providers=["CPUExecutionProvider"])
    (actions,) = session.run(None, {"input_0": observations.astype(np.float32)})
    np.testing.assert_allclose(actions, algo.predict(observations), rtol=1e-5, atol=1e-5)
    assert result["metadata"]["action_space"] == "continuous"
    assert result["metadata"]["observation_shapes"] == "[[3]]"

    # an episode driven by the exported policy returns what offrl's rollout returns
    assert len(result["deployed_returns"]) == len(result["offrl_returns"]) == 1
    np.testing.assert_allclose(result["deployed_returns"], result["offrl_returns"], atol=0.02)
    assert os.path.isfile(result["torchscript_path"])
    assert set(result["latencies_us"]) == {"onnxruntime", "torchscript", "algo.predict"}
    assert all(v > 0 for v in result["latencies_us"].values())


def test_the_runner_really_runs_without_torch(tutorial, tmp_path):
    module = tutorial("deployment_onnx")
    script = tmp_path / "needs_torch.py"
    script.write_text("import numpy, onnxruntime, sys\nprint(sys.argv[1:])\nimport torch\n")
    with pytest.raises(RuntimeError, match=r"needs_torch.py failed:(.|\n)*Error: import of torch halted"):
        module.run_without_torch(script, "a", "b")
    script.write_text("import numpy, onnxruntime, sys\nprint(sys.argv[1:])\n")
    assert module.run_without_torch(script, "a", "b").stdout == "['a', 'b']\n"
