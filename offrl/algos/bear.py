"""Bootstrapping Error Accumulation Reduction.

BEAR (Kumar, Fu, Tucker and Levine, 2019, "Stabilizing Off-Policy
Q-Learning via Bootstrapping Error Reduction",
https://arxiv.org/abs/1906.00949) keeps a SAC-style tanh-Gaussian policy
``pi`` inside the support of the data by bounding the maximum mean
discrepancy between its actions and actions of a conditional VAE ``G`` of
the behaviour policy, with a learned Lagrange multiplier ``alpha``:

    VAE      L_G = E || tanh(D(s, z)) - a ||^2 + vae_kl_weight * KL(q(z|s, a) || N(0, I))
    critics  y = r + gamma^k (1 - d) ( [lam min_i Q'_i(s', a'_j*) + (1 - lam) max_i Q'_i(s', a'_j*)]
                                       - temp * log pi(a'_j* | s') )
             a'_1..a'_n ~ pi(.|s'), n = n_target_samples, j* the best of them by the bracket
             L_Q = sum_i E [ (y - Q_i(s, a))^2 ]
    MMD      m(s) = MMD_k(u_1..u_p ~ pi(.|s) before tanh, D(s, z_1..z_p) before tanh),  p = n_mmd_action_samples
             (``mmd_kernel`` gaussian or laplacian with ``mmd_sigma``, :mod:`offrl.models.mmd`)
    actor    L_pi = E_s [ temp log pi(a|s) - min_i Q_i(s, a) + alpha (m(s) - alpha_threshold) ],  a ~ pi(.|s)
             (during the first ``warmup_steps`` steps only E_s [ alpha (m(s) - alpha_threshold) ])
    alpha    L_alpha = -E_s [ alpha (m(s) - alpha_threshold) ]   (ascent on the constraint),
             log alpha kept in [-5, 10]
    temp     SAC's: -E [ temp (log pi(a|s) - action_size) ], stepped before the actor

The MMD compares samples before the tanh on both sides, as the authors'
code does (d3rlpy 2.8.1 compares the VAE's squashed actions with the
policy's unsquashed ones). Each step trains the VAE, the critics, the actor
(and the temperature and alpha after warm-up), then moves the target critics
by ``tau``. During warm-up the temperature and alpha losses are reported as 0.

Acting: ``n_action_samples`` actions are drawn from ``pi(.|s)`` and the one
with the highest ``Q_1`` is taken. ``predict`` and the exported policy use a
fixed table of ``n_action_samples`` standard-normal draws (module
``candidate_noise``, made when the networks are built and saved with the
model), so the greedy action is a deterministic function of the
observation; ``sample_action`` draws fresh noise. Because the action is a
best-of-n choice, BEAR does not offer the Gaussian's density to importance
sampling (``has_stochastic_policy`` is False).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional

import torch
from torch import nn

from .._allocator import retain_freed_memory
from ..models.builders import build_critics, build_normal_policy
from ..models.encoders import DefaultEncoderFactory, EncoderFactory
from ..models.mmd import MMD_KERNELS, mmd
from ..models.optimizers import AdamFactory, OptimizerFactory, OptimizerWrapper
from ..models.parameters import ScalarParameter
from ..models.policies import NormalPolicy, squashed_sample
from ..models.q_functions import MeanQFunctionFactory, QFunction, QFunctionFactory
from ..models.vae import ConditionalVAE, create_conditional_vae, repeat_observations
from ..serialization import register
from ._common import critic_step, no_param_grads, optimizer_step, plain_critic_step, soft_update, td_target
from .bcq import FixedNoise, best_candidate, soft_clipped_max
from .config import (
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE,
    POSITIVE_INT,
    UNIT_INTERVAL,
    UNIT_INTERVAL_OPEN_LOW,
    LearnableConfig,
    instance_of,
    one_of,
    param,
)
from .sac import SAC, SACModules

__all__ = ["BEARConfig", "BEAR", "BEARModules", "BEARGreedyPolicy"]

#: bounds of log alpha (the authors' and d3rlpy's)
LOG_ALPHA_MIN, LOG_ALPHA_MAX = -5.0, 10.0


@register("algorithm", "bear")
@dataclasses.dataclass
class BEARConfig(LearnableConfig):
    """Config of BEAR (details in the module docstring).

    Loss:
        VAE      E ||tanh(D(s, z)) − a||² + w KL(q(z|s, a) || N(0, I)), w = ``vae_kl_weight``;
        critics  Σ_i E [ (y − Q_i(s, a))² ], y = r + γ^k (1 − d) (max_j [λ min_i Q'_i(s', a'_j)
                 + (1 − λ) max_i Q'_i(s', a'_j)] − T log π(a'_j*|s')), a'_j ~ π(·|s');
        actor    E [ T log π(a|s) − min_i Q_i(s, a) + α (MMD(π(·|s), G(·|s)) − ε) ]
                 (only the MMD term for ``warmup_steps`` steps);
        α        −E [ α (MMD − ε) ], log α in [−5, 10]; temperature T as SAC.

    Defaults:
        d3rlpy 2.8.1's: actor lr 1e-4, critic and VAE lr 3e-4, temperature lr
        1e-4, alpha lr 1e-3, batch_size=256, tau=0.005, two critics, λ=0.75,
        ε=0.05, 100 action samples when acting, 10 target samples, 4 MMD
        samples, Laplacian kernel with σ=20, KL weight 0.5, 40000 warm-up
        steps. The paper used 5 to 10 MMD samples, σ=20 (Laplacian) or 10
        (Gaussian) and ε=0.05.

    References:
        Kumar, Fu, Tucker and Levine, "Stabilizing Off-Policy Q-Learning via
        Bootstrapping Error Reduction", 2019, arXiv:1906.00949.

    Args:
        actor_learning_rate, critic_learning_rate, imitator_learning_rate:
            learning rates of the policy, the Q-functions and the VAE.
        temp_learning_rate: learning rate of the log temperature (0: fixed).
        alpha_learning_rate: learning rate of log alpha (0: fixed).
        actor_optim_factory, critic_optim_factory, imitator_optim_factory,
            temp_optim_factory, alpha_optim_factory: optimizers.
        actor_encoder_factory, critic_encoder_factory, imitator_encoder_factory:
            encoders of the policy, the Q-functions and the VAE.
        q_func_factory: Q-function type.
        tau: Polyak averaging factor of the target critics.
        n_critics: number of Q-functions.
        initial_temperature: initial entropy temperature.
        initial_alpha: initial Lagrange multiplier of the MMD constraint.
        alpha_threshold: ε, the MMD the constraint allows.
        lam: weight λ of the ensemble minimum in the target.
        n_action_samples: candidate actions when acting.
        n_target_samples: policy actions per next state in the target.
        n_mmd_action_samples: samples per state on each side of the MMD.
        mmd_kernel: ``"laplacian"`` or ``"gaussian"``.
        mmd_sigma: the kernel's width σ.
        vae_kl_weight: weight of the KL term of the VAE loss.
        warmup_steps: steps during which the policy only minimises the MMD.
    """

    batch_size: int = param(256, check=POSITIVE_INT)
    actor_learning_rate: float = param(1e-4, check=POSITIVE)
    critic_learning_rate: float = param(3e-4, check=POSITIVE)
    imitator_learning_rate: float = param(3e-4, check=POSITIVE)
    temp_learning_rate: float = param(1e-4, check=NON_NEGATIVE)
    alpha_learning_rate: float = param(1e-3, check=NON_NEGATIVE)
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    critic_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    imitator_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    temp_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    alpha_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    actor_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    critic_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    imitator_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    q_func_factory: QFunctionFactory = param(default_factory=MeanQFunctionFactory, check=instance_of(QFunctionFactory))
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    n_critics: int = param(2, check=POSITIVE_INT)
    initial_temperature: float = param(1.0, check=POSITIVE)
    initial_alpha: float = param(1.0, check=POSITIVE)
    alpha_threshold: float = param(0.05, check=NON_NEGATIVE)
    lam: float = param(0.75, check=UNIT_INTERVAL)
    n_action_samples: int = param(100, check=POSITIVE_INT)
    n_target_samples: int = param(10, check=POSITIVE_INT)
    n_mmd_action_samples: int = param(4, check=POSITIVE_INT)
    mmd_kernel: str = param("laplacian", check=one_of(MMD_KERNELS))
    mmd_sigma: float = param(20.0, check=POSITIVE)
    vae_kl_weight: float = param(0.5, check=NON_NEGATIVE)
    warmup_steps: int = param(40000, check=NON_NEGATIVE_INT)

    def validate(self) -> None:
        super().validate()
        if not math.exp(LOG_ALPHA_MIN) <= float(self.initial_alpha) <= math.exp(LOG_ALPHA_MAX):
            raise ValueError(
                f"initial_alpha must be in [exp({LOG_ALPHA_MIN:g}), exp({LOG_ALPHA_MAX:g})] "
                f"(log alpha is kept in that range), got {self.initial_alpha!r}"
            )


def _batch_size(x: Any) -> int:
    return int(x[0].shape[0]) if isinstance(x, (list, tuple)) else int(x.shape[0])


def _candidates(policy: NormalPolicy, x: Any, noise: torch.Tensor) -> torch.Tensor:
    """``tanh(mean + std * noise_j)`` for the ``n`` rows of ``noise`` ``(n, A)``: ``(B, n, A)``."""
    mean, logstd = policy(x)
    return torch.tanh(mean.unsqueeze(1) + logstd.exp().unsqueeze(1) * noise)


class BEARGreedyPolicy(nn.Module):
    """BEAR's ``predict`` as a module (for export): the best by ``Q_1`` of
    the policy's actions at the fixed noise table."""

    def __init__(self, policy: NormalPolicy, q_function: QFunction, noise: FixedNoise) -> None:
        super().__init__()
        self.policy = policy
        self.q_function = q_function
        self.noise = noise

    def forward(self, x: Any) -> torch.Tensor:
        table = self.noise.values
        return best_candidate(self.q_function, repeat_observations(x, table.shape[0]), _candidates(self.policy, x, table))


@dataclasses.dataclass(frozen=True)
class BEARModules(SACModules):
    """SAC's networks and optimizers plus the MMD multiplier, the VAE of
    the data, the fixed noise of ``predict``'s candidates and their
    optimizers (``alpha_optim`` is None when ``alpha`` is fixed)."""

    log_alpha: ScalarParameter
    vae: ConditionalVAE
    candidate_noise: FixedNoise
    imitator_optim: OptimizerWrapper
    alpha_optim: Optional[OptimizerWrapper]


class BEAR(SAC, config=BEARConfig):
    """BEAR (see the module docstring): SAC's networks plus a VAE of the
    data and an MMD constraint with a learned multiplier."""

    _modules: BEARModules
    #: the greedy action is a best-of-n choice, not a draw from the Gaussian
    _action_log_prob = None  # type: ignore[assignment]

    def _build(self, observation_shape, action_size: int) -> BEARModules:
        cfg = self._config
        if self._device.type == "cpu":
            # the critic targets and the MMD pass n_target_samples / n_mmd_action_samples actions per state through
            # the networks: ~5 MB activations freed and allocated anew every step (offrl._allocator; 1.2x measured)
            retain_freed_memory()
        policy = build_normal_policy(cfg.actor_encoder_factory, observation_shape, action_size)
        q, targ = build_critics(cfg, observation_shape, action_size)
        log_temp = ScalarParameter(cfg.initial_temperature)
        log_alpha = ScalarParameter(cfg.initial_alpha)
        vae = create_conditional_vae(cfg.imitator_encoder_factory, observation_shape, action_size, 2 * action_size)
        candidate_noise = FixedNoise(int(cfg.n_action_samples), action_size)
        self._zero = torch.zeros((), device=self._device)
        return BEARModules(
            policy=policy, q_function=q, targ_q_function=targ, log_temp=log_temp, log_alpha=log_alpha, vae=vae,
            candidate_noise=candidate_noise,
            actor_optim=self._optimizer(cfg.actor_optim_factory, [policy], cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], cfg.critic_learning_rate),
            imitator_optim=self._optimizer(cfg.imitator_optim_factory, [vae], cfg.imitator_learning_rate),
            temp_optim=(self._optimizer(cfg.temp_optim_factory, [log_temp], cfg.temp_learning_rate)
                        if cfg.temp_learning_rate > 0 else None),
            alpha_optim=(self._optimizer(cfg.alpha_optim_factory, [log_alpha], cfg.alpha_learning_rate)
                         if cfg.alpha_learning_rate > 0 else None),
        )

    def _mmd(self, x: Any) -> torch.Tensor:
        """Per-state MMD between the policy's and the VAE's samples before
        the tanh, ``(B,)``; gradients reach the policy only."""
        cfg = self._config
        p = int(cfg.n_mmd_action_samples)
        with torch.no_grad():
            behaviour = self._modules.vae.sample(x, n=p, raw=True)  # (B, p, A)
        mean, logstd = self._modules.policy(x)
        noise = torch.randn(mean.shape[0], p, mean.shape[1], device=mean.device)
        policy_raw = mean.unsqueeze(1) + logstd.exp().unsqueeze(1) * noise
        return mmd(policy_raw, behaviour, str(cfg.mmd_kernel), float(cfg.mmd_sigma))

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        policy, q, targ, vae = m.policy, m.q_function, m.targ_q_function, m.vae
        log_temp, log_alpha = m.log_temp, m.log_alpha

        imitator_loss = vae.loss(batch.observations, batch.actions, float(cfg.vae_kl_weight))[0]
        optimizer_step(m.imitator_optim, imitator_loss)

        n = int(cfg.n_target_samples)
        with torch.no_grad():
            mean, logstd = policy(batch.next_observations)
            next_actions, next_log_probs = squashed_sample(mean, logstd, n)  # (B, n, A), (B, n)
            repeated = repeat_observations(batch.next_observations, n)
            next_value, best = soft_clipped_max(targ, repeated, next_actions, float(cfg.lam))
            rows = torch.arange(next_actions.shape[0], device=next_actions.device)
            next_value = next_value - log_temp() * next_log_probs[rows, best].unsqueeze(-1)
            target = td_target(batch.rewards, next_value, batch.terminals, cfg.gamma, batch.intervals)
        plain = self._plain_networks(batch.observations)  # SAC's: the critics' step written out where it can be
        if plain is None:
            critic_loss = critic_step(q, m.critic_optim, batch, target)
        else:
            critic_loss = plain_critic_step(q, plain[1], plain[2], batch, target)

        distance = self._mmd(batch.observations)  # (B,)
        alpha = log_alpha()
        constraint = (alpha.detach() * (distance - float(cfg.alpha_threshold))).mean()
        temp = log_temp()
        if grad_step < int(cfg.warmup_steps):
            actor_loss = constraint
            optimizer_step(m.actor_optim, actor_loss)
            temp_loss = alpha_loss = self._zero
        else:
            mean, logstd = policy(batch.observations)
            action, log_prob = squashed_sample(mean, logstd)
            temp_optim, alpha_optim = m.temp_optim, m.alpha_optim
            temp_loss = alpha_loss = self._zero
            if temp_optim is not None:  # SAC's temperature step first, as d3rlpy 2.8.1
                temp_loss = -(temp * (log_prob.detach() - float(self._action_size))).mean()
                optimizer_step(temp_optim, temp_loss)
                temp = log_temp()
            with no_param_grads(q):
                q_value = q.expected(batch.observations, action).min(dim=0).values.squeeze(-1)  # (B,)
            actor_loss = (temp.detach() * log_prob - q_value).mean() + constraint
            loss = actor_loss
            if alpha_optim is not None:
                alpha_loss = -(alpha * (distance.detach() - float(cfg.alpha_threshold))).mean()
                loss = loss + alpha_loss
                alpha_optim.zero_grad()
            m.actor_optim.zero_grad()
            loss.backward()  # the two parts have disjoint parameters
            m.actor_optim.step()
            if alpha_optim is not None:
                alpha_optim.step()
                log_alpha.clamp_(math.exp(LOG_ALPHA_MIN), math.exp(LOG_ALPHA_MAX))
        soft_update(targ, q, float(cfg.tau))
        return {
            "imitator_loss": imitator_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "actor_loss": actor_loss.detach(),
            "temp_loss": temp_loss.detach(),
            "temp": temp.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": alpha.detach(),
            "mmd": distance.detach().mean(),
        }

    # ---------------------------------------------------------- acting
    def _predict(self, x) -> torch.Tensor:
        return self.policy_module()(x)

    def _sample(self, x) -> torch.Tensor:
        n = int(self._config.n_action_samples)
        noise = torch.randn(_batch_size(x), n, int(self._action_size), device=self._device)
        mean, logstd = self._modules.policy(x)
        candidates = torch.tanh(mean.unsqueeze(1) + logstd.exp().unsqueeze(1) * noise)
        return best_candidate(self._modules.q_function, repeat_observations(x, n), candidates)

    def policy_module(self) -> nn.Module:
        self._require_built()
        return BEARGreedyPolicy(self._modules.policy, self._modules.q_function, self._modules.candidate_noise)
