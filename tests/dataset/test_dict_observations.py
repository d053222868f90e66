"""Dict observations in the data path.

A dict observation is stored as the tuple of its values in sorted key order
with the keys in the observation signature, and every view a user reads
(episodes, transitions, mini-batches, arrays, loaded files) gives it back
as a dict by key. The reference for every picker, slicer, dump/load and
split is the same data given as that tuple: the dict's values must be
identical to the tuple's, in the same (stored) key order."""

from __future__ import annotations

import io

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.dataset import (
    BasicTrajectorySlicer,
    BasicTransitionPicker,
    Episode,
    FrameStackTrajectorySlicer,
    FrameStackTransitionPicker,
    MDPDataset,
    MixedReplayBuffer,
    MultiStepTransitionPicker,
    ReplayBuffer,
    Signature,
    create_infinite_replay_buffer,
    create_prioritized_replay_buffer,
    train_test_split,
)
from offrl.dataset.io import SCHEMA_MINOR_VERSION, read_dataset_file


def _dict_arrays(rng: np.random.Generator, n: int, with_image: bool = True) -> dict:
    out = {
        "state": rng.normal(size=(n, 3)).astype(np.float32),
        "goal": rng.normal(size=(n, 2)).astype(np.float32),
    }
    if with_image:
        out["camera"] = rng.integers(0, 256, size=(n, 1, 4, 4), dtype=np.uint8)
    return out


def _pair(seed: int, n: int, n_episodes: int, picker=None, slicer=None, with_image: bool = True, timeouts: bool = False):
    """``(dict dataset, tuple dataset of the sorted keys' values, the dict)``."""
    rng = np.random.default_rng(seed)
    obs = _dict_arrays(rng, n, with_image)
    actions = rng.normal(size=(n, 2)).astype(np.float32)
    rewards = rng.normal(size=n).astype(np.float32)
    ends = np.sort(rng.choice(np.arange(1, n), size=min(n_episodes, n - 1) - 1, replace=False))
    flags = np.zeros(n, dtype=np.float32)
    flags[ends - 1] = 1.0
    flags[-1] = 1.0
    terminals, timeout_flags = (np.zeros(n, np.float32), flags) if timeouts else (flags, None)
    kwargs = dict(transition_picker=picker, trajectory_slicer=slicer)
    as_dict = MDPDataset(obs, actions, rewards, terminals, timeout_flags, **kwargs)
    as_tuple = MDPDataset([obs[k] for k in sorted(obs)], actions, rewards, terminals, timeout_flags, **kwargs)
    return as_dict, as_tuple, obs


def _assert_same(a, b) -> None:
    """``a`` equals ``b``; a dict ``a`` (the dict view) holds ``b``'s list
    (the tuple path's) by sorted key."""
    if isinstance(b, list) and not isinstance(a, list):
        assert isinstance(a, dict) and list(a) == sorted(a) and len(a) == len(b), type(a)
        a = list(a.values())
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
    else:
        np.testing.assert_array_equal(a, b)


