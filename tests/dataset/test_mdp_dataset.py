"""MDPDataset: building episodes from step-aligned arrays, inference of the
action space, storage layout and input validation."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

import offrl
from offrl import ActionSpace
from offrl.dataset import (
    BasicTransitionPicker,
    Episode,
    MDPDataset,
    TransitionMiniBatch,
)

# ---------------------------------------------------------------- helpers


def _obs(n: int, dim: int = 3) -> np.ndarray:
    """Distinguishable observations: row i holds i, i + 0.25, i + 0.5, ..."""
    return (np.arange(n, dtype=np.float32)[:, None] + 0.25 * np.arange(dim, dtype=np.float32)).astype(
        np.float32
    )


def _all_transitions(ds):
    """Every transition of a buffer, through BufferProtocol indexing and the
    buffer's own picker."""
    return [ds.transition_picker(*ds.buffer[i]) for i in range(ds.transition_count)]


def _flags(n: int, at) -> np.ndarray:
    f = np.zeros(n, dtype=np.float32)
    f[list(at)] = 1.0
    return f


# ------------------------------------------------------ episode splitting

N = 10
TERMINALS = _flags(N, [2])  # episode 0: steps 0..2, terminated
TIMEOUTS = _flags(N, [5])  # episode 1: steps 3..5, timeout
# steps 6..9: a trailing stretch with neither flag -> truncated episode


def _split_dataset(**kwargs):
    obs = _obs(N)
    actions = np.arange(N, dtype=np.float32)[:, None] / 10.0 + np.array([[0.0, 100.0]], dtype=np.float32)
    rewards = np.arange(N, dtype=np.float32) + 1.0
    return MDPDataset(obs, actions, rewards, TERMINALS, TIMEOUTS, **kwargs), obs, actions, rewards


def test_episodes_split_at_terminals_timeouts_and_trailing_stretch():
    ds, obs, actions, rewards = _split_dataset()
    assert ds.size() == 3
    bounds = [(0, 3), (3, 6), (6, 10)]
    expected_terminated = [True, False, False]
    for episode, (s, e), term in zip(ds.episodes, bounds, expected_terminated):
        assert isinstance(episode, Episode)
        np.testing.assert_array_equal(episode.observations, obs[s:e])
        np.testing.assert_array_equal(episode.actions, actions[s:e])
        np.testing.assert_array_equal(episode.rewards, rewards[s:e, None])
        assert episode.terminated is term
        assert episode.final_observation is None
        assert episode.size() == e - s
    # terminated -> size transitions, truncated without next obs -> size - 1
    assert [e.transition_count for e in ds.episodes] == [3, 2, 3]
    assert ds.transition_count == 8
    arrays = ds.to_arrays()
    np.testing.assert_array_equal(arrays["episode_starts"], [0, 3, 6])
    np.testing.assert_array_equal(arrays["episode_ends"], [3, 6, 10])
    np.testing.assert_array_equal(arrays["terminals"], TERMINALS)
    # every episode not terminated ends with a timeout, trailing stretch included
    np.testing.assert_array_equal(arrays["timeouts"], _flags(N, [5, 9]))


def test_one_step_truncated_episode_is_kept_without_a_transition():
    # docs/COMPATIBILITY.md: d3rlpy's buffer lists only episodes with a transition (2 here), offrl keeps the step
    obs = _obs(6)
    terminals = _flags(6, [2])
    timeouts = _flags(6, [3, 5])
    ds = MDPDataset(obs, np.zeros((6, 1), np.float32), np.arange(6, dtype=np.float32), terminals, timeouts)
    assert [e.size() for e in ds.episodes] == [3, 1, 2]
    assert [e.transition_count for e in ds.episodes] == [3, 0, 1]
    assert ds.size() == 3 and ds.transition_count == 4
    np.testing.assert_array_equal(ds.episodes[1].observations, obs[3:4])
    # sampling never reaches it: every sampled row is one of the four transitions
    rows = {float(r) for r in ds.sample_transition_batch(64).rewards[:, 0]}
    assert rows <= {0.0, 1.0, 2.0, 4.0}


