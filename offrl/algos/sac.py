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
the networks are built by :mod:`offrl.models.builders`. Where the policy
and the critics are plain ReLU MLPs on the CPU (the defaults), the critics'
TD step and the actor's step run with their backward passes written out
(:mod:`offrl.models.plain_mlp`; the same maths and draws as autograd's
step, which runs everywhere else).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from ..constants import ActionSpace
from ..models.builders import build_critics, build_normal_policy
from ..models.modules import Modules
from ..models.optimizers import OptimizerWrapper
from ..models.parameters import ScalarParameter
from ..models.plain_mlp import PlainNetwork, plain_backward_enabled, plain_forward, plain_input_grad
from ..models.policies import GreedyNormalPolicy, NormalPolicy, squashed_draw, squashed_log_prob, squashed_sample
from ..models.q_functions import QFunction
from ..serialization import register
from ._common import (critic_step, no_param_grads, normal_policy_forward, normal_policy_grads, optimizer_step, plain_critic,
                      plain_critic_step, plain_normal_policy, soft_update, td_target, temperature_step)
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
    plain: Optional[Tuple[PlainNetwork, PlainNetwork, nn.Module]] = None,
) -> Dict[str, torch.Tensor]:
    """One step of the temperature loss (when ``temp_optim``), then one of
    the actor loss with the updated temperature, on the same sampled
    actions (d3rlpy 2.8.1's order); returns ``actor_loss``, ``temp_loss``
    and the updated ``temp``.

    The temperature loss is the paper's ``-alpha (log pi + H)`` with
    ``alpha = exp(log_alpha)``: its gradient in ``log_alpha`` is
    ``-alpha (log pi + H)`` (d3rlpy's maths).

    ``plain``: the policy, the critics and their action encoder as plain
    ReLU MLPs usable on ``observations`` (``SAC._plain_networks``): the
    step is then written out (:func:`plain_actor_temperature_step`)."""
    if plain is not None:
        return plain_actor_temperature_step(policy, log_temp, temp_optim, observations, target_entropy, *plain)
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


