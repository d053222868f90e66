"""SimBaEncoderFactory: the block structure against a plain computation
from the weights, the batched ensemble against one member at a time
(hypothesis), bad arguments, and use by a discrete and a continuous
algorithm (fit, shapes, save / load, JSON, TorchScript and ONNX export)."""

from __future__ import annotations

import json
from typing import Optional

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import offrl
from offrl.algos import DQNConfig, SACConfig
from offrl.logging import NoopAdapterFactory
from offrl.models import SimBaEncoderFactory
from offrl.serialization import from_json_value


def naive_simba(params: list, h: torch.Tensor, member: Optional[int] = None) -> torch.Tensor:
    """The SimBa stack written out from its parameters in order:
    ``[W_in, b_in, (ln_w, ln_b, W_1, b_1, W_2, b_2) * n_blocks, ln_w, ln_b]``.
    ``member`` picks one member of an ensemble's batched weights
    (``(E, in, out)`` linear weights; ``nn.Linear`` keeps ``(out, in)``)."""

    def linear(x, w, b):
        if member is None:
            return x @ w.T + b
        return x @ w[member] + b[member].reshape(-1)

    def norm(x, w, b):
        if member is not None:
            w, b = w[member].reshape(-1), b[member].reshape(-1)
        return F.layer_norm(x, (x.shape[-1],)) * w + b

    n_blocks = (len(params) - 4) // 6
    x = linear(h, params[0], params[1])
    for k in range(n_blocks):
        ln_w, ln_b, w1, b1, w2, b2 = params[2 + 6 * k : 8 + 6 * k]
        x = x + linear(torch.relu(linear(norm(x, ln_w, ln_b), w1, b1)), w2, b2)
    return norm(x, params[-2], params[-1])


@pytest.mark.parametrize("n_blocks", [0, 1, 3])
def test_encoder_is_residual_blocks_with_layer_norm(n_blocks):
    torch.manual_seed(0)
    factory = SimBaEncoderFactory(feature_size=6, hidden_size=10, n_blocks=n_blocks)
    encoder = factory.create([4])
    with torch.no_grad():
        for p in encoder.parameters():  # layer norms away from their (1, 0) start, so they show
            p.add_(0.3 * torch.randn_like(p))
    x = torch.randn(5, 4)
    params = [p.detach() for p in encoder.parameters()]
    assert len(params) == 2 + 6 * n_blocks + 2
    torch.testing.assert_close(encoder(x), naive_simba(params, x), rtol=1e-5, atol=1e-5)


def test_encoder_with_action_concatenates_the_one_hot_or_continuous_action():
    torch.manual_seed(1)
    factory = SimBaEncoderFactory(feature_size=5, hidden_size=7, n_blocks=2)
    x = torch.randn(4, 3)
    discrete = factory.create_with_action([3], 3, discrete_action=True)
    actions = torch.tensor([[2], [0], [1], [2]])
    params = [p.detach() for p in discrete.parameters()]
    torch.testing.assert_close(discrete(x, actions), naive_simba(params, torch.cat([x, F.one_hot(actions[:, 0], 3).float()], 1)))
    continuous = factory.create_with_action([3], 2)
    a = torch.randn(4, 2)
    params = [p.detach() for p in continuous.parameters()]
    torch.testing.assert_close(continuous(x, a), naive_simba(params, torch.cat([x, a], 1)), rtol=1e-5, atol=1e-5)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 3), n_blocks=st.integers(0, 2), batch=st.integers(1, 6), action_size=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_batched_ensemble_equals_each_member_alone(n, n_blocks, batch, action_size, seed):
    torch.manual_seed(seed)
    factory = SimBaEncoderFactory(feature_size=4, hidden_size=6, n_blocks=n_blocks)
    ensemble = factory.create_ensemble([3], n, action_size=action_size or None)
    with torch.no_grad():
        for p in ensemble.parameters():
            p.add_(0.2 * torch.randn_like(p))
    x = torch.randn(batch, 3)
    a = torch.randn(batch, action_size)
    out = ensemble(x, a) if action_size else ensemble(x)
    assert out.shape == (n, batch, 4)
    params = [p.detach() for p in ensemble.parameters()]
    h = torch.cat([x, a], 1) if action_size else x
    for member in range(n):
        torch.testing.assert_close(out[member], naive_simba(params, h, member), rtol=1e-5, atol=1e-5)


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="feature_size must be a positive int, got 0"):
        SimBaEncoderFactory(feature_size=0)
    with pytest.raises(ValueError, match="n_blocks must be an int >= 0, got -1"):
        SimBaEncoderFactory(n_blocks=-1)
    with pytest.raises(TypeError, match="hidden_size must be an int"):
        SimBaEncoderFactory(hidden_size=2.5)
    with pytest.raises(ValueError, match=r"1-D observations, got shape \[1, 36, 36\]"):
        SimBaEncoderFactory().create([1, 36, 36])