def test_transitions_of_split_dataset_exact():
    ds, obs, actions, rewards = _split_dataset()
    transitions = _all_transitions(ds)
    # transition rows: 0,1,2 (terminated), 3,4 (5 has no next obs), 6,7,8
    rows = [0, 1, 2, 3, 4, 6, 7, 8]
    assert len(transitions) == len(rows)
    for tr, r in zip(transitions, rows):
        np.testing.assert_array_equal(tr.observation, obs[r])
        np.testing.assert_array_equal(tr.action, actions[r])
        np.testing.assert_array_equal(tr.reward, [rewards[r]])
        if r == 2:
            assert tr.terminal == 1.0
            np.testing.assert_array_equal(tr.next_observation, np.zeros(3, np.float32))
        else:
            assert tr.terminal == 0.0
            np.testing.assert_array_equal(tr.next_observation, obs[r + 1])


def test_next_observations_make_truncated_last_steps_transitions():
    obs = _obs(N)
    next_obs = obs + 1000.0  # different from obs[t + 1], so we see which is used
    ds = MDPDataset(obs, np.zeros((N, 2), np.float32), np.ones(N), TERMINALS, TIMEOUTS,
                    next_observations=next_obs)
    assert ds.size() == 3
    eps = ds.episodes
    assert [e.size() for e in eps] == [3, 3, 4]
    assert [e.terminated for e in eps] == [True, False, False]
    assert eps[0].final_observation is None
    np.testing.assert_array_equal(eps[1].final_observation, next_obs[5])
    np.testing.assert_array_equal(eps[2].final_observation, next_obs[9])
    for e, (s, t) in zip(eps, [(0, 3), (3, 6), (6, 10)]):
        np.testing.assert_array_equal(e.observations, obs[s:t])
    # size if terminated else size - 1, plus size for truncated episodes given their next obs
    assert [e.transition_count for e in eps] == [3, 3, 4]
    assert ds.transition_count == 10
    transitions = _all_transitions(ds)
    for r, tr in enumerate(transitions):
        np.testing.assert_array_equal(tr.observation, obs[r])
        if r == 2:
            assert tr.terminal == 1.0
            np.testing.assert_array_equal(tr.next_observation, np.zeros(3, np.float32))
        elif r in (5, 9):
            assert tr.terminal == 0.0
            np.testing.assert_array_equal(tr.next_observation, next_obs[r])
        else:
            np.testing.assert_array_equal(tr.next_observation, obs[r + 1])
    # the batch path agrees: every sampled item is one of the transitions above
    offrl.seed(3)
    batch = ds.sample_transition_batch(200)
    rows = batch.observations[:, 0].astype(int)
    for k, r in enumerate(rows):
        tr = transitions[r]
        np.testing.assert_array_equal(batch.next_observations[k], tr.next_observation)
        assert batch.terminals[k, 0] == tr.terminal
    assert set(rows.tolist()) == set(range(10))
    # to_arrays gives the steps, without the stored final-observation rows
    arrays = ds.to_arrays()
    np.testing.assert_array_equal(arrays["observations"], obs)
    np.testing.assert_array_equal(arrays["episode_starts"], [0, 3, 6])
    np.testing.assert_array_equal(arrays["episode_ends"], [3, 6, 10])


def test_last_step_terminal_makes_no_extra_episode():
    ds = MDPDataset(_obs(6), np.zeros((6, 1), np.float32), np.zeros(6), _flags(6, [1, 5]))
    assert ds.size() == 2
    assert [(e.size(), e.terminated) for e in ds.episodes] == [(2, True), (4, True)]
    assert ds.transition_count == 6


