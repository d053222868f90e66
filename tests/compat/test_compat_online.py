"""d3rlpy docs, "Tutorials / Data Collection", "Online RL", "Finetuning" and
"API Reference / Online Training", run with ``import offrl``.

Changes other than the import (marked ``# docs:``): sizes; ``import gym`` ->
``import gymnasium as gym`` (gym is not installed; d3rlpy 2.x takes both);
``device="cuda:0"`` -> CPU; the Online Training example's typo ``import d3lpy``
and its ``d3rlpy.algos.DQN(batch_size=...)`` (a config in d3rlpy 2.x).
"""

from __future__ import annotations

import gymnasium as gym  # docs: import gym
import numpy as np
import pytest

import offrl

QUIET = {"show_progress": False}


def _logger(tmp):
    return offrl.logging.FileAdapterFactory(root_dir=str(tmp / "logs"))


# ------------------------------------------------------------ data collection
def test_collect_with_random_policy_and_dump(workdir) -> None:
    env = gym.make("CartPole-v1")
    # setup algorithm
    random_policy = offrl.algos.DiscreteRandomPolicyConfig().create()
    # prepare experience replay buffer
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)  # docs: 100000
    # start data collection
    random_policy.collect(env, buffer, n_steps=300, **QUIET)  # docs: 100000
    # every environment step is stored, episode by episode
    assert sum(ep.size() for ep in buffer.episodes) == 300
    assert all(ep.terminated for ep in buffer.episodes[:-1])
    # save ReplayBuffer
    with open("random_policy_dataset.h5", "w+b") as f:
        buffer.dump(f)
    with open("random_policy_dataset.h5", "rb") as f:
        loaded = offrl.dataset.ReplayBuffer.load(f, offrl.dataset.InfiniteBuffer())
    assert len(loaded.episodes) == len(buffer.episodes)
    for a, b in zip(loaded.episodes, buffer.episodes):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        assert a.terminated == b.terminated


def test_collect_without_buffer_returns_replay_buffer(workdir) -> None:
    env = gym.make("Pendulum-v1")
    random_policy = offrl.algos.RandomPolicyConfig().create()
    # "If buffer is not given, ReplayBuffer will be internally created."
    buffer = random_policy.collect(env, n_steps=450, **QUIET)
    assert isinstance(buffer, offrl.dataset.ReplayBuffer)
    assert [ep.size() for ep in buffer.episodes] == [200, 200, 50]
    for ep in buffer.episodes:
        assert np.all(np.abs(ep.actions) <= 2.0)  # Pendulum's action bounds


def test_collect_with_trained_policy(cartpole, workdir) -> None:
    dataset, _ = cartpole
    env = gym.make("CartPole-v1")
    dqn = offrl.algos.DQNConfig().create()
    dqn.fit(dataset, n_steps=10, n_steps_per_epoch=10, logger_adapter=_logger(workdir), **QUIET)
    dqn.save("dqn_model.d3")
    # prepare pretrained algorithm
    dqn = offrl.load_learnable("dqn_model.d3")
    # prepare experience replay buffer
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    # start data collection (docs: deterministic=False, the default)
    dqn.collect(env, buffer, n_steps=100, deterministic=True, **QUIET)
    # the greedy policy's actions were stored
    for ep in buffer.episodes:
        np.testing.assert_array_equal(ep.actions.reshape(-1), dqn.predict(ep.observations))
    with open("trained_policy_dataset.h5", "w+b") as f:
        buffer.dump(f)
    assert (workdir / "trained_policy_dataset.h5").stat().st_size > 0


