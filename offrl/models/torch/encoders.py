"""Encoder modules, at d3rlpy's ``d3rlpy.models.torch.encoders`` path.

The bases of a custom encoder (:class:`Encoder`, :class:`EncoderWithAction`)
and offrl's built-in encoders, which the factories of
:mod:`offrl.models.encoders` return: :class:`VectorEncoder`,
:class:`PixelEncoder`, :class:`SimBaEncoder` and their ``WithAction``
forms. Each takes d3rlpy 2.8.1's constructor arguments (an activation may
be given as a module, as d3rlpy does, or by name) and offrl's keyword-only
additions:

* ``ensemble_size``: ``n`` members with batched weights in one module
  (outputs ``(n, B, F)``), how offrl's critic ensembles run all members in
  one matmul per layer;
* ``norm_before_activation``: where the batch / layer normalisation sits.
  d3rlpy puts it after the activation (``Linear -> act -> norm``), the
  default here; offrl's factories put it before (``Linear -> norm ->
  act``), as offrl always has, so that saved models keep their layers.

A with-action encoder one-hot encodes discrete actions, which arrive as
``(B, 1)`` (or ``(B,)``) indices.
"""

from __future__ import annotations

import abc
import numbers
from typing import List, Optional, Sequence, Union

import torch
from torch import nn
import torch.nn.functional as F

from ...types import TorchObservation
from ..layers import EnsembleBatchNorm, EnsembleLayerNorm, EnsembleLinear, Linear, get_activation

__all__ = [
    "Encoder",
    "EncoderWithAction",
    "VectorEncoder",
    "VectorEncoderWithAction",
    "PixelEncoder",
    "PixelEncoderWithAction",
    "SimBaBlock",
    "SimBaEncoder",
    "SimBaEncoderWithAction",
    "DenseStack",
    "check_positive_int",
    "compute_output_size",
    "encode_action",
    "minimum_image_size",
    "resolve_activation",
]

ActivationArg = Union[str, nn.Module]


class Encoder(nn.Module, metaclass=abc.ABCMeta):
    """An observation encoder: ``forward(x) -> (B, features)``; ``x`` is a
    tensor, or a list of tensors for tuple observations."""

    @abc.abstractmethod
    def forward(self, x: TorchObservation) -> torch.Tensor:
        """The features of a batch of (scaled) observations."""


