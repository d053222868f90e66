"""Observation, action and reward scalers (torch modules, exported with policies)."""

from .action_scalers import ActionScaler, MinMaxActionScaler
from .base import Scaler
from .observation_scalers import (
    MinMaxObservationScaler,
    ObservationScaler,
    PixelObservationScaler,
    StandardObservationScaler,
    TupleObservationScaler,
)
from .reward_scalers import (
    ClipRewardScaler,
    ConstantShiftRewardScaler,
    MinMaxRewardScaler,
    MultiplyRewardScaler,
    ReturnBasedRewardScaler,
    RewardScaler,
    StandardRewardScaler,
)

__all__ = [
    "Scaler",
    "ObservationScaler",
    "PixelObservationScaler",
    "MinMaxObservationScaler",
    "StandardObservationScaler",
    "TupleObservationScaler",
    "ActionScaler",
    "MinMaxActionScaler",
    "RewardScaler",
    "MinMaxRewardScaler",
    "StandardRewardScaler",
    "ClipRewardScaler",
    "MultiplyRewardScaler",
    "ReturnBasedRewardScaler",
    "ConstantShiftRewardScaler",
]
