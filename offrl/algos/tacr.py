"""TACR (Lee et al., 2023, "Transformer Actor-Critic with Regularization:
Automated Stock Trading using Reinforcement Learning", AAMAS 2023) trains
the Decision Transformer as the actor of TD3+BC: critics learn from the
consecutive steps of each window and the actor's loss adds
``-lambda Q_1(s, pi(s))`` to the behaviour-cloning error.

The Decision Transformer itself is in :mod:`offrl.algos.decision_transformer`.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any, Dict

import torch

from ..constants import PositionEncodingType
from ..models.encoders import DefaultEncoderFactory, EncoderFactory
from ..models.modules import Modules
from ..models.optimizers import AdamFactory, OptimizerFactory, OptimizerWrapper
from ..models.q_functions import MeanQFunctionFactory, QFunction, QFunctionFactory
from ..models.transformers import ContinuousDecisionTransformer
from ..serialization import register
from ._common import freeze, no_param_grads, soft_update
from .config import NON_NEGATIVE, POSITIVE, POSITIVE_INT, UNIT_INTERVAL_OPEN_LOW, instance_of, param
from .td3 import smooth_target_action
from .decision_transformer import DecisionTransformer, attention_masks, masked_mean
from .transformer_base import ACTIVATION, DROPOUT, POSITION_ENCODING, TorchTrajectoryBatch, TransformerConfig

__all__ = ["TACRConfig", "TACR", "TACRModules"]


# ----------------------------------------------------------------------- TACR
@register("algorithm", "tacr")
@dataclasses.dataclass
class TACRConfig(TransformerConfig):
    """Config of TACR, Transformer Actor-Critic with Regularization (details
    in the module docstring).

    Loss:
        on the consecutive unpadded steps (s_t, a_t, r_t, s_t+1) of each window,
        critics Σ_i mean [ (r_t + γ min_j Q'_j(s_t+1, ã_t+1) − Q_i(s_t, a_t))² ],
                ã_t+1 = clip(π(…)_t+1 + clip(ε, −c, c), −1, 1), ε ~ N(0, σ²)
                (π's prediction at t+1, no gradient);
        actor   mean over unpadded t of [ −λ Q_1(s_t, π_t) + mean_j (π_t,j − a_t,j)² ],
                λ = α / mean |Q_1(s_t, π_t)| (no gradient through λ);
        the target critics follow with Polyak averaging (τ) after each step.

    Defaults:
        d3rlpy 2.8.1's: batch_size=64, context_size=20, max_timestep=1000,
        learning rates 1e-4, 1 head, 3 layers, dropouts 0.1, ReLU, SIMPLE
        position encoding, 2 critics, TD3+BC's α=2.5, τ=0.005, σ=0.2, c=0.5.

    References:
        Lee, Kim, Lee and Kim, "Transformer Actor-Critic with
        Regularization: Automated Stock Trading using Reinforcement
        Learning", AAMAS 2023 (no arXiv id); Fujimoto and Gu, "A
        Minimalist Approach to Offline Reinforcement Learning", 2021,
        arXiv:2106.06860.

    Args:
        context_size, max_timestep: as in the Decision Transformer.
        actor_learning_rate, critic_learning_rate: learning rates.
        actor_encoder_factory, critic_encoder_factory: encoders.
        actor_optim_factory, critic_optim_factory: optimizers.
        q_func_factory: Q-function type.
        num_heads, num_layers, attn_dropout, resid_dropout, embed_dropout,
        activation_type, position_encoding_type: the transformer's.
        n_critics: number of critics.
        alpha: weight of the Q term against the behaviour-cloning term.
        tau: Polyak averaging factor of the target critics.
        target_smoothing_sigma, target_smoothing_clip: target action noise.
    """

    batch_size: int = param(64, check=POSITIVE_INT)
    actor_learning_rate: float = param(1e-4, check=POSITIVE)
    critic_learning_rate: float = param(1e-4, check=POSITIVE)
    actor_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    critic_encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    actor_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    critic_optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    q_func_factory: QFunctionFactory = param(default_factory=MeanQFunctionFactory, check=instance_of(QFunctionFactory))
    num_heads: int = param(1, check=POSITIVE_INT)
    num_layers: int = param(3, check=POSITIVE_INT)
    attn_dropout: float = param(0.1, check=DROPOUT)
    resid_dropout: float = param(0.1, check=DROPOUT)
    embed_dropout: float = param(0.1, check=DROPOUT)
    activation_type: str = param("relu", check=ACTIVATION)
    position_encoding_type: PositionEncodingType = param(PositionEncodingType.SIMPLE, check=POSITION_ENCODING)
    n_critics: int = param(2, check=POSITIVE_INT)
    alpha: float = param(2.5, check=NON_NEGATIVE)
    tau: float = param(0.005, check=UNIT_INTERVAL_OPEN_LOW)
    target_smoothing_sigma: float = param(0.2, check=NON_NEGATIVE)
    target_smoothing_clip: float = param(0.5, check=NON_NEGATIVE)


@dataclasses.dataclass(frozen=True)
class TACRModules(Modules):
    """The Decision Transformer (the actor), the critics, their target copy
    and the optimizers."""

    transformer: ContinuousDecisionTransformer
    q_function: QFunction
    targ_q_function: QFunction
    actor_optim: OptimizerWrapper
    critic_optim: OptimizerWrapper


class TACR(DecisionTransformer, config=TACRConfig):
    """TACR (see the module docstring): the Decision Transformer trained as
    the actor of TD3+BC."""

    _modules: TACRModules  # type: ignore[assignment]  # the actor is DT's; the optimizers are TD3+BC's
    _q_modules = ("q_function", "targ_q_function")
    _policy_optim = "actor_optim"
    _q_optim = "critic_optim"

    def _build(self, observation_shape: Any, action_size: int) -> TACRModules:  # type: ignore[override]
        cfg = self._config
        transformer = self._build_transformer(observation_shape, action_size, cfg.actor_encoder_factory)
        q = cfg.q_func_factory.create(cfg.critic_encoder_factory, observation_shape, action_size, int(cfg.n_critics),
                                      discrete=False)
        return TACRModules(
            transformer=transformer, q_function=q, targ_q_function=freeze(copy.deepcopy(q)),
            actor_optim=self._optimizer(cfg.actor_optim_factory, [transformer], float(cfg.actor_learning_rate)),
            critic_optim=self._optimizer(cfg.critic_optim_factory, [q], float(cfg.critic_learning_rate)),
        )

    def _update(self, batch: TorchTrajectoryBatch, grad_step: int) -> Dict[str, torch.Tensor]:
        cfg = self._config
        q, targ_q = self._modules.q_function, self._modules.targ_q_function
        predicted = self._modules.transformer(batch.observations, batch.actions, batch.returns_to_go, batch.timesteps,
                                              masks=attention_masks(batch))
        b, length = batch.masks.shape

        def steps(x: Any, sl: slice) -> Any:  # (B, L, ...)[:, sl] flattened to (B * L', ...)
            if isinstance(x, list):
                return [steps(o, sl) for o in x]
            part = x[:, sl]
            return part.reshape((-1,) + tuple(part.shape[2:]))

        now, nxt = slice(0, length - 1), slice(1, length)
        pair_masks = (batch.masks[:, now] * batch.masks[:, nxt]).reshape(-1)
        obs_t, act_t = steps(batch.observations, now), steps(batch.actions, now)
        with torch.no_grad():
            next_action = smooth_target_action(steps(predicted.detach(), nxt), float(cfg.target_smoothing_sigma),
                                               float(cfg.target_smoothing_clip))
            next_value = targ_q.expected(steps(batch.observations, nxt), next_action).min(dim=0).values[:, 0]
            rewards, terminals = steps(batch.rewards, now)[:, 0], steps(batch.terminals, now)[:, 0]
            target = rewards + float(cfg.gamma) * (1.0 - terminals) * next_value
        critic_optim = self._modules.critic_optim
        critic_optim.zero_grad()
        values = q.expected(obs_t, act_t)[..., 0]  # (E, N)
        critic_loss = (((values - target) ** 2) * pair_masks).sum(dim=1).sum() / pair_masks.sum().clamp(min=1.0)
        critic_loss.backward()
        critic_optim.step()

        actor_optim = self._modules.actor_optim
        actor_optim.zero_grad()
        all_steps = slice(0, length)
        masks = batch.masks.reshape(-1)
        with no_param_grads(q):
            q_first = q.expected(steps(batch.observations, all_steps), steps(predicted, all_steps))[0, :, 0]
        # clamped: a batch whose steps are all padding (masks all 0) gives a
        # zero loss, as masked_mean does, instead of alpha / 0
        lam = float(cfg.alpha) / masked_mean(q_first.abs().detach(), masks).clamp(min=1e-8)
        bc = ((predicted - batch.actions) ** 2).mean(dim=-1).reshape(-1)
        actor_loss = masked_mean(-lam * q_first + bc, masks)
        actor_loss.backward()
        actor_optim.step()
        soft_update(targ_q, q, float(cfg.tau))
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach()}
