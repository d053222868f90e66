from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from offrl.dataset import MDPDataset
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
from offrl.serialization import from_json_value


@pytest.fixture
def dataset():
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(50, 3)) * [1.0, 5.0, 0.1] + [0.0, 10.0, -3.0]
    actions = rng.uniform(-2, 4, size=(50, 2))
    rewards = rng.normal(size=50)
    terminals = np.zeros(50)
    terminals[[9, 29, 49]] = 1
    return MDPDataset(obs, actions, rewards, terminals)


def test_standard_observation_scaler(dataset):
    obs = dataset.to_arrays()["observations"].astype(np.float64)
    s = StandardObservationScaler().fit(dataset)
    x = torch.tensor(obs[:4], dtype=torch.float32)
    expected = (obs[:4] - obs.mean(0)) / (obs.std(0) + 1e-3)
    np.testing.assert_allclose(s.transform(x).numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(s.reverse_transform(s.transform(x)).numpy(), obs[:4], rtol=1e-5, atol=1e-4)


def test_min_max_observation_scaler(dataset):
    obs = dataset.to_arrays()["observations"].astype(np.float64)
    s = MinMaxObservationScaler().fit(dataset)
    out = s.transform(torch.tensor(obs, dtype=torch.float32)).numpy()
    np.testing.assert_allclose(out.min(0), -1.0, atol=1e-6)
    np.testing.assert_allclose(out.max(0), 1.0, atol=1e-6)
    constant = MinMaxObservationScaler(minimum=[1.0], maximum=[1.0])
    assert constant.transform(torch.tensor([[1.0]])).item() == -1.0


def test_pixel_scaler():
    s = PixelObservationScaler()
    x = torch.tensor([[0, 255, 51]], dtype=torch.uint8)
    torch.testing.assert_close(s.transform(x), torch.tensor([[0.0, 1.0, 0.2]]))


def test_min_max_action_scaler(dataset):
    actions = dataset.to_arrays()["actions"]
    s = MinMaxActionScaler().fit(dataset)
    t = s.transform(torch.tensor(actions))
    assert t.min().item() == pytest.approx(-1.0) and t.max().item() == pytest.approx(1.0)
    torch.testing.assert_close(s.reverse_transform(t), torch.tensor(actions), atol=1e-5, rtol=1e-5)
    explicit = MinMaxActionScaler(minimum=[0.0, 10.0], maximum=[1.0, 20.0])
    torch.testing.assert_close(explicit.reverse_transform(torch.tensor([[-1.0, 1.0]])), torch.tensor([[0.0, 20.0]]))


def test_reward_scalers(dataset):
    r = dataset.to_arrays()["rewards"][:, 0].astype(np.float64)
    x = torch.tensor(r[:5, None], dtype=torch.float32)
    cases = [
        (MinMaxRewardScaler(multiplier=2.0).fit(dataset), (r[:5] - r.min()) / (r.max() - r.min()) * 2.0),
        (StandardRewardScaler().fit(dataset), (r[:5] - r.mean()) / (r.std() + 1e-3)),
        (ClipRewardScaler(-0.5, 0.5, multiplier=3.0), np.clip(r[:5], -0.5, 0.5) * 3.0),
        (MultiplyRewardScaler(0.1), r[:5] * 0.1),
        (ConstantShiftRewardScaler(-1.0), r[:5] - 1.0),
    ]
    returns = dataset.compute_returns()
    cases.append((ReturnBasedRewardScaler().fit(dataset), r[:5] / (returns.max() - returns.min())))
    for scaler, expected in cases:
        np.testing.assert_allclose(scaler.transform(x).numpy()[:, 0], expected, rtol=1e-5, atol=1e-6, err_msg=type(scaler).__name__)


def test_json_round_trip_keeps_statistics(dataset):
    for scaler in [StandardObservationScaler().fit(dataset), MinMaxActionScaler().fit(dataset), ClipRewardScaler(low=-1.0), StandardRewardScaler(mean=1.0, std=2.0, multiplier=3.0)]:
        data = json.loads(json.dumps(scaler.to_dict()))
        rebuilt = from_json_value(data)
        assert rebuilt == scaler
        assert rebuilt.built == scaler.built


def test_deepcopy_is_independent(dataset):
    s = StandardObservationScaler()
    fitted = copy.deepcopy(s).fit(dataset)
    assert fitted.built and not s.built


def test_unfitted_scaler_errors():
    with pytest.raises(RuntimeError, match="not fitted"):
        StandardObservationScaler().transform(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="both mean and std"):
        StandardObservationScaler(mean=[0.0])
    with pytest.raises(ValueError, match="nan"):
        StandardObservationScaler(mean=[np.nan], std=[1.0])
    with pytest.raises(ValueError, match="low"):
        ClipRewardScaler(low=1.0, high=0.0)


def test_tuple_observation_scaler():
    rng = np.random.default_rng(1)
    vec = rng.normal(size=(20, 2)) * 3 + 1
    img = rng.integers(0, 256, size=(20, 1, 4, 4), dtype=np.uint8)
    ds = MDPDataset([vec, img], rng.normal(size=(20, 1)), np.zeros(20), np.r_[np.zeros(19), 1])
    s = TupleObservationScaler([StandardObservationScaler(), PixelObservationScaler()]).fit(ds)
    out = s.transform([torch.tensor(vec, dtype=torch.float32), torch.tensor(img)])
    np.testing.assert_allclose(out[0].numpy(), (vec - vec.mean(0)) / (vec.std(0) + 1e-3), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(out[1].numpy(), img / 255.0, rtol=1e-5)
    rebuilt = from_json_value(json.loads(json.dumps(s.to_dict())))
    out2 = rebuilt.transform([torch.tensor(vec, dtype=torch.float32), torch.tensor(img)])
    torch.testing.assert_close(out2[0], out[0])
    with pytest.raises(ValueError, match="TupleObservationScaler"):
        StandardObservationScaler().fit(ds)


def test_fit_with_env():
    import gymnasium

    env = gymnasium.make("Pendulum-v1")
    s = MinMaxActionScaler().fit_with_env(env)
    np.testing.assert_allclose(s.minimum, [-2.0])
    np.testing.assert_allclose(s.maximum, [2.0])
    o = MinMaxObservationScaler().fit_with_env(env)
    np.testing.assert_allclose(o.maximum, [1.0, 1.0, 8.0])


def test_transform_methods_take_x_as_d3rlpy_names_it():
    import inspect

    import offrl.preprocessing as P

    scalers = [getattr(P, n) for n in dir(P) if n.endswith("Scaler") and isinstance(getattr(P, n), type)]
    assert len(scalers) > 10
    for cls in scalers:
        for name in ("transform", "reverse_transform", "transform_numpy", "reverse_transform_numpy"):
            method = getattr(cls, name, None)
            if method is not None:  # d3rlpy 2.8.1: transform(self, x) on every scaler
                assert list(inspect.signature(method).parameters)[1:] == ["x"], (cls.__name__, name)
