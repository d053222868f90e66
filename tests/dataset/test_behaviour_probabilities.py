"""Logged behaviour probabilities: validation, alignment with the steps, and
survival through episode views, to_arrays, subsets, splits, FIFO trimming and
HDF5 dump / load (including files of schema 1.0 written before the column)."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from offrl.dataset import (
    Episode,
    FIFOBuffer,
    InfiniteBuffer,
    MDPDataset,
    ReplayBuffer,
    create_fifo_replay_buffer,
    train_test_split,
)
from offrl.dataset.io import SCHEMA_MINOR_VERSION

# 10 steps: episodes [0..3] terminal, [4..6] timeout, [7..9] cut by the end of the log
TERMINALS = np.array([0, 0, 0, 1, 0, 0, 0, 0, 0, 0])
TIMEOUTS = np.array([0, 0, 0, 0, 0, 0, 1, 0, 0, 0])
PROBS = np.array([0.5, 0.25, 1.0, 0.125, 0.75, 0.2, 0.3, 0.9, 0.6, 0.05])


def _discrete(**kwargs):
    obs = np.arange(20, dtype=np.float32).reshape(10, 2)
    actions = np.array([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    return MDPDataset(obs, actions, np.arange(10.0), TERMINALS, TIMEOUTS, behaviour_probabilities=PROBS, **kwargs)


def _episode_probs(dataset):
    return [None if e.behaviour_probabilities is None else e.behaviour_probabilities.tolist() for e in dataset.episodes]


# ------------------------------------------------------------ alignment


def test_dataset_attribute_and_episode_views_hold_the_given_values():
    ds = _discrete()
    assert ds.behaviour_probabilities.dtype == np.float64
    np.testing.assert_array_equal(ds.behaviour_probabilities, PROBS)
    assert _episode_probs(ds) == [PROBS[0:4].tolist(), PROBS[4:7].tolist(), PROBS[7:10].tolist()]
    np.testing.assert_array_equal(ds.to_arrays()["behaviour_probabilities"], PROBS)


def test_alignment_with_actions_when_final_observation_rows_are_stored():
    obs = np.arange(20, dtype=np.float32).reshape(10, 2)
    ds = _discrete(next_observations=obs + 100)
    # two truncated episodes store a final-observation row each
    assert ds.buffer.behaviour_probabilities.shape == (12,)
    np.testing.assert_array_equal(ds.behaviour_probabilities, PROBS)
    actions = np.concatenate([e.actions for e in ds.episodes])
    assert ds.behaviour_probabilities.shape[0] == actions.shape[0]
    assert _episode_probs(ds) == [PROBS[0:4].tolist(), PROBS[4:7].tolist(), PROBS[7:10].tolist()]
    np.testing.assert_array_equal(ds.to_arrays()["behaviour_probabilities"], PROBS)


def test_absent_everywhere_when_not_given():
    ds = MDPDataset(np.zeros((4, 1)), np.array([0, 1, 0, 1]), np.ones(4), np.array([0, 0, 0, 1]))
    assert ds.behaviour_probabilities is None
    assert ds.episodes[0].behaviour_probabilities is None
    assert ds.to_arrays()["behaviour_probabilities"] is None
    assert train_test_split(MDPDataset(np.zeros((4, 1)), np.array([0, 1, 0, 1]), np.ones(4),
                                       np.array([0, 1, 0, 1])), test_size=1, random_state=0)[0].behaviour_probabilities is None


def test_continuous_actions_take_densities_above_one():
    densities = np.array([0.5, 3.0, 12.5, 1e-6])
    ds = MDPDataset(np.zeros((4, 2)), np.full((4, 2), 0.5), np.ones(4), np.array([0, 0, 0, 1]),
                    behaviour_probabilities=densities)
    np.testing.assert_array_equal(ds.behaviour_probabilities, densities)


def test_column_shaped_input_is_accepted():
    ds = MDPDataset(np.zeros((3, 1)), np.array([0, 1, 0]), np.ones(3), np.array([0, 0, 1]),
                    behaviour_probabilities=PROBS[:3, None])
    np.testing.assert_array_equal(ds.behaviour_probabilities, PROBS[:3])


# ----------------------------------------------------- subsets and splits


def test_subset_keeps_each_episodes_values():
    ds = _discrete(next_observations=np.zeros((10, 2)))
    sub = ds._subset(np.array([2, 0]))
    assert _episode_probs(sub) == [PROBS[7:10].tolist(), PROBS[0:4].tolist()]
    np.testing.assert_array_equal(sub.behaviour_probabilities, np.concatenate([PROBS[7:10], PROBS[0:4]]))


def test_train_test_split_keeps_values_with_their_episodes():
    ds = _discrete()
    train, test = train_test_split(ds, test_size=1, random_state=3)
    by_first_obs = {float(e.observations[0, 0]): e.behaviour_probabilities.tolist() for e in ds.episodes}
    for part in (train, test):
        for e in part.episodes:
            assert e.behaviour_probabilities.tolist() == by_first_obs[float(e.observations[0, 0])]
    assert train.size() + test.size() == 3


def test_fifo_buffer_trims_the_column_with_the_rows():
    episodes = [
        Episode(np.full((4, 1), k, np.float32), np.array([[0], [1], [0], [1]]), np.ones((4, 1), np.float32), True,
                behaviour_probabilities=np.array([0.1, 0.2, 0.3, 0.4]) + k / 10)
        for k in range(3)
    ]
    rb = create_fifo_replay_buffer(6, episodes=episodes, action_space="discrete", action_size=2)
    # 12 transitions written, the newest 6 kept: the last 2 of episode 1 and all of episode 2
    np.testing.assert_allclose(rb.behaviour_probabilities, [0.4, 0.5, 0.3, 0.4, 0.5, 0.6])
    assert [e.observations[0, 0] for e in rb.episodes] == [1.0, 2.0]


# ------------------------------------------------------ episodes and online


def test_episodes_with_and_without_values_mix_as_nan():
    obs = np.zeros((3, 1), np.float32)
    actions = np.array([[0], [1], [1]])
    rewards = np.ones((3, 1), np.float32)
    rb = ReplayBuffer(InfiniteBuffer(), episodes=[
        Episode(obs, actions, rewards, True),
        Episode(obs, actions, rewards, True, behaviour_probabilities=np.array([0.5, 0.5, 1.0])),
        Episode(obs, actions, rewards, False, final_observation=np.ones(1, np.float32)),
    ])
    np.testing.assert_array_equal(rb.behaviour_probabilities, [np.nan] * 3 + [0.5, 0.5, 1.0] + [np.nan] * 3)
    assert rb.episodes[0].behaviour_probabilities.shape == (3,)


def test_online_steps_appended_to_a_dataset_with_values_hold_nan():
    ds = _discrete()
    for t in range(3):
        ds.append(np.array([0.0, 1.0]), 1, 1.0)
    ds.clip_episode(True)
    np.testing.assert_array_equal(ds.behaviour_probabilities, np.concatenate([PROBS, [np.nan] * 3]))
    np.testing.assert_array_equal(ds.episodes[3].behaviour_probabilities, [np.nan] * 3)


class ListBuffer:
    """A minimal user BufferProtocol holding episode objects."""

    def __init__(self):
        self.items, self._episodes = [], []

    def append(self, episode, index):
        self.items.append((episode, index))
        if not self._episodes or self._episodes[-1] is not episode:
            self._episodes.append(episode)

    @property
    def episodes(self):
        return self._episodes

    @property
    def transition_count(self):
        return len(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def test_user_buffer_reads_values_from_its_episodes(tmp_path):
    user = ReplayBuffer(ListBuffer())
    obs = np.zeros((2, 1), np.float32)
    user.append_episode(Episode(obs, np.array([[0], [1]]), np.ones((2, 1), np.float32), True,
                                behaviour_probabilities=np.array([0.5, 0.25])))
    np.testing.assert_array_equal(user.behaviour_probabilities, [0.5, 0.25])
    user.dump(tmp_path / "u.h5")
    np.testing.assert_array_equal(ReplayBuffer.load(tmp_path / "u.h5").behaviour_probabilities, [0.5, 0.25])


# ------------------------------------------------------------- dump / load


def test_dump_load_round_trip_exact(tmp_path):
    obs = np.arange(20, dtype=np.float32).reshape(10, 2)
    ds = _discrete(next_observations=obs + 1)
    ds.dump(tmp_path / "d.h5")
    with h5py.File(tmp_path / "d.h5", "r") as h5:
        assert int(h5.attrs["schema_version"]) == 1
        assert int(h5.attrs["schema_minor_version"]) == SCHEMA_MINOR_VERSION == 2
    loaded = MDPDataset.load(tmp_path / "d.h5")
    np.testing.assert_array_equal(loaded.behaviour_probabilities, PROBS)
    assert _episode_probs(loaded) == _episode_probs(ds)
    fifo = ReplayBuffer.load(tmp_path / "d.h5", buffer=FIFOBuffer(100))
    np.testing.assert_array_equal(fifo.behaviour_probabilities, PROBS)


def test_file_without_values_loads_without_them(tmp_path):
    MDPDataset(np.zeros((3, 1)), np.array([0, 1, 0]), np.ones(3), np.array([0, 0, 1])).dump(tmp_path / "n.h5")
    with h5py.File(tmp_path / "n.h5", "r") as h5:
        assert "behaviour_probabilities" not in h5
    assert ReplayBuffer.load(tmp_path / "n.h5").behaviour_probabilities is None


def test_schema_1_0_file_still_loads(tmp_path):
    path = tmp_path / "old.h5"
    _discrete().dump(path)
    with h5py.File(path, "a") as h5:  # make it what offrl wrote before schema 1.1
        del h5.attrs["schema_minor_version"]
        del h5["behaviour_probabilities"]
    loaded = ReplayBuffer.load(path)
    assert loaded.behaviour_probabilities is None
    assert loaded.transition_count == _discrete().transition_count


@pytest.mark.parametrize("bad, shown", [(-0.5, "-0.5"), (np.inf, "inf")])
def test_corrupt_values_in_file(tmp_path, bad, shown):
    path = tmp_path / "bad.h5"
    _discrete().dump(path)
    with h5py.File(path, "a") as h5:
        h5["behaviour_probabilities"][5] = bad
    with pytest.raises(ValueError, match=re.escape(f"behaviour_probabilities[5] is {shown}")):
        ReplayBuffer.load(path)


def test_wrong_length_in_file(tmp_path):
    path = tmp_path / "bad.h5"
    _discrete().dump(path)
    with h5py.File(path, "a") as h5:
        del h5["behaviour_probabilities"]
        h5["behaviour_probabilities"] = np.ones(4)
    with pytest.raises(ValueError, match=r"behaviour_probabilities has shape \(4,\).*expected \(10,\)"):
        ReplayBuffer.load(path)


# ------------------------------------------------------------- validation


@pytest.mark.parametrize(
    "index, value, message",
    [
        (12, 0.0, "behaviour_probabilities[12] is 0.0, expected a probability in (0, 1]"),
        (3, 1.5, "behaviour_probabilities[3] is 1.5, expected a probability in (0, 1]"),
        (7, -0.25, "behaviour_probabilities[7] is -0.25, expected a probability in (0, 1]"),
        (9, np.nan, "behaviour_probabilities[9] is nan"),
    ],
)
def test_discrete_values_are_checked(index, value, message):
    probs = np.full(20, 0.5)
    probs[index] = value
    with pytest.raises(ValueError, match=re.escape(message)):
        MDPDataset(np.zeros((20, 1)), np.arange(20) % 2, np.ones(20), np.zeros(20), behaviour_probabilities=probs)


def test_continuous_densities_must_be_positive():
    with pytest.raises(ValueError, match=re.escape("behaviour_probabilities[2] is 0.0, expected a density > 0")):
        MDPDataset(np.zeros((4, 1)), np.full((4, 2), 0.1), np.ones(4), np.zeros(4),
                   behaviour_probabilities=[3.0, 2.0, 0.0, 1.0])


@pytest.mark.parametrize(
    "probs, error, message",
    [
        (np.full(5, 0.5), ValueError, "behaviour_probabilities has 5 rows, observations has 4"),
        (np.full((4, 2), 0.5), ValueError, "behaviour_probabilities must have shape (n,) or (n, 1), got (4, 2)"),
        (np.array(["a"] * 4), TypeError, "behaviour_probabilities must be numeric"),
    ],
)
def test_shape_and_type_are_checked(probs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        MDPDataset(np.zeros((4, 1)), np.arange(4) % 2, np.ones(4), np.zeros(4), behaviour_probabilities=probs)


def test_episode_values_are_checked_naming_the_episode():
    bad = Episode(np.zeros((2, 1), np.float32), np.array([[0], [1]]), np.ones((2, 1), np.float32), True,
                  behaviour_probabilities=np.array([0.5, 0.0]))
    with pytest.raises(ValueError, match=re.escape("episodes[0]: episode.behaviour_probabilities[1] is 0.0")):
        ReplayBuffer(InfiniteBuffer(), episodes=[bad])
