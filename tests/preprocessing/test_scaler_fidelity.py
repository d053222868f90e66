"""Scalers against d3rlpy 2.8.1's public behaviour: the three ways of
fitting, serialize/deserialize, reverse transforms of reward scalers and
statistics as numpy values. The expected numbers below are worked out by
hand (and are what d3rlpy 2.8.1 gives for the same episodes)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from offrl.dataset import (
    BasicTrajectorySlicer,
    BasicTransitionPicker,
    Episode,
    FrameStackTransitionPicker,
    MDPDataset,
)
from offrl.preprocessing import (
    ClipRewardScaler,
    ConstantShiftRewardScaler,
    MinMaxActionScaler,
    MinMaxObservationScaler,
    MinMaxRewardScaler,
    MultiplyRewardScaler,
    PixelObservationScaler,
    ReturnBasedRewardScaler,
    StandardObservationScaler,
    StandardRewardScaler,
    TupleObservationScaler,
)


def _episodes():
    """A truncated episode of 4 steps (3 transitions) and a terminated one of 3."""
    return [
        Episode(observations=np.arange(8, dtype=np.float32).reshape(4, 2),
                actions=np.array([[0.5], [1.0], [2.0], [-1.0]], dtype=np.float32),
                rewards=np.array([[1.0], [2.0], [3.0], [4.0]], dtype=np.float32), terminated=False),
        Episode(observations=np.arange(8, 14, dtype=np.float32).reshape(3, 2),
                actions=np.array([[3.0], [1.0], [2.0]], dtype=np.float32),
                rewards=np.array([[10.0], [0.0], [0.0]], dtype=np.float32), terminated=True),
    ]


class _UserPicker:
    """A picker written to d3rlpy's contract (no offrl base class): it
    fails on the last step of an episode that did not terminate."""

    def __init__(self) -> None:
        self.calls = []

    def __call__(self, episode, index):
        self.calls.append(index)
        if not episode.terminated and index >= episode.size() - 1:
            raise IndexError(f"index {index} has no next observation")
        return BasicTransitionPicker()(episode, index)


class _UserSlicer:
    def __call__(self, episode, end_index, size):
        return BasicTrajectorySlicer()(episode, end_index, size)


# ------------------------------------------------------------------ fitting
def test_fit_with_transition_picker_exact_values():
    episodes = _episodes()
    picker = BasicTransitionPicker()
    # transitions: observations [0,1] [2,3] [4,5] | [8,9] [10,11] [12,13]
    s = StandardObservationScaler().fit_with_transition_picker(episodes, picker)
    np.testing.assert_array_equal(s.mean, [6.0, 7.0])
    np.testing.assert_allclose(s.std, np.sqrt([112 / 6, 112 / 6]), rtol=1e-12)
    m = MinMaxObservationScaler().fit_with_transition_picker(episodes, picker)
    np.testing.assert_array_equal(m.minimum, [0.0, 1.0])
    np.testing.assert_array_equal(m.maximum, [12.0, 13.0])
    a = MinMaxActionScaler().fit_with_transition_picker(episodes, picker)
    np.testing.assert_array_equal(a.minimum, [0.5])  # the -1.0 of the truncated last step is no transition
    np.testing.assert_array_equal(a.maximum, [3.0])
    r = StandardRewardScaler().fit_with_transition_picker(episodes, picker)  # rewards 1 2 3 10 0 0
    assert r.mean == pytest.approx(16 / 6, rel=1e-12)
    assert r.std == pytest.approx(np.std([1, 2, 3, 10, 0, 0]), rel=1e-12)
    mm = MinMaxRewardScaler().fit_with_transition_picker(episodes, picker)
    assert (mm.minimum, mm.maximum) == (0.0, 10.0)
    rb = ReturnBasedRewardScaler().fit_with_transition_picker(episodes, picker)
    assert (rb.return_max, rb.return_min) == (10.0, 6.0)  # 1+2+3 and 10+0+0


def test_fit_with_trajectory_slicer_exact_values():
    episodes = _episodes()
    slicer = BasicTrajectorySlicer()
    s = StandardObservationScaler().fit_with_trajectory_slicer(episodes, slicer)  # every step: 0..12 by 2
    np.testing.assert_array_equal(s.mean, [6.0, 7.0])
    np.testing.assert_array_equal(s.std, [4.0, 4.0])
    a = MinMaxActionScaler().fit_with_trajectory_slicer(episodes, slicer)
    np.testing.assert_array_equal(a.minimum, [-1.0])
    np.testing.assert_array_equal(a.maximum, [3.0])
    # d3rlpy 2.8.1 fails on episodes of different lengths here; offrl pools the steps
    mm = MinMaxRewardScaler().fit_with_trajectory_slicer(episodes, slicer)
    assert (mm.minimum, mm.maximum) == (0.0, 10.0)
    r = StandardRewardScaler().fit_with_trajectory_slicer(episodes, slicer)
    assert r.mean == pytest.approx(20 / 7, rel=1e-12)
    rb = ReturnBasedRewardScaler().fit_with_trajectory_slicer(episodes, slicer)
    assert (rb.return_max, rb.return_min) == (10.0, 10.0)


def test_user_picker_and_slicer_match_the_built_in_ones_and_get_d3rlpy_indices():
    episodes = _episodes()
    episodes[0] = Episode(episodes[0].observations, episodes[0].actions, episodes[0].rewards, terminated=False,
                          final_observation=np.array([100.0, 100.0], dtype=np.float32))
    picker = _UserPicker()
    user = StandardObservationScaler().fit_with_transition_picker(episodes, picker)
    assert picker.calls == [0, 1, 2, 0, 1, 2]  # never index 3 of the truncated episode
    plain = _episodes()  # without the final observation the built-in picker sees the same transitions
    built_in = StandardObservationScaler().fit_with_transition_picker(plain, BasicTransitionPicker())
    np.testing.assert_array_equal(user.mean, built_in.mean)
    np.testing.assert_array_equal(user.std, built_in.std)
    for cls in (StandardObservationScaler, MinMaxObservationScaler, MinMaxActionScaler, StandardRewardScaler,
                MinMaxRewardScaler, ReturnBasedRewardScaler):
        a = cls().fit_with_trajectory_slicer(plain, _UserSlicer())
        b = cls().fit_with_trajectory_slicer(plain, BasicTrajectorySlicer())
        assert a == b, cls.__name__


def test_built_in_picker_uses_the_stored_final_observation_step():
    episodes = _episodes()
    episodes[0] = Episode(episodes[0].observations, episodes[0].actions, episodes[0].rewards, terminated=False,
                          final_observation=np.array([100.0, 100.0], dtype=np.float32))
    a = MinMaxActionScaler().fit_with_transition_picker(episodes, BasicTransitionPicker())
    np.testing.assert_array_equal(a.minimum, [-1.0])  # offrl's 4th transition of the truncated episode


def _dataset(terminal_every: int = 5) -> MDPDataset:
    rng = np.random.default_rng(3)
    n = 40
    terminals = np.zeros(n)
    terminals[terminal_every - 1::terminal_every] = 1.0
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32) * [1.0, 4.0, 0.5],
                      rng.uniform(-2, 2, size=(n, 2)).astype(np.float32),
                      rng.normal(size=n).astype(np.float32), terminals)


_FITTED = (StandardObservationScaler, MinMaxObservationScaler, MinMaxActionScaler, StandardRewardScaler,
           MinMaxRewardScaler, ReturnBasedRewardScaler)


@pytest.mark.parametrize("cls", _FITTED)
def test_every_way_of_fitting_agrees_on_a_dataset_of_terminated_episodes(cls):
    dataset = _dataset()
    reference = cls().fit(dataset)
    assert cls().fit_with_transition_picker(dataset.episodes, dataset.transition_picker) == reference
    assert cls().fit_with_trajectory_slicer(dataset.episodes, dataset.trajectory_slicer) == reference
    assert cls().fit_with_transition_picker(dataset.episodes, _UserPicker()) == reference


def test_fit_on_a_dataset_is_every_step_as_the_slicer():
    dataset = MDPDataset(np.arange(12, dtype=np.float32).reshape(6, 2), np.arange(6, dtype=np.float32)[:, None] + 0.5,
                         np.arange(6, dtype=np.float32), np.zeros(6), timeouts=np.r_[0, 0, 1, 0, 0, 1])
    for cls in _FITTED:
        assert cls().fit(dataset) == cls().fit_with_trajectory_slicer(dataset.episodes, BasicTrajectorySlicer())
    picked = StandardRewardScaler().fit_with_transition_picker(dataset.episodes, dataset.transition_picker)
    assert picked.mean == pytest.approx(np.mean([0, 1, 3, 4]), rel=1e-12)  # the timed-out last steps are no transitions


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 6), st.booleans()), min_size=1, max_size=5), st.integers(0, 2**31 - 1),
       st.sampled_from([1, 2, 3, 7, 65536]), st.booleans())
def test_vectorised_picker_fit_matches_a_naive_loop(shapes, seed, chunk_rows, user_picker):
    """Chunked summaries (merged pairwise) equal the statistics of a naive
    loop over the transitions, for the built-in picker and a user's."""
    from offrl.preprocessing import _fitting

    saved = _fitting.CHUNK_ROWS
    _fitting.CHUNK_ROWS = chunk_rows
    try:
        _check_picker_fit_against_a_loop(shapes, seed, _UserPicker() if user_picker else BasicTransitionPicker())
    finally:
        _fitting.CHUNK_ROWS = saved


