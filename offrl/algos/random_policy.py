"""Random policies: baselines that ignore the observation.

``RandomPolicy`` draws continuous actions in the normalised range [-1, 1],

    uniform:  a ~ U(-1, 1)^A
    normal:   a = clip(eps, -1, 1),  eps ~ N(0, normal_std^2 I_A)

and maps them through the action scaler's reverse transform when one is
set (so ``MinMaxActionScaler(minimum, maximum)`` gives actions in
``[minimum, maximum]``). ``DiscreteRandomPolicy`` draws action indices
uniformly from ``{0, ..., A - 1}``.

They have no networks and cannot be trained (``fit`` raises); build them
with ``build_with_dataset``, ``build_with_env`` or ``create_impl``. Draws
come from torch's generator on the algorithm's device, so ``offrl.seed``
makes them reproducible. ``predict`` and ``sample_action`` both sample.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, NoReturn

import torch
from torch import nn

from ..constants import ActionSpace
from ..models.policies import gaussian_log_prob
from ..serialization import register
from .base import QLearningAlgoBase
from .config import POSITIVE, LearnableConfig, one_of, param

__all__ = [
    "RandomPolicyConfig",
    "RandomPolicy",
    "DiscreteRandomPolicyConfig",
    "DiscreteRandomPolicy",
]

DISTRIBUTIONS = ("uniform", "normal")


@register("algorithm", "random_policy")
@dataclasses.dataclass
class RandomPolicyConfig(LearnableConfig):
    """Config of the continuous random policy (see
    :mod:`offrl.algos.random_policy`).

    Loss:
        none: the policy is not trained (``fit`` raises).

    Defaults:
        d3rlpy 2.8.1's (``distribution="uniform"``, ``normal_std=1.0``).

    References:
        none: a baseline, not from a paper.

    Args:
        distribution: ``"uniform"`` on [-1, 1] or ``"normal"`` (clipped to
            [-1, 1]), before the action scaler's reverse transform.
        normal_std: standard deviation of the ``"normal"`` distribution.
    """

    distribution: str = param("uniform", check=one_of(DISTRIBUTIONS))
    normal_std: float = param(1.0, check=POSITIVE)


@register("algorithm", "discrete_random_policy")
@dataclasses.dataclass
class DiscreteRandomPolicyConfig(LearnableConfig):
    """Config of the discrete random policy: uniform action indices.

    Loss:
        none: the policy is not trained (``fit`` raises).

    Defaults:
        d3rlpy 2.8.1's (no fields of its own).

    References:
        none: a baseline, not from a paper.
    """


def _batch_size(x: Any) -> int:
    return int(x[0].shape[0] if isinstance(x, list) else x.shape[0])


class _RandomPolicyBase(QLearningAlgoBase):
    """What both random policies share: no networks, no training."""

    is_trainable = False
    predicts_stochastically = True

    def _build(self, observation_shape, action_size: int) -> None:
        pass

    def _cannot_train(self) -> NoReturn:
        raise RuntimeError(
            f"{type(self).__name__} has nothing to learn and cannot be trained; "
            "build it with build_with_dataset, build_with_env or create_impl and call predict"
        )

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        self._cannot_train()

    def _sample(self, x) -> torch.Tensor:
        return self._predict(x)

    def policy_module(self) -> nn.Module:
        raise NotImplementedError(f"{type(self).__name__} has no policy network to export")


class RandomPolicy(_RandomPolicyBase, config=RandomPolicyConfig):
    """Random continuous actions (see the module docstring)."""

    _action_type = ActionSpace.CONTINUOUS

    def _predict(self, x) -> torch.Tensor:
        shape = (_batch_size(x), int(self._action_size))
        if self._config.distribution == "normal":
            noise = torch.randn(shape, device=self._device)
            return (noise * float(self._config.normal_std)).clamp(-1.0, 1.0)
        return torch.rand(shape, device=self._device) * 2.0 - 1.0

    def _action_log_prob(self, x, action: torch.Tensor) -> torch.Tensor:
        """Log-density of scaled ``action``, ``(B,)``, ``-inf`` outside [-1, 1]
        (``"normal"``: the Gaussian density inside, the clipped mass at +-1
        ignored) (for :mod:`offrl.ope`)."""
        inside = (action.abs() <= 1.0).all(dim=-1)
        if self._config.distribution == "normal":
            logstd = torch.full_like(action, math.log(float(self._config.normal_std)))
            log_prob = gaussian_log_prob(action, torch.zeros_like(action), logstd)
        else:
            log_prob = torch.full((action.shape[0],), -action.shape[1] * math.log(2.0), device=action.device)
        return torch.where(inside, log_prob, torch.full_like(log_prob, -math.inf))


class DiscreteRandomPolicy(_RandomPolicyBase, config=DiscreteRandomPolicyConfig):
    """Uniformly random action indices (see the module docstring)."""

    _action_type = ActionSpace.DISCRETE

    def _predict(self, x) -> torch.Tensor:
        return torch.randint(int(self._action_size), (_batch_size(x),), device=self._device)

    def _action_probabilities(self, x) -> torch.Tensor:
        """Uniform ``(B, A)`` probabilities (for :mod:`offrl.ope`)."""
        size = int(self._action_size)
        return torch.full((_batch_size(x), size), 1.0 / size, device=self._device)
