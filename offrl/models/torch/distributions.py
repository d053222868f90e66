"""Action distributions of d3rlpy's stochastic policies
(``d3rlpy.models.torch.distributions``).

* :class:`GaussianDistribution`: ``N(loc, std)`` around the squashed mean
  ``loc = tanh(mu)`` (IQL's, AWAC's and stochastic BC's policy); samples
  are clipped to [-1, 1], the density is the plain Gaussian's.
* :class:`SquashedGaussianDistribution`: ``a = tanh(u)``, ``u ~ N(loc,
  std)`` (SAC's); its log-density carries the change of variables,

      log p(a) = sum_i [ log N(u_i; loc_i, std_i) - log(1 - tanh(u_i)^2) ],

  with ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` (stable for
  large ``|u|``).

Shapes: ``loc`` and ``std`` are ``(B, A)``; one sample is ``(B, A)`` with a
log-density ``(B, 1)``; ``n`` samples are ``(B, n, A)`` with ``(B, n, 1)``.
Samples are reparameterised (gradients flow to ``loc`` and ``std``).
"""

from __future__ import annotations

import abc
import math
from typing import Tuple

import torch
from torch.distributions import Normal
import torch.nn.functional as F

__all__ = ["Distribution", "GaussianDistribution", "SquashedGaussianDistribution", "tanh_log_det_jacobian"]

#: how close to +-1 a squashed action is moved before ``atanh``
SQUASH_CLIP = 0.999999


