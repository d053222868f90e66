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
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn

from ..constants import ActionSpace
from ..models.encoders import compute_output_size
from ..models.modules import Modules
from ..models.optimizers import OptimizerWrapper
from ..models.plain_mlp import PlainNetwork, plain_backward, plain_backward_enabled, plain_forward, plain_input_grad
from ..models.policies import DeterministicPolicy
from ..models.q_functions import QFunction
from ..serialization import register
from ._common import critic_step, freeze, no_param_grads, optimizer_step, plain_critic, plain_critic_step, soft_update, td_target
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

    def _actor_loss_grads(self, batch: Any, q_first: torch.Tensor,
                          policy_actions: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """:meth:`_actor_loss` written out, for the written-out step (call
        without grad): ``(loss, dL/dQ_1 (B, 1), dL/da besides the critic's
        (B, A) or None)``. Only used where :meth:`_actor_loss` is
        :attr:`_actor_loss_written_for`'s (a subclass with another loss and
        no written-out form trains its policy through autograd)."""
        return -q_first.mean(), torch.full_like(q_first, -1.0 / q_first.shape[0]), None

    # -------------------------------------------------------------- step
    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        plain = self._plain_networks(batch.observations)
        with torch.no_grad():
            next_actions = self._target_actions(batch.next_observations)
            target = td_target(batch.rewards, self._next_value(batch, next_actions), batch.terminals, cfg.gamma, batch.intervals)
        if plain is None:
            critic_loss = critic_step(m.q_function, m.critic_optim, batch, target).detach()
        else:
            critic_loss = plain_critic_step(m.q_function, plain[1], plain[2], batch, target)

        if grad_step % self._actor_interval() == 0:
            if plain is not None and plain[0] is not None:
                actor_loss = self._actor_step_plain(batch, *plain)
            else:
                actor_loss = self._actor_step(batch)
            soft_update(m.targ_q_function, m.q_function, float(cfg.tau))
            soft_update(m.targ_policy, m.policy, float(cfg.tau))
            self._last_actor_loss = actor_loss

        return {"critic_loss": critic_loss, "actor_loss": self._last_actor_loss}

    def _actor_step(self, batch: Any) -> torch.Tensor:
        """The policy's step through autograd; its (detached) loss."""
        q = self._modules.q_function
        with no_param_grads(q):  # gradients flow through the critic to the action, not into its weights
            actor_loss = self._actor_loss(batch, self._modules.policy(batch.observations))
            optimizer_step(self._modules.actor_optim, actor_loss)
        return actor_loss.detach()

    # -------------------------------------------- the written-out step
    #: the actor loss :meth:`_actor_loss_grads` writes out (set on each class that writes one out)
    _actor_loss_written_for: Any = None
    #: measured (1-thread AVX-512 BF16 EPYC, TD3PlusBC, bf16-mixed against this step): 0.97-1.02x / 1.09x /
    #: 1.17x / 1.32-1.46x at 32 / 64 / 128 / 256 rows (benchmarks/written_out.py, two runs)
    _written_out_faster_below = 64

    def _plain_holders(self) -> Tuple[PlainNetwork, PlainNetwork, Optional[nn.Module]]:
        """The policy and the critics as plain ReLU MLPs (``layers`` None
        where not: see :mod:`offrl.models.plain_mlp`) and the critics'
        action encoder; cached, looked at anew when the networks change."""
        m = self._modules
        held = self.__dict__.get("_plain")
        if held is None or not held[0].matches(m.policy, m.actor_optim) or not held[1].matches(m.q_function, m.critic_optim):
            actor = PlainNetwork.create(m.policy, m.policy.encoder, m.policy.fc, m.actor_optim, called=(m.policy, m.policy.fc))
            held = self._plain = (actor, *plain_critic(m.q_function, m.critic_optim))
        return held

    def _plain_networks(self, x: Any) -> Optional[Tuple[Optional[PlainNetwork], PlainNetwork, nn.Module]]:
        """``(policy or None, critics, their action encoder)`` when the
        critics' step can be written out now (a float32 CPU step on plain
        ReLU MLPs without hooks); the policy's too when it is plain and this
        algorithm's actor loss has a written-out form; else None."""
        if not plain_backward_enabled():
            return None
        actor, critic, encoder = self._plain_holders()
        if not critic.usable(x):
            return None
        written = type(self)._actor_loss is type(self)._actor_loss_written_for
        return (actor if written and actor.usable(x) else None), critic, encoder

    def _written_out_step_available(self) -> bool:
        if not (self.is_built and plain_backward_enabled()):
            return False
        actor, critic, _ = self._plain_holders()
        return critic.layers is not None and actor.layers is not None and (
            type(self)._actor_loss is type(self)._actor_loss_written_for)

    def _actor_step_plain(self, batch: Any, actor: PlainNetwork, critic: PlainNetwork, encoder: nn.Module) -> torch.Tensor:
        """The policy's step written out: ``a = tanh(z)``; the loss's
        gradient with respect to ``a`` through the first critic's input (its
        weights get none) plus :meth:`_actor_loss_grads`' direct term, then
        ``(1 - a^2)`` for the tanh."""
        with torch.no_grad():
            policy_inputs, z = plain_forward(actor.layers, batch.observations)
            actions = torch.tanh(z)
            inputs, values = plain_forward(critic.layers, encoder.flat_with_action(batch.observations, actions))
            q_first = values[0] if values.dim() == 3 else values  # (B, 1)
            loss, grad_q, grad_direct = self._actor_loss_grads(batch, q_first, actions)
            grad_actions = plain_input_grad(critic.layers, inputs, grad_q)[:, -actions.shape[1]:]
            if grad_direct is not None:
                grad_actions = grad_actions + grad_direct
            grad_z = grad_actions.mul_(1.0 - actions * actions)
            actor.step(plain_backward(actor.layers, policy_inputs, grad_z))
        return loss

    # ---------------------------------------------------------- acting
    def _predict(self, x) -> torch.Tensor:
        return self._modules.policy(x)

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        return self._modules.q_function.expected(x, action).mean(dim=0)

    def policy_module(self) -> nn.Module:
        self._require_built()
        return self._modules.policy


DDPG._actor_loss_written_for = DDPG._actor_loss
