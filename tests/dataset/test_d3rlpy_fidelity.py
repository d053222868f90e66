"""d3rlpy 2.8.1 contract on the data side: rewards-to-go, signatures,
Episode (de)serialization, custom pickers/slicers, BufferProtocol.append."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.dataset import (
    BasicTransitionPicker,
    Episode,
    FIFOBuffer,
    FrameStackTransitionPicker,
    InfiniteBuffer,
    MixedReplayBuffer,
    MultiStepTransitionPicker,
    PartialTrajectory,
    ReplayBuffer,
    Signature,
    SparseRewardTransitionPicker,
    Transition,
    TransitionMiniBatch,
    create_infinite_replay_buffer,
)
from offrl.dataset.batch import RewardsToGo


def _episode(size: int, terminated: bool, first_reward: float = 0.0, final: bool = False) -> Episode:
    observations = (np.arange(size * 2, dtype=np.float32).reshape(size, 2) + 100 * first_reward)
    return Episode(
        observations=observations,
        actions=np.arange(size, dtype=np.float32).reshape(size, 1),
        rewards=(first_reward + np.arange(size, dtype=np.float32)).reshape(size, 1),
        terminated=terminated,
        final_observation=np.full(2, -1.0, np.float32) if final else None,
    )


# ------------------------------------------------------------ item 3: fields
def test_transition_has_rewards_to_go_and_signatures():
    episode = _episode(4, terminated=True)
    t = BasicTransitionPicker()(episode, 1)
    np.testing.assert_array_equal(t.rewards_to_go, [[1.0], [2.0], [3.0]])
    assert t.observation_signature == Signature(dtype=[np.float32], shape=[(2,)])
    assert t.action_signature == Signature(dtype=[np.float32], shape=[(1,)])
    assert t.reward_signature == Signature(dtype=[np.float32], shape=[(1,)])
    multi = MultiStepTransitionPicker(2, 0.5)(episode, 2)
    np.testing.assert_array_equal(multi.rewards_to_go, [[2.0], [3.0]])
    stacked = FrameStackTransitionPicker(2)(episode, 3)
    np.testing.assert_array_equal(stacked.rewards_to_go, [[3.0]])


def test_transition_tuple_observation_signature_and_positional_d3rlpy_order():
    obs = [np.zeros((3, 4), np.uint8), np.zeros(2, np.float32)]
    t = Transition(obs, np.zeros(1), np.zeros(1, np.float32), obs, np.zeros(1), 0.0, 1, np.zeros((2, 1), np.float32))
    assert t.rewards_to_go.shape == (2, 1)
    assert t.observation_signature == Signature(dtype=[np.uint8, np.float32], shape=[(3, 4), (2,)])


def test_partial_trajectory_signatures_and_transition_count():
    def window(last_terminal: float) -> PartialTrajectory:
        return PartialTrajectory(
            observations=np.zeros((3, 5), np.float32), actions=np.zeros((3, 2), np.float32),
            rewards=np.zeros((3, 1), np.float32), returns_to_go=np.zeros((3, 1), np.float32),
            terminals=np.array([[0.0], [0.0], [last_terminal]], np.float32),
            timesteps=np.arange(3), masks=np.ones(3, np.float32), length=3,
        )

    assert window(1.0).get_transition_count() == 3
    assert window(0.0).get_transition_count() == 2
    assert window(0.0).observation_signature == Signature(dtype=[np.float32], shape=[(5,)])
    assert window(0.0).action_signature == Signature(dtype=[np.float32], shape=[(2,)])
    assert window(0.0).reward_signature == Signature(dtype=[np.float32], shape=[(1,)])


def test_episode_serialize_round_trip():
    episode = _episode(3, terminated=False, final=True)
    data = episode.serialize()
    assert set(data) == {"observations", "actions", "rewards", "terminated", "final_observation"}
    back = Episode.deserialize(data)
    np.testing.assert_array_equal(back.observations, episode.observations)
    np.testing.assert_array_equal(back.rewards, episode.rewards)
    np.testing.assert_array_equal(back.final_observation, episode.final_observation)
    assert back.terminated is False and back.transition_count == 3
    # d3rlpy's four keys are enough
    plain = Episode.deserialize({k: data[k] for k in ("observations", "actions", "rewards", "terminated")})
    assert plain.final_observation is None and plain.transition_count == 2
    with pytest.raises(ValueError, match="terminated"):
        Episode.deserialize({"observations": 1, "actions": 1, "rewards": 1})


# ------------------------------------------------ item 3: vectorised returns
def _naive_returns(rewards_per_item, gamma, transform=None):
    out = []
    for rewards in rewards_per_item:
        total = 0.0
        for k, r in enumerate(rewards):
            value = float(r) if transform is None else float(transform(np.float64(r)))
            total += gamma**k * value
        out.append(total)
    return np.array(out)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    terminated=st.lists(st.booleans(), min_size=6, max_size=6),
    gamma=st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]),
    batch_size=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    scale=st.booleans(),
)
def test_batch_returns_to_go_match_naive_loop(sizes, terminated, gamma, batch_size, seed, scale):
    rng = np.random.default_rng(seed)
    episodes = [
        Episode(
            observations=rng.normal(size=(n, 3)).astype(np.float32),
            actions=rng.normal(size=(n, 2)).astype(np.float32),
            rewards=rng.normal(size=(n, 1)).astype(np.float32),
            terminated=terminated[i],
        )
        for i, n in enumerate(sizes)
    ]
    if sum(e.transition_count for e in episodes) == 0:
        return
    transform = (lambda r: 2.0 * r + 1.0) if scale else None
    rb = create_infinite_replay_buffer(episodes=episodes)
    offrl.seed(seed)
    batch = rb.sample_transition_batch(batch_size)
    # identify each sampled row by its observation (continuous random values)
    flat_obs = np.concatenate([e.observations for e in episodes])
    where = {tuple(o): (i, t) for i, e in enumerate(episodes) for t, o in enumerate(e.observations)}
    items = [where[tuple(o)] for o in batch.observations]
    remaining = [episodes[i].rewards[t:, 0] for i, t in items]
    expected = _naive_returns(remaining, gamma, transform)
    got = batch.compute_returns_to_go(gamma, transform)
    assert got.shape == (batch_size, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got[:, 0], expected, rtol=1e-5, atol=1e-5)
    for k, rewards in enumerate(remaining):
        np.testing.assert_array_equal(batch.rewards_to_go[k][:, 0], rewards)
    assert flat_obs.shape[0] == sum(sizes)
    # the same numbers through the per-item path (Transition.rewards_to_go)
    per_item = TransitionMiniBatch.from_transitions(
        [BasicTransitionPicker()(episodes[i], t) for i, t in items]
    )
    np.testing.assert_allclose(per_item.compute_returns_to_go(gamma, transform), got, rtol=1e-5, atol=1e-5)


def test_returns_to_go_exact_values_and_torch_field():
    episode = Episode(
        observations=np.arange(3, dtype=np.float32).reshape(3, 1),
        actions=np.zeros((3, 1), np.float32),
        rewards=np.array([[1.0], [2.0], [4.0]], np.float32),
        terminated=True,
    )
    rb = ReplayBuffer(InfiniteBuffer(), episodes=[episode])
    store = rb.buffer
    batch = BasicTransitionPicker().pick_batch(store, np.zeros(3, np.int64), np.arange(3))
    np.testing.assert_array_equal(batch.compute_returns_to_go(0.5), [[1 + 1 + 1.0], [2 + 2.0], [4.0]])
    torch_batch = batch.to_torch("cpu", returns_to_go_gamma=1.0)
    np.testing.assert_array_equal(torch_batch.returns_to_go.numpy(), [[7.0], [6.0], [4.0]])
    assert batch.to_torch("cpu").returns_to_go is None
    with pytest.raises(ValueError, match="gamma"):
        batch.compute_returns_to_go(1.5)


def test_returns_to_go_horizon_cut_is_within_tolerance():
    rewards = np.ones((5000, 1), np.float32)
    rtg = RewardsToGo(rewards, np.array([0]), np.array([5000]))
    np.testing.assert_allclose(rtg.compute_returns(0.99), [[(1 - 0.99**5000) / 0.01]], rtol=1e-6)


def test_mixed_buffer_batch_keeps_rewards_to_go():
    a = create_infinite_replay_buffer(episodes=[_episode(5, True, first_reward=0.0)])
    b = create_infinite_replay_buffer(episodes=[_episode(5, True, first_reward=10.0)])
    mixed = MixedReplayBuffer(a, b, secondary_mix_ratio=0.5)
    batch = mixed.sample_transition_batch(8)
    returns = batch.compute_returns_to_go(1.0)[:, 0]
    # row ids: observation[0] = 2 * t + 100 * first_reward
    first = batch.observations[:, 0]
    base = np.where(first >= 100, 10.0, 0.0)
    t = (first - 100 * (base / 10.0) * 10) / 2
    expected = np.array([sum(bb + k for k in range(int(tt), 5)) for bb, tt in zip(base, t)])
    np.testing.assert_array_equal(returns, expected)


# ----------------------------------------------------------- sparse picker
def test_sparse_reward_picker_per_item_and_batch_agree():
    failed = Episode(np.arange(8, dtype=np.float32).reshape(4, 2), np.zeros((4, 1), np.float32),
                     np.zeros((4, 1), np.float32), terminated=False)
    success = Episode(np.arange(8, 16, dtype=np.float32).reshape(4, 2), np.zeros((4, 1), np.float32),
                      np.array([[0.0], [0.0], [1.0], [0.0]], np.float32), terminated=True)
    picker = SparseRewardTransitionPicker(failure_return=-100.0)
    np.testing.assert_array_equal(picker(failed, 1).rewards_to_go, [[-100.0]])
    np.testing.assert_array_equal(picker(success, 1).rewards_to_go, [[0.0], [1.0], [0.0]])
    # after the success reward, only step rewards remain: a "failure" from there on
    np.testing.assert_array_equal(picker(success, 3).rewards_to_go, [[-100.0]])
    rb = ReplayBuffer(InfiniteBuffer(), transition_picker=picker, episodes=[failed, success])
    store = rb.buffer
    starts = store.episode_table()[0]
    ids = np.array([0, 0, 0, 1, 1, 1, 1])
    steps = np.array([0, 1, 2, 0, 1, 2, 3])
    batch = picker.pick_batch(store, ids, starts[ids] + steps)
    per_item = [picker([failed, success][i], int(t)) for i, t in zip(ids, steps)]
    expected = _naive_returns([p.rewards_to_go[:, 0] for p in per_item], 0.9)
    np.testing.assert_allclose(batch.compute_returns_to_go(0.9)[:, 0], expected, rtol=1e-6)
    np.testing.assert_array_equal(batch.compute_returns_to_go(0.9)[:3, 0], [-100.0] * 3)
    with pytest.raises(TypeError, match="failure_return"):
        SparseRewardTransitionPicker("bad")


# ------------------------------------------------ item 6: custom pickers
class DocsPicker:
    """A custom picker written as d3rlpy's documentation shows."""

    def __call__(self, episode, index):
        observation = episode.observations[index]
        is_terminal = episode.terminated and index == episode.size() - 1
        if is_terminal:
            next_observation = np.zeros_like(observation)
        else:
            next_observation = episode.observations[index + 1]
        return Transition(
            observation=observation,
            action=episode.actions[index],
            reward=episode.rewards[index],
            next_observation=next_observation,
            next_action=episode.actions[index],
            terminal=float(is_terminal),
            interval=1,
            rewards_to_go=episode.rewards[index:],
        )


