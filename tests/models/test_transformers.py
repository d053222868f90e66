"""Transformer blocks of the Decision Transformer family: attention is causal
and equals a plain masked-softmax loop, position encodings pick the right
embeddings, and the token order lets a step see its return-to-go and
observation but not its own action."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from offrl.constants import PositionEncodingType
from offrl.models import VectorEncoderFactory
from offrl.models.encoders import compute_output_size
from offrl.models.transformers import (
    CausalSelfAttention,
    ContinuousDecisionTransformer,
    DiscreteDecisionTransformer,
    GlobalPositionEncoding,
    GPT2,
    SimplePositionEncoding,
    create_position_encoding,
)


def _naive_attention(attn: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """Causal attention written as loops over batch, heads and query tokens."""
    batch, tokens, hidden = x.shape
    heads = attn.num_heads
    size = hidden // heads
    qkv = x @ attn.qkv.weight.T + attn.qkv.bias
    q, k, v = qkv[..., :hidden], qkv[..., hidden:2 * hidden], qkv[..., 2 * hidden:]
    out = torch.zeros(batch, tokens, hidden, dtype=x.dtype)
    for b in range(batch):
        for h in range(heads):
            cols = slice(h * size, (h + 1) * size)
            for i in range(tokens):
                scores = [float(q[b, i, cols] @ k[b, j, cols]) / math.sqrt(size) for j in range(i + 1)]
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                for j, w in enumerate(weights):
                    out[b, i, cols] += (w / total) * v[b, j, cols]
    return out @ attn.proj.weight.T + attn.proj.bias


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 3), tokens=st.integers(1, 7), heads=st.sampled_from([1, 2, 4]), seed=st.integers(0, 10_000))
def test_attention_equals_masked_softmax_loop(batch, tokens, heads, seed):
    torch.manual_seed(seed)
    attn = CausalSelfAttention(8, heads, attn_dropout=0.0, resid_dropout=0.0).double().eval()
    x = torch.randn(batch, tokens, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(attn(x), _naive_attention(attn, x), rtol=1e-9, atol=1e-9)


@settings(max_examples=25, deadline=None)
@given(tokens=st.integers(1, 9), picks=st.lists(st.integers(0, 8), min_size=1, max_size=9), layers=st.integers(1, 3),
       seed=st.integers(0, 10_000))
def test_outputs_at_chosen_positions_equal_the_full_computation(tokens, picks, layers, seed):
    """``GPT2(x, index)`` (the last block computed at ``index`` only) equals
    the full stack's outputs at ``index``."""
    index = torch.tensor(sorted({p % tokens for p in picks}))
    torch.manual_seed(seed)
    gpt = GPT2(8, 2, layers, 0.0, 0.0, 0.0, "relu").eval()
    x = torch.randn(2, tokens, 8)
    with torch.no_grad():
        torch.testing.assert_close(gpt(x, index), gpt(x)[:, index], rtol=1e-5, atol=1e-6)


def test_attention_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="num_heads=3"):
        CausalSelfAttention(8, 3, 0.0, 0.0)


@settings(max_examples=20, deadline=None)
@given(tokens=st.integers(2, 9), changed=st.integers(0, 8), seed=st.integers(0, 10_000))
def test_gpt_is_causal(tokens, changed, seed):
    """Changing token ``changed`` leaves every earlier output unchanged and
    changes that token's own output."""
    changed = changed % tokens
    torch.manual_seed(seed)
    gpt = GPT2(8, 2, 2, 0.0, 0.0, 0.0, "gelu").eval()
    x = torch.randn(2, tokens, 8)
    y = x.clone()
    y[:, changed] += torch.randn(2, 8)
    with torch.no_grad():
        a, b = gpt(x), gpt(y)
    torch.testing.assert_close(a[:, :changed], b[:, :changed], rtol=1e-6, atol=1e-6)
    assert not torch.allclose(a[:, changed], b[:, changed])


def test_simple_position_encoding_is_the_timestep_embedding():
    encoding = SimplePositionEncoding(4, max_timestep=10)
    timesteps = torch.tensor([[0, 3, 10], [5, 6, 7]])
    out = encoding(timesteps)
    for b in range(2):
        for i in range(3):
            torch.testing.assert_close(out[b, i], encoding.embed.weight[timesteps[b, i]])
    with pytest.raises(IndexError):
        encoding(torch.tensor([[11]]))


def test_global_position_encoding_is_window_start_plus_position_in_window():
    torch.manual_seed(0)
    encoding = GlobalPositionEncoding(4, max_timestep=10, context_size=5)
    with torch.no_grad():
        encoding.block_embed.normal_()
    timesteps = torch.tensor([[4, 5, 6], [0, 1, 2]])
    out = encoding(timesteps)
    for b in range(2):
        for i in range(3):
            expected = encoding.global_embed.weight[timesteps[b, 0]] + encoding.block_embed[0, i]
            torch.testing.assert_close(out[b, i], expected)


def test_create_position_encoding_by_kind():
    assert isinstance(create_position_encoding(PositionEncodingType.SIMPLE, 4, 10, 5), SimplePositionEncoding)
    assert isinstance(create_position_encoding(PositionEncodingType.GLOBAL, 4, 10, 5), GlobalPositionEncoding)
    with pytest.raises(ValueError, match="position_encoding_type"):
        create_position_encoding("simple", 4, 10, 5)


