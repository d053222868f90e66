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

from typing import Any, List, Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from ..constants import PositionEncodingType
from .layers import Linear, linear

__all__ = [
    "ACTIVATIONS",
    "CausalSelfAttention",
    "GPTBlock",
    "GPT2",
    "PositionEncoding",
    "SimplePositionEncoding",
    "GlobalPositionEncoding",
    "create_position_encoding",
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


def activation(name: str) -> nn.Module:
    """The activation module called ``name`` (see :data:`ACTIVATIONS`)."""
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, hidden = x.shape
        q, k, v = self.qkv(x).view(batch, tokens, 3, self.num_heads, hidden // self.num_heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout if self.training else 0.0, is_causal=True)
        y = y.transpose(1, 2).reshape(batch, tokens, hidden)
        return self.resid_dropout(self.proj(y))

    def forward_at(self, x: torch.Tensor, index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The outputs at the token positions ``index`` only (ascending; the
        last token when ``None``): every token is still a key and value and
        the causal rule is kept (position ``p`` attends to tokens ``<= p``).
        Equal to ``forward(x)[:, index]`` for less work."""
        batch, tokens, hidden = x.shape
        heads, size = self.num_heads, hidden // self.num_heads
        weight, bias = self.qkv.weight, self.qkv.bias
        queries = x[:, -1:] if index is None else x[:, index]
        q = linear(queries, weight[:hidden], bias[:hidden]).view(batch, -1, heads, size).transpose(1, 2)
        k, v = linear(x, weight[hidden:], bias[hidden:]).view(batch, tokens, 2, heads, size).permute(2, 0, 3, 1, 4)
        # the last token sees every token: no mask
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def forward_at(self, x: torch.Tensor, index: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``forward(x)[:, index]`` (the last token when ``index`` is None),
        computing the queries, residuals and MLP at those positions only."""
        y = (x[:, -1:] if index is None else x[:, index]) + self.attention.forward_at(self.ln1(x), index)
        return y + self.mlp(self.ln2(y))


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

    def forward(self, x: torch.Tensor, index: Optional[torch.Tensor] = None, last_only: bool = False) -> torch.Tensor:
        """Outputs at every token, at the positions ``index`` only, or at the
        last token only (``last_only``); the last block then works on those
        positions alone: exact, and cheaper when a caller reads a few tokens."""
        x = self.dropout(x)
        if index is None and not last_only:
            return self.ln(self.blocks(x))
        blocks = list(self.blocks)
        for block in blocks[:-1]:
            x = block(x)
        return self.ln(blocks[-1].forward_at(x, None if last_only else index))


class PositionEncoding(nn.Module):
    """``(B, L)`` episode timesteps -> ``(B, L, hidden)`` step embeddings."""

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:  # pragma: no cover - interface
        raise NotImplementedError


class SimplePositionEncoding(PositionEncoding):
    """A learned embedding of each step's episode timestep (``0..max_timestep``)."""

    def __init__(self, hidden_size: int, max_timestep: int) -> None:
        super().__init__()
        self.embed = gpt_init_(nn.Embedding(max_timestep + 1, hidden_size))

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:
        return self.embed(timesteps)


class GlobalPositionEncoding(PositionEncoding):
    """A learned embedding of the window's first timestep (where the window
    lies in the episode) plus a learned embedding of each step's position
    inside the window (up to ``context_size`` steps)."""

    def __init__(self, hidden_size: int, max_timestep: int, context_size: int) -> None:
        super().__init__()
        self.global_embed = gpt_init_(nn.Embedding(max_timestep + 1, hidden_size))
        self.block_embed = nn.Parameter(torch.zeros(1, context_size, hidden_size))

    def forward(self, timesteps: torch.Tensor) -> torch.Tensor:
        length = timesteps.shape[1]
        if not torch.jit.is_tracing() and length > self.block_embed.shape[1]:
            raise ValueError(f"the window has {length} steps, more than context_size={self.block_embed.shape[1]}")
        return self.global_embed(timesteps[:, :1]) + self.block_embed[:, :length]


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
                       timesteps: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """``(B, L, hidden)`` outputs at the observation tokens (they have
        seen the step's return-to-go and observation, and earlier steps);
        ``(B, 1, hidden)``, the last step's, with ``last_only``. The last
        step's action token is never read, so it is left out."""
        first = observations[0] if isinstance(observations, (list, tuple)) else observations
        position = self.position_encoding(timesteps)
        act = self._token_activation
        obs_tokens = act(self.encoder(_flatten_steps(observations)).reshape(first.shape[0], first.shape[1], -1)) + position
        action_tokens = act(self._embed_actions(actions)) + position
        rtg_tokens = act(self.rtg_embed(returns_to_go)) + position
        # (B, L, 3, H) -> (B, 3L, H): R_1, s_1, a_1, R_2, ...
        # R_1, s_1, a_1, R_2, ..., s_L (the last action token is never read)
        tokens = torch.stack([rtg_tokens, obs_tokens, action_tokens], dim=2).flatten(1, 2)[:, :-1]
        if last_only:
            return self.gpt(self._post_embed(tokens), last_only=True)
        index = torch.arange(1, tokens.shape[1], 3, device=tokens.device)
        return self.gpt(self._post_embed(tokens), index)


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

    def forward(self, observations: Any, actions: torch.Tensor, returns_to_go: torch.Tensor,
                timesteps: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        return torch.tanh(self.output(self.state_features(observations, actions, returns_to_go, timesteps, last_only)))


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

    def forward(self, observations: Any, actions: torch.Tensor, returns_to_go: torch.Tensor,
                timesteps: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        return self.output(self.state_features(observations, actions, returns_to_go, timesteps, last_only))