class DocsSlicer:
    def __call__(self, episode, end_index, size):
        end = end_index + 1
        start = max(end - size, 0)
        actual = end - start
        observations = episode.observations[start:end]
        next_after_window = episode.observations[end_index + 1] if end_index + 1 < episode.size() else None
        del next_after_window  # d3rlpy-style code may read one step ahead
        pad = size - actual
        z = lambda a: np.concatenate([np.zeros((pad,) + a.shape[1:], a.dtype), a])  # noqa: E731
        return PartialTrajectory(
            observations=z(observations), actions=z(episode.actions[start:end]),
            rewards=z(episode.rewards[start:end]), returns_to_go=z(episode.rewards[start:end]),
            terminals=np.zeros((size, 1), np.float32), timesteps=np.arange(size),
            masks=np.ones(size, np.float32), length=size,
        )


def test_docs_picker_on_truncated_episodes_with_final_observations():
    # every episode truncated with its final observation: offrl stores all 5
    # transitions of each, d3rlpy's contract only the first 4
    episodes = [_episode(5, terminated=False, first_reward=float(i), final=True) for i in range(3)]
    rb = ReplayBuffer(InfiniteBuffer(), transition_picker=DocsPicker(), episodes=episodes)
    assert rb.transition_count == 15
    offrl.seed(0)
    for _ in range(30):
        t = rb.sample_transition()
        assert t.observation[0] % 10 < 8, "the last step of a truncated episode was handed to the user picker"
    batch = rb.sample_transition_batch(200)
    steps = (batch.observations[:, 0] % 100) / 2
    assert set(np.unique(steps)) == {0.0, 1.0, 2.0, 3.0}
    np.testing.assert_array_equal(batch.next_observations, batch.observations + 2)
    slicer_rb = ReplayBuffer(InfiniteBuffer(), trajectory_slicer=DocsSlicer(), episodes=episodes)
    windows = slicer_rb.sample_trajectory_batch(100, 2)
    last_steps = (windows.observations[:, -1, 0] % 100) / 2
    assert last_steps.max() == 3.0
    assert slicer_rb.sample_trajectory(2).observations.shape == (2, 2)