def test_no_flags_at_all_is_one_truncated_episode():
    ds = MDPDataset(_obs(5), np.zeros((5, 1), np.float32), np.zeros(5), np.zeros(5))
    assert ds.size() == 1
    (ep,) = ds.episodes
    assert ep.size() == 5 and ep.terminated is False
    assert ds.transition_count == 4


def test_boolean_and_column_flags_accepted():
    terms = np.zeros((N, 1), dtype=bool)
    terms[2, 0] = True
    ds = MDPDataset(_obs(N), np.zeros((N, 2), np.float32), np.zeros((N, 1)), terms, TIMEOUTS.astype(bool))
    assert [(e.size(), e.terminated) for e in ds.episodes] == [(3, True), (3, False), (4, False)]


# ------------------------------------------------- action space inference


def test_int_actions_are_discrete():
    acts = np.array([0, 2, 1, 2, 0, 1], dtype=np.int32)
    ds = MDPDataset(_obs(6), acts, np.zeros(6), _flags(6, [5]))
    assert ds.action_space == ActionSpace.DISCRETE
    assert ds.action_size == 3
    stored = ds.episodes[0].actions
    assert stored.dtype == np.int64 and stored.shape == (6, 1)
    np.testing.assert_array_equal(stored[:, 0], acts)


def test_integer_valued_float_1d_actions_are_discrete():
    acts = np.array([0.0, 4.0, 1.0, 3.0, 0.0, 1.0])
    ds = MDPDataset(_obs(6), acts, np.zeros(6), _flags(6, [5]))
    assert ds.action_space == ActionSpace.DISCRETE
    assert ds.action_size == 5
    np.testing.assert_array_equal(ds.episodes[0].actions[:, 0], [0, 4, 1, 3, 0, 1])
    assert ds.episodes[0].actions.dtype == np.int64


def test_float_1d_non_integer_actions_are_continuous_width_1():
    acts = np.array([0.5, -1.0, 0.25, 2.0, 0.0, 1.0])
    ds = MDPDataset(_obs(6), acts, np.zeros(6), _flags(6, [5]))
    assert ds.action_space == ActionSpace.CONTINUOUS
    assert ds.action_size == 1
    np.testing.assert_array_equal(ds.episodes[0].actions, acts.astype(np.float32)[:, None])


def test_2d_float_actions_are_continuous_even_if_integer_valued():
    acts = np.array([[0.0, 1.0], [1.0, 0.0], [2.0, 3.0], [0.0, 0.0]])
    ds = MDPDataset(_obs(4), acts, np.zeros(4), _flags(4, [3]))
    assert ds.action_space == ActionSpace.CONTINUOUS
    assert ds.action_size == 2
    stored = ds.episodes[0].actions
    assert stored.dtype == np.float32 and stored.shape == (4, 2)
    np.testing.assert_array_equal(stored, acts.astype(np.float32))


def test_given_action_size_respected_for_discrete():
    acts = np.array([0, 1, 1, 0])
    ds = MDPDataset(_obs(4), acts, np.zeros(4), _flags(4, [3]), action_size=6)
    assert ds.action_space == ActionSpace.DISCRETE
    assert ds.action_size == 6


@pytest.mark.parametrize("space", [ActionSpace.CONTINUOUS, "continuous", "CONTINUOUS", 1])
def test_given_continuous_action_space_overrides_integer_actions(space):
    acts = np.array([0, 1, 2, 1])
    ds = MDPDataset(_obs(4), acts, np.zeros(4), _flags(4, [3]), action_space=space)
    assert ds.action_space == ActionSpace.CONTINUOUS
    assert ds.action_size == 1
    stored = ds.episodes[0].actions
    assert stored.dtype == np.float32
    np.testing.assert_array_equal(stored[:, 0], [0.0, 1.0, 2.0, 1.0])


def test_given_discrete_action_space_and_size():
    acts = np.array([[0.0], [1.0], [1.0], [0.0]])
    ds = MDPDataset(_obs(4), acts, np.zeros(4), _flags(4, [3]), action_space="discrete", action_size=4)
    assert ds.action_space == ActionSpace.DISCRETE
    assert ds.action_size == 4
    assert ds.dataset_info.action_signature.dtype == [np.dtype(np.int64)]


