"""Plain ReLU MLPs trained with their backward pass written out.

A small network's update on a CPU is bound by per-op costs, not arithmetic:
for DQN's default 256-256 Q-network at batch 32, autograd's graph (recording,
the engine's walk, gradient accumulation) and ``Optimizer.step``'s
bookkeeping are about a third of the update. When a network is a *plain*
ReLU MLP (offrl's vector encoder without normalisation, dropout or hooks,
then a linear head: the default), its forward pass can run without autograd
keeping each layer's input (:func:`plain_forward`), and each layer's
gradients come from the same products autograd's backward would use
(:func:`plain_backward`, through
:func:`~offrl.models.layers.linear_backward`); the caller writes out the
gradient of its loss with respect to the network's output, which for the
losses of DQN-style updates is a few element-wise ops, and steps the
optimizer with :class:`~offrl.optimizers.optimizers.DirectStep`.

Any other network, a forward hook on one of its modules, autocast outside
a bf16-mixed step (which opts in through :func:`plain_products`: the same
passes with bf16 products), ``torch.compile`` tracing or
:func:`plain_backward_enabled(False) <plain_backward_enabled>` makes
:func:`plain_layers` / :func:`plain_step_allowed` say no, and the caller
trains through autograd: the two paths give the same values up to the
summation order inside a product (tests compare them).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, TypeVar

import torch
from torch import nn
from torch.nn.modules import module as _module_globals

from ..optimizers.optimizers import WEIGHTS_CHANGED_HOOKS, DirectStep
from .layers import EnsembleLinear, Linear, ensemble_linear, ensemble_linear_backward, linear, linear_backward, narrow_inputs
from .torch.encoders import VectorEncoder, VectorEncoderWithAction

__all__ = ["PlainLayers", "PlainNetwork", "plain_layers", "plain_head", "plain_forward", "plain_output",
           "plain_backward", "plain_backward_with_input_grad", "plain_input_grad", "plain_backward_enabled", "plain_step_allowed", "hook_free", "gradient_hooked",
           "plain_products", "side_head", "side_head_backward"]

#: ``(weight, bias)`` of each linear layer in order, the head last; ReLU between them
PlainLayers = List[Tuple[torch.Tensor, torch.Tensor]]

_STATE = {"enabled": True}


def plain_backward_enabled(enabled: Optional[bool] = None) -> bool:
    """Whether networks that qualify train with their backward written out;
    with ``enabled`` given, switch it first (for tests and benchmarks that
    compare it with autograd's)."""
    if enabled is not None:
        _STATE["enabled"] = bool(enabled)
    return _STATE["enabled"]


def hook_free(modules: Iterable[nn.Module]) -> bool:
    """No forward, pre-forward or backward hook on ``modules``, and no global
    module hook (a hook expects the module to be called); the parameters'
    gradient hooks: :func:`gradient_hooked`."""
    if (_module_globals._global_forward_hooks or _module_globals._global_forward_pre_hooks
            or _module_globals._global_backward_hooks or _module_globals._global_backward_pre_hooks):
        return False
    return not any(m._forward_hooks or m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks
                   for m in modules)


def gradient_hooked(params: Iterable[torch.Tensor]) -> bool:
    """Whether one of ``params`` has a gradient hook (``Tensor.register_hook``,
    ``register_post_accumulate_grad_hook``: gradient clipping by hooks, say),
    which only autograd would call."""
    return any(p._backward_hooks or p._post_accumulate_grad_hooks for p in params)


def plain_layers(encoder: nn.Module, head: nn.Module, trainable: bool = True, ensemble: bool = False) -> Optional[PlainLayers]:
    """``(weight, bias)`` of ``encoder``'s layers and then ``head``'s, when
    ``encoder`` is offrl's :class:`VectorEncoder` (or
    :class:`VectorEncoderWithAction` with continuous actions: the caller
    concatenates the action) made of linear layers each followed by ReLU, and
    ``head`` a linear layer with a bias (its weight and bias are used as
    ``nn.Linear``'s), all parameters float32 and trainable, no hooks; else
    None (the network trains through autograd). ``trainable=False`` (a
    target network, only run forward) does not ask for trainable parameters.
    ``ensemble``: the layers (head included) are instead
    :class:`~offrl.models.layers.EnsembleLinear` of one ensemble size of at
    least 2 (a critic ensemble; weights ``(E, in, out)``, biases
    ``(E, 1, out)``, outputs ``(E, B, out)``)."""
    if type(encoder) is VectorEncoderWithAction:
        if encoder.discrete_action:
            return None
    elif type(encoder) is not VectorEncoder:
        return None
    modules = list(encoder.mlp.layers)
    if not modules or len(modules) % 2:
        return None
    linears, activations = modules[0::2] + [head], modules[1::2]
    if ensemble:
        if not all(type(m) is EnsembleLinear for m in linears) or len({m.ensemble_size for m in linears}) != 1:
            return None
        if head.ensemble_size < 2:
            return None
    elif not all(type(m) in (Linear, nn.Linear) for m in linears[:-1]) or not isinstance(head, nn.Linear):
        return None
    if not all(m.bias is not None for m in linears) or not all(type(m) is nn.ReLU for m in activations):
        return None
    params = [t for m in linears for t in (m.weight, m.bias)]
    if not all(p.dtype == torch.float32 and (p.requires_grad or not trainable) for p in params):
        return None
    if not hook_free(list(encoder.modules()) + [head]):
        return None
    return [(m.weight, m.bias) for m in linears]


def plain_step_allowed(x: torch.Tensor, *modules: nn.Module) -> bool:
    """Whether a written-out step may run now on input ``x``: switched on,
    a 2-D float32 ``x`` (what the vector encoder takes without reshaping),
    outside autocast (unless inside :func:`plain_products` with autocast's
    dtype) and ``torch.compile`` tracing, and no hook added to ``modules``
    since :func:`plain_layers` looked."""
    return (
        _STATE["enabled"]
        and isinstance(x, torch.Tensor)
        and x.dim() == 2
        and x.dtype == torch.float32
        and (not torch.is_autocast_enabled(x.device.type)
             or _PRODUCTS["dtype"] == torch.get_autocast_dtype(x.device.type))  # a bf16-mixed step that opted in
        and not torch.compiler.is_compiling()
        and hook_free(modules)
    )


#: the hidden layers' product dtype inside :func:`plain_products` (None: float32), and the weights' casts
_PRODUCTS: Dict[str, Any] = {"dtype": None, "casts": {}}
_F = TypeVar("_F", bound=Callable[..., Any])


@contextlib.contextmanager
def plain_products(dtype: Optional[torch.dtype]) -> Iterator[None]:
    """A ``precision="bf16-mixed"`` step on the CPU (:mod:`offrl.training.precision`)
    runs inside this and inside autocast: the written-out passes may then
    run (:func:`plain_step_allowed`), with the hidden layers' products in
    ``dtype`` as autocast would compute them (the layer's input, weight and
    bias cast, float32 accumulation inside the product, the output, the
    ReLUs and the gradients between hidden layers in ``dtype``, the weights'
    gradients back in float32); each weight is cast once until it changes
    (an optimizer step inside the update makes a new cast). The head and
    side heads stay float32 on upcast features, as
    :func:`~offrl.models.layers.float32_head` keeps them under autocast; the
    rest of the step (module calls: targets, sampled actions) is autocast's."""
    previous = _PRODUCTS["dtype"]
    _PRODUCTS["dtype"] = dtype
    try:
        yield
    finally:
        _PRODUCTS["dtype"] = previous
        _PRODUCTS["casts"].clear()


def _own_products(fn: _F) -> _F:
    """Runs ``fn`` with autocast off: the written-out passes choose each
    product's dtype themselves (autocast would make the float32 heads bf16)."""
    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not torch.is_autocast_enabled("cpu"):
            return fn(*args, **kwargs)
        with torch.autocast("cpu", enabled=False):
            return fn(*args, **kwargs)
    return wrapped  # type: ignore[return-value]


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype``, cached until an optimizer steps (or ``t`` is
    changed in place: its version)."""
    held = _PRODUCTS["casts"].get(id(t))
    if held is not None and held[0] is t and held[1] == t._version:
        return held[2]
    cast = t.to(dtype)
    _PRODUCTS["casts"][id(t)] = (t, t._version, cast)
    return cast


WEIGHTS_CHANGED_HOOKS.append(_PRODUCTS["casts"].clear)


def _layer(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One layer's product by its module's path (an ensemble's for 3-D weights)."""
    return ensemble_linear(x, weight, bias) if weight.dim() == 3 else linear(x, weight, bias)


def _hidden(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A hidden layer's product and ReLU, in :func:`plain_products`' dtype
    (a layer with few inputs in float32, its output too, as autocast's step
    runs it: :func:`~offrl.models.layers.narrow_inputs`)."""
    dtype = _PRODUCTS["dtype"]
    if dtype is None or narrow_inputs(x.shape[-2], weight.shape[1]):
        return _layer(x.float(), weight, bias).relu_()
    return _layer(x.to(dtype), _cast(weight, dtype), _cast(bias, dtype)).relu_()


def _hidden_backward_operands(weight: torch.Tensor, x: torch.Tensor, grad: torch.Tensor
                              ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(weight, x, grad)`` of a hidden layer's backward products in a
    :func:`plain_products` step, as its forward ran (:func:`_hidden`)."""
    dtype = _PRODUCTS["dtype"]
    if narrow_inputs(x.shape[-2], weight.shape[1]):
        return weight, x.float(), grad.float()
    return _cast(weight, dtype), x.to(dtype), grad.to(dtype)


@_own_products
def plain_forward(layers: PlainLayers, x: torch.Tensor) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """Each layer's input (``x`` first, then the ReLU outputs) and the head's
    output, by :func:`~offrl.models.layers.linear`'s (an ensemble's:
    :func:`~offrl.models.layers.ensemble_linear`'s) products, those of the
    modules; call without grad. Inside :func:`plain_products` each input is
    kept as its layer used it (the head's, the features, in float32), or in
    float32 where a narrow layer produced it (the next layer's forward and
    backward cast it alike)."""
    dtype = _PRODUCTS["dtype"]
    inputs = [x if dtype is None or len(layers) == 1 or narrow_inputs(x.shape[-2], layers[0][0].shape[1]) else x.to(dtype)]
    for weight, bias in layers[:-1]:
        inputs.append(_hidden(inputs[-1], weight, bias))
    if inputs[-1].dtype != torch.float32:
        inputs[-1] = inputs[-1].float()
    weight, bias = layers[-1]
    return inputs, _layer(inputs[-1], weight, bias)


@_own_products
def plain_output(layers: PlainLayers, x: torch.Tensor) -> torch.Tensor:
    """The head's output only (no inputs kept); call without grad."""
    for weight, bias in layers[:-1]:
        x = _hidden(x, weight, bias)
    weight, bias = layers[-1]
    return _layer(x if x.dtype == torch.float32 else x.float(), weight, bias)


@_own_products
def side_head(features: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """A side head's float32 output on :func:`plain_forward`'s features."""
    return linear(features, weight, bias)


@_own_products
def side_head_backward(grad: torch.Tensor, features: torch.Tensor, weight: torch.Tensor
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`~offrl.models.layers.linear_backward` of a side head, float32."""
    return linear_backward(grad, features, weight)


def plain_backward(layers: PlainLayers, inputs: List[torch.Tensor], grad: torch.Tensor,
                   feature_grad: Optional[torch.Tensor] = None) -> List[torch.Tensor]:
    """The parameters' gradients (weight then bias of each layer, in
    :func:`plain_layers`' order) given the output's ``grad``: each layer's
    products by :func:`~offrl.models.layers.linear_backward`, ReLU's by its
    output's sign (as autograd computes an in-place ReLU's).
    ``feature_grad``: the gradient reaching the head's input (the encoder's
    features, ``inputs[-1]``) from other consumers (a side head reading the
    same features), added to the head's own."""
    return _backward(layers, inputs, grad, feature_grad, False)[0]


def plain_backward_with_input_grad(layers: PlainLayers, inputs: List[torch.Tensor], grad: torch.Tensor
                                   ) -> Tuple[List[torch.Tensor], torch.Tensor]:
    """:func:`plain_backward` of a network that is not an ensemble, and the
    gradient with respect to its input ``inputs[0]`` (float32) from the same
    pass (a network whose input depends on another trained network's
    output, as a perturbation actor's action)."""
    return _backward(layers, inputs, grad, None, True)  # type: ignore[return-value]


@_own_products
def _backward(layers: PlainLayers, inputs: List[torch.Tensor], grad: torch.Tensor, feature_grad: Optional[torch.Tensor],
              want_input: bool) -> Tuple[List[torch.Tensor], Optional[torch.Tensor]]:
    grads: List[torch.Tensor] = []
    last = len(layers) - 1
    backward = ensemble_linear_backward if layers[0][0].dim() == 3 else linear_backward
    dtype = _PRODUCTS["dtype"]
    for i in range(last, -1, -1):
        weight, x = layers[i][0], inputs[i]
        if dtype is not None and i < last:  # a hidden layer of a plain_products step: as its forward ran
            weight, x, grad = _hidden_backward_operands(weight, x, grad)
        grad_x, grad_w, grad_b = backward(grad, x, weight, input_grad=i > 0 or want_input)
        grads += [grad_b, grad_w] if grad_w.dtype == torch.float32 else [grad_b.float(), grad_w.float()]
        if i > 0:
            if i == last and feature_grad is not None:
                grad_x = grad_x.add_(feature_grad)
            grad = torch.ops.aten.threshold_backward(grad_x, x, 0)
    if want_input and grad_x.dtype != torch.float32:
        grad_x = grad_x.float()
    return grads[::-1], grad_x if want_input else None


@_own_products
def plain_input_grad(layers: PlainLayers, inputs: List[torch.Tensor], grad: torch.Tensor, member: int = 0) -> torch.Tensor:
    """The gradient with respect to the network's input ``inputs[0]`` given
    its output's ``grad`` ``(B, out)``, without the parameters' gradients (a
    critic in an actor's step); for an ensemble, through member ``member``
    only (``inputs`` as :func:`plain_forward` kept them for all members)."""
    last = len(layers) - 1
    dtype = _PRODUCTS["dtype"]
    for i in range(last, -1, -1):
        weight, x = layers[i][0], inputs[i]
        if dtype is not None and i < last:  # a hidden layer of a plain_products step
            weight, x, grad = _hidden_backward_operands(weight, x, grad)
        if weight.dim() == 3:  # the member's (in, out) weight in nn.Linear's layout, a view
            weight = weight[member].t()
            x = x if x.dim() == 2 else x[member]
        grad_x, _, _ = linear_backward(grad, x, weight, weight_grad=False)
        if i > 0:
            grad = torch.ops.aten.threshold_backward(grad_x, x, 0)
    return grad_x if grad_x.dtype == torch.float32 else grad_x.float()


def plain_head(head: nn.Module) -> Optional[Tuple[torch.Tensor, torch.Tensor]]:
    """``(weight, bias)`` of a side head (a linear layer reading an
    encoder's features beside its main head) when it is an ``nn.Linear``
    with a bias, float32, trainable and without hooks; else None."""
    if not isinstance(head, nn.Linear) or head.bias is None or not hook_free([head]):
        return None
    if not all(p.dtype == torch.float32 and p.requires_grad for p in (head.weight, head.bias)):
        return None
    return head.weight, head.bias


@dataclasses.dataclass(frozen=True)
class PlainNetwork:
    """A trained network's plain layers (None: it trains through autograd),
    the modules whose hooks are checked at each step, and the optimizer step
    taking its gradients; ``network`` and ``optim`` identify it (an
    algorithm whose networks were swapped looks at the new ones anew)."""

    network: nn.Module
    optim: Any
    layers: Optional[PlainLayers]
    modules: List[nn.Module]
    step: Optional[DirectStep]
    #: linear heads trained beside ``network`` on its encoder's features (e.g. DiscreteBCQ's imitator)
    side_heads: Tuple[nn.Module, ...] = ()

    @classmethod
    def create(cls, network: nn.Module, encoder: nn.Module, head: nn.Module, optim: Any,
               called: Sequence[nn.Module] = (), side_heads: Sequence[nn.Module] = (),
               ensemble: bool = False, extra: Sequence[nn.Parameter] = ()) -> "PlainNetwork":
        """``network``'s layers when it is ``encoder`` then ``head`` (see
        :func:`plain_layers`) and holds no other parameter; ``called``: the
        modules besides the encoder's that the autograd step calls (their
        hooks would run there); ``side_heads``: linear layers reading the
        encoder's features, trained by the same step (see :func:`plain_head`),
        whose gradients follow the layers' in the step's list; ``ensemble``:
        an ensemble of plain MLPs (see :func:`plain_layers`); ``extra``:
        ``network``'s other float32 parameters the step trains (a policy's
        free log-std), whose gradients come last."""
        side_heads = tuple(side_heads)
        layers = plain_layers(encoder, head, ensemble=ensemble)
        sides = [plain_head(h) for h in side_heads]
        if layers is None or any(wb is None for wb in sides):
            return cls(network, optim, None, [], None, side_heads)
        if not all(p.dtype == torch.float32 and p.requires_grad for p in extra):
            return cls(network, optim, None, [], None, side_heads)
        params = [p for wb in list(layers) + sides for p in wb] + list(extra)
        # every parameter of the network and its side heads (which may be the network's own modules) once, no
        # other; the order is the step's own (``parameters()`` lists a module's direct parameters first)
        own = {id(p): p for p in list(network.parameters()) + [p for h in side_heads for p in h.parameters()]}
        if len(params) != len(own) or {id(p) for p in params} != set(own):
            return cls(network, optim, None, [], None, side_heads)
        modules = list(encoder.modules()) + list(called) + list(side_heads)
        return cls(network, optim, layers, modules, DirectStep(optim, params), side_heads)

    def matches(self, network: nn.Module, optim: Any, side_heads: Sequence[nn.Module] = ()) -> bool:
        return (self.network is network and self.optim is optim and len(self.side_heads) == len(side_heads)
                and all(a is b for a, b in zip(self.side_heads, side_heads)))

    def usable(self, x: Any) -> bool:
        """Whether this step on input ``x`` can be written out (see
        :func:`plain_step_allowed`; the CPU only, where it was measured)."""
        if self.layers is None or not (isinstance(x, torch.Tensor) and x.is_cpu and plain_step_allowed(x, *self.modules)):
            return False
        return not gradient_hooked(self.step.params if self.step is not None else [t for wb in self.layers for t in wb])
