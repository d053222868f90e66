"""d3rlpy docs, "Tutorials / Create Your Dataset", "API Reference / Replay
Buffer" (MDPDataset, ReplayBuffer components, custom TransitionPicker,
TrajectorySlicer and WriterPreprocess) and the dataset "Tips" (image
observations with frame stacking, multi-step transitions), run with
``import offrl``.

Changes other than the import (marked ``# docs:``): sizes; ``import gym`` ->
gymnasium; the custom picker passes ``next_action`` (required by
``Transition`` in d3rlpy 2.8.1, so the documented picker fails there as
written); ``np.random.randomint`` (a typo in the docs) ->
``np.random.randint``.
"""

from __future__ import annotations

import gymnasium as gym  # docs: import gym
import numpy as np
import pytest

import offrl


def _logged(n: int = 1000, seed: int = 0):
    rng = np.random.default_rng(seed)
    # vector observation: n steps of observations with shape of (100,)
    observations = rng.random((n, 100))
    # n steps of actions with shape of (4,)
    actions = rng.random((n, 4))
    # n steps of rewards
    rewards = rng.random(n)
    # n steps of terminal flags
    terminals = rng.integers(2, size=n)
    return observations, actions, rewards, terminals


def test_build_mdp_dataset_splits_at_terminals() -> None:
    observations, actions, rewards, terminals = _logged(200)
    terminals[-1] = 1
    dataset = offrl.dataset.MDPDataset(
        observations=observations,
        actions=actions,
        rewards=rewards,
        terminals=terminals,
    )
    ends = np.flatnonzero(terminals) + 1
    sizes = np.diff(np.concatenate([[0], ends]))
    assert [ep.size() for ep in dataset.episodes] == sizes.tolist()
    assert all(ep.terminated for ep in dataset.episodes)
    # every step is one transition of a terminated episode
    assert dataset.transition_count == 200
    np.testing.assert_allclose(dataset.episodes[1].rewards.reshape(-1), rewards[ends[0]:ends[1]], rtol=1e-6)
    np.testing.assert_allclose(dataset.episodes[0].observations, observations[: ends[0]], rtol=1e-6)


def test_timeouts_end_episodes_without_terminal_state() -> None:
    observations, actions, rewards, _ = _logged(200)
    # terminal states
    terminals = np.zeros(200)
    # timeout states
    timeouts = np.zeros(200)
    timeouts[[49, 119, 199]] = 1
    dataset = offrl.dataset.MDPDataset(
        observations=observations,
        actions=actions,
        rewards=rewards,
        terminals=terminals,
        timeouts=timeouts,
    )
    assert [ep.size() for ep in dataset.episodes] == [50, 70, 80]
    assert not any(ep.terminated for ep in dataset.episodes)


def test_mdp_dataset_dump_and_load(workdir) -> None:
    observations, actions, rewards, terminals = _logged(300)
    dataset = offrl.dataset.MDPDataset(observations, actions, rewards, terminals)
    # save as HDF5
    with open("dataset.h5", "w+b") as f:
        dataset.dump(f)
    # load from HDF5
    with open("dataset.h5", "rb") as f:
        new_dataset = offrl.dataset.ReplayBuffer.load(f, offrl.dataset.InfiniteBuffer())
    assert len(new_dataset.episodes) == len(dataset.episodes)
    assert new_dataset.transition_count == dataset.transition_count
    for a, b in zip(new_dataset.episodes, dataset.episodes):
        np.testing.assert_array_equal(a.observations, b.observations)
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.rewards, b.rewards)
        assert a.terminated == b.terminated


