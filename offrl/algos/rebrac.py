"""ReBRAC: TD3+BC revisited, with decoupled actor and critic penalties.

ReBRAC (Tarasov, Kurenkov, Nikulin and Kolesnikov, 2023, "Revisiting the
Minimalist Approach to Offline Reinforcement Learning") keeps TD3
(:mod:`offrl.algos.td3`: target smoothing, delayed policy updates) and
regularises both the actor and the critic towards the data, with separate
weights ``beta_1 = actor_beta`` and ``beta_2 = critic_beta``:

    a'          = clip(pi'(s') + clip(eps, -c, c), -1, 1),   eps ~ N(0, sigma^2)
    y           = r + gamma^k (1 - d) ( min_j Q'_j(s', a') - beta_2 ||a' - a'_D||^2 )
    L_Q(theta)  = sum_i E_{(s, a, r, s', a'_D) ~ D} [ l(y - Q_theta_i(s, a)) ]
    L_pi(phi)   = E_{(s, a) ~ D} [ -lambda min_i Q_i(s, pi_phi(s)) + beta_1 ||pi_phi(s) - a||^2 ]
    lambda      = 1 / E_{s ~ D} | min_i Q_i(s, pi_phi(s)) |      (no gradient through lambda)

where ``a'_D`` is the action logged at ``s'`` (the batch's
``next_actions``), ``||.||^2`` sums over the action's dimensions, ``k`` is
the transition's interval and ``d`` its terminal flag. The paper's other
changes are settings: batch size 1024 (the default here), learning rates
1e-3 (default), and layer normalisation in deeper (3 x 256) actor and critic
networks with gamma 0.999 on some tasks. As in d3rlpy 2.8.1 the encoders
default to :class:`~offrl.models.DefaultEncoderFactory`; pass
``VectorEncoderFactory(hidden_units=[256, 256, 256], use_layer_norm=True)``
as ``actor_encoder_factory`` and ``critic_encoder_factory`` for the paper's
networks (or :class:`~offrl.models.SimBaEncoderFactory`, residual blocks
with layer norm).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..serialization import register
from .actor_critic import TD3StyleConfig
from .config import NON_NEGATIVE, POSITIVE, POSITIVE_INT, param
from .td3 import TD3

__all__ = ["ReBRACConfig", "ReBRAC"]


@register("algorithm", "rebrac")
@dataclasses.dataclass
class ReBRACConfig(TD3StyleConfig):
    """Config of ReBRAC (details in :mod:`offrl.algos.rebrac`).

    Loss:
        critics Σ_i E [ ℓ(r + γ^k (1 − d) (min_j Q'_j(s', a') − β₂ ‖a' − a'_D‖²) − Q_i(s, a)) ],
                a' = clip(π'(s') + clip(ε, −c, c), −1, 1), a'_D the logged next action;
        actor   E_(s,a)~D [ −λ min_i Q_i(s, π(s)) + β₁ ‖π(s) − a‖² ],
                λ = 1 / E_s |min_i Q_i(s, π(s))| (no gradient through λ).

    Defaults:
        d3rlpy 2.8.1's: batch_size=1024, learning rates 1e-3, actor_beta
        (β₁) 0.001, critic_beta (β₂) 0.01, tau=0.005, σ=0.2, c=0.5, a policy
        update every 2 critic updates, gamma=0.99, default encoders. The
        paper tunes β₁ and β₂ per dataset and uses 3 × 256 layer-normalised
        networks (see the module docstring for the encoder to pass).

    References:
        Tarasov, Kurenkov, Nikulin and Kolesnikov, "Revisiting the
        Minimalist Approach to Offline Reinforcement Learning", 2023,
        arXiv:2305.09836.

    Args:
        actor_beta: β₁, weight of the actor's behaviour-cloning penalty.
        critic_beta: β₂, weight of the penalty in the critic target.
        update_actor_interval: critic steps per policy (and target) update.
    """

    batch_size: int = param(1024, check=POSITIVE_INT)
    actor_learning_rate: float = param(1e-3, check=POSITIVE)
    critic_learning_rate: float = param(1e-3, check=POSITIVE)
    actor_beta: float = param(0.001, check=NON_NEGATIVE)
    critic_beta: float = param(0.01, check=NON_NEGATIVE)
    update_actor_interval: int = param(2, check=POSITIVE_INT)


class ReBRAC(TD3, config=ReBRACConfig):
    """ReBRAC (see the module docstring): :class:`~offrl.algos.td3.TD3`
    with a behaviour-cloning penalty in the critic target and in the
    policy loss."""

    def _next_value(self, batch: Any, next_actions: torch.Tensor) -> torch.Tensor:
        penalty = ((next_actions - batch.next_actions) ** 2).sum(dim=1, keepdim=True)  # (B, 1)
        return super()._next_value(batch, next_actions) - float(self._config.critic_beta) * penalty

    def _actor_loss(self, batch: Any, policy_actions: torch.Tensor) -> torch.Tensor:
        q_min = self._modules.q_function.expected(batch.observations, policy_actions).min(dim=0).values  # (B, 1)
        lam = 1.0 / q_min.abs().mean().detach()
        bc = ((policy_actions - batch.actions) ** 2).sum(dim=1, keepdim=True)
        return (-lam * q_min + float(self._config.actor_beta) * bc).mean()
