"""Ensembles of d3rlpy's Q-functions
(``d3rlpy.models.torch.q_functions.ensemble_q_function``).

An ensemble forwarder holds one forwarder per member and combines their
outputs over the member axis with a reduction:

* ``min`` / ``max`` / ``mean``: elementwise over the members; for
  quantiles, ``min`` / ``max`` pick, per sample (and action), the member
  whose mean is lowest / highest, and ``mean`` averages the members'
  quantiles;
* ``mix``: ``lam * min + (1 - lam) * max`` (BCQ's and BEAR's soft clipped
  double-Q);
* ``none``: the members' values stacked, ``(E, B, ...)``.

The TD error of an ensemble is the sum over members of each member's mean
TD error.
"""

from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

import torch

from ....types import TorchObservation
from .base import ContinuousQFunctionForwarder, DiscreteQFunctionForwarder
from .utility import observation_batch_size, observation_device, repeat_rows

__all__ = [
    "DiscreteEnsembleQFunctionForwarder",
    "ContinuousEnsembleQFunctionForwarder",
    "compute_ensemble_q_function_error",
    "compute_ensemble_q_function_target",
    "compute_max_with_n_actions",
    "compute_max_with_n_actions_and_indices",
    "reduce_ensemble",
    "reduce_quantile_ensemble",
]

REDUCTIONS = ("min", "max", "mean", "mix", "none")
Forwarders = Union[Sequence[DiscreteQFunctionForwarder], Sequence[ContinuousQFunctionForwarder]]


