"""Soft Actor-Critic.

SAC (Haarnoja et al., 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy
Deep Reinforcement Learning with a Stochastic Actor"; "Soft Actor-Critic
Algorithms and Applications" for the learned temperature) trains a
tanh-squashed Gaussian policy ``pi`` against an ensemble of critics
``Q_1..Q_E`` (twin critics by default, as in TD3):

    critic:  L(theta_i) = E_{(s, a, r, s') ~ D} [ (y - Q_i(s, a))^2 ]
             y = r + gamma^k (1 - d) ( min_j Q'_j(s', a') - alpha log pi(a'|s') ),   a' ~ pi(.|s')
    actor:   J(phi) = E_{s ~ D, a ~ pi_phi(.|s)} [ alpha log pi_phi(a|s) - min_i Q_i(s, a) ]
    temperature, alpha = exp(log_alpha):
             J(alpha) = E_{s ~ D, a ~ pi(.|s)} [ -alpha (log pi(a|s) + H) ],   H = -action_size

``Q'`` are target critics, moved towards the critics by ``tau`` after every
step; ``k`` is the transition's interval and ``d`` its terminal flag. The
critic losses are summed over the ensemble. The temperature is fixed at
``initial_temperature`` when ``temp_learning_rate`` is 0. The greedy action
is ``tanh(mean)``; ``sample_action`` draws from the squashed Gaussian.

Each step updates the critics, then the temperature, then the actor with
the updated temperature (d3rlpy 2.8.1's order), then the target critics.

The actor/temperature step here is shared with :mod:`offrl.algos.cql`;
the networks are built by :mod:`offrl.models.builders`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

import torch
from torch import nn

from ..constants import ActionSpace
from ..models.builders import build_critics, build_normal_policy
from ..models.modules import Modules
from ..models.optimizers import OptimizerWrapper
from ..models.parameters import ScalarParameter
from ..models.policies import GreedyNormalPolicy, NormalPolicy, squashed_log_prob, squashed_sample
from ..models.q_functions import QFunction
from ..serialization import register
from ._common import critic_step, no_param_grads, optimizer_step, soft_update, td_target, temperature_step
from .actor_critic import SoftActorCriticConfig
from .base import QLearningAlgoBase
from .config import POSITIVE, POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, param

__all__ = ["SACConfig", "SAC", "SACModules"]


@register("algorithm", "sac")
@dataclasses.dataclass
class SACConfig(SoftActorCriticConfig):
    """Config of Soft Actor-Critic (details in the module docstring).

    Loss:
        critics  Σ_i E_(s,a,r,s')~D [ (y − Q_i(s, a))² ],
                 y = r + γ^k (1 − d) (min_j Q'_j(s', a') − α log π(a'|s')), a' ~ π(·|s');
        actor    E_s~D, a~π(·|s) [ α log π(a|s) − min_i Q_i(s, a) ];
        temperature (α = exp(log_α))  E [ −α (log π(a|s) − action_size) ]
                 (the paper's objective, linear in α, as d3rlpy 2.8.1).

    Defaults:
        d3rlpy 2.8.1's, the paper's values: Adam with learning rate 3e-4
        for actor, critics and temperature, batch_size=256, tau=0.005,
        gamma=0.99, two critics, target entropy −action_size; the
        temperature starts at 1.0.

    References:
        Haarnoja, Zhou, Abbeel and Levine, "Soft Actor-Critic: Off-Policy
        Maximum Entropy Deep Reinforcement Learning with a Stochastic
        Actor", 2018, arXiv:1801.01290; Haarnoja et al., "Soft Actor-Critic
        Algorithms and Applications", 2018, arXiv:1812.05905.

    Args:
        tau: target network update rate.
        n_critics: number of Q-functions in the ensemble.
        initial_temperature: initial entropy temperature ``alpha``.
    """

    batch_size: int = param(256, check=POSITIVE_INT)
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    n_critics: int = param(2, check=POSITIVE_INT)
    initial_temperature: float = param(1.0, check=POSITIVE)


@dataclasses.dataclass(frozen=True)
class SACModules(Modules):
    """SAC's networks and optimizers (``temp_optim`` is None when the
    temperature is fixed)."""

    policy: NormalPolicy
    q_function: QFunction
    targ_q_function: QFunction
    log_temp: ScalarParameter
    actor_optim: OptimizerWrapper
    critic_optim: OptimizerWrapper
    temp_optim: Optional[OptimizerWrapper]


def actor_temperature_step(
    policy: NormalPolicy,
    q: QFunction,
    log_temp: ScalarParameter,
    actor_optim: Any,
    temp_optim: Optional[Any],
    observations: Any,
    target_entropy: float,
) -> Dict[str, torch.Tensor]:
    """One step of the temperature loss (when ``temp_optim``), then one of
    the actor loss with the updated temperature, on the same sampled
    actions (d3rlpy 2.8.1's order); returns ``actor_loss``, ``temp_loss``
    and the updated ``temp``.

    The temperature loss is the paper's ``-alpha (log pi + H)`` with
    ``alpha = exp(log_alpha)``: its gradient in ``log_alpha`` is
    ``-alpha (log pi + H)`` (d3rlpy's maths)."""
    mean, logstd = policy(observations)
    action, log_prob = squashed_sample(mean, logstd)
    if temp_optim is not None:
        temp_loss = temperature_step(log_temp, temp_optim, log_prob.detach() + target_entropy)
    else:
        temp_loss = torch.zeros((), device=log_prob.device)
    temp = log_temp().detach()
    with no_param_grads(q):
        q_value = q.expected(observations, action).min(dim=0).values.squeeze(-1)  # (B,)
    actor_loss = (temp * log_prob - q_value).mean()
    optimizer_step(actor_optim, actor_loss)
    return {"actor_loss": actor_loss.detach(), "temp_loss": temp_loss.detach(), "temp": temp}


class SAC(QLearningAlgoBase, config=SACConfig):
    """Soft Actor-Critic (see the module docstring)."""

    _action_type = ActionSpace.CONTINUOUS
    has_q_function = True
    _modules: SACModules
    _policy_module = "policy"
    _q_modules = ("q_function", "targ_q_function")
    _policy_optim = "actor_optim"
    _q_optim = "critic_optim"

    def _build(self, observation_shape, action_size: int) -> SACModules:
        cfg = self._config
        policy = build_normal_policy(cfg.actor_encoder_factory, observation_shape, action_size)
        q, targ = build_critics(cfg, observation_shape, action_size)
        log_temp = ScalarParameter(cfg.initial_temperature)
        return SACModules(
            policy=policy, q_function=q, targ_q_function=targ, log_temp=log_temp,
            actor_optim=self._optimizer(cfg.actor_optim_factory, [policy], cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], cfg.critic_learning_rate),
            temp_optim=(self._optimizer(cfg.temp_optim_factory, [log_temp], cfg.temp_learning_rate)
                        if cfg.temp_learning_rate > 0 else None),
        )

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        m = self._modules
        policy, q, targ, log_temp = m.policy, m.q_function, m.targ_q_function, m.log_temp
        with torch.no_grad():
            mean, logstd = policy(batch.next_observations)
            next_action, next_log_prob = squashed_sample(mean, logstd)
            next_dist, _ = targ.at_action(batch.next_observations, next_action)
            next_value = q.reduce(next_dist, "min") - log_temp() * next_log_prob.unsqueeze(-1)
            target = td_target(batch.rewards, next_value, batch.terminals, self._config.gamma, batch.intervals)
        critic_loss = critic_step(q, m.critic_optim, batch, target)

        metrics = actor_temperature_step(
            policy, q, log_temp, m.actor_optim, m.temp_optim,
            batch.observations, -float(self._action_size),
        )
        soft_update(targ, q, float(self._config.tau))
        return {"critic_loss": critic_loss.detach(), **metrics}

    def _predict(self, x) -> torch.Tensor:
        return torch.tanh(self._modules.policy(x)[0])

    def _sample(self, x) -> torch.Tensor:
        mean, logstd = self._modules.policy(x)
        return squashed_sample(mean, logstd)[0]

    def _action_log_prob(self, x, action: torch.Tensor) -> torch.Tensor:
        """Log-density of scaled ``action`` under the squashed Gaussian, ``(B,)`` (for :mod:`offrl.ope`)."""
        return squashed_log_prob(*self._modules.policy(x), action)

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        return self._modules.q_function.expected(x, action).mean(dim=0)

    def policy_module(self) -> nn.Module:
        return GreedyNormalPolicy(self._modules.policy)