def test_replay_buffer_components_three_options(pendulum) -> None:
    # Buffer component
    buffer = offrl.dataset.FIFOBuffer(limit=100000)
    transition_picker = offrl.dataset.BasicTransitionPicker()
    trajectory_slicer = offrl.dataset.BasicTrajectorySlicer()
    writer_preprocessor = offrl.dataset.BasicWriterPreprocess()

    # Option 1: Initialize with Gym environment
    env = gym.make("Pendulum-v1")
    replay_buffer = offrl.dataset.ReplayBuffer(
        buffer=buffer,
        transition_picker=transition_picker,
        trajectory_slicer=trajectory_slicer,
        writer_preprocessor=writer_preprocessor,
        env=env,
    )
    assert replay_buffer.transition_count == 0
    assert tuple(replay_buffer.dataset_info.observation_signature.shape[0]) == (3,)

    # Option 2: Initialize with pre-collected dataset
    dataset, _ = pendulum
    replay_buffer = offrl.dataset.ReplayBuffer(
        buffer=offrl.dataset.FIFOBuffer(limit=100000),  # docs: the same `buffer` object again
        transition_picker=transition_picker,
        trajectory_slicer=trajectory_slicer,
        writer_preprocessor=writer_preprocessor,
        episodes=dataset.episodes,
    )
    assert len(replay_buffer.episodes) == len(dataset.episodes)
    assert replay_buffer.transition_count == dataset.transition_count

    # Option 3: Initialize with manually specified signatures
    observation_signature = offrl.dataset.Signature(shape=[(3,)], dtype=[np.float32])
    action_signature = offrl.dataset.Signature(shape=[(1,)], dtype=[np.float32])
    reward_signature = offrl.dataset.Signature(shape=[(1,)], dtype=[np.float32])
    replay_buffer = offrl.dataset.ReplayBuffer(
        buffer=offrl.dataset.FIFOBuffer(limit=100000),
        transition_picker=transition_picker,
        trajectory_slicer=trajectory_slicer,
        writer_preprocessor=writer_preprocessor,
        observation_signature=observation_signature,
        action_signature=action_signature,
        reward_signature=reward_signature,
    )
    replay_buffer.append(np.zeros(3, np.float32), np.array([0.5], np.float32), 1.0)
    replay_buffer.append(np.ones(3, np.float32), np.array([-0.5], np.float32), 2.0)
    replay_buffer.clip_episode(True)
    assert [ep.size() for ep in replay_buffer.episodes] == [2]
    np.testing.assert_array_equal(replay_buffer.episodes[0].rewards.reshape(-1), [1.0, 2.0])

    # shortcut
    replay_buffer = offrl.dataset.create_fifo_replay_buffer(limit=100000, env=env)
    assert replay_buffer.transition_count == 0


def test_fifo_buffer_keeps_the_newest_transitions() -> None:
    env = gym.make("CartPole-v1")
    buffer = offrl.dataset.create_fifo_replay_buffer(limit=50, env=env)
    policy = offrl.algos.DiscreteRandomPolicyConfig().create()
    policy.collect(env, buffer, n_steps=300, show_progress=False)
    assert buffer.transition_count <= 50
    assert sum(ep.size() for ep in buffer.episodes) <= 51


class CustomTransitionPicker(offrl.dataset.TransitionPickerProtocol):
    """The docs' example picker (plus ``next_action``, see the module docstring)."""

    def __call__(self, episode: offrl.dataset.EpisodeBase, index: int) -> offrl.dataset.Transition:
        observation = episode.observations[index]
        is_terminal = episode.terminated and index == episode.size() - 1
        if is_terminal:
            next_observation = offrl.dataset.create_zero_observation(observation)
            next_action = np.zeros_like(episode.actions[index])  # docs: not given
        else:
            next_observation = episode.observations[index + 1]
            next_action = episode.actions[index + 1]  # docs: not given
        return offrl.dataset.Transition(
            observation=observation,
            action=episode.actions[index],
            reward=episode.rewards[index],
            next_observation=next_observation,
            next_action=next_action,
            terminal=float(is_terminal),
            interval=1,
        )


def _small_dataset(**kwargs):
    obs = np.arange(24, dtype=np.float32).reshape(12, 2)
    actions = (np.arange(12) % 3).astype(np.int64)
    rewards = np.arange(12, dtype=np.float32)
    terminals = np.zeros(12)
    terminals[[4, 11]] = 1  # two terminated episodes of 5 and 7 steps
    return offrl.dataset.MDPDataset(obs, actions, rewards, terminals, **kwargs)