def _check_picker_fit_against_a_loop(shapes, seed, picker):
    rng = np.random.default_rng(seed)
    episodes = [Episode(rng.normal(size=(n, 2)).astype(np.float32), rng.normal(size=(n, 1)).astype(np.float32),
                        rng.normal(size=(n, 1)).astype(np.float32), terminated) for n, terminated in shapes]
    observations, actions, rewards, returns = [], [], [], []
    for episode in episodes:
        count = episode.size() if episode.terminated else episode.size() - 1
        if count:
            returns.append(sum(float(episode.rewards[i, 0]) for i in range(count)))
        else:
            returns.append(0.0)
        for i in range(count):
            observations.append(episode.observations[i].astype(np.float64))
            actions.append(episode.actions[i].astype(np.float64))
            rewards.append(float(episode.rewards[i, 0]))
    if not observations:
        with pytest.raises(ValueError, match="no transitions"):
            StandardObservationScaler().fit_with_transition_picker(episodes, picker)
        return
    s = StandardObservationScaler().fit_with_transition_picker(episodes, picker)
    n = len(observations)
    mean = sum(observations) / n
    std = np.sqrt(sum((o - mean) ** 2 for o in observations) / n)
    np.testing.assert_allclose(s.mean, mean, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s.std, std, rtol=1e-9, atol=1e-12)
    a = MinMaxActionScaler().fit_with_transition_picker(episodes, picker)
    np.testing.assert_array_equal(a.minimum, np.min(actions, axis=0))
    np.testing.assert_array_equal(a.maximum, np.max(actions, axis=0))
    r = MinMaxRewardScaler().fit_with_transition_picker(episodes, picker)
    assert (r.minimum, r.maximum) == (min(rewards), max(rewards))
    rb = ReturnBasedRewardScaler().fit_with_transition_picker(episodes, picker)
    assert rb.return_max == pytest.approx(max(returns), rel=1e-9, abs=1e-12)
    assert rb.return_min == pytest.approx(min(returns), rel=1e-9, abs=1e-12)


