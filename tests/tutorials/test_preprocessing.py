import numpy as np
import onnxruntime
import pytest

TINY = ["--dataset-steps", "800", "--steps", "40", "--steps-per-epoch", "20", "--eval-episodes", "1",
        "--valve-days", "6"]


def test_scalers_are_fitted_saved_and_exported(tutorial, tmp_path):
    module = tutorial("preprocessing")
    result = module.main(TINY + ["--out", str(tmp_path)])
    train, test = result["train"], result["test"]

    # observations are in mm and degrees; the fitted scaler holds their statistics
    observations = train.to_arrays()["observations"].astype(np.float64)
    runs = result["observation_runs"]
    fitted = runs["standardised"]["algo"].observation_scaler
    np.testing.assert_allclose(fitted.mean, observations.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(fitted.std, observations.std(axis=0), rtol=1e-5)
    assert not runs["standardised"]["config"].observation_scaler.built  # the config is never mutated
    assert runs["raw"]["algo"].observation_scaler is None
    assert [h["epoch"] for h in runs["raw"]["history"]] == [1, 2]
    assert all(0.0 <= h["match"] <= 1.0 for run in runs.values() for h in run["history"])

    # actions: without a scaler BC cannot leave [-1, 1]; with one it speaks percent
    valve_actions = result["valve_test"].to_arrays()["actions"]
    raw, scaled = result["action_runs"]["no action scaler"], result["action_runs"]["MinMaxActionScaler"]
    assert np.abs(raw["actions"]).max() <= 1.0
    assert raw["error"] >= np.maximum(valve_actions - 1.0, 0.0).mean()
    logged = result["valves"].to_arrays()["actions"]
    scaler = scaled["algo"].action_scaler
    assert (scaler.minimum.item(), scaler.maximum.item()) == (logged.min(), logged.max())
    assert logged.min() <= scaled["actions"].min() and scaled["actions"].max() <= logged.max()

    # reward scalers, by hand: CartPole pays 1 per step
    rewards = result["scaled_rewards"]
    np.testing.assert_allclose(rewards["MultiplyRewardScaler(0.1)"], 0.1, rtol=1e-6)
    np.testing.assert_array_equal(rewards["ClipRewardScaler(-0.5, 0.5)"], 0.5)
    np.testing.assert_array_equal(rewards["StandardRewardScaler()"], 0.0)
    returns = train.compute_returns()
    np.testing.assert_allclose(rewards["ReturnBasedRewardScaler()"], 1.0 / (returns.max() - returns.min()), rtol=1e-6)

    # the statistics survive load_learnable and sit inside the ONNX graph
    assert result["same_statistics"] and result["onnx_matches"]
    np.testing.assert_array_equal(result["loaded"].observation_scaler.mean, fitted.mean)
    x = test.to_arrays()["observations"]
    session = onnxruntime.InferenceSession(result["onnx_path"], providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"input_0": x})[0],
                                  runs["standardised"]["algo"].predict(x))


def test_engineering_units_wrapper_scales_the_environment(tutorial):
    module = tutorial("preprocessing")
    import gymnasium
    from offrl.dataset import MDPDataset

    data = MDPDataset(np.ones((4, 4), np.float32), np.array([0, 1, 0, 1]), np.ones(4), np.r_[0, 0, 0, 1])
    scaled, env = module.in_engineering_units(data, gymnasium.make("CartPole-v1"))
    np.testing.assert_array_equal(scaled.to_arrays()["observations"][0], np.float32([1000.0, 1000.0, 180 / np.pi, 180 / np.pi]))
    observation, _ = env.reset(seed=3)
    plain, _ = gymnasium.make("CartPole-v1").reset(seed=3)
    np.testing.assert_allclose(observation, plain * module.UNITS, rtol=1e-6)


@pytest.mark.slow
def test_scaling_makes_the_difference(tutorial, tmp_path):
    result = tutorial("preprocessing").main(["--dataset-steps", "20000", "--out", str(tmp_path)])
    runs = result["observation_runs"]
    assert runs["standardised"]["history"][-1]["return"] >= 400
    assert runs["standardised"]["history"][-1]["match"] > runs["raw"]["history"][-1]["match"]
    assert result["action_runs"]["MinMaxActionScaler"]["error"] < 5.0 < 30.0 < result["action_runs"]["no action scaler"]["error"]
