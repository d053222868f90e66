"""Soft Actor-Critic for discrete actions.

Discrete SAC (Christodoulou, 2019, "Soft Actor-Critic for Discrete Action
Settings", https://arxiv.org/abs/1910.07207) trains a categorical policy
``pi`` against an ensemble of critics ``Q_1..Q_E`` that output a value per
action (twin critics by default). With the policy's full distribution the
expectations over actions are exact sums:

    critic:  L(theta_i) = E_{(s, a, r, s') ~ D} [ l(y - Q_i(s, a)) ]
             y = r + gamma^k (1 - d) sum_a' pi(a'|s') ( min_j Q'_j(s', a') - alpha log pi(a'|s') )
    actor:   J(phi) = E_{s ~ D} [ sum_a pi_phi(a|s) ( alpha log pi_phi(a|s) - min_i Q_i(s, a) ) ]
    temperature, alpha = exp(log_alpha):
             J(log_alpha) = -E_{s ~ D} [ alpha ( sum_a pi(a|s) log pi(a|s) + H ) ],   H = 0.98 log(action_size)

``l`` is the Huber loss (the quantile Huber loss for QR / IQN critics,
whose ensemble minimum picks, per action, the member with the lowest mean);
``k`` is the transition's interval and ``d`` its terminal flag. The
critic losses are summed over the ensemble. As in d3rlpy 2.8.1:

* each step updates the critics, then the temperature, then the policy
  (the actor loss uses the temperature just updated and the updated
  critics, without gradient into them);
* the target critics ``Q'`` are copied from the critics on steps where
  ``grad_step % target_update_interval == 0``;
* the temperature is fixed at ``initial_temperature`` when
  ``temp_learning_rate`` is 0, and ``initial_temperature=0`` drops the
  entropy terms (then ``temp_learning_rate`` must be 0);
* ``predict`` is the most probable action, ``sample_action`` draws from
  ``pi``, and ``predict_value`` is the ensemble mean of ``Q(s, a)``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Dict, Optional

import torch
import torch.nn.functional as F

from ..constants import ActionSpace
from ..models.encoders import compute_output_size
from ..models.modules import Modules
from ..models.optimizers import OptimizerWrapper
from ..models.parameters import ScalarParameter
from ..models.policies import CategoricalPolicy
from ..models.q_functions import QFunction
from ..serialization import register
from ._common import critic_step, freeze, hard_update, optimizer_step, td_target, temperature_step
from .actor_critic import SoftActorCriticConfig
from .bc import CategoricalPolicyBase
from .config import NON_NEGATIVE, POSITIVE_INT, param

__all__ = ["DiscreteSACConfig", "DiscreteSAC", "DiscreteSACModules", "target_entropy", "ensemble_min_per_action"]


@register("algorithm", "discrete_sac")
@dataclasses.dataclass
class DiscreteSACConfig(SoftActorCriticConfig):
    """Config of discrete Soft Actor-Critic (details in the module docstring).

    Loss:
        critics Σ_i E [ ℓ(y − Q_i(s, a)) ],
                y = r + γ^k (1 − d) Σ_a' π(a'|s') (min_j Q'_j(s', a') − α log π(a'|s'));
        actor   E_s~D [ Σ_a π(a|s) (α log π(a|s) − min_i Q_i(s, a)) ];
        temperature −E_s~D [ α (Σ_a π(a|s) log π(a|s) + 0.98 log action_size) ].

    Defaults:
        d3rlpy 2.8.1's, the paper's values: learning rates 3e-4,
        batch_size=64, two critics, target copied every 8000 steps; the
        temperature starts at 1.0.

    References:
        Christodoulou, "Soft Actor-Critic for Discrete Action Settings",
        2019, arXiv:1910.07207.

    Args:
        n_critics: number of Q-functions in the ensemble.
        initial_temperature: initial entropy temperature ``alpha`` (0: no
            entropy terms).
        target_update_interval: steps between copies of the critics into
            the target critics.
    """

    batch_size: int = param(64, check=POSITIVE_INT)
    n_critics: int = param(2, check=POSITIVE_INT)
    initial_temperature: float = param(1.0, check=NON_NEGATIVE)
    target_update_interval: int = param(8000, check=POSITIVE_INT)

    def validate(self) -> None:
        super().validate()
        if self.initial_temperature == 0 and self.temp_learning_rate > 0:
            raise ValueError(
                "initial_temperature=0 turns the entropy terms off, so there is no temperature to learn: "
                f"temp_learning_rate must be 0, got {self.temp_learning_rate}"
            )


def target_entropy(action_size: int) -> float:
    """``0.98 log(action_size)``: 98 % of the uniform policy's entropy."""
    return 0.98 * math.log(action_size)


