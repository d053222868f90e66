import csv
import os

import numpy as np
import onnxruntime
import pytest

TINY = ["--dataset-steps", "1000", "--steps", "40", "--steps-per-epoch", "20", "--eval-episodes", "1"]


def test_fit_evaluate_save_load_export(tutorial, tmp_path, capsys):
    result = tutorial("getting_started").main(TINY + ["--out", str(tmp_path)])
    assert "loaded model gives the same actions: True, same Q-values: True" in capsys.readouterr().out

    # two epochs of 20 steps, each scored by both evaluators
    assert [epoch for epoch, _ in result["results"]] == [1, 2]
    for _, metrics in result["results"]:
        for name in ("loss", "td_error", "environment"):
            assert np.isfinite(metrics[name]), name
        assert 1.0 <= metrics["environment"] <= 500.0

    log_dir = result["log_dir"]
    assert os.path.dirname(os.path.dirname(log_dir)) == str(tmp_path)
    with open(os.path.join(log_dir, "loss.csv")) as f:
        rows = list(csv.reader(f))
    assert [(int(epoch), int(step)) for epoch, step, _ in rows] == [(1, 20), (2, 40)]
    assert {"params.json", "model_20.d3", "model_40.d3", "environment.csv"} <= set(os.listdir(log_dir))

    # the loaded model and the exported graph act exactly like the fitted one
    algo, loaded = result["algo"], result["loaded"]
    x = result["test_observations"]
    assert loaded.grad_step == algo.grad_step == 40
    np.testing.assert_array_equal(loaded.predict(x), algo.predict(x))
    actions = algo.predict(x)
    np.testing.assert_array_equal(loaded.predict_value(x, actions), algo.predict_value(x, actions))
    session = onnxruntime.InferenceSession(result["onnx_path"], providers=["CPUExecutionProvider"])
    (onnx_actions,) = session.run(None, {"input_0": x.astype(np.float32)})
    np.testing.assert_array_equal(onnx_actions, actions)
    assert result["same_actions"] and result["same_values"] and result["onnx_matches"]
    assert len(result["returns"]) == 1


@pytest.mark.slow
def test_learns_to_beat_the_logging_policy(tutorial, tmp_path):
    result = tutorial("getting_started").main(
        ["--dataset-steps", "20000", "--steps", "2000", "--out", str(tmp_path)]
    )
    assert np.mean(result["returns"]) > result["logged_return"] + 100