PICKERS = [
    lambda: BasicTransitionPicker(),
    lambda: MultiStepTransitionPicker(n_steps=3, gamma=0.9),
    lambda: FrameStackTransitionPicker(n_frames=2),
]
SLICERS = [lambda: BasicTrajectorySlicer(), lambda: FrameStackTrajectorySlicer(n_frames=3)]


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n=st.integers(4, 40),
    n_episodes=st.integers(1, 5),
    picker=st.sampled_from(range(len(PICKERS))),
    slicer=st.sampled_from(range(len(SLICERS))),
    timeouts=st.booleans(),
    length=st.integers(1, 6),
)
def test_pickers_and_slicers_match_the_tuple_path(seed, n, n_episodes, picker, slicer, timeouts, length):
    """The tuple path is the reference; frame stacking stacks only a dict's
    image key ("camera"), its other keys are what the basic picker/slicer
    gives for the same sampled rows."""
    as_dict, as_tuple, _ = _pair(seed, n, n_episodes, PICKERS[picker](), SLICERS[slicer](), timeouts=timeouts)
    basic, _, _ = _pair(seed, n, n_episodes, timeouts=timeouts)
    assert as_dict.dataset_info.observation_signature.keys == ("camera", "goal", "state")
    assert as_tuple.dataset_info.observation_signature.keys is None
    frame_stacked_picker = isinstance(as_dict.transition_picker, FrameStackTransitionPicker)
    frame_stacked_slicer = isinstance(as_dict.trajectory_slicer, FrameStackTrajectorySlicer)

    def draw(dataset, method, *args):
        offrl.seed(seed)
        return getattr(dataset, method)(*args)

    if as_dict.transition_count:
        a, b = draw(as_dict, "sample_transition_batch", 7), draw(as_tuple, "sample_transition_batch", 7)
        plain = draw(basic, "sample_transition_batch", 7)
        for field in ("observations", "next_observations"):
            got, want = getattr(a, field), getattr(b, field)
            if frame_stacked_picker:
                want = [want[0]] + list(getattr(plain, field).values())[1:]
            _assert_same(got, want)
        for field in ("actions", "rewards", "terminals", "intervals"):
            _assert_same(getattr(a, field), getattr(b, field))
    a, b = draw(as_dict, "sample_trajectory_batch", 3, length), draw(as_tuple, "sample_trajectory_batch", 3, length)
    want = b.observations
    if frame_stacked_slicer:
        want = [want[0]] + list(draw(basic, "sample_trajectory_batch", 3, length).observations.values())[1:]
    _assert_same(a.observations, want)
    for field in ("actions", "rewards", "returns_to_go", "timesteps", "masks"):
        _assert_same(getattr(a, field), getattr(b, field))


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 30), n_episodes=st.integers(1, 4), timeouts=st.booleans())
def test_frame_stacking_per_item_matches_a_naive_loop(seed, n, n_episodes, timeouts):
    """The per-item picker and slicer against frames gathered one by one:
    the image key stacks its last 2 frames (zeros before the start), the
    vector keys are the step's own values."""
    as_dict, _, _ = _pair(seed, n, n_episodes, timeouts=timeouts)
    picker, slicer = FrameStackTransitionPicker(2), FrameStackTrajectorySlicer(2)
    for episode in as_dict.episodes:
        camera, goal, state = (episode.observations[key] for key in ("camera", "goal", "state"))
        for i in range(episode.transition_count):
            t = picker(episode, i)
            assert list(t.observation) == list(t.next_observation) == ["camera", "goal", "state"]
            previous = camera[i - 1] if i > 0 else np.zeros_like(camera[0])
            np.testing.assert_array_equal(t.observation["camera"], np.concatenate([previous, camera[i]]))
            np.testing.assert_array_equal(t.observation["goal"], goal[i])
            np.testing.assert_array_equal(t.observation["state"], state[i])
            if not t.terminal and i + 1 < episode.size():
                np.testing.assert_array_equal(t.next_observation["camera"], np.concatenate([camera[i], camera[i + 1]]))
                np.testing.assert_array_equal(t.next_observation["state"], state[i + 1])
        window = slicer(episode, episode.size() - 1, 3)
        np.testing.assert_array_equal(window.observations["state"][-1], state[-1])
        assert window.observations["camera"].shape == (3, 2, 4, 4)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 30), n_episodes=st.integers(1, 4))
def test_episodes_and_arrays_hold_the_values_by_key(seed, n, n_episodes):
    as_dict, _, obs = _pair(seed, n, n_episodes)
    keys = ("camera", "goal", "state")
    arrays = as_dict.to_arrays()["observations"]
    assert list(arrays) == list(keys)
    for key in keys:
        np.testing.assert_array_equal(arrays[key], obs[key])
    row = 0
    for episode in as_dict.episodes:
        assert episode.observation_keys == keys
        assert episode.observation_signature.keys == keys
        assert list(episode.observations) == list(keys)
        for k, key in enumerate(keys):
            np.testing.assert_array_equal(episode.observations[key], obs[key][row:row + episode.size()])
            assert episode.observation_columns[k] is episode.observations[key]
        row += episode.size()
    assert row == n


def test_single_transition_and_trajectory_match_the_tuple_path():
    as_dict, as_tuple, _ = _pair(3, 20, 3)
    offrl.seed(5)
    a = as_dict.sample_transition()
    offrl.seed(5)
    b = as_tuple.sample_transition()
    _assert_same(a.observation, b.observation)
    _assert_same(a.next_observation, b.next_observation)
    offrl.seed(6)
    a = as_dict.sample_trajectory(4)
    offrl.seed(6)
    b = as_tuple.sample_trajectory(4)
    _assert_same(a.observations, b.observations)


