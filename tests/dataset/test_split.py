"""Episode-wise train/test splits through scikit-learn."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.model_selection import KFold, ShuffleSplit
from sklearn.model_selection import train_test_split as sk_train_test_split

from offrl import ActionSpace
from offrl.dataset import MDPDataset, MultiStepTransitionPicker, split_episodes, train_test_split

N_EPISODES = 10


def _dataset(with_final=True):
    """10 episodes of lengths 3..12; episode k's rewards are all k + 1 and its
    observations start at 1000 * k, so every episode is recognisable."""
    lengths = np.arange(3, 3 + N_EPISODES)
    obs, rewards, terminals, timeouts = [], [], [], []
    for k, n in enumerate(lengths):
        obs.append(1000.0 * k + np.arange(n)[:, None] + np.zeros((1, 2)))
        rewards.append(np.full(n, k + 1.0))
        end = np.zeros(n)
        end[-1] = 1
        terminals.append(end if k % 2 == 0 else np.zeros(n))
        timeouts.append(end if k % 2 == 1 else np.zeros(n))
    obs = np.concatenate(obs).astype(np.float32)
    kw = dict(next_observations=obs + 0.5) if with_final else {}
    return MDPDataset(
        obs,
        np.arange(obs.shape[0]) % 4,
        np.concatenate(rewards),
        np.concatenate(terminals),
        np.concatenate(timeouts),
        action_size=6,
        transition_picker=MultiStepTransitionPicker(3, 0.9),
        **kw,
    )


def _episode_id(episode) -> int:
    return int(episode.observations[0, 0] // 1000)


def _assert_same_episode(x, y):
    np.testing.assert_array_equal(x.observations, y.observations)
    np.testing.assert_array_equal(x.actions, y.actions)
    np.testing.assert_array_equal(x.rewards, y.rewards)
    assert x.terminated == y.terminated
    if x.final_observation is None:
        assert y.final_observation is None
    else:
        np.testing.assert_array_equal(x.final_observation, y.final_observation)
    assert x.compute_return() == y.compute_return()


def _check_split(ds, train, test, train_ids, test_ids, in_order=True):
    """``in_order``: episodes keep the dataset's order (else any order)."""
    originals = {_episode_id(e): e for e in ds.episodes}
    got_train = [_episode_id(e) for e in train.episodes]
    got_test = [_episode_id(e) for e in test.episodes]
    if not in_order:
        got_train, got_test = sorted(got_train), sorted(got_test)
    assert got_train == sorted(int(i) for i in train_ids)
    assert got_test == sorted(int(i) for i in test_ids)
    assert not set(got_train) & set(got_test)
    assert sorted(got_train + got_test) == list(range(N_EPISODES))
    for part in (train, test):
        for e in part.episodes:
            _assert_same_episode(originals[_episode_id(e)], e)
    assert train.transition_count + test.transition_count == ds.transition_count
    np.testing.assert_array_equal(
        np.sort(np.concatenate([train.compute_returns(), test.compute_returns()])), np.sort(ds.compute_returns())
    )


@pytest.mark.parametrize("test_size", [0.3, 0.25, 2, None])
def test_train_test_split_whole_episodes_as_sklearn(test_size):
    ds = _dataset()
    train, test = train_test_split(ds, test_size=test_size, random_state=7)
    sk_train, sk_test = sk_train_test_split(np.arange(N_EPISODES), test_size=test_size, random_state=7)
    assert train.size() == len(sk_train)
    assert test.size() == len(sk_test)
    _check_split(ds, train, test, sk_train, sk_test)


def test_train_test_split_sizes():
    ds = _dataset()
    train, test = train_test_split(ds, test_size=0.25, random_state=0)
    # sklearn: ceil(0.25 * 10) = 3 test episodes
    assert (train.size(), test.size()) == (7, 3)
    train, test = train_test_split(ds, train_size=4, random_state=0)
    assert (train.size(), test.size()) == (4, 6)


def test_train_test_split_without_shuffle_keeps_order():
    ds = _dataset()
    train, test = train_test_split(ds, test_size=0.3, shuffle=False)
    _check_split(ds, train, test, list(range(7)), [7, 8, 9])


