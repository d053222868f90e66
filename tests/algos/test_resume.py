"""fit(..., resume_from=...) and ``offrl fit --resume``: an interrupted run
continued from its last checkpoint equals the uninterrupted run exactly."""

from __future__ import annotations

import csv
import os

import numpy as np
import pytest
import torch

import offrl
from offrl.algos import DQNConfig, SACConfig
from offrl.algos.checkpoint import CHECKPOINT_NAME
from offrl.logging import FileAdapterFactory
from offrl.models import VectorEncoderFactory
from offrl.optimizers import AdamWFactory, CosineAnnealingLRFactory
from offrl.preprocessing import StandardObservationScaler, StandardRewardScaler


class Interrupt(Exception):
    pass


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _dataset(discrete: bool) -> offrl.dataset.MDPDataset:
    rng = np.random.default_rng(0)
    n = 120
    observations = rng.normal(size=(n, 3)).astype(np.float32)
    actions = rng.integers(2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    rewards = rng.normal(size=n).astype(np.float32)
    terminals = (np.arange(n) % 40 == 39).astype(np.float32)
    return offrl.dataset.MDPDataset(observations, actions, rewards, terminals)


CONFIGS = {
    "dqn": (lambda: DQNConfig(batch_size=8, target_update_interval=7,
                              encoder_factory=VectorEncoderFactory(hidden_units=[16])), True),
    "dqn_scaled_clipped": (lambda: DQNConfig(
        batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[16]),
        optim_factory=AdamWFactory(weight_decay=0.01, clip_grad_norm=1.0),
        observation_scaler=StandardObservationScaler(), reward_scaler=StandardRewardScaler()), True),
    "dqn_lr_schedule": (lambda: DQNConfig(
        batch_size=8, encoder_factory=VectorEncoderFactory(hidden_units=[16]),
        optim_factory=AdamWFactory(lr_scheduler_factory=CosineAnnealingLRFactory(T_max=60))), True),
    "sac": (lambda: SACConfig(batch_size=8, actor_encoder_factory=VectorEncoderFactory(hidden_units=[16]),
                              critic_encoder_factory=VectorEncoderFactory(hidden_units=[16])), False),
}


def _fit(config, dataset, root, name, n_steps=50, **kwargs):
    return config.create().fit(dataset, n_steps, 20, experiment_name=name, with_timestamp=False,
                               logger_adapter=FileAdapterFactory(str(root)), show_progress=False, **kwargs)


def _states_equal(a, b) -> None:
    sa, sb = a.get_state(), b.get_state()
    assert sa["grad_step"] == sb["grad_step"]
    assert sa["modules"].keys() == sb["modules"].keys()
    for module in sa["modules"]:
        for key, value in sa["modules"][module].items():
            np.testing.assert_array_equal(value.numpy(), sb["modules"][module][key].numpy(), err_msg=f"{module}.{key}")
    for name, optim in sa["optimizers"].items():
        other = sb["optimizers"][name]
        if "lr_scheduler" in optim:  # an optimizer stepping a learning-rate scheduler
            assert optim["lr_scheduler"] == other["lr_scheduler"]
            optim, other = optim["optimizer"], other["optimizer"]
        for pid, values in optim["state"].items():
            for key, value in values.items():
                np.testing.assert_array_equal(np.asarray(value), np.asarray(other["state"][pid][key]))


def _rows(path):
    with open(path) as f:
        return list(csv.reader(f))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_interrupted_then_resumed_run_equals_the_uninterrupted_run(tmp_path, name):
    make, discrete = CONFIGS[name]
    dataset = _dataset(discrete)
    observations = np.random.default_rng(1).normal(size=(16, 3)).astype(np.float32)

    offrl.seed(3)
    full = make().create()
    full.fit(dataset, 50, 20, experiment_name="full", with_timestamp=False,
             logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)

    def stop(algo, epoch, step):
        if step == 47:  # in the last epoch: the checkpoint is at step 40
            raise Interrupt

    offrl.seed(3)
    interrupted = make().create()
    with pytest.raises(Interrupt):
        interrupted.fit(dataset, 50, 20, experiment_name="part", with_timestamp=False,
                        logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False, callback=stop)
    assert interrupted.grad_step == 47

    offrl.seed(12345)  # the checkpoint's random states win over the new process's
    resumed = make().create()
    results = resumed.fit(dataset, 50, 20, show_progress=False, resume_from=str(tmp_path / "part"))
    assert [epoch for epoch, _ in results] == [3]

    _states_equal(full, resumed)
    np.testing.assert_array_equal(full.predict(observations), resumed.predict(observations))
    actions = full.predict(observations)
    np.testing.assert_array_equal(full.predict_value(observations, actions),
                                  resumed.predict_value(observations, actions))
    # the same metric rows (epochs 1-3) and snapshots, appended not overwritten
    for metric in ("loss.csv",) if discrete else ("critic_loss.csv", "actor_loss.csv", "temp.csv"):
        assert _rows(tmp_path / "full" / metric) == _rows(tmp_path / "part" / metric)
        assert [int(r[1]) for r in _rows(tmp_path / "part" / metric)] == [20, 40, 50]
    assert sorted(p for p in os.listdir(tmp_path / "part") if p.startswith("model_")) == [
        "model_20.d3", "model_40.d3", "model_50.d3"]