def test_collect_style_timeout_episode_with_docs_picker():
    # an online buffer written like collect(): a timeout keeps the final observation
    rb = ReplayBuffer(InfiniteBuffer(), transition_picker=DocsPicker(), action_signature=Signature(np.float32, (1,)),
                      observation_signature=Signature(np.float32, (2,)))
    for t in range(500):
        rb.append(np.array([t, 0.0], np.float32), np.zeros(1, np.float32), 1.0)
    rb.clip_episode(False, final_observation=np.array([500.0, 0.0], np.float32))
    assert rb.transition_count == 500  # offrl keeps the timeout transition
    offrl.seed(1)
    batch = rb.sample_transition_batch(2000)
    assert batch.observations[:, 0].max() == 498.0  # d3rlpy's 499 transitions


def test_subclass_overriding_call_goes_per_item():
    class Flip(BasicTransitionPicker):
        def __call__(self, episode, index):
            t = super().__call__(episode, index)
            return dataclasses.replace(t, reward=-t.reward)

    rb = ReplayBuffer(InfiniteBuffer(), transition_picker=Flip(), episodes=[_episode(4, True, first_reward=1.0)])
    batch = rb.sample_transition_batch(16)
    np.testing.assert_array_equal(batch.rewards[:, 0], -(1.0 + batch.observations[:, 0] % 100 / 2) + 0 * batch.rewards[:, 0])


