"""Q-function ensembles: mean, quantile-regression and implicit-quantile.

A :class:`QFunction` holds ``n_critics`` members as one module (batched
weights for vector encoders). Algorithms use four operations:

* ``expected(x, action=None)``: expected values, ``(E, B, A)`` for discrete
  actions (all actions at once) or ``(E, B, 1)`` for continuous ones;
* ``at_action(x, action)``: the value distribution at the given actions,
  ``(E, B, N)`` with ``N`` quantiles (``N = 1`` for the mean Q-function),
  and the quantile fractions ``taus`` (``None`` for the mean);
* ``reduce(dist, how)``: combine members (``min``, ``max``, ``mean``) into
  ``(B, N)``; for distributions ``min``/``max`` pick, per sample, the member
  whose mean is lowest/highest;
* ``loss(pred, target, taus, weights)``: the TD loss of each member (Huber
  for discrete mean Q, squared error for continuous mean Q, quantile Huber
  for distributional ones), averaged over the batch and summed over members.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Tuple

import torch
from torch import nn
import torch.nn.functional as F

from ..serialization import register
from ._init_params import InitParamsSerializable
from .encoders import EncoderFactory, ShapeLike, compute_output_size
from .layers import EnsembleLinear, float32_head
from .torch.encoders import Encoder, EncoderWithAction
from .torch.q_functions import (
    ContinuousIQNQFunction,
    ContinuousIQNQFunctionForwarder,
    ContinuousMeanQFunction,
    ContinuousMeanQFunctionForwarder,
    ContinuousQFunction,
    ContinuousQFunctionForwarder,
    ContinuousQRQFunction,
    ContinuousQRQFunctionForwarder,
    DiscreteIQNQFunction,
    DiscreteIQNQFunctionForwarder,
    DiscreteMeanQFunction,
    DiscreteMeanQFunctionForwarder,
    DiscreteQFunction,
    DiscreteQFunctionForwarder,
    DiscreteQRQFunction,
    DiscreteQRQFunctionForwarder,
)

__all__ = [
    "QFunctionFactory",
    "MeanQFunctionFactory",
    "QRQFunctionFactory",
    "IQNQFunctionFactory",
    "QFunction",
    "quantile_huber_loss",
]


def _feature_size(encoder: nn.Module, observation_shape: ShapeLike, action_size: int, discrete: bool) -> int:
    if discrete:
        return compute_output_size(encoder, observation_shape)
    return compute_output_size(encoder, observation_shape, action_size, discrete_action=False)


def quantile_huber_loss(pred: torch.Tensor, target: torch.Tensor, taus: torch.Tensor, weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Quantile Huber loss (kappa = 1).

    pred: ``(E, B, N)`` quantiles at fractions ``taus`` (``(N,)``, ``(B, N)``
    or ``(E, B, N)``); target: ``(B, M)`` target samples. Summed over
    predicted quantiles, averaged over targets and the batch, summed over
    members.
    """
    u = target[None, :, None, :] - pred[..., None]  # (E, B, N, M)
    huber = F.smooth_l1_loss(pred[..., None].expand_as(u), target[None, :, None, :].expand_as(u), reduction="none", beta=1.0)
    if taus.dim() == 1:
        taus = taus.view(1, 1, -1)
    elif taus.dim() == 2:
        taus = taus.unsqueeze(0)
    weight = torch.abs(taus[..., None] - (u.detach() < 0).to(pred.dtype))
    per_sample = (weight * huber).sum(dim=2).mean(dim=2)  # (E, B)
    if weights is not None:
        per_sample = per_sample * weights.view(1, -1)
    return per_sample.mean(dim=1).sum()