def _continuous(kind=PositionEncodingType.SIMPLE):
    torch.manual_seed(0)
    encoder = VectorEncoderFactory(hidden_units=[8]).create((3,))
    hidden = compute_output_size(encoder, (3,))
    return ContinuousDecisionTransformer(encoder, hidden, create_position_encoding(kind, hidden, 20, 6), 2,
                                         num_heads=2, num_layers=2, attn_dropout=0.0, resid_dropout=0.0,
                                         embed_dropout=0.0, activation_type="relu").eval()


def _discrete(kind=PositionEncodingType.GLOBAL):
    torch.manual_seed(0)
    encoder = VectorEncoderFactory(hidden_units=[8]).create((3,))
    hidden = compute_output_size(encoder, (3,))
    with torch.no_grad():
        position = create_position_encoding(kind, hidden, 20, 6)
        if kind == PositionEncodingType.GLOBAL:
            position.block_embed.normal_()
    return DiscreteDecisionTransformer(encoder, hidden, position, 3, num_heads=2, num_layers=2, attn_dropout=0.0,
                                       resid_dropout=0.0, embed_dropout=0.0, activation_type="gelu",
                                       embed_activation_type="tanh").eval()


def _window(discrete: bool, length: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(2, length, 3, generator=g)
    actions = torch.randint(0, 3, (2, length, 1), generator=g) if discrete else torch.rand(2, length, 2, generator=g) * 2 - 1
    rtg = torch.randn(2, length, 1, generator=g)
    timesteps = torch.arange(length).repeat(2, 1) + torch.tensor([[0], [7]])
    return obs, actions, rtg, timesteps


@pytest.mark.parametrize("discrete", [False, True])
@pytest.mark.parametrize("kind", list(PositionEncodingType))
def test_step_sees_its_return_and_observation_but_not_its_action(discrete, kind):
    model = _discrete(kind) if discrete else _continuous(kind)
    obs, actions, rtg, timesteps = _window(discrete)
    with torch.no_grad():
        base = model(obs, actions, rtg, timesteps)
        assert base.shape == (2, 5, 3 if discrete else 2)
        t = 2
        other_actions = actions.clone()
        other_actions[:, t] = (actions[:, t] + 1) % 3 if discrete else -actions[:, t]
        moved = model(obs, other_actions, rtg, timesteps)
        # the action of step t is read only from step t + 1 on
        torch.testing.assert_close(moved[:, : t + 1], base[:, : t + 1], rtol=1e-6, atol=1e-6)
        assert not torch.allclose(moved[:, t + 1], base[:, t + 1])
        for field in ("obs", "rtg"):
            o, r = obs.clone(), rtg.clone()
            (o if field == "obs" else r)[:, t] += 1.0
            out = model(o, actions, r, timesteps)
            torch.testing.assert_close(out[:, :t], base[:, :t], rtol=1e-6, atol=1e-6)
            assert not torch.allclose(out[:, t], base[:, t]), field


@pytest.mark.parametrize("discrete", [False, True])
def test_last_only_equals_the_last_step_of_the_full_output(discrete):
    model = _discrete() if discrete else _continuous()
    with torch.no_grad():
        for length in (1, 3, 6):
            obs, actions, rtg, timesteps = _window(discrete, length=length)
            full = model(obs, actions, rtg, timesteps)
            last = model(obs, actions, rtg, timesteps, last_only=True)
            assert last.shape == (2, 1, full.shape[-1])
            torch.testing.assert_close(last[:, 0], full[:, -1], rtol=1e-5, atol=1e-6)


def test_continuous_output_is_in_the_unit_box_and_discrete_gives_logits():
    obs, actions, rtg, timesteps = _window(False)
    with torch.no_grad():
        out = _continuous()(obs * 100, actions, rtg * 100, timesteps)
    assert (out.abs() <= 1).all()
    obs, actions, rtg, timesteps = _window(True)
    with torch.no_grad():
        logits = _discrete()(obs, actions[..., 0], rtg, timesteps)  # (B, L) indices work too
        again = _discrete()(obs, actions, rtg, timesteps)
    torch.testing.assert_close(logits, again)


def test_tuple_observations_are_encoded_per_step():
    from offrl.models import DefaultEncoderFactory

    torch.manual_seed(0)
    shapes = [(3,), (1, 36, 36)]
    encoder = DefaultEncoderFactory().create(shapes)
    hidden = compute_output_size(encoder, shapes)
    model = ContinuousDecisionTransformer(encoder, hidden, SimplePositionEncoding(hidden, 10), 2, 1, 1, 0.0, 0.0, 0.0,
                                          "relu").eval()
    obs = [torch.randn(2, 4, 3), torch.rand(2, 4, 1, 36, 36)]
    _, actions, rtg, timesteps = _window(False, length=4)
    with torch.no_grad():
        out = model(obs, actions, rtg, timesteps)
        single = model([o[1:] for o in obs], actions[1:], rtg[1:], timesteps[1:])
    assert out.shape == (2, 4, 2)
    np.testing.assert_allclose(out[1:].numpy(), single.numpy(), rtol=1e-5, atol=1e-6)


def test_gpt_initialisation():
    torch.manual_seed(0)
    model = _discrete()
    for name, p in model.gpt.named_parameters():
        if name.endswith("bias"):
            assert float(p.detach().abs().max()) == 0.0, name
        elif p.dim() == 2:
            assert abs(float(p.detach().std()) - 0.02) < 0.002, name
        else:  # layer norm weights
            assert torch.equal(p, torch.ones_like(p)), name
    assert abs(float(model.action_embed.weight.detach().std()) - 0.02) < 0.005
    assert abs(float(model.position_encoding.global_embed.weight.detach().std()) - 0.02) < 0.002
    # the observation encoder keeps PyTorch's default initialisation
    assert float(model.encoder.mlp.layers[0].weight.detach().std()) > 0.1
