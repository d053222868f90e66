"""``offrl search``: the files it writes, what it prints, continuing a study, its errors."""

from __future__ import annotations

import csv
import json

import gymnasium
import numpy as np
import pytest

pytest.importorskip("optuna", reason="the search extra is not installed")
pytest.importorskip("pandas", reason="the search extra is not installed")

import optuna  # noqa: E402

import offrl  # noqa: E402
from offrl.cli import main  # noqa: E402

from selection_bandit import BanditEnv, bandit_dataset  # noqa: E402

FIXED = ["batch_size=32", "encoder_factory=vector", "encoder_factory.hidden_units=[16]"]


@pytest.fixture
def files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing lands anywhere else
    bandit_dataset(120).dump(str(tmp_path / "bandit.h5"))
    (tmp_path / "space.json").write_text(json.dumps({"learning_rate": [1e-7, 3e-3]}))
    return tmp_path


def _search(*extra):
    return main(["search", "bandit.h5", "dqn", *FIXED, "--space", "space.json", "--scorer", "wis,neg_td_error",
                 "--seeds", "2", "--steps", "200", "--steps-per-epoch", "100", "--test-size", "0.25",
                 "--no-progress", *extra])


def test_search_writes_results_report_and_the_chosen_model(files, capsys):
    assert _search("--output-dir", "out") == 0
    printed = capsys.readouterr().out
    assert "optuna-dashboard sqlite:///out/study.db" in printed
    assert "chosen: trial" in printed and "learning_rate" in printed
    assert "by the lower bound of wis" in printed  # the default with a scorer that has an interval
    with open(files / "out" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 2
    assert {"trial", "seed", "epoch", "step", "param_learning_rate", "wis", "wis_lower", "wis_upper", "reliable",
            "neg_td_error", "train_time", "rank", "chosen"} <= set(rows[0])
    chosen = [r for r in rows if r["chosen"] == "True"]
    assert len(chosen) == 1 and float(chosen[0]["param_learning_rate"]) == 3e-3
    assert float(chosen[0]["wis"]) == max(float(r["wis"]) for r in rows)
    report = (files / "out" / "report.html").read_text()
    assert report.startswith("<!DOCTYPE html>") and "<svg" in report
    model = offrl.load_learnable(str(files / "out" / "model.d3"))
    x = np.random.default_rng(0).normal(size=(32, 2)).astype(np.float32)
    assert (model.predict(x) == (x[:, 0] > 0)).mean() > 0.8  # the chosen policy learned the bandit

    # the same command again continues the study: nothing left, nothing trained again, the same answer
    study = optuna.load_study(study_name="offrl_search", storage="sqlite:///out/study.db")
    before = [(t.number, t.datetime_complete) for t in study.get_trials()]
    assert _search("--output-dir", "out") == 0
    assert [(t.number, t.datetime_complete) for t in study.get_trials()] == before
    with open(files / "out" / "results.csv") as f:
        assert list(csv.DictReader(f)) == rows


def test_a_given_storage_and_true_returns(files, capsys):
    if "OffrlSearchBandit-v0" not in gymnasium.registry:
        gymnasium.register("OffrlSearchBandit-v0", entry_point=BanditEnv)
    storage = f"sqlite:///{files}/shared.db"
    assert _search("--output-dir", "out2", "--storage", storage, "--study-name", "mine", "--env",
                   "OffrlSearchBandit-v0", "--eval-episodes", "20") == 0
    assert f"optuna-dashboard {storage}" in capsys.readouterr().out
    assert optuna.load_study(study_name="mine", storage=storage).trials
    with open(files / "out2" / "results.csv") as f:
        rows = list(csv.DictReader(f))
    chosen = next(r for r in rows if r["chosen"] == "True")
    assert float(chosen["true_return"]) >= 0.8  # recorded beside the estimate
    assert "Estimated against true" in (files / "out2" / "report.html").read_text()


def test_errors_are_one_line_naming_the_problem(files, capsys):
    (files / "bad.json").write_text(json.dumps({"learning_rat": [1e-3]}))
    assert main(["search", "bandit.h5", "dqn", "--space", "bad.json", "--no-progress"]) == 2
    assert "search space names 'learning_rat', but DQNConfig has no field 'learning_rat'" in capsys.readouterr().err
    (files / "bad.json").write_text(json.dumps({"learning_rate": [1e-3, -1.0]}))
    assert main(["search", "bandit.h5", "dqn", "--space", "bad.json", "--no-progress"]) == 2
    assert "search space 'learning_rate': learning_rate must be" in capsys.readouterr().err
    (files / "bad.json").write_text("{not json")
    assert main(["search", "bandit.h5", "dqn", "--space", "bad.json", "--no-progress"]) == 2
    assert "bad.json: not valid JSON" in capsys.readouterr().err
    assert main(["search", "bandit.h5", "dqn", "--space", "missing.json", "--no-progress"]) == 2
    assert "--space missing.json: no such file" in capsys.readouterr().err
    assert main(["search", "bandit.h5", "dqn", "--space", "space.json", "--test-size", "500", "--no-progress",
                 "--output-dir", "out3"]) == 2
    assert "the dataset has 120 episodes, and test_size=500 asks to hold out 500" in capsys.readouterr().err
    assert main(["search", "bandit.h5", "dqn", "--space", "space.json", "--storage", "sqlite:///no/such/dir/s.db",
                 "--no-progress", "--output-dir", "out4"]) == 2
    assert "storage 'sqlite:///no/such/dir/s.db' cannot be opened: the directory" in capsys.readouterr().err
    assert main(["search", "bandit.h5", "dqn", "--space", "space.json", "--true-return", "--no-progress",
                 "--output-dir", "out5"]) == 2
    assert "--true-return: bandit.h5 comes with no environment" in capsys.readouterr().err
