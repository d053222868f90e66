"""``algo.collect`` / ``algo.fit_online`` pass ``seed``, ``n_updates`` and
vector environments through to :mod:`offrl.algos.online`: the method and the
module function give exactly the same data (and, for fit_online, the same
weights and number of updates)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import SyncVectorEnv

import offrl
from offrl.algos import ConstantEpsilonGreedy, DQNConfig, online
from offrl.dataset import create_fifo_replay_buffer
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory

NOOP = NoopAdapterFactory()


def _cartpoles() -> SyncVectorEnv:
    return SyncVectorEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(2)])


def _dqn() -> offrl.algos.DQN:
    algo = DQNConfig(batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    offrl.seed(0)
    algo.build_with_env(gymnasium.make("CartPole-v1"))
    return algo


def _columns(buffer) -> list:
    return [(e.observations.copy(), e.actions.copy(), e.rewards.copy(), bool(e.terminated)) for e in buffer.episodes]


def _assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for u, v in zip(x[:3], y[:3]):
            np.testing.assert_array_equal(u, v)
        assert x[3] == y[3]


def test_collect_method_passes_seed_and_vector_env():
    algo = _dqn()
    offrl.seed(1)
    got = algo.collect(_cartpoles(), explorer=ConstantEpsilonGreedy(0.5), n_steps=60, show_progress=False, seed=3)
    offrl.seed(2)  # the seed argument, not offrl's generator, fixes the resets and the explorer's draws
    want = online.collect(algo, _cartpoles(), explorer=ConstantEpsilonGreedy(0.5), n_steps=60, show_progress=False,
                          seed=3)
    assert got.transition_count == 60
    _assert_same(_columns(got), _columns(want))
    other = algo.collect(_cartpoles(), explorer=ConstantEpsilonGreedy(0.5), n_steps=60, show_progress=False, seed=4)
    assert not np.array_equal(other.episodes[0].observations[0], got.episodes[0].observations[0])
    # environment 1 of the vector starts where a single CartPole reset with seed 3 + 1 starts
    first, _ = gymnasium.make("CartPole-v1").reset(seed=4)
    assert any(np.array_equal(e.observations[0], first) for e in got.episodes)


def test_fit_online_method_passes_seed_n_updates_and_vector_env():
    results = []
    for use_method in (True, False):
        algo = _dqn()
        buffer = create_fifo_replay_buffer(limit=200, env=gymnasium.make("CartPole-v1"))
        offrl.seed(5)
        kwargs = dict(buffer=buffer, explorer=ConstantEpsilonGreedy(0.3), n_steps=40, n_steps_per_epoch=40,
                      update_start_step=10, n_updates=3, logger_adapter=NOOP, show_progress=False, seed=7)
        if use_method:
            algo.fit_online(_cartpoles(), **kwargs)
        else:
            online.fit_online(algo, _cartpoles(), **kwargs)
        results.append((algo, buffer))
    (a, buffer_a), (b, buffer_b) = results
    _assert_same(_columns(buffer_a), _columns(buffer_b))
    # 20 vector steps; 13 of them (past step 10, more than a batch of 8 written) update, n_updates=3 each
    assert a.grad_step == b.grad_step == 13 * 3
    for p, q in zip(_parameters(a), _parameters(b)):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


def _parameters(algo) -> list:
    return [p.detach().clone() for m in algo.modules.values() for p in m.parameters()]


def test_bad_seed_through_the_methods():
    algo = _dqn()
    with pytest.raises(ValueError, match="seed must be None or an int >= 0"):
        algo.collect(_cartpoles(), n_steps=4, show_progress=False, seed=-1)
    with pytest.raises(ValueError, match="seed must be None or an int >= 0"):
        algo.fit_online(_cartpoles(), n_steps=4, n_steps_per_epoch=4, logger_adapter=NOOP, show_progress=False,
                        seed="3")
