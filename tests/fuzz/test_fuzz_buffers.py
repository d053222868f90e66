"""Replay buffers fed hostile values: online ``append`` of any observation,
action and reward, and ``sample_transition_batch`` /
``sample_trajectory_batch`` with any batch size and length. The contract:
the call succeeds and stores / returns exactly what the data says, or
raises ValueError / TypeError naming the field; a refused step leaves the
buffer usable and unchanged; no mini-batch beyond the memory bound is ever
allocated (the bound is pinned here so the test does not depend on the
machine)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_budget import budget
from offrl.dataset import MDPDataset, create_fifo_replay_buffer, create_infinite_replay_buffer
from offrl.dataset import replay_buffer as rb

pytestmark = pytest.mark.fuzz

FLOAT32_MAX = float(np.finfo(np.float32).max)

#: hostile scalars and arrays for one step's field
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.complex_numbers(max_magnitude=1e3),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.none(),
    st.lists(st.floats(-1e3, 1e3), max_size=4),
    st.sampled_from([np.zeros(3, np.float32), np.zeros(2), np.ones((1, 3)), np.array(["a", "b", "c"]),
                     np.ones(3, dtype=np.complex64), np.array([1e300, 0.0, 0.0]), np.array([np.nan, 0, 0]),
                     np.array([object(), 1, 2], dtype=object), np.ones(3, dtype=np.uint64) * (2**63),
                     np.ones(2, dtype=np.float16), np.zeros(0)]),
)


def _names(message: str, field: str) -> bool:
    return field in message


@budget(60)
@given(observation=VALUES, action=VALUES, reward=VALUES, fifo=st.booleans())
def test_append_stores_exactly_or_names_the_field(observation, action, reward, fifo):
    buffer = create_fifo_replay_buffer(limit=5) if fifo else create_infinite_replay_buffer()
    good_obs, good_action = np.arange(3, dtype=np.float32), np.array([0.5, -0.5], np.float32)
    buffer.append(good_obs, good_action, 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a cast warning means a value was changed silently
        try:
            buffer.append(observation, action, reward)
        except (ValueError, TypeError) as e:
            message = str(e)
            assert any(_names(message, f) for f in ("observation", "action", "reward")), message
            accepted = False
        else:
            accepted = True
    buffer.append(good_obs, good_action, 2.0)
    buffer.clip_episode(True)
    episode = buffer.episodes[0]
    rewards = episode.rewards.reshape(-1)
    if not accepted:
        np.testing.assert_array_equal(rewards, np.array([1.0, 2.0], np.float32))
        return
    # accepted: real, finite, in float32's range, and stored as given
    value = np.asarray(reward, dtype=np.float64).reshape(-1)
    assert value.shape == (1,) and np.isfinite(value[0]) and abs(value[0]) <= FLOAT32_MAX
    np.testing.assert_array_equal(rewards, np.array([1.0, value[0], 2.0], np.float32))
    stored_obs = episode.observations[1]
    np.testing.assert_array_equal(stored_obs, np.asarray(observation, dtype=np.float64).reshape(3).astype(np.float32))
    assert np.isfinite(stored_obs).all()
    np.testing.assert_array_equal(episode.actions[1], np.asarray(action, dtype=np.float64).reshape(2).astype(np.float32))


def _dataset(n: int = 40) -> MDPDataset:
    rng = np.random.default_rng(0)
    observations = np.arange(n * 2, dtype=np.float32).reshape(n, 2)  # rows identify themselves
    return MDPDataset(observations, rng.integers(3, size=n), rng.normal(size=n).astype(np.float32),
                      (np.arange(n) % 10 == 9).astype(np.float32))


SIZES = st.one_of(
    st.integers(-3, 300),
    st.integers(10**6, 10**19),
    st.sampled_from([0, True, False, 2.0, 1e7, "8", None, np.int64(16), np.uint64(2**63), np.int8(-1)]),
)


@budget(60)
@given(batch_size=SIZES, length=SIZES, trajectories=st.booleans())
def test_sampling_returns_source_rows_or_names_the_argument(batch_size, length, trajectories, monkeypatch_memory):
    dataset = _dataset()
    observations = np.arange(80, dtype=np.float32).reshape(40, 2)
    try:
        if trajectories:
            batch = dataset.sample_trajectory_batch(batch_size, length)
        else:
            batch = dataset.sample_transition_batch(batch_size)
    except (ValueError, TypeError) as e:
        message = str(e)
        assert "batch_size" in message or "length" in message, message
        return
    n = int(batch_size)
    assert 0 < n
    if trajectories:
        steps = int(length)
        # within the pinned bound: a trajectory of `steps` float32 pairs and its scalars
        assert n * steps <= 2**27
        assert batch.observations.shape == (n, steps, 2)
        real = batch.masks.reshape(n, steps) > 0 if hasattr(batch, "masks") else np.ones((n, steps), bool)
        rows = batch.observations[real]
    else:
        assert n * 2 * 8 <= 2**27
        assert batch.observations.shape == (n, 2)
        rows = batch.observations
    # every sampled observation is a row of the source (its first entry is even and names the row)
    index = (rows[:, 0] / 2).astype(np.int64)
    np.testing.assert_array_equal(rows, observations[index])


@pytest.fixture
def monkeypatch_memory(monkeypatch):
    """Pin the available memory at 256 MiB, so the bound (half of it) is the same on every machine."""
    monkeypatch.setattr(rb, "_available_memory", lambda: 2**28)