def test_action_space_both_is_rejected():
    with pytest.raises(ValueError, match="BOTH"):
        MDPDataset(_obs(4), np.zeros(4, np.int64), np.zeros(4), np.zeros(4), action_space=ActionSpace.BOTH)


# ------------------------------------------------ views, returns, size


def test_episode_views_share_memory_with_store():
    ds, _, _, _ = _split_dataset()
    store = ds.buffer
    for episode in ds.episodes:
        assert np.shares_memory(episode.observations, store.observations[0])
        assert np.shares_memory(episode.actions, store.actions)
        assert np.shares_memory(episode.rewards, store.rewards)
    # views: a write through the store shows in an episode taken before
    ep = ds.episodes[1]
    store.rewards[3, 0] = 77.0
    assert ep.rewards[0, 0] == 77.0


def test_compute_return_and_size():
    ds, _, _, rewards = _split_dataset()
    # rewards are 1..10
    assert [e.compute_return() for e in ds.episodes] == [6.0, 15.0, 34.0]
    assert all(isinstance(e.compute_return(), float) for e in ds.episodes)
    np.testing.assert_array_equal(ds.compute_returns(), [6.0, 15.0, 34.0])
    assert ds.size() == 3
    assert len(ds.episodes) == 3
    assert ds.episodes[-1].size() == 4


def test_summary_and_repr_exact():
    ds, _, _, _ = _split_dataset()
    s = ds.summary()
    assert s["episodes"] == 3
    assert s["terminated_episodes"] == 1
    assert s["transitions"] == 8
    assert s["steps"] == 10
    assert s["action_space"] == ActionSpace.CONTINUOUS
    assert s["action_size"] == 2
    assert s["episode_return"]["min"] == 6.0
    assert s["episode_return"]["max"] == 34.0
    assert s["episode_return"]["mean"] == pytest.approx((6 + 15 + 34) / 3)
    assert s["episode_length"]["min"] == 3.0 and s["episode_length"]["max"] == 4.0
    text = repr(ds)
    assert "3 episodes" in text
    assert "1 terminated, 2 truncated" in text
    assert "8 transitions" in text
    assert "10 steps" in text


def test_to_arrays_round_trips_through_mdp_dataset():
    ds, _, _, _ = _split_dataset()
    a = ds.to_arrays()
    again = MDPDataset(a["observations"], a["actions"], a["rewards"], a["terminals"], a["timeouts"])
    assert again.size() == ds.size()
    assert again.transition_count == ds.transition_count
    for x, y in zip(ds.episodes, again.episodes):
        np.testing.assert_array_equal(x.observations, y.observations)
        np.testing.assert_array_equal(x.actions, y.actions)
        np.testing.assert_array_equal(x.rewards, y.rewards)
        assert x.terminated == y.terminated


# ---------------------------------------------------- tuple observations


def _tuple_data(n=12):
    img = (np.arange(n * 2 * 3 * 3) % 251).astype(np.uint8).reshape(n, 2, 3, 3)
    vec = np.arange(n * 4, dtype=np.float64).reshape(n, 4) / 8.0
    terms = _flags(n, [4])
    timeouts = _flags(n, [8])
    acts = np.arange(n) % 3
    rewards = np.arange(n, dtype=np.float32)
    return img, vec, acts, rewards, terms, timeouts