def tanh_log_det_jacobian(u: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(u)^2)`` elementwise, computed stably."""
    return 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))


class Distribution(metaclass=abc.ABCMeta):
    """The sampling interface d3rlpy's algorithms use."""

    @abc.abstractmethod
    def sample(self) -> torch.Tensor:
        """One action per row, ``(B, A)``."""

    @abc.abstractmethod
    def sample_with_log_prob(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """One action per row and its log-density ``(B, 1)``."""

    @abc.abstractmethod
    def sample_n(self, n: int) -> torch.Tensor:
        """``n`` actions per row, ``(B, n, A)``."""

    @abc.abstractmethod
    def onnx_safe_sample_n(self, n: int) -> torch.Tensor:
        """:meth:`sample_n` with ops every ONNX exporter supports."""

    @abc.abstractmethod
    def sample_n_with_log_prob(self, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """``n`` actions per row and their log-densities ``(B, n, 1)``."""

    @abc.abstractmethod
    def log_prob(self, y: torch.Tensor) -> torch.Tensor:
        """The log-density of actions ``(..., A)``, summed over the last axis
        (kept, size 1)."""


def _check_pair(loc: torch.Tensor, std: torch.Tensor, name: str) -> None:
    if not isinstance(loc, torch.Tensor) or not isinstance(std, torch.Tensor):
        raise TypeError(f"{name} takes tensors loc and std, got {type(loc).__name__} and {type(std).__name__}")
    try:
        torch.broadcast_shapes(loc.shape, std.shape)
    except RuntimeError:
        raise ValueError(f"{name}: loc has shape {tuple(loc.shape)}, std has {tuple(std.shape)}; "
                         "they must broadcast together") from None


def _noisy(mean: torch.Tensor, std: torch.Tensor, n: int) -> torch.Tensor:
    """``(B, n, A)`` draws ``mean + std * eps`` built from plain ops (no
    ``rsample``), for ONNX export."""
    mean, std = torch.broadcast_tensors(mean, std)
    batch, size = mean.shape
    noise = torch.randn(batch, n, size, device=mean.device, dtype=mean.dtype)
    return mean.reshape(batch, 1, size) + noise * std.reshape(batch, 1, size)


class GaussianDistribution(Distribution):
    """``N(loc, std)`` with ``loc`` the squashed mean; ``raw_loc`` (the mean
    before ``tanh``) serves the ``*_without_squash`` samples."""

    def __init__(self, loc: torch.Tensor, std: torch.Tensor, raw_loc: torch.Tensor) -> None:
        _check_pair(loc, std, "GaussianDistribution")
        self._mean = loc
        self._std = std
        self._raw_loc = raw_loc
        self._dist = Normal(loc, std)

    def sample(self) -> torch.Tensor:
        return self._dist.rsample().clamp(-1.0, 1.0)

    def sample_with_log_prob(self) -> Tuple[torch.Tensor, torch.Tensor]:
        y = self.sample()
        return y, self.log_prob(y)

    def sample_without_squash(self) -> torch.Tensor:
        return Normal(self._raw_loc, self._std).rsample()

    def sample_n(self, n: int) -> torch.Tensor:
        return self._dist.rsample((n,)).clamp(-1.0, 1.0).transpose(0, 1)

    def onnx_safe_sample_n(self, n: int) -> torch.Tensor:
        return _noisy(self._mean, self._std, n).clamp(-1.0, 1.0)

    def sample_n_with_log_prob(self, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        y = self.sample_n(n)
        return y, self.log_prob(y.transpose(0, 1)).transpose(0, 1)

    def sample_n_without_squash(self, n: int) -> torch.Tensor:
        return Normal(self._raw_loc, self._std).rsample((n,)).transpose(0, 1)

    def mean_with_log_prob(self) -> Tuple[torch.Tensor, torch.Tensor]:
        return self._mean, self.log_prob(self._mean)

    def log_prob(self, y: torch.Tensor) -> torch.Tensor:
        return self._dist.log_prob(y).sum(dim=-1, keepdim=True)

    @property
    def mean(self) -> torch.Tensor:
        return self._mean

    @property
    def std(self) -> torch.Tensor:
        return self._std


class SquashedGaussianDistribution(Distribution):
    """``tanh(u)``, ``u ~ N(loc, std)``: ``mean`` is ``tanh(loc)``."""

    def __init__(self, loc: torch.Tensor, std: torch.Tensor) -> None:
        _check_pair(loc, std, "SquashedGaussianDistribution")
        self._mean = loc
        self._std = std
        self._dist = Normal(loc, std)

    def _log_prob_of_raw(self, u: torch.Tensor) -> torch.Tensor:
        return (self._dist.log_prob(u) - tanh_log_det_jacobian(u)).sum(dim=-1, keepdim=True)

    def sample(self) -> torch.Tensor:
        return torch.tanh(self._dist.rsample())

    def sample_with_log_prob(self) -> Tuple[torch.Tensor, torch.Tensor]:
        u = self._dist.rsample()
        return torch.tanh(u), self._log_prob_of_raw(u)

    def sample_without_squash(self) -> torch.Tensor:
        return self._dist.rsample()

    def sample_n(self, n: int) -> torch.Tensor:
        return torch.tanh(self._dist.rsample((n,))).transpose(0, 1)

    def onnx_safe_sample_n(self, n: int) -> torch.Tensor:
        return torch.tanh(_noisy(self._mean, self._std, n))

    def sample_n_with_log_prob(self, n: int) -> Tuple[torch.Tensor, torch.Tensor]:
        u = self._dist.rsample((n,))
        return torch.tanh(u).transpose(0, 1), self._log_prob_of_raw(u).transpose(0, 1)

    def sample_n_without_squash(self, n: int) -> torch.Tensor:
        return self._dist.rsample((n,)).transpose(0, 1)

    def mean_with_log_prob(self) -> Tuple[torch.Tensor, torch.Tensor]:
        return torch.tanh(self._mean), self._log_prob_of_raw(self._mean)

    def log_prob(self, y: torch.Tensor) -> torch.Tensor:
        """Log-density of squashed actions ``y``; actions at +-1 are moved
        inside by 1e-6 first (``atanh`` is infinite there)."""
        return self._log_prob_of_raw(torch.atanh(y.clamp(-SQUASH_CLIP, SQUASH_CLIP)))

    @property
    def mean(self) -> torch.Tensor:
        return torch.tanh(self._mean)

    @property
    def std(self) -> torch.Tensor:
        return self._std
