"""The fit loop, logging, model files and the estimator API around them."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
import torch

import offrl
from offrl.algos import DQNConfig, NonFiniteLossError, parse_device
from offrl.dataset import MDPDataset
from offrl.logging import CombineAdapterFactory, FileAdapterFactory, NoopAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.preprocessing import StandardObservationScaler, StandardRewardScaler


def _dataset(n: int = 200, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    terminals = np.zeros(n)
    terminals[np.arange(9, n, 10)] = 1
    return MDPDataset(rng.normal(size=(n, 4)) * 3 + 5, rng.integers(0, 2, n), rng.normal(size=n), terminals, action_size=2)


def _algo(**kwargs):
    return DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[16]), batch_size=16, **kwargs).create()


def test_fit_returns_epochs_and_writes_logs(tmp_path):
    algo = _algo()
    results = algo.fit(
        _dataset(), n_steps=25, n_steps_per_epoch=10, experiment_name="run", with_timestamp=False,
        logger_adapter=FileAdapterFactory(root_dir=str(tmp_path)), show_progress=False, save_interval=2,
    )
    assert [e for e, _ in results] == [1, 2, 3]
    assert {"loss", "time_step", "time_sample_batch", "time_algorithm_update"} <= set(results[0][1])
    logdir = tmp_path / "run"
    params = json.loads((logdir / "params.json").read_text())
    assert params["algorithm"] == "dqn" and params["observation_shape"] == [4] and params["action_size"] == 2
    with open(logdir / "loss.csv") as f:
        rows = list(csv.reader(f))
    assert [(int(r[0]), int(r[1])) for r in rows] == [(1, 10), (2, 20), (3, 25)]
    assert [float(r[2]) for r in rows] == pytest.approx([m["loss"] for _, m in results])
    # saved every 2 epochs and after the last one, named by grad step
    assert sorted(os.listdir(logdir)) == sorted(
        ["params.json", "checkpoint.d3", "model_20.d3", "model_25.d3"] + [f"{m}.csv" for m in results[0][1]]
    )
    loaded = offrl.load_learnable(logdir / "model_25.d3")
    assert loaded.grad_step == 25
    rebuilt = type(algo).from_json(str(logdir / "params.json"))
    assert rebuilt.is_built and rebuilt.observation_shape == (4,)


def test_epoch_metric_is_mean_of_step_losses():
    dataset = _dataset()
    offrl.seed(3)
    algo = _algo()
    losses = []
    algo.fit(dataset, n_steps=7, n_steps_per_epoch=7, logger_adapter=NoopAdapterFactory(), show_progress=False,
             callback=lambda a, epoch, step: losses.append(step))
    assert losses == list(range(1, 8))
    offrl.seed(3)
    manual = _algo()
    manual.build_with_dataset(dataset)
    values = [manual.update(dataset.sample_transition_batch(16))["loss"] for _ in range(7)]
    offrl.seed(3)
    again = _algo()
    (_, metrics), = again.fit(dataset, n_steps=7, n_steps_per_epoch=7, logger_adapter=NoopAdapterFactory(), show_progress=False)
    assert metrics["loss"] == pytest.approx(np.mean(values), rel=1e-5)


def test_fitter_yields_and_epoch_callback():
    algo = _algo()
    seen = []
    gen = algo.fitter(_dataset(), n_steps=4, n_steps_per_epoch=2, logger_adapter=NoopAdapterFactory(), show_progress=False,
                      epoch_callback=lambda a, e, s: seen.append((e, s)))
    epoch, metrics = next(gen)
    assert epoch == 1 and algo.grad_step == 2
    assert list(gen)[0][0] == 2
    assert seen == [(1, 2), (2, 4)]


def test_nan_loss_stops_fit_naming_step_and_loss(tmp_path, monkeypatch):
    algo = _algo()
    algo.fit(_dataset(), n_steps=4, n_steps_per_epoch=4, experiment_name="a", with_timestamp=False,
             logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)
    saved = tmp_path / "a" / "model_4.d3"
    original = algo.training_step
    calls = {"n": 0}

    def poisoned(batch):
        out = original(batch)
        calls["n"] += 1
        if calls["n"] == 3:
            out.metrics["loss"] = out.metrics["loss"] * float("nan")
        return out

    monkeypatch.setattr(algo, "training_step", poisoned)
    with pytest.raises(NonFiniteLossError, match=r"loss became nan at step 7"):
        algo.fit(_dataset(), n_steps=50, n_steps_per_epoch=10, experiment_name="a", with_timestamp=False,
                 logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)
    assert sorted(p for p in os.listdir(tmp_path / "a") if p.endswith(".d3")) == ["checkpoint.d3", "model_4.d3"]
    assert offrl.load_learnable(saved).grad_step == 4
    # rolled back to the state saved at the end of the last good epoch
    assert algo.grad_step == 4


def test_fit_does_not_mutate_config_and_keeps_fitted_scalers(tmp_path):
    config = DQNConfig(observation_scaler=StandardObservationScaler(), reward_scaler=StandardRewardScaler(),
                       encoder_factory=VectorEncoderFactory(hidden_units=[8]), batch_size=8)
    before = config.to_dict()
    dataset = _dataset()
    algo = config.create()
    algo.fit(dataset, n_steps=2, logger_adapter=NoopAdapterFactory(), show_progress=False)
    assert config.to_dict() == before
    assert not config.observation_scaler.built
    obs = dataset.to_arrays()["observations"]
    np.testing.assert_allclose(algo.observation_scaler.mean, obs.mean(axis=0), rtol=1e-5)
    np.testing.assert_allclose(algo.observation_scaler.std, obs.std(axis=0), rtol=1e-5)
    path = tmp_path / "m.d3"
    algo.save(path)
    loaded = offrl.load_learnable(path)
    np.testing.assert_array_equal(loaded.observation_scaler.mean, algo.observation_scaler.mean)
    np.testing.assert_array_equal(loaded.reward_scaler.std, algo.reward_scaler.std)


def test_fit_rejects_mismatched_dataset():
    algo = _algo()
    algo.fit(_dataset(), n_steps=1, logger_adapter=NoopAdapterFactory(), show_progress=False)
    other = MDPDataset(np.zeros((10, 3)), np.zeros(10, dtype=int), np.zeros(10), np.r_[np.zeros(9), 1], action_size=2)
    with pytest.raises(ValueError, match="shape"):
        algo.fit(other, n_steps=1, logger_adapter=NoopAdapterFactory(), show_progress=False)
    with pytest.raises(ValueError, match="n_steps_per_epoch"):
        algo.fit(_dataset(), n_steps=1, n_steps_per_epoch=0, logger_adapter=NoopAdapterFactory(), show_progress=False)
    with pytest.raises(TypeError, match="dataset"):
        algo.fit(np.zeros(3), n_steps=1, logger_adapter=NoopAdapterFactory(), show_progress=False)


def test_combine_adapter_sends_the_same_scalars(tmp_path):
    class Recorder:
        def __init__(self):
            self.rows = []

        def write_params(self, params):
            self.params = params

        def before_write_metric(self, epoch, step):
            pass

        def write_metric(self, epoch, step, name, value):
            self.rows.append((epoch, step, name, value))

        def after_write_metric(self, epoch, step):
            pass

        def save_model(self, epoch, algo):
            pass

        def close(self):
            self.closed = True

    a, b = Recorder(), Recorder()

    class Factory:
        def __init__(self, r):
            self.r = r

        def create(self, name):
            return self.r

    _algo().fit(_dataset(), n_steps=3, n_steps_per_epoch=3, logger_adapter=CombineAdapterFactory([Factory(a), Factory(b)]), show_progress=False)
    assert a.rows == b.rows and a.rows and a.closed and b.closed


@pytest.mark.parametrize("device,expected", [(False, "cpu"), (None, "cpu"), ("cpu", "cpu"), ("cpu:0", "cpu")])
def test_parse_device(device, expected):
    assert parse_device(device).type == expected


@pytest.mark.parametrize("device", ["tpu", "gpu:0", "banana"])
def test_unknown_device(device):
    with pytest.raises(ValueError, match="device"):
        DQNConfig().create(device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised when CUDA is absent")
@pytest.mark.parametrize("device", [True, 0, "cuda", "cuda:1"])
def test_cuda_without_gpu_is_a_clear_error(device):
    with pytest.raises(ValueError, match="CUDA"):
        DQNConfig().create(device=device)


def test_grad_step_and_reset_optimizer():
    algo = _algo()
    algo.fit(_dataset(), n_steps=3, logger_adapter=NoopAdapterFactory(), show_progress=False)
    assert algo.grad_step == 3
    algo.set_grad_step(100)
    assert algo.grad_step == 100
    with pytest.raises(ValueError):
        algo.set_grad_step(-1)
    assert algo.optimizers["optim"].optim.state
    algo.reset_optimizer_states()
    assert not algo.optimizers["optim"].optim.state


def test_copy_q_function_between_dqns():
    dataset = _dataset()
    a, b = _algo(), _algo()
    a.fit(dataset, n_steps=3, logger_adapter=NoopAdapterFactory(), show_progress=False)
    b.build_with_dataset(dataset)
    b.copy_q_function_from(a)
    b.copy_q_function_optim_from(a)
    x = dataset.to_arrays()["observations"][:5]
    np.testing.assert_array_equal(a.predict_value(x, np.zeros(5, int)), b.predict_value(x, np.zeros(5, int)))
    c = DQNConfig(encoder_factory=VectorEncoderFactory(hidden_units=[32])).create()
    c.build_with_dataset(dataset)
    with pytest.raises(ValueError, match="does not fit"):
        c.copy_q_function_from(a)
