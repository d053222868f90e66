from __future__ import annotations

import pytest
import torch
from torch import nn

from offrl.models import AdamFactory, DefaultEncoderFactory, GPTAdamWFactory, OptimizerFactory, PixelEncoderFactory, SGDFactory, VectorEncoderFactory
from offrl.models.encoders import compute_output_size


def test_vector_encoder_layers_and_options():
    f = VectorEncoderFactory(hidden_units=[5, 7], activation="tanh", use_batch_norm=True, dropout_rate=0.1)
    enc = f.create((3,))
    kinds = [type(m).__name__ for m in enc.mlp.layers]
    assert kinds == ["Linear", "BatchNorm1d", "Tanh", "Dropout", "Linear", "BatchNorm1d", "Tanh", "Dropout"]
    assert compute_output_size(enc, (3,)) == 7
    assert f.create_with_action((3,), 2)(torch.zeros(4, 3), torch.zeros(4, 2)).shape == (4, 7)
    last = VectorEncoderFactory(hidden_units=[4], exclude_last_activation=True).create((3,))
    assert [type(m).__name__ for m in last.mlp.layers] == ["Linear"]


def test_discrete_action_is_one_hot():
    enc = VectorEncoderFactory(hidden_units=[4]).create_with_action((2,), 3, discrete_action=True)
    x = torch.zeros(2, 2)
    out = enc(x, torch.tensor([[0], [2]]))
    w, b = enc.mlp.layers[0].weight, enc.mlp.layers[0].bias
    expected = torch.relu(torch.stack([w[:, 2] + b, w[:, 4] + b]))
    torch.testing.assert_close(out, expected)


def test_pixel_encoder_nature_dqn():
    enc = PixelEncoderFactory().create((4, 84, 84))
    convs = [m for m in enc.convs if isinstance(m, nn.Conv2d)]
    assert [(c.out_channels, c.kernel_size[0], c.stride[0]) for c in convs] == [(32, 8, 4), (64, 4, 2), (64, 3, 1)]
    assert enc(torch.zeros(2, 4, 84, 84)).shape == (2, 512)
    with pytest.raises(ValueError, match="channels, height, width"):
        PixelEncoderFactory().create((10,))


def test_default_encoder_chooses_by_shape():
    f = DefaultEncoderFactory()
    assert type(f.create((5,))).__name__ == "VectorEncoder"
    assert type(f.create((1, 36, 36))).__name__ == "PixelEncoder"
    tuple_enc = f.create([(5,), (1, 36, 36)])
    assert tuple_enc([torch.zeros(2, 5), torch.zeros(2, 1, 36, 36)]).shape == (2, 256)


@pytest.mark.parametrize("bad", [dict(hidden_units=[]), dict(hidden_units=[0]), dict(activation="nope"), dict(dropout_rate=1.5)])
def test_bad_encoder_params(bad):
    with pytest.raises(ValueError):
        VectorEncoderFactory(**bad)


def test_optimizers_use_fast_kernels_and_clip():
    model = nn.Linear(3, 2)
    opt = AdamFactory(clip_grad_norm=0.5).create(list(model.named_parameters()), lr=1e-3)
    assert opt.optim.defaults["fused"] is True
    rms = OptimizerFactory("RMSprop").create(list(model.named_parameters()), lr=1e-3)
    assert rms.optim.defaults.get("fused") or rms.optim.defaults.get("foreach")
    explicit = OptimizerFactory("Adam", foreach=True).create(list(model.named_parameters()), lr=1e-3)
    assert explicit.optim.defaults["foreach"] is True and not explicit.optim.defaults.get("fused")
    (model(torch.ones(1, 3)) * 100).sum().backward()
    opt.step()
    total = torch.sqrt(sum((p.grad**2).sum() for p in model.parameters()))
    assert total.item() == pytest.approx(0.5, rel=1e-4)
    sgd = SGDFactory(momentum=0.9).create(list(model.named_parameters()), lr=0.1)
    assert isinstance(sgd.optim, torch.optim.SGD) and sgd.optim.defaults["momentum"] == 0.9
    generic = OptimizerFactory(torch.optim.RMSprop, alpha=0.5).create(list(model.named_parameters()), lr=0.1)
    assert generic.optim.defaults["alpha"] == 0.5


def test_gpt_adamw_decays_only_weights():
    model = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4), nn.Linear(4, 1))
    opt = GPTAdamWFactory(weight_decay=0.1).create(list(model.named_parameters()), lr=1e-3)
    decay, no_decay = opt.optim.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(model[0].weight), id(model[2].weight)}


# ------------------------------------------------ factories without @dataclass
import dataclasses  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

import offrl  # noqa: E402
from offrl.models import EncoderFactory  # noqa: E402
from offrl.models.encoders import minimum_image_size, register_encoder_factory  # noqa: E402


class _DocsEncoder(nn.Module):
    def __init__(self, observation_shape, feature_size):
        super().__init__()
        self.fc = nn.Linear(observation_shape[0], feature_size)

    def forward(self, x):
        return torch.relu(self.fc(x))


class _DocsEncoderWithAction(nn.Module):
    def __init__(self, observation_shape, action_size, feature_size):
        super().__init__()
        self.fc = nn.Linear(observation_shape[0] + action_size, feature_size)

    def forward(self, x, action):
        return torch.relu(self.fc(torch.cat([x, action], dim=1)))