def plain_actor_temperature_step(policy: NormalPolicy, log_temp: ScalarParameter, temp_optim: Optional[Any],
                                 observations: torch.Tensor, target_entropy: float, actor: PlainNetwork,
                                 critic: PlainNetwork, encoder: nn.Module) -> Dict[str, torch.Tensor]:
    """:func:`actor_temperature_step` written out (the same draws, in the
    same order). With ``u = mean + std * eps``, ``a = tanh(u)`` and the loss
    ``L = mean_b [alpha log pi(a|s) - min_i Q_i(s, a)]``: ``dL/da`` is
    ``-1 / B`` through the input of the critic holding the minimum (the
    member autograd's ``min`` routes it to), ``d log pi / du = 2 a`` (the
    tanh correction ``-log(1 - a^2)``) and ``d log pi / d logstd = -1``
    besides the path through ``u``; so ``dL/du = dL/da (1 - a^2) + 2 alpha a
    / B``, ``dL/dmean = dL/du`` and ``dL/dlogstd = dL/du std eps - alpha /
    B``."""
    with torch.no_grad():
        inputs, mean, logstd, aux = normal_policy_forward(policy, actor, observations)
        noise, std, action, log_prob = squashed_draw(mean, logstd)
        if temp_optim is not None:
            temp_loss = temperature_step(log_temp, temp_optim, log_prob + target_entropy)
        else:
            temp_loss = torch.zeros((), device=log_prob.device)
        temp = log_temp().detach()
        q_inputs, values = plain_forward(critic.layers, encoder.flat_with_action(observations, action))
        n = mean.shape[0]
        if values.dim() == 3:  # (E, B, 1): the minimum's member per row
            q_value, member = values.min(dim=0)
            grad_action = None
            for i in range(values.shape[0]):
                grad_q = (member == i).to(values.dtype).mul_(-1.0 / n)
                g = plain_input_grad(critic.layers, q_inputs, grad_q, member=i)
                grad_action = g if grad_action is None else grad_action.add_(g)
        else:
            q_value = values
            grad_action = plain_input_grad(critic.layers, q_inputs, torch.full_like(values, -1.0 / n))
        actor_loss = (temp * log_prob - q_value.squeeze(-1)).mean()
        scale = temp / n
        grad_u = grad_action[:, -action.shape[1]:].mul_(1.0 - action * action).add_(action * (2.0 * scale))
        grad_logstd = (grad_u * noise).mul_(std).sub_(scale)
        actor.step(normal_policy_grads(policy, actor, inputs, aux, grad_u, grad_logstd))
    return {"actor_loss": actor_loss, "temp_loss": temp_loss.detach(), "temp": temp}


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

    # ---------------------------------------------- written-out steps
    #: measured (1-thread AVX-512 BF16 EPYC, bf16-mixed against this step, since its narrow first layers run float32:
    #: ``layers.narrow_inputs``): 1.04x / 1.13x / 1.21x / 1.29x at 32 / 64 / 100 / 128 rows (benchmarks/written_out.py)
    _written_out_faster_below = 32

    def _plain_holders(self) -> Tuple[PlainNetwork, PlainNetwork, Optional[nn.Module]]:
        """The policy (:func:`~offrl.algos._common.plain_normal_policy`), the
        critics and their action encoder (:func:`~offrl.algos._common.plain_critic`)
        as plain ReLU MLPs (``layers`` None where not); cached, looked at
        anew when the networks change."""
        m = self._modules
        held = self.__dict__.get("_plain")
        actor = plain_normal_policy(m.policy, m.actor_optim, None if held is None else held[0])
        if held is None or actor is not held[0] or not held[1].matches(m.q_function, m.critic_optim):
            held = self._plain = (actor, *plain_critic(m.q_function, m.critic_optim))
        return held

    def _plain_networks(self, x: Any) -> Optional[Tuple[Optional[PlainNetwork], PlainNetwork, nn.Module]]:
        """``(policy or None, critics, their action encoder)`` when the
        critics can be stepped (and read in the actor's step) written out
        now, a float32 CPU step on plain ReLU MLPs without hooks (see
        :mod:`offrl.models.plain_mlp`), the policy too when it is one; else
        None (autograd's steps)."""
        if not plain_backward_enabled():
            return None
        actor, critic, encoder = self._plain_holders()
        if not critic.usable(x):
            return None
        return (actor if actor.usable(x) else None), critic, encoder

    def _written_out_step_available(self) -> bool:
        if not (self.is_built and plain_backward_enabled()) or type(self)._update is not SAC._update:
            return False
        actor, critic, _ = self._plain_holders()
        return actor.layers is not None and critic.layers is not None

    @staticmethod
    def _plain_actor(plain: Optional[Tuple[Optional[PlainNetwork], PlainNetwork, nn.Module]]
                     ) -> Optional[Tuple[PlainNetwork, PlainNetwork, nn.Module]]:
        """:meth:`_plain_networks`' answer for :func:`actor_temperature_step`:
        all three, or None (the actor's step through autograd)."""
        return plain if plain is not None and plain[0] is not None else None  # type: ignore[return-value]

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        m = self._modules
        policy, q, targ, log_temp = m.policy, m.q_function, m.targ_q_function, m.log_temp
        plain = self._plain_networks(batch.observations)
        with torch.no_grad():
            mean, logstd = policy(batch.next_observations)
            next_action, next_log_prob = squashed_sample(mean, logstd)
            next_dist, _ = targ.at_action(batch.next_observations, next_action)
            next_value = q.reduce(next_dist, "min") - log_temp() * next_log_prob.unsqueeze(-1)
            target = td_target(batch.rewards, next_value, batch.terminals, self._config.gamma, batch.intervals)
        if plain is None:
            critic_loss = critic_step(q, m.critic_optim, batch, target).detach()
        else:
            critic_loss = plain_critic_step(q, plain[1], plain[2], batch, target)

        metrics = actor_temperature_step(
            policy, q, log_temp, m.actor_optim, m.temp_optim,
            batch.observations, -float(self._action_size), self._plain_actor(plain),
        )
        soft_update(targ, q, float(self._config.tau))
        return {"critic_loss": critic_loss, **metrics}

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
