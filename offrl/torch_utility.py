"""d3rlpy's ``d3rlpy.torch_utility`` path, for algorithms written against
d3rlpy's extension API (d3rlpy 2.8.1's ``examples/custom_algo.py``):

* :class:`Modules`: the base of an algorithm's typed, frozen holder of its
  networks and optimizers (offrl's own algorithms use it too: see
  :mod:`offrl.models.modules`);
* :class:`TorchMiniBatch`: the preprocessed torch batch ``inner_update``
  receives (offrl's :class:`~offrl.dataset.batch.TorchTransitionMiniBatch`:
  observations, actions, rewards, next observations and actions,
  terminals, intervals; ``returns_to_go`` is None unless the algorithm
  needs it);
* :func:`hard_sync` / :func:`soft_sync`: copy, or move by ``tau``, a
  network's parameters (and buffers) into its target copy;
  :func:`sync_optimizer_state` copies an optimizer's state (moments), not
  its hyperparameters;
* small helpers d3rlpy's own code and tests use: the recursive numpy/torch
  conversions (a tensor, or a list of them for tuple observations),
  :func:`get_device`, :func:`get_batch_size`, :func:`map_location`, the
  ``train_api`` / ``eval_api`` method decorators (switch an impl's
  ``modules`` to training / evaluation mode first) and the layers
  :class:`View`, :class:`Swish` and :class:`GEGLU`.

* :class:`Checkpointer`: d3rlpy's ``torch.save`` archive of named modules
  and optimizers. offrl's own model files are safetensors and read without
  an unpickler; a Checkpointer archive is read only with
  ``torch.load(weights_only=True)`` and only under a torch whose
  weights-only unpickler has no known flaw (as offrl's version-1 files).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, Sequence, TypeVar, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .dataset.batch import TorchTrajectoryMiniBatch  # noqa: I001
from .dataset.batch import TorchTransitionMiniBatch as TorchMiniBatch
from ._model_file import weights_only_is_safe
from .models.modules import Modules, hard_update, soft_update

__all__ = ["Checkpointer", "GEGLU", "Modules", "Swish", "TorchMiniBatch", "TorchTrajectoryMiniBatch", "View", "convert_to_numpy_recursively",
           "convert_to_torch", "convert_to_torch_recursively", "eval_api", "get_batch_size", "get_device",
           "hard_sync", "map_location", "soft_sync", "sync_optimizer_state", "train_api"]

TensorOrList = Union[torch.Tensor, Sequence[torch.Tensor]]
F_ = TypeVar("F_", bound=Callable[..., Any])


def hard_sync(targ_model: nn.Module, model: nn.Module) -> None:
    """``targ_model <- model`` (parameters and buffers, in place)."""
    hard_update(targ_model, model)


def soft_sync(targ_model: nn.Module, model: nn.Module, tau: float) -> None:
    """``targ_model <- (1 - tau) * targ_model + tau * model``."""
    soft_update(targ_model, model, float(tau))


def sync_optimizer_state(targ_optim: torch.optim.Optimizer, optim: torch.optim.Optimizer) -> None:
    """Copy ``optim``'s per-parameter state (moments, steps) into
    ``targ_optim``, keeping ``targ_optim``'s own hyperparameters."""
    targ_optim.load_state_dict({"state": optim.state_dict()["state"],
                                "param_groups": targ_optim.state_dict()["param_groups"]})


def map_location(device: str) -> Any:
    """``torch.load``'s ``map_location`` for a device string (``cpu``,
    ``cpu:0``, ``cuda:1``)."""
    if "cuda" in device:
        index = int(device.split(":")[1]) if ":" in device else 0
        return lambda storage, loc: storage.cuda(index)
    if "cpu" in device:
        return "cpu"
    raise ValueError(f"invalid device={device!r}: expected 'cpu', 'cpu:N' or 'cuda:N'")


def convert_to_torch(array: np.ndarray, device: Any) -> torch.Tensor:
    """A float32 tensor on ``device`` (uint8 images are converted too)."""
    return torch.as_tensor(np.asarray(array), device=device).float()


