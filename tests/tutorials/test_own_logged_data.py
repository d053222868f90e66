import numpy as np
import pytest

from offrl.dataset import MDPDataset

TINY = ["--machines", "40", "--hours", "30", "--steps", "20", "--eval-machines", "20"]


def test_arrays_and_table_give_the_same_dataset(tutorial, tmp_path):
    module = tutorial("own_logged_data")
    result = module.main(TINY + ["--out", str(tmp_path)])
    dataset, log = result["dataset"], result["log"]

    # one episode per pump; breakdowns are terminal, every other log ends at the window
    assert dataset.size() == 40
    lengths = np.array([len(episode.rewards) for episode in dataset.episodes])
    terminated = np.array([bool(episode.terminated) for episode in dataset.episodes])
    assert terminated.sum() == log["terminals"].sum() > 0
    assert (lengths[~terminated] == 30).all() and (lengths[terminated] <= 30).all()
    assert len(result["table"]) == lengths.sum() == len(log["rewards"])

    # the logged propensity is the operator's probability of the action taken
    service = module.operator_service_probability(log["observations"])
    expected = np.where(log["actions"] == 1, service, 1.0 - service)
    np.testing.assert_allclose(dataset.behaviour_probabilities, expected, rtol=1e-6)

    # the shuffled table gives exactly the arrays' dataset
    assert result["identical"]
    a, b = dataset.to_arrays(), result["from_table"].to_arrays()
    for key in ("observations", "actions", "rewards", "terminals", "timeouts", "behaviour_probabilities"):
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)

    # mistakes are reported with the field and the row
    assert result["errors"]["nan_reward"] == "rewards[17] is nan"
    assert result["errors"]["short_actions"] == f"actions has {len(log['rewards']) - 1} rows, observations has {len(log['rewards'])}"
    assert "both hold step" in result["errors"]["duplicate_row"] and "'time'" in result["errors"]["duplicate_row"]

    reloaded = MDPDataset.load(result["dataset_path"])
    np.testing.assert_array_equal(reloaded.behaviour_probabilities, dataset.behaviour_probabilities)
    assert result["algo"].grad_step == 20
    assert np.isfinite(result["operator_return"]) and np.isfinite(result["learned_return"])


@pytest.mark.slow
def test_learned_policy_beats_the_operator(tutorial, tmp_path):
    result = tutorial("own_logged_data").main(["--out", str(tmp_path)])
    assert result["learned_return"] > result["operator_return"] + 2.0
