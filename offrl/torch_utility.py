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
  network's parameters (and buffers) into its target copy.
"""

from __future__ import annotations

from torch import nn

from .dataset.batch import TorchTransitionMiniBatch as TorchMiniBatch
from .models.modules import Modules, hard_update, soft_update

__all__ = ["Modules", "TorchMiniBatch", "hard_sync", "soft_sync"]


def hard_sync(targ_model: nn.Module, model: nn.Module) -> None:
    """``targ_model <- model`` (parameters and buffers, in place)."""
    hard_update(targ_model, model)


def soft_sync(targ_model: nn.Module, model: nn.Module, tau: float) -> None:
    """``targ_model <- (1 - tau) * targ_model + tau * model``."""
    soft_update(targ_model, model, float(tau))