def test_dump_load_keeps_keys_and_values(tmp_path):
    as_dict, _, obs = _pair(0, 30, 4, timeouts=True)
    path = tmp_path / "d.h5"
    as_dict.dump(path)
    with h5py.File(path, "r") as h5:
        assert int(h5.attrs["schema_minor_version"]) == SCHEMA_MINOR_VERSION == 2
    loaded = ReplayBuffer.load(path)
    assert loaded.dataset_info.observation_signature == as_dict.dataset_info.observation_signature
    assert loaded.dataset_info.observation_signature.keys == ("camera", "goal", "state")
    got = loaded.to_arrays()["observations"]
    assert list(got) == ["camera", "goal", "state"]
    for key in got:
        np.testing.assert_array_equal(got[key], obs[key])
    assert [e.size() for e in loaded.episodes] == [e.size() for e in as_dict.episodes]
    row = 0
    for episode in loaded.episodes:
        for key in ("camera", "goal", "state"):
            np.testing.assert_array_equal(episode.observations[key], obs[key][row:row + episode.size()])
        row += episode.size()
    # an episode-only (non-columnar) dump path keeps them too
    buffer = create_infinite_replay_buffer(episodes=list(as_dict.episodes))
    stream = io.BytesIO()
    buffer.dump(stream)
    stream.seek(0)
    again = ReplayBuffer.load(stream)
    assert again.dataset_info.observation_signature.keys == ("camera", "goal", "state")
    np.testing.assert_array_equal(again.episodes[0].observations["state"], as_dict.episodes[0].observations["state"])


def _write_schema_1_1(path, observations, actions, rewards) -> None:
    """A file in the layout offrl wrote before dict observations (schema 1.1)."""
    n = actions.shape[0]
    with h5py.File(path, "w") as h5:
        h5.attrs["format"] = "offrl.dataset"
        h5.attrs["schema_version"] = 1
        h5.attrs["schema_minor_version"] = 1
        h5.attrs["offrl_version"] = "0.0.0"
        h5.attrs["action_space"] = "continuous"
        h5.attrs["action_size"] = actions.shape[1]
        h5.attrs["n_observation_columns"] = len(observations)
        for k, column in enumerate(observations):
            h5.create_dataset(f"observations_{k}", data=column)
        h5.create_dataset("actions", data=actions)
        h5.create_dataset("rewards", data=rewards)
        h5.create_dataset("episode_starts", data=np.array([0], np.int64))
        h5.create_dataset("episode_ends", data=np.array([n], np.int64))
        h5.create_dataset("episode_terminated", data=np.array([True]))
        h5.create_dataset("episode_has_final", data=np.array([False]))


def test_an_older_schema_file_still_loads(tmp_path):
    rng = np.random.default_rng(0)
    observations = [rng.normal(size=(6, 3)).astype(np.float32), rng.normal(size=(6, 2)).astype(np.float32)]
    actions = rng.normal(size=(6, 2)).astype(np.float32)
    rewards = rng.normal(size=(6, 1)).astype(np.float32)
    _write_schema_1_1(tmp_path / "old.h5", observations, actions, rewards)
    loaded = ReplayBuffer.load(tmp_path / "old.h5")
    assert loaded.dataset_info.observation_signature.keys is None
    arrays = loaded.to_arrays()
    for x, y in zip(arrays["observations"], observations):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(arrays["actions"], actions)


@pytest.mark.parametrize(
    "keys, message",
    [('["a"]', "names 1 keys"), ('["a", "a"]', "repeats"), ("{'a'", "not valid JSON"), ('[1, 2]', "list of strings")],
)
def test_a_bad_keys_attribute_is_refused(tmp_path, keys, message):
    as_dict, _, _ = _pair(1, 10, 2, with_image=False)
    path = tmp_path / "d.h5"
    as_dict.dump(path)
    with h5py.File(path, "a") as h5:
        h5.attrs["observation_keys"] = keys
    with pytest.raises(ValueError, match=message):
        read_dataset_file(path)


def test_splits_keep_keys():
    as_dict, _, obs = _pair(2, 40, 5)
    train, test = train_test_split(as_dict, test_size=0.4, random_state=0)
    for part in (train, test):
        assert part.dataset_info.observation_signature.keys == ("camera", "goal", "state")
        assert all(e.observation_keys == ("camera", "goal", "state") for e in part.episodes)
    assert train.transition_count + test.transition_count == as_dict.transition_count


