"""d3rlpy's ``d3rlpy.algos.qlearning.torch.utility`` helpers, for
algorithms written on d3rlpy's torch layer (:mod:`offrl.models.torch`);
reached at d3rlpy's path ``offrl.algos.qlearning.torch.utility``.

d3rlpy's per-algorithm ``*Impl`` classes of ``d3rlpy.algos.qlearning.torch``
are not provided: offrl's algorithms are one file each
(:mod:`offrl.algos`), with their own networks.
"""

from __future__ import annotations

from typing import Tuple

import torch

from ..models.torch import (
    ContinuousEnsembleQFunctionForwarder,
    DiscreteEnsembleQFunctionForwarder,
    NormalPolicy,
    build_squashed_gaussian_distribution,
    repeat_rows,
)
from ..types import TorchObservation

__all__ = ["DiscreteQFunctionMixin", "ContinuousQFunctionMixin", "sample_q_values_with_policy"]


class DiscreteQFunctionMixin:
    """``inner_predict_value`` of an Impl holding a discrete ensemble
    forwarder as ``self._q_func_forwarder``: the members' mean value of the
    given actions, ``(B,)``."""

    _q_func_forwarder: DiscreteEnsembleQFunctionForwarder

    def inner_predict_value(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        values = self._q_func_forwarder.compute_expected_q(x, reduction="mean")
        return values.gather(1, action.reshape(-1, 1).long()).reshape(-1)


class ContinuousQFunctionMixin:
    """``inner_predict_value`` of an Impl holding a continuous ensemble
    forwarder as ``self._q_func_forwarder``: the members' mean, ``(B,)``."""

    _q_func_forwarder: ContinuousEnsembleQFunctionForwarder

    def inner_predict_value(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return self._q_func_forwarder.compute_expected_q(x, action, reduction="mean").reshape(-1)


def sample_q_values_with_policy(
    policy: NormalPolicy,
    q_func_forwarder: ContinuousEnsembleQFunctionForwarder,
    policy_observations: TorchObservation,
    value_observations: TorchObservation,
    n_action_samples: int,
    detach_policy_output: bool,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """CQL's sampled values: ``n_action_samples`` squashed-Gaussian actions
    per row of ``policy_observations``, valued at the rows of
    ``value_observations`` by every member.

    Returns the values ``(E, B, n)`` and the actions' log-densities
    ``(1, B, n)`` (detached with ``detach_policy_output``).
    """
    if isinstance(n_action_samples, bool) or not isinstance(n_action_samples, int) or n_action_samples <= 0:
        raise ValueError(f"n_action_samples must be a positive int, got {n_action_samples!r}")
    dist = build_squashed_gaussian_distribution(policy(policy_observations))
    actions, log_probs = dist.sample_n_with_log_prob(n_action_samples)  # (B, n, A), (B, n, 1)
    if detach_policy_output:
        actions, log_probs = actions.detach(), log_probs.detach()
    batch = actions.shape[0]
    values = q_func_forwarder.compute_expected_q(
        repeat_rows(value_observations, n_action_samples), actions.reshape(batch * n_action_samples, -1), "none")
    return values.view(-1, batch, n_action_samples), log_probs.view(1, batch, n_action_samples)