def test_tuple_observations_end_to_end():
    img, vec, acts, rewards, terms, timeouts = _tuple_data()
    ds = MDPDataset([img, vec], acts, rewards, terms, timeouts)
    assert ds.size() == 3
    sig = ds.dataset_info.observation_signature
    assert sig.dtype == [np.dtype(np.uint8), np.dtype(np.float32)]
    assert sig.shape == [(2, 3, 3), (4,)]
    ep = ds.episodes[1]
    assert isinstance(ep.observations, list) and len(ep.observations) == 2
    np.testing.assert_array_equal(ep.observations[0], img[5:9])
    np.testing.assert_array_equal(ep.observations[1], vec[5:9].astype(np.float32))
    assert ep.observations[0].dtype == np.uint8
    # transitions: 5 (terminated) + 3 + 2
    assert ds.transition_count == 10
    offrl.seed(0)
    batch = ds.sample_transition_batch(64)
    assert isinstance(batch, TransitionMiniBatch)
    obs_img, obs_vec = batch.observations
    nxt_img, nxt_vec = batch.next_observations
    assert obs_img.shape == (64, 2, 3, 3) and obs_img.dtype == np.uint8
    assert obs_vec.shape == (64, 4) and obs_vec.dtype == np.float32
    rows = (obs_vec[:, 0] * 2).astype(int)  # vec[r, 0] = r / 2
    for k, r in enumerate(rows):
        np.testing.assert_array_equal(obs_img[k], img[r])
        assert batch.actions[k, 0] == acts[r]
        assert batch.rewards[k, 0] == rewards[r]
        if r == 4:
            assert batch.terminals[k, 0] == 1.0
            assert not nxt_img[k].any() and not nxt_vec[k].any()
        else:
            assert batch.terminals[k, 0] == 0.0
            np.testing.assert_array_equal(nxt_img[k], img[r + 1])
            np.testing.assert_array_equal(nxt_vec[k], vec[r + 1].astype(np.float32))
    assert 8 not in rows and 11 not in rows  # last steps of truncated episodes
    traj = ds.sample_trajectory_batch(4, 3)
    assert traj.observations[0].shape == (4, 3, 2, 3, 3)
    assert traj.observations[1].shape == (4, 3, 4)


def test_tuple_observations_given_as_tuple():
    img, vec, acts, rewards, terms, timeouts = _tuple_data()
    ds = MDPDataset((img, vec), acts, rewards, terms, timeouts)
    assert len(ds.dataset_info.observation_signature) == 2


# ---------------------------------------------------------------- memory


def _store_bytes(ds) -> int:
    store = ds.buffer
    total = sum(o.nbytes for o in store.observations) + store.actions.nbytes + store.rewards.nbytes
    return total + sum(a.nbytes for a in store.episode_table())


def test_stored_bytes_within_1_2x_of_float32_input():
    n, dim, adim = 20_000, 32, 4
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((n, dim)).astype(np.float32)
    acts = rng.standard_normal((n, adim)).astype(np.float32)
    rewards = rng.standard_normal(n).astype(np.float32)
    terms = np.zeros(n, np.float32)
    terms[999::1000] = 1
    input_bytes = obs.nbytes + acts.nbytes + rewards.nbytes + terms.nbytes
    ds = MDPDataset(obs, acts, rewards, terms)
    assert ds.size() == 20
    assert _store_bytes(ds) <= 1.2 * input_bytes


def test_memory_retained_from_float64_input_within_1_2x_of_float32_size():
    n, dim, adim = 20_000, 32, 4
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((n, dim))
    acts = rng.standard_normal((n, adim))
    rewards = rng.standard_normal(n)
    terms = np.zeros(n)
    terms[999::1000] = 1
    float32_bytes = (obs.nbytes + acts.nbytes + rewards.nbytes + terms.nbytes) // 2
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        ds = MDPDataset(obs, acts, rewards, terms)
        retained = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert ds.transition_count == n
    assert _store_bytes(ds) <= 1.2 * float32_bytes
    assert retained <= 1.2 * float32_bytes


# ------------------------------------------------------------ bad inputs

M = 1000


def _good(m=M):
    return dict(
        observations=_obs(m, 3),
        actions=np.zeros((m, 2), np.float32),
        rewards=np.zeros(m, np.float32),
        terminals=_flags(m, [m - 1]),
    )


