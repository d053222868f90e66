import importlib.util
import os
import pathlib

import numpy as np
import pytest

pd = pytest.importorskip("pandas")

TUTORIAL = pathlib.Path(__file__).resolve().parents[2] / "tutorials" / "logged_csv_to_policy.py"


def _load():
    spec = importlib.util.spec_from_file_location("logged_csv_to_policy", TUTORIAL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tutorial_turns_the_csv_into_the_dataset_and_trains(tmp_path, capsys):
    tutorial = _load()
    result = tutorial.main(["--sessions", "60", "--steps", "20", "--eval-sessions", "3", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "average return per session" in out
    assert os.path.dirname(result["path"]) == str(tmp_path)
    dataset = result["dataset"]
    table = pd.read_csv(result["path"], parse_dates=["time"])
    assert dataset.size() == table["session_id"].nunique() == 60
    # each episode is its session's rows in time order
    for episode, (_, rows) in zip(dataset.episodes, sorted(table.groupby("session_id"), key=lambda g: g[0])):
        rows = rows.sort_values("time")
        np.testing.assert_array_equal(episode.actions[:, 0], rows["action"].to_numpy())
        np.testing.assert_array_equal(episode.rewards[:, 0], rows["reward"].to_numpy(np.float32))
        assert episode.terminated == bool(rows["unsubscribed"].iloc[-1])
    actions = np.concatenate([e.actions[:, 0] for e in dataset.episodes])
    np.testing.assert_array_equal(dataset.behaviour_probabilities, tutorial.LOGGING_POLICY[actions])
    assert result["algo"].predict(np.zeros((2, 2), np.float32)).shape == (2,)


@pytest.mark.slow
def test_tutorial_policy_beats_the_logging_policy(tmp_path):
    result = _load().main(["--out", str(tmp_path)])
    assert result["learned_return"] > result["logging_return"] + 1.0
