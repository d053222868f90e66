"""Advantage-Weighted Actor-Critic.

AWAC (Nair, Gupta, Dalal and Levine, 2020, "AWAC: Accelerating Online
Reinforcement Learning with Offline Datasets", https://arxiv.org/abs/2006.09359)
fits critics ``Q_1..Q_E`` (twin by default) by TD learning on the policy's
own next actions, and the policy by advantage-weighted regression onto the
logged actions, so that it can be trained offline and then finetuned online
with the same losses:

    critic:  L(theta_i) = E_{(s, a, r, s') ~ D} [ l(y - Q_i(s, a)) ]
             y = r + gamma^k (1 - d) min_j Q'_j(s', a'),   a' ~ pi(.|s')
    actor:   L(phi) = -E_{(s, a) ~ D} [ w(s, a) log pi_phi(a|s) ]
             A(s, a) = min_i Q_i(s, a) - 1/N sum_n min_i Q_i(s, a_n),   a_n ~ pi(.|s)
             w = B softmax_batch(A / lambda)      (weights of mean 1, no gradient)

``pi(.|s)`` is a Gaussian ``N(tanh(mu(s)), sigma)`` whose standard deviation
is one learned parameter per action dimension in ``[e^-6, e^0]`` (as in the
authors' code); its samples are clipped to ``[-1, 1]`` where they are fed to a
critic. ``N = n_action_samples``, ``k`` is the transition's interval, ``d``
its terminal flag and ``l`` the squared error (quantile Huber for QR / IQN
critics). Each step updates the critics, then the policy against the
updated critics, then moves the target critics towards them by ``tau``.
The greedy action is ``tanh(mu(s))``.

Where d3rlpy 2.8.1 differs (it builds AWAC on its SAC code): its critic
target is SAC's, a tanh-squashed sample minus an entropy term at a fixed
temperature of 1; here it is the paper's (no entropy term, the policy's own
Gaussian). Its actor loss is the batch *sum* of the weighted log-densities,
here the mean (``batch_size`` times smaller; Adam's steps are the same up to
its epsilon).

:func:`gaussian_sample` and :func:`sampled_action_values` are shared with
:mod:`offrl.algos.crr`, :class:`AdvantageWeightedBase` with CRR and
:mod:`offrl.algos.iql`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple

import torch
from torch import nn

from ..constants import ActionSpace
from ..models.encoders import compute_output_size
from ..models.builders import build_critics
from ..models.modules import Modules
from ..models.optimizers import OptimizerWrapper
from ..models.plain_mlp import PlainNetwork, plain_backward_enabled
from ..models.policies import LOG_SQRT_2PI, GreedyNormalPolicy, NormalPolicy, gaussian_log_prob, sample_major_noise
from ..models.q_functions import QFunction
from ..serialization import register
from ._common import (critic_step, normal_policy_forward, normal_policy_grads, optimizer_step, plain_critic, plain_critic_step,
                      plain_normal_policy, soft_update, td_target)
from .base import QLearningAlgoBase
from .actor_critic import ActorCriticConfig
from .config import POSITIVE, POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, param

__all__ = ["AWACConfig", "AWAC", "AWACModules", "gaussian_sample", "sampled_action_values"]


@register("algorithm", "awac")
@dataclasses.dataclass
class AWACConfig(ActorCriticConfig):
    """Config of AWAC (details in the module docstring).

    Loss:
        critics Σ_i E_(s,a,r,s')~D [ ℓ(r + γ^k (1 − d) min_j Q'_j(s', a') − Q_i(s, a)) ], a' ~ π(·|s');
        actor   −E_(s,a)~D [ w(s, a) log π(a|s) ],
                w = B · softmax over the batch of A / λ,
                A(s, a) = min_i Q_i(s, a) − (1/N) Σ_n min_i Q_i(s, a_n), a_n ~ π(·|s).

    Defaults:
        d3rlpy 2.8.1's: batch_size=1024, learning rates 3e-4, tau=0.005,
        lam=1.0, one action sample for the value baseline, two critics.
        The paper used λ=1 (0.3 for some tasks), batch size 1024 and a
        4-layer 256-unit policy.

    References:
        Nair, Gupta, Dalal and Levine, "AWAC: Accelerating Online
        Reinforcement Learning with Offline Datasets", 2020, arXiv:2006.09359.

    Args:
        tau: Polyak averaging factor of the target critics.
        lam: temperature λ of the advantage weights (smaller: greedier).
        n_action_samples: policy samples per state in the value baseline.
        n_critics: number of Q-functions (targets and advantages take their minimum).
    """

    batch_size: int = param(1024, check=POSITIVE_INT)
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    lam: float = param(1.0, check=POSITIVE)
    n_action_samples: int = param(1, check=POSITIVE_INT)
    n_critics: int = param(2, check=POSITIVE_INT)


def gaussian_sample(mean: torch.Tensor, logstd: torch.Tensor, n: int = 0) -> torch.Tensor:
    """Actions drawn from ``N(tanh(mean), exp(logstd))`` and clipped to
    ``[-1, 1]`` (no gradient needed): ``(B, A)``, or ``(B, n, A)`` with
    ``n > 0``."""
    loc, std = torch.tanh(mean), logstd.exp()
    if n > 0:
        loc, std = loc.unsqueeze(1).expand(-1, n, -1), std.unsqueeze(1).expand(-1, n, -1)
    # the n draws sample-major, as d3rlpy's sample_n (policies.sample_major_noise)
    noise = sample_major_noise(loc) if n > 0 else torch.randn_like(loc)
    return (loc + noise * std).clamp(-1.0, 1.0)


def repeat_observations(x: Any, n: int) -> Any:
    """Each row repeated ``n`` times in place (row ``b * n + k`` is row
    ``b``), for a tensor or a tuple observation's list of tensors."""
    if isinstance(x, (list, tuple)):
        return [v.repeat_interleave(n, dim=0) for v in x]
    return x.repeat_interleave(n, dim=0)


