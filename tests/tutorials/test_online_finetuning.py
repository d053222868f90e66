import numpy as np
import pytest

import offrl
from offrl.algos import DQNConfig

TINY = ["--dataset-steps", "500", "--offline-steps", "20", "--online-steps", "200", "--steps-per-epoch", "100",
        "--eval-episodes", "1"]


def test_offline_then_three_online_runs(tutorial, tmp_path):
    module = tutorial("online_finetuning")
    result = module.main(TINY + ["--out", str(tmp_path)])
    cql, probe = result["cql"], result["probe"]
    assert cql.grad_step == 20

    # the saved offline model is what the continued run started from
    saved = offrl.load_learnable(result["model_path"])
    np.testing.assert_array_equal(saved.predict_value(probe, cql.predict(probe)), cql.predict_value(probe, cql.predict(probe)))
    assert result["continued"].grad_step > 20  # offline steps, then online updates on top

    # copy_q_function_from gives DQN exactly the offline Q-function
    assert result["copied_exactly"]
    fresh = DQNConfig(**module.HYPERPARAMETERS).create()
    fresh.create_impl(cql.observation_shape, cql.action_size)
    fresh.copy_q_function_from(cql)
    np.testing.assert_array_equal(fresh.predict(probe), cql.predict(probe))

    # every run took the same number of environment steps and was evaluated after each epoch
    assert list(result["curves"]) == ["DiscreteCQL, continued", "DQN from DiscreteCQL", "DQN from scratch"]
    for curve in result["curves"].values():
        assert len(curve) == 2 and all(1.0 <= value <= 500.0 for value in curve)
    assert result["dqn"].grad_step > 0 and result["scratch"].grad_step > 0
    assert result["dataset"].transition_count == 500  # fit_online wrote into its own buffer, not the dataset


@pytest.mark.slow
def test_finetuning_improves_on_the_offline_policy(tutorial, tmp_path):
    result = tutorial("online_finetuning").main(["--out", str(tmp_path)])
    continued = result["curves"]["DiscreteCQL, continued"]
    assert result["offline_return"] > 3 * result["logged_return"]
    assert max(continued) > result["offline_return"] + 50
    assert max(continued) > max(result["curves"]["DQN from scratch"])
