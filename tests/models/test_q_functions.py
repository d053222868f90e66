"""Batched critic ensembles against plain per-member computations."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from offrl.models import DefaultEncoderFactory, IQNQFunctionFactory, MeanQFunctionFactory, QRQFunctionFactory, VectorEncoderFactory
from offrl.models.layers import EnsembleLinear
from offrl.models.q_functions import QFunction, quantile_huber_loss


@settings(max_examples=30, deadline=None)
@given(e=st.integers(1, 4), b=st.integers(1, 6), i=st.integers(1, 5), o=st.integers(1, 5), shared=st.booleans())
def test_ensemble_linear_equals_member_loop(e, b, i, o, shared):
    layer = EnsembleLinear(e, i, o)
    x = torch.randn(b, i) if shared else torch.randn(e, b, i)
    out = layer(x)
    for k in range(e):
        xk = x if shared else x[k]
        expected = xk @ layer.weight[k] + layer.bias[k, 0]
        torch.testing.assert_close(out[k], expected, rtol=1e-5, atol=1e-5)


def _member_mlp(q: QFunction, k: int, x: torch.Tensor) -> torch.Tensor:
    """Member k of a vector-encoder ensemble, computed layer by layer."""
    h = x
    for layer in q.encoder.mlp.layers:
        if isinstance(layer, EnsembleLinear):
            h = h @ layer.weight[k] + layer.bias[k, 0]
        else:
            h = layer(h)
    return h @ q.head.weight[k] + q.head.bias[k, 0]


@pytest.mark.parametrize("discrete", [True, False])
def test_mean_q_ensemble_equals_per_member(discrete):
    torch.manual_seed(0)
    q = MeanQFunctionFactory().create(VectorEncoderFactory(hidden_units=[7, 5]), (3,), 2, 3, discrete)
    x = torch.randn(4, 3)
    if discrete:
        out = q.expected(x)
        for k in range(3):
            torch.testing.assert_close(out[k], _member_mlp(q, k, x), rtol=1e-5, atol=1e-5)
    else:
        a = torch.randn(4, 2)
        out = q.expected(x, a)
        for k in range(3):
            torch.testing.assert_close(out[k], _member_mlp(q, k, torch.cat([x, a], dim=1)), rtol=1e-5, atol=1e-5)


def test_members_are_initialised_differently():
    q = MeanQFunctionFactory().create(VectorEncoderFactory(), (3,), 2, 2, True)
    out = q.expected(torch.randn(5, 3))
    assert not torch.allclose(out[0], out[1])


@settings(max_examples=40, deadline=None)
@given(e=st.integers(1, 3), b=st.integers(1, 4), n=st.integers(1, 5), m=st.integers(1, 5), seed=st.integers(0, 10_000))
def test_quantile_huber_loss_equals_naive_loop(e, b, n, m, seed):
    g = torch.Generator().manual_seed(seed)
    pred = torch.randn(e, b, n, generator=g) * 2
    target = torch.randn(b, m, generator=g) * 2
    taus = torch.rand(b, n, generator=g)
    weights = torch.rand(b, generator=g)
    got = quantile_huber_loss(pred, target, taus, weights).item()
    total = 0.0
    for k in range(e):
        per_batch = []
        for i in range(b):
            s = 0.0
            for j in range(n):
                for t in range(m):
                    u = float(target[i, t] - pred[k, i, j])
                    huber = 0.5 * u * u if abs(u) < 1 else abs(u) - 0.5
                    s += abs(float(taus[i, j]) - (1.0 if u < 0 else 0.0)) * huber / m
            per_batch.append(s * float(weights[i]))
        total += sum(per_batch) / b
    assert got == pytest.approx(total, rel=1e-5, abs=1e-6)


def test_reduce_min_picks_member_with_lowest_mean():
    dist = torch.tensor([[[1.0, 5.0], [0.0, 0.0]], [[2.0, 2.0], [3.0, -1.0]]])  # (E=2, B=2, N=2)
    out = QFunction.reduce(dist, "min")
    torch.testing.assert_close(out, torch.tensor([[2.0, 2.0], [0.0, 0.0]]))
    torch.testing.assert_close(QFunction.reduce(dist, "max"), torch.tensor([[1.0, 5.0], [3.0, -1.0]]))
    scalar = torch.tensor([[[1.0], [4.0]], [[2.0], [-3.0]]])
    torch.testing.assert_close(QFunction.reduce(scalar, "min"), torch.tensor([[1.0], [-3.0]]))
    with pytest.raises(ValueError):
        QFunction.reduce(dist, "median")


@pytest.mark.parametrize("factory", [MeanQFunctionFactory(), QRQFunctionFactory(n_quantiles=5), IQNQFunctionFactory(n_quantiles=6, n_greedy_quantiles=4, embed_size=8)])
@pytest.mark.parametrize("discrete", [True, False])
def test_shapes_for_every_factory(factory, discrete):
    q = factory.create(VectorEncoderFactory(hidden_units=[8]), (3,), 2, 2, discrete)
    x = torch.randn(5, 3)
    a = torch.randint(0, 2, (5, 1)) if discrete else torch.randn(5, 2)
    n = {"mean": 1, "qr": 5, "iqn": 6}[factory.get_type()]
    expected = q.expected(x) if discrete else q.expected(x, a)
    assert expected.shape == ((2, 5, 2) if discrete else (2, 5, 1))
    dist, taus = q.at_action(x, a)
    assert dist.shape == (2, 5, n)
    loss = q.loss(dist, dist.detach().mean(0) + 1.0, taus)
    loss.backward()
    assert all(p.grad is not None for p in q.parameters() if p.requires_grad)


def test_expected_is_mean_of_quantiles_at_action():
    q = QRQFunctionFactory(n_quantiles=4).create(VectorEncoderFactory(hidden_units=[8]), (3,), 3, 2, True)
    x = torch.randn(6, 3)
    a = torch.randint(0, 3, (6, 1))
    dist, _ = q.at_action(x, a)
    values = q.expected(x).gather(2, a.view(1, -1, 1).expand(2, -1, 1)).squeeze(2)
    torch.testing.assert_close(dist.mean(-1), values, rtol=1e-5, atol=1e-6)


def test_tuple_and_pixel_ensembles():
    q = MeanQFunctionFactory().create(DefaultEncoderFactory(), [(3,), (1, 36, 36)], 2, 2, False)
    x = [torch.randn(4, 3), torch.rand(4, 1, 36, 36)]
    assert q.expected(x, torch.randn(4, 2)).shape == (2, 4, 1)
    q = MeanQFunctionFactory().create(DefaultEncoderFactory(), (1, 36, 36), 3, 2, True)
    assert q.expected(torch.rand(4, 1, 36, 36)).shape == (2, 4, 3)
