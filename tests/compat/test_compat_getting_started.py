"""d3rlpy docs, "Tutorials / Getting Started" and "After Training Policies
(Save and Load)", run with ``import offrl``.

Changes from the documentation other than the import (each marked ``# docs:``):
sizes (``n_steps``, evaluation episodes), ``device="cuda:0"`` -> CPU, and the
places where the documented code is wrong for d3rlpy 2.8.1 itself
(``DQN()`` without a config, ``ort_session.run`` returning a list, gym's
4-tuple ``step``).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import offrl


def _fit_dqn(dataset, env):
    from offrl.algos import DQNConfig
    from offrl.metrics import EnvironmentEvaluator, TDErrorEvaluator

    # docs: create(device="cuda:0"); "if you don't use GPU, set device=None"
    dqn = DQNConfig().create(device=None)
    dqn.build_with_dataset(dataset)
    td_error_evaluator = TDErrorEvaluator(episodes=dataset.episodes[:5])  # docs: all episodes
    env_evaluator = EnvironmentEvaluator(env, n_trials=1)  # docs: default 10 trials
    result = dqn.fit(
        dataset,
        n_steps=20,  # docs: 10000
        n_steps_per_epoch=10,
        evaluators={"td_error": td_error_evaluator, "environment": env_evaluator},
        show_progress=False,
    )
    return dqn, result


def test_dataset_getters_return_dataset_and_env(cartpole, pendulum) -> None:
    from offrl.datasets import get_cartpole, get_pendulum  # noqa: F401  (the documented imports)

    dataset, env = cartpole
    assert env.spec.id == "CartPole-v1"
    assert dataset.episodes[0].observations.shape[1:] == (4,)
    dataset, env = pendulum
    assert env.spec.id == "Pendulum-v1"
    assert dataset.episodes[0].actions.shape[1:] == (1,)


def test_setup_algorithm_build_with_dataset(cartpole) -> None:
    from offrl.algos import DQNConfig

    dataset, _ = cartpole
    dqn = DQNConfig().create(device=None)
    dqn.build_with_dataset(dataset)
    assert dqn.impl is not None
    assert tuple(dqn.observation_shape) == (4,)
    assert dqn.action_size == 2


def test_setup_metrics(cartpole, workdir) -> None:
    from offrl.algos import DQNConfig
    from offrl.metrics import EnvironmentEvaluator, TDErrorEvaluator

    dataset, env = cartpole
    dqn = DQNConfig().create(device=None)
    dqn.build_with_dataset(dataset)
    td_error_evaluator = TDErrorEvaluator(episodes=dataset.episodes[:5])
    td = td_error_evaluator(dqn, dataset)
    assert isinstance(td, float) and td >= 0.0 and np.isfinite(td)

    env_evaluator = EnvironmentEvaluator(env, n_trials=2)
    rewards = env_evaluator(dqn, dataset=None)
    # CartPole pays 1 per step and stops at 500 steps
    assert isinstance(rewards, float) and 1.0 <= rewards <= 500.0


def test_start_training_returns_epoch_metrics(cartpole, workdir) -> None:
    dataset, env = cartpole
    dqn, result = _fit_dqn(dataset, env)
    assert [epoch for epoch, _ in result] == [1, 2]
    for _, metrics in result:
        assert {"td_error", "environment", "loss"} <= set(metrics)
        assert all(isinstance(v, float) for v in metrics.values())
    assert dqn.grad_step == 20


def test_predict_and_predict_value(cartpole, workdir) -> None:
    dataset, env = cartpole
    dqn, _ = _fit_dqn(dataset, env)
    observation, _ = env.reset(seed=0)
    # return actions based on the greedy-policy
    action = dqn.predict(np.expand_dims(observation, axis=0))
    assert action.shape == (1,) and action[0] in (0, 1)
    # estimate action-values
    value = dqn.predict_value(np.expand_dims(observation, axis=0), action)
    assert value.shape == (1,)
    # the greedy action has the largest estimated value
    other = dqn.predict_value(np.expand_dims(observation, axis=0), 1 - action)
    assert value[0] >= other[0]


def test_save_and_load(cartpole, workdir) -> None:
    dataset, env = cartpole
    dqn, _ = _fit_dqn(dataset, env)
    x = np.stack([ep.observations[0] for ep in dataset.episodes[:8]])
    expected_actions = dqn.predict(x)
    expected_values = dqn.predict_value(x, expected_actions)

    # save full parameters and configurations in a single file.
    dqn.save("dqn.d3")
    # load full parameters and build algorithm
    dqn2 = offrl.load_learnable("dqn.d3")
    assert type(dqn2) is type(dqn)
    np.testing.assert_array_equal(dqn2.predict(x), expected_actions)
    np.testing.assert_allclose(dqn2.predict_value(x, expected_actions), expected_values, rtol=1e-6)

    # save full parameters only
    dqn.save_model("dqn.pt")
    # load full parameters with manual setup
    # docs: `dqn3 = DQN()`; d3rlpy 2.x needs a config: DQNConfig().create()
    dqn3 = offrl.algos.DQNConfig().create()
    dqn3.build_with_dataset(dataset)
    dqn3.load_model("dqn.pt")
    np.testing.assert_array_equal(dqn3.predict(x), expected_actions)
    np.testing.assert_allclose(dqn3.predict_value(x, expected_actions), expected_values, rtol=1e-6)

    # save the greedy-policy as TorchScript
    dqn.save_policy("policy.pt")
    policy = torch.jit.load("policy.pt")
    with torch.no_grad():
        scripted = policy(torch.as_tensor(x, dtype=torch.float32)).numpy()
    np.testing.assert_array_equal(scripted.reshape(-1), expected_actions)
    # save the greedy-policy as ONNX
    dqn.save_policy("policy.onnx")
    assert (workdir / "policy.onnx").stat().st_size > 0


@pytest.fixture(scope="module")
def cql_old(pendulum, tmp_path_factory):
    """The docs' "Prepare Pretrained Policies": CQL fitted on Pendulum."""
    dataset, env = pendulum
    logs = tmp_path_factory.mktemp("cql_logs")
    # docs: create(device="cuda:0")
    cql_old = offrl.algos.CQLConfig(batch_size=32).create(device="cpu:0")  # docs: default batch 256
    cql_old.fit(dataset, n_steps=10, n_steps_per_epoch=10, show_progress=False,  # docs: 100000
                logger_adapter=offrl.logging.FileAdapterFactory(root_dir=str(logs)))
    return cql_old


