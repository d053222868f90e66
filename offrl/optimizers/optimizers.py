"""Optimizer factories: which torch optimizer to build, as JSON data
(d3rlpy's ``d3rlpy.optimizers.optimizers``).

``OptimizerFactory(optim_cls, **kwargs)`` names any optimizer in
``torch.optim``; on load only names found there are accepted, so a config
never imports code. Optimizers use torch's fused or multi-tensor
(``foreach``) implementations where available (fused Adam is
about twice as fast as foreach on the CPU), ``clip_grad_norm`` clips gradients
before each step, and ``lr_scheduler_factory`` (every factory, as in d3rlpy
2.8) steps a learning-rate scheduler after each optimizer step. The named
factories take d3rlpy 2.8.1's fields in its order: ``clip_grad_norm``,
``lr_scheduler_factory``, then the optimizer's own.
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch
from torch import nn

from .._d3rlpy_json import D3rlpySerializable
from ..serialization import Serializable, from_json_value, register, to_json_value
from .lr_schedulers import LRSchedulerFactory, attach_lr_scheduler

__all__ = [
    "OptimizerFactory",
    "SGDFactory",
    "AdamFactory",
    "AdamWFactory",
    "RMSpropFactory",
    "GPTAdamWFactory",
    "OptimizerWrapper",
    "DirectStep",
    "make_optimizer_field",
    "register_optimizer_factory",
]


class OptimizerWrapper:
    """A torch optimizer with optional gradient clipping (one ``step`` call).

    d3rlpy's constructor ``OptimizerWrapper(params=, optim=, compiled=,
    clip_grad_norm=, lr_scheduler=)`` works too: ``compiled=False`` zeroes
    gradients in place (d3rlpy's eager mode), ``compiled=True`` or offrl's
    default drops them (``set_to_none``, faster); ``lr_scheduler`` is
    stepped after each optimizer step (offrl's factories attach theirs with
    :func:`~offrl.optimizers.lr_schedulers.attach_lr_scheduler`)."""

    def __init__(self, optim: torch.optim.Optimizer, params: Sequence[nn.Parameter],
                 clip_grad_norm: Optional[float] = None, compiled: Optional[bool] = None,
                 lr_scheduler: Optional[Any] = None) -> None:
        self.optim = optim
        self.params = list(params)
        self.clip_grad_norm = clip_grad_norm
        self._set_to_none = compiled is not False
        self._lr_scheduler = lr_scheduler
        self._direct_adam: Optional[bool] = None  # decided at the first step (_fusable_adam)

    def zero_grad(self) -> None:
        self.optim.zero_grad(set_to_none=self._set_to_none)

    def step(self) -> None:
        if self.clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.params, self.clip_grad_norm, foreach=True)
        elif self._lr_scheduler is None and self._direct_step():
            return
        self.optim.step()
        weights_changed()
        if self._lr_scheduler is not None:
            self._lr_scheduler.step()

    def _direct_step(self) -> bool:
        """For a plain fused Adam on the CPU whose state is initialised and
        every parameter has a dense gradient: torch's fused Adam kernel on
        the optimizer's own state, as ``Adam.step`` calls it, without its
        Python bookkeeping (~250 us per step; BEAR's update 1.04x, IQL's
        1.025x, paired, one CPU thread). Returns False where ``Adam.step``
        must run (a hook, a tensor hyperparameter, the first step, a
        missing or sparse gradient, another optimizer or device)."""
        if self._direct_adam is None:
            self._direct_adam = type(self) is OptimizerWrapper and _fusable_adam(self.optim, self.params)
        if not self._direct_adam or len(self.optim.param_groups) != 1:  # (a group added since: Adam.step)
            return False
        grads = [p.grad for p in self.params]
        if any(g is None or g.is_sparse for g in grads):
            return False
        state = _fused_adam_state(self.optim, self.params)
        if state is None:
            return False
        _fused_adam_kernel(self.optim, self.params, grads, state)
        weights_changed()
        return True

    def state_dict(self) -> Dict[str, Any]:
        if self._lr_scheduler is not None:  # as ScheduledOptimizerWrapper's
            return {"optimizer": self.optim.state_dict(), "lr_scheduler": self._lr_scheduler.state_dict()}
        return self.optim.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if self._lr_scheduler is not None and set(state) == {"optimizer", "lr_scheduler"}:
            self.optim.load_state_dict(state["optimizer"])
            self._lr_scheduler.load_state_dict(state["lr_scheduler"])
            return
        self.optim.load_state_dict(state)

    def reset(self) -> None:
        """Forget the moment estimates and step counts."""
        self.optim.state.clear()

    @property
    def state(self) -> Any:
        """The torch optimizer's per-parameter state (empty before the first step)."""
        return self.optim.state

    @property
    def param_groups(self) -> Any:
        return self.optim.param_groups


_OPTIMIZER_MODULE = sys.modules[torch.optim.Optimizer.__module__]  # where torch keeps the global step hooks


def _fusable_adam(optim: Any, params: List[nn.Parameter]) -> bool:
    """``optim`` is a plain fused Adam (what :class:`AdamFactory` builds:
    fused, no AMSGrad, maximize, capturable, differentiable or decoupled
    weight decay) with one parameter group over exactly ``params``, on the
    CPU (where the direct call was measured; other devices step through Adam)."""
    group = optim.param_groups[0] if optim is not None and len(optim.param_groups) == 1 else {}
    return (
        type(optim) is torch.optim.Adam and hasattr(torch, "_fused_adam_") and group.get("fused") is True
        and not any(group.get(k) for k in ("amsgrad", "maximize", "capturable", "differentiable", "decoupled_weight_decay"))
        and len(group["params"]) == len(params) and all(a is b for a, b in zip(group["params"], params))
        and all(p.device.type == "cpu" for p in params)
    )


def _fused_adam_state(optim: Any, params: List[nn.Parameter]) -> Optional[Tuple[List[torch.Tensor], ...]]:
    """The moments and step counts ``Adam.step`` would pass to the fused
    kernel, or None where ``Adam.step`` must run: a step hook to call, a
    tensor hyperparameter, or the first step (Adam initialises its state)."""
    hooks = (getattr(optim, "_optimizer_step_pre_hooks", None), getattr(optim, "_optimizer_step_post_hooks", None),
             getattr(_OPTIMIZER_MODULE, "_global_optimizer_pre_hooks", None),
             getattr(_OPTIMIZER_MODULE, "_global_optimizer_post_hooks", None))
    if any(h is None or len(h) for h in hooks):  # a hook to run, or a torch that keeps them elsewhere
        return None
    group = optim.param_groups[0]
    if not all(isinstance(group[k], float) for k in ("lr", "eps", "weight_decay")) or not all(
            isinstance(beta, float) for beta in group["betas"]):
        return None
    states = [optim.state.get(p) for p in params]
    if not all(s and isinstance(s.get("step"), torch.Tensor) for s in states):
        return None
    return ([s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [s["step"] for s in states])


_ONE = torch.ones(())


def _fused_adam_kernel(optim: Any, params: List[nn.Parameter], grads: List[torch.Tensor],
                       state: Tuple[List[torch.Tensor], ...]) -> None:
    exp_avgs, exp_avg_sqs, steps = state
    group = optim.param_groups[0]
    beta1, beta2 = group["betas"]
    with torch.no_grad():  # as Adam.step
        # the step counts (0-dim CPU tensors) += 1 through the tensor-list overload: the scalar one
        # converts 1 to a tensor per parameter (4 more ops each, ~3x the time)
        torch._foreach_add_(steps, [_ONE] * len(steps))
        torch._fused_adam_(params, grads, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=group["lr"],
                           beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"], eps=group["eps"],
                           maximize=False, grad_scale=None, found_inf=None)


#: called after every optimizer step (offrl.models.plain_mlp drops its low-precision weight copies there)
WEIGHTS_CHANGED_HOOKS: List[Callable[[], None]] = []


def weights_changed() -> None:
    """After an optimizer step: the low-precision copies of weights made
    before it are stale. autocast keeps each weight's copy until its region
    ends, and a bf16-mixed update steps its optimizers inside the region (a
    network used after its step must be cast anew); the written-out passes
    keep their own copies (``WEIGHTS_CHANGED_HOOKS``). The fused Adam kernel
    does not bump a weight's version counter, so neither cache can tell."""
    torch.clear_autocast_cache()
    for hook in WEIGHTS_CHANGED_HOOKS:
        hook()


class DirectStep:
    """One optimizer step from gradients given as tensors, for updates that
    write their backward pass out (:mod:`offrl.models.plain_mlp`).

    For a plain fused Adam on the CPU (:func:`_fusable_adam`) behind a plain
    wrapper (no clipping or scheduler, ``step`` not replaced) with its state
    initialised, torch's fused Adam kernel is called on the optimizer's own
    state, as ``Adam.step`` does, without its bookkeeping; otherwise (the
    first step, another optimizer, a wrapper whose ``step`` was replaced, as
    torchrun's gradient averaging does) the gradients become ``.grad`` and
    the wrapper steps. With ``keep_grads`` the parameters' ``.grad`` hold
    the step's gradients afterwards, as after ``loss.backward();
    optim.step()`` (gradient logging reads them)."""

    def __init__(self, wrapper: Any, params: List[nn.Parameter], keep_grads: bool = True) -> None:
        self.wrapper = wrapper
        self.params = list(params)
        self.keep_grads = keep_grads
        self._fusable = type(wrapper) is OptimizerWrapper and _fusable_adam(getattr(wrapper, "optim", None), self.params)

    def _fused_state(self) -> Optional[Tuple[List[torch.Tensor], ...]]:
        wrapper = self.wrapper
        if wrapper.clip_grad_norm is not None or wrapper._lr_scheduler is not None or "step" in vars(wrapper):
            return None
        return _fused_adam_state(wrapper.optim, self.params)

    def __call__(self, grads: List[torch.Tensor]) -> None:
        state = self._fused_state() if self._fusable else None
        if state is None or self.keep_grads:
            for p, g in zip(self.params, grads):
                p.grad = g
        if state is None:
            self.wrapper.step()
            if not self.keep_grads:
                for p in self.params:
                    p.grad = None
            return
        _fused_adam_kernel(self.wrapper.optim, self.params, grads, state)
        weights_changed()


#: layers whose weights GPT-style weight decay leaves alone (by type, when modules are given)
_NO_DECAY_LAYERS = (nn.Embedding, nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d)


def _named_parameters(items: Iterable[Tuple[str, Any]]) -> Tuple[List[Tuple[str, nn.Parameter]], frozenset]:
    """``(name, parameter)`` pairs from ``(name, parameter)`` pairs, or from
    d3rlpy's ``(name, module)`` pairs (each parameter once, named
    ``module.parameter``), and the ids of parameters of embedding and
    normalisation layers."""
    named: List[Tuple[str, nn.Parameter]] = []
    seen: set = set()
    no_decay: set = set()
    for name, value in items:
        if isinstance(value, nn.Module):
            for pname, param in value.named_parameters(recurse=False):
                if id(param) not in seen:
                    seen.add(id(param))
                    named.append((f"{name}.{pname}" if name else pname, param))
                    if isinstance(value, _NO_DECAY_LAYERS):
                        no_decay.add(id(param))
        elif id(value) not in seen:
            seen.add(id(value))
            named.append((name, value))
    return named, frozenset(no_decay)


def _optim_class(name_or_cls: Any) -> type:
    if isinstance(name_or_cls, str):
        cls = getattr(torch.optim, name_or_cls, None)
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
            raise ValueError(f"unknown optimizer {name_or_cls!r}: expected a class name in torch.optim")
        return cls
    if isinstance(name_or_cls, type) and issubclass(name_or_cls, torch.optim.Optimizer):
        if getattr(torch.optim, name_or_cls.__name__, None) is not name_or_cls:
            raise ValueError(f"{name_or_cls.__name__} is not a torch.optim optimizer; only those can be saved as data")
        return name_or_cls
    raise TypeError(f"optim_cls must be a torch.optim optimizer class or its name, got {name_or_cls!r}")


def _fast_kwargs(cls: type, kwargs: Dict[str, Any], params: Sequence[nn.Parameter]) -> Dict[str, Any]:
    """Ask for the fused kernel (one op for all parameters, CPU and CUDA)
    where the optimizer has one, else the multi-tensor (foreach) one."""
    if "foreach" in kwargs or "fused" in kwargs:
        return kwargs
    parameters = inspect.signature(cls.__init__).parameters
    fusable = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    if "fused" in parameters and fusable and params:
        return {**kwargs, "fused": True}
    if "foreach" in parameters:
        return {**kwargs, "foreach": True}
    return kwargs


@register("optimizer")
class OptimizerFactory(Serializable):
    """Any ``torch.optim`` optimizer: ``OptimizerFactory(torch.optim.Adam, weight_decay=1e-4)``.

    Also the base class of the named factories (``AdamFactory`` ...), so
    ``isinstance(f, OptimizerFactory)`` holds for every optimizer factory.
    """

    _kind = "optimizer"

    def __init__(self, optim_cls: Any = "Adam", clip_grad_norm: Optional[float] = None,
                 lr_scheduler_factory: Optional[LRSchedulerFactory] = None, **kwargs: Any) -> None:
        self.optim_cls = _optim_class(optim_cls).__name__
        self.clip_grad_norm = clip_grad_norm
        self.lr_scheduler_factory = lr_scheduler_factory
        self.kwargs = dict(kwargs)
        _check_scheduler(lr_scheduler_factory)

    @staticmethod
    def get_type() -> str:
        return "optimizer"

    def _optim_class(self) -> type:
        return _optim_class(self.optim_cls)

    def _kwargs(self) -> Dict[str, Any]:
        return dict(self.kwargs)

    def _param_groups(self, named_params, lr: float, no_decay: frozenset = frozenset()):
        return [p for _, p in named_params]

    def create(self, named_params: Iterable[Tuple[str, Any]], lr: float, compiled: Optional[bool] = None) -> OptimizerWrapper:
        """Build the optimizer over ``named_params`` (a list of ``(name,
        param)``), or over the parameters of d3rlpy's ``named_modules``
        (``module.named_modules()``: ``(name, module)`` pairs, each
        parameter once); ``compiled`` as :class:`OptimizerWrapper`'s."""
        named, no_decay = _named_parameters(named_params)
        named = [(n, p) for n, p in named if p.requires_grad]
        cls = self._optim_class()
        params = [p for _, p in named]
        optim = cls(self._param_groups(named, lr, no_decay), lr=lr, **_fast_kwargs(cls, self._kwargs(), params))
        return attach_lr_scheduler(OptimizerWrapper(optim, [p for _, p in named], self.clip_grad_norm, compiled),
                                   self.lr_scheduler_factory)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "kind": self._kind,
            "type": self.get_type(),
            "params": {"optim_cls": self.optim_cls, "clip_grad_norm": self.clip_grad_norm,
                       "lr_scheduler_factory": to_json_value(self.lr_scheduler_factory), "kwargs": to_json_value(self.kwargs)},
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "OptimizerFactory":
        params = data["params"]
        kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in params.get("kwargs", {}).items()}
        scheduler = params.get("lr_scheduler_factory")
        return cls(params["optim_cls"], clip_grad_norm=params.get("clip_grad_norm"),
                   lr_scheduler_factory=None if scheduler is None else from_json_value(scheduler), **kwargs)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OptimizerFactory) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v!r}" for k, v in self.kwargs.items())
        scheduler = "" if self.lr_scheduler_factory is None else f", lr_scheduler_factory={self.lr_scheduler_factory!r}"
        return f"OptimizerFactory({self.optim_cls}, clip_grad_norm={self.clip_grad_norm}{scheduler}{extra})"


