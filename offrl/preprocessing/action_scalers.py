"""Action scalers: networks see actions in [-1, 1]; outputs are mapped back."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..serialization import register
from .base import Scaler

__all__ = ["ActionScaler", "MinMaxActionScaler"]


class ActionScaler(Scaler):
    _kind = "action_scaler"

    def transform(self, action: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reverse_transform(self, action: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def transform_numpy(self, action: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.transform(torch.as_tensor(action, dtype=torch.float32, device=self._device())).cpu().numpy()

    def reverse_transform_numpy(self, action: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.reverse_transform(torch.as_tensor(action, dtype=torch.float32, device=self._device())).cpu().numpy()


@register("action_scaler")
class MinMaxActionScaler(ActionScaler):
    """Maps ``[minimum, maximum]`` to ``[-1, 1]`` per action dimension.

    Fitted from the dataset's actions, or from a Box action space's bounds
    with ``fit_with_env``."""

    _stats = ("minimum", "maximum")

    def __init__(self, minimum: Any = None, maximum: Any = None) -> None:
        super().__init__(minimum=minimum, maximum=maximum)

    @staticmethod
    def get_type() -> str:
        return "min_max"

    def fit(self, dataset: Any) -> "MinMaxActionScaler":
        actions = dataset.to_arrays()["actions"]
        if np.issubdtype(actions.dtype, np.integer):
            raise ValueError("MinMaxActionScaler is for continuous actions; the dataset's actions are discrete")
        self._set_stats(minimum=actions.min(axis=0), maximum=actions.max(axis=0))
        return self

    def fit_with_env(self, env: Any) -> "MinMaxActionScaler":
        space = env.action_space
        if not hasattr(space, "low"):
            raise ValueError("MinMaxActionScaler needs a Box action space")
        self._set_stats(minimum=np.asarray(space.low, dtype=np.float64), maximum=np.asarray(space.high, dtype=np.float64))
        return self

    def _range(self) -> torch.Tensor:
        span = self.maximum - self.minimum
        return torch.where(span > 0, span, torch.ones_like(span))

    def transform(self, action: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (action - self.minimum) / self._range() * 2.0 - 1.0

    def reverse_transform(self, action: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (action + 1.0) / 2.0 * self._range() + self.minimum
