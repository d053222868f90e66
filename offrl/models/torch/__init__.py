"""d3rlpy's ``d3rlpy.models.torch`` path, for the base classes of custom
encoders: an :class:`~offrl.models.EncoderFactory` subclass returns an
:class:`Encoder` from ``create`` and an :class:`EncoderWithAction` from
``create_with_action`` (d3rlpy 2.8.1's ``examples/tuple_observation.py``).

offrl's networks take any ``nn.Module`` with these call signatures; the
classes are here so that code written for d3rlpy imports and subclasses
them unchanged. d3rlpy's other torch modules (its policies, Q-functions
and their "forwarders") are its implementation layer and are not
provided; :class:`ActionOutput` and :class:`QFunctionOutput`, the records
those modules return, are, for custom modules written to d3rlpy's shapes.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from .encoders import Encoder, EncoderWithAction

__all__ = ["ActionOutput", "Encoder", "EncoderWithAction", "QFunctionOutput"]


@dataclasses.dataclass(frozen=True)
class ActionOutput:
    """What a d3rlpy policy module returns: the pre-squash mean ``mu``, the
    squashed (``tanh``) mean and the log standard deviation (None for a
    deterministic policy)."""

    mu: torch.Tensor
    squashed_mu: torch.Tensor
    logstd: Optional[torch.Tensor]


@dataclasses.dataclass(frozen=True)
class QFunctionOutput:
    """What a d3rlpy Q-function module returns: the Q-values, and for
    distributional Q-functions the quantiles and their levels ``taus``."""

    q_value: torch.Tensor
    quantiles: Optional[torch.Tensor]
    taus: Optional[torch.Tensor]
