"""d3rlpy docs, "Tutorials / Preprocess / Postprocess" and "API Reference /
Preprocessing", run with ``import offrl``.

Changes other than the import (marked ``# docs:``): sizes;
``get_dataset("pendulum-random")`` -> the session's Pendulum dataset (the
random one is built locally too, but costs seconds); the docs' bare
``StandardRewardScaler(...)`` (a NameError as written) and the reference's
``d3rlpy.preprocesing`` typo; ``cql.fit(dataset)`` without ``n_steps``
(required in d3rlpy 2.x too).

d3rlpy fits the scaler object held by the config in place; offrl fits a
copy that lives on the algorithm (``algo.observation_scaler``) and leaves
the config as given (see docs/COMPATIBILITY.md). The tests read the fitted
statistics from the algorithm, which works with both libraries.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import offrl

NOOP = {"show_progress": False, "logger_adapter": offrl.logging.NoopAdapterFactory()}


def _all(dataset, field):
    return np.concatenate([getattr(ep, field) for ep in dataset.episodes])


def test_observation_scaler_fitted_at_fit(pendulum) -> None:
    dataset, _ = pendulum
    # prepare scaler without initialization
    observation_scaler = offrl.preprocessing.StandardObservationScaler()
    sac = offrl.algos.SACConfig(observation_scaler=observation_scaler, batch_size=16).create()
    sac.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    observations = _all(dataset, "observations").astype(np.float64)
    np.testing.assert_allclose(sac.observation_scaler.mean, observations.mean(axis=0), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(sac.observation_scaler.std, observations.std(axis=0), rtol=1e-4)


def test_observation_scaler_manual(pendulum, workdir) -> None:
    dataset, _ = pendulum
    # setup manually
    observations = []
    for episode in dataset.episodes[:20]:  # docs: all episodes
        observations += episode.observations.tolist()
    mean = np.mean(observations, axis=0)
    std = np.std(observations, axis=0)
    observation_scaler = offrl.preprocessing.StandardObservationScaler(mean=mean, std=std)
    # set as observation_scaler
    sac = offrl.algos.SACConfig(observation_scaler=observation_scaler, batch_size=16).create()
    sac.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    # given statistics are kept, not refitted
    np.testing.assert_allclose(sac.observation_scaler.mean, mean, rtol=1e-6)
    np.testing.assert_allclose(sac.observation_scaler.std, std, rtol=1e-6)
    # transform is (x - mean) / (std + eps), eps = 1e-3 by default
    x = torch.tensor(np.asarray(observations[:5]), dtype=torch.float32)
    np.testing.assert_allclose(
        sac.observation_scaler.transform(x).numpy(), (np.asarray(observations[:5]) - mean) / (std + 1e-3),
        rtol=1e-4, atol=1e-5,
    )


def test_action_scaler_fitted_and_manual(pendulum) -> None:
    dataset, _ = pendulum
    # prepare scaler without initialization
    action_scaler = offrl.preprocessing.MinMaxActionScaler()
    sac = offrl.algos.SACConfig(action_scaler=action_scaler, batch_size=16).create()
    sac.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    actions_all = _all(dataset, "actions")
    np.testing.assert_allclose(sac.action_scaler.minimum, actions_all.min(axis=0), rtol=1e-6)
    np.testing.assert_allclose(sac.action_scaler.maximum, actions_all.max(axis=0), rtol=1e-6)
    # the policy's actions are mapped back to the dataset's range
    x = dataset.episodes[0].observations[:16]
    assert np.all(sac.predict(x) >= actions_all.min() - 1e-5)
    assert np.all(sac.predict(x) <= actions_all.max() + 1e-5)

    # setup manually
    actions = []
    for episode in dataset.episodes:
        actions += episode.actions.tolist()
    minimum_action = np.min(actions, axis=0)
    maximum_action = np.max(actions, axis=0)
    action_scaler = offrl.preprocessing.MinMaxActionScaler(
        minimum=minimum_action,
        maximum=maximum_action,
    )
    sac = offrl.algos.SACConfig(action_scaler=action_scaler).create()
    sac.build_with_dataset(dataset)
    np.testing.assert_allclose(sac.action_scaler.minimum, minimum_action, rtol=1e-6)
    # an action at the maximum maps to +1, at the minimum to -1
    t = torch.tensor(np.stack([maximum_action, minimum_action]), dtype=torch.float32)
    np.testing.assert_allclose(sac.action_scaler.transform(t).numpy().reshape(-1), [1.0, -1.0], rtol=1e-6)


def test_reward_scaler_fitted_and_manual(pendulum) -> None:
    dataset, _ = pendulum
    # prepare scaler without initialization
    reward_scaler = offrl.preprocessing.StandardRewardScaler()
    sac = offrl.algos.SACConfig(reward_scaler=reward_scaler, batch_size=16).create()
    sac.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    rewards_all = _all(dataset, "rewards").astype(np.float64)
    np.testing.assert_allclose(sac.reward_scaler.mean, rewards_all.mean(), rtol=1e-4)
    np.testing.assert_allclose(sac.reward_scaler.std, rewards_all.std(), rtol=1e-4)

    # setup manuall
    rewards = []
    for episode in dataset.episodes:
        rewards += episode.rewards.tolist()
    mean = np.mean(rewards)
    std = np.std(rewards)
    # docs: bare `StandardRewardScaler(...)` (never imported in the example)
    reward_scaler = offrl.preprocessing.StandardRewardScaler(mean=mean, std=std)
    sac = offrl.algos.SACConfig(reward_scaler=reward_scaler).create()
    sac.build_with_dataset(dataset)
    r = torch.tensor([[mean + std + 1e-3], [mean]], dtype=torch.float32)  # (r - mean) / (std + eps)
    np.testing.assert_allclose(sac.reward_scaler.transform(r).numpy().reshape(-1), [1.0, 0.0], rtol=1e-5, atol=1e-5)


def test_reference_observation_scaler_in_torchscript(pendulum, workdir) -> None:
    from offrl.algos import CQLConfig
    from offrl.preprocessing import StandardObservationScaler  # docs: d3rlpy.preprocesing (typo)

    dataset, _ = pendulum
    cql = CQLConfig(observation_scaler=StandardObservationScaler(), batch_size=16).create()
    # observation scaler is fitted from the given dataset
    cql.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)  # docs: 100000
    # preprocesing is included in TorchScript
    cql.save_policy("policy.pt")
    # you don't need to take care of preprocessing at production
    policy = torch.jit.load("policy.pt")
    unpreprocessed_x = dataset.episodes[0].observations[:8]
    with torch.no_grad():
        action = policy(torch.as_tensor(unpreprocessed_x))
    np.testing.assert_allclose(action.numpy(), cql.predict(unpreprocessed_x), rtol=1e-5, atol=1e-6)


def test_reference_action_scaler_in_torchscript(pendulum, workdir) -> None:
    from offrl.algos import CQLConfig
    from offrl.preprocessing import MinMaxActionScaler

    dataset, _ = pendulum
    # a dataset with actions in [-2, 2] (Pendulum's range) to be scaled
    cql = CQLConfig(action_scaler=MinMaxActionScaler(minimum=np.array([-2.0]), maximum=np.array([2.0])),
                    batch_size=16).create()
    # action scaler is fitted from the given episodes
    cql.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)
    # postprocessing is included in TorchScript
    cql.save_policy("policy.pt")
    policy = torch.jit.load("policy.pt")
    x = dataset.episodes[0].observations[:8]
    with torch.no_grad():
        action = policy(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(action, cql.predict(x), rtol=1e-5, atol=1e-6)
    assert np.all(np.abs(action) <= 2.0 + 1e-5)


def test_reference_reward_scaler_offline_and_online(pendulum, workdir) -> None:
    from offrl.algos import CQLConfig
    from offrl.preprocessing import MinMaxRewardScaler, StandardRewardScaler

    dataset, env = pendulum
    cql = CQLConfig(reward_scaler=StandardRewardScaler(), batch_size=16).create()
    # reward scaler is fitted from the given episodes
    cql.fit(dataset, n_steps=2, n_steps_per_epoch=2, **NOOP)  # docs: cql.fit(dataset)
    mean = float(cql.reward_scaler.mean)
    # reward scaler is also available at finetuning (and keeps its statistics).
    cql.fit_online(env, n_steps=20, n_steps_per_epoch=20, update_start_step=19, **NOOP)  # docs: cql.fit_online(env)
    assert float(cql.reward_scaler.mean) == pytest.approx(mean)

    reward_scaler = MinMaxRewardScaler(minimum=-16.0, maximum=0.0)  # docs: minimum=..., maximum=...
    cql = CQLConfig(reward_scaler=reward_scaler).create()
    cql.build_with_dataset(dataset)
    r = torch.tensor([[-16.0], [0.0], [-8.0]])
    np.testing.assert_allclose(cql.reward_scaler.transform(r).numpy().reshape(-1), [0.0, 1.0, 0.5], rtol=1e-6)


@pytest.mark.parametrize(
    "name",
    [
        "ObservationScaler", "PixelObservationScaler", "MinMaxObservationScaler", "StandardObservationScaler",
        "ActionScaler", "MinMaxActionScaler",
        "RewardScaler", "ClipRewardScaler", "MinMaxRewardScaler", "StandardRewardScaler",
        "MultiplyRewardScaler", "ReturnBasedRewardScaler", "ConstantShiftRewardScaler",
    ],
)
def test_documented_scalers_exist(name) -> None:
    assert isinstance(getattr(offrl.preprocessing, name), type)


def test_pixel_and_clip_and_multiply_scalers() -> None:
    x = torch.tensor([[0.0, 255.0]])
    np.testing.assert_allclose(offrl.preprocessing.PixelObservationScaler().transform(x).numpy(), [[0.0, 1.0]])
    r = torch.tensor([[-3.0], [0.5], [3.0]])
    clip = offrl.preprocessing.ClipRewardScaler(low=-1.0, high=1.0)
    np.testing.assert_allclose(clip.transform(r).numpy().reshape(-1), [-1.0, 0.5, 1.0])
    mul = offrl.preprocessing.MultiplyRewardScaler(multiplier=2.0)
    np.testing.assert_allclose(mul.transform(r).numpy().reshape(-1), [-6.0, 1.0, 6.0])
    shift = offrl.preprocessing.ConstantShiftRewardScaler(shift=-1.0)
    np.testing.assert_allclose(shift.transform(r).numpy().reshape(-1), [-4.0, -0.5, 2.0])


def test_fitted_scalers_travel_with_every_documented_reload(pendulum, workdir) -> None:
    # offrl fits the scaler on the algorithm, not on the config (d3rlpy mutates
    # the config's scaler); every documented way of rebuilding a model still
    # gives the fitted model: load_learnable, params.json + from_json +
    # load_model, and config.create() + load_model
    dataset, _ = pendulum
    sac = offrl.algos.SACConfig(observation_scaler=offrl.preprocessing.StandardObservationScaler(),
                                reward_scaler=offrl.preprocessing.StandardRewardScaler(), batch_size=16).create()
    sac.fit(dataset, n_steps=2, n_steps_per_epoch=2, experiment_name="run", with_timestamp=False,
            show_progress=False, logger_adapter=offrl.logging.FileAdapterFactory(root_dir="logs"))
    x = dataset.episodes[0].observations[:6]
    expected = sac.predict(x)
    sac.save("model.d3")
    sac.save_model("model.pt")
    np.testing.assert_array_equal(offrl.load_learnable("model.d3").predict(x), expected)
    from_json = offrl.algos.SAC.from_json(str(workdir / "logs" / "run" / "params.json"))
    from_json.load_model("model.pt")
    np.testing.assert_array_equal(from_json.predict(x), expected)
    created = sac.config.create()
    created.build_with_dataset(dataset)
    created.load_model("model.pt")
    np.testing.assert_array_equal(created.predict(x), expected)
    np.testing.assert_allclose(created.observation_scaler.mean, sac.observation_scaler.mean, rtol=1e-6)
