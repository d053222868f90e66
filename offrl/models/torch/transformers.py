"""Decision Transformer modules with d3rlpy's constructor and call
signatures (``d3rlpy.models.torch.transformers``), returned by
:func:`offrl.models.builders.create_continuous_decision_transformer` and
``create_discrete_decision_transformer``.

They are offrl's Decision Transformer networks (:mod:`offrl.models.transformers`:
the GPT stack with fused causal attention, the position encodings), taking
d3rlpy's arguments:

* ``forward(x, action, return_to_go, timesteps, attention_mask)`` with
  ``x`` ``(B, L, *obs)``, ``action`` ``(B, L, A)`` (continuous) or ``(B,
  L)`` / ``(B, L, 1)`` indices, ``return_to_go`` ``(B, L, 1)``,
  ``timesteps`` ``(B, L)`` and ``attention_mask`` ``(B, L)`` (1 on real
  steps, 0 on front padding: no real step attends to a padded one);
* continuous: actions ``(B, L, A)`` in [-1, 1]; discrete: ``(probs,
  logits)``, each ``(B, L, A)``.
"""

from __future__ import annotations

from typing import Any, Tuple, Union

import torch
from torch import nn
import torch.nn.functional as F

from ..transformers import ContinuousDecisionTransformer as OffrlContinuousDecisionTransformer
from ..transformers import DiscreteDecisionTransformer as OffrlDiscreteDecisionTransformer
from ..transformers import GlobalPositionEncoding, PositionEncoding, SimplePositionEncoding
from .encoders import check_positive_int

__all__ = [
    "ContinuousDecisionTransformer",
    "DiscreteDecisionTransformer",
    "PositionEncoding",
    "SimplePositionEncoding",
    "GlobalPositionEncoding",
]

ActivationArg = Union[str, nn.Module]


def _check_heads(embed_size: int, num_heads: int, context_size: int) -> None:
    for name, value in (("embed_size", embed_size), ("num_heads", num_heads), ("context_size", context_size)):
        check_positive_int(name, value)


class ContinuousDecisionTransformer(OffrlContinuousDecisionTransformer):
    """The continuous-action Decision Transformer, d3rlpy's arguments
    (``activation`` a module or an activation name)."""

    def __init__(self, encoder: nn.Module, embed_size: int, position_encoding: PositionEncoding, action_size: int,
                 num_heads: int, context_size: int, num_layers: int, attn_dropout: float, resid_dropout: float,
                 embed_dropout: float, activation: ActivationArg) -> None:
        _check_heads(embed_size, num_heads, context_size)
        super().__init__(encoder, embed_size, position_encoding, action_size, num_heads, num_layers, attn_dropout,
                         resid_dropout, embed_dropout, activation)  # type: ignore[arg-type]
        self.context_size = context_size

    def forward(self, x: Any, action: torch.Tensor, return_to_go: torch.Tensor, timesteps: torch.Tensor,  # type: ignore[override]
                attention_mask: torch.Tensor) -> torch.Tensor:
        return super().forward(x, action, return_to_go, timesteps, masks=attention_mask)


class DiscreteDecisionTransformer(OffrlDiscreteDecisionTransformer):
    """The discrete-action Decision Transformer, d3rlpy's arguments;
    ``forward`` returns ``(probs, logits)``."""

    def __init__(self, encoder: nn.Module, embed_size: int, position_encoding: PositionEncoding, action_size: int,
                 num_heads: int, context_size: int, num_layers: int, attn_dropout: float, resid_dropout: float,
                 embed_dropout: float, activation: ActivationArg, embed_activation: ActivationArg) -> None:
        _check_heads(embed_size, num_heads, context_size)
        super().__init__(encoder, embed_size, position_encoding, action_size, num_heads, num_layers, attn_dropout,
                         resid_dropout, embed_dropout, activation, embed_activation)  # type: ignore[arg-type]
        self.context_size = context_size

    def forward(self, x: Any, action: torch.Tensor, return_to_go: torch.Tensor, timesteps: torch.Tensor,  # type: ignore[override]
                attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        logits = super().forward(x, action, return_to_go, timesteps, masks=attention_mask)
        return F.softmax(logits, dim=-1), logits