class DocsEncoderFactory(EncoderFactory):
    """Written as d3rlpy's documentation writes it: a plain class, no @dataclass."""

    def __init__(self, feature_size, scale=1.0):
        self.feature_size = feature_size
        self.scale = scale

    def create(self, observation_shape):
        return _DocsEncoder(observation_shape, self.feature_size)

    def create_with_action(self, observation_shape, action_size, discrete_action=False):
        return _DocsEncoderWithAction(observation_shape, action_size, self.feature_size)

    @staticmethod
    def get_type():
        return "test_docs_custom"


class ForgetfulEncoderFactory(DocsEncoderFactory):
    """Stores its argument under another name: it cannot be rebuilt."""

    def __init__(self, width):
        self.feature_size = width
        self.scale = 1.0

    @staticmethod
    def get_type():
        return "test_forgetful_custom"


def _continuous_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return offrl.dataset.MDPDataset(rng.normal(size=(n, 3)), rng.uniform(-1, 1, size=(n, 2)), rng.normal(size=n),
                                    np.r_[np.zeros(n - 1), 1])


def test_plain_subclass_is_a_dataclass_instance_as_in_d3rlpy():
    factory = DocsEncoderFactory(16)
    assert dataclasses.is_dataclass(factory) and dataclasses.fields(factory) == ()
    assert factory.to_dict() == {"kind": "encoder", "type": "test_docs_custom", "params": {"feature_size": 16, "scale": 1.0}}
    assert factory.serialize() == '{"feature_size": 16, "scale": 1.0}'
    again = DocsEncoderFactory.deserialize('{"feature_size": 8, "scale": 0.5}')
    assert type(again) is DocsEncoderFactory and (again.feature_size, again.scale) == (8, 0.5)


def test_plain_subclass_fits_saves_and_loads(tmp_path):
    register_encoder_factory(DocsEncoderFactory)
    factory = DocsEncoderFactory(feature_size=16)
    algo = offrl.algos.SACConfig(batch_size=8, actor_encoder_factory=factory, critic_encoder_factory=factory).create()
    data = _continuous_data()
    algo.fit(data, n_steps=2, n_steps_per_epoch=2, logger_adapter=offrl.logging.NoopAdapterFactory(), show_progress=False)
    algo.save(tmp_path / "sac.d3")
    loaded = offrl.load_learnable(tmp_path / "sac.d3")
    rebuilt = loaded.config.actor_encoder_factory
    assert type(rebuilt) is DocsEncoderFactory and rebuilt.feature_size == 16
    x = np.random.default_rng(1).normal(size=(4, 3)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(x), algo.predict(x))


def test_plain_subclass_with_unstored_argument_warns_and_load_names_it():
    register_encoder_factory(ForgetfulEncoderFactory)
    with pytest.warns(UserWarning, match=r"takes 'width' but the instance has no attribute 'width'"):
        record = ForgetfulEncoderFactory(4).to_dict()
    assert record["params"] == {}
    with pytest.raises(ValueError, match=r"no value for \['width'\]"):
        ForgetfulEncoderFactory.from_dict(record)
    with pytest.raises(ValueError, match=r"has no parameters \['depth'\]"):
        DocsEncoderFactory.from_dict({"kind": "encoder", "type": "test_docs_custom", "params": {"feature_size": 2, "depth": 3}})


def test_dataclass_factories_keep_their_fields():
    factory = VectorEncoderFactory(hidden_units=[8])
    assert factory.serialize() == ('{"hidden_units": [8], "activation": "relu", "use_batch_norm": false, "use_layer_norm": false, '
                                   '"dropout_rate": null, "exclude_last_activation": false, "last_activation": null}')
    assert VectorEncoderFactory.deserialize(factory.serialize()) == factory
    assert VectorEncoderFactory.deserialize_from_dict(factory.serialize_to_dict()) == factory
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert PixelEncoderFactory.from_dict(PixelEncoderFactory(feature_size=7).to_dict()) == PixelEncoderFactory(feature_size=7)


# ---------------------------------------------------- images too small for the pixel encoder
@pytest.mark.parametrize("filters,expected", [
    ([[32, 8, 4], [64, 4, 2], [64, 3, 1]], 36),
    ([[16, 3, 1]], 3),
    ([[8, 4, 2], [8, 3, 2]], 8),
])
def test_minimum_image_size(filters, expected):
    assert minimum_image_size(filters) == expected
    layers = [nn.Conv2d(1 if i == 0 else filters[i - 1][0], c, k, s) for i, (c, k, s) in enumerate(filters)]
    net = nn.Sequential(*layers)
    assert net(torch.zeros(1, 1, expected, expected)).shape[-1] == 1
    with pytest.raises(RuntimeError):  # one pixel fewer: torch's own kernel-size error
        net(torch.zeros(1, 1, expected - 1, expected - 1))


def test_small_images_are_refused_at_build_time_with_advice():
    rng = np.random.default_rng(0)
    data = offrl.dataset.MDPDataset(rng.integers(0, 255, size=(32, 3, 8, 8), dtype=np.uint8), rng.integers(0, 2, 32),
                                    rng.normal(size=32), np.r_[np.zeros(31), 1], action_size=2)
    algo = offrl.algos.DQNConfig(batch_size=4).create()
    with pytest.raises(ValueError, match=r"needs images of at least 36x36, got observations of shape \(3, 8, 8\).*VectorEncoderFactory"):
        algo.build_with_dataset(data)
    with pytest.raises(ValueError, match="at least 36x36"):
        PixelEncoderFactory().create((3, 36, 35))
    assert PixelEncoderFactory(filters=[[4, 3, 1]]).create((3, 8, 8))(torch.zeros(2, 3, 8, 8)).shape == (2, 512)
