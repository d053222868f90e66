"""d3rlpy's ``d3rlpy.base`` path: what a d3rlpy user's own algorithm
imports from it (d3rlpy 2.8.1's ``examples/custom_algo.py``).

* :class:`LearnableConfig`: the base of every algorithm config (offrl's
  :class:`~offrl.algos.config.LearnableConfig`); a config that defines
  ``create`` (d3rlpy's way) needs no ``algorithm_class``;
* :data:`DeviceArg`: what ``create(device=...)`` takes;
* :class:`ImplBase`: the base of an algorithm's implementation (see
  :mod:`offrl.algos.impl`);
* :class:`LearnableBase`: the base of every algorithm (offrl's
  :class:`~offrl.algos.base.QLearningAlgoBase`);
* :func:`register_learnable`: make a config's files loadable by
  :func:`load_learnable` (offrl's ``register("algorithm")``);
* :func:`save_config`: write a built algorithm's ``params.json`` content
  (config, shapes) through a :class:`~offrl.logging.D3RLPyLogger`.
"""

from __future__ import annotations

from typing import Any, TypeVar

from .algos.base import QLearningAlgoBase as LearnableBase
from .algos.config import LearnableConfig
from .training.device import DeviceArg
from .algos.impl import ImplBase
from .serialization import load_learnable, register

__all__ = ["DeviceArg", "ImplBase", "LearnableBase", "LearnableConfig", "TImpl_co", "TConfig_co",
           "load_learnable", "register_learnable", "save_config"]

TImpl_co = TypeVar("TImpl_co", bound=ImplBase, covariant=True)
TConfig_co = TypeVar("TConfig_co", bound=LearnableConfig, covariant=True)


def register_learnable(cls: type) -> None:
    """Register an algorithm config class under its ``get_type()`` name, so
    that model files and ``params.json`` holding it load back."""
    if not (isinstance(cls, type) and issubclass(cls, LearnableConfig)):
        raise TypeError(f"register_learnable takes a LearnableConfig subclass, got {cls!r}")
    register("algorithm")(cls)


def save_config(algo: Any, logger: Any) -> None:
    """Hand a built algorithm's parameters (what ``params.json`` holds:
    config, observation shape, action size) to ``logger.add_params``, as
    ``fit`` does; ``Algo.from_json`` rebuilds the algorithm from the file."""
    if getattr(algo, "observation_shape", None) is None:
        raise ValueError(f"save_config needs a built algorithm: call {type(algo).__name__}.create_impl or "
                         "build_with_dataset first")
    logger.add_params(algo.to_params())
