"""Transformer blocks of the Decision Transformer family.

The GPT stack, the position encodings and (discrete) the action embedding
and logits head start from GPT's initialisation (:func:`gpt_init_`); the
observation encoder and the return and (continuous) action embeddings keep
PyTorch's default, as in the authors' code.

A causal GPT stack (:class:`GPT2`) over the interleaved token sequence
``(R_1, s_1, a_1, R_2, s_2, a_2, ...)`` of a trajectory window, with
token embeddings for returns-to-go, observations (any offrl encoder) and
actions, and a position encoding per step:

* ``SIMPLE`` (Chen et al. 2021, gym tasks): a learned embedding of the
  episode timestep, added to the three tokens of that step;
* ``GLOBAL`` (Chen et al. 2021, Atari): a learned embedding of the
  window's first episode timestep plus a learned embedding of the token's
  position inside the window.

Attention uses :func:`torch.nn.functional.scaled_dot_product_attention`
with ``is_causal=True``, so fused (flash / memory-efficient) kernels run
where the device has them, and a token never sees a later one.

Shapes: ``B`` windows of ``L`` steps; observations ``(B, L, *obs_shape)``
(a list of such tensors for tuple observations), actions ``(B, L,
action_size)`` floats or ``(B, L)`` / ``(B, L, 1)`` int64 indices,
returns-to-go ``(B, L, 1)``, timesteps ``(B, L)`` int64.
"""

from __future__ import annotations

import copy
from typing import Any, List, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..constants import PositionEncodingType
from .layers import Linear, float32_head, linear

__all__ = [
    "ACTIVATIONS",
    "CausalSelfAttention",
    "GPTBlock",
    "GPT2",
    "PositionEncoding",
    "SimplePositionEncoding",
    "GlobalPositionEncoding",
    "create_position_encoding",
    "padded_causal_mask",
    "gpt_init_",
    "ContinuousDecisionTransformer",
    "DiscreteDecisionTransformer",
]

#: activation names accepted by ``activation_type`` / ``embed_activation_type``
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "tanh": nn.Tanh, "swish": nn.SiLU, "silu": nn.SiLU,
               "elu": nn.ELU, "leaky_relu": nn.LeakyReLU, "none": nn.Identity}

#: the layer-norm epsilon of the GPT blocks (d3rlpy 2.8.1's value)
BLOCK_LAYER_NORM_EPS = 3e-3


