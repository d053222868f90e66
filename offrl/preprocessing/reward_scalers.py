"""Reward scalers, applied to rewards in each update (offline and online)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from ..serialization import register
from ._fitting import FitData
from .base import Scaler, min_max_span

__all__ = [
    "RewardScaler",
    "MinMaxRewardScaler",
    "StandardRewardScaler",
    "ClipRewardScaler",
    "MultiplyRewardScaler",
    "ReturnBasedRewardScaler",
    "ConstantShiftRewardScaler",
]


def _check_multiplier(multiplier: float, who: str) -> float:
    if multiplier == 0.0:
        raise ValueError(f"{who}.reverse_transform is undefined for multiplier=0 (every reward maps to 0)")
    return multiplier


class RewardScaler(Scaler):
    """Base of reward scalers: applied to rewards in each update (offline
    and online). Statistics are floats, as in d3rlpy; fitting from an
    environment leaves them as they are (the spaces say nothing of rewards)."""

    _kind = "reward_scaler"
    _scalar_stats = True

    def fit_with_env(self, env: Any) -> "RewardScaler":
        return self

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


@register("reward_scaler")
class MinMaxRewardScaler(RewardScaler):
    """``(r - minimum) / (maximum - minimum) * multiplier`` (a constant reward
    maps to 0, where d3rlpy divides by zero)."""

    _stats = ("minimum", "maximum")
    _options = ("multiplier",)

    def __init__(self, minimum: Optional[float] = None, maximum: Optional[float] = None, multiplier: float = 1.0) -> None:
        super().__init__(minimum=minimum, maximum=maximum, multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "min_max"

    def _fit(self, data: FitData) -> None:
        r = data.rewards
        self._set_stats(minimum=r.minimum, maximum=r.maximum)

    def _base(self) -> float:
        return min_max_span(float(self.minimum), float(self.maximum))

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (x - self._t("minimum")) / self._base() * self.multiplier

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return x * self._base() / _check_multiplier(self.multiplier, "MinMaxRewardScaler") + self._t("minimum")

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        return (np.asarray(x) - self.minimum) / self._base() * self.multiplier

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        return np.asarray(x) * self._base() / _check_multiplier(self.multiplier, "MinMaxRewardScaler") + self.minimum


@register("reward_scaler")
class StandardRewardScaler(RewardScaler):
    """``(r - mean) / (std + eps) * multiplier``."""

    _stats = ("mean", "std")
    _options = ("eps", "multiplier")

    def __init__(self, mean: Optional[float] = None, std: Optional[float] = None, eps: float = 1e-3,
                 multiplier: float = 1.0) -> None:
        super().__init__(mean=mean, std=std, eps=float(eps), multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "standard"

    def _fit(self, data: FitData) -> None:
        r = data.rewards
        self._set_stats(mean=r.mean, std=r.std)

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (x - self._t("mean")) / (self._t("std") + self.eps) * self.multiplier

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        multiplier = _check_multiplier(self.multiplier, "StandardRewardScaler")
        return x * (self._t("std") + self.eps) / multiplier + self._t("mean")

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        return (np.asarray(x) - self.mean) / (self.std + self.eps) * self.multiplier

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        multiplier = _check_multiplier(self.multiplier, "StandardRewardScaler")
        return np.asarray(x) * (self.std + self.eps) / multiplier + self.mean


@register("reward_scaler")
class ClipRewardScaler(RewardScaler):
    """``clip(r, low, high) * multiplier`` (a missing bound is not applied;
    ``reverse_transform`` undoes the multiplier only, as in d3rlpy)."""

    _options = ("low", "high", "multiplier")

    def __init__(self, low: Optional[float] = None, high: Optional[float] = None, multiplier: float = 1.0) -> None:
        if low is not None and high is not None and low > high:
            raise ValueError(f"low ({low}) must not exceed high ({high})")
        super().__init__(low=None if low is None else float(low), high=None if high is None else float(high), multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "clip"

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=self.low, max=self.high) * self.multiplier

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x / _check_multiplier(self.multiplier, "ClipRewardScaler")

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.asarray(x), self.low, self.high) * self.multiplier

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) / _check_multiplier(self.multiplier, "ClipRewardScaler")


@register("reward_scaler")
class MultiplyRewardScaler(RewardScaler):
    """``r * multiplier``."""

    _options = ("multiplier",)

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "multiply"

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.multiplier

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x / _check_multiplier(self.multiplier, "MultiplyRewardScaler")

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) * self.multiplier

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) / _check_multiplier(self.multiplier, "MultiplyRewardScaler")


@register("reward_scaler")
class ReturnBasedRewardScaler(RewardScaler):
    """``r / (return_max - return_min) * multiplier``, with the largest and
    smallest undiscounted episode returns of the data (as used by IQL on
    locomotion tasks). Equal returns leave the scale at 1 (d3rlpy divides
    by zero)."""

    _stats = ("return_max", "return_min")
    _options = ("multiplier",)

    def __init__(self, return_max: Optional[float] = None, return_min: Optional[float] = None,
                 multiplier: float = 1.0) -> None:
        super().__init__(return_max=return_max, return_min=return_min, multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "return"

    def _fit(self, data: FitData) -> None:
        returns = data.returns
        self._set_stats(return_max=returns.max(), return_min=returns.min())

    def _base(self) -> float:
        return min_max_span(float(self.return_min), float(self.return_max))

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return x / self._base() * self.multiplier

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return x * self._base() / _check_multiplier(self.multiplier, "ReturnBasedRewardScaler")

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        return np.asarray(x) / self._base() * self.multiplier

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        return np.asarray(x) * self._base() / _check_multiplier(self.multiplier, "ReturnBasedRewardScaler")


@register("reward_scaler")
class ConstantShiftRewardScaler(RewardScaler):
    """``(r + shift) * multiplier``, or ``r * multiplier + shift`` with
    ``multiply_first=True`` (e.g. ``shift=-1`` for AntMaze-style sparse
    rewards)."""

    _options = ("shift", "multiplier", "multiply_first")

    def __init__(self, shift: float, multiplier: float = 1.0, multiply_first: bool = False) -> None:
        if not isinstance(multiply_first, (bool, np.bool_)):
            raise TypeError(f"multiply_first must be a bool, got {type(multiply_first).__name__}")
        super().__init__(shift=float(shift), multiplier=float(multiplier), multiply_first=bool(multiply_first))

    @staticmethod
    def get_type() -> str:
        return "shift"

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        if self.multiply_first:
            return x * self.multiplier + self.shift
        return (x + self.shift) * self.multiplier

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        multiplier = _check_multiplier(self.multiplier, "ConstantShiftRewardScaler")
        if self.multiply_first:
            return (x - self.shift) / multiplier
        return x / multiplier - self.shift

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return self.transform(np.asarray(x))  # type: ignore[arg-type]  (the same arithmetic on arrays)

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return self.reverse_transform(np.asarray(x))  # type: ignore[arg-type]