def test_frame_stacking_picker_fits_on_stacked_observations():
    frames = np.arange(5, dtype=np.float32).reshape(5, 1, 1, 1)
    episode = Episode(frames, np.zeros((5, 1), np.float32), np.zeros((5, 1), np.float32), terminated=True)
    s = MinMaxObservationScaler().fit_with_transition_picker([episode], FrameStackTransitionPicker(n_frames=2))
    assert s.minimum.shape == (2, 1, 1)
    np.testing.assert_array_equal(s.minimum.reshape(-1), [0.0, 0.0])  # the first frame is padded with zeros
    np.testing.assert_array_equal(s.maximum.reshape(-1), [3.0, 4.0])


def test_tuple_scaler_fits_each_element_with_a_picker_and_a_slicer():
    rng = np.random.default_rng(0)
    vec = rng.normal(size=(6, 2)).astype(np.float32)
    img = rng.integers(0, 256, size=(6, 1, 2, 2)).astype(np.uint8)
    episode = Episode([vec, img], np.zeros((6, 1), np.float32), np.zeros((6, 1), np.float32), terminated=False)
    picked = TupleObservationScaler([StandardObservationScaler(), PixelObservationScaler()])
    picked.fit_with_transition_picker([episode], BasicTransitionPicker())
    np.testing.assert_allclose(picked.observation_scalers[0].mean, vec[:5].astype(np.float64).mean(0), rtol=1e-12)
    sliced = TupleObservationScaler([MinMaxObservationScaler(), None])
    sliced.fit_with_trajectory_slicer([episode], BasicTrajectorySlicer())
    np.testing.assert_array_equal(sliced.observation_scalers[0].maximum, vec.max(0))
    user = TupleObservationScaler([StandardObservationScaler(), PixelObservationScaler()])
    user.fit_with_transition_picker([episode], _UserPicker())
    assert user == picked


