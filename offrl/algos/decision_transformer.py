"""The Decision Transformer family: return-conditioned sequence policies.

Decision Transformer (Chen et al., 2021, "Decision Transformer:
Reinforcement Learning via Sequence Modeling", arXiv:2106.01345) treats
control as sequence modelling: a causal transformer reads a window of the
last ``context_size`` steps as tokens ``(R_t, s_t, a_t)``, where ``R_t`` is
the return-to-go (the sum of the rewards still to come), and is trained to
output the logged action ``a_t`` at each observation token:

    continuous:  L = E_window [ mean_{t: mask_t = 1} mean_j (pi(R_<=t, s_<=t, a_<t)_j - a_t,j)^2 ]
    discrete:    L = E_window [ mean_{t: mask_t = 1} -log softmax(logits(R_<=t, s_<=t, a_<t))[a_t] ]

(the window mean runs over the steps that are not front padding, as in
the authors' code; d3rlpy 2.8.1 divides by all ``B x L`` positions
instead, a per-batch factor of about 0.95 on 200-step episodes that
Adam's normalisation all but removes). Front padding (a window that
starts before its episode) is kept out of attention and gets no position
embedding, so each real step is predicted exactly as from the window
without the padding, which is what ``predict`` and the stateful wrapper
feed at an episode's first steps. At
decision time the policy is conditioned on a *target* return: the
return-to-go starts at it and falls by each reward received
(:class:`StatefulTransformerWrapper`).

TACR, the Decision Transformer trained as the actor of TD3+BC, is in
:mod:`offrl.algos.tacr`. The machinery the sequence models share (inputs,
the base class, action samplers, the stateful wrapper, sequence-policy
export) in :mod:`offrl.algos.transformer_base`, whose names are importable
from here too.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..constants import ActionSpace, PositionEncodingType
from ..models.encoders import DefaultEncoderFactory, EncoderFactory, compute_output_size
from ..models.modules import Modules
from ..models.optimizers import AdamFactory, OptimizerFactory, OptimizerWrapper
from ..models.transformers import ContinuousDecisionTransformer, create_position_encoding
from ..models.transformers import DiscreteDecisionTransformer as DiscreteDecisionTransformerModel
from ..serialization import register
from .config import POSITIVE, POSITIVE_INT, instance_of, param
from .transformer_base import (ACTIVATION, DROPOUT, POSITION_ENCODING, GreedyTransformerActionSampler,
                               IdentityTransformerActionSampler, SoftmaxTransformerActionSampler,
                               StatefulTransformerWrapper, TorchTrajectoryBatch, TransformerActionSampler,
                               TransformerAlgoBase, TransformerConfig, TransformerInput, embeds_steps_once)

__all__ = [
    "TransformerInput",
    "TorchTrajectoryBatch",
    "TransformerConfig",
    "TransformerAlgoBase",
    "TransformerActionSampler",
    "IdentityTransformerActionSampler",
    "SoftmaxTransformerActionSampler",
    "GreedyTransformerActionSampler",
    "StatefulTransformerWrapper",
    "DecisionTransformerConfig",
    "DecisionTransformer",
    "DiscreteDecisionTransformerConfig",
    "DiscreteDecisionTransformer",
    "DecisionTransformerModules",
    "DiscreteDecisionTransformerModules",
]

# ------------------------------------------------------- Decision Transformer
@dataclasses.dataclass
class DecisionTransformerFieldsConfig(TransformerConfig):
    """The fields the continuous and discrete Decision Transformers share
    (not an algorithm, not registered).

    Args:
        learning_rate: learning rate of the transformer.
        encoder_factory: encoder of the observations (its output size is the
            embedding size).
        optim_factory: optimizer.
        num_heads: attention heads (must divide the embedding size).
        num_layers: transformer blocks.
        attn_dropout, resid_dropout, embed_dropout: dropout probabilities.
        activation_type: activation of the blocks' MLPs.
    """

    learning_rate: float = param(1e-4, check=POSITIVE)
    encoder_factory: EncoderFactory = param(default_factory=DefaultEncoderFactory, check=instance_of(EncoderFactory))
    optim_factory: OptimizerFactory = param(default_factory=AdamFactory, check=instance_of(OptimizerFactory))
    num_heads: int = param(1, check=POSITIVE_INT)
    num_layers: int = param(3, check=POSITIVE_INT)
    attn_dropout: float = param(0.1, check=DROPOUT)
    resid_dropout: float = param(0.1, check=DROPOUT)
    embed_dropout: float = param(0.1, check=DROPOUT)
    activation_type: str = param("relu", check=ACTIVATION)


@register("algorithm", "decision_transformer")
@dataclasses.dataclass
class DecisionTransformerConfig(DecisionTransformerFieldsConfig):
    """Config of the Decision Transformer for continuous actions (details in
    the module docstring).

    Loss:
        E_window [ mean over unpadded steps t of mean_j (π(R_≤t, s_≤t, a_<t)_j − a_t,j)² ],
        π = tanh of a linear read-out of the observation token.

    Defaults:
        d3rlpy 2.8.1's: batch_size=64, context_size=20, max_timestep=1000,
        Adam with learning rate 1e-4, 1 head, 3 layers, dropouts 0.1, ReLU,
        SIMPLE position encoding. The paper's gym runs used 1 head, 3
        layers, embedding size 128, AdamW with learning rate 1e-4, weight
        decay 1e-4, linear warm-up over 10^4 steps and gradient clipping at
        0.25 (pass such an ``optim_factory`` to reproduce them).

    References:
        Chen, Lu, Rajeswaran, Lee, Grover, Laskin, Abbeel, Srinivas and
        Mordatch, "Decision Transformer: Reinforcement Learning via
        Sequence Modeling", 2021, arXiv:2106.01345.

    Args:
        position_encoding_type: ``SIMPLE`` or ``GLOBAL``.
    """

    batch_size: int = param(64, check=POSITIVE_INT)
    position_encoding_type: PositionEncodingType = param(PositionEncodingType.SIMPLE, check=POSITION_ENCODING)


def attention_masks(batch: TorchTrajectoryBatch) -> Optional[torch.Tensor]:
    """The batch's step masks for the transformer when a window is front
    padded (the padding is then kept out of attention); ``None`` when no
    step is padded, so the plain causal kernel runs."""
    if batch.n_steps and batch.n_steps == batch.masks.numel():
        return None
    return batch.masks


def masked_mean(values: torch.Tensor, masks: torch.Tensor) -> torch.Tensor:
    """Mean of ``values`` ``(B, L)`` over the steps where ``masks`` is 1."""
    return (values * masks).sum() / masks.sum().clamp(min=1.0)


@dataclasses.dataclass(frozen=True)
class DecisionTransformerModules(Modules):
    """The Decision Transformer and its optimizer."""

    transformer: ContinuousDecisionTransformer
    optim: OptimizerWrapper


class DecisionTransformer(TransformerAlgoBase, config=DecisionTransformerConfig):
    """Decision Transformer for continuous control (see the module docstring)."""

    _action_type = ActionSpace.CONTINUOUS
    _modules: DecisionTransformerModules
    _policy_module = "transformer"

    def _build_transformer(self, observation_shape: Any, action_size: int, encoder_factory: EncoderFactory) -> nn.Module:
        cfg = self._config
        encoder = encoder_factory.create(observation_shape)
        hidden = compute_output_size(encoder, observation_shape)
        position = create_position_encoding(cfg.position_encoding_type, hidden, int(cfg.max_timestep),
                                            int(cfg.context_size))
        return ContinuousDecisionTransformer(encoder, hidden, position, action_size, int(cfg.num_heads),
                                             int(cfg.num_layers), float(cfg.attn_dropout), float(cfg.resid_dropout),
                                             float(cfg.embed_dropout), cfg.activation_type)

    def _build(self, observation_shape: Any, action_size: int) -> DecisionTransformerModules:
        cfg = self._config
        transformer = self._build_transformer(observation_shape, action_size, cfg.encoder_factory)
        return DecisionTransformerModules(
            transformer=transformer, optim=self._optimizer(cfg.optim_factory, [transformer], float(cfg.learning_rate)))

    def _update(self, batch: TorchTrajectoryBatch, grad_step: int) -> Dict[str, torch.Tensor]:
        optim = self._modules.optim
        optim.zero_grad()
        predicted = self._modules.transformer(batch.observations, batch.actions, batch.returns_to_go, batch.timesteps,
                                              masks=attention_masks(batch))
        loss = masked_mean(((predicted - batch.actions) ** 2).mean(dim=-1), batch.masks)
        loss.backward()
        optim.step()
        return {"loss": loss.detach()}

    @embeds_steps_once
    def _predict_sequence(self, observations, actions, returns_to_go, timesteps) -> torch.Tensor:
        return self._modules.transformer(observations, actions, returns_to_go, timesteps, last_only=True)[:, -1]


# ---------------------------------------------- Discrete Decision Transformer
@register("algorithm", "discrete_decision_transformer")
@dataclasses.dataclass
class DiscreteDecisionTransformerConfig(DecisionTransformerFieldsConfig):
    """Config of the Decision Transformer for discrete actions (details in
    the module docstring).

    Loss:
        E_window [ mean over unpadded steps t of −log softmax(logits(R_≤t, s_≤t, a_<t))[a_t] ];
        the learning rate is scaled by minGPT's token schedule: linear warm-up
        over ``warmup_tokens`` trained steps, then a cosine decay to 10% at
        ``final_tokens``.

    Defaults:
        d3rlpy 2.8.1's, the paper's Atari values: batch_size=128,
        context_size=20 (the paper: 30 for most games), learning rate 6e-4,
        8 heads, 6 layers, dropouts 0.1, GELU, tanh on the token embeddings,
        GLOBAL position encoding, warmup_tokens=10240, final_tokens=3e7.
        The optimizer defaults to Adam as in d3rlpy; the paper used AdamW
        with GPT's weight-decay grouping: pass ``GPTAdamWFactory()``.

    References:
        Chen, Lu, Rajeswaran, Lee, Grover, Laskin, Abbeel, Srinivas and
        Mordatch, "Decision Transformer: Reinforcement Learning via
        Sequence Modeling", 2021, arXiv:2106.01345.

    Args:
        learning_rate: peak learning rate.
        embed_activation_type: activation of the token embeddings.
        position_encoding_type: ``SIMPLE`` or ``GLOBAL``.
        warmup_tokens: trained steps (tokens) of the linear warm-up.
        final_tokens: trained steps at which the cosine decay ends.
    """

    batch_size: int = param(128, check=POSITIVE_INT)
    learning_rate: float = param(6e-4, check=POSITIVE)
    num_heads: int = param(8, check=POSITIVE_INT)
    num_layers: int = param(6, check=POSITIVE_INT)
    activation_type: str = param("gelu", check=ACTIVATION)
    embed_activation_type: str = param("tanh", check=ACTIVATION)
    position_encoding_type: PositionEncodingType = param(PositionEncodingType.GLOBAL, check=POSITION_ENCODING)
    warmup_tokens: int = param(10240, check=POSITIVE_INT)
    final_tokens: int = param(30000000, check=POSITIVE_INT)

    def validate(self) -> None:
        super().validate()
        if self.final_tokens <= self.warmup_tokens:
            raise ValueError(f"final_tokens must be > warmup_tokens={self.warmup_tokens}, got {self.final_tokens}")


def token_learning_rate_factor(tokens: float, warmup_tokens: int, final_tokens: int) -> float:
    """minGPT's schedule: ``tokens / warmup_tokens`` during the warm-up, then
    ``max(0.1, (1 + cos(pi * progress)) / 2)`` with progress from 0 at the
    warm-up's end to 1 at ``final_tokens``."""
    if tokens < warmup_tokens:
        return float(tokens) / float(max(1, warmup_tokens))
    progress = float(tokens - warmup_tokens) / float(max(1, final_tokens - warmup_tokens))
    return max(0.1, 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))))


