"""The written-out passes of :mod:`offrl.models.plain_mlp` in a bf16-mixed
step against the same network's forward and autograd backward under CPU
autocast: the same products in the same dtypes, layer by layer (narrow
layers in float32, :func:`offrl.models.layers.narrow_inputs`)."""

from __future__ import annotations

import pytest
import torch

from offrl.models import MeanQFunctionFactory, VectorEncoderFactory
from offrl.models.layers import float32_head
from offrl.models.plain_mlp import plain_backward, plain_forward, plain_layers, plain_products
from offrl.models.policies import CategoricalPolicy


def _network(ensemble: bool):
    """A 5 -> 8 -> 8 -> 64 -> 3 ReLU MLP: two narrow hidden layers in a row,
    then a wide one; an ensemble of two critics or one policy."""
    torch.manual_seed(0)
    factory = VectorEncoderFactory([8, 8, 64])
    if ensemble:
        q = MeanQFunctionFactory().create(factory, (5,), 3, 2, discrete=True)
        return q.encoder, q.head, list(q.parameters())
    encoder = factory.create((5,))
    policy = CategoricalPolicy(encoder, 64, 3)
    return policy.encoder, policy.fc, list(policy.parameters())


@pytest.mark.parametrize("ensemble", [False, True])
@pytest.mark.parametrize("rows", [6, 700])
def test_written_out_bf16_passes_equal_autocasts_forward_and_backward(ensemble, rows):
    """At 6 rows the three hidden layers with 5 and 8 inputs run float32 and
    the 64-input one bf16; at 700 rows (3,500 / 5,600 input elements) the
    first layer float32, the second bf16. The outputs
    equal autocast-and-autograd's exactly, every parameter's gradient to
    float32 rounding (a one-network layer's weight gradient is one product
    in another arrangement, ``layers.linear_backward``; a bf16-rounded
    value where float32 belongs would be off by ~1e-3)."""
    encoder, head, params = _network(ensemble)
    x = torch.randn(rows, 5)
    shape = (2, rows, 3) if ensemble else (rows, 3)
    grad_out = torch.randn(*shape)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = float32_head(head, encoder(x))
    out.backward(grad_out)
    expected = [p.grad.clone() for p in params]
    layers = plain_layers(encoder, head, ensemble=ensemble)
    assert layers is not None
    with torch.autocast("cpu", dtype=torch.bfloat16), plain_products(torch.bfloat16), torch.no_grad():
        inputs, got = plain_forward(layers, x)
        grads = plain_backward(layers, inputs, grad_out)
    assert got.dtype == torch.float32 and torch.equal(got, out.detach())
    # plain_backward lists weight then bias per layer; parameters() lists them in the same order here
    by_id = {id(t): g for (w, b), (gw, gb) in zip(layers, zip(grads[0::2], grads[1::2])) for t, g in ((w, gw), (b, gb))}
    for p, e in zip(params, expected):
        g = by_id[id(p)]
        assert g.dtype == torch.float32 and g.shape == p.shape
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6, msg=str(tuple(p.shape)))