def test_fitting_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match="episodes is empty"):
        StandardObservationScaler().fit_with_transition_picker([], BasicTransitionPicker())
    with pytest.raises(TypeError, match="transition_picker must be callable"):
        StandardObservationScaler().fit_with_transition_picker(_episodes(), 3)
    with pytest.raises(TypeError, match=r"episodes\[1\]"):
        StandardObservationScaler().fit_with_trajectory_slicer([_episodes()[0], "x"], BasicTrajectorySlicer())
    one_step = Episode(np.zeros((1, 2), np.float32), np.zeros((1, 1), np.float32), np.zeros((1, 1), np.float32), False)
    with pytest.raises(ValueError, match="no transitions"):
        MinMaxObservationScaler().fit_with_transition_picker([one_step], BasicTransitionPicker())
    with pytest.raises(ValueError, match="TupleObservationScaler"):
        StandardObservationScaler().fit_with_transition_picker(
            [Episode([np.zeros((3, 2)), np.zeros((3, 1))], np.zeros((3, 1)), np.zeros((3, 1)), True)],
            BasicTransitionPicker())


def test_refitting_replaces_the_statistics():
    s = MinMaxObservationScaler(minimum=[-100.0, -100.0], maximum=[100.0, 100.0])
    s.fit_with_transition_picker(_episodes(), BasicTransitionPicker())
    np.testing.assert_array_equal(s.maximum, [12.0, 13.0])
    np.testing.assert_array_equal(s.transform(torch.tensor([[12.0, 13.0]])).numpy(), [[1.0, 1.0]])


# --------------------------------------------------------------- from envs
class _Box:
    def __init__(self, low, high):
        self.low, self.high = np.asarray(low), np.asarray(high)


class _Env:
    def __init__(self, observation_space, action_space=None):
        self.observation_space, self.action_space = observation_space, action_space


def test_fit_with_env_as_d3rlpy():
    env = _Env(_Box([-1.0, 0.0], [1.0, 5.0]), _Box([-2.0], [2.0]))
    m = MinMaxObservationScaler().fit_with_env(env)
    np.testing.assert_array_equal(m.minimum, [-1.0, 0.0])
    np.testing.assert_array_equal(MinMaxActionScaler().fit_with_env(env).maximum, [2.0])
    assert PixelObservationScaler().fit_with_env(env).built
    for scaler in (StandardRewardScaler(), MinMaxRewardScaler(), ReturnBasedRewardScaler()):
        assert not scaler.fit_with_env(env).built  # d3rlpy: reward scalers ignore the environment
    # d3rlpy raises NotImplementedError; offrl's error is also a ValueError
    with pytest.raises(NotImplementedError, match="StandardObservationScaler"):
        StandardObservationScaler().fit_with_env(env)
    with pytest.raises(ValueError, match="unbounded"):
        MinMaxObservationScaler().fit_with_env(_Env(_Box([-np.inf], [np.inf])))
    with pytest.raises(ValueError, match="Box"):
        MinMaxActionScaler().fit_with_env(_Env(None, object()))


