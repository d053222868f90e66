"""TD3+BC: TD3 with a behaviour-cloning term in the actor loss.

TD3+BC (Fujimoto and Gu, 2021, "A Minimalist Approach to Offline
Reinforcement Learning", https://arxiv.org/abs/2106.06860) keeps TD3
(Fujimoto, van Hoof and Meger, 2018, "Addressing Function Approximation
Error in Actor-Critic Methods") and adds a squared-error pull towards the
logged action to the deterministic policy's loss:

    a'          = clip(pi_target(s') + clip(eps, -c, c), -1, 1),   eps ~ N(0, sigma^2)
    y           = r + gamma^k (1 - d) min_i Q_target_i(s', a')
    L_Q(theta)  = sum_i E_{(s, a, r, s') ~ D} [ l(y - Q_theta_i(s, a)) ]
    L_pi(phi)   = E_{(s, a) ~ D} [ -lambda Q_theta_1(s, pi_phi(s)) + (pi_phi(s) - a)^2 ]
    lambda      = alpha / E_{s ~ D} |Q_theta_1(s, pi_phi(s))|     (no gradient through lambda)

with ``sigma = target_smoothing_sigma``, ``c = target_smoothing_clip``,
``k`` the transition's interval, ``d`` its terminal flag and ``l`` the
squared error (the quantile Huber loss for QR / IQN Q-functions). The
critics are updated every step; the policy every ``update_actor_interval``
steps (on steps where ``grad_step % update_actor_interval == 0``, as in
d3rlpy), followed by Polyak averaging of the target policy and target
critics with ``tau``. On steps without a policy update the reported
``actor_loss`` is the last one computed.
"""

from __future__ import annotations

import dataclasses

import torch

from ..serialization import register
from .actor_critic import TD3StyleConfig
from .config import NON_NEGATIVE, POSITIVE_INT, param
from .td3 import TD3, smooth_target_action

__all__ = ["TD3PlusBCConfig", "TD3PlusBC", "smooth_target_action"]


@register("algorithm", "td3_plus_bc")
@dataclasses.dataclass
class TD3PlusBCConfig(TD3StyleConfig):
    """Config of TD3+BC (details in the module docstring).

    Loss:
        critics Σ_i E [ ℓ(r + γ^k (1 − d) min_j Q'_j(s', a') − Q_i(s, a)) ],
                a' = clip(π'(s') + clip(ε, −c, c), −1, 1), ε ~ N(0, σ²);
        actor   E_(s,a)~D [ −λ Q_1(s, π(s)) + (π(s) − a)² ],
                λ = α / E_s |Q_1(s, π(s))| (no gradient through λ).

    Defaults:
        d3rlpy 2.8.1's, the paper's values: alpha 2.5, learning rates 3e-4,
        batch_size=256, tau=0.005, σ=0.2, c=0.5, a policy update every 2
        critic updates. The paper also standardises observations with the
        dataset's mean and std: pass
        ``observation_scaler=StandardObservationScaler()`` to do the same.

    References:
        Fujimoto and Gu, "A Minimalist Approach to Offline Reinforcement
        Learning", 2021, arXiv:2106.06860; Fujimoto, van Hoof and Meger,
        "Addressing Function Approximation Error in Actor-Critic Methods",
        2018, arXiv:1802.09477.

    Args:
        alpha: weight of the Q term against the behaviour-cloning term.
        update_actor_interval: critic steps per policy (and target) update.
    """

    alpha: float = param(2.5, check=NON_NEGATIVE)
    update_actor_interval: int = param(2, check=POSITIVE_INT)


class TD3PlusBC(TD3, config=TD3PlusBCConfig):
    """TD3+BC (see the module docstring): :class:`~offrl.algos.td3.TD3`
    whose policy loss adds the behaviour-cloning term."""

    def _actor_loss(self, batch, policy_actions: torch.Tensor) -> torch.Tensor:
        q_first = self._modules.q_function.expected(batch.observations, policy_actions)[0]  # (B, 1)
        lam = float(self._config.alpha) / q_first.abs().mean().detach()
        return -lam * q_first.mean() + ((policy_actions - batch.actions) ** 2).mean()

    def _actor_loss_grads(self, batch, q_first: torch.Tensor, policy_actions: torch.Tensor):
        # -lam Q_1 / B for each state, lam constant; the squared error's 2 (a - a_data) / (B x actions)
        return bc_actor_loss_grads(float(self._config.alpha), q_first, policy_actions - batch.actions)


def bc_actor_loss_grads(alpha: float, q_first: torch.Tensor, difference: torch.Tensor):
    """``-lam mean Q_1 + mean(difference^2)``, ``lam = alpha / mean |Q_1|``
    (no gradient through ``lam``), with its gradients with respect to
    ``Q_1`` and to the actions (see ``DDPG._actor_loss_grads``)."""
    lam = alpha / q_first.abs().mean()
    loss = -lam * q_first.mean() + (difference**2).mean()
    return loss, torch.full_like(q_first, -1.0 / q_first.shape[0]).mul_(lam), difference * (2.0 / difference.numel())


TD3PlusBC._actor_loss_written_for = TD3PlusBC._actor_loss