def test_online_append_of_dicts_matches_tuples():
    rng = np.random.default_rng(4)
    steps = [{"state": rng.normal(size=3), "goal": rng.normal(size=2)} for _ in range(7)]
    actions = rng.normal(size=(7, 2))
    as_dict = create_infinite_replay_buffer()
    as_tuple = create_infinite_replay_buffer()
    for i, (step, action) in enumerate(zip(steps, actions)):
        as_dict.append(step, action, float(i))
        as_tuple.append([step["goal"], step["state"]], action, float(i))
        if i == 3:
            as_dict.clip_episode(True)
            as_tuple.clip_episode(True)
    final = {"goal": rng.normal(size=2), "state": rng.normal(size=3)}
    as_dict.clip_episode(False, final_observation=final)
    as_tuple.clip_episode(False, final_observation=[final["goal"], final["state"]])
    assert as_dict.dataset_info.observation_signature == Signature(
        dtype=[np.float32, np.float32], shape=[(2,), (3,)], keys=["goal", "state"]
    )
    _assert_same(as_dict.to_arrays()["observations"], as_tuple.to_arrays()["observations"])
    assert as_dict.transition_count == as_tuple.transition_count == 7
    np.testing.assert_array_equal(as_dict.episodes[1].final_observation["state"], final["state"].astype(np.float32))


def test_buffer_from_dict_episodes_and_env_signature():
    rng = np.random.default_rng(5)
    episode = Episode(
        observations={"b": rng.normal(size=(4, 2)), "a": rng.normal(size=(4, 1))},
        actions=rng.normal(size=(4, 2)).astype(np.float32),
        rewards=np.zeros((4, 1), np.float32),
        terminated=True,
    )
    assert episode.observation_keys == ("a", "b")
    buffer = create_infinite_replay_buffer(episodes=[episode, episode])
    assert buffer.dataset_info.observation_signature.keys == ("a", "b")
    assert buffer.transition_count == 8

    gymnasium = pytest.importorskip("gymnasium")
    from gymnasium import spaces

    class DictEnv(gymnasium.Env):
        observation_space = spaces.Dict({"velocity": spaces.Box(-1, 1, (2,)), "image": spaces.Box(0, 255, (3, 8, 8), np.uint8)})
        action_space = spaces.Discrete(3)

    env_buffer = create_infinite_replay_buffer(env=DictEnv())
    signature = env_buffer.dataset_info.observation_signature
    assert signature.keys == ("image", "velocity")
    assert signature.dtype == [np.dtype(np.uint8), np.dtype(np.float32)]
    env_buffer.append({"velocity": np.zeros(2), "image": np.zeros((3, 8, 8), np.uint8)}, 1, 0.0)
    with pytest.raises(ValueError, match=r"observation at step 1 has no key 'velocity'"):
        env_buffer.append({"image": np.zeros((3, 8, 8), np.uint8)}, 1, 0.0)


# ------------------------------------------------------------------ bad input
def test_keys_that_differ_between_steps_or_episodes_are_named():
    buffer = create_infinite_replay_buffer()
    buffer.append({"a": np.zeros(2), "b": np.zeros(1)}, np.zeros(2), 0.0)
    buffer.append({"a": np.zeros(2), "b": np.zeros(1)}, np.zeros(2), 0.0)
    with pytest.raises(ValueError, match=r"observation at step 2 has an unexpected key 'c'"):
        buffer.append({"a": np.zeros(2), "b": np.zeros(1), "c": np.zeros(1)}, np.zeros(2), 0.0)
    with pytest.raises(ValueError, match=r"observation at step 2 has no key 'b'"):
        buffer.append({"a": np.zeros(2)}, np.zeros(2), 0.0)
    with pytest.raises(ValueError, match=r"observation\['b'\] has shape \(2,\), expected \(1,\)"):
        buffer.append({"a": np.zeros(2), "b": np.zeros(2)}, np.zeros(2), 0.0)
    with pytest.raises(TypeError, match="is a dict, but the buffer holds"):
        plain = create_infinite_replay_buffer()
        plain.append(np.zeros(2), np.zeros(2), 0.0)
        plain.append({"a": np.zeros(2)}, np.zeros(2), 0.0)

    first = Episode({"a": np.zeros((3, 2))}, np.zeros((3, 2), np.float32), np.zeros((3, 1), np.float32), True)
    second = Episode({"a": np.zeros((3, 2)), "z": np.zeros((3, 1))}, np.zeros((3, 2), np.float32), np.zeros((3, 1), np.float32), True)
    with pytest.raises(ValueError, match=r"episodes\[1\]: episode.observations has an unexpected key 'z'"):
        create_infinite_replay_buffer(episodes=[first, second])