def test_tuple_scaler_fits_from_a_tuple_space():
    class _Tuple:
        spaces = (_Box([0.0], [2.0]), _Box([0], [255]))

    s = TupleObservationScaler([MinMaxObservationScaler(), PixelObservationScaler()]).fit_with_env(_Env(_Tuple()))
    np.testing.assert_array_equal(s.observation_scalers[0].maximum, [2.0])
    with pytest.raises(NotImplementedError, match="Tuple observation space"):
        TupleObservationScaler([MinMaxObservationScaler()]).fit_with_env(_Env(_Box([0.0], [1.0])))


# ------------------------------------------------------- statistics types
def test_statistics_are_numpy_arrays_and_floats():
    s = StandardObservationScaler(mean=[1, 2], std=np.array([3.0, 4.0], dtype=np.float32))
    assert isinstance(s.mean, np.ndarray) and s.mean.dtype == np.float64
    np.testing.assert_array_equal(s.std, [3.0, 4.0])
    s.mean = torch.tensor([5.0, 6.0])  # a tensor (as a model file holds) is stored as numpy too
    assert isinstance(s.mean, np.ndarray)
    np.testing.assert_array_equal(s.transform(torch.tensor([[5.0, 6.0]])).numpy(), [[0.0, 0.0]])
    r = MinMaxRewardScaler(minimum=np.float32(1.0), maximum=3)
    assert type(r.minimum) is np.float64 and isinstance(r.maximum, float) and r.maximum == 3.0
    with pytest.raises(ValueError, match=r"MinMaxRewardScaler.minimum must be a single number"):
        MinMaxRewardScaler(minimum=[1.0, 2.0], maximum=3.0)
    with pytest.raises(ValueError, match=r"StandardObservationScaler.mean holds nan or inf \(at index \(1,\)\)"):
        StandardObservationScaler(mean=[0.0, np.inf], std=[1.0, 1.0])
    with pytest.raises(TypeError, match="StandardObservationScaler.mean must be an array of numbers"):
        StandardObservationScaler(mean=["a"], std=[1.0])


def test_state_dict_round_trip_and_float32_state_from_older_files():
    s = StandardObservationScaler(mean=[0.1, 0.2], std=[1.0, 3.0])
    state = s.state_dict()
    assert set(state) == {"mean", "std"} and state["mean"].dtype == torch.float64
    t = StandardObservationScaler()
    t.load_state_dict(state)
    np.testing.assert_array_equal(t.mean, s.mean)  # exact: the state keeps float64
    old = StandardObservationScaler()
    old.load_state_dict({"mean": torch.tensor([0.5, 1.0]), "std": torch.tensor([2.0, 2.0])})  # float32, as before
    np.testing.assert_array_equal(old.mean, [0.5, 1.0])
    np.testing.assert_allclose(old.transform(torch.tensor([[2.5, 3.0]])).numpy(), [[2 / 2.001, 2 / 2.001]], rtol=1e-6)


# ------------------------------------------------------ (de)serialization
_SCALERS = [
    StandardObservationScaler(mean=[1.0, 2.0], std=[3.0, 4.0], eps=0.01),
    StandardObservationScaler(),
    MinMaxObservationScaler(minimum=[0.0], maximum=[2.0]),
    PixelObservationScaler(),
    MinMaxActionScaler(minimum=[-1.0, 0.0], maximum=[1.0, 3.0]),
    StandardRewardScaler(mean=0.5, std=2.0, multiplier=3.0),
    MinMaxRewardScaler(minimum=-1.0, maximum=1.0),
    ReturnBasedRewardScaler(return_max=10.0, return_min=2.0),
    ClipRewardScaler(low=-1.0, high=None, multiplier=2.0),
    MultiplyRewardScaler(0.5),
    ConstantShiftRewardScaler(-1.0, multiplier=2.0, multiply_first=True),
    TupleObservationScaler([StandardObservationScaler(mean=[1.0], std=[2.0]), PixelObservationScaler()]),
]


