"""LoggerAdapterFactory.create: d3rlpy 2.7+'s (algo, experiment_name,
n_steps_per_epoch) and the older (experiment_name), told apart by signature."""

from __future__ import annotations

import json
from typing import Any, Dict, List

import gymnasium
import numpy as np
import pytest

import offrl
from offrl.logging import (
    CombineAdapterFactory,
    FileAdapter,
    FileAdapterFactory,
    LoggerAdapter,
    LoggerAdapterFactory,
    NoopAdapter,
    NoopAdapterFactory,
    create_logger_adapter,
)
from offrl.models import VectorEncoderFactory


class _Recorder(NoopAdapter):
    def __init__(self, log: List[Any]) -> None:
        self.log = log

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        self.log.append((epoch, step, name))


class NewStyleFactory:
    """Written to d3rlpy 2.7+'s signature."""

    def __init__(self) -> None:
        self.calls: List[tuple] = []
        self.metrics: List[Any] = []

    def create(self, algo, experiment_name, n_steps_per_epoch):
        self.calls.append((algo, experiment_name, n_steps_per_epoch))
        return _Recorder(self.metrics)


class OldStyleFactory:
    """Written to the older ``create(experiment_name)``."""

    def __init__(self) -> None:
        self.calls: List[str] = []
        self.metrics: List[Any] = []

    def create(self, experiment_name):
        self.calls.append(experiment_name)
        return _Recorder(self.metrics)


def _fit(factory, **kwargs) -> Any:
    rng = np.random.default_rng(0)
    data = offrl.dataset.MDPDataset(rng.normal(size=(32, 3)), rng.integers(0, 2, 32), rng.normal(size=32),
                                    np.r_[np.zeros(31), 1], action_size=2)
    algo = offrl.algos.DQNConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[4])).create()
    algo.fit(data, n_steps=6, n_steps_per_epoch=3, experiment_name="exp", with_timestamp=False, logger_adapter=factory,
             show_progress=False, **kwargs)
    return algo


def test_fit_calls_a_new_style_factory_with_algo_and_epoch_length():
    factory = NewStyleFactory()
    algo = _fit(factory)
    assert factory.calls == [(algo, "exp", 3)]
    assert {(epoch, step) for epoch, step, _ in factory.metrics} == {(1, 3), (2, 6)}


def test_fit_still_calls_an_old_style_factory_with_the_name_only():
    factory = OldStyleFactory()
    _fit(factory)
    assert factory.calls == ["exp"]
    assert {(epoch, step) for epoch, step, _ in factory.metrics} == {(1, 3), (2, 6)}


def test_combine_mixes_old_and_new_factories():
    new, old = NewStyleFactory(), OldStyleFactory()
    algo = _fit(CombineAdapterFactory([new, old]))
    assert new.calls == [(algo, "exp", 3)] and old.calls == ["exp"]
    assert new.metrics == old.metrics and len(new.metrics) > 0


class _Walk(gymnasium.Env):
    """Three one-hot positions; action 1 moves right; the last one ends the episode."""

    observation_space = gymnasium.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gymnasium.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position = 0
        return np.eye(3, dtype=np.float32)[0], {}

    def step(self, action):
        self.position = min(2, self.position + int(action))
        done = self.position == 2
        return np.eye(3, dtype=np.float32)[self.position], float(done), done, False, {}


def test_fit_online_passes_the_epoch_length():
    factory = NewStyleFactory()
    algo = offrl.algos.DQNConfig(batch_size=4, encoder_factory=VectorEncoderFactory(hidden_units=[4])).create()
    algo.fit_online(_Walk(), n_steps=8, n_steps_per_epoch=4, experiment_name="online", with_timestamp=False,
                    logger_adapter=factory, show_progress=False)
    assert factory.calls == [(algo, "online", 4)]


@pytest.mark.parametrize("make", [lambda root: FileAdapterFactory(root), lambda root: NoopAdapterFactory()])
def test_builtin_factories_take_both_signatures(tmp_path, make):
    factory = make(str(tmp_path))
    assert isinstance(factory, LoggerAdapterFactory)
    new = factory.create(object(), "new", 10)
    old = factory.create("old")
    assert isinstance(new, LoggerAdapter) and isinstance(old, LoggerAdapter)
    if isinstance(factory, FileAdapterFactory):
        assert (new.logdir, old.logdir) == (str(tmp_path / "new"), str(tmp_path / "old"))
    with pytest.raises(TypeError, match="needs an experiment_name"):
        factory.create(object())
    with pytest.raises(TypeError, match="experiment_name must be a str, got int"):
        factory.create(object(), 3, 10)


def test_file_adapter_takes_d3rlpys_algo_argument(tmp_path):
    adapter = FileAdapter(object(), str(tmp_path / "run"))
    adapter.write_params({"a": 1})
    assert json.loads((tmp_path / "run" / "params.json").read_text()) == {"a": 1}
    assert FileAdapter(tmp_path / "other").logdir == str(tmp_path / "other")
    adapter.watch_model(1, 2)  # d3rlpy 2.8's hook exists and does nothing
    with pytest.raises(TypeError, match="logdir must be a path, got int"):
        FileAdapter(3)


def test_create_logger_adapter_refuses_what_it_cannot_call():
    class TwoRequired:
        def create(self, experiment_name, something):
            raise AssertionError("not called")

    with pytest.raises(TypeError, match=r"must take \(algo, experiment_name, n_steps_per_epoch\) or \(experiment_name\)"):
        create_logger_adapter(TwoRequired(), None, "x", 1)
    with pytest.raises(TypeError, match="logger_adapter must be a LoggerAdapterFactory .* got dict"):
        create_logger_adapter({}, None, "x", 1)

    class WithDefaults:
        def __init__(self) -> None:
            self.args: Dict[str, Any] = {}

        def create(self, experiment_name, verbose=False):
            self.args = {"experiment_name": experiment_name, "verbose": verbose}
            return NoopAdapter()

    factory = WithDefaults()
    create_logger_adapter(factory, None, "x", 1)
    assert factory.args == {"experiment_name": "x", "verbose": False}