class _TokenCounter(nn.Module):
    """The number of trained steps (tokens) so far, saved with the model."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("tokens", torch.zeros((), dtype=torch.int64))


@dataclasses.dataclass(frozen=True)
class DiscreteDecisionTransformerModules(Modules):
    """The discrete Decision Transformer, the count of trained tokens (the
    learning-rate schedule's clock) and the optimizer."""

    transformer: DiscreteDecisionTransformerModel
    token_counter: _TokenCounter
    optim: OptimizerWrapper


class DiscreteDecisionTransformer(TransformerAlgoBase, config=DiscreteDecisionTransformerConfig):
    """Decision Transformer for discrete control (see the module docstring)."""

    _action_type = ActionSpace.DISCRETE
    _modules: DiscreteDecisionTransformerModules
    _policy_module = "transformer"

    def _build(self, observation_shape: Any, action_size: int) -> DiscreteDecisionTransformerModules:
        cfg = self._config
        encoder = cfg.encoder_factory.create(observation_shape)
        hidden = compute_output_size(encoder, observation_shape)
        position = create_position_encoding(cfg.position_encoding_type, hidden, int(cfg.max_timestep),
                                            int(cfg.context_size))
        transformer = DiscreteDecisionTransformerModel(
            encoder, hidden, position, action_size, int(cfg.num_heads), int(cfg.num_layers), float(cfg.attn_dropout),
            float(cfg.resid_dropout), float(cfg.embed_dropout), cfg.activation_type, cfg.embed_activation_type)
        self._tokens = None
        return DiscreteDecisionTransformerModules(
            transformer=transformer, token_counter=_TokenCounter(),
            optim=self._optimizer(cfg.optim_factory, [transformer], float(cfg.learning_rate)))

    def load_state(self, state: Dict[str, Any], source: str = "the state") -> None:
        super().load_state(state, source)
        self._tokens: Optional[int] = None  # re-read from the loaded counter

    @torch.compiler.disable
    def _schedule_learning_rate(self, batch: TorchTrajectoryBatch) -> torch.Tensor:
        """Count the batch's tokens and set the optimizer's learning rate from
        the token schedule; the rate as a 0-dim tensor. Eager under
        ``compile_graph=True`` (a Python float changing every step would make
        the compiled step recompile each time)."""
        cfg = self._config
        counter = self._modules.token_counter.tokens
        if getattr(self, "_tokens", None) is None:  # one read after building or loading, no sync per step
            self._tokens = int(counter)
        self._tokens += batch.n_steps or int(batch.masks.sum())  # a batch built by hand may not carry the count
        counter.fill_(self._tokens)
        factor = token_learning_rate_factor(self._tokens, int(cfg.warmup_tokens), int(cfg.final_tokens))
        lr = float(cfg.learning_rate) * factor
        for group in self._modules.optim.optim.param_groups:
            group["lr"] = lr
        # on the algorithm's device (a CPU tensor beside CUDA losses broke fit on CUDA); fill_ with a
        # Python number launches no host sync
        if getattr(self, "_lr_metric", None) is None or self._lr_metric.device.type != self._device.type:
            self._lr_metric = torch.zeros((), device=self._device)
        return self._lr_metric.fill_(lr)

    def _update(self, batch: TorchTrajectoryBatch, grad_step: int) -> Dict[str, torch.Tensor]:
        optim = self._modules.optim
        lr = self._schedule_learning_rate(batch)
        optim.zero_grad()
        logits = self._modules.transformer(batch.observations, batch.actions, batch.returns_to_go, batch.timesteps,
                                           masks=attention_masks(batch))
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.actions.reshape(-1), reduction="none")
        loss = masked_mean(nll.view(batch.masks.shape), batch.masks)
        loss.backward()
        optim.step()
        return {"loss": loss.detach(), "learning_rate": lr}

    @embeds_steps_once
    def _predict_sequence(self, observations, actions, returns_to_go, timesteps) -> torch.Tensor:
        return self._modules.transformer(observations, actions, returns_to_go, timesteps, last_only=True)[:, -1]