@pytest.mark.parametrize("scaler", _SCALERS, ids=lambda s: type(s).__name__)
def test_serialize_round_trip(scaler, tmp_path):
    text = scaler.serialize()
    assert isinstance(text, str) and isinstance(scaler.serialize_to_dict(), dict)
    assert json.loads(text) == scaler.serialize_to_dict()
    cls = type(scaler)
    assert cls.deserialize(text) == scaler
    assert cls.deserialize_from_dict(scaler.serialize_to_dict()) == scaler
    assert cls.from_json(scaler.to_json()) == scaler
    path = tmp_path / "scaler.json"
    path.write_text(text)
    assert cls.deserialize_from_file(str(path)) == scaler


def test_serialize_has_d3rlpy_layout_and_reads_d3rlpy_strings():
    assert json.loads(StandardObservationScaler(mean=[1.0], std=[2.0]).serialize()) == \
        {"mean": [1.0], "std": [2.0], "eps": 0.001}
    assert json.loads(StandardRewardScaler().serialize()) == {"mean": None, "std": None, "eps": 0.001, "multiplier": 1.0}
    assert PixelObservationScaler().serialize() == "{}"
    # strings d3rlpy 2.8.1 writes
    s = StandardObservationScaler.deserialize('{"mean": [1.0, 2.0], "std": [3.0, 4.0], "eps": 0.001}')
    np.testing.assert_array_equal(s.std, [3.0, 4.0])
    c = ConstantShiftRewardScaler.deserialize('{"shift": -1, "multiplier": 2.0, "multiply_first": true}')
    assert (c.shift, c.multiplier, c.multiply_first) == (-1.0, 2.0, True)
    t = TupleObservationScaler.deserialize(
        '{"observation_scalers": [{"type": "min_max", "params": {"minimum": [0.0], "maximum": [4.0]}}]}')
    np.testing.assert_array_equal(t.observation_scalers[0].maximum, [4.0])
    with pytest.raises(ValueError, match=r"has no parameters \['bogus'\]"):
        StandardObservationScaler.deserialize('{"bogus": 1}')
    with pytest.raises(ValueError, match="not valid JSON"):
        StandardObservationScaler.deserialize("{")
    with pytest.raises(TypeError, match="JSON string"):
        StandardObservationScaler.deserialize({"mean": None})  # type: ignore[arg-type]


# -------------------------------------------------------- reward scalers
def test_constant_shift_reward_scaler_exact_values():
    r = np.array([1.0, 2.0])
    first = ConstantShiftRewardScaler(shift=-1.0, multiplier=2.0, multiply_first=True)
    np.testing.assert_array_equal(first.transform_numpy(r), [1.0, 3.0])
    np.testing.assert_array_equal(first.reverse_transform_numpy(np.array([1.0, 3.0])), [1.0, 2.0])
    after = ConstantShiftRewardScaler(shift=-1.0, multiplier=2.0)
    np.testing.assert_array_equal(after.transform_numpy(r), [0.0, 2.0])
    np.testing.assert_array_equal(after.transform(torch.tensor(r)).numpy(), [0.0, 2.0])
    np.testing.assert_array_equal(after.reverse_transform(torch.tensor([0.0, 2.0])).numpy(), [1.0, 2.0])
    with pytest.raises(TypeError):
        ConstantShiftRewardScaler()  # type: ignore[call-arg]  (shift is required, as in d3rlpy)
    with pytest.raises(TypeError, match="multiply_first must be a bool"):
        ConstantShiftRewardScaler(1.0, multiply_first="yes")  # type: ignore[arg-type]


