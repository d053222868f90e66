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
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from ..models.encoders import DefaultEncoderFactory, EncoderFactory, compute_output_size
from ..models.modules import Modules
from ..models.optimizers import AdamFactory, OptimizerFactory, OptimizerWrapper
from ..models.plain_mlp import PlainNetwork, plain_backward, plain_backward_enabled, plain_forward, plain_output
from ..models.policies import NormalPolicy, ValueFunction
from ..models.q_functions import MeanQFunctionFactory, QFunction
from ..serialization import register
from ..optimizers.optimizers import DirectStep
from ._common import (expectile_loss, freeze, optimizer_step, plain_critic, plain_encoder_head, shared_direct_step,
                      soft_update, td_target)
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

    # ---------------------------------------------- written-out steps
    #: measured (1-thread AVX-512 BF16 EPYC, bf16-mixed against this step): 0.91x / 1.03x / 1.15x / 1.32x at 32 /
    #: 64 / 128 / 256 rows (benchmarks/written_out.py): bf16-mixed from 64 rows on
    _written_out_faster_below = 64

    def _plain_critics_and_value(self) -> Tuple[PlainNetwork, Optional[nn.Module], PlainNetwork, Optional[DirectStep]]:
        """The critics (:func:`~offrl.algos._common.plain_critic`) with their
        action encoder, the value function as a plain ReLU MLP, and one
        optimizer step over both (their shared optimizer; None where either
        is not plain); cached, looked at anew when the networks change."""
        m = self._modules
        held = self.__dict__.get("_plain_qv")
        if (held is None or not held[0].matches(m.q_function, m.critic_optim)
                or not held[2].matches(m.value_function, m.critic_optim)):
            critic, encoder = plain_critic(m.q_function, m.critic_optim)
            value = plain_encoder_head(m.value_function, m.critic_optim, ValueFunction)
            held = self._plain_qv = (critic, encoder, value, shared_direct_step(m.critic_optim, critic, value))
        return held

    def _written_out_step_available(self) -> bool:
        if not (self.is_built and plain_backward_enabled()):
            return False
        return self._plain_policy().layers is not None and self._plain_critics_and_value()[3] is not None

    def _critic_value_step(self, batch: Any, targ_q: torch.Tensor, target: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        """One step of the critics and the value function on ``L_Q + L_V``
        (written out where both are plain ReLU MLPs on the CPU: each critic's
        squared error has the gradient ``2 (Q_i - y) / B``, the expectile
        loss ``-2 |tau - 1(u < 0)| u / B`` in ``V``), then ``V(s)`` after the
        step; returns ``(q_loss, v_loss, V(s))``, detached."""
        m = self._modules
        q, value_function = m.q_function, m.value_function
        obs, actions = batch.observations, batch.actions
        expectile = float(self._config.expectile)
        critic, encoder, value, step = self._plain_critics_and_value()
        if step is None or not (critic.usable(obs) and value.usable(obs)):
            v_loss = expectile_loss(targ_q - value_function(obs), expectile)
            pred, _ = q.at_action(obs, actions)  # (E, B, 1)
            q_loss = q.loss(pred, target)
            optimizer_step(m.critic_optim, q_loss + v_loss)
            with torch.no_grad():
                return q_loss.detach(), v_loss.detach(), value_function(obs)
        with torch.no_grad():
            q_inputs, values = plain_forward(critic.layers, encoder.flat_with_action(obs, actions))
            pred = values if values.dim() == 3 else values.unsqueeze(0)  # (E, B, 1)
            q_loss = q.loss(pred, target)
            grad_q = (pred - target).mul_(2.0 / pred.shape[1])
            v_inputs, v = plain_forward(value.layers, obs)
            diff = targ_q - v
            weight = torch.where(diff > 0, expectile, 1.0 - expectile)
            v_loss = (weight * diff**2).mean()
            grad_v = (weight * diff).mul_(-2.0 / diff.numel())
            step(plain_backward(critic.layers, q_inputs, grad_q if values.dim() == 3 else grad_q[0])
                 + plain_backward(value.layers, v_inputs, grad_v))
            return q_loss, v_loss, plain_output(value.layers, obs)

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        q, targ, value_function = m.q_function, m.targ_q_function, m.value_function
        obs, actions = batch.observations, batch.actions

        with torch.no_grad():
            targ_q = targ.expected(obs, actions).min(dim=0).values  # (B, 1)
            target = td_target(batch.rewards, value_function(batch.next_observations), batch.terminals, cfg.gamma, batch.intervals)

        q_loss, v_loss, value_after = self._critic_value_step(batch, targ_q, target)
        critic_loss = q_loss + v_loss

        with torch.no_grad():  # the advantage with V after its step
            advantage = targ_q - value_after
            weight = torch.exp(float(cfg.weight_temp) * advantage).clamp(max=float(cfg.max_weight)).view(-1)
        actor_loss = self._weighted_policy_step(obs, actions, lambda mean, logstd: weight)
        soft_update(targ, q, float(cfg.tau))
        return {"critic_loss": critic_loss, "q_loss": q_loss, "v_loss": v_loss, "actor_loss": actor_loss}
