"""``algo.collect`` / ``algo.fit_online`` pass ``seed``, ``n_updates`` and
vector environments through to :mod:`offrl.training.online`: the method and the
module function give exactly the same data (and, for fit_online, the same
weights and number of updates)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium.vector import SyncVectorEnv

import offrl
from offrl.algos import ConstantEpsilonGreedy, DQNConfig
from offrl.training import online
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


class _Recorder:
    """A logger adapter that keeps every written metric as (step, name, value)."""

    def __init__(self) -> None:
        self.rows: list = []

    def create(self, algo, experiment_name, n_steps_per_epoch):
        return self

    def write_params(self, params) -> None:
        pass

    def before_write_metric(self, epoch, step) -> None:
        pass

    def write_metric(self, epoch, step, name, value) -> None:
        self.rows.append((step, name, value))

    def after_write_metric(self, epoch, step) -> None:
        pass

    def save_model(self, epoch, algo) -> None:
        pass

    def close(self) -> None:
        pass


@pytest.mark.parametrize("vector", [False, True])
def test_fit_online_step_logging(vector):
    algo = _dqn()
    recorder = _Recorder()
    grad_steps = {}

    def callback(algo, epoch, total_step):
        grad_steps[total_step] = algo.grad_step

    env = _cartpoles() if vector else gymnasium.make("CartPole-v1")
    results = algo.fit_online(env, explorer=ConstantEpsilonGreedy(0.3), n_steps=40, n_steps_per_epoch=40,
                              update_start_step=10, logger_adapter=recorder, show_progress=False, seed=0,
                              logging_strategy="steps", logging_steps=10, callback=callback)
    rows = [(step, value) for step, name, value in recorder.rows if name == "loss"]
    # windows end at the steps 20, 30, 40 that follow an update, then the epoch's own row at 40
    ends = [t for t in (20, 30, 40) if grad_steps[t] > grad_steps.get(t - 10, 0)]
    assert [step for step, _ in rows[:-1]] == ends and rows[-1][0] == 40
    if not vector:
        assert ends == [20, 30, 40]  # one env: updates from step 11 on
    # each window is the mean of its updates: weighted by their counts they give the epoch mean
    counts = [grad_steps[t] - grad_steps.get(t - 10, 0) for t in ends]
    windows = [value for _, value in rows[:-1]]
    np.testing.assert_allclose(np.average(windows, weights=counts), results[0][1]["loss"], rtol=1e-6)
    assert rows[-1][1] == results[0][1]["loss"]


def test_fit_online_epoch_logging_writes_once_per_epoch():
    algo = _dqn()
    recorder = _Recorder()
    algo.fit_online(gymnasium.make("CartPole-v1"), n_steps=40, n_steps_per_epoch=20, update_start_step=10,
                    logger_adapter=recorder, show_progress=False, seed=0, logging_steps=5)
    assert sorted({step for step, name, _ in recorder.rows if name == "loss"}) == [20, 40]
    with pytest.raises(ValueError, match="logging_strategy"):
        algo.fit_online(gymnasium.make("CartPole-v1"), n_steps=4, n_steps_per_epoch=4, logger_adapter=NOOP,
                        show_progress=False, logging_strategy="often")
    with pytest.raises(ValueError, match="logging_steps"):
        algo.fit_online(gymnasium.make("CartPole-v1"), n_steps=4, n_steps_per_epoch=4, logger_adapter=NOOP,
                        show_progress=False, logging_steps=0)