def convert_to_torch_recursively(array: Any, device: Any) -> Any:
    """:func:`convert_to_torch` of an array, or of each array of a list /
    tuple (tuple observations); anything else is a ``ValueError``."""
    if isinstance(array, (list, tuple)):
        return [convert_to_torch(a, device) for a in array]
    if isinstance(array, np.ndarray):
        return convert_to_torch(array, device)
    raise ValueError(f"expected a numpy array or a list of them, got {type(array).__name__}")


def convert_to_numpy_recursively(array: Any) -> Any:
    """The numpy array(s) of a (CPU) tensor or of a list / tuple of them."""
    if isinstance(array, (list, tuple)):
        return [a.detach().cpu().numpy() for a in array]
    if isinstance(array, torch.Tensor):
        return array.detach().cpu().numpy()
    raise ValueError(f"expected a tensor or a list of them, got {type(array).__name__}")


def get_device(x: TensorOrList) -> str:
    """The device of a tensor, or of the first tensor of a list."""
    return str((x if isinstance(x, torch.Tensor) else x[0]).device)


def get_batch_size(x: TensorOrList) -> int:
    """The leading dimension of a tensor, or of the first tensor of a list."""
    return int((x if isinstance(x, torch.Tensor) else x[0]).shape[0])


def _with_mode(mode: str) -> Callable[[F_], F_]:
    def decorator(f: F_) -> F_:
        @functools.wraps(f)
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            modules = getattr(self, "modules", None)
            if not isinstance(modules, Modules):
                raise TypeError(f"{type(self).__name__}.{f.__name__} needs a Modules holder as self.modules")
            modules.set_train() if mode == "train" else modules.set_eval()
            return f(self, *args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorator


#: a method of an implementation that puts ``self.modules`` in training mode first
train_api = _with_mode("train")
#: a method of an implementation that puts ``self.modules`` in evaluation mode first
eval_api = _with_mode("eval")


class View(nn.Module):
    """``x.view(shape)`` as a layer."""

    def __init__(self, shape: Sequence[int]):
        super().__init__()
        self._shape = tuple(shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(self._shape)


class Swish(nn.Module):
    """``x * sigmoid(x)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


class GEGLU(nn.Module):
    """Gated GELU: the last dimension split in halves ``a, b``; ``a * gelu(b)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] % 2:
            raise ValueError(f"GEGLU needs an even last dimension, got {x.shape[-1]}")
        a, b = x.chunk(2, dim=-1)
        return a * F.gelu(b)


class Checkpointer:
    """d3rlpy's ``Checkpointer``: ``save(f)`` writes ``torch.save({name:
    module.state_dict()})`` of the named modules and optimizers; ``load(f)``
    loads such an archive into them (weights-only unpickler, refused under a
    torch whose unpickler has known flaws)."""

    def __init__(self, modules: Dict[str, Any], device: str):
        self._modules = dict(modules)
        self._device = device

    @property
    def modules(self) -> Dict[str, Any]:
        return self._modules

    def save(self, f: Any) -> None:
        torch.save({name: module.state_dict() for name, module in self._modules.items()}, f)

    def load(self, f: Any) -> None:
        if not weights_only_is_safe():
            raise ValueError(f"Checkpointer.load reads a torch archive with torch.load(weights_only=True); torch "
                             f"{torch.__version__}'s weights-only unpickler has known code-execution flaws, so it is "
                             "refused (offrl's own model files need no unpickler: algo.save / offrl.load_learnable)")
        chkpt = torch.load(f, map_location=map_location(self._device), weights_only=True)
        if not isinstance(chkpt, dict):
            raise ValueError("not a Checkpointer archive: expected a dict of state dicts")
        missing = sorted(set(self._modules) - set(chkpt))
        if missing:
            raise ValueError(f"the archive has no state for {missing}")
        for name, module in self._modules.items():
            module.load_state_dict(chkpt[name])