class EncoderWithAction(nn.Module, metaclass=abc.ABCMeta):
    """An observation-and-action encoder (a Q-function's):
    ``forward(x, action) -> (B, features)``."""

    @abc.abstractmethod
    def forward(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        """The features of a batch of (scaled) observations and actions."""


def resolve_activation(activation: ActivationArg) -> nn.Module:
    """An activation module from its name (see
    :data:`offrl.models.layers.ACTIVATIONS`) or the module itself."""
    if isinstance(activation, str):
        return get_activation(activation)
    if isinstance(activation, nn.Module):
        return activation
    raise TypeError(f"activation must be an activation name or an nn.Module, got {type(activation).__name__}")


def encode_action(action: torch.Tensor, action_size: int, discrete_action: bool) -> torch.Tensor:
    """Discrete action indices one-hot encoded to ``(B, action_size)``;
    continuous actions as they are."""
    if discrete_action:
        return F.one_hot(action.reshape(-1).long(), num_classes=action_size).to(torch.float32)
    return action


def _flat_size(observation_shape: Sequence[int], what: str) -> int:
    if len(observation_shape) == 0 or isinstance(observation_shape[0], (list, tuple)):
        raise ValueError(f"{what} takes a single observation array, got observation_shape={list(observation_shape)}")
    size = 1
    for s in observation_shape:
        size *= int(s)
    return size


def check_positive_int(name: str, value: object) -> int:
    """``value`` as an ``int`` if it is a positive integer (numpy integers
    included, bools not), else a ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


# ---------------------------------------------------------------- vector
class DenseStack(nn.Module):
    """Dense layers with optional normalisation and dropout; with
    ``ensemble_size`` the weights are batched (``(E, B, F)`` outputs)."""

    def __init__(
        self,
        in_features: int,
        hidden_units: Sequence[int],
        activation: ActivationArg = "relu",
        use_batch_norm: bool = False,
        use_layer_norm: bool = False,
        dropout_rate: Optional[float] = None,
        exclude_last_activation: bool = False,
        last_activation: Optional[ActivationArg] = None,
        ensemble_size: Optional[int] = None,
        norm_before_activation: bool = True,
    ) -> None:
        super().__init__()
        if not hidden_units:
            raise ValueError("hidden_units must name at least one layer width")
        layers: List[nn.Module] = []
        size = in_features
        for i, units in enumerate(hidden_units):
            units = check_positive_int(f"hidden_units[{i}]", int(units))
            last = i == len(hidden_units) - 1
            layers.append(Linear(size, units) if ensemble_size is None else EnsembleLinear(ensemble_size, size, units))
            norms: List[nn.Module] = []
            if use_batch_norm:
                norms.append(nn.BatchNorm1d(units) if ensemble_size is None else EnsembleBatchNorm(ensemble_size, units))
            if use_layer_norm:
                norms.append(nn.LayerNorm(units) if ensemble_size is None else EnsembleLayerNorm(ensemble_size, units))
            acts: List[nn.Module] = []
            if last and last_activation is not None:
                acts.append(resolve_activation(last_activation))
            elif not (last and exclude_last_activation):
                acts.append(resolve_activation(activation))
            layers.extend(norms + acts if norm_before_activation else acts + norms)
            if dropout_rate:
                layers.append(nn.Dropout(dropout_rate))
            size = units
        self.layers = nn.Sequential(*layers)
        self.out_features = size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class VectorEncoder(Encoder):
    """An MLP on flat (or flattened) observations, ``(B, hidden_units[-1])``.

    Args (d3rlpy 2.8.1's): ``observation_shape``, ``hidden_units`` (default
    ``[256, 256]``), ``use_batch_norm``, ``use_layer_norm``,
    ``dropout_rate``, ``activation``, ``exclude_last_activation``,
    ``last_activation``; offrl's ``ensemble_size`` and
    ``norm_before_activation`` (see the module documentation).
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        hidden_units: Optional[Sequence[int]] = None,
        use_batch_norm: bool = False,
        use_layer_norm: bool = False,
        dropout_rate: Optional[float] = None,
        activation: ActivationArg = "relu",
        exclude_last_activation: bool = False,
        last_activation: Optional[ActivationArg] = None,
        *,
        ensemble_size: Optional[int] = None,
        norm_before_activation: bool = False,
    ) -> None:
        super().__init__()
        self.mlp = DenseStack(
            _flat_size(observation_shape, "VectorEncoder"), [256, 256] if hidden_units is None else hidden_units,
            activation, use_batch_norm, use_layer_norm, dropout_rate, exclude_last_activation, last_activation,
            ensemble_size, norm_before_activation,
        )

    def forward(self, x: TorchObservation) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError("VectorEncoder takes one observation tensor, got a list (a tuple observation)")
        if x.dim() != 2 or x.dtype != torch.float32:
            x = x.reshape(x.shape[0], -1).float()
        return self.mlp.layers(x)  # DenseStack.forward, without a module call's overhead (the hot loop of small networks)


