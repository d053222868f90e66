"""Observation, action and reward scalers (torch modules, exported with policies)."""

from typing import Type

from ..serialization import register as _register
from . import action_scalers, observation_scalers, reward_scalers
from .action_scalers import *  # noqa: F403 - each module's scalers, named in its __all__
from .base import Scaler, add_leading_dims, add_leading_dims_numpy
from .observation_scalers import *  # noqa: F403
from .reward_scalers import *  # noqa: F403



def _registrar(kind: str, base: type):
    def register_scaler(cls: Type[Scaler]) -> Type[Scaler]:
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise TypeError(f"register_{kind} takes a subclass of {base.__name__}, got {cls!r}")
        return _register(kind)(cls)

    register_scaler.__name__ = f"register_{kind}"
    register_scaler.__doc__ = (f"Make a custom {base.__name__} subclass (with ``get_type()``) loadable from "
                               "configs, params.json and model files (d3rlpy's name); returns the class.")
    return register_scaler


register_observation_scaler = _registrar("observation_scaler", observation_scalers.ObservationScaler)
register_action_scaler = _registrar("action_scaler", action_scalers.ActionScaler)
register_reward_scaler = _registrar("reward_scaler", reward_scalers.RewardScaler)

__all__ = ["Scaler"]
__all__ += observation_scalers.__all__
__all__ += action_scalers.__all__
__all__ += reward_scalers.__all__
__all__ += [
    "register_observation_scaler",
    "register_action_scaler",
    "register_reward_scaler",
    "add_leading_dims",
    "add_leading_dims_numpy",
]
