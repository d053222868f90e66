import math
import os

import pytest

pytest.importorskip("optuna", reason="the search extra is not installed")
pytest.importorskip("pandas", reason="the search extra is not installed")

TINY = ["--steps", "20", "--checkpoints", "2", "--seeds", "1", "--fqe-steps", "20", "--eval-episodes", "1"]


def test_the_choice_beside_the_truth(tutorial, tmp_path, capsys):
    result = tutorial("model_selection").main(TINY + ["--out", str(tmp_path)])
    printed = capsys.readouterr().out
    search = result["search"]
    table = search.results_

    # three configs x one seed x two checkpoints, each with its estimates and its true return
    assert len(table) == 6 and sorted(table["param_alpha"].unique()) == [0.3, 1.0, 4.0]
    assert sorted(table["step"].unique()) == [10, 20]
    assert table[["fqe", "wpdis", "true_value", "true_return"]].notna().all().all()
    # FQE cannot settle in 20 updates: every candidate is flagged and the search says so
    assert not table["reliable"].any()
    assert "warning: no candidate's fqe estimate is reliable" in printed

    # the figures printed are those of the table
    chosen = table[table["chosen"]].iloc[0]
    assert chosen["fqe"] == table["fqe"].max()
    assert result["chosen_return"] == chosen["true_return"] and result["best_return"] == table["true_return"].max()
    assert result["random_return"] == pytest.approx(table["true_return"].mean())
    assert result["default_return"] == table.loc[(table["param_alpha"] == 1.0) & (table["epoch"] == 2),
                                                 "true_return"].iloc[0]
    assert f"regret {result['best_return'] - result['chosen_return']:.1f}" in printed
    assert all(math.isnan(v) or -1.0 <= v <= 1.0 for v in result["correlation"].values())
    assert os.path.isfile(result["report"]) and result["report"].startswith(str(tmp_path))
