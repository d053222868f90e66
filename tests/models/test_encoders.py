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
    opt = GPTAdamWFactory().create(list(model.named_parameters()), lr=1e-3)
    decay, no_decay = opt.optim.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(model[0].weight), id(model[2].weight)}
