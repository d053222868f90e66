"""``offrl quickstart`` (the README's first command) with tiny step counts."""

from __future__ import annotations

import json

import numpy as np
import pytest

from offrl.cli import main
from offrl.export import load_onnx_policy
from offrl.serialization import load_learnable


def test_quickstart_writes_what_it_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OFFRL_DATA_DIR", str(tmp_path / "cache"))
    out = tmp_path / "qs"
    assert main(["quickstart", "--steps", "40", "--fqe-steps", "20", "--n-trials", "2", "--output-dir", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "report.json").read_text())
    assert report["dataset"] == "cartpole-replay" and report["algorithm"] == "DiscreteCQL"
    for key in ("model", "policy_onnx", "logs", "report"):
        assert report["paths"][key] in printed
    algo = load_learnable(report["paths"]["model"])
    assert algo.grad_step == 40
    observations = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
    np.testing.assert_array_equal(load_onnx_policy(report["paths"]["policy_onnx"]).predict(observations),
                                  algo.predict(observations))
    assert report["export_check"]["action_agreement"] == 1.0
    assert report["environment_return"]["n_trials"] == 2
    assert 8 <= report["environment_return"]["min"] <= report["environment_return"]["max"] <= 500
    assert np.isfinite(report["fqe_initial_state_value"])
    assert len((out / "logs" / "environment.csv").read_text().splitlines()) == 5  # one row per epoch
    if report["paths"]["learning_curve"] is not None:
        assert (out / "learning_curve.png").stat().st_size > 10000


def test_quickstart_unknown_dataset_is_one_line(tmp_path, capsys):
    assert main(["quickstart", "--dataset", "nope", "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown dataset 'nope'; known datasets: cartpole-expert" in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_quickstart_at_default_settings_learns(tmp_path, monkeypatch):
    """The README's first command: the trained policy balances the pole
    better than the data's behaviour and FQE lands near the discounted
    value of what the environment shows."""
    from offrl.quickstart import run_quickstart

    monkeypatch.setenv("OFFRL_DATA_DIR", str(tmp_path / "cache"))
    report = run_quickstart(output_dir=str(tmp_path / "qs"), show_progress=False)
    assert report["environment_return"]["mean"] > report["behaviour_policy_return"]
    assert report["total_seconds"] < 180