# ------------------------------------------- item 7: append on a fresh buffer
@pytest.mark.parametrize("make", [InfiniteBuffer, lambda: FIFOBuffer(6)], ids=["infinite", "fifo"])
def test_protocol_append_on_fresh_buffer(make):
    buffer = make()
    first, second = _episode(4, True), _episode(3, False, first_reward=5.0)
    for episode in (first, second):
        for i in range(episode.transition_count):
            buffer.append(episode, i)
    assert buffer.transition_count == 6 and len(buffer) == 6
    stored = list(buffer.episodes)
    np.testing.assert_array_equal(stored[-1].observations, second.observations)
    episode, index = buffer[5]
    np.testing.assert_array_equal(episode.observations, second.observations)
    assert index == 1
    rb = ReplayBuffer(buffer)
    assert rb.dataset_info.observation_signature == Signature(np.float32, (2,))
    with pytest.raises(TypeError, match="index"):
        buffer.append(first, 0.5)


def test_protocol_append_of_a_growing_episode():
    # d3rlpy's writer appends its active episode after each step
    buffer = InfiniteBuffer()
    observations = np.arange(10, dtype=np.float32).reshape(5, 2)

    class Growing:
        def __init__(self):
            self.n = 0
            self.terminated = False

        observations = property(lambda self: observations[: self.n])
        actions = property(lambda self: np.zeros((self.n, 1), np.float32))
        rewards = property(lambda self: np.ones((self.n, 1), np.float32))

        def size(self):
            return self.n

    episode = Growing()
    for n in range(1, 6):
        episode.n = n
        if n == 5:
            episode.terminated = True
        buffer.append(episode, n - 1)
    assert buffer.episode_count == 1 and buffer.transition_count == 5
    np.testing.assert_array_equal(buffer.episodes[0].observations, observations)
    assert buffer.episodes[0].terminated
