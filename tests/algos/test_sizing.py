"""Config sizes checked against memory before anything is allocated
(offrl/algos/_sizing.py): networks before they are built, one training
step at batch_size before the first step."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import offrl
from offrl._random import get_rng
from offrl.algos import DecisionTransformerConfig, DQNConfig, SACConfig, _sizing
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory


def _discrete(n=40):
    rng = np.random.default_rng(0)
    return MDPDataset(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, n), rng.normal(size=n),
                      (np.arange(n) % 10 == 9).astype(np.float32))


def _continuous(n=40):
    rng = np.random.default_rng(1)
    return MDPDataset(rng.normal(size=(n, 3)).astype(np.float32), rng.uniform(-1, 1, (n, 2)), rng.normal(size=n),
                      (np.arange(n) % 10 == 9).astype(np.float32))


def test_ten_million_critics_are_refused_before_building_naming_the_field():
    algo = DQNConfig(n_critics=10_000_000).create()
    with pytest.raises(ValueError, match=r"DQN: the config declares networks of [\d,]+ numbers \(n_critics=10000000, "
                                         r".* TB with gradients and optimizer state; this machine has .* available"):
        algo.build_with_dataset(_discrete())  # tried a 40 GB allocation and died in torch before
    assert not algo.is_built


def test_the_estimate_is_the_networks_real_size(monkeypatch):
    config = SACConfig()
    built = config.create()
    built.create_impl((3,), 2)
    numbers = sum(t.numel() for m in built.modules.values() for t in m.state_dict().values())
    need = numbers * 4 * 4  # float32 weights, gradients, two Adam moments
    monkeypatch.setattr(_sizing, "available_memory", lambda: need - 1)
    with pytest.raises(ValueError, match=f"networks of {numbers:,} numbers"):
        config.create().create_impl((3,), 2)
    monkeypatch.setattr(_sizing, "available_memory", lambda: need)
    config.create().create_impl((3,), 2)  # exactly enough is enough


def test_the_checks_draw_no_random_number(monkeypatch):
    def run():
        offrl.seed(3)  # offrl's sampler, numpy, Python and torch
        algo = SACConfig(batch_size=8).create()
        algo.fit(_continuous(), n_steps=2, show_progress=False, logger_adapter=NoopAdapterFactory())
        weights = [t.clone() for m in algo.modules.values() for t in m.state_dict().values()]
        return weights, torch.rand(3), np.concatenate([get_rng().random(3), np.random.rand(3)])

    checked = run()
    monkeypatch.setattr(_sizing, "check_networks_fit", lambda *a: None)
    monkeypatch.setattr(_sizing, "check_training_step_fits", lambda *a: None)
    unchecked = run()
    for a, b in zip(checked[0], unchecked[0]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    torch.testing.assert_close(checked[1], unchecked[1], rtol=0, atol=0)
    np.testing.assert_array_equal(checked[2], unchecked[2])


def test_a_huge_batch_is_refused_before_the_first_step():
    algo = DQNConfig(batch_size=100_000_000).create()
    with pytest.raises(ValueError, match=r"DQN: one training step needs about .* GB \(activations, gradients and "
                                         r"optimizer state at batch_size=100000000, .*\); this machine has"):
        algo.fit(_discrete(), n_steps=2, show_progress=False)  # sampled 1.6 GB then asked torch for 102 GB before
    assert algo.grad_step == 0


@pytest.mark.parametrize("config, dataset", [(DQNConfig(), _discrete), (SACConfig(), _continuous),
                                             (DecisionTransformerConfig(context_size=4), _continuous)])
def test_the_step_estimate_grows_with_the_batch(config, dataset):
    data = dataset()
    algo = config.create()
    algo.build_with_dataset(data)
    one, two, three = (_sizing.training_step_bytes(algo, data, rows) for rows in (1024, 2048, 3072))
    per_1024 = two - one
    assert per_1024 >= 1024 * 4 * 4  # at least a few float32 activations a row
    assert abs((three - two) - per_1024) <= 0.05 * per_1024  # affine in the rows: weights' state plus rows x activations


def test_a_long_context_is_refused(monkeypatch):
    data = _continuous()
    algo = DecisionTransformerConfig(context_size=4).create()
    algo.build_with_dataset(data)
    need = _sizing.training_step_bytes(algo, data)
    monkeypatch.setattr(_sizing, "available_memory", lambda: need - 1)
    with pytest.raises(ValueError, match="DecisionTransformer: one training step needs about .* context_size=4"):
        algo.fit(data, n_steps=1, show_progress=False)


def test_a_cuda_device_is_checked_against_its_own_free_memory(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (3 * 10**9, 80 * 10**9))
    assert _sizing._device_memory(torch.device("cuda:1")) == (3 * 10**9, "cuda:1 has")
    assert _sizing._device_memory(torch.device("cpu"))[1] == "this machine has"
    assert _sizing._device_memory(torch.device("meta")) == (None, "")