def test_factory_round_trips_through_json():
    factory = SimBaEncoderFactory(feature_size=32, hidden_size=64, n_blocks=2)
    record = json.loads(json.dumps(factory.to_dict()))
    assert record == {"kind": "encoder", "type": "simba", "params": {"feature_size": 32, "hidden_size": 64, "n_blocks": 2}}
    assert SimBaEncoderFactory.from_dict(record) == factory
    assert from_json_value(record) == factory  # by type name, as model files are read


def _dataset(discrete: bool, n: int = 48):
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    actions = rng.integers(0, 2, size=n) if discrete else rng.uniform(-1, 1, size=(n, 2)).astype(np.float32)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[7::8] = 1.0
    return offrl.dataset.MDPDataset(obs, actions, rng.normal(size=n).astype(np.float32), terminals,
                                    action_size=2 if discrete else None), obs


@pytest.mark.parametrize("discrete", [True, False], ids=["dqn", "sac"])
def test_algorithms_fit_save_load_and_export_with_simba(discrete, tmp_path):
    from offrl.export import load_onnx_policy, load_torchscript_policy

    offrl.seed(0)
    dataset, obs = _dataset(discrete)
    encoder = SimBaEncoderFactory(feature_size=16, hidden_size=32, n_blocks=2)
    if discrete:
        config = DQNConfig(batch_size=8, encoder_factory=encoder, n_critics=2)
    else:
        config = SACConfig(batch_size=8, actor_encoder_factory=encoder, critic_encoder_factory=encoder)
    algo = config.create()
    algo.fit(dataset, n_steps=3, n_steps_per_epoch=3, logger_adapter=NoopAdapterFactory(), show_progress=False)
    x = obs[:5]
    actions = algo.predict(x)
    assert actions.shape == ((5,) if discrete else (5, 2))
    values = algo.predict_value(x, actions)
    assert values.shape == (5,) and np.isfinite(values).all()

    algo.save(tmp_path / "model.d3")
    loaded = offrl.load_learnable(tmp_path / "model.d3")
    encoder_field = "encoder_factory" if discrete else "critic_encoder_factory"
    assert getattr(loaded.config, encoder_field) == encoder
    np.testing.assert_array_equal(loaded.predict(x), actions)
    np.testing.assert_array_equal(loaded.predict_value(x, actions), values)

    for name, loader in (("policy.pt", load_torchscript_policy), ("policy.onnx", load_onnx_policy)):
        algo.save_policy(tmp_path / name)
        got = loader(tmp_path / name)(x)
        if discrete:
            np.testing.assert_array_equal(got, actions)
        else:
            np.testing.assert_allclose(got, actions, rtol=1e-5, atol=1e-5)


def _algorithm_configs():
    """Every registered trainable, observation-based algorithm config with
    at least one encoder field (FQE evaluates another algorithm, sequence
    models take contexts: both are covered by the contract suite)."""
    import dataclasses as dc
    import importlib
    import pkgutil

    import offrl.algos
    from offrl.serialization import registered

    for module in pkgutil.iter_modules(offrl.algos.__path__):
        importlib.import_module(f"offrl.algos.{module.name}")
    for name, cls in sorted(registered("algorithm").items()):
        algo_class = cls.algorithm_class()
        if algo_class.evaluates_algorithm or not algo_class.is_trainable or getattr(algo_class, "predicts_from_sequences", False):
            continue
        fields = [f.name for f in dc.fields(cls) if f.name.endswith("encoder_factory")]
        if fields:
            yield name, cls, fields


ENCODER_FIELDS = {name: (cls, fields) for name, cls, fields in _algorithm_configs()}


@pytest.mark.parametrize("name", sorted(ENCODER_FIELDS))
def test_every_algorithm_trains_with_simba_encoders(name):
    from offrl.constants import ActionSpace

    cls, fields = ENCODER_FIELDS[name]

    offrl.seed(0)
    encoder = SimBaEncoderFactory(feature_size=8, hidden_size=16, n_blocks=1)
    algo = cls(batch_size=8, **{f: encoder for f in fields}).create()
    discrete = algo.get_action_type() == ActionSpace.DISCRETE
    dataset, obs = _dataset(discrete)
    algo.fit(dataset, n_steps=2, n_steps_per_epoch=2, logger_adapter=NoopAdapterFactory(), show_progress=False)
    assert algo.predict(obs[:4]).shape == ((4,) if discrete else (4, 2))