def _with(bad_field, value, m=M, **extra):
    kw = _good(m)
    kw[bad_field] = value
    kw.update(extra)
    return kw


@pytest.mark.parametrize(
    "field,length",
    [("actions", M - 1), ("rewards", M + 1), ("terminals", M - 1), ("timeouts", M + 3)],
)
def test_columns_of_different_lengths(field, length):
    if field == "actions":
        value = np.zeros((length, 2), np.float32)
    else:
        value = np.zeros(length, np.float32)
    kw = _with(field, value)
    with pytest.raises(ValueError, match=rf"{field} has {length} rows, observations has {M}"):
        MDPDataset(**kw)


def test_tuple_observation_elements_of_different_lengths():
    with pytest.raises(ValueError, match=r"observations\[1\] has 999 rows"):
        MDPDataset(**_with("observations", [_obs(M), _obs(M - 1)]))


def test_next_observations_of_different_length():
    with pytest.raises(ValueError, match="next_observations"):
        MDPDataset(**_good(), next_observations=_obs(M - 1))


def _bad(array, rows, value):
    array = array.copy()
    for r in rows:
        array[r] = value
    return array


@pytest.mark.parametrize("value,kind", [(np.nan, "nan"), (np.inf, "inf"), (-np.inf, "inf")])
def test_non_finite_observations(value, kind):
    obs = _obs(M)
    obs[512, 1] = value
    obs[700, 0] = value
    with pytest.raises(ValueError, match=rf"observations\[512\] is {kind}"):
        MDPDataset(**_with("observations", obs))


@pytest.mark.parametrize("value,kind", [(np.nan, "nan"), (np.inf, "inf")])
def test_non_finite_actions(value, kind):
    acts = np.zeros((M, 2), np.float32)
    acts[512, 1] = value
    acts[600, 0] = value
    with pytest.raises(ValueError, match=rf"actions\[512\] is {kind}"):
        MDPDataset(**_with("actions", acts))


def test_non_finite_1d_actions():
    acts = np.linspace(-1, 1, M)
    acts[512] = np.nan
    with pytest.raises(ValueError, match=r"actions\[512\] is nan"):
        MDPDataset(**_with("actions", acts))


def test_nan_discrete_actions():
    acts = np.zeros(M)
    acts[512] = np.nan
    with pytest.raises(ValueError, match=r"actions\[512\] is nan"):
        MDPDataset(**_with("actions", acts), action_space="discrete")


@pytest.mark.parametrize("value,kind", [(np.nan, "nan"), (np.inf, "inf")])
def test_non_finite_rewards(value, kind):
    rewards = _bad(np.zeros(M, np.float32), [512, 513], value)
    with pytest.raises(ValueError, match=rf"rewards\[512\] is {kind}"):
        MDPDataset(**_with("rewards", rewards))


@pytest.mark.parametrize("element", [0, 1])
def test_non_finite_within_tuple_observation_element(element):
    parts = [_obs(M, 2), _obs(M, 5)]
    parts[element][512, -1] = np.nan
    parts[element][900, 0] = np.inf
    with pytest.raises(ValueError, match=rf"observations\[{element}\]\[512\] is nan"):
        MDPDataset(**_with("observations", parts))


def test_non_finite_next_observations():
    nxt = _obs(M)
    nxt[512, 0] = np.nan
    with pytest.raises(ValueError, match=r"next_observations\[512\] is nan"):
        MDPDataset(**_good(), next_observations=nxt)


@pytest.mark.parametrize("field", ["terminals", "timeouts"])
@pytest.mark.parametrize("value", [2.0, -1.0, 0.5, np.nan])
def test_flags_not_0_or_1(field, value):
    flags = np.zeros(M, np.float32)
    flags[512] = value
    flags[800] = 3.0
    kw = _good()
    kw["terminals"] = np.zeros(M, np.float32)
    kw[field] = flags
    with pytest.raises(ValueError, match=rf"{field}\[512\] is .*expected 0 or 1"):
        MDPDataset(**kw)