def test_collect_while_training_with_fit_online(workdir) -> None:
    env = gym.make("CartPole-v1")
    # setup algorithm
    dqn = offrl.algos.DQNConfig().create()
    # prepare experience replay buffer
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    # prepare exploration strategy if necessary
    explorer = offrl.algos.ConstantEpsilonGreedy(0.3)
    # start data collection
    dqn.fit_online(env, buffer, explorer, n_steps=200, n_steps_per_epoch=100,  # docs: 100000
                   logger_adapter=_logger(workdir), **QUIET)
    assert sum(ep.size() for ep in buffer.episodes) == 200
    # an update per step once the buffer holds more than batch_size (32) transitions
    assert 160 <= dqn.grad_step <= 200 - 32
    with open("replay_dataset.h5", "w+b") as f:
        buffer.dump(f)


# ------------------------------------------------------------------ online RL
def test_online_dqn_tutorial(workdir) -> None:
    # for training
    env = gym.make("CartPole-v1")
    # for evaluation
    eval_env = gym.make("CartPole-v1")
    dqn = offrl.algos.DQNConfig(
        batch_size=32,
        learning_rate=2.5e-4,
        target_update_interval=100,
    ).create(device="cpu:0")  # docs: device="cuda:0"
    # initialize neural networks with the given environment object.
    dqn.build_with_env(env)
    assert tuple(dqn.observation_shape) == (4,) and dqn.action_size == 2
    # experience replay buffer
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    # exploration strategy
    explorer = offrl.algos.ConstantEpsilonGreedy(0.3)
    epochs = []
    dqn.fit_online(
        env,
        buffer,
        explorer,
        n_steps=200,  # docs: 100000
        eval_env=eval_env,
        n_steps_per_epoch=100,  # docs: 1000
        update_start_step=100,  # docs: 1000
        logger_adapter=_logger(workdir),
        callback=lambda algo, epoch, step: epochs.append((epoch, step)),
        **QUIET,
    )
    # updates start after update_start_step environment steps
    assert dqn.grad_step == 100
    assert sum(ep.size() for ep in buffer.episodes) == 200
    # the evaluation on eval_env is logged each epoch (as d3rlpy: "evaluation")
    csv = next((workdir / "logs").iterdir()) / "evaluation.csv"
    assert len(csv.read_text().splitlines()) == 2
    assert epochs and epochs[-1][1] == 200


def test_online_stochastic_policy_without_explorer(workdir) -> None:
    env = gym.make("CartPole-v1")
    eval_env = gym.make("CartPole-v1")
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    sac = offrl.algos.DiscreteSACConfig().create()
    sac.fit_online(env, buffer, n_steps=100, eval_env=eval_env, n_steps_per_epoch=50, update_start_step=50,
                   logger_adapter=_logger(workdir), **QUIET)
    # batch_size 64 > update_start_step 50: updates once the buffer holds > 64 transitions
    assert sac.grad_step == 100 - (64 + 1)


def test_online_continuous_sac_without_explorer(workdir) -> None:
    # the same tutorial with a continuous stochastic policy (SAC) on Pendulum
    env = gym.make("Pendulum-v1")
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    sac = offrl.algos.SACConfig(batch_size=16).create()
    sac.fit_online(env, buffer, n_steps=60, n_steps_per_epoch=30, update_start_step=30,
                   logger_adapter=_logger(workdir), **QUIET)
    assert sac.grad_step == 30
    assert sum(ep.size() for ep in buffer.episodes) == 60


def test_online_training_reference_linear_decay(workdir) -> None:
    env = gym.make("CartPole-v1")
    eval_env = gym.make("CartPole-v1")
    # docs: `d3rlpy.algos.DQN(batch_size=..., ...)`; d3rlpy 2.x spells it DQNConfig
    dqn = offrl.algos.DQNConfig(
        batch_size=32,
        learning_rate=2.5e-4,
        target_update_interval=100,
    ).create(device="cpu:0")
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    explorer = offrl.algos.LinearDecayEpsilonGreedy(
        start_epsilon=1.0,
        end_epsilon=0.1,
        duration=100,  # docs: 10000
    )
    dqn.fit_online(
        env,
        buffer,
        explorer=explorer,
        eval_env=eval_env,
        n_steps=100,  # docs: 30000
        n_steps_per_epoch=50,
        update_interval=10,  # update parameters every 10 steps.
        logger_adapter=_logger(workdir),
        **QUIET,
    )
    # updates at steps 40, 50, ..., 100: the buffer holds more than 32 transitions from step 33
    assert dqn.grad_step == 7
    # the schedule: epsilon falls linearly from 1.0 to 0.1 over `duration` steps
    assert explorer.compute_epsilon(0) == pytest.approx(1.0)
    assert explorer.compute_epsilon(50) == pytest.approx(0.55)
    assert explorer.compute_epsilon(1000) == pytest.approx(0.1)


