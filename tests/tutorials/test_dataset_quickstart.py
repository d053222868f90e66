import importlib.util
import os
import pathlib

import numpy as np

TUTORIAL = pathlib.Path(__file__).resolve().parents[2] / "tutorials" / "dataset_quickstart.py"


def _load():
    spec = importlib.util.spec_from_file_location("dataset_quickstart", TUTORIAL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tutorial_runs_and_round_trips(tmp_path, capsys):
    result = _load().main(["--steps", "3000", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "reloaded identical: True" in out
    assert os.path.dirname(result["path"]) == str(tmp_path)
    original, reloaded = result["dataset"], result["reloaded"]
    assert reloaded.size() == original.size()
    assert reloaded.transition_count == original.transition_count
    np.testing.assert_array_equal(reloaded.compute_returns(), original.compute_returns())