def _check_scheduler(factory: Any) -> None:
    if factory is not None and not isinstance(factory, LRSchedulerFactory):
        raise TypeError(f"lr_scheduler_factory must be an LRSchedulerFactory or None, got {type(factory).__name__}")


@dataclasses.dataclass
class _NamedFactory(D3rlpySerializable, OptimizerFactory):
    """Base of the dataclass factories for one optimizer: their fields are
    their parameters (plain ``Serializable`` JSON), after d3rlpy's two common
    ones; ``serialize()`` / ``deserialize()`` read and write d3rlpy's JSON."""

    clip_grad_norm: Optional[float] = None
    lr_scheduler_factory: Optional[LRSchedulerFactory] = None

    def __post_init__(self) -> None:
        _check_scheduler(self.lr_scheduler_factory)

    to_dict = Serializable.to_dict
    _from_record = classmethod(Serializable.from_dict.__func__)  # type: ignore[assignment]


@register("optimizer")
@dataclasses.dataclass
class SGDFactory(_NamedFactory):
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False

    @staticmethod
    def get_type() -> str:
        return "sgd"

    def _optim_class(self) -> type:
        return torch.optim.SGD

    def _kwargs(self) -> Dict[str, Any]:
        return dict(momentum=self.momentum, dampening=self.dampening, weight_decay=self.weight_decay, nesterov=self.nesterov)


