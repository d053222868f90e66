"""The README's shortest example runs (with tiny step counts)."""

from __future__ import annotations

import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def test_shortest_example_runs(tmp_path, monkeypatch, capsys):
    text = README.read_text()
    code = re.search(r"## The shortest example\s+```python\n(.*?)```", text, re.S).group(1)
    code = re.sub(r"n_steps=\d+", "n_steps=20", code)
    code = re.sub(r"n_steps_per_epoch=\d+", "n_steps_per_epoch=10", code)
    monkeypatch.setenv("OFFRL_DATA_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, str(README), "exec"), namespace)
    out = capsys.readouterr().out
    assert "PolicyValueEstimate(" in out and "OPEResult(WPDIS" in out
    assert (tmp_path / "cql.d3").is_file() and (tmp_path / "policy.onnx").is_file()
    assert namespace["cql"].grad_step == 20