def gpt_init_(module: nn.Module, std: float = 0.02) -> nn.Module:
    """GPT's initialisation (Radford et al. 2019, as in the Decision
    Transformer's code): linear and embedding weights ~ N(0, std²), biases
    0, layer norms at identity. Returns ``module``."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, mean=0.0, std=std)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return module


def activation(name: Union[str, nn.Module]) -> nn.Module:
    """The activation module called ``name`` (see :data:`ACTIVATIONS`), or a
    copy of the module given (d3rlpy's modules take activation modules)."""
    if isinstance(name, nn.Module):
        return copy.deepcopy(name)
    if name not in ACTIVATIONS:
        raise ValueError(f"activation_type must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]()


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which token ``i`` attends to ``j <= i`` only."""

    def __init__(self, hidden_size: int, num_heads: int, attn_dropout: float, resid_dropout: float) -> None:
        super().__init__()
        if hidden_size % num_heads != 0:
            raise ValueError(f"the embedding size {hidden_size} is not divisible by num_heads={num_heads}")
        self.num_heads = num_heads
        self.attn_dropout = attn_dropout
        self.qkv = Linear(hidden_size, 3 * hidden_size)
        self.proj = Linear(hidden_size, hidden_size)
        self.resid_dropout = nn.Dropout(resid_dropout)

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``attn_mask``: ``(B, 1, T, T)`` booleans, True where a query may
        attend to a key (:func:`padded_causal_mask`); plain causal when None."""
        batch, tokens, hidden = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3, self.num_heads, hidden // self.num_heads).permute(2, 0, 3, 1, 4)
        dropout = self.attn_dropout if self.training else 0.0
        if attn_mask is None:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)
        y = y.transpose(1, 2).reshape(batch, tokens, hidden)
        return self.resid_dropout(self.proj(y))

    def forward_qkv(self, qkv: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """``forward`` from the ``(B, T, 3 * hidden)`` query-key-value
        products already computed (``self.qkv`` of the normalised tokens;
        the stateful policy keeps them per token), causal; the last token's
        output only with ``last_only``. Inference (no dropout)."""
        batch, tokens, width = qkv.shape
        hidden = width // 3
        q, k, v = qkv.view(batch, tokens, 3, self.num_heads, hidden // self.num_heads).permute(2, 0, 3, 1, 4)
        if last_only:  # the last token sees every token: no mask
            y = F.scaled_dot_product_attention(q[:, :, -1:], k, v)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(batch, y.shape[2], hidden))

    def forward_at(self, x: torch.Tensor, index: Optional[torch.Tensor] = None,
                   attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The outputs at the token positions ``index`` only (ascending; the
        last token when ``None``): every token is still a key and value and
        the causal rule is kept (position ``p`` attends to tokens ``<= p``).
        Equal to ``forward(x, attn_mask)[:, index]`` for less work."""
        batch, tokens, hidden = x.shape
        heads, size = self.num_heads, hidden // self.num_heads
        weight, bias = self.qkv.weight, self.qkv.bias
        queries = x[:, -1:] if index is None else x[:, index]
        q = linear(queries, weight[:hidden], bias[:hidden]).view(batch, -1, heads, size).transpose(1, 2)
        k, v = linear(x, weight[hidden:], bias[hidden:]).view(batch, tokens, 2, heads, size).permute(2, 0, 3, 1, 4)
        if attn_mask is not None:  # the rows of the given mask at the queries
            mask: Optional[torch.Tensor] = attn_mask[:, :, -1:] if index is None else attn_mask[:, :, index]
        else:  # the last token sees every token: no mask
            mask = None if index is None else index[:, None] >= torch.arange(tokens, device=x.device)[None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask,
                                           dropout_p=self.attn_dropout if self.training else 0.0)
        y = y.transpose(1, 2).reshape(batch, queries.shape[1], hidden)
        return self.resid_dropout(self.proj(y))


class GPTBlock(nn.Module):
    """Pre-norm transformer block: ``x + attn(LN(x))``, then ``x + MLP(LN(x))``
    with a 4x wide MLP."""

    def __init__(self, hidden_size: int, num_heads: int, attn_dropout: float, resid_dropout: float,
                 activation_type: str) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden_size, eps=BLOCK_LAYER_NORM_EPS)
        self.attention = CausalSelfAttention(hidden_size, num_heads, attn_dropout, resid_dropout)
        self.ln2 = nn.LayerNorm(hidden_size, eps=BLOCK_LAYER_NORM_EPS)
        self.mlp = nn.Sequential(Linear(hidden_size, 4 * hidden_size), activation(activation_type),
                                 Linear(4 * hidden_size, hidden_size), nn.Dropout(resid_dropout))

    def forward(self, x: torch.Tensor, attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = x + self.attention(self.ln1(x), attn_mask)
        return x + self.mlp(self.ln2(x))

    def forward_at(self, x: torch.Tensor, index: Optional[torch.Tensor] = None,
                   attn_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``forward(x, attn_mask)[:, index]`` (the last token when ``index``
        is None), computing the queries, residuals and MLP at those
        positions only."""
        y = (x[:, -1:] if index is None else x[:, index]) + self.attention.forward_at(self.ln1(x), index, attn_mask)
        return y + self.mlp(self.ln2(y))


    def forward_from_qkv(self, x: torch.Tensor, qkv: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """``forward(x)`` (the last token's row with ``last_only``) given
        ``qkv = attention.qkv(ln1(x))``, in eval mode."""
        y = (x[:, -1:] if last_only else x) + self.attention.forward_qkv(qkv, last_only)
        return y + self.mlp(self.ln2(y))


def padded_causal_mask(token_masks: torch.Tensor) -> torch.Tensor:
    """``(B, T)`` token masks (1: a real token, 0: front padding) -> the
    ``(B, 1, T, T)`` boolean attention mask in which a token attends to the
    real tokens at or before it, and a padding token to itself alone (so
    that its row is never empty; its output is never read). A real token
    therefore computes exactly what it would in the window without the
    padding."""
    tokens = token_masks.shape[1]
    causal = torch.ones(tokens, tokens, dtype=torch.bool, device=token_masks.device).tril()
    eye = torch.eye(tokens, dtype=torch.bool, device=token_masks.device)
    return (causal & (token_masks[:, None, :] > 0) | eye)[:, None]


class GPT2(nn.Module):
    """Embedding dropout, ``num_layers`` causal blocks and a final layer norm
    over ``(B, T, hidden)`` token embeddings."""

    def __init__(self, hidden_size: int, num_heads: int, num_layers: int, attn_dropout: float,
                 resid_dropout: float, embed_dropout: float, activation_type: str) -> None:
        super().__init__()
        self.dropout = nn.Dropout(embed_dropout)
        self.blocks = nn.Sequential(*[GPTBlock(hidden_size, num_heads, attn_dropout, resid_dropout, activation_type)
                                      for _ in range(num_layers)])
        self.ln = nn.LayerNorm(hidden_size, eps=BLOCK_LAYER_NORM_EPS)
        gpt_init_(self)

    def forward(self, x: torch.Tensor, index: Optional[torch.Tensor] = None, last_only: bool = False,
                token_masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Outputs at every token, at the positions ``index`` only, or at the
        last token only (``last_only``); the last block then works on those
        positions alone: exact, and cheaper when a caller reads a few tokens.
        ``token_masks`` ``(B, T)`` (0 on front padding) keeps the padding out
        of every real token's attention (:func:`padded_causal_mask`)."""
        x = self.dropout(x)
        attn_mask = None if token_masks is None else padded_causal_mask(token_masks)
        blocks = list(self.blocks)
        if index is None and not last_only:
            for block in blocks:
                x = block(x, attn_mask)
            return self.ln(x)
        for block in blocks[:-1]:
            x = block(x, attn_mask)
        return self.ln(blocks[-1].forward_at(x, None if last_only else index, attn_mask))


class PositionEncoding(nn.Module):
    """``(B, L)`` episode timesteps -> ``(B, L, hidden)`` step embeddings.
    With ``masks`` ``(B, L)`` (0 on front padding) the padded steps get a
    zero embedding (their timestep, 0 by the slicers' convention, is not
    read), so no padded step shares a real step's embedding."""

    def forward(self, timesteps: torch.Tensor, masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        raise NotImplementedError  # pragma: no cover - interface


class SimplePositionEncoding(PositionEncoding):
    """A learned embedding of each step's episode timestep (``0..max_timestep``)."""

    def __init__(self, hidden_size: int, max_timestep: int) -> None:
        super().__init__()
        self.embed = gpt_init_(nn.Embedding(max_timestep + 1, hidden_size))

    def forward(self, timesteps: torch.Tensor, masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        out = self.embed(timesteps)
        return out if masks is None else out * masks[..., None].to(out.dtype)


class GlobalPositionEncoding(PositionEncoding):
    """A learned embedding of the window's first timestep (where the window
    lies in the episode) plus a learned embedding of each step's position
    inside the window (up to ``context_size`` steps)."""

    def __init__(self, hidden_size: int, max_timestep: int, context_size: int) -> None:
        super().__init__()
        self.global_embed = gpt_init_(nn.Embedding(max_timestep + 1, hidden_size))
        self.block_embed = nn.Parameter(torch.zeros(1, context_size, hidden_size))

    def forward(self, timesteps: torch.Tensor, masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        length = timesteps.shape[1]
        if not torch.jit.is_tracing() and length > self.block_embed.shape[1]:
            raise ValueError(f"the window has {length} steps, more than context_size={self.block_embed.shape[1]}")
        if masks is None:
            return self.global_embed(timesteps[:, :1]) + self.block_embed[:, :length]
        # front padding: the first real step is the window's start and block position 0, as in the
        # window without the padding
        real = masks > 0
        pad = length - real.sum(dim=1, keepdim=True)  # (B, 1)
        first = timesteps.gather(1, pad.clamp(max=length - 1))
        inside = (torch.arange(length, device=timesteps.device)[None, :] - pad).clamp(min=0)  # (B, L)
        # the block positions picked by a one-hot product: indexing the parameter would backpropagate
        # through index_put's accumulation, whose order varies with the thread count on the CPU
        picked = F.one_hot(inside, num_classes=length).to(self.block_embed.dtype) @ self.block_embed[0, :length]
        out = self.global_embed(first) + picked
        return out * real[..., None].to(out.dtype)


def create_position_encoding(kind: PositionEncodingType, hidden_size: int, max_timestep: int,
                             context_size: int) -> PositionEncoding:
    """The position encoding ``kind`` names."""
    if kind == PositionEncodingType.SIMPLE:
        return SimplePositionEncoding(hidden_size, max_timestep)
    if kind == PositionEncodingType.GLOBAL:
        return GlobalPositionEncoding(hidden_size, max_timestep, context_size)
    raise ValueError(f"position_encoding_type must be a PositionEncodingType, got {kind!r}")


def _flatten_steps(observations: Union[torch.Tensor, List[torch.Tensor]]) -> Any:
    """``(B, L, ...)`` -> ``(B * L, ...)`` (each element of a tuple observation)."""
    if isinstance(observations, (list, tuple)):
        return [o.reshape((-1,) + tuple(o.shape[2:])) for o in observations]
    return observations.reshape((-1,) + tuple(observations.shape[2:]))


class _DecisionTransformerBase(nn.Module):
    """Token embeddings, the interleaved ``(R, s, a)`` sequence and the GPT
    stack; subclasses embed actions and read out the state tokens."""

    def __init__(self, encoder: nn.Module, hidden_size: int, position_encoding: PositionEncoding,
                 num_heads: int, num_layers: int, attn_dropout: float, resid_dropout: float, embed_dropout: float,
                 activation_type: str) -> None:
        super().__init__()
        self.encoder = encoder
        self.position_encoding = position_encoding
        self.rtg_embed = nn.Linear(1, hidden_size)
        self.gpt = GPT2(hidden_size, num_heads, num_layers, attn_dropout, resid_dropout, embed_dropout, activation_type)

    def _embed_actions(self, actions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _token_activation(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens

    def _post_embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens

    def state_features(self, observations: Any, actions: torch.Tensor, returns_to_go: torch.Tensor,
                       timesteps: torch.Tensor, last_only: bool = False,
                       masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``(B, L, hidden)`` outputs at the observation tokens (they have
        seen the step's return-to-go and observation, and earlier steps);
        ``(B, 1, hidden)``, the last step's, with ``last_only``. The last
        step's action token is never read, so it is left out. ``masks``
        ``(B, L)`` (0 on front padding): no real token attends to a padded
        one and padded steps get no position embedding, so a real step's
        output equals its output in the window without the padding (the
        paper's attention mask); the padded steps' outputs are not
        meaningful."""
        first = observations[0] if isinstance(observations, (list, tuple)) else observations
        position = self.position_encoding(timesteps, masks)
        act = self._token_activation
        obs_tokens = act(self.encoder(_flatten_steps(observations)).reshape(first.shape[0], first.shape[1], -1)) + position
        action_tokens = act(self._embed_actions(actions)) + position
        rtg_tokens = act(self.rtg_embed(returns_to_go)) + position
        # (B, L, 3, H) -> (B, 3L, H): R_1, s_1, a_1, R_2, ...
        # R_1, s_1, a_1, R_2, ..., s_L (the last action token is never read)
        tokens = torch.stack([rtg_tokens, obs_tokens, action_tokens], dim=2).flatten(1, 2)[:, :-1]
        token_masks = None if masks is None else masks.repeat_interleave(3, dim=1)[:, :-1]
        if last_only:
            return self.gpt(self._post_embed(tokens), last_only=True, token_masks=token_masks)
        index = torch.arange(1, tokens.shape[1], 3, device=tokens.device)
        return self.gpt(self._post_embed(tokens), index, token_masks=token_masks)


    # ---------------------------------------------- one step at a time (inference)
    @property
    def caches_tokens(self) -> bool:
        """Whether :meth:`step_tokens` / :meth:`forward_tokens` apply: with
        the ``SIMPLE`` encoding a token's embedding and its first block's
        query, key and value depend on that token alone, so a policy acting
        step by step computes them once per token instead of once per
        step. (``GLOBAL`` embeds a token by its place in the window, which
        moves every step.)"""
        return type(self.position_encoding) is SimplePositionEncoding

    def step_tokens(self, observation: Any, return_to_go: torch.Tensor, timestep: torch.Tensor,
                    previous_action: Optional[torch.Tensor] = None,
                    previous_timestep: Optional[torch.Tensor] = None) -> tuple:
        """The new tokens of one environment step, in sequence order: the
        previous step's action token (when ``previous_action`` is given),
        then ``R_t`` and ``s_t``. Inputs are batches of one step
        (``observation`` ``(1, *obs_shape)``, ``return_to_go`` ``(1, 1)``,
        ``timestep`` ``(1,)`` int64, ``previous_action`` ``(1, action_size)``
        or ``(1, 1)`` indices). Returns ``(tokens, qkv)``: ``(1, k, hidden)``
        inputs of the first block and ``(1, k, 3 * hidden)`` its query-key-
        value products, for :meth:`forward_tokens`. Eval mode, no grad."""
        embed = self.position_encoding.embed
        act = self._token_activation
        position = embed(timestep)  # (1, hidden)
        rows = [act(self.rtg_embed(return_to_go)) + position, act(self.encoder(observation)) + position]
        if previous_action is not None:
            rows.insert(0, act(self._embed_actions(previous_action[:, None])[:, 0]) + embed(previous_timestep))
        tokens = self._post_embed(torch.cat(rows)[None])
        first = self.gpt.blocks[0]
        return tokens, first.attention.qkv(first.ln1(tokens))

    def forward_tokens(self, tokens: torch.Tensor, qkv: torch.Tensor) -> torch.Tensor:
        """The last step's output ``(1, out)`` from the context's tokens
        ``(1, T, hidden)`` ``R_1, s_1, a_1, ..., R_L, s_L`` and their first-
        block products, as :meth:`step_tokens` made them: equal to
        ``forward(..., last_only=True)[:, -1]`` on the same context."""
        blocks = list(self.gpt.blocks)
        x = blocks[0].forward_from_qkv(tokens, qkv, last_only=len(blocks) == 1)
        if len(blocks) > 1:
            for block in blocks[1:-1]:
                x = block(x)
            x = blocks[-1].forward_at(x, None)
        return self._head(self.gpt.ln(x))[:, -1]

    def _head(self, features: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class ContinuousDecisionTransformer(_DecisionTransformerBase):
    """Decision Transformer for continuous actions: ``tanh`` of a linear
    read-out of each observation token, ``(B, L, action_size)`` in [-1, 1]."""

    def __init__(self, encoder: nn.Module, hidden_size: int, position_encoding: PositionEncoding, action_size: int,
                 num_heads: int, num_layers: int, attn_dropout: float, resid_dropout: float, embed_dropout: float,
                 activation_type: str) -> None:
        super().__init__(encoder, hidden_size, position_encoding, num_heads, num_layers, attn_dropout, resid_dropout,
                         embed_dropout, activation_type)
        self.action_embed = nn.Linear(action_size, hidden_size)
        self.embed_ln = nn.LayerNorm(hidden_size)
        self.output = nn.Linear(hidden_size, action_size)

    def _embed_actions(self, actions: torch.Tensor) -> torch.Tensor:
        return self.action_embed(actions)

    def _post_embed(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed_ln(tokens)

    def _head(self, features: torch.Tensor) -> torch.Tensor:
        return torch.tanh(float32_head(self.output, features))

    def forward(self, observations: Any, actions: torch.Tensor, returns_to_go: torch.Tensor,
                timesteps: torch.Tensor, last_only: bool = False, masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self._head(self.state_features(observations, actions, returns_to_go, timesteps, last_only, masks))


class DiscreteDecisionTransformer(_DecisionTransformerBase):
    """Decision Transformer for discrete actions: embedded action indices,
    an activation on the token embeddings (``tanh`` in the Atari model) and
    ``(B, L, action_size)`` logits. The activation applies to each token's
    embedding before the position encoding is added."""

    def __init__(self, encoder: nn.Module, hidden_size: int, position_encoding: PositionEncoding, action_size: int,
                 num_heads: int, num_layers: int, attn_dropout: float, resid_dropout: float, embed_dropout: float,
                 activation_type: str, embed_activation_type: str) -> None:
        super().__init__(encoder, hidden_size, position_encoding, num_heads, num_layers, attn_dropout, resid_dropout,
                         embed_dropout, activation_type)
        self.action_embed = gpt_init_(nn.Embedding(action_size, hidden_size))
        self.embed_activation = activation(embed_activation_type)
        self.output = gpt_init_(nn.Linear(hidden_size, action_size, bias=False))

    def _embed_actions(self, actions: torch.Tensor) -> torch.Tensor:
        if actions.dim() == 3:
            actions = actions[..., 0]
        return self.action_embed(actions.long())

    def _token_activation(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed_activation(tokens)

    def _head(self, features: torch.Tensor) -> torch.Tensor:
        return float32_head(self.output, features)

    def forward(self, observations: Any, actions: torch.Tensor, returns_to_go: torch.Tensor,
                timesteps: torch.Tensor, last_only: bool = False, masks: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self._head(self.state_features(observations, actions, returns_to_go, timesteps, last_only, masks))
