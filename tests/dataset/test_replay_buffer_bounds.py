"""Replay buffers refuse, before allocating, mini-batches beyond the memory
available, and refuse non-numeric values written online, naming the field."""

from __future__ import annotations

import re

import numpy as np
import pytest

import offrl
from offrl.dataset import replay_buffer as rb


def _dataset(n: int = 100) -> offrl.dataset.MDPDataset:
    rng = np.random.default_rng(0)
    return offrl.dataset.MDPDataset(
        rng.normal(size=(n, 3)).astype(np.float32), rng.integers(2, size=n),
        rng.normal(size=n).astype(np.float32), (np.arange(n) % 25 == 24).astype(np.float32))


@pytest.mark.parametrize("batch_size", [10**7, 10**10, 10**13])
def test_huge_batches_are_refused_before_allocating(batch_size, monkeypatch):
    monkeypatch.setattr(rb, "_available_memory", lambda: 2**30)  # 1 GiB, whatever this machine has
    dataset = _dataset()
    # a transition: two 12-byte observations, an 8-byte action, a 4-byte reward, 48 bytes of scalars/indices
    needed = 84 * batch_size / 2**30
    with pytest.raises(ValueError, match=rf"sample_transition_batch\(batch_size={batch_size}\) would need about "
                                         rf"{re.escape(f'{needed:.3g}')} GiB .*84 bytes a transition.* 1 GiB of memory available"):
        dataset.sample_transition_batch(batch_size)
    with pytest.raises(ValueError, match=rf"sample_trajectory_batch\(batch_size={batch_size}, length=10\) would need"):
        dataset.sample_trajectory_batch(batch_size, 10)


def test_huge_batches_are_refused_on_this_machine_too():
    dataset = _dataset()
    with pytest.raises(ValueError, match="more than half of the"):
        dataset.sample_transition_batch(10**13)
    with pytest.raises(ValueError, match="more than half of the"):
        dataset.sample_trajectory_batch(10**12, 1000)


def test_batches_within_the_bound_are_sampled(monkeypatch):
    monkeypatch.setattr(rb, "_available_memory", lambda: 2**30)
    dataset = _dataset()
    assert dataset.sample_transition_batch(10**5).observations.shape == (10**5, 3)
    assert dataset.sample_trajectory_batch(1000, 10).observations.shape == (1000, 10, 3)


def test_unknown_available_memory_does_not_block_sampling(monkeypatch):
    monkeypatch.setattr(rb, "_available_memory", lambda: None)
    assert _dataset().sample_transition_batch(4).observations.shape == (4, 3)


def test_available_memory_is_positive_here():
    available = rb._available_memory()
    assert available is None or available > 0


def _buffer():
    buffer = offrl.dataset.create_infinite_replay_buffer()
    buffer.append(np.zeros(3, np.float32), np.zeros(2, np.float32), 1.0)
    return buffer


@pytest.mark.parametrize("reward, error, message", [
    ("1.5", ValueError, "reward must be a real number or an array of them, got str '1.5'"),
    ("abc", ValueError, "reward must be a real number or an array of them, got str 'abc'"),
    (b"1", ValueError, "reward must be a real number or an array of them, got bytes"),
    (None, TypeError, r"reward must hold real numbers, got Python objects \(dtype object\)"),
    (1 + 2j, TypeError, r"reward must hold real numbers, got complex numbers \(dtype complex128\)"),
    (1e300, ValueError, "reward is 1e[+]300, beyond float32's range"),
])
def test_append_refuses_a_non_real_reward_naming_it(reward, error, message):
    buffer = _buffer()
    with pytest.raises(error, match=message):
        buffer.append(np.zeros(3, np.float32), np.zeros(2, np.float32), reward)
    buffer.append(np.zeros(3, np.float32), np.zeros(2, np.float32), np.float64(2.5))
    buffer.clip_episode(True)
    # the refused step was not written
    np.testing.assert_array_equal(buffer.episodes[0].rewards.reshape(-1), np.array([1.0, 2.5], np.float32))


def test_append_refuses_string_and_complex_actions_and_observations():
    buffer = _buffer()
    with pytest.raises(TypeError, match=r"action must hold real numbers, got strings"):
        buffer.append(np.zeros(3, np.float32), np.array(["a", "b"]), 1.0)
    with pytest.raises(TypeError, match=r"action must hold real numbers, got complex numbers"):
        buffer.append(np.zeros(3, np.float32), np.array([1j, 0]), 1.0)
    with pytest.raises(TypeError, match=r"observation must hold real numbers, got strings"):
        buffer.append(np.array(["a", "b", "c"]), np.zeros(2, np.float32), 1.0)


def test_training_sized_batches_do_not_ask_for_available_memory(monkeypatch):
    """The check costs a /proc read: batches below 64 MiB skip it (the
    training loop samples one per step), larger ones still ask."""
    calls = []
    monkeypatch.setattr(rb, "_available_memory", lambda: calls.append(1) or 2**40)
    dataset = _dataset()
    dataset.sample_transition_batch(256)
    dataset.sample_trajectory_batch(64, 20)
    assert calls == []
    dataset.sample_transition_batch(64 * 2**20 // 84 + 1)  # just over 64 MiB at 84 bytes a transition
    assert calls == [1]