def test_after_training_load_d3_and_pt(pendulum, cql_old, workdir) -> None:
    dataset, env = pendulum
    x = np.random.random((5, 3)).astype(np.float32)
    expected = cql_old.predict(x)

    # Option 1: Load d3 file
    cql_old.save("model.d3")
    cql = offrl.load_learnable("model.d3")
    np.testing.assert_allclose(cql.predict(x), expected, rtol=1e-6)

    # Option 2: Load pt file
    cql_old.save_model("model.pt")
    for build in ("dataset", "env", "shape"):
        cql = offrl.algos.CQLConfig().create()
        if build == "dataset":
            cql.build_with_dataset(dataset)
        elif build == "env":
            cql.build_with_env(env)
        else:
            cql.create_impl((3,), 1)
        cql.load_model("model.pt")
        np.testing.assert_allclose(cql.predict(x), expected, rtol=1e-6)


def test_after_training_inference_and_interaction(pendulum, cql_old, workdir) -> None:
    _, env = pendulum
    cql = cql_old
    # make sure that the observation has the batch dimension
    observation = np.random.random((1, 3))
    # infer the action
    action = cql.predict(observation)
    assert action.shape == (1, 1)
    assert -1.0 <= action[0, 0] <= 1.0

    # docs: gym's `observation = env.reset()` and 4-tuple step; gymnasium returns 2 / 5 values
    observation, _ = env.reset(seed=0)
    steps = 0
    while True:
        action = cql.predict([observation])[0]  # a list of observations is accepted
        observation, reward, terminated, truncated, _ = env.step(action)
        steps += 1
        if terminated or truncated:
            break
    assert steps == 200  # Pendulum-v1 is truncated at 200 steps


def test_export_torchscript(cql_old, workdir) -> None:
    cql = cql_old
    # export as TorchScript
    cql.save_policy("policy.pt")
    # load TorchScript policy
    policy = torch.jit.load("policy.pt")
    # infer the action
    x = torch.rand(1, 3)
    action = policy(x)
    assert action.shape == (1, 1)
    np.testing.assert_allclose(action.detach().numpy(), cql.predict(x.numpy()), rtol=1e-5, atol=1e-6)


def test_export_onnx_input_0(cql_old, workdir) -> None:
    ort = pytest.importorskip("onnxruntime", reason="ONNX export check needs onnxruntime")
    cql = cql_old
    # export as ONNX
    cql.save_policy("policy.onnx")
    # load ONNX policy via onnxruntime
    ort_session = ort.InferenceSession("policy.onnx", providers=["CPUExecutionProvider"])
    # observation
    observation = np.random.rand(1, 3).astype(np.float32)
    # returns greedy action
    action = ort_session.run(None, {"input_0": observation})
    # docs: `assert action.shape == (1, 1)`; run() returns a list of outputs
    assert action[0].shape == (1, 1)
    assert [o.name for o in ort_session.get_outputs()] == ["output_0"]
    np.testing.assert_allclose(action[0], cql.predict(observation), rtol=1e-5, atol=1e-6)
