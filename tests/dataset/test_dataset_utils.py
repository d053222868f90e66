"""d3rlpy.dataset's public helpers, EpisodeGenerator, ExperienceWriter,
dump / load: names present and values as d3rlpy 2.8.1 gives them."""

from __future__ import annotations

import io

import numpy as np
import pytest

import offrl.dataset as D
from offrl.constants import ActionSpace


def test_batch_pad_array_and_observations():
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(D.batch_pad_array(a, 2), [[0, 0], [0, 0], [0, 1], [2, 3], [4, 5]])
    assert D.batch_pad_array(a, 2).dtype == np.float32
    padded = D.batch_pad_observations([a, a[:, :1]], 1)
    np.testing.assert_array_equal(padded[0], [[0, 0], [0, 1], [2, 3], [4, 5]])
    np.testing.assert_array_equal(padded[1], [[0], [0], [2], [4]])
    np.testing.assert_array_equal(D.batch_pad_array(a, 0), a)
    with pytest.raises(ValueError, match="pad_size"):
        D.batch_pad_array(a, -1)


def test_shape_helpers():
    assert D.is_tuple_shape([3]) is False
    assert D.is_tuple_shape([[3], [2]]) is True and D.is_tuple_shape(((3,), (2,))) is True
    assert D.cast_flat_shape([3]) == [3]
    assert D.cast_tuple_shape([[3], [2]]) == [[3], [2]]
    with pytest.raises(TypeError):
        D.cast_tuple_shape([3])
    with pytest.raises(TypeError):
        D.cast_flat_shape([[3], [2]])
    a = np.zeros((3, 2), np.float32)
    assert D.get_shape_from_observation(a) == (3, 2)
    assert D.get_shape_from_observation_sequence([a, a]) == [(2,), (2,)]
    assert D.get_dtype_from_observation([a]) == [np.dtype(np.float32)]
    assert D.get_dtype_from_observation_sequence(a) == np.float32
    assert D.get_axis_size([a, a], 0) == 3 and D.get_axis_size(a, 1) == 2 and D.get_batch_dim(a) == 3


def test_dtype_and_cast_helpers():
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    assert D.check_dtype(a, np.float32) and not D.check_dtype([a, a.astype(np.int64)], np.float32)
    assert not D.check_non_1d_array(np.zeros(3)) and not D.check_non_1d_array([a, np.zeros(3)])
    assert D.check_non_1d_array([a, a])
    cast = D.cast_recursively([a], np.int32)
    assert cast[0].dtype == np.int32 and cast[0].tolist() == [[0, 1], [2, 3], [4, 5]]
    np.testing.assert_array_equal(D.slice_observations(a, 1, 3), [[2, 3], [4, 5]])
    assert [s.tolist() for s in D.slice_observations([a, a], 0, 1)] == [[[0, 1]], [[0, 1]]]


def test_stack_recent_observations_matches_d3rlpy_values():
    frames = np.arange(12).reshape(6, 2, 1)
    np.testing.assert_array_equal(D.stack_recent_observations(frames, 1, 3)[:, 0], [0, 0, 0, 1, 2, 3])
    np.testing.assert_array_equal(D.stack_recent_observations(frames, 4, 2)[:, 0], [6, 7, 8, 9])
    tuple_stack = D.stack_recent_observations([frames], 1, 3)
    np.testing.assert_array_equal(tuple_stack[0][:, 0], [0, 0, 0, 1, 2, 3])
    with pytest.raises(IndexError):
        D.stack_recent_observations(frames, 6, 2)


def test_detect_action_space():
    assert D.detect_action_space(np.array([0, 1, 2])) == ActionSpace.DISCRETE
    assert D.detect_action_space(np.array([[0.0], [1.0]])) == ActionSpace.DISCRETE
    assert D.detect_action_space(np.array([[0.5]])) == ActionSpace.CONTINUOUS
    # offrl: integer-valued actions of several dimensions are continuous (d3rlpy says discrete)
    assert D.detect_action_space(np.array([[0.0, 1.0]])) == ActionSpace.CONTINUOUS


def test_detect_from_env():
    gymnasium = pytest.importorskip("gymnasium", reason="gymnasium is an optional dependency")
    env = gymnasium.make("CartPole-v1")
    assert D.detect_action_space_from_env(env) == ActionSpace.DISCRETE
    assert D.detect_action_size_from_env(env) == 2
    pendulum = gymnasium.make("Pendulum-v1")
    assert D.detect_action_space_from_env(pendulum) == ActionSpace.CONTINUOUS
    assert D.detect_action_size_from_env(pendulum) == 1


