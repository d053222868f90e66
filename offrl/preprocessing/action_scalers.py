"""Action scalers: networks see actions in [-1, 1]; outputs are mapped back."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ..serialization import register
from ._fitting import FitData
from .base import MinMaxScaling, Scaler

__all__ = ["ActionScaler", "MinMaxActionScaler"]


class ActionScaler(Scaler):
    """Base of action scalers (``transform`` before the networks,
    ``reverse_transform`` on what the policy outputs)."""

    _kind = "action_scaler"

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


@register("action_scaler")
class MinMaxActionScaler(MinMaxScaling, ActionScaler):
    """Maps ``[minimum, maximum]`` to ``[-1, 1]`` per action dimension.

    ``minimum`` / ``maximum`` are numpy arrays (float64), fitted from the
    data's actions, or from a Box action space's bounds with
    ``fit_with_env``. A constant dimension maps to ``-1`` (d3rlpy divides by
    zero)."""

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