def test_custom_transition_picker_matches_basic_picker() -> None:
    custom = CustomTransitionPicker()
    basic = offrl.dataset.BasicTransitionPicker()
    dataset = _small_dataset()
    for episode in dataset.episodes:
        for index in range(episode.size()):
            a, b = custom(episode, index), basic(episode, index)
            np.testing.assert_array_equal(a.observation, b.observation)
            np.testing.assert_array_equal(a.next_observation, b.next_observation)
            np.testing.assert_array_equal(a.action, b.action)
            np.testing.assert_array_equal(a.reward, b.reward)
            assert a.terminal == b.terminal
    # a dataset sampling through the user's picker
    dataset = _small_dataset(transition_picker=custom)
    batch = dataset.sample_transition_batch(64)
    assert batch.observations.shape == (64, 2)
    # terminal transitions (the last of each episode) carry a zero next observation
    terminal = batch.terminals.reshape(-1) == 1.0
    np.testing.assert_array_equal(batch.next_observations[terminal], 0.0)
    np.testing.assert_array_equal(batch.next_observations[~terminal], batch.observations[~terminal] + 2.0)


class CustomTrajectorySlicer(offrl.dataset.TrajectorySlicerProtocol):
    """The docs' example slicer."""

    def __call__(self, episode: offrl.dataset.EpisodeBase, end_index: int, size: int) -> offrl.dataset.PartialTrajectory:
        end = end_index + 1
        start = max(end - size, 0)
        actual_size = end - start

        # prepare terminal flags
        terminals = np.zeros((actual_size, 1), dtype=np.float32)
        if episode.terminated and end_index == episode.size() - 1:
            terminals[-1][0] = 1.0

        # slice data
        observations = episode.observations[start:end]
        actions = episode.actions[start:end]
        rewards = episode.rewards[start:end]
        ret = np.sum(episode.rewards[start:])
        all_returns_to_go = ret - np.cumsum(episode.rewards[start:], axis=0)
        returns_to_go = all_returns_to_go[:actual_size].reshape((-1, 1))

        # prepare metadata
        timesteps = np.arange(start, end)
        masks = np.ones(end - start, dtype=np.float32)

        # compute backward padding size
        pad_size = size - actual_size

        if pad_size == 0:
            return offrl.dataset.PartialTrajectory(
                observations=observations,
                actions=actions,
                rewards=rewards,
                returns_to_go=returns_to_go,
                terminals=terminals,
                timesteps=timesteps,
                masks=masks,
                length=size,
            )

        return offrl.dataset.PartialTrajectory(
            observations=offrl.dataset.batch_pad_observations(observations, pad_size),
            actions=offrl.dataset.batch_pad_array(actions, pad_size),
            rewards=offrl.dataset.batch_pad_array(rewards, pad_size),
            returns_to_go=offrl.dataset.batch_pad_array(returns_to_go, pad_size),
            terminals=offrl.dataset.batch_pad_array(terminals, pad_size),
            timesteps=offrl.dataset.batch_pad_array(timesteps, pad_size),
            masks=offrl.dataset.batch_pad_array(masks, pad_size),
            length=size,
        )