class _ActionInput:
    """The action side of offrl's with-action encoders: ``action_size`` and
    ``discrete_action`` (one-hot encoded actions), and the flat
    observation concatenated with the encoded action."""

    _action_size: int
    _discrete_action: bool

    @property
    def action_size(self) -> int:
        return self._action_size

    @property
    def discrete_action(self) -> bool:
        return self._discrete_action

    def flat_with_action(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        """``[flat x, encoded action]``, ``(B, observation size + action_size)``."""
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{type(self).__name__} takes one observation tensor, got a list (a tuple observation)")
        a = encode_action(action, self._action_size, self._discrete_action)
        return torch.cat([x.reshape(x.shape[0], -1).float(), a], dim=-1)


class VectorEncoderWithAction(_ActionInput, EncoderWithAction):
    """An MLP on the flat observation concatenated with the action
    (one-hot encoded when ``discrete_action``). Arguments as
    :class:`VectorEncoder`, with ``action_size`` and ``discrete_action``."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_units: Optional[Sequence[int]] = None,
        use_batch_norm: bool = False,
        use_layer_norm: bool = False,
        dropout_rate: Optional[float] = None,
        discrete_action: bool = False,
        activation: ActivationArg = "relu",
        exclude_last_activation: bool = False,
        last_activation: Optional[ActivationArg] = None,
        *,
        ensemble_size: Optional[int] = None,
        norm_before_activation: bool = False,
    ) -> None:
        super().__init__()
        self._action_size = check_positive_int("action_size", action_size)
        self._discrete_action = bool(discrete_action)
        self.mlp = DenseStack(
            _flat_size(observation_shape, "VectorEncoderWithAction") + action_size,
            [256, 256] if hidden_units is None else hidden_units, activation, use_batch_norm, use_layer_norm,
            dropout_rate, exclude_last_activation, last_activation, ensemble_size, norm_before_activation,
        )

    def forward(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.flat_with_action(x, action))


# ----------------------------------------------------------------- pixel
def minimum_image_size(filters: Sequence[Sequence[int]]) -> int:
    """The smallest height/width that leaves at least one pixel after every
    ``[out_channels, kernel, stride]`` convolution (no padding)."""
    size = 1
    for _, kernel, stride in reversed([tuple(int(v) for v in f) for f in filters]):
        size = (size - 1) * stride + kernel
    return size


NATURE_DQN_FILTERS = [[32, 8, 4], [64, 4, 2], [64, 3, 1]]


class _PixelBody(nn.Module):
    """Convolutions (``convs``), then a dense layer over the flattened
    maps and the (encoded) action (``head``)."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        filters: Optional[Sequence[Sequence[int]]],
        feature_size: int,
        use_batch_norm: bool,
        dropout_rate: Optional[float],
        discrete_action: bool,
        activation: ActivationArg,
        exclude_last_activation: bool,
        last_activation: Optional[ActivationArg],
        norm_before_activation: bool,
    ) -> None:
        super().__init__()
        filters = NATURE_DQN_FILTERS if filters is None else [[int(v) for v in f] for f in filters]
        if any(len(f) != 3 for f in filters):
            raise ValueError(f"filters must be [out_channels, kernel, stride] triples, got {filters}")
        feature_size = 512 if feature_size is None else check_positive_int("feature_size", feature_size)
        if len(observation_shape) != 3 or isinstance(observation_shape[0], (list, tuple)):
            raise ValueError(f"a pixel encoder needs (channels, height, width) observations, got {list(observation_shape)}")
        smallest = minimum_image_size(filters)
        if min(int(observation_shape[1]), int(observation_shape[2])) < smallest:
            raise ValueError(
                f"the pixel encoder (filters {[list(f) for f in filters]}) needs images of at least "
                f"{smallest}x{smallest}, got observations of shape {tuple(int(s) for s in observation_shape)}: use "
                "VectorEncoderFactory for small arrays, PixelEncoderFactory with smaller filters, or a custom EncoderFactory"
            )

        def ordered(norm: List[nn.Module], act: List[nn.Module]) -> List[nn.Module]:
            return norm + act if norm_before_activation else act + norm

        convs: List[nn.Module] = []
        channels = int(observation_shape[0])
        for out_channels, kernel, stride in filters:
            convs.append(nn.Conv2d(channels, int(out_channels), kernel_size=int(kernel), stride=int(stride)))
            convs.extend(ordered([nn.BatchNorm2d(int(out_channels))] if use_batch_norm else [],
                                 [resolve_activation(activation)]))
            if dropout_rate:
                convs.append(nn.Dropout2d(dropout_rate))
            channels = int(out_channels)
        self.convs = nn.Sequential(*convs, nn.Flatten())
        self.convs.eval()  # the size from one dummy image: no batch statistics to compute or record
        with torch.no_grad():
            conv_size = int(self.convs(torch.zeros((1,) + tuple(int(s) for s in observation_shape))).shape[1])
        self.convs.train()
        self._action_size = action_size
        self._discrete_action = bool(discrete_action)
        acts: List[nn.Module] = []
        if last_activation is not None:
            acts.append(resolve_activation(last_activation))
        elif not exclude_last_activation:
            acts.append(resolve_activation(activation))
        head: List[nn.Module] = [Linear(conv_size + action_size, feature_size)]
        head.extend(ordered([nn.BatchNorm1d(feature_size)] if use_batch_norm else [], acts))
        if dropout_rate:
            head.append(nn.Dropout(dropout_rate))
        self.head = nn.Sequential(*head)

    def encode(self, x: TorchObservation, action: Optional[torch.Tensor]) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{type(self).__name__} takes one image tensor, got a list (a tuple observation)")
        h = self.convs(x.float())
        if action is not None:
            h = torch.cat([h, encode_action(action, self._action_size, self._discrete_action)], dim=1)
        return self.head(h)