def test_arrays_of_different_lengths_per_key_are_named():
    with pytest.raises(ValueError, match=r"observations\['state'\] has 9 rows, observations\['goal'\] has 10"):
        MDPDataset({"goal": np.zeros((10, 2)), "state": np.zeros((9, 3))}, np.zeros((10, 2)), np.zeros(10), np.zeros(10))
    with pytest.raises(ValueError, match=r"observations\['goal'\]\[4\] is nan"):
        goal = np.zeros((10, 2))
        goal[4, 1] = np.nan
        MDPDataset({"goal": goal}, np.zeros((10, 2)), np.zeros(10), np.zeros(10))
    with pytest.raises(ValueError, match="empty dict"):
        MDPDataset({}, np.zeros((10, 2)), np.zeros(10), np.zeros(10))
    with pytest.raises(TypeError, match="keys must be strings"):
        MDPDataset({1: np.zeros((10, 2))}, np.zeros((10, 2)), np.zeros(10), np.zeros(10))
    with pytest.raises(ValueError, match="no key 'state'"):
        MDPDataset({"goal": np.zeros((10, 2)), "state": np.zeros((10, 3))}, np.zeros((10, 2)), np.zeros(10), np.zeros(10),
                   timeouts=np.r_[np.zeros(9), 1], next_observations={"goal": np.zeros((10, 2))})


def test_signature_keys_round_trip_and_compare():
    signature = Signature(dtype=[np.uint8, np.float32], shape=[(1, 4, 4), (3,)], keys=["camera", "state"])
    assert Signature.from_dict(signature.to_dict()) == signature
    assert signature != Signature(dtype=[np.uint8, np.float32], shape=[(1, 4, 4), (3,)])
    assert repr(signature) == "{'camera': uint8(1, 4, 4), 'state': float32(3,)}"
    with pytest.raises(ValueError, match="2 keys but 1 shapes"):
        Signature(dtype=[np.float32], shape=[(3,)], keys=["a", "b"])
    with pytest.raises(ValueError, match="repeat"):
        Signature(dtype=[np.float32, np.float32], shape=[(3,), (2,)], keys=["a", "a"])


def test_episode_generator_and_serialize_keep_keys():
    from offrl.dataset import EpisodeGenerator

    rng = np.random.default_rng(7)
    obs = {"b": rng.normal(size=(6, 2)).astype(np.float32), "a": rng.normal(size=(6, 1)).astype(np.float32)}
    episodes = EpisodeGenerator(obs, np.zeros((6, 2), np.float32), np.zeros(6), np.r_[0, 0, 1, 0, 0, 1])()
    assert [e.observation_keys for e in episodes] == [("a", "b"), ("a", "b")]
    np.testing.assert_array_equal(episodes[1].observations["b"], obs["b"][3:])
    final = {"a": np.ones(1, np.float32), "b": np.ones(2, np.float32)}
    episode = Episode(obs, np.zeros((6, 2), np.float32), np.zeros((6, 1), np.float32), False, final_observation=final)
    data = episode.serialize()
    assert set(data["observations"]) == {"a", "b"} and set(data["final_observation"]) == {"a", "b"}
    again = Episode.deserialize(data)
    assert again.observation_keys == ("a", "b")
    np.testing.assert_array_equal(again.observations["b"], obs["b"])
    np.testing.assert_array_equal(again.final_observation["a"], final["a"])