class QFunction(nn.Module):
    """Ensemble of ``n_critics`` Q-functions (see module docstring)."""

    n_quantiles: int = 1

    def __init__(self, encoder: nn.Module, feature_size: int, action_size: int, n_critics: int, discrete: bool, outputs: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.action_size = action_size
        self.n_critics = n_critics
        self.discrete = discrete
        self.head = EnsembleLinear(n_critics, feature_size, outputs) if n_critics > 1 else _SingleLinear(feature_size, outputs)

    # -- subclasses define _distribution(x, action, taus) -> (E, B, A or 1, N)
    def _features(self, x, action: Optional[torch.Tensor]) -> torch.Tensor:
        if self.discrete:
            return self.encoder(x)
        return self.encoder(x, action)

    def _distribution(self, x, action: Optional[torch.Tensor], taus: Optional[torch.Tensor]) -> torch.Tensor:
        raise NotImplementedError

    def _greedy_taus(self, batch: int, device: torch.device) -> Optional[torch.Tensor]:
        return None

    def _sample_taus(self, batch: int, device: torch.device) -> Optional[torch.Tensor]:
        return None

    def expected(self, x, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        batch = _batch_size(x)
        dist = self._distribution(x, action, self._greedy_taus(batch, _device(x)))
        return dist.mean(dim=-1)

    def forward(self, x, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.expected(x, action)

    def at_action(self, x, action: torch.Tensor, greedy_taus: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        batch = _batch_size(x)
        taus = self._greedy_taus(batch, _device(x)) if greedy_taus else self._sample_taus(batch, _device(x))
        if self.discrete:
            dist = self._distribution(x, None, taus)  # (E, B, A, N)
            index = action.reshape(1, -1, 1, 1).long().expand(dist.shape[0], -1, 1, dist.shape[-1])
            return dist.gather(2, index).squeeze(2), taus
        return self._distribution(x, action, taus).squeeze(2), taus

    def distribution(self, x, action: Optional[torch.Tensor] = None, greedy_taus: bool = True) -> torch.Tensor:
        """Full value distribution, ``(E, B, A, N)`` or ``(E, B, 1, N)``."""
        batch = _batch_size(x)
        taus = self._greedy_taus(batch, _device(x)) if greedy_taus else self._sample_taus(batch, _device(x))
        return self._distribution(x, action, taus)

    @staticmethod
    def reduce(dist: torch.Tensor, how: str = "min") -> torch.Tensor:
        """Combine members of ``(E, B, N)`` into ``(B, N)``."""
        if dist.shape[0] == 1:
            return dist[0]
        if how == "mean":
            return dist.mean(dim=0)
        if how not in ("min", "max"):
            raise ValueError(f"unknown ensemble reduction {how!r}")
        if dist.shape[-1] == 1:
            return dist.min(dim=0).values if how == "min" else dist.max(dim=0).values
        means = dist.mean(dim=-1)  # (E, B)
        index = means.argmin(dim=0) if how == "min" else means.argmax(dim=0)
        return dist[index, torch.arange(dist.shape[1], device=dist.device)]

    def loss(self, pred: torch.Tensor, target: torch.Tensor, taus: Optional[torch.Tensor] = None, weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.n_quantiles == 1 and taus is None:
            if pred.shape[0] == 1 and weights is None:
                if self.discrete:
                    return F.smooth_l1_loss(pred[0], target, beta=1.0)
                return F.mse_loss(pred[0], target)
            target = target.expand(pred.shape[0], -1, -1)
            if self.discrete:
                per = F.smooth_l1_loss(pred, target, reduction="none", beta=1.0)
            else:
                per = (pred - target) ** 2
            per = per.squeeze(-1)  # (E, B)
            if weights is not None:
                per = per * weights.view(1, -1)
            return per.mean(dim=1).sum()
        if taus is None:
            taus = self.fixed_taus(pred.device)
        return quantile_huber_loss(pred, target, taus, weights)

    def fixed_taus(self, device: torch.device) -> torch.Tensor:
        n = self.n_quantiles
        return (torch.arange(n, device=device, dtype=torch.float32) + 0.5) / n


class _SharedMember(nn.Module):
    """One encoder whose features feed all ``n`` critics, ``(n, B, F)``
    (a broadcast view: the encoder gets the sum of the critics' gradients)."""

    def __init__(self, encoder: nn.Module, n: int) -> None:
        super().__init__()
        self.encoder = encoder
        self.n = n

    def forward(self, x, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = self.encoder(x) if action is None else self.encoder(x, action)
        return h.unsqueeze(0).expand(self.n, *h.shape)


class _SingleMember(nn.Module):
    """A plain encoder presented as a one-member ensemble, ``(1, B, F)``:
    with ``n_critics == 1`` the layers stay ordinary ``nn.Linear`` (one fused
    op each, the cheapest form for small networks)."""

    def __init__(self, encoder: nn.Module) -> None:
        super().__init__()
        self.encoder = encoder

    def forward(self, x, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = self.encoder(x) if action is None else self.encoder(x, action)
        return h.unsqueeze(0)


class _SingleLinear(nn.Linear):
    """``nn.Linear`` on one-member ensemble activations ``(1, B, F)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return F.linear(x.squeeze(0), self.weight, self.bias).unsqueeze(0)


def _batch_size(x) -> int:
    return int(x[0].shape[0]) if isinstance(x, (list, tuple)) else int(x.shape[0])


def _device(x) -> torch.device:
    return x[0].device if isinstance(x, (list, tuple)) else x.device


class MeanQFunction(QFunction):
    def __init__(self, encoder: nn.Module, feature_size: int, action_size: int, n_critics: int, discrete: bool) -> None:
        super().__init__(encoder, feature_size, action_size, n_critics, discrete, action_size if discrete else 1)

    def _distribution(self, x, action, taus):
        return float32_head(self.head, self._features(x, action)).unsqueeze(-1)  # (E, B, A|1, 1)

    # the same results as the generic paths with fewer ops (this is the hot loop)
    def expected(self, x, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.n_critics == 1:  # the plain encoder and head, one view at the end (no (1, B, F) round trip)
            return self.single(x, action).unsqueeze(0)
        return float32_head(self.head, self._features(x, action))

    def single(self, x, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        """A one-critic function's values without the ensemble axis,
        ``(B, A)`` (discrete) or ``(B, 1)``."""
        if self.n_critics != 1:
            raise ValueError(f"single() needs n_critics == 1, this Q-function has {self.n_critics}")
        encoder = self.encoder.encoder
        h = encoder(x) if self.discrete else encoder(x, action)
        return float32_head(self._single_head, h)

    def _single_head(self, h: torch.Tensor) -> torch.Tensor:
        return F.linear(h, self.head.weight, self.head.bias)

    def at_action(self, x, action: torch.Tensor, greedy_taus: bool = False) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        values = self.expected(x, None if self.discrete else action)
        if self.discrete:
            index = action.reshape(1, -1, 1).long().expand(values.shape[0], -1, 1)
            values = values.gather(2, index)
        return values, None


class QRQFunction(QFunction):
    def __init__(self, encoder: nn.Module, feature_size: int, action_size: int, n_critics: int, discrete: bool, n_quantiles: int) -> None:
        outputs = (action_size if discrete else 1) * n_quantiles
        super().__init__(encoder, feature_size, action_size, n_critics, discrete, outputs)
        self.n_quantiles = n_quantiles

    def _distribution(self, x, action, taus):
        out = float32_head(self.head, self._features(x, action))  # (E, B, A*N)
        return out.view(out.shape[0], out.shape[1], -1, self.n_quantiles)

    def at_action(self, x, action, greedy_taus: bool = False):
        dist, _ = super().at_action(x, action, greedy_taus)
        return dist, self.fixed_taus(dist.device)


class IQNQFunction(QFunction):
    def __init__(
        self, encoder: nn.Module, feature_size: int, action_size: int, n_critics: int, discrete: bool,
        n_quantiles: int, n_greedy_quantiles: int, embed_size: int,
    ) -> None:
        super().__init__(encoder, feature_size, action_size, n_critics, discrete, action_size if discrete else 1)
        self.n_quantiles = n_quantiles
        self.n_greedy_quantiles = n_greedy_quantiles
        self.embed_size = embed_size
        self.embed = EnsembleLinear(n_critics, embed_size, feature_size)
        self.register_buffer("_pis", math.pi * torch.arange(embed_size, dtype=torch.float32), persistent=False)

    def _greedy_taus(self, batch, device):
        n = self.n_greedy_quantiles
        taus = (torch.arange(n, device=device, dtype=torch.float32) + 0.5) / n
        return taus.expand(batch, n)

    def _sample_taus(self, batch, device):
        return torch.rand(batch, self.n_quantiles, device=device)

    def _distribution(self, x, action, taus):
        h = self._features(x, action)  # (E, B, F)
        e, b, f = h.shape
        n = taus.shape[1]
        cos = torch.cos(taus.reshape(b * n, 1) * self._pis)  # (B*N, embed)
        phi = torch.relu(self.embed(cos)).view(e, b, n, f)
        out = float32_head(self.head, (h.unsqueeze(2) * phi).view(e, b * n, f))  # (E, B*N, A)
        return out.view(e, b, n, -1).transpose(2, 3)  # (E, B, A, N)

    def at_action(self, x, action, greedy_taus: bool = False):
        batch = _batch_size(x)
        taus = self._greedy_taus(batch, _device(x)) if greedy_taus else self._sample_taus(batch, _device(x))
        dist = self._distribution(x, None if self.discrete else action, taus)
        if self.discrete:
            index = action.reshape(1, -1, 1, 1).long().expand(dist.shape[0], -1, 1, dist.shape[-1])
            dist = dist.gather(2, index)
        return dist.squeeze(2), taus


@dataclasses.dataclass(eq=False, repr=False)
class QFunctionFactory(InitParamsSerializable):
    """Base of Q-function factories (a dataclass, as d3rlpy's; a plain
    subclass that stores its ``__init__`` arguments as attributes is saved
    too).

    Two ways to build:

    * ``create(encoder_factory, observation_shape, action_size, n_critics,
      discrete)``: offrl's batched :class:`QFunction` ensemble, what offrl's
      algorithms train;
    * d3rlpy's ``create_discrete(encoder, hidden_size, action_size)`` and
      ``create_continuous(encoder, hidden_size)``: one d3rlpy-style
      Q-function module and its forwarder (:mod:`offrl.models.torch`), what
      :func:`offrl.models.builders.create_discrete_q_function` /
      ``create_continuous_q_function`` call once per ensemble member. A
      d3rlpy custom factory overrides these two.

    Args:
        share_encoder: the ``n_critics`` critics share one encoder (their
            heads stay separate), as d3rlpy's ``share_encoder``.
    """

    _kind = "q_function"

    share_encoder: bool = False

    def create(self, encoder_factory: EncoderFactory, observation_shape: ShapeLike, action_size: int, n_critics: int, discrete: bool) -> QFunction:
        raise NotImplementedError

    def create_discrete(self, encoder: Encoder, hidden_size: int,
                        action_size: int) -> Tuple[DiscreteQFunction, DiscreteQFunctionForwarder]:
        """A d3rlpy-style discrete-action Q-function on ``encoder`` (features
        of ``hidden_size``) and its forwarder."""
        raise NotImplementedError(f"{type(self).__name__} does not define create_discrete")

    def create_continuous(self, encoder: EncoderWithAction,
                          hidden_size: int) -> Tuple[ContinuousQFunction, ContinuousQFunctionForwarder]:
        """A d3rlpy-style continuous-action Q-function on ``encoder`` and its
        forwarder."""
        raise NotImplementedError(f"{type(self).__name__} does not define create_continuous")

    def _encoder(self, encoder_factory: EncoderFactory, observation_shape: ShapeLike, action_size: int, n_critics: int, discrete: bool):
        if not isinstance(getattr(self, "share_encoder", False), bool):
            raise TypeError(f"share_encoder must be a bool, got {type(self.share_encoder).__name__}")
        if n_critics > 1 and getattr(self, "share_encoder", False):
            plain = encoder_factory.create(observation_shape) if discrete else encoder_factory.create_with_action(observation_shape, action_size)
            encoder = _SharedMember(plain, n_critics)
        elif n_critics == 1:
            plain = encoder_factory.create(observation_shape) if discrete else encoder_factory.create_with_action(observation_shape, action_size)
            encoder = _SingleMember(plain)
        elif discrete:
            encoder = encoder_factory.create_ensemble(observation_shape, n_critics)
        else:
            encoder = encoder_factory.create_ensemble(observation_shape, n_critics, action_size)
        return encoder, _feature_size(encoder, observation_shape, action_size, discrete)


@register("q_function")
@dataclasses.dataclass
class MeanQFunctionFactory(QFunctionFactory):
    """Standard Q-function estimating the expected return."""

    @staticmethod
    def get_type() -> str:
        return "mean"

    def create(self, encoder_factory, observation_shape, action_size, n_critics, discrete):
        encoder, features = self._encoder(encoder_factory, observation_shape, action_size, n_critics, discrete)
        return MeanQFunction(encoder, features, action_size, n_critics, discrete)

    def create_discrete(self, encoder, hidden_size, action_size):
        q_func = DiscreteMeanQFunction(encoder, hidden_size, action_size)
        return q_func, DiscreteMeanQFunctionForwarder(q_func, action_size)

    def create_continuous(self, encoder, hidden_size):
        q_func = ContinuousMeanQFunction(encoder, hidden_size)
        return q_func, ContinuousMeanQFunctionForwarder(q_func)


@register("q_function")
@dataclasses.dataclass
class QRQFunctionFactory(QFunctionFactory):
    """Quantile-regression Q-function (Dabney et al., 2018) with
    ``n_quantiles`` fixed quantile fractions."""

    n_quantiles: int = 32

    def __post_init__(self) -> None:
        if int(self.n_quantiles) < 1:
            raise ValueError(f"n_quantiles must be >= 1, got {self.n_quantiles}")

    @staticmethod
    def get_type() -> str:
        return "qr"

    def create(self, encoder_factory, observation_shape, action_size, n_critics, discrete):
        encoder, features = self._encoder(encoder_factory, observation_shape, action_size, n_critics, discrete)
        return QRQFunction(encoder, features, action_size, n_critics, discrete, int(self.n_quantiles))

    def create_discrete(self, encoder, hidden_size, action_size):
        q_func = DiscreteQRQFunction(encoder, hidden_size, action_size, int(self.n_quantiles))
        return q_func, DiscreteQRQFunctionForwarder(q_func, int(self.n_quantiles))

    def create_continuous(self, encoder, hidden_size):
        q_func = ContinuousQRQFunction(encoder, hidden_size, int(self.n_quantiles))
        return q_func, ContinuousQRQFunctionForwarder(q_func, int(self.n_quantiles))


@register("q_function")
@dataclasses.dataclass
class IQNQFunctionFactory(QFunctionFactory):
    """Implicit quantile network (Dabney et al., 2018): ``n_quantiles``
    sampled fractions in training, ``n_greedy_quantiles`` fixed ones to act,
    cosine embedding of size ``embed_size``."""

    n_quantiles: int = 64
    n_greedy_quantiles: int = 32
    embed_size: int = 64

    def __post_init__(self) -> None:
        for name in ("n_quantiles", "n_greedy_quantiles", "embed_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @staticmethod
    def get_type() -> str:
        return "iqn"

    def create(self, encoder_factory, observation_shape, action_size, n_critics, discrete):
        encoder, features = self._encoder(encoder_factory, observation_shape, action_size, n_critics, discrete)
        return IQNQFunction(
            encoder, features, action_size, n_critics, discrete,
            int(self.n_quantiles), int(self.n_greedy_quantiles), int(self.embed_size),
        )

    def create_discrete(self, encoder, hidden_size, action_size):
        q_func = DiscreteIQNQFunction(encoder, hidden_size, action_size, int(self.n_quantiles),
                                      int(self.n_greedy_quantiles), int(self.embed_size))
        return q_func, DiscreteIQNQFunctionForwarder(q_func, int(self.n_quantiles))

    def create_continuous(self, encoder, hidden_size):
        q_func = ContinuousIQNQFunction(encoder, hidden_size, int(self.n_quantiles), int(self.n_greedy_quantiles),
                                        int(self.embed_size))
        return q_func, ContinuousIQNQFunctionForwarder(q_func, int(self.n_greedy_quantiles))
