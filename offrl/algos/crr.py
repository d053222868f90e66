"""Critic-Regularized Regression.

CRR (Wang et al., 2020, "Critic Regularized Regression",
https://arxiv.org/abs/2006.15134) clones the logged actions, each weighted
by a filter of its advantage under learned critics, so that the policy keeps
only the logged behaviour the critics judge better than its own:

    critic:  L(theta_i) = E_{(s, a, r, s') ~ D} [ l(y - Q_i(s, a)) ]
             y = r + gamma^k (1 - d) min_j Q'_j(s', a'),   a' ~ pi'(.|s')
    actor:   L(phi) = -E_{(s, a) ~ D} [ f(A(s, a)) log pi_phi(a|s) ]
             A(s, a) = Q(s, a) - mean_n Q(s, a_n)   ("mean")
                     = Q(s, a) - max_n Q(s, a_n)    ("max"),   a_n ~ pi(.|s)
             f(A) = 1[A > 0]                        ("binary")
                  = min(exp(A / beta), max_weight)  ("exp")

``Q`` without an index is the ensemble's mean, ``N = n_action_samples``,
``k`` the transition's interval, ``d`` its terminal flag and ``l`` the
squared error (quantile Huber for QR / IQN critics). ``pi(.|s)`` is a
Gaussian ``N(tanh(mu(s)), sigma(s))`` (state-dependent ``log sigma`` in
``[-20, 2]``), ``pi'`` its target copy; samples fed to a critic are clipped
to ``[-1, 1]``.

Each step updates the critics, then (every ``update_actor_interval`` steps,
on steps where ``grad_step % update_actor_interval == 0``) the policy
against the updated critics, then the targets: with
``target_update_type="hard"`` both target networks are copied from the
online ones on steps where ``grad_step % target_update_interval == 0``; with
``"soft"`` they move towards them by ``tau`` every step. On steps without a
policy update the reported ``actor_loss`` is the last one computed.

Where d3rlpy 2.8.1 differs: its ``predict`` is the paper's critic-weighted
policy, a random draw among ``n_action_samples`` policy samples with
probabilities ``softmax(Q)``; offrl's ``predict`` is the policy's mean
``tanh(mu(s))`` (deterministic, so it can be exported and compared), and
``sample_action`` draws from the Gaussian. d3rlpy accepts
``update_actor_interval`` but updates the policy every step; here it is
honoured (its default, 1, gives the same schedule).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Dict

import torch

from ..models.encoders import compute_output_size
from ..models.policies import NormalPolicy
from ..serialization import register
from ._common import freeze, hard_update, soft_update, td_target
from .awac import AdvantageWeightedBase, AWACModules, gaussian_sample, sampled_action_values
from .actor_critic import ActorCriticConfig
from .config import POSITIVE, POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, one_of, param

__all__ = ["CRRConfig", "CRR", "CRRModules"]


@register("algorithm", "crr")
@dataclasses.dataclass
class CRRConfig(ActorCriticConfig):
    """Config of CRR (details in the module docstring).

    Loss:
        critics Σ_i E_(s,a,r,s')~D [ ℓ(r + γ^k (1 − d) min_j Q'_j(s', a') − Q_i(s, a)) ], a' ~ π'(·|s');
        actor   −E_(s,a)~D [ f(A(s, a)) log π(a|s) ],
                A = Q(s, a) − mean_n Q(s, a_n) ("mean") or − max_n Q(s, a_n) ("max"), a_n ~ π(·|s);
                f(A) = 1[A > 0] ("binary") or min(exp(A / β), max_weight) ("exp").

    Defaults:
        d3rlpy 2.8.1's: batch_size=100, learning rates 3e-4, beta=1.0, four
        action samples, "mean" advantage, "exp" weights capped at 20, one
        critic, hard target updates every 100 steps (tau=0.005 for soft
        ones), a policy update every step. The paper's best variants were
        "binary"/"exp" with "max"/"mean" advantages and 4 samples.

    References:
        Wang, Novikov, Żołna, Springenberg, Reed, Shahriari, Siegel, Merel,
        Gulcehre, Heess and de Freitas, "Critic Regularized Regression",
        2020, arXiv:2006.15134.

    Args:
        beta: temperature of the "exp" weights.
        n_action_samples: policy samples per state in the advantage baseline.
        advantage_type: "mean" or "max" baseline over the samples.
        weight_type: "binary" or "exp" filter of the advantage.
        max_weight: cap of the "exp" weights.
        n_critics: number of Q-functions.
        target_update_type: "hard" (copy every ``target_update_interval``
            steps) or "soft" (Polyak averaging with ``tau`` every step).
        tau: Polyak averaging factor of "soft" target updates.
        target_update_interval: steps between "hard" target copies.
        update_actor_interval: critic steps per policy update.
    """

    batch_size: int = param(100, check=POSITIVE_INT)
    beta: float = param(1.0, check=POSITIVE)
    n_action_samples: int = param(4, check=POSITIVE_INT)
    advantage_type: str = param("mean", check=one_of(("mean", "max")))
    weight_type: str = param("exp", check=one_of(("binary", "exp")))
    max_weight: float = param(20.0, check=POSITIVE)
    n_critics: int = param(1, check=POSITIVE_INT)
    target_update_type: str = param("hard", check=one_of(("hard", "soft")))
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    target_update_interval: int = param(100, check=POSITIVE_INT)
    update_actor_interval: int = param(1, check=POSITIVE_INT)


@dataclasses.dataclass(frozen=True)
class CRRModules(AWACModules):
    """AWAC's networks and optimizers plus the target policy."""

    targ_policy: NormalPolicy


class CRR(AdvantageWeightedBase, config=CRRConfig):
    """CRR (see the module docstring)."""

    #: measured (1-thread AVX-512 BF16 EPYC, bf16-mixed against this step, since its narrow first layers run float32:
    #: ``layers.narrow_inputs``): 0.94x / 1.07x / 1.11x / 1.16x at 32 / 64 / 100 / 128 rows (benchmarks/written_out.py)
    _written_out_faster_below = 64

    _modules: CRRModules

    def _build(self, observation_shape, action_size: int) -> CRRModules:
        cfg = self._config
        encoder = cfg.actor_encoder_factory.create(observation_shape)
        policy = NormalPolicy(encoder, compute_output_size(encoder, observation_shape), action_size, min_logstd=-20.0, max_logstd=2.0)
        q = cfg.q_func_factory.create(cfg.critic_encoder_factory, observation_shape, action_size, int(cfg.n_critics), discrete=False)
        # reported on steps without a policy update until the first one
        self._last_actor_loss = torch.zeros((), device=self._device)
        return CRRModules(
            policy=policy, targ_policy=freeze(copy.deepcopy(policy)), q_function=q, targ_q_function=freeze(copy.deepcopy(q)),
            actor_optim=self._optimizer(cfg.actor_optim_factory, [policy], cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], cfg.critic_learning_rate),
        )

    def _weights(self, observations: Any, actions: torch.Tensor, mean: torch.Tensor, logstd: torch.Tensor) -> torch.Tensor:
        """The filter ``f(A(s, a))`` of each logged action, ``(B,)``, no
        gradient; ``mean``, ``logstd``: the policy's outputs at ``observations``."""
        cfg = self._config
        with torch.no_grad():
            sampled = gaussian_sample(mean, logstd, int(cfg.n_action_samples))
            q_data, q_sampled = sampled_action_values(self._modules.q_function, observations, actions, sampled, "mean")
            baseline = q_sampled.mean(dim=1) if cfg.advantage_type == "mean" else q_sampled.max(dim=1).values
            advantage = q_data - baseline
            if cfg.weight_type == "binary":
                return (advantage > 0.0).to(advantage.dtype)
            return torch.exp(advantage / float(cfg.beta)).clamp(max=float(cfg.max_weight))

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        q, targ_q, policy, targ_policy = m.q_function, m.targ_q_function, m.policy, m.targ_policy

        with torch.no_grad():
            next_actions = gaussian_sample(*targ_policy(batch.next_observations))
            next_dist, _ = targ_q.at_action(batch.next_observations, next_actions)
            target = td_target(batch.rewards, targ_q.reduce(next_dist, "min"), batch.terminals, cfg.gamma, batch.intervals)
        critic_loss = self._critic_step(batch, target)

        if grad_step % int(cfg.update_actor_interval) == 0:
            self._last_actor_loss = self._weighted_policy_step(
                batch.observations, batch.actions, lambda mean, logstd: self._weights(batch.observations, batch.actions, mean, logstd))

        if cfg.target_update_type == "soft":
            soft_update(targ_q, q, float(cfg.tau))
            soft_update(targ_policy, policy, float(cfg.tau))
        elif grad_step % int(cfg.target_update_interval) == 0:
            hard_update(targ_q, q)
            hard_update(targ_policy, policy)
        return {"critic_loss": critic_loss, "actor_loss": self._last_actor_loss}
