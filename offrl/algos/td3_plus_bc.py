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

import copy
import dataclasses
from typing import Dict

import torch
from torch import nn

from ..constants import ActionSpace
from ..models.encoders import DefaultEncoderFactory, EncoderFactory, compute_output_size
from ..models.optimizers import AdamFactory, OptimizerFactory
from ..models.policies import DeterministicPolicy
from ..models.q_functions import MeanQFunctionFactory, QFunctionFactory
from ..serialization import register
from ._common import freeze, no_param_grads, soft_update, td_target
from .base import QLearningAlgoBase
from .config import NON_NEGATIVE, POSITIVE, POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, LearnableConfig, instance_of, param

__all__ = ["TD3PlusBCConfig", "TD3PlusBC", "smooth_target_action"]


@register("algorithm")
@dataclasses.dataclass
class TD3PlusBCConfig(LearnableConfig):
    """Config of TD3+BC (see the module docstring for the losses).

    Args:
        actor_learning_rate: learning rate of the policy.
        critic_learning_rate: learning rate of the Q-functions.
        actor_optim_factory: optimizer of the policy (Adam).
        critic_optim_factory: optimizer of the Q-functions (Adam).
        actor_encoder_factory: encoder of the policy.
        critic_encoder_factory: encoder of the Q-functions.
        q_func_factory: Q-function type (mean, QR, IQN).
        tau: Polyak averaging factor of the target networks.
        n_critics: number of Q-functions.
        target_smoothing_sigma: standard deviation of the target policy noise.
        target_smoothing_clip: the target policy noise is clipped to ``[-clip, clip]``.
        alpha: weight of the Q term against the behaviour-cloning term.
        update_actor_interval: critic steps per policy (and target) update.
    """

    actor_learning_rate: float = param(3e-4, check=POSITIVE)
    critic_learning_rate: float = param(3e-4, check=POSITIVE)
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    critic_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    actor_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    critic_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    q_func_factory: QFunctionFactory = param(default_factory=MeanQFunctionFactory, check=instance_of(QFunctionFactory))
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    n_critics: int = param(2, check=POSITIVE_INT)
    target_smoothing_sigma: float = param(0.2, check=NON_NEGATIVE)
    target_smoothing_clip: float = param(0.5, check=NON_NEGATIVE)
    alpha: float = param(2.5, check=NON_NEGATIVE)
    update_actor_interval: int = param(2, check=POSITIVE_INT)

    @staticmethod
    def get_type() -> str:
        return "td3_plus_bc"

    @classmethod
    def algorithm_class(cls) -> type:
        return TD3PlusBC


def smooth_target_action(action: torch.Tensor, sigma: float, clip: float) -> torch.Tensor:
    """``clip(action + clip(N(0, sigma^2), -clip, clip), -1, 1)``: TD3's
    target policy smoothing."""
    noise = (torch.randn_like(action) * sigma).clamp(-clip, clip)
    return (action + noise).clamp(-1.0, 1.0)


class TD3PlusBC(QLearningAlgoBase):
    """TD3+BC (see the module docstring)."""

    _action_type = ActionSpace.CONTINUOUS
    has_q_function = True
    _policy_module = "policy"
    _q_modules = ("q_function", "targ_q_function")
    _policy_optim = "actor_optim"
    _q_optim = "critic_optim"

    def _build(self, observation_shape, action_size: int) -> None:
        cfg = self._config
        encoder = cfg.actor_encoder_factory.create(observation_shape)
        policy = DeterministicPolicy(encoder, compute_output_size(encoder, observation_shape), action_size)
        q = cfg.q_func_factory.create(cfg.critic_encoder_factory, observation_shape, action_size, int(cfg.n_critics), discrete=False)
        self._add_module("policy", policy)
        self._add_module("targ_policy", freeze(copy.deepcopy(policy)))
        self._add_module("q_function", q)
        self._add_module("targ_q_function", freeze(copy.deepcopy(q)))
        self._add_optimizer("actor_optim", cfg.actor_optim_factory, [policy], cfg.actor_learning_rate)
        self._add_optimizer("critic_optim", cfg.critic_optim_factory, [q], cfg.critic_learning_rate)
        # reported on steps without a policy update until the first one
        self._last_actor_loss = torch.zeros((), device=self._device)

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        nets = self._nets
        q, targ_q, policy, targ_policy = nets["q_function"], nets["targ_q_function"], nets["policy"], nets["targ_policy"]
        obs, actions = batch.observations, batch.actions

        with torch.no_grad():
            next_actions = smooth_target_action(
                targ_policy(batch.next_observations), float(cfg.target_smoothing_sigma), float(cfg.target_smoothing_clip)
            )
            next_dist, _ = targ_q.at_action(batch.next_observations, next_actions)
            target = td_target(batch.rewards, targ_q.reduce(next_dist, "min"), batch.terminals, cfg.gamma, batch.intervals)
        pred, taus = q.at_action(obs, actions)
        critic_loss = q.loss(pred, target, taus)
        critic_optim = self._optims["critic_optim"]
        critic_optim.zero_grad()
        critic_loss.backward()
        critic_optim.step()

        if grad_step % int(cfg.update_actor_interval) == 0:
            # gradients flow through the critic to the action, not into its weights
            with no_param_grads(q):
                policy_actions = policy(obs)
                q_first = q.expected(obs, policy_actions)[0]  # (B, 1)
                lam = float(cfg.alpha) / q_first.abs().mean().detach()
                actor_loss = -lam * q_first.mean() + ((policy_actions - actions) ** 2).mean()
                actor_optim = self._optims["actor_optim"]
                actor_optim.zero_grad()
                actor_loss.backward()
                actor_optim.step()
            soft_update(targ_q, q, float(cfg.tau))
            soft_update(targ_policy, policy, float(cfg.tau))
            self._last_actor_loss = actor_loss.detach()

        return {"critic_loss": critic_loss.detach(), "actor_loss": self._last_actor_loss}

    def _predict(self, x) -> torch.Tensor:
        return self._nets["policy"](x)

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        return self._nets["q_function"].expected(x, action).mean(dim=0)

    def policy_module(self) -> nn.Module:
        self._require_built()
        return self._nets["policy"]
