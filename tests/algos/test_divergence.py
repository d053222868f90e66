"""Diverging training: no snapshot with diverged weights is ever written, and
after the NonFiniteLossError the algorithm is back at its last finite state."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest
import torch

import offrl
from offrl.algos import DQNConfig, NonFiniteLossError, SACConfig
from offrl.training.checkpoint import non_finite_weights
from offrl.logging import FileAdapterFactory, NoopAdapterFactory
from offrl.models import VectorEncoderFactory

from envs import Corridor


def _dataset(discrete: bool) -> offrl.dataset.MDPDataset:
    rng = np.random.default_rng(0)
    n = 100
    actions = rng.integers(2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    return offrl.dataset.MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), actions,
                                    rng.normal(size=n).astype(np.float32), (np.arange(n) % 25 == 24).astype(np.float32))


def _config(discrete: bool, lr: float):
    if discrete:
        return DQNConfig(batch_size=8, learning_rate=lr, encoder_factory=VectorEncoderFactory(hidden_units=[16]))
    return SACConfig(batch_size=8, actor_learning_rate=lr, critic_learning_rate=lr, temp_learning_rate=lr,
                     actor_encoder_factory=VectorEncoderFactory(hidden_units=[16]),
                     critic_encoder_factory=VectorEncoderFactory(hidden_units=[16]))


def _saved_models_are_finite(directory) -> int:
    paths = glob.glob(os.path.join(str(directory), "**", "*.d3"), recursive=True)
    for path in paths:
        assert non_finite_weights(offrl.load_learnable(path)) is None, path
    return len(paths)


OBSERVATIONS = np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32)


@pytest.mark.parametrize("discrete", [True, False], ids=["dqn", "sac"])
@pytest.mark.parametrize("steps_per_epoch", [1, 3, 10])
def test_a_huge_learning_rate_saves_no_diverged_model_and_rolls_back(tmp_path, discrete, steps_per_epoch):
    offrl.seed(0)
    algo = _config(discrete, 1e30).create()
    with pytest.raises(NonFiniteLossError, match="restored to its state at the start of this training run"):
        algo.fit(_dataset(discrete), 30, steps_per_epoch, logger_adapter=FileAdapterFactory(str(tmp_path)),
                 show_progress=False)
    assert _saved_models_are_finite(tmp_path) == 0
    assert algo.grad_step == 0 and non_finite_weights(algo) is None
    assert np.isfinite(algo.predict(OBSERVATIONS).astype(np.float64)).all()
    assert np.isfinite(algo.predict_value(OBSERVATIONS, algo.predict(OBSERVATIONS))).all()


@pytest.mark.parametrize("discrete", [True, False], ids=["dqn", "sac"])
def test_divergence_after_good_epochs_keeps_their_snapshots_and_restores_the_last(tmp_path, discrete):
    offrl.seed(0)
    algo = _config(discrete, 1e-3).create()

    def blow_up(algo, epoch, step):
        if epoch == 2:  # from epoch 3 on, every optimizer steps with a learning rate of 1e30
            for optim in algo.optimizers.values():
                inner = getattr(optim, "optim", optim)
                for group in inner.param_groups:
                    group["lr"] = 1e30

    with pytest.raises(NonFiniteLossError, match=r"restored to its state at the end of epoch 2 \(grad_step 10\)"):
        algo.fit(_dataset(discrete), 50, 5, experiment_name="run", with_timestamp=False,
                 logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False, epoch_callback=blow_up)
    assert sorted(p for p in os.listdir(tmp_path / "run") if p.endswith(".d3")) == [
        "checkpoint.d3", "model_10.d3", "model_5.d3"]
    assert _saved_models_are_finite(tmp_path) == 3  # two snapshots and the checkpoint of epoch 2
    snapshot = offrl.load_learnable(tmp_path / "run" / "model_10.d3")
    assert algo.grad_step == 10
    np.testing.assert_array_equal(algo.predict(OBSERVATIONS), snapshot.predict(OBSERVATIONS))
    for module, tensors in snapshot.get_state()["modules"].items():
        for key, value in tensors.items():
            torch.testing.assert_close(algo.get_state()["modules"][module][key], value, rtol=0, atol=0)


def test_weights_are_checked_even_when_the_losses_were_finite(tmp_path, monkeypatch):
    """The last update of an epoch can blow the weights up after its loss
    was computed: the save is refused all the same."""
    algo = _config(True, 1e-3).create()
    original = algo.training_step

    def poison_last(batch):
        out = original(batch)
        if algo.grad_step == 4:  # after the last update of epoch 2
            with torch.no_grad():
                next(iter(algo.modules.values())).parameters().__next__().fill_(float("inf"))
        return out

    monkeypatch.setattr(algo, "training_step", poison_last)
    with pytest.raises(NonFiniteLossError, match=r"holds inf at the end of epoch 2 .*no model was saved from this epoch"):
        algo.fit(_dataset(True), 10, 2, experiment_name="run", with_timestamp=False,
                 logger_adapter=FileAdapterFactory(str(tmp_path)), show_progress=False)
    assert sorted(p for p in os.listdir(tmp_path / "run") if p.startswith("model_")) == ["model_2.d3"]
    assert algo.grad_step == 2 and non_finite_weights(algo) is None


def test_non_finite_weights_describes_the_first_bad_tensor():
    algo = _config(True, 1e-3).create()
    algo.build_with_dataset(_dataset(True))
    assert non_finite_weights(algo) is None
    module = next(iter(algo.modules.values()))
    parameter = next(module.parameters())
    with torch.no_grad():
        parameter.view(-1)[3] = float("nan")
    assert "holds nan" in non_finite_weights(algo)
    with torch.no_grad():
        parameter.view(-1)[3] = 1e25  # finite, but its square overflows float32: diverged
    assert "has diverged (largest |w| = 1e+25)" in non_finite_weights(algo)


def test_fit_online_rolls_back_after_divergence_and_saves_no_diverged_model(tmp_path):
    offrl.seed(0)
    algo = DQNConfig(batch_size=4, learning_rate=1e30, encoder_factory=VectorEncoderFactory(hidden_units=[8])).create()
    with pytest.raises(NonFiniteLossError, match="restored to its state at the start of this training run") as info:
        algo.fit_online(Corridor(), n_steps=60, n_steps_per_epoch=10, logger_adapter=FileAdapterFactory(str(tmp_path)),
                        show_progress=False)
    assert info.value.offrl_buffer.transition_count > 0  # the collected steps survive the error
    assert _saved_models_are_finite(tmp_path) == 0
    assert algo.grad_step == 0 and non_finite_weights(algo) is None
    assert np.isfinite(algo.predict_value(np.eye(5, dtype=np.float32), np.ones(5, dtype=np.int64))).all()


def test_non_finite_optimizer_state_counts_as_diverged():
    algo = _config(True, 1e-3).create()
    dataset = _dataset(True)
    algo.fit(dataset, 2, 2, logger_adapter=NoopAdapterFactory(), show_progress=False)
    assert non_finite_weights(algo) is None
    optim = next(iter(algo.optimizers.values()))
    moments = next(iter(getattr(optim, "optim", optim).state.values()))
    moments["exp_avg_sq"].view(-1)[0] = float("inf")
    assert "optimizer" in non_finite_weights(algo) and "exp_avg_sq" in non_finite_weights(algo)


def test_the_weight_check_reads_the_live_tensors_and_the_guard_keeps_a_copy():
    """``state_on_device`` hands out the live tensors (the finiteness check
    copies nothing: on a GPU, copying a large model to the host each epoch
    cost more than its updates), and the rollback copy is independent of
    them: training on changes the weights, not the copy."""
    from offrl.training.checkpoint import StateGuard, _host_copy

    algo = _config(True, 1e-3).create()
    dataset = _dataset(True)
    algo.build_with_dataset(dataset)
    name, module = next(iter(algo.modules.items()))
    key, parameter = next(iter(module.state_dict().items()))
    live = algo.state_on_device()
    assert live["modules"][name][key].data_ptr() == parameter.data_ptr()
    assert algo.get_state()["modules"][name][key].device.type == "cpu"
    guard = StateGuard(algo)
    kept = guard.state["modules"][name][key]
    assert kept.data_ptr() != parameter.data_ptr() and torch.equal(kept, parameter)
    before = kept.clone()
    algo.fit(dataset, 4, 4, logger_adapter=NoopAdapterFactory(), show_progress=False)
    assert not torch.equal(module.state_dict()[key], before)
    assert torch.equal(guard.state["modules"][name][key], before)
    guard.restore()
    assert torch.equal(module.state_dict()[key], before) and algo.grad_step == 0
    # the reused-buffer path (pinned host buffers on a GPU) keeps CPU tensors as plain copies
    buffers: dict = {}
    copied = _host_copy({"w": parameter, "steps": [torch.tensor(3.0)]}, buffers)
    assert copied["w"].data_ptr() != parameter.data_ptr() and torch.equal(copied["w"], parameter)
    assert copied["steps"][0].item() == 3.0 and buffers == {}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="the page-locked buffers are for tensors on a CUDA device")
def test_the_guard_copies_gpu_state_into_reused_page_locked_buffers():
    from offrl.training.checkpoint import _host_copy

    weight = torch.randn(64, 64, device="cuda")
    buffers: dict = {}
    first = _host_copy({"w": weight}, buffers)["w"]
    assert first.device.type == "cpu" and first.is_pinned() and torch.equal(first, weight.cpu())
    weight.add_(1.0)
    second = _host_copy({"w": weight}, buffers)["w"]
    assert second.data_ptr() == first.data_ptr() and torch.equal(second, weight.cpu())