def test_step_flagged_both_terminal_and_timeout():
    terms = _flags(M, [100, 512, 900])
    timeouts = _flags(M, [200, 512, 900])
    with pytest.raises(ValueError, match=r"step 512 .*terminals\[512\] and timeouts\[512\]"):
        MDPDataset(**_with("terminals", terms, timeouts=timeouts))


def test_continuous_actions_wrong_width():
    with pytest.raises(ValueError, match=r"actions has width 3, expected action_size=2"):
        MDPDataset(**_with("actions", np.zeros((M, 3), np.float32)), action_size=2)


def test_discrete_actions_negative():
    acts = np.zeros(M, np.int64)
    acts[512] = -1
    acts[513] = -5
    with pytest.raises(ValueError, match=r"actions\[512\] is (np\.int64\()?-1\)?, expected a non-negative"):
        MDPDataset(**_with("actions", acts))


def test_discrete_float_actions_negative_when_space_given():
    acts = np.zeros(M)
    acts[512] = -2.0
    with pytest.raises(ValueError, match=r"actions\[512\]"):
        MDPDataset(**_with("actions", acts), action_space="discrete")


def test_discrete_actions_non_integer():
    acts = np.zeros(M)
    acts[512] = 0.5
    acts[777] = 1.5
    with pytest.raises(ValueError, match=r"actions\[512\] is (np\.float64\()?0\.5\)?, expected an integer"):
        MDPDataset(**_with("actions", acts), action_space="discrete")


def test_discrete_actions_not_below_action_size():
    acts = np.zeros(M, np.int64)
    acts[512] = 4
    acts[513] = 9
    with pytest.raises(ValueError, match=r"actions\[512\] is 4, expected an index below action_size=4"):
        MDPDataset(**_with("actions", acts), action_size=4)


def test_discrete_2d_wide_actions_rejected():
    with pytest.raises(ValueError, match="discrete actions"):
        MDPDataset(**_with("actions", np.zeros((M, 2), np.int64)), action_space="discrete")


@pytest.mark.parametrize("bad", [0, -3])
def test_action_size_not_positive(bad):
    with pytest.raises(ValueError, match="action_size"):
        MDPDataset(**_good(), action_size=bad)


def test_empty_dataset():
    with pytest.raises(ValueError, match="empty"):
        MDPDataset(np.zeros((0, 3), np.float32), np.zeros((0, 2), np.float32), np.zeros(0), np.zeros(0))


def test_non_numeric_observations():
    with pytest.raises(TypeError, match="observations"):
        MDPDataset(**_with("observations", np.array(["a"] * M)))


def test_ragged_observations():
    ragged = [np.zeros(3), np.zeros(2)]
    with pytest.raises((TypeError, ValueError), match="observations"):
        MDPDataset(ragged, np.zeros((2, 1)), np.zeros(2), np.zeros(2))


@pytest.mark.parametrize("batch_size", [0, -1])
def test_batch_size_not_positive(batch_size):
    ds = MDPDataset(**_good(50))
    with pytest.raises(ValueError, match=rf"batch_size must be > 0, got {batch_size}"):
        ds.sample_transition_batch(batch_size)
    with pytest.raises(ValueError, match=rf"batch_size must be > 0, got {batch_size}"):
        ds.sample_trajectory_batch(batch_size, 4)


def test_batch_size_not_int():
    ds = MDPDataset(**_good(50))
    with pytest.raises(TypeError, match="batch_size"):
        ds.sample_transition_batch(2.5)


@pytest.mark.parametrize("length", [0, -2])
def test_trajectory_length_not_positive(length):
    ds = MDPDataset(**_good(50))
    with pytest.raises(ValueError, match=rf"length must be > 0, got {length}"):
        ds.sample_trajectory(length)
    with pytest.raises(ValueError, match=rf"length must be > 0, got {length}"):
        ds.sample_trajectory_batch(8, length)


