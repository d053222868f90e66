"""d3rlpy's imitation modules and losses (``d3rlpy.models.torch.imitators``):
the conditional VAE of BCQ / BEAR / PLAS and behaviour cloning's losses.

* :class:`VAEEncoder`: ``q(z | x, a) = N(mu, exp(logstd))`` with ``logstd``
  clamped to ``[min_logstd, max_logstd]``; ``forward`` returns the
  ``torch.distributions.Normal``.
* :class:`VAEDecoder`: ``D(x, z)``. As in d3rlpy 2.8.1, the argument
  ``with_squash=True`` (the default) returns the **raw** output and
  ``with_squash=False`` its ``tanh``: the flag's name is d3rlpy's, its
  meaning kept so that ported code computes the same thing.
* :func:`compute_vae_error`: ``mse(D(x, z), a) + beta * mean KL(q || N(0, 1))``
  with ``z ~ q(z | x, a)`` reparameterised (the MSE and the KL are means
  over every element).
* :func:`forward_vae_sample` / :func:`forward_vae_sample_n`: decode latents
  drawn from ``N(0, 1)`` clipped to ``[-0.5, 0.5]`` (BCQ's choice).

offrl's own algorithms use :mod:`offrl.models.vae` (tuples out), which
these do not replace.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn
from torch.distributions import Normal
import torch.nn.functional as F

from ...types import TorchObservation
from .encoders import EncoderWithAction, check_positive_int
from .policies import CategoricalPolicy, DeterministicPolicy, NormalPolicy, build_gaussian_distribution

__all__ = [
    "VAEEncoder",
    "VAEDecoder",
    "forward_vae_sample",
    "forward_vae_sample_n",
    "compute_vae_error",
    "compute_discrete_imitation_loss",
    "compute_deterministic_imitation_loss",
    "compute_stochastic_imitation_loss",
    "ImitationLoss",
    "DiscreteImitationLoss",
]


#: sampled latents are clipped to ``[-LATENT_CLIP, LATENT_CLIP]`` (BCQ's value, as :mod:`offrl.models.vae`)
LATENT_CLIP = 0.5


def _batch_size(x: TorchObservation) -> int:
    return int((x if isinstance(x, torch.Tensor) else x[0]).shape[0])


def _device(x: TorchObservation) -> torch.device:
    return (x if isinstance(x, torch.Tensor) else x[0]).device


class VAEEncoder(nn.Module):
    """``(x, action) -> Normal(mu, exp(logstd))`` over ``latent_size`` dims."""

    def __init__(self, encoder: EncoderWithAction, hidden_size: int, latent_size: int, min_logstd: float = -20.0,
                 max_logstd: float = 2.0) -> None:
        super().__init__()
        hidden_size = check_positive_int("hidden_size", hidden_size)
        if not min_logstd < max_logstd:
            raise ValueError(f"min_logstd must be below max_logstd, got {min_logstd} and {max_logstd}")
        self._encoder = encoder
        self._mu = nn.Linear(hidden_size, check_positive_int("latent_size", latent_size))
        self._logstd = nn.Linear(hidden_size, latent_size)
        self._min_logstd = float(min_logstd)
        self._max_logstd = float(max_logstd)
        self._latent_size = latent_size

    def forward(self, x: TorchObservation, action: torch.Tensor) -> Normal:
        h = self._encoder(x, action)
        logstd = self._logstd(h).clamp(self._min_logstd, self._max_logstd)
        return Normal(self._mu(h), logstd.exp())

    @property
    def latent_size(self) -> int:
        return self._latent_size


class VAEDecoder(nn.Module):
    """``(x, latent) -> (B, action_size)``; see the module documentation
    for ``with_squash``."""

    def __init__(self, encoder: EncoderWithAction, hidden_size: int, action_size: int) -> None:
        super().__init__()
        self._encoder = encoder
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), check_positive_int("action_size", action_size))
        self._action_size = action_size

    def forward(self, x: TorchObservation, latent: torch.Tensor, with_squash: bool = True) -> torch.Tensor:
        out = self._fc(self._encoder(x, latent))
        return out if with_squash else torch.tanh(out)

    @property
    def action_size(self) -> int:
        return self._action_size


def forward_vae_sample(vae_decoder: VAEDecoder, x: TorchObservation, latent_size: int,
                       with_squash: bool = True) -> torch.Tensor:
    """One decoded action per observation, ``(B, action_size)``."""
    latent = torch.randn((_batch_size(x), check_positive_int("latent_size", latent_size)), device=_device(x))
    return vae_decoder(x, latent.clamp(-LATENT_CLIP, LATENT_CLIP), with_squash=with_squash)


def forward_vae_sample_n(vae_decoder: VAEDecoder, x: TorchObservation, latent_size: int, n: int,
                         with_squash: bool = True) -> torch.Tensor:
    """``n`` decoded actions per observation, ``(B, n, action_size)``."""
    batch = _batch_size(x)
    n = check_positive_int("n", n)
    latent = torch.randn((n * batch, check_positive_int("latent_size", latent_size)), device=_device(x))

    def tiled(t: torch.Tensor) -> torch.Tensor:  # (B, ...) -> (n * B, ...), row j * B + b = row b
        return t.expand((n,) + tuple(t.shape)).reshape((n * batch,) + tuple(t.shape[1:]))

    flat_x = tiled(x) if isinstance(x, torch.Tensor) else [tiled(t) for t in x]
    actions = vae_decoder(flat_x, latent.clamp(-LATENT_CLIP, LATENT_CLIP), with_squash=with_squash)
    return actions.view(n, batch, -1).transpose(0, 1)


def compute_vae_error(vae_encoder: VAEEncoder, vae_decoder: VAEDecoder, x: TorchObservation, action: torch.Tensor,
                      beta: float) -> torch.Tensor:
    """The VAE's loss (see the module documentation), a 0-dim tensor."""
    dist = vae_encoder(x, action)
    mean, std = dist.mean, dist.stddev
    kl = (0.5 * (mean**2 + std**2 - 1.0) - std.log()).mean()  # KL(N(mean, std^2) || N(0, 1)), elementwise
    reconstruction = vae_decoder(x, dist.rsample())
    return F.mse_loss(reconstruction, action) + beta * kl