class PixelEncoder(_PixelBody, Encoder):
    """Convolutions for ``(C, H, W)`` images (Nature DQN's by default), then
    a dense layer of ``feature_size``.

    Args (d3rlpy 2.8.1's): ``observation_shape``, ``filters``
    (``[out_channels, kernel, stride]`` per layer), ``feature_size``,
    ``use_batch_norm``, ``dropout_rate``, ``activation``,
    ``exclude_last_activation``, ``last_activation``; offrl's
    ``norm_before_activation``.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        filters: Optional[Sequence[Sequence[int]]] = None,
        feature_size: int = 512,
        use_batch_norm: bool = False,
        dropout_rate: Optional[float] = None,
        activation: ActivationArg = "relu",
        exclude_last_activation: bool = False,
        last_activation: Optional[ActivationArg] = None,
        *,
        norm_before_activation: bool = False,
    ) -> None:
        super().__init__(observation_shape, 0, filters, feature_size, use_batch_norm, dropout_rate, False,
                         activation, exclude_last_activation, last_activation, norm_before_activation)

    def forward(self, x: TorchObservation) -> torch.Tensor:
        return self.encode(x, None)


class PixelEncoderWithAction(_ActionInput, _PixelBody, EncoderWithAction):
    """:class:`PixelEncoder` whose dense layer also takes the action
    (one-hot encoded when ``discrete_action``)."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        filters: Optional[Sequence[Sequence[int]]] = None,
        feature_size: int = 512,
        use_batch_norm: bool = False,
        dropout_rate: Optional[float] = None,
        discrete_action: bool = False,
        activation: ActivationArg = "relu",
        exclude_last_activation: bool = False,
        last_activation: Optional[ActivationArg] = None,
        *,
        norm_before_activation: bool = False,
    ) -> None:
        super().__init__(observation_shape, check_positive_int("action_size", action_size), filters, feature_size,
                         use_batch_norm, dropout_rate, discrete_action, activation, exclude_last_activation,
                         last_activation, norm_before_activation)

    def forward(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return self.encode(x, action)


# ----------------------------------------------------------------- SimBa
def _linear(ensemble_size: Optional[int], in_features: int, out_features: int) -> nn.Module:
    return nn.Linear(in_features, out_features) if ensemble_size is None else EnsembleLinear(ensemble_size, in_features, out_features)


def _layer_norm(ensemble_size: Optional[int], features: int) -> nn.Module:
    return nn.LayerNorm(features) if ensemble_size is None else EnsembleLayerNorm(ensemble_size, features)


class SimBaBlock(nn.Module):
    """``h + W_2 relu(W_1 LayerNorm(h))``: one residual block (see
    :mod:`offrl.models.simba`)."""

    def __init__(self, input_size: int, hidden_size: int, out_size: int, ensemble_size: Optional[int] = None) -> None:
        super().__init__()
        if input_size != out_size:
            raise ValueError(f"a residual block keeps its width: input_size={input_size}, out_size={out_size}")
        self.layers = nn.Sequential(
            _layer_norm(ensemble_size, input_size),
            _linear(ensemble_size, input_size, hidden_size),
            nn.ReLU(inplace=True),
            _linear(ensemble_size, hidden_size, out_size),
        )

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.layers(h)


class _SimBaBody(nn.Module):
    def __init__(self, in_features: int, hidden_size: int, output_size: int, n_blocks: int,
                 ensemble_size: Optional[int]) -> None:
        super().__init__()
        check_positive_int("hidden_size", hidden_size)
        check_positive_int("output_size", output_size)
        if isinstance(n_blocks, bool) or not isinstance(n_blocks, int) or n_blocks < 0:
            raise ValueError(f"n_blocks must be an int >= 0, got {n_blocks!r}")
        layers: List[nn.Module] = [_linear(ensemble_size, in_features, output_size)]
        layers += [SimBaBlock(output_size, hidden_size, output_size, ensemble_size) for _ in range(n_blocks)]
        layers.append(_layer_norm(ensemble_size, output_size))
        self.layers = nn.Sequential(*layers)


def _simba_input_size(observation_shape: Sequence[int], what: str) -> int:
    if len(observation_shape) != 1 or isinstance(observation_shape[0], (list, tuple)):
        raise ValueError(f"{what} takes 1-D observations, got observation_shape={list(observation_shape)}; "
                         "use DefaultEncoderFactory for images and tuple observations")
    return int(observation_shape[0])


class SimBaEncoder(_SimBaBody, Encoder):
    """SimBa (Lee et al., 2024) on 1-D observations: a linear projection to
    ``output_size``, ``n_blocks`` residual blocks widening to
    ``hidden_size``, a final layer norm. d3rlpy 2.8.1's arguments; offrl's
    ``ensemble_size``."""

    def __init__(self, observation_shape: Sequence[int], hidden_size: int, output_size: int, n_blocks: int, *,
                 ensemble_size: Optional[int] = None) -> None:
        super().__init__(_simba_input_size(observation_shape, "SimBaEncoder"), hidden_size, output_size, n_blocks,
                         ensemble_size)

    def forward(self, x: TorchObservation) -> torch.Tensor:
        if not isinstance(x, torch.Tensor):
            raise TypeError("SimBaEncoder takes one observation tensor, got a list (a tuple observation)")
        return self.layers(x.reshape(x.shape[0], -1).float())


class SimBaEncoderWithAction(_ActionInput, _SimBaBody, EncoderWithAction):
    """:class:`SimBaEncoder` on the observation concatenated with the
    action (one-hot encoded when ``discrete_action``)."""

    def __init__(self, observation_shape: Sequence[int], action_size: int, hidden_size: int, output_size: int,
                 n_blocks: int, discrete_action: bool, *, ensemble_size: Optional[int] = None) -> None:
        check_positive_int("action_size", action_size)
        super().__init__(_simba_input_size(observation_shape, "SimBaEncoderWithAction") + action_size, hidden_size,
                         output_size, n_blocks, ensemble_size)
        self._action_size = action_size
        self._discrete_action = bool(discrete_action)

    def forward(self, x: TorchObservation, action: torch.Tensor) -> torch.Tensor:
        return self.layers(self.flat_with_action(x, action))


# ------------------------------------------------------------ output size
def _zeros(shape: Sequence, batch: int, device: torch.device) -> TorchObservation:
    if len(shape) > 0 and isinstance(shape[0], (list, tuple)):
        return [torch.zeros((batch,) + tuple(int(v) for v in s), device=device) for s in shape]
    return torch.zeros((batch,) + tuple(int(v) for v in shape), device=device)


def _is_shape(value: object) -> bool:
    return isinstance(value, (list, tuple)) and all(
        isinstance(v, int) or (isinstance(v, (list, tuple)) and all(isinstance(u, int) for u in v)) for v in value
    )


@torch.no_grad()
def compute_output_size(*args, **kwargs) -> int:
    """The feature size of an encoder, from a forward pass on a batch of two
    zero inputs (in eval mode, restored after).

    Two call forms:

    * d3rlpy's, ``compute_output_size(input_shapes, encoder)``: one shape
      per argument of the encoder's ``forward`` (``[observation_shape]``, or
      ``[observation_shape, (action_size,)]`` for a with-action encoder);
    * offrl's, ``compute_output_size(encoder, observation_shape,
      action_size=None, discrete_action=False)``.
    """
    if args and isinstance(args[0], nn.Module):
        return _output_size_of(args[0], *args[1:], **kwargs)
    if len(args) + len(kwargs) != 2:
        raise TypeError("compute_output_size takes (input_shapes, encoder) or (encoder, observation_shape, ...)")
    shapes = args[0] if args else kwargs.get("input_shapes")
    module = args[1] if len(args) > 1 else kwargs.get("encoder")
    if not isinstance(module, nn.Module):
        raise TypeError(f"compute_output_size: encoder must be an nn.Module, got {type(module).__name__}")
    if not isinstance(shapes, (list, tuple)) or not shapes or not all(_is_shape(s) for s in shapes):
        raise ValueError(f"compute_output_size: input_shapes must be a list of shapes, got {shapes!r}")
    device = _module_device(module)
    return _forward_size(module, [_zeros(shape, 2, device) for shape in shapes])


def _output_size_of(module: nn.Module, observation_shape: Sequence, action_size: Optional[int] = None,
                    discrete_action: bool = False) -> int:
    device = _module_device(module)
    inputs = [_zeros(observation_shape, 2, device)]
    if action_size is not None:
        if discrete_action:
            inputs.append(torch.zeros((2, 1), dtype=torch.long, device=device))
        else:
            inputs.append(torch.zeros((2, int(action_size)), device=device))
    return _forward_size(module, inputs)


def _module_device(module: nn.Module) -> torch.device:
    parameter = next(iter(module.parameters()), None)
    return parameter.device if parameter is not None else torch.device("cpu")


def _forward_size(module: nn.Module, inputs: List[TorchObservation]) -> int:
    was_training = module.training
    module.eval()
    try:
        out = module(*inputs)
    finally:
        module.train(was_training)
    return int(out.shape[-1])
