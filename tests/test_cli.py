from __future__ import annotations

import subprocess
import sys

import numpy as np

from offrl.algos import SACConfig
from offrl.cli import main
from offrl.export import load_onnx_policy


def test_export_command(tmp_path, capsys):
    algo = SACConfig().create()
    algo.create_impl((3,), 2)
    algo.save(tmp_path / "model.d3")
    assert main(["export", str(tmp_path / "model.d3"), str(tmp_path / "policy.onnx")]) == 0
    assert "verified" in capsys.readouterr().out
    x = np.random.default_rng(0).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_allclose(load_onnx_policy(tmp_path / "policy.onnx").predict(x), algo.predict(x), atol=1e-5)


def test_export_command_errors(tmp_path, capsys):
    assert main(["export", str(tmp_path / "missing.d3"), str(tmp_path / "p.onnx")]) == 2
    assert "no model file" in capsys.readouterr().err
    (tmp_path / "bad.d3").write_bytes(b"junk")
    assert main(["export", str(tmp_path / "bad.d3"), str(tmp_path / "p.onnx")]) == 2
    assert "bad.d3" in capsys.readouterr().err


def test_help_runs_as_module():
    out = subprocess.run([sys.executable, "-m", "offrl.cli", "export", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "ONNX" in out.stdout