_REVERSIBLE = [
    StandardRewardScaler(mean=0.5, std=2.0, multiplier=3.0),
    MinMaxRewardScaler(minimum=-1.0, maximum=4.0, multiplier=0.5),
    ReturnBasedRewardScaler(return_max=10.0, return_min=2.0, multiplier=2.0),
    MultiplyRewardScaler(0.25),
    ConstantShiftRewardScaler(-1.0, multiplier=2.0, multiply_first=True),
    ConstantShiftRewardScaler(3.0, multiplier=0.5),
]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(-50, 50, allow_nan=False), min_size=1, max_size=8))
def test_reward_reverse_transform_inverts_transform(values):
    r = np.asarray(values, dtype=np.float64)
    for scaler in _REVERSIBLE:
        np.testing.assert_allclose(scaler.reverse_transform_numpy(scaler.transform_numpy(r)), r, rtol=1e-9, atol=1e-9)
        t = torch.tensor(r, dtype=torch.float32)
        np.testing.assert_allclose(scaler.reverse_transform(scaler.transform(t)).numpy(), t.numpy(), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(scaler.transform(t).numpy(), scaler.transform_numpy(r), rtol=1e-5, atol=1e-4)


def test_reward_reverse_transform_exact_values_and_clip():
    s = StandardRewardScaler(mean=1.0, std=2.0)
    np.testing.assert_allclose(s.transform_numpy(np.array([3.0])), [2.0 / 2.001], rtol=1e-12)
    np.testing.assert_allclose(s.reverse_transform_numpy(np.array([1.0])), [3.001], rtol=1e-12)
    clip = ClipRewardScaler(low=-1.0, high=1.0, multiplier=2.0)
    np.testing.assert_array_equal(clip.transform_numpy(np.array([-5.0, 0.5, 5.0])), [-2.0, 1.0, 2.0])
    np.testing.assert_array_equal(clip.reverse_transform_numpy(np.array([-2.0, 1.0])), [-1.0, 0.5])  # the clip is not undone
    with pytest.raises(ValueError, match="multiplier=0"):
        MultiplyRewardScaler(0.0).reverse_transform_numpy(np.array([1.0]))


def test_observation_and_action_numpy_transforms_match_torch():
    rng = np.random.default_rng(5)
    x = rng.normal(size=(7, 3))
    for scaler in (StandardObservationScaler(mean=[1.0, -2.0, 0.5], std=[2.0, 0.5, 1.0]),
                   MinMaxObservationScaler(minimum=[-3.0, -3.0, -1.0], maximum=[3.0, 1.0, 1.0]),
                   MinMaxActionScaler(minimum=[-3.0, -3.0, -1.0], maximum=[3.0, 1.0, 1.0])):
        y = scaler.transform_numpy(x)
        assert y.dtype == np.float64
        np.testing.assert_allclose(y, scaler.transform(torch.tensor(x, dtype=torch.float32)).numpy(), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(scaler.reverse_transform_numpy(y), x, rtol=1e-12, atol=1e-12)
    pixels = np.array([[0, 51, 255]], dtype=np.uint8)
    p = PixelObservationScaler()
    np.testing.assert_allclose(p.transform_numpy(pixels), [[0.0, 0.2, 1.0]], rtol=1e-12)
    restored = p.reverse_transform(p.transform(torch.tensor(pixels)))
    assert restored.dtype == torch.int64 and restored.tolist() == [[0, 51, 255]]


def test_scalers_inside_a_d3rlpy_config_json():
    """A CQLConfig serialized by d3rlpy 2.8.1 with three scalers (nested
    records without offrl's 'kind') reads back with the same statistics,
    and offrl writes the scaler records in the same form."""
    from offrl.algos import CQLConfig

    d3rlpy_scalers = {
        "observation_scaler": {"type": "tuple", "params": {"observation_scalers": [
            {"type": "standard", "params": {"mean": [1.0], "std": [2.0], "eps": 0.001}},
            {"type": "pixel", "params": {}}]}},
        "action_scaler": {"type": "min_max", "params": {"minimum": [-1.0], "maximum": [1.0]}},
        "reward_scaler": {"type": "shift", "params": {"shift": -1.0, "multiplier": 2.0, "multiply_first": True}},
    }
    written = json.loads(CQLConfig().serialize())
    written.update(d3rlpy_scalers)
    config = CQLConfig.deserialize(json.dumps(written))
    np.testing.assert_array_equal(config.observation_scaler.observation_scalers[0].std, [2.0])
    assert isinstance(config.observation_scaler.observation_scalers[1], PixelObservationScaler)
    np.testing.assert_array_equal(config.action_scaler.minimum, [-1.0])
    assert config.reward_scaler == ConstantShiftRewardScaler(-1.0, multiplier=2.0, multiply_first=True)
    again = json.loads(config.serialize())
    for name, record in d3rlpy_scalers.items():
        assert again[name] == record, name


def test_custom_scaler_registration_and_leading_dims():
    from offrl.preprocessing import add_leading_dims, add_leading_dims_numpy, register_observation_scaler
    from offrl.serialization import from_json_value

    class TimesTwo(MultiplyRewardScaler):  # a reward scaler is no observation scaler
        pass

    with pytest.raises(TypeError, match="subclass of ObservationScaler"):
        register_observation_scaler(TimesTwo)

    class Shift(PixelObservationScaler):
        @staticmethod
        def get_type() -> str:
            return "test_shift_by_one"

        def transform(self, x):
            return x + 1.0

    assert register_observation_scaler(Shift) is Shift
    assert isinstance(from_json_value(Shift().to_dict()), Shift)
    assert add_leading_dims(torch.zeros(3), torch.zeros(4, 2, 3)).shape == (1, 1, 3)
    assert add_leading_dims_numpy(np.zeros(3), np.zeros((4, 3))).shape == (1, 3)
    with pytest.raises(ValueError, match=r"shape \(2,\) does not match"):
        add_leading_dims_numpy(np.zeros(2), np.zeros((4, 3)))


def test_a_d3rlpy_style_dataclass_scaler_fits_saves_and_loads(tmp_path):
    """A custom scaler written as in d3rlpy (a @dataclass whose fields hold
    its statistics, fitted in fit_with_transition_picker) works in an
    algorithm, and its fitted fields travel in the model file."""
    import dataclasses
    from typing import Optional

    import offrl
    from offrl.algos import BCConfig
    from offrl.models import VectorEncoderFactory
    from offrl.preprocessing import ObservationScaler, register_observation_scaler

    @dataclasses.dataclass()
    class CenterScaler(ObservationScaler):
        center: Optional[np.ndarray] = None
        factor: float = 2.0
        n_seen: int = 0

        def fit_with_transition_picker(self, episodes, transition_picker):
            picked = [transition_picker(e, i).observation for e in episodes for i in range(e.transition_count)]
            self.center = np.mean(picked, axis=0)
            self.n_seen = len(picked)
            return self

        def transform(self, x):
            return (x - torch.as_tensor(self.center, dtype=x.dtype, device=x.device)) * self.factor

        def reverse_transform(self, x):
            return x / self.factor + torch.as_tensor(self.center, dtype=x.dtype, device=x.device)

        @staticmethod
        def get_type() -> str:
            return "test_center"

        @property
        def built(self) -> bool:
            return self.center is not None

    register_observation_scaler(CenterScaler)
    scaler = CenterScaler(factor=0.5).fit_with_transition_picker(_episodes(), BasicTransitionPicker())
    np.testing.assert_array_equal(scaler.center, [6.0, 7.0])
    assert CenterScaler.deserialize(scaler.serialize()).serialize() == scaler.serialize()
    # the algorithm fits its own copy with the scaler's fit_with_transition_picker, as d3rlpy's do
    config = BCConfig(encoder_factory=VectorEncoderFactory(hidden_units=[8]), batch_size=4,
                      observation_scaler=CenterScaler(factor=0.5))
    algo = config.create()
    dataset = _dataset()
    algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, show_progress=False, save_interval=10,
             experiment_name="custom", with_timestamp=False,
             logger_adapter=offrl.logging.FileAdapterFactory(root_dir=str(tmp_path)))
    assert config.observation_scaler.center is None  # the config's scaler is left as it was
    expected_center = dataset.to_arrays()["observations"].astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(algo.observation_scaler.center, expected_center, rtol=1e-5)
    path = str(tmp_path / "bc.d3")
    algo.save(path)
    loaded = offrl.load_learnable(path)
    assert isinstance(loaded.observation_scaler, CenterScaler)
    np.testing.assert_array_equal(loaded.observation_scaler.center, algo.observation_scaler.center)
    assert loaded.observation_scaler.factor == 0.5
    assert loaded.observation_scaler.n_seen == algo.observation_scaler.n_seen == 40  # 8 terminated episodes of 5 steps
    assert type(loaded.observation_scaler.n_seen) is int
    x = dataset.to_arrays()["observations"][:8]
    np.testing.assert_array_equal(loaded.predict(x), algo.predict(x))
