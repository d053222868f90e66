"""Batch-Constrained deep Q-learning: BCQ (continuous) and DiscreteBCQ.

**BCQ** (Fujimoto, Meger and Precup, 2019, "Off-Policy Deep Reinforcement
Learning without Exploration", https://arxiv.org/abs/1812.02900) only takes
actions that look like the data's. A conditional VAE ``G`` (latent size
``2 * action_size``) models the logged actions; a perturbation actor ``xi``
moves a generated action by at most ``action_flexibility`` (Φ); twin critics
score the results:

    VAE      L_G = E || tanh(D(s, z)) - a ||^2 + beta * KL(q(z|s, a) || N(0, I))
    critics  y = r + gamma^k (1 - d) max_j [ lam min_i Q'_i(s', a'_j) + (1 - lam) max_i Q'_i(s', a'_j) ]
             a'_j = xi'(s', G(s', z_j)),  z_j ~ clip(N(0, I), -0.5, 0.5),  j = 1..n_action_samples
             L_Q = sum_i E [ (y - Q_i(s, a))^2 ]
    actor    L_xi = -E_s [ Q_1(s, xi(s, G(s, z))) ]

Each step trains the VAE, then (from step ``rl_start_step`` on) the critics,
the actor (every ``update_actor_interval`` steps) and moves the target
actor and critics by ``tau``. Before ``rl_start_step`` the reported critic
and actor losses are 0.

The policy is: decode ``n_action_samples`` latents, perturb each, take the
candidate with the highest ``Q_1``. **Randomness in** ``predict`` **and
export**: ``predict`` (and the exported policy) use one fixed set of
``n_action_samples`` clipped N(0, I) latents drawn when the networks are
built and saved with the model (module ``candidate_latents``), so that
``predict`` is a deterministic function of the observation, two calls agree,
and the ONNX / TorchScript graph (where the latents are constants) gives the
same action. ``sample_action`` draws fresh latents every call.

**DiscreteBCQ** (Fujimoto, Conti, Ghavamzadeh and Pineau, 2019,
"Benchmarking Batch Deep Reinforcement Learning Algorithms",
https://arxiv.org/abs/1910.01708) is Double DQN restricted to the actions a
behaviour-cloning head ``G(a|s)`` (sharing the Q-network's encoder when
``share_encoder``) finds likely enough:

    allowed(s) = { a : G(a|s) / max_b G(b|s) > tau },   tau = action_flexibility
    y = r + gamma^k (1 - d) Q_target(s', argmax_{a in allowed(s')} Q(s', a))
    L = Huber(y - Q(s, a)) + [ -log G(a|s) + beta * mean(logits^2) ]

and acts with ``argmax_{a in allowed(s)} Q(s, a)``. The paper's target uses
the restricted argmax, as here; d3rlpy 2.8.1 uses the unrestricted Double
DQN target (its greedy action is restricted as here).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

import torch
from torch import nn
import torch.nn.functional as F

from .._allocator import retain_freed_memory
from ..constants import ActionSpace
from ..models.encoders import compute_output_size
from ..models.layers import float32_head
from ..models.modules import Modules
from ..models.optimizers import OptimizerWrapper
from ..models.perturbation import PerturbationActor, create_perturbation_actor
from ..models.plain_mlp import plain_backward, plain_backward_enabled, plain_forward, plain_output, side_head, side_head_backward
from ..models.policies import CategoricalPolicy
from ..models.q_functions import MeanQFunction, QFunction
from ..models.vae import ConditionalVAE, create_conditional_vae, repeat_observations
from ..serialization import register
from ._common import critic_step, freeze, hard_update, no_param_grads, optimizer_step, soft_update, td_target
from .actor_critic import ImitatorActorCriticConfig
from .base import QLearningAlgoBase, TrainStepResult
from .bc import imitation_loss_and_grad
from .config import (
    BOOL,
    NON_NEGATIVE,
    NON_NEGATIVE_INT,
    POSITIVE_INT,
    UNIT_INTERVAL,
    between,
    param,
)
from .dqn import DoubleDQN, DQNModules, PlainQ, QNetworkConfig, abs_td_errors, plain_q_holder

__all__ = [
    "BCQConfig",
    "BCQ",
    "DiscreteBCQConfig",
    "DiscreteBCQ",
    "BCQModules",
    "DiscreteBCQModules",
    "FixedNoise",
    "BCQGreedyPolicy",
    "DiscreteBCQGreedyPolicy",
    "soft_clipped_max",
]


@register("algorithm", "bcq")
@dataclasses.dataclass
class BCQConfig(ImitatorActorCriticConfig):
    """Config of BCQ (details in the module docstring).

    Loss:
        VAE      E ||tanh(D(s, z)) − a||² + β KL(q(z|s, a) || N(0, I));
        critics  Σ_i E [ (y − Q_i(s, a))² ],
                 y = r + γ^k (1 − d) max_j [λ min_i Q'_i(s', a'_j) + (1 − λ) max_i Q'_i(s', a'_j)],
                 a'_j = ξ'(s', G(s', z_j)), z_j ~ clip(N(0, I), −0.5, 0.5);
        actor    −E_s [ Q_1(s, ξ(s, G(s, z))) ],  ξ(s, a) = clip(a + Φ tanh(f(s, a)), −1, 1).

    Defaults:
        d3rlpy 2.8.1's: learning rates 1e-3, batch_size=100, tau=0.005,
        two critics, λ=0.75, n_action_samples=100, Φ=0.05, β=0.5,
        rl_start_step=0. The paper samples 10 actions per state and uses
        a KL weight of 0.5 (as here), Φ=0.05 and λ=0.75.

    References:
        Fujimoto, Meger and Precup, "Off-Policy Deep Reinforcement Learning
        without Exploration", 2019, arXiv:1812.02900.

    Args:
        update_actor_interval: critic steps per actor step.
        lam: weight λ of the ensemble minimum in the target (1 − λ on the maximum).
        n_action_samples: candidate actions per state, in the target and when acting.
        action_flexibility: Φ, the largest perturbation (fraction of the action range).
        rl_start_step: steps that train only the VAE before the critics and actor start.
        beta: weight β of the KL term of the VAE loss.
    """

    batch_size: int = param(100, check=POSITIVE_INT)
    update_actor_interval: int = param(1, check=POSITIVE_INT)
    lam: float = param(0.75, check=UNIT_INTERVAL)
    n_action_samples: int = param(100, check=POSITIVE_INT)
    action_flexibility: float = param(0.05, check=NON_NEGATIVE)
    rl_start_step: int = param(0, check=NON_NEGATIVE_INT)
    beta: float = param(0.5, check=NON_NEGATIVE)


class FixedNoise(nn.Module):
    """A fixed noise table, ``values`` ``(n, size)``, drawn once from N(0, I)
    (clipped to ``[-clip, clip]`` when ``clip`` is given) and saved with the
    model: the candidates ``predict`` and the exported policy use."""

    def __init__(self, n: int, size: int, clip: Optional[float] = None) -> None:
        super().__init__()
        values = torch.randn(n, size)
        if clip is not None:
            values = values.clamp(-clip, clip)
        self.register_buffer("values", values)


def _batch_size(x: Any) -> int:
    return int(x[0].shape[0]) if isinstance(x, (list, tuple)) else int(x.shape[0])


def soft_clipped_max(q: QFunction, repeated_x: Any, actions: torch.Tensor, lam: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """BCQ's target value over ``n`` candidate actions per state.

    ``actions`` is ``(B, n, A)`` and ``repeated_x`` the observations repeated
    to match (:func:`~offrl.models.vae.repeat_observations`). For each
    candidate the ensemble is combined as ``lam * min + (1 - lam) * max``
    (for distributional critics: of the members whose mean is lowest /
    highest); returns the value distribution of the best candidate
    ``(B, N)`` and its index ``(B,)``."""
    batch, n, action_size = actions.shape
    dist, _ = q.at_action(repeated_x, actions.reshape(batch * n, action_size))  # (E, B*n, N)
    members, quantiles = dist.shape[0], dist.shape[-1]
    dist = dist.view(members, batch, n, quantiles)
    means = dist.mean(dim=-1)  # (E, B, n)
    combined = means[0] if members == 1 else lam * means.min(dim=0).values + (1.0 - lam) * means.max(dim=0).values
    best = combined.argmax(dim=1)  # (B,)
    rows = torch.arange(batch, device=actions.device)
    chosen = dist[:, rows, best]  # (E, B, N)
    if members == 1:
        return chosen[0], best
    chosen_means = chosen.mean(dim=-1)  # (E, B)
    low = chosen[chosen_means.argmin(dim=0), rows]
    high = chosen[chosen_means.argmax(dim=0), rows]
    return lam * low + (1.0 - lam) * high, best


def best_candidate(q: QFunction, repeated_x: Any, candidates: torch.Tensor) -> torch.Tensor:
    """The candidate of ``(B, n, A)`` with the highest ``Q_1``, ``(B, A)``."""
    n, action_size = candidates.shape[1], candidates.shape[2]
    values = q.expected(repeated_x, candidates.reshape(-1, action_size))[0].view(-1, n)  # (B, n)
    index = values.argmax(dim=1).view(-1, 1, 1).expand(-1, 1, action_size)
    return candidates.gather(1, index).squeeze(1)


def _perturbed_candidates(vae: ConditionalVAE, actor: PerturbationActor, repeated_x: Any, latents: torch.Tensor, n: int) -> torch.Tensor:
    """``xi(s, G(s, z))`` for ``n`` latents per state, ``(B, n, A)``."""
    actions = actor(repeated_x, vae.decode(repeated_x, latents))
    return actions.view(-1, n, actions.shape[-1])


class BCQGreedyPolicy(nn.Module):
    """BCQ's ``predict`` as a module (for export): the best of the
    candidates made from the fixed latent table (see the module docstring)."""

    def __init__(self, vae: ConditionalVAE, actor: PerturbationActor, q_function: QFunction, latents: FixedNoise) -> None:
        super().__init__()
        self.vae = vae
        self.actor = actor
        self.q_function = q_function
        self.latents = latents

    def forward(self, x: Any) -> torch.Tensor:
        table = self.latents.values  # (n, L)
        n = table.shape[0]
        batch = x[0].shape[0] if isinstance(x, (list, tuple)) else x.shape[0]
        repeated = repeat_observations(x, n)
        latents = table.repeat(batch, 1)  # row b * n + j = latent j
        return best_candidate(self.q_function, repeated, _perturbed_candidates(self.vae, self.actor, repeated, latents, n))


@dataclasses.dataclass(frozen=True)
class BCQModules(Modules):
    """BCQ's perturbation actor (``policy``), critics, their target copies,
    the conditional VAE, the fixed latent candidates ``predict`` decodes and
    the optimizers."""

    policy: PerturbationActor
    targ_policy: PerturbationActor
    q_function: QFunction
    targ_q_function: QFunction
    vae: ConditionalVAE
    candidate_latents: FixedNoise
    actor_optim: OptimizerWrapper
    critic_optim: OptimizerWrapper
    imitator_optim: OptimizerWrapper


class BCQ(QLearningAlgoBase, config=BCQConfig):
    """Batch-Constrained deep Q-learning (see the module docstring)."""

    _action_type = ActionSpace.CONTINUOUS
    has_q_function = True
    _modules: BCQModules
    _policy_module = "policy"
    _q_modules = ("q_function", "targ_q_function")
    _policy_optim = "actor_optim"
    _q_optim = "critic_optim"

    def _build(self, observation_shape, action_size: int) -> BCQModules:
        cfg = self._config
        if self._device.type == "cpu":
            # n_action_samples candidate actions per state through the critics: ~10-20 MB activations freed and
            # allocated anew every step (offrl._allocator; bf16-mixed 1.3x measured)
            retain_freed_memory()
        latent_size = 2 * action_size
        vae = create_conditional_vae(cfg.imitator_encoder_factory, observation_shape, action_size, latent_size)
        policy = create_perturbation_actor(cfg.actor_encoder_factory, observation_shape, action_size, float(cfg.action_flexibility))
        q = cfg.q_func_factory.create(cfg.critic_encoder_factory, observation_shape, action_size, int(cfg.n_critics), discrete=False)
        candidate_latents = FixedNoise(int(cfg.n_action_samples), latent_size, clip=0.5)
        self._zero = torch.zeros((), device=self._device)
        self._last_actor_loss = self._zero
        return BCQModules(
            policy=policy, targ_policy=freeze(copy.deepcopy(policy)), q_function=q, targ_q_function=freeze(copy.deepcopy(q)),
            vae=vae, candidate_latents=candidate_latents,
            actor_optim=self._optimizer(cfg.actor_optim_factory, [policy], cfg.actor_learning_rate),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], cfg.critic_learning_rate),
            imitator_optim=self._optimizer(cfg.imitator_optim_factory, [vae], cfg.imitator_learning_rate),
        )

    def _update(self, batch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        m = self._modules
        vae, policy, targ_policy = m.vae, m.policy, m.targ_policy
        q, targ_q = m.q_function, m.targ_q_function

        vae_loss = vae.loss(batch.observations, batch.actions, float(cfg.beta))[0]
        optimizer_step(m.imitator_optim, vae_loss)
        if grad_step < int(cfg.rl_start_step):
            return {"vae_loss": vae_loss.detach(), "critic_loss": self._zero, "actor_loss": self._zero}

        n = int(cfg.n_action_samples)
        with torch.no_grad():
            batch_size = _batch_size(batch.next_observations)
            repeated = repeat_observations(batch.next_observations, n)
            latents = vae.sample_latent((batch_size * n,), self._device)
            candidates = _perturbed_candidates(vae, targ_policy, repeated, latents, n)
            next_value, _ = soft_clipped_max(targ_q, repeated, candidates, float(cfg.lam))
            target = td_target(batch.rewards, next_value, batch.terminals, cfg.gamma, batch.intervals)
        critic_loss = critic_step(q, m.critic_optim, batch, target)

        if grad_step % int(cfg.update_actor_interval) == 0:
            with torch.no_grad():
                generated = vae.decode(batch.observations, vae.sample_latent((_batch_size(batch.observations),), self._device))
            with no_param_grads(q):
                actor_loss = -q.expected(batch.observations, policy(batch.observations, generated))[0].mean()
                optimizer_step(m.actor_optim, actor_loss)
            self._last_actor_loss = actor_loss.detach()
        soft_update(targ_q, q, float(cfg.tau))
        soft_update(targ_policy, policy, float(cfg.tau))
        return {"vae_loss": vae_loss.detach(), "critic_loss": critic_loss.detach(), "actor_loss": self._last_actor_loss}

    # ---------------------------------------------------------- acting
    def _predict(self, x) -> torch.Tensor:
        return self.policy_module()(x)

    def _sample(self, x) -> torch.Tensor:
        m = self._modules
        n = int(self._config.n_action_samples)
        repeated = repeat_observations(x, n)
        latents = m.vae.sample_latent((_batch_size(x) * n,), self._device)
        return best_candidate(m.q_function, repeated, _perturbed_candidates(m.vae, m.policy, repeated, latents, n))

    def _predict_value(self, x, action: torch.Tensor) -> torch.Tensor:
        return self._modules.q_function.expected(x, action).mean(dim=0)

    def policy_module(self) -> nn.Module:
        self._require_built()
        m = self._modules
        return BCQGreedyPolicy(m.vae, m.policy, m.q_function, m.candidate_latents)


# ------------------------------------------------------------------ discrete
@register("algorithm", "discrete_bcq")
@dataclasses.dataclass
class DiscreteBCQConfig(QNetworkConfig):
    """Config of DiscreteBCQ (details in the module docstring).

    Loss:
        L = ℓ(r + γ^k (1 − d) Q_θ⁻(s', a*) − Q_θ(s, a)) − log G(a|s) + β mean(logits(s)²),
        a* = argmax over {a : G(a|s')/max_b G(b|s') > τ} of Q_θ(s', a),
        ℓ the Huber loss, τ = ``action_flexibility``.

    Defaults:
        d3rlpy 2.8.1's: those of DQN (learning_rate=6.25e-5, batch_size=32,
        target_update_interval=8000), τ=0.3 (the paper's), β=0.5 (the
        paper's logit penalty is 1e-2), the imitator sharing the
        Q-network's encoder.

    References:
        Fujimoto, Conti, Ghavamzadeh and Pineau, "Benchmarking Batch Deep
        Reinforcement Learning Algorithms", 2019, arXiv:1910.01708.

    Args:
        action_flexibility: τ, the smallest probability ratio to the most
            likely action an action needs to be considered (0: all, DQN).
        beta: weight of the imitator's logit penalty.
        target_update_interval: steps between target network copies.
        share_encoder: the imitator uses the (first) Q-network's encoder.
    """

    batch_size: int = param(32, check=POSITIVE_INT)
    action_flexibility: float = param(0.3, check=between(0.0, 1.0, high_open=True))
    beta: float = param(0.5, check=NON_NEGATIVE)
    target_update_interval: int = param(8000, check=POSITIVE_INT)
    share_encoder: bool = param(True, check=BOOL)


class FirstMemberEncoder(nn.Module):
    """The features of a Q-ensemble's first member, ``(B, F)``, from its
    encoder (output ``(E, B, F)``): lets a head share the Q-network's encoder."""

    def __init__(self, ensemble_encoder: nn.Module) -> None:
        super().__init__()
        self.ensemble_encoder = ensemble_encoder

    def forward(self, x: Any) -> torch.Tensor:
        return self.ensemble_encoder(x)[0]


def allowed_mask(logits: torch.Tensor, action_flexibility: float) -> torch.Tensor:
    """Actions whose probability is more than ``action_flexibility`` times
    the most likely one's, ``(B, A)`` bools."""
    # log G(a|s) - max_b log G(b|s): the log-normaliser cancels, leaving the logits' gap to their maximum
    ratio = logits - logits.max(dim=-1, keepdim=True).values
    threshold = math.log(action_flexibility) if action_flexibility > 0.0 else -math.inf
    return ratio > threshold


def restricted_argmax(values: torch.Tensor, logits: torch.Tensor, action_flexibility: float) -> torch.Tensor:
    """``argmax`` of ``values`` ``(B, A)`` over the allowed actions, ``(B,)``."""
    mask = allowed_mask(logits, action_flexibility)
    return torch.where(mask, values, torch.full_like(values, -math.inf)).argmax(dim=-1)


class DiscreteBCQGreedyPolicy(nn.Module):
    """DiscreteBCQ's greedy action as a module (for export)."""

    def __init__(self, q_function: QFunction, imitator: CategoricalPolicy, action_flexibility: float,
                 shared: bool = False) -> None:
        super().__init__()
        self.q_function = q_function
        self.imitator = imitator
        self.action_flexibility = float(action_flexibility)
        #: the imitator reads the Q-network's (first member's) features and the
        #: Q-function is a mean one: one encoder pass gives both (see DiscreteBCQ._shares_features)
        self.shared = bool(shared)

    def forward(self, x: Any) -> torch.Tensor:
        if self.shared:
            features = self.q_function.encoder(x)  # (E, B, F)
            values, logits = self.q_function.head(features).mean(dim=0), self.imitator.fc(features[0])
        else:
            values, logits = self.q_function.expected(x).mean(dim=0), self.imitator(x)
        return restricted_argmax(values, logits, self.action_flexibility)


@dataclasses.dataclass(frozen=True)
class DiscreteBCQModules(DQNModules):
    """Double DQN's networks plus the imitator (``optim`` trains both)."""

    imitator: CategoricalPolicy


class DiscreteBCQ(DoubleDQN, config=DiscreteBCQConfig):
    """DiscreteBCQ (see the module docstring): Double DQN with an imitator
    that restricts the greedy and the target actions."""

    _modules: DiscreteBCQModules

    def _plain_holder(self) -> Optional[PlainQ]:
        """The written-out step's networks (see :meth:`_update_plain`) when
        the imitator shares a one-critic mean Q-network's encoder; else None."""
        if not (self._single_mean_q and self._shares_features()):
            return None
        m = self._modules
        # the autograd step calls the shared encoder's wrapper, both heads and the whole target network
        called = [m.q_function.encoder, m.q_function.head] + list(m.targ_q_function.modules())
        return plain_q_holder(self, m.q_function, m.targ_q_function, m.optim, side_heads=(m.imitator.fc,), called=called)

    def _written_out_step_available(self) -> bool:
        if not (self.is_built and plain_backward_enabled()):
            return False
        plain = self._plain_holder()
        return plain is not None and plain.layers is not None

    def _build(self, observation_shape, action_size: int) -> DiscreteBCQModules:
        modules = super()._build(observation_shape, action_size)
        cfg = self._config
        q = modules.q_function
        if cfg.share_encoder:
            encoder = FirstMemberEncoder(q.encoder)
            imitator = CategoricalPolicy(encoder, compute_output_size(encoder, observation_shape), action_size)
            trained = [q, imitator.fc]  # the shared encoder once
        else:
            encoder = cfg.encoder_factory.create(observation_shape)
            imitator = CategoricalPolicy(encoder, compute_output_size(encoder, observation_shape), action_size)
            trained = [q, imitator]
        # one optimizer over the Q-network and the imitator (one loss), in place of DQN's
        return DiscreteBCQModules.extending(
            modules, imitator=imitator, optim=self._optimizer(cfg.optim_factory, trained, cfg.learning_rate))

    def _shares_features(self) -> bool:
        """Whether one encoder pass can give both the Q-values and the
        imitator's logits: a shared encoder under a mean (non-distributional)
        Q-function, whose values are ``head(encoder(s))``."""
        return bool(self._config.share_encoder) and type(self._modules.q_function) is MeanQFunction

    def _values_and_logits(self, observations) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(Q(s, .) (E, B, A), imitator logits (B, A))`` from one pass
        through the shared encoder (only when :meth:`_shares_features`)."""
        q = self._modules.q_function
        features = q.encoder(observations)  # (E, B, F); the imitator reads the first member's
        return float32_head(q.head, features), float32_head(self._modules.imitator.fc, features[0])

    def _next_value(self, next_observations) -> torch.Tensor:
        q, targ = self._modules.q_function, self._target_q_function()
        dist = targ.distribution(next_observations, greedy_taus=False)  # (E, B, A, N)
        if self._shares_features():
            values, next_logits = self._values_and_logits(next_observations)
            values = values.mean(dim=0)
        else:
            values, next_logits = q.expected(next_observations).mean(dim=0), self._modules.imitator(next_observations)
        next_action = restricted_argmax(values, next_logits, float(self._config.action_flexibility))
        index = next_action.view(1, -1, 1, 1).expand(dist.shape[0], -1, 1, dist.shape[-1])
        return q.reduce(dist.gather(2, index).squeeze(2), "min")

    def _update(self, batch, grad_step: int) -> TrainStepResult:
        cfg = self._config
        q, imitator = self._modules.q_function, self._modules.imitator
        plain = self._plain_holder() if batch.weights is None and plain_backward_enabled() else None
        if plain is not None and plain.layers is not None and plain.online.usable(batch.observations):
            return self._update_plain(batch, grad_step, plain)
        with torch.no_grad():
            target = td_target(batch.rewards, self._next_value(batch.next_observations), batch.terminals, cfg.gamma, batch.intervals)
        if self._shares_features():
            values, logits = self._values_and_logits(batch.observations)
            index = batch.actions.reshape(1, -1, 1).long().expand(values.shape[0], -1, 1)
            pred, taus = values.gather(2, index), None  # (E, B, 1), as MeanQFunction.at_action
        else:
            pred, taus = q.at_action(batch.observations, batch.actions)
            logits = imitator(batch.observations)
        td_loss = q.loss(pred, target, taus, batch.weights)
        imitator_loss = F.cross_entropy(logits, batch.actions.reshape(-1).long()) + float(cfg.beta) * (logits**2).mean()
        loss = td_loss + imitator_loss
        optimizer_step(self._modules.optim, loss)
        if grad_step % int(cfg.target_update_interval) == 0:
            hard_update(self._modules.targ_q_function, q)
        td_errors = abs_td_errors(pred.detach(), target) if batch.weights is not None else None
        return TrainStepResult(
            {"loss": loss.detach(), "td_loss": td_loss.detach(), "imitator_loss": imitator_loss.detach()}, td_errors
        )

    def _update_plain(self, batch, grad_step: int, plain: PlainQ) -> TrainStepResult:
        """:meth:`_update` for one mean critic sharing its plain ReLU
        encoder with the imitator, with the backward written out
        (:mod:`offrl.models.plain_mlp`): the Huber loss's gradient with
        respect to ``Q(s, a)`` is ``clamp(Q(s, a) - y, -1, 1) / B``, the
        imitator loss's with respect to the logits ``(softmax - onehot(a)) / B
        + 2 beta logits / (B x actions)``; both reach the shared features."""
        cfg = self._config
        fc = plain.online.side_heads[0]
        tau = float(cfg.action_flexibility)
        with torch.no_grad():
            next_inputs, next_values = plain_forward(plain.layers, batch.next_observations)
            best = restricted_argmax(next_values, side_head(next_inputs[-1], fc.weight, fc.bias), tau)
            next_value = plain_output(plain.target_layers, batch.next_observations).gather(1, best.view(-1, 1))
            target = td_target(batch.rewards, next_value, batch.terminals, cfg.gamma, batch.intervals)
            inputs, values = plain_forward(plain.layers, batch.observations)
            features = inputs[-1]
            logits = side_head(features, fc.weight, fc.bias)
            actions = (batch.actions if batch.actions.dtype == torch.int64 else batch.actions.long()).view(-1, 1)
            pred = values.gather(1, actions)
            td_loss = F.smooth_l1_loss(pred, target, beta=1.0)
            imitator_loss, grad_logits = imitation_loss_and_grad(logits, actions, float(cfg.beta))
            grad_values = torch.zeros_like(values).scatter_(1, actions, (pred - target).clamp_(-1.0, 1.0).mul_(1.0 / pred.shape[0]))
            grad_features, grad_w, grad_b = side_head_backward(grad_logits, features, fc.weight)
            plain.step(plain_backward(plain.layers, inputs, grad_values, feature_grad=grad_features) + [grad_w, grad_b])
        if grad_step % int(cfg.target_update_interval) == 0:
            hard_update(self._modules.targ_q_function, self._modules.q_function)
        return TrainStepResult({"loss": td_loss + imitator_loss, "td_loss": td_loss, "imitator_loss": imitator_loss}, None)

    def _predict(self, x) -> torch.Tensor:
        return self.policy_module()(x)

    def policy_module(self) -> nn.Module:
        return DiscreteBCQGreedyPolicy(self._modules.q_function, self._modules.imitator, float(self._config.action_flexibility),
                                       shared=self._shares_features())
