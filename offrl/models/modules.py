"""An algorithm's networks and optimizers as one typed, frozen holder, and
the target-network updates.

Each algorithm declares a frozen dataclass subclass of :class:`Modules`
naming its networks and optimizers (``SACModules(policy=..., q_function=...,
actor_optim=...)``), so that its code reads ``self._modules.policy`` and a
wrong name is an error that tools see, not a missing dict key at run time.
Everything generic (saving and loading by name, device moves, train / eval
modes) walks the fields: a field holding an ``nn.Module`` is a network, one
holding an optimizer (offrl's :class:`~offrl.optimizers.OptimizerWrapper` or
a ``torch.optim`` optimizer) is an optimizer, and a field set to ``None``
(an optional part the config switched off) is neither. The field name is
the name saved in model files.

This is d3rlpy's ``d3rlpy.torch_utility.Modules``, which d3rlpy users
subclass to write their own algorithms (see :mod:`offrl.torch_utility`).
"""

from __future__ import annotations

import collections
import dataclasses
import weakref
from typing import Any, Dict, Iterator, List, Tuple, Type, TypeVar

import numpy as np
import torch
from torch import nn

__all__ = ["Modules", "is_optimizer", "module_tensors", "soft_update", "hard_update", "freeze"]

M = TypeVar("M", bound="Modules")


def is_optimizer(value: Any) -> bool:
    """An optimizer a holder may hold: a ``torch.optim`` optimizer, or a
    wrapper of one with its state (``optim``, ``state_dict``,
    ``load_state_dict``: offrl's ``OptimizerWrapper``)."""
    if isinstance(value, torch.optim.Optimizer):
        return True
    return all(callable(getattr(value, name, None)) for name in ("state_dict", "load_state_dict", "step", "zero_grad"))


@dataclasses.dataclass(frozen=True)
class Modules:
    """Base of the typed holders of an algorithm's networks and optimizers
    (see the module docstring). Subclass it as a frozen dataclass."""

    def torch_modules(self) -> Dict[str, nn.Module]:
        """The networks by field name, in field order."""
        return {f.name: v for f in dataclasses.fields(self) if isinstance(v := getattr(self, f.name), nn.Module)}

    def optimizers(self) -> Dict[str, Any]:
        """The optimizers by field name, in field order."""
        return {f.name: v for f in dataclasses.fields(self)
                if not isinstance(v := getattr(self, f.name), nn.Module) and v is not None and is_optimizer(v)}

    @classmethod
    def extending(cls: Type[M], parent: "Modules", **fields: Any) -> M:
        """This holder from a parent algorithm's holder (the class this one
        subclasses) and the fields this one adds or replaces: CQL's holder
        is SAC's plus ``log_alpha`` and ``alpha_optim``."""
        if not isinstance(parent, Modules) or not issubclass(cls, type(parent)):
            raise TypeError(f"{cls.__name__}.extending takes a holder of a class {cls.__name__} extends, "
                            f"got {type(parent).__name__}")
        inherited = {f.name: getattr(parent, f.name) for f in dataclasses.fields(parent)}
        return cls(**{**inherited, **fields})

    # d3rlpy's names
    def get_torch_modules(self) -> Dict[str, nn.Module]:
        """d3rlpy's name for :meth:`torch_modules`."""
        return self.torch_modules()

    def freeze(self) -> None:
        """Stop gradients into every network's parameters."""
        for module in self.torch_modules().values():
            for p in module.parameters():
                p.requires_grad = False

    def unfreeze(self) -> None:
        """Let gradients into every network's parameters again."""
        for module in self.torch_modules().values():
            for p in module.parameters():
                p.requires_grad = True

    def set_eval(self) -> None:
        for module in self.torch_modules().values():
            module.eval()

    def set_train(self) -> None:
        for module in self.torch_modules().values():
            module.train()

    def reset_optimizer_states(self) -> None:
        """Forget every optimizer's moments and step counts."""
        for optim in self.optimizers().values():
            reset = getattr(optim, "reset", None)
            if callable(reset):
                reset()
            else:
                optim.state = collections.defaultdict(dict)

    def get_gradients(self) -> Iterator[Tuple[str, np.ndarray]]:
        """``(network.parameter, gradient)`` for every parameter that has one."""
        for module_name, module in self.torch_modules().items():
            for name, parameter in module.named_parameters():
                if parameter.requires_grad and parameter.grad is not None:
                    yield f"{module_name}.{name}", parameter.grad.detach().cpu().numpy()


_TENSORS: "weakref.WeakKeyDictionary[nn.Module, Tuple[List[torch.Tensor], List[torch.Tensor]]]" = weakref.WeakKeyDictionary()


def module_tensors(module: nn.Module) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
    """A module's parameters and buffers, listed once (the hot loop calls
    this every step; networks do not change their tensors after building).
    Not while torch.compile traces: the traced code would index the weak
    dictionary's keys by position, and a collected module shifts them."""
    if torch.compiler.is_compiling():
        return list(module.parameters()), list(module.buffers())
    cached = _TENSORS.get(module)
    if cached is None:
        cached = (list(module.parameters()), list(module.buffers()))
        _TENSORS[module] = cached
    return cached


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """``target <- (1 - tau) * target + tau * source`` (one foreach op)."""
    target_params, target_buffers = module_tensors(target)
    source_params, source_buffers = module_tensors(source)
    torch._foreach_lerp_(target_params, source_params, tau)
    if target_buffers:
        torch._foreach_copy_(target_buffers, source_buffers)


@torch.no_grad()
def hard_update(target: nn.Module, source: nn.Module) -> None:
    """``target <- source``."""
    target_params, target_buffers = module_tensors(target)
    source_params, source_buffers = module_tensors(source)
    torch._foreach_copy_(target_params, source_params)
    if target_buffers:
        torch._foreach_copy_(target_buffers, source_buffers)


def freeze(module: nn.Module) -> nn.Module:
    """Mark a (target) network as not trainable."""
    for p in module.parameters():
        p.requires_grad_(False)
    return module
