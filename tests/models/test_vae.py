"""The shared models of the policy-constraint family: the conditional VAE
(its β-weighted ELBO by hand, clipped latent sampling, batched sampling
against one-at-a-time decoding), BCQ's perturbation actor (by hand, its
bound) and the MMD (against a plain double loop, with hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from torch import nn

from offrl.models import VectorEncoderFactory
from offrl.models.encoders import DefaultEncoderFactory
from offrl.models.mmd import mmd, mmd_squared
from offrl.models.perturbation import PerturbationActor, create_perturbation_actor
from offrl.models.vae import (
    LATENT_CLIP,
    ConditionalVAE,
    VAEDecoder,
    VAEEncoder,
    create_conditional_vae,
    gaussian_kl_to_standard,
)


class Concat(nn.Module):
    """Encoder-with-action stand-in: ``[s, a]`` as the features."""

    def forward(self, x, action):
        return torch.cat([x, action], dim=-1)


def set_linear(layer: nn.Linear, weight, bias) -> None:
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(weight, dtype=torch.float32))
        layer.bias.copy_(torch.tensor(bias, dtype=torch.float32))


def affine(row, weight, bias):
    return [sum(w * v for w, v in zip(wr, row)) + b for wr, b in zip(weight, bias)]


OBS = [[0.2, -0.4], [1.0, 0.5], [-0.7, 0.3]]
ACT = [[0.5, -0.1], [-0.8, 0.3], [0.0, 0.9]]
# encoder (latent 2 <- obs 2 + action 2), decoder (action 2 <- obs 2 + latent 2)
MU_W, MU_B = [[0.5, -1.0, 0.3, 0.2], [0.1, 0.4, -0.6, 1.0]], [0.1, -0.2]
LS_W, LS_B = [[0.2, 0.1, -0.3, 0.0], [-0.1, 0.2, 0.4, -0.5]], [-0.4, 0.3]
DEC_W, DEC_B = [[1.0, 0.0, 0.7, -0.2], [0.3, -0.5, 0.1, 0.8]], [0.05, -0.1]


def hand_vae() -> ConditionalVAE:
    enc = VAEEncoder(Concat(), 4, 2)
    set_linear(enc.mu, MU_W, MU_B)
    set_linear(enc.logstd, LS_W, LS_B)
    dec = VAEDecoder(Concat(), 4, 2)
    set_linear(dec.fc, DEC_W, DEC_B)
    return ConditionalVAE(enc, dec)


def test_elbo_loss_by_hand():
    vae = hand_vae()
    obs, act = torch.tensor(OBS), torch.tensor(ACT)
    torch.manual_seed(3)
    noise = torch.randn(3, 2).tolist()
    torch.manual_seed(3)
    loss, mse, kl = vae.loss(obs, act, beta=0.5)
    sq, kls = [], []
    for s, a, eps in zip(OBS, ACT, noise):
        mean = affine(s + a, MU_W, MU_B)
        logstd = affine(s + a, LS_W, LS_B)
        z = [m + e * math.exp(ls) for m, e, ls in zip(mean, eps, logstd)]
        recon = [math.tanh(v) for v in affine(s + z, DEC_W, DEC_B)]
        sq += [(r - ai) ** 2 for r, ai in zip(recon, a)]
        kls += [0.5 * (m * m + math.exp(2 * ls) - 1.0) - ls for m, ls in zip(mean, logstd)]
    hand_mse, hand_kl = sum(sq) / len(sq), sum(kls) / len(kls)
    assert mse.item() == pytest.approx(hand_mse, rel=1e-5)
    assert kl.item() == pytest.approx(hand_kl, rel=1e-5)
    assert loss.item() == pytest.approx(hand_mse + 0.5 * hand_kl, rel=1e-5)


def test_kl_matches_torch_distributions():
    mean = torch.tensor([[0.3, -1.2], [2.0, 0.0]])
    logstd = torch.tensor([[-0.5, 0.7], [0.0, -2.0]])
    expected = torch.distributions.kl_divergence(
        torch.distributions.Normal(mean, logstd.exp()), torch.distributions.Normal(0.0, 1.0)
    )
    torch.testing.assert_close(gaussian_kl_to_standard(mean, logstd), expected, rtol=1e-5, atol=1e-6)


def test_logstd_is_clamped():
    enc = VAEEncoder(Concat(), 4, 2, min_logstd=-1.0, max_logstd=0.5)
    set_linear(enc.logstd, [[100.0, 0, 0, 0], [-100.0, 0, 0, 0]], [0.0, 0.0])
    _, logstd = enc(torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2))
    assert logstd.tolist() == [[0.5, -1.0]]


def test_sampled_latents_are_clipped_and_decoded():
    vae = hand_vae()
    # the decoder reads the latent only: D(s, z) = z, so the action is tanh(z)
    set_linear(vae.decoder.fc, [[0, 0, 1.0, 0], [0, 0, 0, 1.0]], [0.0, 0.0])
    torch.manual_seed(0)
    actions = vae.sample(torch.zeros(2000, 2))
    bound = math.tanh(LATENT_CLIP)
    assert actions.abs().max().item() == pytest.approx(bound, rel=1e-6)  # some latents hit the clip
    assert (actions.abs() <= bound + 1e-7).all()
    torch.manual_seed(0)
    raw = vae.sample(torch.zeros(2000, 2), raw=True)
    torch.testing.assert_close(torch.tanh(raw), actions)
    assert raw.abs().max().item() == pytest.approx(LATENT_CLIP)


def test_n_samples_pair_each_observation_with_its_own_latents():
    vae = hand_vae()
    obs = torch.tensor(OBS)
    torch.manual_seed(1)
    many = vae.sample(obs, n=5)  # (3, 5, 2)
    torch.manual_seed(1)
    latent = vae.sample_latent((15,), obs.device)
    assert many.shape == (3, 5, 2)
    for b in range(3):
        for j in range(5):
            one = vae.decode(obs[b : b + 1], latent[b * 5 + j : b * 5 + j + 1])
            torch.testing.assert_close(many[b, j], one[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(3,), [(3,), (1, 36, 36)]])
def test_create_conditional_vae_shapes(shape):
    factory = DefaultEncoderFactory() if isinstance(shape, list) else VectorEncoderFactory([8])
    vae = create_conditional_vae(factory, shape, action_size=2, latent_size=4)
    assert vae.latent_size == 4 and vae.action_size == 2
    x = [torch.zeros(5, 3), torch.zeros(5, 1, 36, 36)] if isinstance(shape, list) else torch.zeros(5, 3)
    assert vae(x, torch.zeros(5, 2)).shape == (5, 2)
    assert vae.sample(x, n=3).shape == (5, 3, 2)
    loss, _, _ = vae.loss(x, torch.zeros(5, 2), beta=0.5)
    loss.backward()
    assert all(p.grad is not None for p in vae.parameters())


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_create_conditional_vae_refuses_bad_latent_size(bad):
    with pytest.raises(ValueError, match="latent_size"):
        create_conditional_vae(VectorEncoderFactory([8]), (3,), 2, bad)


# ------------------------------------------------------------ perturbation
def test_perturbation_actor_by_hand_and_bound():
    actor = PerturbationActor(Concat(), 4, 2, action_flexibility=0.05)
    w, b = [[1.0, -2.0, 0.5, 0.0], [0.3, 0.3, 0.0, 4.0]], [0.2, -0.1]
    set_linear(actor.fc, w, b)
    obs = torch.tensor([[0.2, -0.4], [1.0, 0.5]])
    act = torch.tensor([[0.5, -0.1], [0.99, 0.98]])
    out = actor(obs, act).tolist()
    for s, a, o in zip(obs.tolist(), act.tolist(), out):
        h = affine(s + a, w, b)
        expected = [min(1.0, max(-1.0, ai + 0.05 * math.tanh(hi))) for ai, hi in zip(a, h)]
        assert o == pytest.approx(expected, rel=1e-6)
    assert out[1][1] == 1.0  # pushed past the bound, clipped
    x = torch.randn(50, 2)
    a = torch.rand(50, 2) * 2 - 1
    assert ((actor(x, a) - a).abs() <= 0.05 + 1e-6).all()


def test_create_perturbation_actor():
    actor = create_perturbation_actor(VectorEncoderFactory([8]), (3,), 2, 0.1)
    assert actor(torch.zeros(4, 3), torch.zeros(4, 2)).shape == (4, 2)
    assert actor.action_flexibility == 0.1


# --------------------------------------------------------------------- MMD
def naive_mmd_squared(x: np.ndarray, y: np.ndarray, kernel: str, sigma: float) -> np.ndarray:
    def k(u, v):
        if kernel == "gaussian":
            return math.exp(-sum((a - b) ** 2 for a, b in zip(u, v)) / (2 * sigma))
        return math.exp(-sum(abs(a - b) for a, b in zip(u, v)) / (2 * sigma))

    out = []
    for xs, ys in zip(x.tolist(), y.tolist()):
        xx = sum(k(a, b) for a in xs for b in xs) / len(xs) ** 2
        yy = sum(k(a, b) for a in ys for b in ys) / len(ys) ** 2
        xy = sum(k(a, b) for a in xs for b in ys) / (len(xs) * len(ys))
        out.append(xx + yy - 2 * xy)
    return np.array(out)


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 3), st.integers(1, 5), st.integers(1, 5), st.integers(1, 3),
    st.sampled_from(["gaussian", "laplacian"]), st.sampled_from([0.3, 1.0, 20.0]), st.data(),
)
def test_mmd_matches_naive_double_loop(batch, n, m, a, kernel, sigma, data):
    floats = st.floats(-2.0, 2.0, width=32)
    x = data.draw(arrays(np.float32, (batch, n, a), elements=floats))
    y = data.draw(arrays(np.float32, (batch, m, a), elements=floats))
    got = mmd_squared(torch.from_numpy(x).double(), torch.from_numpy(y).double(), kernel, sigma).numpy()
    np.testing.assert_allclose(got, naive_mmd_squared(x, y, kernel, sigma), rtol=1e-9, atol=1e-12)
    root = mmd(torch.from_numpy(x).double(), torch.from_numpy(y).double(), kernel, sigma).numpy()
    np.testing.assert_allclose(root, np.sqrt(got + 1e-6), rtol=1e-12)


def test_mmd_is_zero_for_equal_sets_and_grows_with_distance():
    x = torch.randn(2, 4, 3)
    assert mmd_squared(x, x.clone()).abs().max().item() < 1e-6
    near = mmd_squared(x, x + 0.1, "gaussian", 1.0)
    far = mmd_squared(x, x + 1.0, "gaussian", 1.0)
    assert (far > near).all() and (near > 0).all()


def test_mmd_gradient_is_finite_at_equal_samples():
    x = torch.randn(2, 4, 3, requires_grad=True)
    mmd(x, x.detach().clone(), "laplacian", 20.0).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_mmd_refuses_bad_arguments():
    x = torch.zeros(2, 3, 1)
    with pytest.raises(ValueError, match="kernel"):
        mmd(x, x, "cosine")
    with pytest.raises(ValueError, match="sigma"):
        mmd(x, x, "gaussian", 0.0)
    with pytest.raises(ValueError, match=r"\(B, n, A\)"):
        mmd(x, torch.zeros(3, 3, 1))
