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
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F

from ..constants import ActionSpace
from ..models.encoders import compute_output_size
from ..models.modules import Modules
from ..models.optimizers import OptimizerWrapper
from ..models.parameters import ScalarParameter
from ..models.plain_mlp import PlainNetwork, plain_backward, plain_backward_enabled, plain_forward
from ..models.policies import CategoricalPolicy
from ..models.q_functions import MeanQFunction, QFunction
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

    def _soft_target(self, batch) -> torch.Tensor:
        """``r + gamma^k (1 - d) sum_a' pi(a'|s') (min_j Q'_j(s', a') - alpha log pi(a'|s'))``, ``(B, N)``; call without grad."""
        m = self._modules
        next_log_probs = F.log_softmax(m.policy(batch.next_observations), dim=-1)  # (B, A)
        next_dist = ensemble_min_per_action(m.targ_q_function.distribution(batch.next_observations, greedy_taus=False))
        soft = next_dist - (self._temperature() * next_log_probs).unsqueeze(-1)  # (B, A, N)
        next_value = (next_log_probs.exp().unsqueeze(-1) * soft).sum(dim=1)  # (B, N)
        return td_target(batch.rewards, next_value, batch.terminals, self._config.gamma, batch.intervals)

    def _temperature_step(self, probs: torch.Tensor, log_probs: torch.Tensor) -> torch.Tensor:
        """The temperature's step on the policy's (detached) entropy gap; its loss (0 when it is fixed)."""
        m = self._modules
        if m.temp_optim is None:
            return torch.zeros((), device=probs.device)
        with torch.no_grad():
            gap = (probs * log_probs).sum(dim=1) + target_entropy(int(self._action_size))  # (B,)
        return temperature_step(m.log_temp, m.temp_optim, gap)

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        policy, q, targ = m.policy, m.q_function, m.targ_q_function
        plain = self._plain_networks(batch.observations)
        if plain is not None:
            return self._update_plain(batch, grad_step, *plain)

        # critics
        with torch.no_grad():
            target = self._soft_target(batch)
        critic_loss = critic_step(q, m.critic_optim, batch, target)

        # temperature, then the policy with the updated temperature
        with torch.no_grad():
            q_values = q.expected(batch.observations).min(dim=0).values  # (B, A)
        log_probs = F.log_softmax(policy(batch.observations), dim=-1)
        probs = log_probs.exp()
        temp_loss = self._temperature_step(probs, log_probs)
        temp = self._temperature().detach()
        actor_loss = (probs * (temp * log_probs - q_values)).sum(dim=1).mean()
        optimizer_step(m.actor_optim, actor_loss)

        if grad_step % int(cfg.target_update_interval) == 0:
            hard_update(targ, q)
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "temp_loss": temp_loss, "temp": temp}

    # -------------------------------------------- the written-out step
    def _plain_holders(self) -> Tuple[PlainNetwork, PlainNetwork]:
        """The policy and the critic ensemble as plain ReLU MLPs (their
        ``layers`` None where they are not: see :mod:`offrl.models.plain_mlp`),
        cached, looked at anew when the networks change."""
        m = self._modules
        held = self.__dict__.get("_plain")
        if held is None or not held[0].matches(m.policy, m.actor_optim) or not held[1].matches(m.q_function, m.critic_optim):
            q = m.q_function
            actor = PlainNetwork.create(m.policy, m.policy.encoder, m.policy.fc, m.actor_optim, called=(m.policy, m.policy.fc))
            if type(q) is MeanQFunction:  # the autograd step calls its encoder and head as modules
                critic = PlainNetwork.create(q, q.encoder, q.head, m.critic_optim, called=(q.head,), ensemble=True)
            else:
                critic = PlainNetwork(q, m.critic_optim, None, [], None)
            held = self._plain = (actor, critic)
        return held

    def _plain_networks(self, x) -> Optional[Tuple[PlainNetwork, PlainNetwork]]:
        """Both holders when this step can be written out (a critic ensemble
        of at least two mean Q-functions and a policy, plain ReLU MLPs, a
        float32 CPU step without hooks), else None."""
        if not plain_backward_enabled():
            return None
        actor, critic = self._plain_holders()
        return (actor, critic) if actor.usable(x) and critic.usable(x) else None

    #: measured (1-thread AVX-512 BF16 EPYC, bf16-mixed against this step, since its narrow first layers run float32:
    #: ``layers.narrow_inputs``): 1.07x / 1.17x / 1.17x / 1.29x at 32 / 64 / 100 / 128 rows (benchmarks/written_out.py)
    _written_out_faster_below = 32

    def _written_out_step_available(self) -> bool:
        if not (self.is_built and plain_backward_enabled()):
            return False
        actor, critic = self._plain_holders()
        return actor.layers is not None and critic.layers is not None

    def _update_plain(self, batch, grad_step: int, actor: PlainNetwork, critic: PlainNetwork) -> Dict[str, torch.Tensor]:
        """:meth:`_update` with the critics' and the policy's backward
        written out: the critics' summed Huber losses have the gradient
        ``clamp(Q_i(s, a) - y, -1, 1) / B`` with respect to ``Q_i(s, a)``; the
        policy's loss ``mean_s sum_a pi_a h_a``, ``h = alpha log pi - min_i Q_i``,
        has ``pi_a (h_a - sum_b pi_b h_b) / B`` with respect to the logits.
        The targets, the temperature's step and the target copy are
        :meth:`_update`'s."""
        cfg = self._config
        m = self._modules
        q = m.q_function
        with torch.no_grad():
            target = self._soft_target(batch)
            inputs, values = plain_forward(critic.layers, batch.observations)  # (E, B, A)
            index = batch.actions.reshape(1, -1, 1).long().expand(values.shape[0], -1, 1)
            pred = values.gather(2, index)  # (E, B, 1)
            critic_loss = q.loss(pred, target)
            grad_pred = (pred - target).clamp_(-1.0, 1.0).mul_(1.0 / pred.shape[1])
            critic.step(plain_backward(critic.layers, inputs, torch.zeros_like(values).scatter_(2, index, grad_pred)))

            q_values = q.expected(batch.observations).min(dim=0).values  # (B, A), after the critics' step
            policy_inputs, logits = plain_forward(actor.layers, batch.observations)
            log_probs = F.log_softmax(logits, dim=-1)
            probs = log_probs.exp()
        temp_loss = self._temperature_step(probs, log_probs)
        temp = self._temperature().detach()
        with torch.no_grad():
            h = temp * log_probs - q_values
            mean_h = (probs * h).sum(dim=1, keepdim=True)  # (B, 1)
            actor_loss = mean_h.mean()
            grad_logits = (h - mean_h).mul_(probs).mul_(1.0 / h.shape[0])
            actor.step(plain_backward(actor.layers, policy_inputs, grad_logits))

        if grad_step % int(cfg.target_update_interval) == 0:
            hard_update(m.targ_q_function, q)
        return {"critic_loss": critic_loss, "actor_loss": actor_loss, "temp_loss": temp_loss, "temp": temp}

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        values = self._modules.q_function.expected(x).mean(dim=0)
        return values.gather(1, action.long().view(-1, 1)).squeeze(1)
