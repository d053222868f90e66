"""Reward scalers, applied to rewards in each update (offline and online)."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch

from ..serialization import register
from .base import Scaler

__all__ = [
    "RewardScaler",
    "MinMaxRewardScaler",
    "StandardRewardScaler",
    "ClipRewardScaler",
    "MultiplyRewardScaler",
    "ReturnBasedRewardScaler",
    "ConstantShiftRewardScaler",
]


def _rewards(dataset: Any) -> np.ndarray:
    return dataset.to_arrays()["rewards"].reshape(-1)


class RewardScaler(Scaler):
    _kind = "reward_scaler"

    def fit(self, dataset: Any) -> "RewardScaler":
        return self

    def fit_with_env(self, env: Any) -> "RewardScaler":
        return self

    def transform(self, reward: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def transform_numpy(self, reward: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.transform(torch.as_tensor(reward, dtype=torch.float32, device=self._device())).cpu().numpy()


@register("reward_scaler")
class MinMaxRewardScaler(RewardScaler):
    """``(r - minimum) / (maximum - minimum) * multiplier``."""

    _stats = ("minimum", "maximum")
    _options = ("multiplier",)

    def __init__(self, minimum: Any = None, maximum: Any = None, multiplier: float = 1.0) -> None:
        super().__init__(minimum=minimum, maximum=maximum, multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "min_max"

    def fit(self, dataset: Any) -> "MinMaxRewardScaler":
        r = _rewards(dataset)
        self._set_stats(minimum=r.min(), maximum=r.max())
        return self

    def transform(self, reward: torch.Tensor) -> torch.Tensor:
        self._require_built()
        span = self.maximum - self.minimum
        span = torch.where(span > 0, span, torch.ones_like(span))
        return (reward - self.minimum) / span * self.multiplier


@register("reward_scaler")
class StandardRewardScaler(RewardScaler):
    """``(r - mean) / (std + eps) * multiplier``."""

    _stats = ("mean", "std")
    _options = ("eps", "multiplier")

    def __init__(self, mean: Any = None, std: Any = None, eps: float = 1e-3, multiplier: float = 1.0) -> None:
        super().__init__(mean=mean, std=std, eps=float(eps), multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "standard"

    def fit(self, dataset: Any) -> "StandardRewardScaler":
        r = _rewards(dataset).astype(np.float64)
        self._set_stats(mean=r.mean(), std=r.std())
        return self

    def transform(self, reward: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (reward - self.mean) / (self.std + self.eps) * self.multiplier


@register("reward_scaler")
class ClipRewardScaler(RewardScaler):
    """``clip(r, low, high) * multiplier`` (a missing bound is not applied)."""

    _options = ("low", "high", "multiplier")

    def __init__(self, low: Optional[float] = None, high: Optional[float] = None, multiplier: float = 1.0) -> None:
        if low is not None and high is not None and low > high:
            raise ValueError(f"low ({low}) must not exceed high ({high})")
        super().__init__(low=None if low is None else float(low), high=None if high is None else float(high), multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "clip"

    def transform(self, reward: torch.Tensor) -> torch.Tensor:
        return reward.clamp(min=self.low, max=self.high) * self.multiplier


@register("reward_scaler")
class MultiplyRewardScaler(RewardScaler):
    """``r * multiplier``."""

    _options = ("multiplier",)

    def __init__(self, multiplier: float = 1.0) -> None:
        super().__init__(multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "multiply"

    def transform(self, reward: torch.Tensor) -> torch.Tensor:
        return reward * self.multiplier


@register("reward_scaler")
class ReturnBasedRewardScaler(RewardScaler):
    """``r / (return_max - return_min) * multiplier``, with the largest and
    smallest undiscounted episode returns of the dataset (as used by IQL on
    locomotion tasks)."""

    _stats = ("return_max", "return_min")
    _options = ("multiplier",)

    def __init__(self, return_max: Any = None, return_min: Any = None, multiplier: float = 1.0) -> None:
        super().__init__(return_max=return_max, return_min=return_min, multiplier=float(multiplier))

    @staticmethod
    def get_type() -> str:
        return "return"

    def fit(self, dataset: Any) -> "ReturnBasedRewardScaler":
        returns = dataset.compute_returns()
        self._set_stats(return_max=returns.max(), return_min=returns.min())
        return self

    def transform(self, reward: torch.Tensor) -> torch.Tensor:
        self._require_built()
        span = self.return_max - self.return_min
        span = torch.where(span > 0, span, torch.ones_like(span))
        return reward / span * self.multiplier


@register("reward_scaler")
class ConstantShiftRewardScaler(RewardScaler):
    """``r + shift`` (e.g. ``shift=-1`` for AntMaze-style sparse rewards)."""

    _options = ("shift",)

    def __init__(self, shift: float = 0.0) -> None:
        super().__init__(shift=float(shift))

    @staticmethod
    def get_type() -> str:
        return "shift"

    def transform(self, reward: torch.Tensor) -> torch.Tensor:
        return reward + self.shift