def ensemble_min_per_action(dist: torch.Tensor) -> torch.Tensor:
    """``(E, B, A, N)`` value distributions -> ``(B, A, N)``: for each state
    and action, the member with the lowest mean (the plain minimum for
    scalar values)."""
    if dist.shape[0] == 1:
        return dist[0]
    if dist.shape[-1] == 1:
        return dist.min(dim=0).values
    index = dist.mean(dim=-1).argmin(dim=0)  # (B, A)
    index = index.view(1, *index.shape, 1).expand(1, -1, -1, dist.shape[-1])
    return dist.gather(0, index)[0]


@dataclasses.dataclass(frozen=True)
class DiscreteSACModules(Modules):
    """Discrete SAC's networks and optimizers (``log_temp`` is None without
    entropy terms, ``temp_optim`` when the temperature is fixed)."""

    policy: CategoricalPolicy
    q_function: QFunction
    targ_q_function: QFunction
    log_temp: Optional[ScalarParameter]
    actor_optim: OptimizerWrapper
    critic_optim: OptimizerWrapper
    temp_optim: Optional[OptimizerWrapper]


class DiscreteSAC(CategoricalPolicyBase, config=DiscreteSACConfig):
    """Soft Actor-Critic for discrete actions (see the module docstring)."""

    _action_type = ActionSpace.DISCRETE
    has_q_function = True
    _modules: DiscreteSACModules
    _policy_module = "policy"
    _q_modules = ("q_function", "targ_q_function")
    _policy_optim = "actor_optim"
    _q_optim = "critic_optim"

    def _build(self, observation_shape, action_size: int) -> DiscreteSACModules:
        cfg = self._config
        encoder = cfg.actor_encoder_factory.create(observation_shape)
        policy = CategoricalPolicy(encoder, compute_output_size(encoder, observation_shape), action_size)
        q = cfg.q_func_factory.create(cfg.critic_encoder_factory, observation_shape, action_size, int(cfg.n_critics), discrete=True)
        log_temp = ScalarParameter(cfg.initial_temperature) if cfg.initial_temperature > 0 else None
        return DiscreteSACModules(
            policy=policy, q_function=q, targ_q_function=freeze(copy.deepcopy(q)), log_temp=log_temp,
            actor_optim=self._optimizer(cfg.actor_optim_factory, [policy], cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], cfg.critic_learning_rate),
            temp_optim=(self._optimizer(cfg.temp_optim_factory, [log_temp], cfg.temp_learning_rate)
                        if log_temp is not None and cfg.temp_learning_rate > 0 else None),
        )

    def _temperature(self) -> torch.Tensor:
        """``alpha`` as a 0-dim tensor (0 without entropy terms)."""
        if self._modules.log_temp is not None:
            return self._modules.log_temp()
        return torch.zeros((), device=self._device)

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        policy, q, targ = m.policy, m.q_function, m.targ_q_function

        # critics
        with torch.no_grad():
            next_log_probs = F.log_softmax(policy(batch.next_observations), dim=-1)  # (B, A)
            next_dist = ensemble_min_per_action(targ.distribution(batch.next_observations, greedy_taus=False))  # (B, A, N)
            soft = next_dist - (self._temperature() * next_log_probs).unsqueeze(-1)
            next_value = (next_log_probs.exp().unsqueeze(-1) * soft).sum(dim=1)  # (B, N)
            target = td_target(batch.rewards, next_value, batch.terminals, cfg.gamma, batch.intervals)
        critic_loss = critic_step(q, m.critic_optim, batch, target)

        # temperature, then the policy with the updated temperature
        with torch.no_grad():
            q_values = q.expected(batch.observations).min(dim=0).values  # (B, A)
        log_probs = F.log_softmax(policy(batch.observations), dim=-1)
        probs = log_probs.exp()
        if m.temp_optim is not None:
            with torch.no_grad():
                gap = (probs * log_probs).sum(dim=1) + target_entropy(int(self._action_size))  # (B,)
            temp_loss = temperature_step(m.log_temp, m.temp_optim, gap)
        else:
            temp_loss = torch.zeros((), device=critic_loss.device)
        temp = self._temperature().detach()
        actor_loss = (probs * (temp * log_probs - q_values)).sum(dim=1).mean()
        optimizer_step(m.actor_optim, actor_loss)

        if grad_step % int(cfg.target_update_interval) == 0:
            hard_update(targ, q)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "temp_loss": temp_loss, "temp": temp}

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        values = self._modules.q_function.expected(x).mean(dim=0)
        return values.gather(1, action.long().view(-1, 1)).squeeze(1)