def test_custom_trajectory_slicer() -> None:
    dataset = _small_dataset()
    slicer = CustomTrajectorySlicer()
    episode = dataset.episodes[0]  # steps 0..4, rewards 0..4
    traj = slicer(episode, 2, 4)  # steps 0..2, one step of padding in front
    assert traj.length == 4
    np.testing.assert_array_equal(traj.masks, [0.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(traj.timesteps, [0, 0, 1, 2])
    np.testing.assert_array_equal(traj.rewards.reshape(-1), [0.0, 0.0, 1.0, 2.0])
    # the docs' formula: the episode's return (0+1+2+3+4 = 10) minus the rewards up to each step
    np.testing.assert_array_equal(traj.returns_to_go.reshape(-1), [0.0, 10.0, 9.0, 7.0])
    np.testing.assert_array_equal(traj.observations[0], 0.0)
    np.testing.assert_array_equal(traj.observations[1:], episode.observations[:3])
    last = slicer(episode, 4, 3)
    np.testing.assert_array_equal(last.terminals.reshape(-1), [0.0, 0.0, 1.0])
    # used by a dataset, as the basic slicer is
    dataset = _small_dataset(trajectory_slicer=slicer)
    batch = dataset.sample_trajectory_batch(8, length=3)
    assert batch.observations.shape == (8, 3, 2)
    assert batch.masks.shape[:2] == (8, 3)


class CustomWriterPreprocess(offrl.dataset.WriterPreprocessProtocol):
    """The docs' example (identity) writer preprocess."""

    def process_observation(self, observation: offrl.dataset.Observation) -> offrl.dataset.Observation:
        return observation

    def process_action(self, action: np.ndarray) -> np.ndarray:
        return action

    def process_reward(self, reward: np.ndarray) -> np.ndarray:
        return reward


def test_custom_writer_preprocess_is_used_by_the_buffer() -> None:
    env = gym.make("CartPole-v1")
    buffer = offrl.dataset.ReplayBuffer(
        offrl.dataset.InfiniteBuffer(), writer_preprocessor=CustomWriterPreprocess(), env=env
    )
    observation = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    buffer.append(observation, np.array(1), 1.0)
    buffer.append(observation * 2, np.array(0), 0.5)
    buffer.clip_episode(True)
    episode = buffer.episodes[0]
    np.testing.assert_array_equal(episode.observations, [observation, observation * 2])
    np.testing.assert_array_equal(episode.rewards.reshape(-1), [1.0, 0.5])


def test_image_observation_tip_frame_stacking(workdir) -> None:
    n = 64  # docs: 100000
    rng = np.random.default_rng(0)
    # observation MUST be uint8 array, and the channel-first images
    observations = rng.integers(256, size=(n, 1, 84, 84), dtype=np.uint8)
    actions = np.random.randint(4, size=n)  # docs: np.random.randomint (typo)
    rewards = np.random.random(n)
    terminals = np.zeros(n)
    terminals[[31, 63]] = 1
    dataset = offrl.dataset.MDPDataset(
        observations=observations,
        actions=actions,
        rewards=rewards,
        terminals=terminals,
        # stack last 4 frames (stacked shape is [4, 84, 84])
        transition_picker=offrl.dataset.FrameStackTransitionPicker(n_frames=4),
    )
    batch = dataset.sample_transition_batch(8)
    assert batch.observations.shape == (8, 4, 84, 84)
    # the last stacked frame is the transition's own observation, the first
    # frames of an episode are padded with zeros
    episode = dataset.episodes[0]
    transition = offrl.dataset.FrameStackTransitionPicker(n_frames=4)(episode, 1)
    np.testing.assert_array_equal(transition.observation[-1], observations[1, 0])
    np.testing.assert_array_equal(transition.observation[-2], observations[0, 0])
    np.testing.assert_array_equal(transition.observation[:2], 0)

    dqn = offrl.algos.DQNConfig(
        observation_scaler=offrl.preprocessing.PixelObservationScaler(),  # pixels are devided by 255
        batch_size=4,
    ).create()
    dqn.fit(dataset, n_steps=2, n_steps_per_epoch=2, show_progress=False,
            logger_adapter=offrl.logging.NoopAdapterFactory())
    assert dqn.predict(batch.observations).shape == (8,)


def test_multi_step_transition_picker_tip() -> None:
    env = gym.make("CartPole-v1")
    # multi-step transition sampling
    transition_picker = offrl.dataset.MultiStepTransitionPicker(
        n_steps=3,
        gamma=0.99,
    )
    # replay buffer for experience replay
    buffer = offrl.dataset.create_fifo_replay_buffer(
        limit=1000,  # docs: 100000
        env=env,
        transition_picker=transition_picker,
    )
    for t in range(6):
        buffer.append(np.full(4, t, np.float32), np.array(t % 2), 1.0)
    buffer.clip_episode(False)
    transition = transition_picker(buffer.episodes[0], 0)
    # reward summed over 3 steps with discount, next observation 3 steps ahead
    assert transition.interval == 3
    np.testing.assert_allclose(np.asarray(transition.reward).reshape(-1), [1 + 0.99 + 0.99**2], rtol=1e-6)
    np.testing.assert_array_equal(transition.next_observation, np.full(4, 3.0, np.float32))


def test_get_dataset_by_name(workdir) -> None:
    # the docs' `d3rlpy.datasets.get_dataset("cartpole-replay")` (Offline Policy
    # Selection), built locally; the "-random" names work the same way but
    # take seconds to build
    dataset, env = offrl.datasets.get_dataset("cartpole-replay")
    assert env.spec.id == "CartPole-v1"
    assert dataset.transition_count > 0
    assert all(ep.observations.shape[1:] == (4,) for ep in dataset.episodes[:3])
    assert {"cartpole-random", "cartpole-replay", "pendulum-random", "pendulum-replay"} <= set(offrl.datasets.dataset_names())


def _write_d3rlpy_layout(path, episodes, version="2.1", num_episodes=None):
    """Write a dataset file in the layout d3rlpy 2.1+'s ``dump`` writes (per
    episode ``observations_<i>`` or ``observations_<i>_<j>``, ``actions_<i>``,
    ``rewards_<i>``, ``terminated_<i>``; root ``columns``, ``num_episodes``,
    ``version``), so the test needs no d3rlpy."""
    import h5py

    with h5py.File(path, "w") as h5:
        h5.create_dataset("columns", data=["observations", "actions", "rewards", "terminated"])
        h5.create_dataset("num_episodes", data=len(episodes) if num_episodes is None else num_episodes)
        for i, (observations, actions, rewards, terminated) in enumerate(episodes):
            if isinstance(observations, tuple):
                for j, column in enumerate(observations):
                    h5.create_dataset(f"observations_{i}_{j}", data=column)
            else:
                h5.create_dataset(f"observations_{i}", data=observations)
            h5.create_dataset(f"actions_{i}", data=actions)
            h5.create_dataset(f"rewards_{i}", data=rewards)
            h5.create_dataset(f"terminated_{i}", data=terminated)
        h5.create_dataset("version", data=version)


def test_load_a_dataset_file_dumped_by_d3rlpy(workdir) -> None:
    obs = np.arange(14, dtype=np.float32).reshape(7, 2)
    episodes = [
        (obs[:4], np.array([[0], [1], [1], [0]]), np.ones((4, 1), np.float32), True),
        (obs[4:], np.array([[2], [0], [1]]), np.full((3, 1), 0.5, np.float32), False),
    ]
    _write_d3rlpy_layout("d3rlpy_dump.h5", episodes)
    with open("d3rlpy_dump.h5", "rb") as f:
        dataset = offrl.dataset.ReplayBuffer.load(f, offrl.dataset.InfiniteBuffer())
    assert [ep.size() for ep in dataset.episodes] == [4, 3]
    assert [ep.terminated for ep in dataset.episodes] == [True, False]
    np.testing.assert_array_equal(dataset.episodes[1].observations, obs[4:])
    np.testing.assert_array_equal(dataset.episodes[0].actions.reshape(-1), [0, 1, 1, 0])
    np.testing.assert_array_equal(dataset.episodes[1].rewards.reshape(-1), [0.5, 0.5, 0.5])
    assert dataset.dataset_info.action_space == offrl.ActionSpace.DISCRETE
    assert dataset.dataset_info.action_size == 3
    # as in d3rlpy: the unfinished episode's last step has no next observation
    assert dataset.transition_count == 4 + 2


def test_load_a_d3rlpy_file_with_tuple_observations(workdir) -> None:
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    b = np.arange(9, dtype=np.float32).reshape(3, 3)
    episodes = [((a, b), np.full((3, 1), 0.25, np.float32), np.zeros((3, 1), np.float32), True)]
    _write_d3rlpy_layout("tuple.h5", episodes)
    dataset = offrl.dataset.ReplayBuffer.load("tuple.h5", offrl.dataset.InfiniteBuffer())
    observations = dataset.episodes[0].observations
    np.testing.assert_array_equal(observations[0], a)
    np.testing.assert_array_equal(observations[1], b)
    assert dataset.dataset_info.action_space == offrl.ActionSpace.CONTINUOUS


@pytest.mark.parametrize(
    "kwargs,message",
    [({"version": "2.0"}, "version '2.0'"), ({"num_episodes": 5}, "declares 5 episodes"), ({"num_episodes": 0}, "num_episodes is 0")],
)
def test_bad_d3rlpy_files_are_refused_naming_the_field(kwargs, message, workdir) -> None:
    episodes = [(np.zeros((2, 2), np.float32), np.zeros((2, 1), np.int64), np.zeros((2, 1), np.float32), True)]
    _write_d3rlpy_layout("bad.h5", episodes, **kwargs)
    with pytest.raises(ValueError, match=message):
        offrl.dataset.ReplayBuffer.load("bad.h5", offrl.dataset.InfiniteBuffer())


def test_load_v1_reads_d3rlpy_1_dataset_files(workdir) -> None:
    import h5py

    # d3rlpy 1.x's MDPDataset.dump layout: step-aligned root arrays
    with h5py.File("v1.h5", "w") as h5:
        h5["observations"] = np.arange(20, dtype=np.float32).reshape(10, 2)
        h5["actions"] = np.arange(10) % 2
        h5["rewards"] = np.arange(10, dtype=np.float32)
        terminals = np.zeros(10)
        terminals[3] = 1
        h5["terminals"] = terminals
        episode_terminals = np.zeros(10)
        episode_terminals[[3, 6, 9]] = 1
        h5["episode_terminals"] = episode_terminals
    with open("v1.h5", "rb") as f:
        episodes = offrl.dataset.load_v1(f)
    # an episode ends at a terminal step, or at an episode end that is not terminal (a timeout)
    assert [(ep.size(), ep.terminated) for ep in episodes] == [(4, True), (3, False), (3, False)]
    np.testing.assert_array_equal(episodes[1].rewards.reshape(-1), [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(episodes[2].observations, np.arange(14, 20, dtype=np.float32).reshape(3, 2))

    with h5py.File("v1_missing.h5", "w") as h5:
        h5["observations"] = np.zeros((3, 2), np.float32)
    with pytest.raises(ValueError, match=r"missing \['actions', 'rewards', 'terminals'\]"):
        offrl.dataset.load_v1("v1_missing.h5")


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("rewards", np.nan, r"v1_bad.h5: rewards\[5\] is nan"),
        ("observations", np.inf, r"v1_bad.h5: observations\[5\] is inf"),
        ("terminals", 2.0, r"v1_bad.h5: terminals\[5\] is 2.0, expected 0 or 1"),
        ("terminals", np.nan, r"v1_bad.h5: terminals\[5\] is nan, expected 0 or 1"),
        ("episode_terminals", -1.0, r"v1_bad.h5: episode_terminals\[5\] is -1.0, expected 0 or 1"),
    ],
)
def test_load_v1_names_the_file_for_bad_values(workdir, column, value, message) -> None:
    import h5py

    data = {"observations": np.zeros((10, 2), np.float32), "actions": np.arange(10) % 2,
            "rewards": np.zeros(10, np.float32), "terminals": np.zeros(10), "episode_terminals": np.zeros(10)}
    data["terminals"][9] = 1
    data[column] = data[column].astype(np.float64)
    data[column][5] = value
    with h5py.File("v1_bad.h5", "w") as h5:
        for key, array in data.items():
            h5[key] = array
    with pytest.raises(ValueError, match=message):
        offrl.dataset.load_v1("v1_bad.h5")