# ----------------------------------------------------------------- finetuning
def test_finetuning_dqn_then_saved_policy(cartpole, workdir) -> None:
    dataset, env = cartpole  # docs: get_dataset("cartpole-random")
    dqn = offrl.algos.DQNConfig().create()
    dqn.fit(dataset, n_steps=20, n_steps_per_epoch=20, logger_adapter=_logger(workdir), **QUIET)
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    explorer = offrl.algos.ConstantEpsilonGreedy(0.1)
    dqn.fit_online(env, buffer, explorer, n_steps=50, n_steps_per_epoch=50, logger_adapter=_logger(workdir), **QUIET)
    # the step counter keeps counting; online updates start once the buffer holds > 32 transitions
    assert dqn.grad_step == 20 + (50 - 33)

    dqn.save("dqn_model.d3")
    dqn = offrl.load_learnable("dqn_model.d3")
    dqn.fit_online(env, buffer, explorer, n_steps=50, n_steps_per_epoch=50, logger_adapter=_logger(workdir), **QUIET)
    assert sum(ep.size() for ep in buffer.episodes) == 100


def test_finetuning_discrete_cql_to_dqn(cartpole, workdir) -> None:
    dataset, env = cartpole
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    explorer = offrl.algos.ConstantEpsilonGreedy(0.1)
    # setup offline RL algorithm
    cql = offrl.algos.DiscreteCQLConfig().create()
    cql.fit(dataset, n_steps=20, n_steps_per_epoch=20, logger_adapter=_logger(workdir), **QUIET)
    # transfer to DQN
    dqn = offrl.algos.DQNConfig().create()
    dqn.build_with_env(env)
    dqn.copy_q_function_from(cql)
    x = np.stack([ep.observations[0] for ep in dataset.episodes[:16]])
    np.testing.assert_array_equal(dqn.predict(x), cql.predict(x))
    a = cql.predict(x)
    np.testing.assert_allclose(dqn.predict_value(x, a), cql.predict_value(x, a), rtol=1e-6)
    # start finetuning
    dqn.fit_online(env, buffer, explorer, n_steps=50, n_steps_per_epoch=50, logger_adapter=_logger(workdir), **QUIET)
    assert dqn.grad_step == 50 - 33


def test_finetuning_cql_to_sac(pendulum, workdir) -> None:
    dataset, env = pendulum
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=1000, env=env)
    # offline RL
    cql = offrl.algos.CQLConfig(batch_size=16).create()
    cql.fit(dataset, n_steps=5, n_steps_per_epoch=5, logger_adapter=_logger(workdir), **QUIET)
    # transfer to SAC
    sac = offrl.algos.SACConfig(batch_size=16).create()
    sac.build_with_env(env)
    sac.copy_q_function_from(cql)
    sac.copy_policy_from(cql)
    x = np.random.random((8, 3)).astype(np.float32)
    np.testing.assert_allclose(sac.predict(x), cql.predict(x), rtol=1e-6)
    a = np.random.uniform(-1, 1, size=(8, 1)).astype(np.float32)
    np.testing.assert_allclose(sac.predict_value(x, a), cql.predict_value(x, a), rtol=1e-6)
    # online RL
    sac.fit_online(env, buffer, n_steps=40, n_steps_per_epoch=40, update_start_step=20,
                   logger_adapter=_logger(workdir), **QUIET)
    assert sac.grad_step == 20