def test_sampling_from_empty_buffer():
    rb = offrl.dataset.create_infinite_replay_buffer()
    for call in (
        lambda: rb.sample_transition(),
        lambda: rb.sample_transition_batch(4),
        lambda: rb.sample_trajectory(3),
        lambda: rb.sample_trajectory_batch(4, 3),
    ):
        with pytest.raises(ValueError, match="empty buffer"):
            call()


def test_sampling_transitions_from_dataset_without_transitions():
    # three single-step truncated episodes: steps but no (s, a, r, s') transitions
    ds = MDPDataset(_obs(3), np.zeros((3, 1), np.float32), np.zeros(3), np.zeros(3), timeouts=np.ones(3))
    assert ds.transition_count == 0
    with pytest.raises(ValueError, match="empty buffer"):
        ds.sample_transition_batch(2)
    # trajectories only need steps
    traj = ds.sample_trajectory_batch(2, 2)
    np.testing.assert_array_equal(traj.masks, [[0.0, 1.0], [0.0, 1.0]])


def test_single_transition_picker_agrees_with_batch():
    ds, obs, actions, rewards = _split_dataset()
    picker = BasicTransitionPicker()
    ep = ds.episodes[0]
    tr = picker(ep, 1)
    np.testing.assert_array_equal(tr.observation, obs[1])
    np.testing.assert_array_equal(tr.next_observation, obs[2])
    np.testing.assert_array_equal(tr.next_action, actions[2])


# ------------------------------------------------ hostile values (issue 15)
def _arrays(n: int = 4) -> dict:
    return dict(
        observations=np.zeros((n, 2)), actions=np.zeros((n, 1)), rewards=np.zeros(n),
        terminals=np.array([0] * (n - 1) + [1]),
    )


@pytest.mark.parametrize("field", ["observations", "actions", "rewards", "behaviour_probabilities"])
def test_complex_values_are_refused_naming_the_field(field):
    kwargs = _arrays()
    base = kwargs.get(field, np.full(4, 0.5))
    kwargs[field] = base.astype(np.complex128) + 1j
    with pytest.raises(TypeError, match=rf"^{field} must hold real numbers, got complex dtype complex128"):
        MDPDataset(**kwargs)


def test_complex_tuple_element_is_refused_naming_its_position():
    kwargs = _arrays()
    kwargs["observations"] = [np.zeros((4, 2)), np.zeros((4, 3), dtype=np.complex64)]
    with pytest.raises(TypeError, match=r"observations\[1\] must hold real numbers"):
        MDPDataset(**kwargs)


@pytest.mark.parametrize("field", ["observations", "rewards", "actions"])
def test_float64_beyond_float32_range_is_refused_at_the_first_bad_row(field):
    kwargs = _arrays()
    values = np.zeros_like(kwargs[field], dtype=np.float64)
    values[2] = -1e39
    values[3] = 1e300
    kwargs[field] = values
    kwargs["action_space"] = ActionSpace.CONTINUOUS
    with pytest.raises(ValueError, match=rf"^{field}\[2\] is -1e\+39, outside float32's range"):
        MDPDataset(**kwargs)


def test_float32_max_itself_is_kept_exactly():
    kwargs = _arrays()
    big = float(np.finfo(np.float32).max)
    kwargs["rewards"] = np.array([big, -big, 0.0, 1.0])
    dataset = MDPDataset(**kwargs)
    assert dataset.episodes[0].rewards[:, 0].tolist() == [np.float32(big), np.float32(-big), 0.0, 1.0]


def test_discrete_action_too_large_for_int64_is_refused():
    kwargs = _arrays()
    kwargs["actions"] = np.array([0.0, 1.0, 1e300, 2.0])
    with pytest.raises(ValueError, match=r"^actions\[2\] is 1e\+300, too large for an action index"):
        MDPDataset(**kwargs)