def test_episode_generator_splits_and_keeps_trailing_stretch():
    obs = np.arange(14, dtype=np.float32).reshape(7, 2)
    generator = D.EpisodeGenerator(
        obs, np.arange(7) * 0.5, np.ones(7), terminals=[0, 1, 0, 0, 0, 0, 0], timeouts=[0, 0, 0, 1, 0, 0, 0]
    )
    assert isinstance(generator, D.EpisodeGeneratorProtocol)
    episodes = generator()
    assert [e.size() for e in episodes] == [2, 2, 3]
    assert [e.terminated for e in episodes] == [True, False, False]
    np.testing.assert_array_equal(episodes[1].observations, obs[2:4])
    assert episodes[0].actions.shape == (2, 1) and episodes[0].rewards.shape == (2, 1)
    with pytest.raises(ValueError, match=r"terminals\[1\]"):
        D.EpisodeGenerator(obs, np.arange(7), np.ones(7), [0, 1, 0, 0, 0, 0, 0], [0, 1, 0, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="actions has 6 rows"):
        D.EpisodeGenerator(obs, np.arange(6), np.ones(7), np.zeros(7))
    rb = D.ReplayBuffer.from_episode_generator(generator(), D.InfiniteBuffer())
    assert rb.size() == 3


@pytest.mark.parametrize("write_at_termination", [False, True])
@pytest.mark.parametrize("buffer_kind", ["infinite", "fifo"])
def test_experience_writer(write_at_termination, buffer_kind):
    buffer = D.InfiniteBuffer() if buffer_kind == "infinite" else D.FIFOBuffer(100)
    writer = D.ExperienceWriter(
        buffer, D.BasicWriterPreprocess(),
        observation_signature=D.Signature(np.float32, (2,)),
        action_signature=D.Signature(np.float32, (1,)),
        reward_signature=D.Signature(np.float32, (1,)),
        write_at_termination=write_at_termination,
    )
    for t in range(4):
        writer.write(np.array([t, -t], np.float32), np.array([t * 0.5], np.float32), float(t))
    writer.clip_episode(True)
    for t in range(3):
        writer.write(np.array([10 + t, 0], np.float32), np.array([0.0], np.float32), 1.0)
    writer.clip_episode(False)
    writer.clip_episode(False)  # nothing written since: no empty episode
    episodes = list(buffer.episodes)
    assert [e.size() for e in episodes] == [4, 3]
    assert [e.terminated for e in episodes] == [True, False]
    np.testing.assert_array_equal(episodes[0].rewards[:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(episodes[1].observations[:, 0], [10, 11, 12])
    assert buffer.transition_count == 4 + 2
    with pytest.raises(ValueError, match="observation"):
        writer.write(np.zeros(3, np.float32), np.zeros(1, np.float32), 0.0)


def test_experience_writer_last_frame_preprocess():
    buffer = D.InfiniteBuffer()
    writer = D.ExperienceWriter(
        buffer, D.LastFrameWriterPreprocess(),
        D.Signature(np.uint8, (4, 3, 3)), D.Signature(np.int64, (1,)), D.Signature(np.float32, (1,)),
    )
    writer.write(np.full((4, 3, 3), 7, np.uint8), 1, 0.0)
    writer.clip_episode(True)
    assert buffer.observation_signature == D.Signature(np.uint8, (1, 3, 3))


def test_dump_load_round_trip(tmp_path):
    episodes = [
        D.Episode(np.arange(6, dtype=np.float32).reshape(3, 2), np.zeros((3, 1), np.float32),
                  np.array([[1.0], [2.0], [3.0]], np.float32), True),
        D.Episode(np.ones((2, 2), np.float32), np.ones((2, 1), np.float32), np.zeros((2, 1), np.float32), False,
                  final_observation=np.full(2, 9.0, np.float32)),
    ]
    path = tmp_path / "episodes.h5"
    D.dump(episodes, str(path))
    back = D.load(D.Episode, str(path))
    assert len(back) == 2
    np.testing.assert_array_equal(back[0].observations, episodes[0].observations)
    np.testing.assert_array_equal(back[0].rewards, episodes[0].rewards)
    assert back[0].terminated and not back[1].terminated
    np.testing.assert_array_equal(back[1].final_observation, [9.0, 9.0])
    buffer = io.BytesIO()
    D.dump(episodes, buffer)
    buffer.seek(0)

    class Plain:
        def __init__(self, observations, actions, rewards, terminated):
            self.observations, self.terminated = observations, terminated

    plain = D.load(Plain, buffer)
    np.testing.assert_array_equal(plain[1].observations, np.ones((2, 2)))
    assert [p.terminated for p in plain] == [True, False]
    with pytest.raises(ValueError, match="empty"):
        D.dump([], str(tmp_path / "none.h5"))
    with pytest.raises(TypeError, match="episode_cls"):
        D.load("Episode", str(path))


def test_d3rlpy_dataset_names_present():
    names = [
        "EpisodeGenerator", "EpisodeGeneratorProtocol", "ExperienceWriter", "SparseRewardTransitionPicker",
        "dump", "load", "batch_pad_array", "batch_pad_observations", "is_tuple_shape", "stack_observations",
        "stack_recent_observations", "slice_observations", "DATASET_VERSION",
    ]
    missing = [n for n in names if not hasattr(D, n)]
    assert not missing
    assert set(names) <= set(D.__all__)
