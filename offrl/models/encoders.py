"""Encoders: observation (and optionally action) to a feature vector.

An :class:`EncoderFactory` builds three kinds of module:

* ``create(observation_shape)``: ``forward(x) -> (B, F)``;
* ``create_with_action(observation_shape, action_size, discrete_action)``:
  ``forward(x, action) -> (B, F)`` (discrete actions arrive as ``(B, 1)``
  indices and are one-hot encoded);
* ``create_ensemble(...)``: ``n`` independent members whose outputs are
  stacked as ``(E, B, F)``. The vector encoders build it as one module with
  batched weights (one matmul per layer for all members); other encoders
  fall back to a list of members.

``x`` is a tensor, or a list of tensors for tuple observations. User
factories subclass :class:`EncoderFactory` (as dataclasses, or as plain
classes that store their ``__init__`` arguments as attributes) and are
registered with :func:`register_encoder_factory` so that ``load_learnable``
can rebuild them.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Union

import torch
from torch import nn

from ..serialization import register
from ._init_params import InitParamsSerializable
from .layers import Linear, get_activation
from .torch.encoders import (
    PixelEncoder,
    PixelEncoderWithAction,
    SimBaEncoder,
    SimBaEncoderWithAction,
    VectorEncoder,
    VectorEncoderWithAction,
    compute_output_size,
    encode_action,
    minimum_image_size,
)

__all__ = [
    "EncoderFactory",
    "VectorEncoderFactory",
    "PixelEncoderFactory",
    "DefaultEncoderFactory",
    "ByShapeEncoderFactory",
    "DictEncoderFactory",
    "SimBaEncoderFactory",
    "register_encoder_factory",
    "compute_output_size",
    "minimum_image_size",
    "ShapeLike",
]

ShapeLike = Union[Sequence[int], Sequence[Sequence[int]]]


def is_tuple_shape(shape: ShapeLike) -> bool:
    return len(shape) > 0 and isinstance(shape[0], (list, tuple))


@dataclasses.dataclass(eq=False, repr=False)
class EncoderFactory(InitParamsSerializable):
    """Base of encoder factories: a dataclass without fields, as d3rlpy's.

    A subclass is a dataclass (its fields are its parameters) or, as d3rlpy's
    documentation writes it, a plain class whose ``__init__`` stores each
    argument as the attribute of the same name (``self.feature_size =
    feature_size``): both are saved with the model and rebuilt by
    ``load_learnable`` once registered (:func:`register_encoder_factory`).
    """

    _kind = "encoder"

    def create(self, observation_shape: ShapeLike) -> nn.Module:
        raise NotImplementedError

    def create_with_action(self, observation_shape: ShapeLike, action_size: int, discrete_action: bool = False) -> nn.Module:
        raise NotImplementedError

    def create_ensemble(
        self,
        observation_shape: ShapeLike,
        n: int,
        action_size: Optional[int] = None,
        discrete_action: bool = False,
    ) -> nn.Module:
        """``n`` members stacked as ``(E, B, F)``."""
        if action_size is None:
            members = [self.create(observation_shape) for _ in range(n)]
        else:
            members = [self.create_with_action(observation_shape, action_size, discrete_action) for _ in range(n)]
        return ListEnsemble(members, with_action=action_size is not None)


def register_encoder_factory(cls: type) -> type:
    """Register a user encoder factory so saved models using it can be loaded."""
    if not (isinstance(cls, type) and issubclass(cls, EncoderFactory)):
        raise TypeError("register_encoder_factory expects an EncoderFactory subclass")
    return register("encoder")(cls)


class ListEnsemble(nn.Module):
    """Ensemble of arbitrary encoder modules (outputs stacked on axis 0)."""

    def __init__(self, members: List[nn.Module], with_action: bool) -> None:
        super().__init__()
        self.members = nn.ModuleList(members)
        self.with_action = with_action

    def forward(self, x, action: Optional[torch.Tensor] = None) -> torch.Tensor:
        if self.with_action:
            return torch.stack([m(x, action) for m in self.members])
        return torch.stack([m(x) for m in self.members])


# ---------------------------------------------------------------- vector
@register("encoder")
@dataclasses.dataclass
class VectorEncoderFactory(EncoderFactory):
    """Multi-layer perceptron for vector observations.

    Args:
        hidden_units: widths of the hidden layers (default ``[256, 256]``).
        activation: activation after each layer (``relu``, ``tanh``, ``swish``...).
        use_batch_norm, use_layer_norm: normalisation after each linear layer.
        dropout_rate: dropout after each layer when set.
        exclude_last_activation: no activation after the last layer.
        last_activation: a different activation after the last layer.
    """

    hidden_units: List[int] = dataclasses.field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    use_batch_norm: bool = False
    use_layer_norm: bool = False
    dropout_rate: Optional[float] = None
    exclude_last_activation: bool = False
    last_activation: Optional[str] = None

    def __post_init__(self) -> None:
        if not self.hidden_units or any(int(u) <= 0 for u in self.hidden_units):
            raise ValueError(f"hidden_units must be positive widths, got {self.hidden_units}")
        self.hidden_units = [int(u) for u in self.hidden_units]
        get_activation(self.activation)
        if self.dropout_rate is not None and not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate}")

    @staticmethod
    def get_type() -> str:
        return "vector"

    def _options(self) -> dict:
        return dict(
            hidden_units=self.hidden_units, use_batch_norm=self.use_batch_norm, use_layer_norm=self.use_layer_norm,
            dropout_rate=self.dropout_rate, activation=self.activation,
            exclude_last_activation=self.exclude_last_activation, last_activation=self.last_activation,
            norm_before_activation=True,  # offrl's layer order (saved models keep their layers)
        )

    @staticmethod
    def _in_features(observation_shape: ShapeLike) -> int:
        if is_tuple_shape(observation_shape):
            raise ValueError("VectorEncoderFactory takes a single observation array; use DefaultEncoderFactory for tuple observations")
        n = 1
        for s in observation_shape:  # type: ignore[union-attr]
            n *= int(s)
        return n

    def create(self, observation_shape: ShapeLike) -> VectorEncoder:
        self._in_features(observation_shape)
        return VectorEncoder(observation_shape, **self._options())  # type: ignore[arg-type]

    def create_with_action(self, observation_shape: ShapeLike, action_size: int,
                           discrete_action: bool = False) -> VectorEncoderWithAction:
        self._in_features(observation_shape)
        return VectorEncoderWithAction(observation_shape, action_size, discrete_action=discrete_action,  # type: ignore[arg-type]
                                       **self._options())

    def create_ensemble(self, observation_shape: ShapeLike, n: int, action_size: Optional[int] = None, discrete_action: bool = False) -> nn.Module:
        self._in_features(observation_shape)
        if action_size is None:
            return VectorEncoder(observation_shape, ensemble_size=n, **self._options())  # type: ignore[arg-type]
        return VectorEncoderWithAction(observation_shape, action_size, discrete_action=discrete_action,  # type: ignore[arg-type]
                                       ensemble_size=n, **self._options())


# ----------------------------------------------------------------- pixel
@register("encoder")
@dataclasses.dataclass
class PixelEncoderFactory(EncoderFactory):
    """Nature-DQN convolutions for ``(C, H, W)`` image observations.

    Args:
        filters: ``[out_channels, kernel, stride]`` per conv layer (default
            ``[[32, 8, 4], [64, 4, 2], [64, 3, 1]]``).
        feature_size: width of the dense layer after the convolutions (512).
    """

    filters: List[List[int]] = dataclasses.field(default_factory=lambda: [[32, 8, 4], [64, 4, 2], [64, 3, 1]])
    feature_size: int = 512
    activation: str = "relu"
    use_batch_norm: bool = False
    dropout_rate: Optional[float] = None
    exclude_last_activation: bool = False
    last_activation: Optional[str] = None

    def __post_init__(self) -> None:
        self.filters = [[int(v) for v in f] for f in self.filters]
        if any(len(f) != 3 for f in self.filters):
            raise ValueError("filters must be [out_channels, kernel, stride] triples")
        get_activation(self.activation)

    @staticmethod
    def get_type() -> str:
        return "pixel"

    def _options(self, observation_shape: ShapeLike) -> dict:
        if is_tuple_shape(observation_shape):
            raise ValueError("PixelEncoderFactory takes a single image observation; use DefaultEncoderFactory for tuple observations")
        return dict(
            filters=self.filters, feature_size=self.feature_size, use_batch_norm=self.use_batch_norm,
            dropout_rate=self.dropout_rate, activation=self.activation,
            exclude_last_activation=self.exclude_last_activation, last_activation=self.last_activation,
            norm_before_activation=True,  # offrl's layer order (saved models keep their layers)
        )

    def create(self, observation_shape: ShapeLike) -> PixelEncoder:
        return PixelEncoder(observation_shape, **self._options(observation_shape))  # type: ignore[arg-type]

    def create_with_action(self, observation_shape: ShapeLike, action_size: int,
                           discrete_action: bool = False) -> PixelEncoderWithAction:
        return PixelEncoderWithAction(observation_shape, action_size, discrete_action=discrete_action,  # type: ignore[arg-type]
                                      **self._options(observation_shape))


# ----------------------------------------------------------------- tuple
class TupleEncoder(nn.Module):
    """One sub-encoder per observation element; features concatenated
    (with the action, through one more dense layer)."""

    def __init__(self, encoders: List[nn.Module], feature_sizes: List[int], activation: str, action_size: int = 0, discrete_action: bool = False, hidden: int = 256) -> None:
        super().__init__()
        self.encoders = nn.ModuleList(encoders)
        self.action_size = action_size
        self.discrete_action = discrete_action
        self.head = nn.Sequential(Linear(sum(feature_sizes) + action_size, hidden), get_activation(activation))

    def forward(self, x: List[torch.Tensor], action: Optional[torch.Tensor] = None) -> torch.Tensor:
        features = [encoder(x[i]) for i, encoder in enumerate(self.encoders)]
        if action is not None:
            features.append(encode_action(action, self.action_size, self.discrete_action))
        return self.head(torch.cat(features, dim=1))


@register("encoder")
@dataclasses.dataclass
class DefaultEncoderFactory(EncoderFactory):
    """Chooses by observation shape: Nature-DQN convolutions for 3-D (image)
    observations, a ``[256, 256]`` MLP for vectors, and for tuple
    observations one such encoder per element, concatenated."""

    activation: str = "relu"
    use_batch_norm: bool = False
    dropout_rate: Optional[float] = None

    @staticmethod
    def get_type() -> str:
        return "default"

    def _factory_for(self, shape: Sequence[int]) -> EncoderFactory:
        if len(shape) == 3:
            return PixelEncoderFactory(activation=self.activation, use_batch_norm=self.use_batch_norm, dropout_rate=self.dropout_rate)
        return VectorEncoderFactory(activation=self.activation, use_batch_norm=self.use_batch_norm, dropout_rate=self.dropout_rate)

    def _tuple(self, observation_shape: ShapeLike, action_size: int = 0, discrete_action: bool = False) -> TupleEncoder:
        encoders, sizes = [], []
        for shape in observation_shape:
            encoder = self._factory_for(shape).create(shape)  # type: ignore[arg-type]
            encoders.append(encoder)
            sizes.append(compute_output_size(encoder, shape))
        return TupleEncoder(encoders, sizes, self.activation, action_size, discrete_action)

    def create(self, observation_shape: ShapeLike) -> nn.Module:
        if is_tuple_shape(observation_shape):
            return self._tuple(observation_shape)
        return self._factory_for(observation_shape).create(observation_shape)  # type: ignore[arg-type]

    def create_with_action(self, observation_shape: ShapeLike, action_size: int, discrete_action: bool = False) -> nn.Module:
        if is_tuple_shape(observation_shape):
            return self._tuple(observation_shape, action_size, discrete_action)
        return self._factory_for(observation_shape).create_with_action(observation_shape, action_size, discrete_action)  # type: ignore[arg-type]

    def create_ensemble(self, observation_shape: ShapeLike, n: int, action_size: Optional[int] = None, discrete_action: bool = False) -> nn.Module:
        if not is_tuple_shape(observation_shape):
            return self._factory_for(observation_shape).create_ensemble(observation_shape, n, action_size, discrete_action)  # type: ignore[arg-type]
        return super().create_ensemble(observation_shape, n, action_size, discrete_action)


@register("encoder")
@dataclasses.dataclass
class ByShapeEncoderFactory(DefaultEncoderFactory):
    """:class:`DefaultEncoderFactory` with the vector MLP chosen (offrl's
    addition): an MLP of ``vector_hidden_units``, with layer normalisation
    after each linear layer when ``vector_layer_norm``, for vector
    observations (and the vector elements of tuple observations); the same
    Nature-DQN convolutions as the default for images. For a config meant
    for any observation kind that wants a deeper MLP on vectors without
    forcing an MLP on pixels (``FQEConfig.recommended()``)."""

    vector_hidden_units: List[int] = dataclasses.field(default_factory=lambda: [256, 256])
    vector_layer_norm: bool = False

    def __post_init__(self) -> None:
        units = self.vector_hidden_units
        if (not isinstance(units, (list, tuple)) or not units
                or any(isinstance(u, bool) or not isinstance(u, int) or u <= 0 for u in units)):
            raise ValueError(f"vector_hidden_units must be a non-empty list of positive ints, got {units!r}")
        self.vector_hidden_units = [int(u) for u in units]
        if not isinstance(self.vector_layer_norm, bool):
            raise ValueError(f"vector_layer_norm must be True or False, got {self.vector_layer_norm!r}")

    @staticmethod
    def get_type() -> str:
        return "by_shape"

    def _factory_for(self, shape: Sequence[int]) -> EncoderFactory:
        if len(shape) == 3:
            return super()._factory_for(shape)
        return VectorEncoderFactory(hidden_units=list(self.vector_hidden_units), activation=self.activation,
                                    use_batch_norm=self.use_batch_norm, use_layer_norm=self.vector_layer_norm,
                                    dropout_rate=self.dropout_rate)


# ------------------------------------------------------------------ dict
@register("encoder")
@dataclasses.dataclass
class DictEncoderFactory(EncoderFactory):
    """Dict observations: each key encoded by its own factory, the features
    concatenated (with the action, through one more dense layer).

    ``encoder_factories`` maps every key of the observations to a factory
    (``None`` for a key: :class:`DefaultEncoderFactory`'s choice by shape,
    pixel for 3-D, vector otherwise); ``encoder_factories=None`` picks by
    shape for every key. Dict observations reach the networks as the list of
    their values in sorted key order, so a key's factory is the one at its
    position in ``sorted(encoder_factories)``.
    """

    encoder_factories: Optional[Dict[str, Optional[EncoderFactory]]] = None
    activation: str = "relu"
    use_batch_norm: bool = False
    dropout_rate: Optional[float] = None

    def __post_init__(self) -> None:
        factories = self.encoder_factories
        if factories is None:
            return
        if not isinstance(factories, dict) or not factories:
            raise TypeError(f"encoder_factories must be a non-empty dict of key -> EncoderFactory, got {factories!r}")
        for key, factory in factories.items():
            if not isinstance(key, str):
                raise TypeError(f"encoder_factories has key {key!r}: keys must be strings")
            if factory is not None and not isinstance(factory, EncoderFactory):
                raise TypeError(
                    f"encoder_factories[{key!r}] must be an EncoderFactory or None, got {type(factory).__name__}"
                )

    @staticmethod
    def get_type() -> str:
        return "dict"

    def _default(self) -> DefaultEncoderFactory:
        return DefaultEncoderFactory(activation=self.activation, use_batch_norm=self.use_batch_norm, dropout_rate=self.dropout_rate)

    def _factories(self, shapes: List[Sequence[int]]) -> List[EncoderFactory]:
        default = self._default()
        if self.encoder_factories is None:
            return [default._factory_for(s) for s in shapes]
        keys = sorted(self.encoder_factories)
        if len(keys) != len(shapes):
            raise ValueError(
                f"encoder_factories names {len(keys)} keys {keys}, the observations have {len(shapes)} elements"
            )
        return [
            self.encoder_factories[k] if self.encoder_factories[k] is not None else default._factory_for(s)
            for k, s in zip(keys, shapes)
        ]

    def _shapes(self, observation_shape: ShapeLike) -> List[Sequence[int]]:
        return list(observation_shape) if is_tuple_shape(observation_shape) else [observation_shape]  # type: ignore[list-item]

    def _dict(self, observation_shape: ShapeLike, action_size: int = 0, discrete_action: bool = False) -> TupleEncoder:
        shapes = self._shapes(observation_shape)
        encoders, sizes = [], []
        for factory, shape in zip(self._factories(shapes), shapes):
            encoder = factory.create(shape)
            encoders.append(encoder)
            sizes.append(compute_output_size(encoder, shape))
        return TupleEncoder(encoders, sizes, self.activation, action_size, discrete_action)

    def create(self, observation_shape: ShapeLike) -> nn.Module:
        if not is_tuple_shape(observation_shape):
            return self._factories([observation_shape])[0].create(observation_shape)
        return self._dict(observation_shape)

    def create_with_action(self, observation_shape: ShapeLike, action_size: int, discrete_action: bool = False) -> nn.Module:
        if not is_tuple_shape(observation_shape):
            return self._factories([observation_shape])[0].create_with_action(observation_shape, action_size, discrete_action)
        return self._dict(observation_shape, action_size, discrete_action)

    def create_ensemble(self, observation_shape: ShapeLike, n: int, action_size: Optional[int] = None, discrete_action: bool = False) -> nn.Module:
        if not is_tuple_shape(observation_shape):
            return self._factories([observation_shape])[0].create_ensemble(observation_shape, n, action_size, discrete_action)
        return super().create_ensemble(observation_shape, n, action_size, discrete_action)


# ----------------------------------------------------------------- SimBa
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

    def create(self, observation_shape: ShapeLike) -> SimBaEncoder:
        return SimBaEncoder([self._in_features(observation_shape)], self.hidden_size, self.feature_size, self.n_blocks)

    def create_with_action(self, observation_shape: ShapeLike, action_size: int,
                           discrete_action: bool = False) -> SimBaEncoderWithAction:
        return SimBaEncoderWithAction([self._in_features(observation_shape)], action_size, self.hidden_size,
                                      self.feature_size, self.n_blocks, discrete_action)

    def create_ensemble(self, observation_shape: ShapeLike, n: int, action_size: Optional[int] = None,
                        discrete_action: bool = False) -> nn.Module:
        shape = [self._in_features(observation_shape)]
        if action_size is None:
            return SimBaEncoder(shape, self.hidden_size, self.feature_size, self.n_blocks, ensemble_size=int(n))
        return SimBaEncoderWithAction(shape, action_size, self.hidden_size, self.feature_size, self.n_blocks,
                                      discrete_action, ensemble_size=int(n))