@dataclasses.dataclass(frozen=True)
class ImitationLoss:
    """A behaviour-cloning loss (0-dim ``loss``)."""

    loss: torch.Tensor


@dataclasses.dataclass(frozen=True)
class DiscreteImitationLoss(ImitationLoss):
    """Discrete BC's loss and its two terms."""

    imitation_loss: torch.Tensor
    regularization_loss: torch.Tensor


def compute_discrete_imitation_loss(policy: CategoricalPolicy, x: TorchObservation, action: torch.Tensor,
                                    beta: float) -> DiscreteImitationLoss:
    """Negative log-likelihood of the logged actions plus ``beta`` times the
    mean square of ``Categorical(...).logits``, which torch normalises to
    log-probabilities (as d3rlpy 2.8.1 computes the penalty)."""
    logits = policy(x).logits
    imitation = F.nll_loss(F.log_softmax(logits, dim=1), action.reshape(-1).long())
    regularization = beta * (logits**2).mean()
    return DiscreteImitationLoss(loss=imitation + regularization, imitation_loss=imitation,
                                 regularization_loss=regularization)


def compute_deterministic_imitation_loss(policy: DeterministicPolicy, x: TorchObservation,
                                         action: torch.Tensor) -> ImitationLoss:
    """``mean (tanh(mu(x)) - a)^2``."""
    return ImitationLoss(loss=F.mse_loss(policy(x).squashed_mu, action))


def compute_stochastic_imitation_loss(policy: NormalPolicy, x: TorchObservation,
                                      action: torch.Tensor) -> ImitationLoss:
    """``mean (a' - a)^2`` with ``a'`` drawn (reparameterised) from
    ``N(tanh(mu), exp(logstd))``, clipped to [-1, 1] (d3rlpy 2.8.1's
    stochastic BC loss)."""
    return ImitationLoss(loss=F.mse_loss(build_gaussian_distribution(policy(x)).sample(), action))
