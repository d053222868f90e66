"""Implicit Q-Learning (IQL).

IQL (Kostrikov, Nair and Levine, 2021, "Offline Reinforcement Learning with
Implicit Q-Learning", https://arxiv.org/abs/2110.06169) never evaluates the
Q-function at actions outside the dataset. A state value ``V`` is fitted to an
upper expectile of the target critics at the logged actions, the critics
regress on ``V`` at the next state, and the policy is extracted by
advantage-weighted regression onto the logged actions:

    L_V(psi)   = E_{(s, a) ~ D} [ |tau - 1(u < 0)| u^2 ],
                 u = min_i Q_target_i(s, a) - V_psi(s)
    L_Q(theta) = sum_i E_{(s, a, r, s') ~ D} [ (r + gamma^k (1 - d) V_psi(s') - Q_theta_i(s, a))^2 ]
    L_pi(phi)  = -E_{(s, a) ~ D} [ min(exp(beta * (min_i Q_target_i(s, a) - V_psi(s))), w_max) log pi_phi(a | s) ]

with ``tau = expectile``, ``beta = weight_temp``, ``w_max = max_weight``,
``k`` the transition's interval and ``d`` its terminal flag. The advantage
weight is a constant for the policy (no gradient flows through it). The
policy is ``N(tanh(mu_phi(s)), sigma)`` with a state-independent learned
log-std clamped to ``[-5, 2]``; the greedy action is ``tanh(mu_phi(s))``.
The target critics follow the critics by Polyak averaging
(``Q_target <- (1 - tau_polyak) Q_target + tau_polyak Q``) after every step.

As in d3rlpy, one critic optimizer updates the Q-functions and the value
function together on ``L_Q + L_V``; then the policy steps on ``L_pi`` with
the advantage recomputed from ``V`` after that update (as d3rlpy 2.8.1 and
the authors' implementation do; the target critics have not moved yet, so
their values are the ones ``L_V`` used). The critics' target ``V(s')`` is
taken before the update, as in d3rlpy.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Dict

import torch

from ..models.encoders import DefaultEncoderFactory, EncoderFactory, compute_output_size
from ..models.modules import Modules
from ..models.optimizers import AdamFactory, OptimizerFactory, OptimizerWrapper
from ..models.policies import NormalPolicy, ValueFunction
from ..models.q_functions import MeanQFunctionFactory, QFunction
from ..serialization import register
from ._common import expectile_loss, freeze, optimizer_step, soft_update, td_target
from .awac import AdvantageWeightedBase
from .config import NON_NEGATIVE, POSITIVE, POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, LearnableConfig, between, instance_of, param

__all__ = ["IQLConfig", "IQL"]


@register("algorithm", "iql")
@dataclasses.dataclass
class IQLConfig(LearnableConfig):
    """Config of Implicit Q-Learning (details in the module docstring).

    Loss:
        value   E_(s,a)~D [ |τ − 1(u < 0)| u² ],  u = min_i Q'_i(s, a) − V(s);
        critics Σ_i E_(s,a,r,s')~D [ (r + γ^k (1 − d) V(s') − Q_i(s, a))² ];
        actor   −E_(s,a)~D [ min(exp(β (min_i Q'_i(s, a) − V(s))), w_max) log π(a|s) ]
        with τ = ``expectile``, β = ``weight_temp``, w_max = ``max_weight``.

    Defaults:
        d3rlpy 2.8.1's, the paper's locomotion values: learning rates 3e-4,
        batch_size=256, tau=0.005, expectile 0.7, weight_temp 3.0,
        max_weight 100. The paper also decays the actor's learning rate with
        a cosine schedule (not a default here).

    References:
        Kostrikov, Nair and Levine, "Offline Reinforcement Learning with
        Implicit Q-Learning", 2021, arXiv:2110.06169.

    Args:
        actor_learning_rate: learning rate of the policy.
        critic_learning_rate: learning rate of the Q-functions and the value function.
        actor_optim_factory: optimizer of the policy (Adam).
        critic_optim_factory: optimizer of the Q-functions and the value function (Adam).
        actor_encoder_factory: encoder of the policy.
        critic_encoder_factory: encoder of the Q-functions.
        value_encoder_factory: encoder of the value function.
        tau: Polyak averaging factor of the target Q-functions.
        n_critics: number of Q-functions.
        expectile: expectile of the value loss, in (0, 1) (0.5: mean; towards
            1: the maximum over the dataset's actions).
        weight_temp: inverse temperature of the advantage weights (0: behaviour cloning).
        max_weight: upper clip of the advantage weights.
    """

    actor_learning_rate: float = param(3e-4, check=POSITIVE)
    critic_learning_rate: float = param(3e-4, check=POSITIVE)
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    critic_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    actor_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    critic_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    value_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    n_critics: int = param(2, check=POSITIVE_INT)
    expectile: float = param(0.7, check=between(0.0, 1.0, low_open=True, high_open=True))
    weight_temp: float = param(3.0, check=NON_NEGATIVE)
    max_weight: float = param(100.0, check=POSITIVE)


@dataclasses.dataclass(frozen=True)
class IQLModules(Modules):
    """IQL's policy, critics, target critics, value function and optimizers
    (``critic_optim`` steps the critics and the value function)."""

    policy: NormalPolicy
    q_function: QFunction
    targ_q_function: QFunction
    value_function: ValueFunction
    actor_optim: OptimizerWrapper
    critic_optim: OptimizerWrapper


class IQL(AdvantageWeightedBase, config=IQLConfig):
    """Implicit Q-Learning (see the module docstring); its policy is
    extracted by advantage-weighted regression, so it acts as AWAC does."""

    _modules: IQLModules
    _writes_out_critics = False  # one optimizer steps the critics and the value function (autograd); the policy's is written out

    def _build(self, observation_shape, action_size: int) -> IQLModules:
        cfg = self._config
        encoder = cfg.actor_encoder_factory.create(observation_shape)
        policy = NormalPolicy(
            encoder, compute_output_size(encoder, observation_shape), action_size,
            min_logstd=-5.0, max_logstd=2.0, use_std_parameter=True,
        )
        q = MeanQFunctionFactory().create(cfg.critic_encoder_factory, observation_shape, action_size, int(cfg.n_critics), discrete=False)
        value_encoder = cfg.value_encoder_factory.create(observation_shape)
        value = ValueFunction(value_encoder, compute_output_size(value_encoder, observation_shape))
        return IQLModules(
            policy=policy, q_function=q, targ_q_function=freeze(copy.deepcopy(q)), value_function=value,
            actor_optim=self._optimizer(cfg.actor_optim_factory, [policy], cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q, value], cfg.critic_learning_rate),
        )

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        q, targ, value_function = m.q_function, m.targ_q_function, m.value_function
        obs, actions = batch.observations, batch.actions

        with torch.no_grad():
            targ_q = targ.expected(obs, actions).min(dim=0).values  # (B, 1)
            target = td_target(batch.rewards, value_function(batch.next_observations), batch.terminals, cfg.gamma, batch.intervals)

        value = value_function(obs)  # (B, 1)
        v_loss = expectile_loss(targ_q - value, float(cfg.expectile))
        pred, _ = q.at_action(obs, actions)  # (E, B, 1)
        q_loss = q.loss(pred, target)
        critic_loss = q_loss + v_loss

        optimizer_step(m.critic_optim, critic_loss)

        with torch.no_grad():  # the advantage with V after its step
            advantage = targ_q - value_function(obs)
            weight = torch.exp(float(cfg.weight_temp) * advantage).clamp(max=float(cfg.max_weight)).view(-1)
        actor_loss = self._weighted_policy_step(obs, actions, lambda mean, logstd: weight)
        soft_update(targ, q, float(cfg.tau))
        return {
            "critic_loss": critic_loss.detach(),
            "q_loss": q_loss.detach(),
            "v_loss": v_loss.detach(),
            "actor_loss": actor_loss,
        }
