"""Twin Delayed Deep Deterministic Policy Gradients.

TD3 (Fujimoto, van Hoof and Meger, 2018, "Addressing Function Approximation
Error in Actor-Critic Methods", https://arxiv.org/abs/1802.09477) is DDPG
(:mod:`offrl.algos.ddpg`) with three changes against overestimation:

* twin critics (``n_critics=2``), the target taking their minimum;
* target policy smoothing: the target action is perturbed by clipped
  Gaussian noise,

      a' = clip(pi'(s') + clip(eps, -c, c), -1, 1),   eps ~ N(0, sigma^2)
      y  = r + gamma^k (1 - d) min_j Q'_j(s', a')

  with ``sigma = target_smoothing_sigma`` and ``c = target_smoothing_clip``;
* delayed policy updates: the critics are updated every step, the policy
  (``L_pi = -E Q_1(s, pi(s))``) and both target networks only on steps
  where ``grad_step % update_actor_interval == 0`` (as in d3rlpy). On the
  other steps the reported ``actor_loss`` is the last one computed (0
  before the first).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..serialization import register
from .actor_critic import TD3StyleConfig
from .config import POSITIVE_INT, param
from .ddpg import DDPG

__all__ = ["TD3Config", "TD3", "smooth_target_action"]


@register("algorithm", "td3")
@dataclasses.dataclass
class TD3Config(TD3StyleConfig):
    """Config of TD3 (details in the module docstring).

    Loss:
        critics Σ_i E [ ℓ(r + γ^k (1 − d) min_j Q'_j(s', a') − Q_i(s, a)) ],
                a' = clip(π'(s') + clip(ε, −c, c), −1, 1), ε ~ N(0, σ²);
        actor   −E_s~D [ Q_1(s, π(s)) ] every ``update_actor_interval`` steps.

    Defaults:
        d3rlpy 2.8.1's, those of the authors' updated code: learning rates
        3e-4, batch_size=256, tau=0.005, σ=0.2, c=0.5, policy delay 2. The
        paper itself used learning rates 1e-3 and batch size 100.

    References:
        Fujimoto, van Hoof and Meger, "Addressing Function Approximation
        Error in Actor-Critic Methods", 2018, arXiv:1802.09477.

    Args:
        update_actor_interval: critic steps per policy (and target) update.
    """

    batch_size: int = param(256, check=POSITIVE_INT)
    update_actor_interval: int = param(2, check=POSITIVE_INT)


def smooth_target_action(action: torch.Tensor, sigma: float, clip: float) -> torch.Tensor:
    """``clip(action + clip(N(0, sigma^2), -clip, clip), -1, 1)``: TD3's
    target policy smoothing."""
    noise = (torch.randn_like(action) * sigma).clamp(-clip, clip)
    return (action + noise).clamp(-1.0, 1.0)


class TD3(DDPG, config=TD3Config):
    """TD3 (see the module docstring): DDPG with a smoothed target action
    and delayed policy/target updates. Works with any config that has
    ``target_smoothing_sigma``, ``target_smoothing_clip`` and
    ``update_actor_interval`` (TD3+BC's too)."""

    def _target_actions(self, next_observations: Any) -> torch.Tensor:
        cfg = self._config
        return smooth_target_action(
            self._modules.targ_policy(next_observations), float(cfg.target_smoothing_sigma), float(cfg.target_smoothing_clip)
        )

    def _actor_interval(self) -> int:
        return int(self._config.update_actor_interval)