@pytest.mark.parametrize("write_at_termination", [False, True])
def test_experience_writer_takes_dicts(write_at_termination):
    from offrl.dataset import ExperienceWriter, InfiniteBuffer

    signature = Signature(dtype=[np.float32, np.float32], shape=[(1,), (2,)], keys=["a", "b"])
    buffer = InfiniteBuffer()
    writer = ExperienceWriter(buffer, _identity(), signature, Signature(np.float32, (2,)), Signature(np.float32, (1,)),
                              write_at_termination=write_at_termination)
    for t in range(3):
        writer.write({"b": np.full(2, t), "a": np.full(1, -t)}, np.zeros(2), 1.0)
    writer.clip_episode(True)
    episode = buffer.episodes[0]
    np.testing.assert_array_equal(episode.observations["a"][:, 0], [0, -1, -2])
    np.testing.assert_array_equal(episode.observations["b"][:, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="no key 'a'"):
        writer.write({"b": np.zeros(2)}, np.zeros(2), 1.0)


def _identity():
    from offrl.dataset import BasicWriterPreprocess

    return BasicWriterPreprocess()


# ------------------------------------------------------- the views a user reads
def _user_dataset(seed: int = 0, n: int = 30, timeouts: bool = False) -> tuple:
    """A dataset a new user builds: ``{"state", "image"}`` (not sorted), each
    step's action its row number (so a sampled row is known), episodes of
    7 steps."""
    rng = np.random.default_rng(seed)
    obs = {"state": rng.normal(size=(n, 3)).astype(np.float32),
           "image": rng.integers(0, 256, size=(n, 1, 4, 4), dtype=np.uint8)}
    flags = np.zeros(n, np.float32)
    flags[6::7] = 1.0
    flags[-1] = 1.0
    terminals, timeout_flags = (np.zeros(n, np.float32), flags) if timeouts else (flags, None)
    actions = np.arange(n, dtype=np.float32)[:, None].repeat(2, axis=1)
    return MDPDataset(obs, actions, rng.normal(size=n), terminals, timeout_flags), obs, flags


def test_a_new_user_reads_episodes_by_key():
    dataset, obs, _ = _user_dataset()
    episode = dataset.episodes[0]
    assert isinstance(episode.observations, dict)
    # the stored key order is sorted (gymnasium's Dict order), whatever order the user gave
    assert list(episode.observations) == ["image", "state"] == list(episode.observation_keys)
    np.testing.assert_array_equal(episode.observations["image"], obs["image"][:7])
    np.testing.assert_array_equal(episode.observations["state"], obs["state"][:7])
    assert episode.observations["image"].dtype == np.uint8
    # the columnar form pickers read: the dict's values, views of the storage
    assert [c is episode.observations[k] for k, c in zip(("image", "state"), episode.observation_columns)] == [True, True]
    nxt = episode.next_observation(6)  # after the terminal step: zeros, by key
    assert list(nxt) == ["image", "state"] and not any(v.any() for v in nxt.values())
    np.testing.assert_array_equal(episode.next_observation(2)["state"], obs["state"][3])
    transition = dataset.sample_transition()
    assert list(transition.observation) == list(transition.next_observation) == ["image", "state"]
    row = int(transition.action[0])
    np.testing.assert_array_equal(transition.observation["state"], obs["state"][row])
    window = dataset.sample_trajectory(3)
    assert list(window.observations) == ["image", "state"]
    assert window.observation_signature.keys == ("image", "state")


@pytest.mark.parametrize("timeouts", [False, True])
@pytest.mark.parametrize("buffer_kind", ["replay", "prioritized", "mixed"])
def test_mini_batches_hold_a_naive_per_row_gather_by_key(timeouts, buffer_kind):
    dataset, obs, flags = _user_dataset(1, timeouts=timeouts)
    if buffer_kind == "prioritized":
        source = create_prioritized_replay_buffer(episodes=list(dataset.episodes))
    elif buffer_kind == "mixed":
        source = MixedReplayBuffer(dataset, create_infinite_replay_buffer(episodes=list(dataset.episodes)), 0.5)
    else:
        source = dataset
    offrl.seed(3)
    batch = source.sample_transition_batch(64)
    assert list(batch.observations) == list(batch.next_observations) == ["image", "state"]
    rows = batch.actions[:, 0].astype(np.int64)
    for key in ("image", "state"):
        np.testing.assert_array_equal(batch.observations[key], obs[key][rows])
        want_next = np.stack([
            np.zeros_like(obs[key][0]) if flags[r] and not timeouts else obs[key][r + 1] for r in rows
        ])
        np.testing.assert_array_equal(batch.next_observations[key], want_next)
        assert batch.observations[key].dtype == obs[key].dtype
    # the torch batch holds the columns the encoders read, in stored key order
    tensors = batch.to_torch("cpu")
    assert isinstance(tensors.observations, list)
    np.testing.assert_array_equal(tensors.observations[0].numpy(), obs["image"][rows])
    np.testing.assert_array_equal(tensors.next_observations[1].numpy(), batch.next_observations["state"])


def test_trajectory_batches_hold_a_naive_window_by_key():
    dataset, obs, _ = _user_dataset(2)
    offrl.seed(4)
    batch = dataset.sample_trajectory_batch(16, 4)
    assert list(batch.observations) == ["image", "state"]
    for b in range(16):
        valid = batch.masks[b].astype(bool)
        rows = batch.actions[b, valid, 0].astype(np.int64)
        for key in ("image", "state"):
            np.testing.assert_array_equal(batch.observations[key][b, valid], obs[key][rows])
            assert not batch.observations[key][b, ~valid].any()  # front padding


def test_a_batch_in_another_key_order_is_reordered_by_the_algorithm_keys():
    dataset, _, _ = _user_dataset(3)
    batch = dataset.sample_transition_batch(8)
    reversed_batch = batch.with_observation_keys(("state", "image"))
    assert list(reversed_batch.observations) == ["state", "image"]
    again = reversed_batch.with_observation_keys(("image", "state"))
    assert list(again.observations) == ["image", "state"]
    assert batch.with_observation_keys(("image", "state")) is batch
    with pytest.raises(ValueError, match="no key 'goal'"):
        batch.with_observation_keys(("goal", "image"))


def test_disk_and_file_round_trips_read_back_dicts(tmp_path):
    from offrl.dataset import DiskDatasetWriter

    dataset, obs, _ = _user_dataset(4)
    dataset.dump(tmp_path / "d.h5")
    with DiskDatasetWriter(tmp_path / "disk") as writer:
        writer.add_episodes(list(dataset.episodes))
    for loaded in (ReplayBuffer.load(tmp_path / "d.h5"), ReplayBuffer.load(tmp_path / "disk", in_memory=False),
                   ReplayBuffer.load(tmp_path / "disk")):
        assert loaded.dataset_info.observation_signature.keys == ("image", "state")
        row = 0
        for episode in loaded.episodes:
            assert list(episode.observations) == ["image", "state"]
            for key in ("image", "state"):
                np.testing.assert_array_equal(episode.observations[key], obs[key][row:row + episode.size()])
            row += episode.size()
        assert row == obs["state"].shape[0]
        arrays = loaded.to_arrays()["observations"]
        assert list(arrays) == ["image", "state"]
        np.testing.assert_array_equal(arrays["image"], obs["image"])
        offrl.seed(5)
        batch = loaded.sample_transition_batch(8)
        np.testing.assert_array_equal(batch.observations["state"], obs["state"][batch.actions[:, 0].astype(np.int64)])


def test_an_episode_from_columns_and_keys_reads_as_a_dict():
    columns = [np.zeros((3, 1, 2, 2), np.uint8), np.arange(6.0, dtype=np.float32).reshape(3, 2)]
    episode = Episode(columns, np.zeros((3, 1), np.float32), np.zeros((3, 1), np.float32), False,
                      final_observation=[np.ones((1, 2, 2), np.uint8), np.full(2, 9.0, np.float32)],
                      observation_keys=("image", "state"))
    assert episode.observations["state"] is columns[1]
    np.testing.assert_array_equal(episode.final_observation["state"], [9.0, 9.0])
    np.testing.assert_array_equal(episode.next_observation(2)["image"], np.ones((1, 2, 2)))
    one_key = Episode(np.zeros((3, 2)), np.zeros((3, 1)), np.zeros((3, 1)), True, observation_keys=("state",))
    assert list(one_key.observations) == ["state"] and one_key.observation_columns is one_key.observations["state"]
    with pytest.raises(ValueError, match="2 observation columns for the 3 keys"):
        Episode(columns, np.zeros((3, 1)), np.zeros((3, 1)), True, observation_keys=("a", "b", "c"))
    # tuple observations stay lists
    as_tuple = Episode(columns, np.zeros((3, 1)), np.zeros((3, 1)), True)
    assert isinstance(as_tuple.observations, list) and as_tuple.observation_keys is None