def test_resume_from_a_checkpoint_file_and_sampling_continues(tmp_path):
    make, discrete = CONFIGS["dqn"]
    dataset = _dataset(discrete)
    offrl.seed(0)
    full = make().create()
    full.fit(dataset, 40, 20, experiment_name="full", with_timestamp=False,
             logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)
    offrl.seed(0)
    first = make().create()
    first.fit(dataset, 20, 20, experiment_name="short", with_timestamp=False,
              logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)
    # a longer run continued from the checkpoint file, logged elsewhere
    resumed = make().create()
    resumed.fit(dataset, 40, 20, experiment_name="more", with_timestamp=False, show_progress=False,
                logger_adapter=FileAdapterFactory(str(tmp_path)),
                resume_from=str(tmp_path / "short" / CHECKPOINT_NAME))
    _states_equal(full, resumed)
    assert [int(r[1]) for r in _rows(tmp_path / "more" / "loss.csv")] == [40]


def test_resume_with_steps_logging_keeps_the_window(tmp_path):
    make, discrete = CONFIGS["dqn"]
    dataset = _dataset(discrete)
    kwargs = dict(logging_strategy="steps", logging_steps=15)
    offrl.seed(0)
    _fit(make(), dataset, tmp_path, "full", **kwargs)

    def stop(algo, epoch, step):
        if step == 33:
            raise Interrupt

    offrl.seed(0)
    with pytest.raises(Interrupt):
        _fit(make(), dataset, tmp_path, "part", callback=stop, **kwargs)
    resumed = make().create()
    resumed.fit(dataset, 50, 20, show_progress=False, resume_from=str(tmp_path / "part"), **kwargs)
    # rows written after the checkpoint (step 30) were dropped, then written again
    assert _rows(tmp_path / "full" / "loss.csv") == _rows(tmp_path / "part" / "loss.csv")
    assert [int(r[1]) for r in _rows(tmp_path / "part" / "loss.csv")] == [15, 20, 30, 40, 45, 50]


def test_resume_refuses_what_does_not_match(tmp_path):
    make, discrete = CONFIGS["dqn"]
    dataset = _dataset(discrete)
    offrl.seed(0)
    _fit(make(), dataset, tmp_path, "run", n_steps=20)
    with pytest.raises(ValueError, match="n_steps_per_epoch=10, but .* n_steps_per_epoch=20"):
        make().create().fit(dataset, 40, 10, show_progress=False, resume_from=str(tmp_path / "run"))
    smaller = offrl.dataset.MDPDataset(*_columns(60))
    with pytest.raises(ValueError, match="the dataset has 60 transitions.* had 120"):
        make().create().fit(smaller, 40, 20, show_progress=False, resume_from=str(tmp_path / "run"))
    with pytest.raises(ValueError, match="n_steps=10 is below the 20 steps"):
        make().create().fit(dataset, 10, 20, show_progress=False, resume_from=str(tmp_path / "run"))
    with pytest.raises(ValueError, match="holds a 'dqn' checkpoint, not 'sac'"):
        CONFIGS["sac"][0]().create().fit(_dataset(False), 40, 20, show_progress=False,
                                         resume_from=str(tmp_path / "run"))
    with pytest.raises(ValueError, match="without a resume record"):
        make().create().fit(dataset, 40, 20, show_progress=False, resume_from=str(tmp_path / "run" / "model_20.d3"))
    with pytest.raises(FileNotFoundError, match="no checkpoint.d3 in it"):
        make().create().fit(dataset, 40, 20, show_progress=False, resume_from=str(tmp_path))
    with pytest.raises(TypeError, match="resume_from must be a path"):
        make().create().fit(dataset, 40, 20, show_progress=False, resume_from=3)


def _columns(n):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(n, 3)).astype(np.float32), rng.integers(2, size=n), rng.normal(size=n).astype(np.float32),
            (np.arange(n) % 20 == 19).astype(np.float32))


def test_checkpoint_holds_no_pickled_objects(tmp_path):
    """The checkpoint loads with weights_only=True (JSON text and tensors)."""
    make, discrete = CONFIGS["sac"]
    _fit(make(), _dataset(discrete), tmp_path, "run", n_steps=20)
    payload = torch.load(tmp_path / "run" / CHECKPOINT_NAME, weights_only=True)
    assert isinstance(payload["resume"], str)
    assert set(payload["random_tensors"]) >= {"torch_cpu", "numpy_global_keys"}