def _check_reduction(reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")


def reduce_ensemble(y: torch.Tensor, reduction: str = "min", dim: int = 0, lam: float = 0.75) -> torch.Tensor:
    """Combine values over the member axis ``dim`` (see the module documentation)."""
    _check_reduction(reduction)
    if reduction == "none":
        return y
    if reduction == "mean":
        return y.mean(dim=dim)
    low, high = y.min(dim=dim).values, y.max(dim=dim).values
    if reduction == "min":
        return low
    if reduction == "max":
        return high
    return lam * low + (1.0 - lam) * high


def _member_quantiles(y: torch.Tensor, members: torch.Tensor) -> torch.Tensor:
    """``y[members[...], ...]``: ``(E, B, N)`` with ``(B,)`` member indices
    -> ``(B, N)``; ``(E, B, A, N)`` with ``(B, A)`` -> ``(B, A, N)``."""
    index = members.unsqueeze(0).unsqueeze(-1).expand((1,) + tuple(y.shape[1:]))
    return y.gather(0, index).squeeze(0)


def reduce_quantile_ensemble(y: torch.Tensor, reduction: str = "min", dim: int = 0, lam: float = 0.75) -> torch.Tensor:
    """Combine quantiles ``(E, B, N)`` or ``(E, B, A, N)`` over members by
    their means (see the module documentation)."""
    _check_reduction(reduction)
    if dim != 0:
        raise ValueError(f"reduce_quantile_ensemble reduces the first (member) axis, got dim={dim}")
    if y.dim() not in (3, 4):
        raise ValueError(f"quantiles must be (E, B, N) or (E, B, A, N), got shape {tuple(y.shape)}")
    if reduction == "none":
        return y
    if reduction == "mean":
        return y.mean(dim=0)
    means = y.mean(dim=-1)
    low = _member_quantiles(y, means.argmin(dim=0))
    high = _member_quantiles(y, means.argmax(dim=0))
    if reduction == "min":
        return low
    if reduction == "max":
        return high
    return lam * low + (1.0 - lam) * high


def compute_ensemble_q_function_error(
    forwarders: Forwarders,
    observations: TorchObservation,
    actions: torch.Tensor,
    rewards: torch.Tensor,
    target: torch.Tensor,
    terminals: torch.Tensor,
    gamma: Union[float, torch.Tensor] = 0.99,
    masks: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Sum over members of the mean (``masks``-weighted) TD error; ``target``
    is ``(B, 1)`` (or ``(B, N)`` target quantiles)."""
    if target.dim() != 2:
        raise ValueError(f"target must be 2-D, (B, 1) values or (B, N) quantiles, got shape {tuple(target.shape)}")
    total = torch.zeros((), dtype=torch.float32, device=observation_device(observations))
    for forwarder in forwarders:
        loss = forwarder.compute_error(observations=observations, actions=actions, rewards=rewards, target=target,
                                       terminals=terminals, gamma=gamma, reduction="none")
        if masks is not None:
            loss = loss * masks
        total = total + loss.mean()
    return total


def compute_ensemble_q_function_target(
    forwarders: Forwarders,
    action_size: int,
    x: TorchObservation,
    action: Optional[torch.Tensor] = None,
    reduction: str = "min",
    lam: float = 0.75,
) -> torch.Tensor:
    """The members' bootstrap values combined by ``reduction``: at
    ``action`` (``(B, 1)`` or ``(B, N)``), or of every discrete action when
    ``action`` is None (``(B, A)`` or ``(B, A, N)``)."""
    batch = observation_batch_size(x)
    values = torch.cat([f.compute_target(x, action).reshape(1, batch, -1) for f in forwarders], dim=0)
    if action is None:
        if values.shape[2] == action_size:  # expected values of every action
            return reduce_ensemble(values, reduction, lam=lam)
        return reduce_quantile_ensemble(values.view(values.shape[0], batch, action_size, -1), reduction, lam=lam)
    if values.shape[2] == 1:
        return reduce_ensemble(values, reduction, lam=lam)
    return reduce_quantile_ensemble(values, reduction, lam=lam)


def _stack_expected(values: List[torch.Tensor], batch: int, width: int) -> torch.Tensor:
    return torch.cat([v.reshape(1, batch, width) for v in values], dim=0)


class DiscreteEnsembleQFunctionForwarder:
    """The members of a discrete-action ensemble (``forwarders``) as one."""

    def __init__(self, forwarders: Sequence[DiscreteQFunctionForwarder], action_size: int) -> None:
        if len(forwarders) == 0:
            raise ValueError("an ensemble needs at least one forwarder")
        self._forwarders = forwarders
        self._action_size = action_size

    def compute_expected_q(self, x: TorchObservation, reduction: str = "mean") -> torch.Tensor:
        """Expected values of every action, ``(B, A)`` (``(E, B, A)`` for ``none``)."""
        values = [f.compute_expected_q(x) for f in self._forwarders]
        return reduce_ensemble(_stack_expected(values, observation_batch_size(x), self._action_size), reduction)

    def compute_error(self, observations: TorchObservation, actions: torch.Tensor, rewards: torch.Tensor,
                      target: torch.Tensor, terminals: torch.Tensor, gamma: Union[float, torch.Tensor] = 0.99,
                      masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        return compute_ensemble_q_function_error(self._forwarders, observations, actions, rewards, target,
                                                 terminals, gamma, masks)

    def compute_target(self, x: TorchObservation, action: Optional[torch.Tensor] = None, reduction: str = "min",
                       lam: float = 0.75) -> torch.Tensor:
        return compute_ensemble_q_function_target(self._forwarders, self._action_size, x, action, reduction, lam)

    @property
    def forwarders(self) -> Sequence[DiscreteQFunctionForwarder]:
        return self._forwarders


class ContinuousEnsembleQFunctionForwarder:
    """The members of a continuous-action ensemble (``forwarders``) as one."""

    def __init__(self, forwarders: Sequence[ContinuousQFunctionForwarder], action_size: int) -> None:
        if len(forwarders) == 0:
            raise ValueError("an ensemble needs at least one forwarder")
        self._forwarders = forwarders
        self._action_size = action_size

    def compute_expected_q(self, x: TorchObservation, action: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
        """Expected values ``(B, 1)`` (``(E, B, 1)`` for ``none``)."""
        values = [f.compute_expected_q(x, action) for f in self._forwarders]
        return reduce_ensemble(_stack_expected(values, observation_batch_size(x), 1), reduction)

    def compute_error(self, observations: TorchObservation, actions: torch.Tensor, rewards: torch.Tensor,
                      target: torch.Tensor, terminals: torch.Tensor, gamma: Union[float, torch.Tensor] = 0.99,
                      masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        return compute_ensemble_q_function_error(self._forwarders, observations, actions, rewards, target,
                                                 terminals, gamma, masks)

    def compute_target(self, x: TorchObservation, action: torch.Tensor, reduction: str = "min",
                       lam: float = 0.75) -> torch.Tensor:
        return compute_ensemble_q_function_target(self._forwarders, self._action_size, x, action, reduction, lam)

    @property
    def forwarders(self) -> Sequence[ContinuousQFunctionForwarder]:
        return self._forwarders


def compute_max_with_n_actions_and_indices(
    x: TorchObservation,
    actions: torch.Tensor,
    forwarder: ContinuousEnsembleQFunctionForwarder,
    lam: float,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """BCQ's target over ``n`` candidate actions per observation.

    ``x`` ``(B, ...)``, ``actions`` ``(B, n, A)``. Each candidate's value
    is the mix ``lam * min + (1 - lam) * max`` over the members (members
    picked by their mean for quantiles); returns the best candidate's mixed
    value ``(B, 1)`` (``(B, N)`` for quantiles) and its index ``(B,)``.
    """
    if actions.dim() != 3:
        raise ValueError(f"actions must be (B, n, action_size), got shape {tuple(actions.shape)}")
    batch, n = actions.shape[0], actions.shape[1]
    members = len(forwarder.forwarders)
    flat_values = forwarder.compute_target(repeat_rows(x, n), actions.reshape(batch * n, -1), "none")
    values = flat_values.view(members, batch, n, -1)  # (E, B, n, K)
    means = values.mean(dim=3)  # (E, B, n)
    high_member, low_member = means.argmax(dim=0), means.argmin(dim=0)  # (B, n)
    mixed_means = (1.0 - lam) * means.max(dim=0).values + lam * means.min(dim=0).values
    best = mixed_means.argmax(dim=1)  # (B,)
    high = _member_quantiles(values, high_member)  # (B, n, K)
    low = _member_quantiles(values, low_member)
    mixed = (1.0 - lam) * high + lam * low
    return mixed[torch.arange(batch, device=mixed.device), best], best


def compute_max_with_n_actions(
    x: TorchObservation,
    actions: torch.Tensor,
    forwarder: ContinuousEnsembleQFunctionForwarder,
    lam: float,
) -> torch.Tensor:
    """The value of :func:`compute_max_with_n_actions_and_indices` alone."""
    return compute_max_with_n_actions_and_indices(x, actions, forwarder, lam)[0]
