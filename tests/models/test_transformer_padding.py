"""Front padding of trajectory windows is invisible to the real steps.

A window that starts before its episode is front-padded (slicers) and
trained on with its step masks: a real step's output must equal its output
in the window without the padding (what the stateful wrapper and ``predict``
feed at an episode's first steps), whatever the padding holds.
"""

import pytest
import torch

from offrl.constants import PositionEncodingType
from offrl.models.encoders import VectorEncoderFactory
from offrl.models.transformers import (ContinuousDecisionTransformer, DiscreteDecisionTransformer,
                                       GlobalPositionEncoding, SimplePositionEncoding, create_position_encoding,
                                       padded_causal_mask)

HIDDEN, OBS, ACTIONS, CONTEXT = 8, 3, 2, 5


def _model(discrete: bool, kind: PositionEncodingType) -> torch.nn.Module:
    torch.manual_seed(0)
    encoder = VectorEncoderFactory(hidden_units=[HIDDEN]).create((OBS,))
    position = create_position_encoding(kind, HIDDEN, 50, CONTEXT)
    args = (encoder, HIDDEN, position, 3 if discrete else ACTIONS, 2, 2, 0.0, 0.0, 0.0, "relu")
    model = DiscreteDecisionTransformer(*args, "tanh") if discrete else ContinuousDecisionTransformer(*args)
    return model.eval()


def _padded_batch(discrete: bool, pads=(0, 2, 4)):
    """Windows of CONTEXT steps, window b front-padded by pads[b] steps
    holding random junk (not zeros: nothing may depend on them)."""
    g = torch.Generator().manual_seed(1)
    b = len(pads)
    obs = torch.randn(b, CONTEXT, OBS, generator=g)
    actions = (torch.randint(0, 3, (b, CONTEXT, 1), generator=g) if discrete
               else torch.rand(b, CONTEXT, ACTIONS, generator=g) * 2 - 1)
    rtg = torch.randn(b, CONTEXT, 1, generator=g) * 5
    starts = torch.tensor([7, 0, 0])[:b]
    steps = starts[:, None] + torch.arange(CONTEXT)[None, :] - torch.tensor(pads)[:, None]
    masks = (torch.arange(CONTEXT)[None, :] >= torch.tensor(pads)[:, None]).float()
    steps = torch.where(masks > 0, steps, torch.randint(0, 50, steps.shape, generator=g))
    return obs, actions, rtg, steps, masks, pads


@pytest.mark.parametrize("discrete", [False, True])
@pytest.mark.parametrize("kind", [PositionEncodingType.SIMPLE, PositionEncodingType.GLOBAL])
def test_real_steps_equal_the_window_without_padding(discrete, kind):
    model = _model(discrete, kind)
    obs, actions, rtg, steps, masks, pads = _padded_batch(discrete)
    with torch.no_grad():
        full = model(obs, actions, rtg, steps, masks=masks)
        last = model(obs, actions, rtg, steps, last_only=True, masks=masks)
        for b, pad in enumerate(pads):
            alone = model(obs[b:b + 1, pad:], actions[b:b + 1, pad:], rtg[b:b + 1, pad:], steps[b:b + 1, pad:])
            torch.testing.assert_close(full[b, pad:], alone[0], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(last[b, -1], alone[0, -1], rtol=1e-5, atol=1e-5)
        # without the masks the padding leaks in (what training did before)
        leaky = model(obs, actions, rtg, steps)
        assert not torch.allclose(leaky[1, 2:], full[1, 2:], atol=1e-4)


@pytest.mark.parametrize("discrete", [False, True])
def test_padding_contents_never_reach_a_real_step_or_the_gradient(discrete):
    model = _model(discrete, PositionEncodingType.SIMPLE).train()  # dropout is 0: deterministic
    obs, actions, rtg, steps, masks, pads = _padded_batch(discrete)
    out = model(obs, actions, rtg, steps, masks=masks)
    assert torch.isfinite(out).all()
    (out * masks[..., None]).sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    assert all(torch.isfinite(g).all() for g in grads)
    pad = masks == 0
    obs2, rtg2 = obs.clone(), rtg.clone()
    obs2[pad] = torch.randn_like(obs2[pad]) * 10
    rtg2[pad] = -rtg2[pad] + 3
    model.zero_grad()
    out2 = model(obs2, actions, rtg2, steps, masks=masks)
    torch.testing.assert_close(out2[~pad], out[~pad].detach(), rtol=1e-5, atol=1e-6)
    (out2 * masks[..., None]).sum().backward()
    for g, p in zip(grads, [p for p in model.parameters() if p.grad is not None]):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)


def test_padded_steps_get_no_position_embedding():
    simple = SimplePositionEncoding(HIDDEN, 20)
    steps = torch.tensor([[0, 0, 0, 1], [3, 4, 5, 6]])
    masks = torch.tensor([[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    out = simple(steps, masks)
    assert torch.equal(out[0, :2], torch.zeros(2, HIDDEN))
    torch.testing.assert_close(out[0, 2:], simple.embed.weight[[0, 1]])
    torch.testing.assert_close(out[1], simple.embed.weight[[3, 4, 5, 6]])
    glob = GlobalPositionEncoding(HIDDEN, 20, 4)
    with torch.no_grad():
        glob.block_embed.normal_()
    out = glob(steps, masks)
    assert torch.equal(out[0, :2], torch.zeros(2, HIDDEN))
    # the first real step is the window's start and block position 0
    torch.testing.assert_close(out[0, 2:], glob.global_embed.weight[0] + glob.block_embed[0, :2])
    torch.testing.assert_close(out[1], glob.global_embed.weight[3] + glob.block_embed[0])
    torch.testing.assert_close(glob(steps[1:]), out[1:])


def test_padded_causal_mask_by_hand():
    mask = padded_causal_mask(torch.tensor([[0.0, 0.0, 1.0, 1.0]]))
    expected = torch.tensor([[1, 0, 0, 0],   # padding: itself only
                             [0, 1, 0, 0],
                             [0, 0, 1, 0],   # real: real tokens at or before it
                             [0, 0, 1, 1]], dtype=torch.bool)
    assert mask.shape == (1, 1, 4, 4)
    assert torch.equal(mask[0, 0], expected)
    assert torch.equal(padded_causal_mask(torch.ones(1, 3))[0, 0], torch.ones(3, 3, dtype=torch.bool).tril())