def test_train_test_split_reproducible():
    ds = _dataset()
    a_train, a_test = train_test_split(ds, test_size=0.4, random_state=123)
    b_train, b_test = train_test_split(ds, test_size=0.4, random_state=123)
    assert [_episode_id(e) for e in a_test.episodes] == [_episode_id(e) for e in b_test.episodes]
    for x, y in zip(a_train.episodes, b_train.episodes):
        _assert_same_episode(x, y)
    others = {
        tuple(_episode_id(e) for e in train_test_split(ds, test_size=0.4, random_state=s)[1].episodes)
        for s in range(8)
    }
    assert len(others) > 1  # the split does depend on random_state


def test_split_keeps_components_and_action_space():
    ds = _dataset()
    train, test = train_test_split(ds, test_size=0.3, random_state=1)
    for part in (train, test):
        assert isinstance(part, MDPDataset)
        assert part.action_space == ActionSpace.DISCRETE
        assert part.action_size == 6  # given, not recomputed from the subset
        assert part.transition_picker is ds.transition_picker
        assert part.trajectory_slicer is ds.trajectory_slicer


def test_split_datasets_are_copies():
    ds = _dataset()
    train, test = train_test_split(ds, test_size=0.3, random_state=1)
    store = ds.buffer
    for part in (train, test):
        for e in part.episodes:
            assert not np.shares_memory(e.observations, store.observations[0])
            assert not np.shares_memory(e.actions, store.actions)
    train.buffer.rewards[:] = -1
    assert np.all(ds.compute_returns() > 0)


def test_split_datasets_sample_their_own_episodes():
    ds = _dataset()
    train, test = train_test_split(ds, test_size=0.3, random_state=2)
    test_ids = {_episode_id(e) for e in test.episodes}
    batch = test.sample_transition_batch(200)
    assert set((batch.observations[:, 0] // 1000).astype(int).tolist()) <= test_ids
    # next observations come from the same episode (or its final observation);
    # after a terminal step they are zeros
    terminal = batch.terminals[:, 0] == 1.0
    assert terminal.any() and not terminal.all()
    same = batch.next_observations[~terminal, 0] // 1000 == batch.observations[~terminal, 0] // 1000
    assert np.all(same)
    assert not batch.next_observations[terminal].any()


def test_split_without_final_observations():
    ds = _dataset(with_final=False)
    train, test = train_test_split(ds, test_size=0.5, random_state=3)
    sk_train, sk_test = sk_train_test_split(np.arange(N_EPISODES), test_size=0.5, random_state=3)
    _check_split(ds, train, test, sk_train, sk_test)


def test_split_episodes_kfold():
    ds = _dataset()
    folds = list(split_episodes(ds, KFold(3)))
    expected = list(KFold(3).split(np.arange(N_EPISODES)))
    assert len(folds) == 3
    seen_test = []
    for (train, test), (train_idx, test_idx) in zip(folds, expected):
        _check_split(ds, train, test, train_idx, test_idx)
        seen_test.extend(_episode_id(e) for e in test.episodes)
    assert sorted(seen_test) == list(range(N_EPISODES))  # each episode tested exactly once
    assert [f[1].size() for f in folds] == [4, 3, 3]


def test_split_episodes_shuffle_split():
    ds = _dataset()
    cv = ShuffleSplit(n_splits=2, test_size=3, random_state=0)
    for (train, test), (train_idx, test_idx) in zip(split_episodes(ds, cv), cv.split(np.arange(N_EPISODES))):
        _check_split(ds, train, test, train_idx, test_idx, in_order=False)


def test_split_errors():
    ds = _dataset()
    with pytest.raises(TypeError, match="split"):
        list(split_episodes(ds, object()))
    with pytest.raises(TypeError, match="ReplayBuffer"):
        train_test_split([1, 2, 3])
    one = MDPDataset(np.zeros((3, 2), np.float32), np.zeros(3, np.int64), np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError, match="at least 2 episodes"):
        train_test_split(one)