@dataclasses.dataclass
class _AdamFields(_NamedFactory):
    """The fields of Adam, shared by ``AdamFactory`` and ``GPTAdamWFactory`` (d3rlpy's order and defaults)."""

    betas: Tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        self.betas = tuple(self.betas)  # type: ignore[assignment]


@register("optimizer")
@dataclasses.dataclass
class AdamFactory(_AdamFields):
    @staticmethod
    def get_type() -> str:
        return "adam"

    def _optim_class(self) -> type:
        return torch.optim.Adam

    def _kwargs(self) -> Dict[str, Any]:
        return dict(betas=self.betas, eps=self.eps, weight_decay=self.weight_decay, amsgrad=self.amsgrad)


@register("optimizer")
@dataclasses.dataclass
class AdamWFactory(AdamFactory):
    """``torch.optim.AdamW``; fields as d3rlpy's ``AdamWFactory`` (the weight
    decay is decoupled from the gradient, applied to every parameter).

    Args:
        betas, eps, weight_decay, amsgrad: AdamW's parameters.
        clip_grad_norm: clip the gradient norm before each step (None: no clipping).
        lr_scheduler_factory: a scheduler stepped after each optimizer step.
    """

    weight_decay: float = 0.0

    @staticmethod
    def get_type() -> str:
        return "adam_w"

    def _optim_class(self) -> type:
        return torch.optim.AdamW


