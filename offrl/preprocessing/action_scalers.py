"""Action scalers: networks see actions in [-1, 1]; outputs are mapped back."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..serialization import register
from ._fitting import FitData
from .base import Scaler

__all__ = ["ActionScaler", "MinMaxActionScaler"]


class ActionScaler(Scaler):
    """Base of action scalers (``transform`` before the networks,
    ``reverse_transform`` on what the policy outputs)."""

    _kind = "action_scaler"

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


def _span_t(minimum: torch.Tensor, maximum: torch.Tensor) -> torch.Tensor:
    span = maximum - minimum
    return torch.where(span > 0, span, torch.ones_like(span))


def _span_np(minimum: np.ndarray, maximum: np.ndarray) -> np.ndarray:
    span = maximum - minimum
    return np.where(span > 0, span, 1.0)


@register("action_scaler")
class MinMaxActionScaler(ActionScaler):
    """Maps ``[minimum, maximum]`` to ``[-1, 1]`` per action dimension.

    ``minimum`` / ``maximum`` are numpy arrays (float64), fitted from the
    data's actions, or from a Box action space's bounds with
    ``fit_with_env``. A constant dimension maps to ``-1`` (d3rlpy divides by
    zero)."""

    _stats = ("minimum", "maximum")

    def __init__(self, minimum: Any = None, maximum: Any = None) -> None:
        super().__init__(minimum=minimum, maximum=maximum)

    @staticmethod
    def get_type() -> str:
        return "min_max"

    def _fit(self, data: FitData) -> None:
        actions = data.actions
        if np.issubdtype(actions.dtype, np.integer):
            raise ValueError("MinMaxActionScaler is for continuous actions; the data's actions are discrete")
        self._set_stats(minimum=actions.minimum, maximum=actions.maximum)

    def fit_with_env(self, env: Any) -> "MinMaxActionScaler":
        space = env.action_space
        if not (hasattr(space, "low") and hasattr(space, "high")):
            raise ValueError(f"MinMaxActionScaler.fit_with_env needs a Box action space, got {type(space).__name__}")
        low, high = np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError("the action space is unbounded; fit MinMaxActionScaler on a dataset instead")
        self._set_stats(minimum=low, maximum=high)
        return self

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        minimum = self._t("minimum")
        return (x - minimum) / _span_t(minimum, self._t("maximum")) * 2.0 - 1.0

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        minimum = self._t("minimum")
        return (x + 1.0) / 2.0 * _span_t(minimum, self._t("maximum")) + minimum

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        minimum = self._np("minimum")
        return (np.asarray(x) - minimum) / _span_np(minimum, self._np("maximum")) * 2.0 - 1.0

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        minimum = self._np("minimum")
        return (np.asarray(x) + 1.0) / 2.0 * _span_np(minimum, self._np("maximum")) + minimum
