"""A conditional variational auto-encoder of the behaviour policy.

BCQ, BEAR and PLAS model the logged actions with a VAE conditioned on the
observation (Kingma and Welling, 2014, "Auto-Encoding Variational Bayes";
its use as a generative model of the data is from Fujimoto, Meger and
Precup, 2019, "Off-Policy Deep Reinforcement Learning without
Exploration"):

    encoder  q(z | s, a) = N(mu(s, a), exp(logstd(s, a))^2)
    decoder  a_hat = tanh(D(s, z))
    ELBO loss  E || a_hat(s, z) - a ||^2 / A + beta * KL(q(z | s, a) || N(0, I))
               (z drawn by reparameterisation; mean over the batch, KL
               averaged over the latent dimensions)

Sampling from the model decodes latents drawn from N(0, I) and clipped to
``[-0.5, 0.5]`` (as BCQ's authors do, to stay where the decoder has seen
data). The reconstruction term is the mean squared error over action
dimensions and the KL term the mean over latent dimensions, as d3rlpy 2.8.1
computes them.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch import nn
import torch.nn.functional as F

from .encoders import EncoderFactory, ShapeLike, compute_output_size
from .layers import float32_head

__all__ = [
    "VAEEncoder",
    "VAEDecoder",
    "ConditionalVAE",
    "create_conditional_vae",
    "gaussian_kl_to_standard",
    "repeat_observations",
    "LATENT_CLIP",
]

#: sampled latents are clipped to ``[-LATENT_CLIP, LATENT_CLIP]`` (BCQ's value)
LATENT_CLIP = 0.5


def _batch_size(x: Any) -> int:
    return int(x[0].shape[0]) if isinstance(x, (list, tuple)) else int(x.shape[0])


def _device(x: Any) -> torch.device:
    return x[0].device if isinstance(x, (list, tuple)) else x.device


def repeat_observations(x: Any, n: int) -> Any:
    """Each observation row repeated ``n`` times in place, ``(B * n, ...)``
    with row ``b * n + j`` = observation ``b`` (tuple observations: per
    element). Pairs with ``actions.reshape(B * n, A)`` of ``(B, n, A)``."""
    if isinstance(x, (list, tuple)):
        return [repeat_observations(e, n) for e in x]
    return x.repeat_interleave(n, dim=0)


def gaussian_kl_to_standard(mean: torch.Tensor, logstd: torch.Tensor) -> torch.Tensor:
    """``KL(N(mean, exp(logstd)^2) || N(0, 1))`` elementwise (same shape)."""
    return 0.5 * (mean**2 + torch.exp(2.0 * logstd) - 1.0) - logstd


class VAEEncoder(nn.Module):
    """``(s, a) -> (mean, logstd)`` of the latent posterior, ``logstd``
    clamped to ``[min_logstd, max_logstd]``."""

    def __init__(self, encoder: nn.Module, feature_size: int, latent_size: int,
                 min_logstd: float = -20.0, max_logstd: float = 2.0) -> None:
        super().__init__()
        self.encoder = encoder
        self.mu = nn.Linear(feature_size, latent_size)
        self.logstd = nn.Linear(feature_size, latent_size)
        self.min_logstd = float(min_logstd)
        self.max_logstd = float(max_logstd)
        self.latent_size = int(latent_size)

    def forward(self, x: Any, action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        h = self.encoder(x, action)
        return float32_head(self.mu, h), float32_head(self.logstd, h).clamp(self.min_logstd, self.max_logstd)


class VAEDecoder(nn.Module):
    """``(s, z) -> D(s, z)``, the action before the tanh (``forward``
    returns it raw; :meth:`ConditionalVAE.decode` squashes it)."""

    def __init__(self, encoder: nn.Module, feature_size: int, action_size: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.fc = nn.Linear(feature_size, action_size)
        self.action_size = int(action_size)

    def forward(self, x: Any, latent: torch.Tensor) -> torch.Tensor:
        return float32_head(self.fc, self.encoder(x, latent))


class ConditionalVAE(nn.Module):
    """A VAE of actions conditioned on observations (see the module docstring).

    Args:
        encoder: the posterior ``q(z | s, a)``.
        decoder: the generator ``p(a | s, z)``.
    """

    def __init__(self, encoder: VAEEncoder, decoder: VAEDecoder) -> None:
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder

    @property
    def latent_size(self) -> int:
        return self.encoder.latent_size

    @property
    def action_size(self) -> int:
        return self.decoder.action_size

    def encode(self, x: Any, action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Posterior ``(mean, logstd)``, each ``(B, latent_size)``."""
        return self.encoder(x, action)

    def decode(self, x: Any, latent: torch.Tensor) -> torch.Tensor:
        """Action ``tanh(D(s, z))`` in [-1, 1], ``(B, action_size)``."""
        return torch.tanh(self.decoder(x, latent))

    def decode_raw(self, x: Any, latent: torch.Tensor) -> torch.Tensor:
        """``D(s, z)`` before the tanh (BEAR's MMD compares actions there)."""
        return self.decoder(x, latent)

    def sample_latent(self, shape: Tuple[int, ...], device: torch.device,
                      generator: Optional[torch.Generator] = None) -> torch.Tensor:
        """Latents from N(0, I) clipped to ``[-0.5, 0.5]``, ``shape + (latent_size,)``."""
        z = torch.randn(*shape, self.latent_size, device=device, generator=generator)
        return z.clamp(-LATENT_CLIP, LATENT_CLIP)

    def sample(self, x: Any, n: int = 0, raw: bool = False) -> torch.Tensor:
        """Actions decoded from clipped N(0, I) latents: ``(B, A)`` or, with
        ``n > 0``, ``n`` per observation as ``(B, n, A)`` (one decoder pass).
        ``raw`` returns them before the tanh."""
        batch = _batch_size(x)
        decode = self.decode_raw if raw else self.decode
        if n <= 0:
            return decode(x, self.sample_latent((batch,), _device(x)))
        latent = self.sample_latent((batch * n,), _device(x))
        return decode(repeat_observations(x, n), latent).view(batch, n, -1)

    def forward(self, x: Any, action: torch.Tensor) -> torch.Tensor:
        """Reconstruction of ``action`` through a reparameterised latent."""
        mean, logstd = self.encode(x, action)
        return self.decode(x, mean + torch.randn_like(mean) * torch.exp(logstd))

    def loss(self, x: Any, action: torch.Tensor, beta: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The β-weighted negative ELBO and its two terms:
        ``(mse + beta * kl, mse, kl)``, each 0-dim."""
        mean, logstd = self.encode(x, action)
        latent = mean + torch.randn_like(mean) * torch.exp(logstd)
        reconstruction = F.mse_loss(self.decode(x, latent), action)
        kl = gaussian_kl_to_standard(mean, logstd).mean()
        return reconstruction + beta * kl, reconstruction, kl


def create_conditional_vae(
    encoder_factory: EncoderFactory,
    observation_shape: ShapeLike,
    action_size: int,
    latent_size: int,
    min_logstd: float = -20.0,
    max_logstd: float = 2.0,
) -> ConditionalVAE:
    """A :class:`ConditionalVAE` whose encoder and decoder each get their own
    network from ``encoder_factory.create_with_action`` (taking the action,
    resp. the latent, beside the observation)."""
    if not (isinstance(latent_size, int) and not isinstance(latent_size, bool) and latent_size > 0):
        raise ValueError(f"latent_size must be a positive int, got {latent_size!r}")
    if not (isinstance(action_size, int) and not isinstance(action_size, bool) and action_size > 0):
        raise ValueError(f"action_size must be a positive int, got {action_size!r}")
    enc = encoder_factory.create_with_action(observation_shape, action_size)
    dec = encoder_factory.create_with_action(observation_shape, latent_size)
    return ConditionalVAE(
        VAEEncoder(enc, compute_output_size(enc, observation_shape, action_size), latent_size, min_logstd, max_logstd),
        VAEDecoder(dec, compute_output_size(dec, observation_shape, latent_size), action_size),
    )
