"""Deep Deterministic Policy Gradients.

DDPG (Lillicrap et al., 2016, "Continuous control with deep reinforcement
learning", https://arxiv.org/abs/1509.02971) trains a deterministic policy
``pi`` (a tanh-squashed action) against Q-functions ``Q_1..Q_E`` (one by
default) with target copies ``pi'`` and ``Q'``:

    y          = r + gamma^k (1 - d) min_j Q'_j(s', pi'(s'))
    L_Q(theta) = sum_i E_{(s, a, r, s') ~ D} [ l(y - Q_theta_i(s, a)) ]
    L_pi(phi)  = -E_{s ~ D} [ Q_theta_1(s, pi_phi(s)) ]

with ``k`` the transition's interval, ``d`` its terminal flag and ``l`` the
squared error (the quantile Huber loss for QR / IQN Q-functions). Each step
updates the critics, then the policy (against the updated first critic;
gradients reach the policy through the action, the critics' weights are
left alone), then moves both target networks towards the online ones by
``tau`` (Polyak averaging).

:class:`DDPG` is also the base of :class:`~offrl.algos.td3.TD3` and
:class:`~offrl.algos.td3_plus_bc.TD3PlusBC`, which change it through four
hooks: the target action (:meth:`DDPG._target_actions`), the value
bootstrapped there (:meth:`DDPG._next_value`), how often the
policy and targets move (:meth:`DDPG._actor_interval`) and the policy loss
(:meth:`DDPG._actor_loss`).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Dict

import torch
from torch import nn

from ..constants import ActionSpace
from ..models.encoders import compute_output_size
from ..models.modules import Modules
from ..models.optimizers import OptimizerWrapper
from ..models.policies import DeterministicPolicy
from ..models.q_functions import QFunction
from ..serialization import register
from ._common import critic_step, freeze, no_param_grads, optimizer_step, soft_update, td_target
from .base import QLearningAlgoBase
from .actor_critic import ActorCriticConfig
from .config import POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, param

__all__ = ["DDPGConfig", "DDPG", "DDPGModules"]


@register("algorithm", "ddpg")
@dataclasses.dataclass
class DDPGConfig(ActorCriticConfig):
    """Config of DDPG (details in the module docstring).

    Loss:
        critics Σ_i E_(s,a,r,s')~D [ ℓ(r + γ^k (1 − d) min_j Q'_j(s', π'(s')) − Q_i(s, a)) ];
        actor   −E_s~D [ Q_1(s, π(s)) ];
        ℓ the squared error, π' and Q' Polyak-averaged with ``tau``.

    Defaults:
        d3rlpy 2.8.1's (learning rates 3e-4, batch_size=256, tau=0.005, one
        critic). The paper used actor 1e-4, critic 1e-3, tau=0.001, batch
        64 and L2 weight decay 1e-2 on the critic.

    References:
        Lillicrap et al., "Continuous control with deep reinforcement
        learning", 2016, arXiv:1509.02971.

    Args:
        tau: Polyak averaging factor of the target networks.
        n_critics: number of Q-functions (the target takes their minimum).
    """

    batch_size: int = param(256, check=POSITIVE_INT)
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    n_critics: int = param(1, check=POSITIVE_INT)


@dataclasses.dataclass(frozen=True)
class DDPGModules(Modules):
    """The deterministic policy, the critic ensemble, their target copies
    and optimizers (DDPG's, TD3's, TD3+BC's, ReBRAC's, PRDC's)."""

    policy: DeterministicPolicy
    targ_policy: DeterministicPolicy
    q_function: QFunction
    targ_q_function: QFunction
    actor_optim: OptimizerWrapper
    critic_optim: OptimizerWrapper


class DDPG(QLearningAlgoBase, config=DDPGConfig):
    """Deep Deterministic Policy Gradients (see the module docstring).

    Subclasses (TD3, TD3+BC, ReBRAC) redefine :meth:`_target_actions`,
    :meth:`_next_value`, :meth:`_actor_interval` and :meth:`_actor_loss`; the networks, their
    names in model files and the order of the steps are shared."""

    _action_type = ActionSpace.CONTINUOUS
    has_q_function = True
    _modules: DDPGModules
    _policy_module = "policy"
    _q_modules = ("q_function", "targ_q_function")
    _policy_optim = "actor_optim"
    _q_optim = "critic_optim"

    def _build(self, observation_shape, action_size: int) -> DDPGModules:
        cfg = self._config
        encoder = cfg.actor_encoder_factory.create(observation_shape)
        policy = DeterministicPolicy(encoder, compute_output_size(encoder, observation_shape), action_size)
        q = cfg.q_func_factory.create(cfg.critic_encoder_factory, observation_shape, action_size, int(cfg.n_critics), discrete=False)
        # reported on steps without a policy update until the first one
        self._last_actor_loss = torch.zeros((), device=self._device)
        return DDPGModules(
            policy=policy, targ_policy=freeze(copy.deepcopy(policy)), q_function=q, targ_q_function=freeze(copy.deepcopy(q)),
            actor_optim=self._optimizer(cfg.actor_optim_factory, [policy], cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], cfg.critic_learning_rate),
        )

    # ------------------------------------------------------------- hooks
    def _target_actions(self, next_observations: Any) -> torch.Tensor:
        """The action the critic target is evaluated at (no gradient): the
        target policy's, ``(B, action_size)``."""
        return self._modules.targ_policy(next_observations)

    def _next_value(self, batch: Any, next_actions: torch.Tensor) -> torch.Tensor:
        """The bootstrapped value at ``s'`` (no gradient): the target
        critics' minimum at ``next_actions``."""
        targ_q = self._modules.targ_q_function
        next_dist, _ = targ_q.at_action(batch.next_observations, next_actions)
        return targ_q.reduce(next_dist, "min")

    def _actor_interval(self) -> int:
        """Critic steps per policy-and-target step (1: every step)."""
        return 1

    def _actor_loss(self, batch: Any, policy_actions: torch.Tensor) -> torch.Tensor:
        """The policy's loss at its actions ``pi(s)`` (gradients flow into
        the policy through the critic): ``-mean Q_1(s, pi(s))``."""
        return -self._modules.q_function.expected(batch.observations, policy_actions)[0].mean()

    # -------------------------------------------------------------- step
    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        q, targ_q, policy, targ_policy = m.q_function, m.targ_q_function, m.policy, m.targ_policy

        with torch.no_grad():
            next_actions = self._target_actions(batch.next_observations)
            target = td_target(batch.rewards, self._next_value(batch, next_actions), batch.terminals, cfg.gamma, batch.intervals)
        critic_loss = critic_step(q, m.critic_optim, batch, target)

        if grad_step % self._actor_interval() == 0:
            # gradients flow through the critic to the action, not into its weights
            with no_param_grads(q):
                actor_loss = self._actor_loss(batch, policy(batch.observations))
                optimizer_step(m.actor_optim, actor_loss)
            soft_update(targ_q, q, float(cfg.tau))
            soft_update(targ_policy, policy, float(cfg.tau))
            self._last_actor_loss = actor_loss.detach()

        return {"critic_loss": critic_loss.detach(), "actor_loss": self._last_actor_loss}

    # ---------------------------------------------------------- acting
    def _predict(self, x) -> torch.Tensor:
        return self._modules.policy(x)

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        return self._modules.q_function.expected(x, action).mean(dim=0)

    def policy_module(self) -> nn.Module:
        self._require_built()
        return self._modules.policy
