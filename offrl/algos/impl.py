"""d3rlpy's extension API: an algorithm written as a Config, an Algo and
an Impl (d3rlpy 2.8.1's ``examples/custom_algo.py``), run by offrl's own
machinery.

In d3rlpy an algorithm is split in two: the algorithm class (what users
call: ``fit``, ``predict``, ``save``) builds, in ``inner_create_impl``, an
*Impl* that holds the networks (a :class:`~offrl.models.modules.Modules`
holder) and does the maths (``inner_update``, ``inner_predict_best_action``,
``inner_sample_action``, ``inner_predict_value``). offrl's algorithms are one
class, so an Impl is adapted to offrl's hooks instead of running a second
engine: :class:`~offrl.algos.base.QLearningAlgoBase` builds a subclass that
defines ``inner_create_impl`` by calling it and taking the Impl's holder as
its networks, and its hooks (``_update``, ``_predict``, ``_sample``,
``_predict_value``, ``policy_module``) call the Impl's ``inner_*`` methods.
Everything else (``fit``, ``fit_online``, scalers, saving and loading by
the holder's field names, export) is the same code as for offrl's own
algorithms.
"""

from __future__ import annotations

import abc
from typing import Any, Dict, Mapping, TypeVar

import torch
from torch import nn

from ..models.modules import Modules
from .config import LearnableConfig

__all__ = ["ImplBase", "QLearningAlgoImplBase", "TransformerAlgoImplBase", "TQLearningImpl", "TQLearningConfig", "ImplPolicy",
           "impl_update", "checked_impl"]


class ImplBase(metaclass=abc.ABCMeta):
    """d3rlpy's ``ImplBase``: the shapes, the holder of networks and
    optimizers, and the device of an algorithm's implementation."""

    def __init__(self, observation_shape: Any, action_size: int, modules: Modules, device: Any) -> None:
        if not isinstance(modules, Modules):
            raise TypeError(f"modules must be a Modules holder (a frozen dataclass subclassing offrl.Modules), "
                            f"got {type(modules).__name__}")
        self._observation_shape = observation_shape
        self._action_size = action_size
        self._modules = modules
        self._device = device

    @property
    def observation_shape(self) -> Any:
        return self._observation_shape

    @property
    def action_size(self) -> int:
        return self._action_size

    @property
    def device(self) -> Any:
        return self._device

    @property
    def modules(self) -> Modules:
        return self._modules


class TransformerAlgoImplBase(ImplBase):
    """d3rlpy's ``TransformerAlgoImplBase``, the first type parameter of
    ``TransformerAlgoBase[TransformerAlgoImplBase, TransformerConfig]`` in
    annotations. offrl's transformers keep their networks on the algorithm
    itself (``_build`` / ``_update``, see :mod:`offrl.algos.transformer_base`),
    so no offrl algorithm instantiates it."""


class QLearningAlgoImplBase(ImplBase):
    """d3rlpy's ``QLearningAlgoImplBase``: a subclass defines the four
    ``inner_*`` methods below, on preprocessed torch batches and scaled
    observations."""

    def update(self, batch: Any, grad_step: int) -> Dict[str, float]:
        return self.inner_update(batch, grad_step)

    @abc.abstractmethod
    def inner_update(self, batch: Any, grad_step: int) -> Dict[str, float]:
        """One gradient step on a :class:`~offrl.torch_utility.TorchMiniBatch`;
        the losses by name (floats or 0-dim tensors)."""

    def predict_best_action(self, x: Any) -> torch.Tensor:
        return self.inner_predict_best_action(x)

    @abc.abstractmethod
    def inner_predict_best_action(self, x: Any) -> torch.Tensor:
        """Greedy actions ``(B, action_size)``, or ``(B,)`` indices."""

    def sample_action(self, x: Any) -> torch.Tensor:
        return self.inner_sample_action(x)

    @abc.abstractmethod
    def inner_sample_action(self, x: Any) -> torch.Tensor:
        """Actions drawn from the policy, shaped as the greedy ones."""

    def predict_value(self, x: Any, action: torch.Tensor) -> torch.Tensor:
        return self.inner_predict_value(x, action)

    @abc.abstractmethod
    def inner_predict_value(self, x: Any, action: torch.Tensor) -> torch.Tensor:
        """Action values ``(B,)``."""

    def reset_optimizer_states(self) -> None:
        self._modules.reset_optimizer_states()


TQLearningImpl = TypeVar("TQLearningImpl", bound=QLearningAlgoImplBase)
TQLearningConfig = TypeVar("TQLearningConfig", bound=LearnableConfig)


def checked_impl(algo: Any) -> QLearningAlgoImplBase:
    """The Impl ``algo.inner_create_impl`` left in ``algo._impl``, checked."""
    impl = getattr(algo, "_impl", None)
    if not isinstance(impl, QLearningAlgoImplBase):
        raise TypeError(f"{type(algo).__name__}.inner_create_impl must set self._impl to a QLearningAlgoImplBase "
                        f"holding its Modules, got {type(impl).__name__}")
    return impl


def impl_update(impl: QLearningAlgoImplBase, batch: Any, grad_step: int) -> Dict[str, torch.Tensor]:
    """``impl.inner_update`` with its losses as 0-dim tensors (what offrl's
    ``_update`` returns)."""
    losses = impl.inner_update(batch, grad_step)
    if not isinstance(losses, Mapping):
        raise TypeError(f"{type(impl).__name__}.inner_update returned a {type(losses).__name__}; "
                        "expected a dict of losses by name")
    return {str(name): value.detach() if isinstance(value, torch.Tensor) else torch.tensor(float(value))
            for name, value in losses.items()}


class ImplPolicy(nn.Module):
    """An Impl's greedy policy as a module on scaled observations (for
    export): its networks are submodules, so moving or copying this module
    moves or copies the ones ``inner_predict_best_action`` reads."""

    def __init__(self, impl: QLearningAlgoImplBase) -> None:
        super().__init__()
        self.networks = nn.ModuleDict(impl.modules.torch_modules())
        self.impl = impl

    def forward(self, x: Any) -> torch.Tensor:
        return self.impl.inner_predict_best_action(x)
