"""d3rlpy's policy modules (``d3rlpy.models.torch.policies``), for
algorithms written on d3rlpy's builders.

A continuous policy returns an :class:`ActionOutput`: ``mu`` (the mean
before squashing), ``squashed_mu`` (the action in [-1, 1]) and ``logstd``
(None for a deterministic policy). :class:`CategoricalPolicy` returns a
``torch.distributions.Categorical``. Attribute names (``_encoder``,
``_fc``, ``_mu``, ``_logstd``) and so state-dict keys are d3rlpy's.

offrl's own algorithms use the policies of :mod:`offrl.models.policies`
(tensors out, no record), which these do not replace.
"""

from __future__ import annotations

import abc
from typing import Any, NamedTuple, Optional, Union

import torch
from torch import nn
from torch.distributions import Categorical

from ...types import TorchObservation
from .distributions import GaussianDistribution, SquashedGaussianDistribution
from .encoders import Encoder, EncoderWithAction, check_positive_int

__all__ = [
    "ActionOutput",
    "Policy",
    "DeterministicPolicy",
    "DeterministicResidualPolicy",
    "NormalPolicy",
    "CategoricalPolicy",
    "build_gaussian_distribution",
    "build_squashed_gaussian_distribution",
]


class ActionOutput(NamedTuple):
    """What a continuous policy returns: ``mu`` (pre-squash mean),
    ``squashed_mu`` (``tanh(mu)``, or the action itself for a residual
    policy) and ``logstd`` (None for a deterministic policy), each ``(B, A)``."""

    mu: torch.Tensor
    squashed_mu: torch.Tensor
    logstd: Optional[torch.Tensor]

    def copy_(self, src: "ActionOutput") -> None:
        """Copy ``src``'s tensors into this record's, in place (static
        buffers of a captured graph)."""
        self.mu.copy_(src.mu)
        self.squashed_mu.copy_(src.squashed_mu)
        if self.logstd is not None:
            if src.logstd is None:
                raise ValueError("ActionOutput.copy_: this record has a logstd, the source has none")
            self.logstd.copy_(src.logstd)


def _logstd_of(action: ActionOutput, what: str) -> torch.Tensor:
    if not isinstance(action, ActionOutput):
        raise TypeError(f"{what} takes an ActionOutput, got {type(action).__name__}")
    if action.logstd is None:
        raise ValueError(f"{what} needs a stochastic policy's output: this ActionOutput has logstd=None")
    return action.logstd


def build_gaussian_distribution(action: ActionOutput) -> GaussianDistribution:
    """``N(squashed_mu, exp(logstd))`` (``mu`` kept for the unsquashed samples)."""
    logstd = _logstd_of(action, "build_gaussian_distribution")
    return GaussianDistribution(loc=action.squashed_mu, std=logstd.exp(), raw_loc=action.mu)


def build_squashed_gaussian_distribution(action: ActionOutput) -> SquashedGaussianDistribution:
    """``tanh(u)``, ``u ~ N(mu, exp(logstd))``."""
    logstd = _logstd_of(action, "build_squashed_gaussian_distribution")
    return SquashedGaussianDistribution(loc=action.mu, std=logstd.exp())


class Policy(nn.Module, metaclass=abc.ABCMeta):
    """A continuous policy: ``forward(x, *args) -> ActionOutput``."""

    @abc.abstractmethod
    def forward(self, x: TorchObservation, *args: Any) -> ActionOutput:
        """The action record of a batch of (scaled) observations."""


class DeterministicPolicy(Policy):
    """``tanh(W h(x) + b)`` (DDPG's, TD3's)."""

    def __init__(self, encoder: Encoder, hidden_size: int, action_size: int) -> None:
        super().__init__()
        self._encoder = encoder
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), check_positive_int("action_size", action_size))

    def forward(self, x: TorchObservation, *args: Any) -> ActionOutput:
        mu = self._fc(self._encoder(x))
        return ActionOutput(mu, torch.tanh(mu), None)


class DeterministicResidualPolicy(Policy):
    """BCQ's perturbation: ``clip(a + scale * tanh(W h(x, a) + b), -1, 1)``
    for a given action ``a``; ``forward(x, action)``."""

    def __init__(self, encoder: EncoderWithAction, hidden_size: int, action_size: int, scale: float) -> None:
        super().__init__()
        if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale < 0:
            raise ValueError(f"scale must be a number >= 0, got {scale!r}")
        self._scale = float(scale)
        self._encoder = encoder
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), check_positive_int("action_size", action_size))

    def forward(self, x: TorchObservation, *args: Any) -> ActionOutput:
        if len(args) != 1:
            raise TypeError("DeterministicResidualPolicy.forward takes (x, action)")
        action = args[0]
        residual = self._scale * torch.tanh(self._fc(self._encoder(x, action)))
        perturbed = (action + residual).clamp(-1.0, 1.0)
        return ActionOutput(perturbed, perturbed, None)


class NormalPolicy(Policy):
    """A diagonal Gaussian: ``mu = W h(x) + b``; ``logstd`` from a second
    linear layer clamped to ``[min_logstd, max_logstd]``, or
    (``use_std_parameter``) one learned parameter per action dimension
    mapped into that range by a sigmoid."""

    def __init__(self, encoder: Encoder, hidden_size: int, action_size: int, min_logstd: float, max_logstd: float,
                 use_std_parameter: bool) -> None:
        super().__init__()
        if not min_logstd < max_logstd:
            raise ValueError(f"min_logstd must be below max_logstd, got {min_logstd} and {max_logstd}")
        hidden_size = check_positive_int("hidden_size", hidden_size)
        self._action_size = check_positive_int("action_size", action_size)
        self._encoder = encoder
        self._min_logstd = float(min_logstd)
        self._max_logstd = float(max_logstd)
        self._use_std_parameter = bool(use_std_parameter)
        self._mu = nn.Linear(hidden_size, action_size)
        self._logstd: Union[nn.Linear, nn.Parameter]
        if self._use_std_parameter:
            self._logstd = nn.Parameter(torch.zeros(1, action_size, dtype=torch.float32))
        else:
            self._logstd = nn.Linear(hidden_size, action_size)

    def forward(self, x: TorchObservation, *args: Any) -> ActionOutput:
        h = self._encoder(x)
        mu = self._mu(h)
        if isinstance(self._logstd, nn.Parameter):
            span = self._max_logstd - self._min_logstd
            logstd = self._min_logstd + torch.sigmoid(self._logstd) * span
        else:
            logstd = self._logstd(h).clamp(self._min_logstd, self._max_logstd)
        return ActionOutput(mu, torch.tanh(mu), logstd)


class CategoricalPolicy(nn.Module):
    """A softmax policy over discrete actions: ``forward(x) -> Categorical``."""

    def __init__(self, encoder: Encoder, hidden_size: int, action_size: int) -> None:
        super().__init__()
        self._encoder = encoder
        self._fc = nn.Linear(check_positive_int("hidden_size", hidden_size), check_positive_int("action_size", action_size))

    def forward(self, x: TorchObservation) -> Categorical:
        return Categorical(logits=self._fc(self._encoder(x)))
