"""SimBa encoder: residual MLP blocks with layer norm.

SimBa (Lee et al., 2024, "SimBa: Simplicity Bias for Scaling Up Parameters
in Deep Reinforcement Learning", arXiv:2410.09754) maps a flat input
``x`` (the observation, or the observation and the action) to features by

    h_0 = W_in x + b_in                                   (feature_size)
    h_k = h_{k-1} + W_2 relu(W_1 LayerNorm(h_{k-1}) + b_1) + b_2,   k = 1..n_blocks
    out = LayerNorm(h_n)

with ``W_1`` widening to ``hidden_size`` and ``W_2`` back to
``feature_size``: the residual stream keeps an identity path, so deeper
stacks stay easy to optimise. Like d3rlpy 2.8.1's encoder it leaves out
the paper's running-statistics input normalisation (use an observation
scaler for that) and takes 1-D observations only.

An ensemble (``create_ensemble``, e.g. the critics of an algorithm) is one
module whose layers have batched weights, so all members run in one
matmul per layer.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

import torch
from torch import nn

from ..serialization import register
from .encoders import EncoderFactory, ShapeLike, encode_action, is_tuple_shape
from .layers import EnsembleLayerNorm, EnsembleLinear

__all__ = ["SimBaEncoderFactory", "SimBaEncoder"]


def _linear(ensemble_size: Optional[int], in_features: int, out_features: int) -> nn.Module:
    if ensemble_size is None:
        return nn.Linear(in_features, out_features)
    return EnsembleLinear(ensemble_size, in_features, out_features)


def _layer_norm(ensemble_size: Optional[int], features: int) -> nn.Module:
    if ensemble_size is None:
        return nn.LayerNorm(features)
    return EnsembleLayerNorm(ensemble_size, features)


class SimBaBlock(nn.Module):
    """``h + W_2 relu(W_1 LayerNorm(h))``: one residual block."""

    def __init__(self, feature_size: int, hidden_size: int, ensemble_size: Optional[int] = None) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            _layer_norm(ensemble_size, feature_size),
            _linear(ensemble_size, feature_size, hidden_size),
            nn.ReLU(inplace=True),
            _linear(ensemble_size, hidden_size, feature_size),
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.layers(h)


class SimBaEncoder(nn.Module):
    """The SimBa stack on a flat input; with ``action_size`` the (one-hot
    encoded, when discrete) action is concatenated to the observation.
    Output ``(B, feature_size)``, or ``(E, B, feature_size)`` for an
    ensemble."""

    def __init__(
        self,
        in_features: int,
        feature_size: int,
        hidden_size: int,
        n_blocks: int,
        action_size: int = 0,
        discrete_action: bool = False,
        ensemble_size: Optional[int] = None,
    ) -> None:
        super().__init__()
        layers: List[nn.Module] = [_linear(ensemble_size, in_features + action_size, feature_size)]
        layers += [SimBaBlock(feature_size, hidden_size, ensemble_size) for _ in range(n_blocks)]
        layers.append(_layer_norm(ensemble_size, feature_size))
        self.layers = nn.Sequential(*layers)
        self.action_size = action_size
        self.discrete_action = discrete_action

    def forward(self, x: torch.Tensor, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        h = x.reshape(x.shape[0], -1).float()
        if self.action_size:
            if action is None:
                raise ValueError("this SimBa encoder was built with an action input: pass the action")
            h = torch.cat([h, encode_action(action, self.action_size, self.discrete_action)], dim=-1)
        return self.layers(h)


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"SimBaEncoderFactory.{name} must be an int, got {value!r}")
    if value <= 0:
        raise ValueError(f"SimBaEncoderFactory.{name} must be a positive int, got {value}")
    return value


@register("encoder")
@dataclasses.dataclass
class SimBaEncoderFactory(EncoderFactory):
    """SimBa encoder (d3rlpy 2.8.1's ``SimBaEncoderFactory``): a linear
    projection to ``feature_size``, ``n_blocks`` residual blocks
    ``h + W_2 relu(W_1 LayerNorm(h))`` widening to ``hidden_size``, and a
    final layer norm (see :mod:`offrl.models.simba`). 1-D observations only.

    References:
        Lee et al., "SimBa: Simplicity Bias for Scaling Up Parameters in
        Deep Reinforcement Learning", 2024, arXiv:2410.09754.

    Args:
        feature_size: width of the residual stream and of the output.
        hidden_size: width inside each block.
        n_blocks: number of residual blocks (0: a linear layer and a layer norm).
    """

    feature_size: int = 256
    hidden_size: int = 1024
    n_blocks: int = 1

    def __post_init__(self) -> None:
        self.feature_size = _positive_int("feature_size", self.feature_size)
        self.hidden_size = _positive_int("hidden_size", self.hidden_size)
        if isinstance(self.n_blocks, bool) or not isinstance(self.n_blocks, int):
            raise TypeError(f"SimBaEncoderFactory.n_blocks must be an int, got {self.n_blocks!r}")
        if self.n_blocks < 0:
            raise ValueError(f"SimBaEncoderFactory.n_blocks must be an int >= 0, got {self.n_blocks}")

    @staticmethod
    def get_type() -> str:
        return "simba"

    @staticmethod
    def _in_features(observation_shape: ShapeLike) -> int:
        if is_tuple_shape(observation_shape) or len(observation_shape) != 1:
            raise ValueError(
                f"SimBaEncoderFactory takes 1-D observations, got shape {list(observation_shape)}; "
                "use DefaultEncoderFactory for images and tuple observations"
            )
        return int(observation_shape[0])  # type: ignore[arg-type]

    def _make(self, observation_shape: ShapeLike, action_size: int = 0, discrete_action: bool = False,
              ensemble_size: Optional[int] = None) -> SimBaEncoder:
        return SimBaEncoder(
            self._in_features(observation_shape), self.feature_size, self.hidden_size, self.n_blocks,
            action_size, discrete_action, ensemble_size,
        )

    def create(self, observation_shape: ShapeLike) -> nn.Module:
        return self._make(observation_shape)

    def create_with_action(self, observation_shape: ShapeLike, action_size: int, discrete_action: bool = False) -> nn.Module:
        return self._make(observation_shape, action_size, discrete_action)

    def create_ensemble(self, observation_shape: ShapeLike, n: int, action_size: Optional[int] = None,
                        discrete_action: bool = False) -> nn.Module:
        return self._make(observation_shape, action_size or 0, discrete_action, int(n))