@register("optimizer")
@dataclasses.dataclass
class RMSpropFactory(_NamedFactory):
    alpha: float = 0.95
    eps: float = 1e-2
    weight_decay: float = 0.0
    momentum: float = 0.0
    centered: bool = True

    @staticmethod
    def get_type() -> str:
        return "rmsprop"

    def _optim_class(self) -> type:
        return torch.optim.RMSprop

    def _kwargs(self) -> Dict[str, Any]:
        return dict(alpha=self.alpha, eps=self.eps, weight_decay=self.weight_decay, momentum=self.momentum, centered=self.centered)


@register("optimizer")
@dataclasses.dataclass
class GPTAdamWFactory(_AdamFields):
    """AdamW as used to train GPT: weight decay on the weights of linear
    (and convolution) layers only, not on biases, norms or embeddings.
    Defaults are d3rlpy 2.8.1's (``betas=(0.9, 0.999)``, ``weight_decay=0``;
    minGPT's recipe is ``betas=(0.9, 0.95)``, ``weight_decay=0.1``)."""

    @staticmethod
    def get_type() -> str:
        return "gpt_adam_w"

    def _optim_class(self) -> type:
        return torch.optim.AdamW

    def _kwargs(self) -> Dict[str, Any]:
        return dict(betas=self.betas, eps=self.eps, amsgrad=self.amsgrad)

    def _param_groups(self, named_params, lr, no_decay_ids: frozenset = frozenset()):
        decay, no_decay = [], []
        for name, param in named_params:
            leaf = name.rsplit(".", 1)[-1]
            if leaf == "weight" and param.dim() >= 2 and "embed" not in name and id(param) not in no_decay_ids:
                decay.append(param)
            else:
                no_decay.append(param)
        return [
            {"params": decay, "weight_decay": self.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]


def register_optimizer_factory(cls: type) -> type:
    """Register a user optimizer factory so configs naming it load."""
    if not (isinstance(cls, type) and issubclass(cls, OptimizerFactory)):
        raise TypeError(f"expected an OptimizerFactory subclass, got {cls!r}")
    return register("optimizer")(cls)


def make_optimizer_field() -> Any:
    """A dataclass field whose default is a fresh ``AdamFactory()``."""
    return dataclasses.field(default_factory=AdamFactory)