def sampled_action_values(q: QFunction, observations: Any, actions: torch.Tensor, sampled: torch.Tensor, reduction: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Expected Q-values, reduced over the ensemble (``"min"`` or ``"mean"``),
    of the logged ``actions`` ``(B, A)`` and of ``sampled`` actions
    ``(B, N, A)``, in one call of the critic ensemble. Returns ``(B,)`` and
    ``(B, N)``."""
    batch, n, size = sampled.shape
    all_actions = torch.cat([actions.unsqueeze(1), sampled], dim=1).reshape(-1, size)
    values = q.expected(repeat_observations(observations, n + 1), all_actions)  # (E, B*(N+1), 1)
    values = values.min(dim=0).values if reduction == "min" else values.mean(dim=0)
    values = values.view(batch, n + 1)
    return values[:, 0], values[:, 1:]


@dataclasses.dataclass(frozen=True)
class AWACModules(Modules):
    """AWAC's Gaussian policy, critics, target critics and optimizers (CRR's
    holder adds a target policy)."""

    policy: NormalPolicy
    q_function: QFunction
    targ_q_function: QFunction
    actor_optim: OptimizerWrapper
    critic_optim: OptimizerWrapper


class AdvantageWeightedBase(QLearningAlgoBase):
    """What AWAC, CRR and IQL share (their policies are extracted by
    advantage-weighted regression): a Gaussian policy centred on ``tanh(mean)``
    acting greedily at its centre, critics named ``q_function`` /
    ``targ_q_function``, and the acting and OPE hooks."""

    _action_type = ActionSpace.CONTINUOUS
    has_q_function = True
    _modules: AWACModules
    _policy_module = "policy"
    _q_modules = ("q_function", "targ_q_function")
    _policy_optim = "actor_optim"
    _q_optim = "critic_optim"

    # ---------------------------------------------------------- acting
    def _predict(self, x) -> torch.Tensor:
        return self._modules.policy.greedy(x)

    def _sample(self, x) -> torch.Tensor:
        return gaussian_sample(*self._modules.policy(x))

    def _action_log_prob(self, x, action: torch.Tensor) -> torch.Tensor:
        """Log-density of scaled ``action`` under ``N(tanh(mean), std)`` (the
        clipped mass at +-1 is ignored), ``(B,)`` (for :mod:`offrl.ope`)."""
        return self._modules.policy.log_prob(x, action)

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        return self._modules.q_function.expected(x, action).mean(dim=0)

    def policy_module(self) -> nn.Module:
        self._require_built()
        return GreedyNormalPolicy(self._modules.policy)

    # ---------------------------------------------- written-out steps
    def _plain_policy(self) -> PlainNetwork:
        """:func:`~offrl.algos._common.plain_normal_policy` of the policy, cached."""
        held = self._plain_pi = plain_normal_policy(self._modules.policy, self._modules.actor_optim,
                                                    self.__dict__.get("_plain_pi"))
        return held

    def _plain_critics(self) -> Tuple[PlainNetwork, Optional[nn.Module]]:
        """:func:`~offrl.algos._common.plain_critic` of the critics, cached."""
        m = self._modules
        held = self.__dict__.get("_plain_q")
        if held is None or not held[0].matches(m.q_function, m.critic_optim):
            held = self._plain_q = plain_critic(m.q_function, m.critic_optim)
        return held

    def _critic_step(self, batch: Any, target: torch.Tensor) -> torch.Tensor:
        """One TD step of the critics towards ``target``, written out where
        they are plain ReLU MLPs on the CPU, else through autograd; the loss."""
        critic, encoder = self._plain_critics()
        if critic.usable(batch.observations):
            return plain_critic_step(self._modules.q_function, critic, encoder, batch, target)
        return critic_step(self._modules.q_function, self._modules.critic_optim, batch, target).detach()

    def _written_out_step_available(self) -> bool:
        if not (self.is_built and plain_backward_enabled()):
            return False
        return self._plain_policy().layers is not None and self._plain_critics()[0].layers is not None

    def _weighted_policy_step(self, observations: Any, actions: torch.Tensor,
                              weights: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
        """The policy's advantage-weighted regression step,
        ``-(w * log N(a; tanh(mean), exp(logstd))).mean()``; ``weights(mean,
        logstd)`` gives ``w`` ``(B,)`` from the policy's outputs (no
        gradient). Returns the loss, detached. Written out where the policy is
        a plain ReLU MLP on the CPU (:meth:`_plain_policy`): with
        ``z = (a - tanh(mean)) / std`` the gradients are ``-w / B`` times
        ``z / std (1 - tanh(mean)^2)`` for the mean and ``z^2 - 1`` for the
        log-std (then the clamp's mask, or the free parameter's sigmoid,
        summed over the batch); else through autograd."""
        policy = self._modules.policy
        plain = self._plain_policy()
        if not plain.usable(observations):
            mean, logstd = policy(observations)
            w = weights(mean.detach(), logstd.detach())
            loss = -(w * gaussian_log_prob(actions, torch.tanh(mean), logstd)).mean()
            optimizer_step(self._modules.actor_optim, loss)
            return loss.detach()
        with torch.no_grad():
            inputs, mean, logstd, aux = normal_policy_forward(policy, plain, observations)
            w = weights(mean, logstd)
            centre = torch.tanh(mean)
            inv_std = torch.exp(-logstd)
            z = (actions - centre) * inv_std
            loss = -(w * (-0.5 * z**2 - logstd - LOG_SQRT_2PI).sum(dim=-1)).mean()
            coef = w.mul(-1.0 / w.shape[0]).unsqueeze(1)
            grad_mean = coef * z * inv_std * (1.0 - centre * centre)
            grads = normal_policy_grads(policy, plain, inputs, aux, grad_mean, coef * (z * z - 1.0))
            plain.step(grads)
        return loss


class AWAC(AdvantageWeightedBase, config=AWACConfig):
    """AWAC (see the module docstring)."""

    #: measured (1-thread AVX-512 BF16 EPYC, bf16-mixed against this step): 1.09x / 1.14x / 1.32x at 32 / 64 / 128
    #: rows (benchmarks/written_out.py): bf16-mixed from 32 rows on
    _written_out_faster_below = 32


    def _build(self, observation_shape, action_size: int) -> AWACModules:
        cfg = self._config
        encoder = cfg.actor_encoder_factory.create(observation_shape)
        policy = NormalPolicy(
            encoder, compute_output_size(encoder, observation_shape), action_size,
            min_logstd=-6.0, max_logstd=0.0, use_std_parameter=True,
        )
        q, targ = build_critics(cfg, observation_shape, action_size)
        return AWACModules(
            policy=policy, q_function=q, targ_q_function=targ,
            actor_optim=self._optimizer(cfg.actor_optim_factory, [policy], cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], cfg.critic_learning_rate),
        )

    def _advantage_weights(self, observations: Any, actions: torch.Tensor, mean: torch.Tensor, logstd: torch.Tensor) -> torch.Tensor:
        """``B softmax(A / lambda)`` over the batch, ``(B,)``, no gradient;
        ``mean``, ``logstd``: the policy's outputs at ``observations``."""
        cfg = self._config
        with torch.no_grad():
            sampled = gaussian_sample(mean, logstd, int(cfg.n_action_samples))
            q_data, q_sampled = sampled_action_values(self._modules.q_function, observations, actions, sampled, "min")
            advantage = q_data - q_sampled.mean(dim=1)
            return torch.softmax(advantage / float(cfg.lam), dim=0) * advantage.shape[0]

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        policy, q, targ = m.policy, m.q_function, m.targ_q_function

        with torch.no_grad():
            next_actions = gaussian_sample(*policy(batch.next_observations))
            next_dist, _ = targ.at_action(batch.next_observations, next_actions)
            target = td_target(batch.rewards, q.reduce(next_dist, "min"), batch.terminals, cfg.gamma, batch.intervals)
        critic_loss = self._critic_step(batch, target)

        actor_loss = self._weighted_policy_step(
            batch.observations, batch.actions, lambda mean, logstd: self._advantage_weights(batch.observations, batch.actions, mean, logstd))

        soft_update(targ, q, float(cfg.tau))
        return {"critic_loss": critic_loss, "actor_loss": actor_loss}
