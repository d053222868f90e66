"""Observation scalers (applied inside the networks and exported with them)."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence

import numpy as np
import torch
from torch import nn

from ..serialization import from_json_value, register, to_json_value
from .base import Scaler

__all__ = [
    "ObservationScaler",
    "PixelObservationScaler",
    "MinMaxObservationScaler",
    "StandardObservationScaler",
    "TupleObservationScaler",
]


def _observations(dataset: Any) -> np.ndarray:
    observations = dataset.to_arrays()["observations"]
    if isinstance(observations, list):
        raise ValueError(
            "the dataset has tuple observations: use TupleObservationScaler([scaler per element]) "
            "instead of a single observation scaler"
        )
    return observations


def _check_shape(scaler: Scaler, shape: Sequence[int]) -> None:
    for name in scaler._stats:
        value = getattr(scaler, name)
        if value is not None and tuple(value.shape) not in (tuple(shape), ()):
            raise ValueError(
                f"{type(scaler).__name__}.{name} has shape {tuple(value.shape)}, "
                f"observations have shape {tuple(shape)}"
            )


class ObservationScaler(Scaler):
    _kind = "observation_scaler"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transform(x)

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.transform(torch.as_tensor(x, device=self._device())).cpu().numpy()

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.reverse_transform(torch.as_tensor(x, device=self._device())).cpu().numpy()

    def check_observation_shape(self, shape: Sequence[int]) -> None:
        _check_shape(self, shape)


@register("observation_scaler")
class PixelObservationScaler(ObservationScaler):
    """``x / 255`` for uint8 images."""

    def __init__(self) -> None:
        super().__init__()

    @staticmethod
    def get_type() -> str:
        return "pixel"

    def fit(self, dataset: Any) -> "PixelObservationScaler":
        return self

    def fit_with_env(self, env: Any) -> "PixelObservationScaler":
        return self

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float32) / 255.0

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x * 255.0


@register("observation_scaler")
class MinMaxObservationScaler(ObservationScaler):
    """Maps ``[minimum, maximum]`` to ``[-1, 1]`` per dimension (a constant
    dimension maps to ``-1``)."""

    _stats = ("minimum", "maximum")

    def __init__(self, minimum: Any = None, maximum: Any = None) -> None:
        super().__init__(minimum=minimum, maximum=maximum)

    @staticmethod
    def get_type() -> str:
        return "min_max"

    def fit(self, dataset: Any) -> "MinMaxObservationScaler":
        x = _observations(dataset)
        self._set_stats(minimum=x.min(axis=0), maximum=x.max(axis=0))
        return self

    def fit_with_env(self, env: Any) -> "MinMaxObservationScaler":
        space = env.observation_space
        low, high = np.asarray(space.low, dtype=np.float64), np.asarray(space.high, dtype=np.float64)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError("the observation space is unbounded; fit MinMaxObservationScaler on a dataset instead")
        self._set_stats(minimum=low, maximum=high)
        return self

    def _range(self) -> torch.Tensor:
        span = self.maximum - self.minimum
        return torch.where(span > 0, span, torch.ones_like(span))

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (x.to(torch.float32) - self.minimum) / self._range() * 2.0 - 1.0

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (x + 1.0) / 2.0 * self._range() + self.minimum


@register("observation_scaler")
class StandardObservationScaler(ObservationScaler):
    """``(x - mean) / (std + eps)`` per dimension."""

    _stats = ("mean", "std")
    _options = ("eps",)

    def __init__(self, mean: Any = None, std: Any = None, eps: float = 1e-3) -> None:
        super().__init__(mean=mean, std=std, eps=float(eps))
        if (self.mean is None) != (self.std is None):
            raise ValueError("give both mean and std, or neither")

    @staticmethod
    def get_type() -> str:
        return "standard"

    def fit(self, dataset: Any) -> "StandardObservationScaler":
        x = _observations(dataset)
        self._set_stats(mean=x.mean(axis=0, dtype=np.float64), std=x.std(axis=0, dtype=np.float64))
        return self

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (x.to(torch.float32) - self.mean) / (self.std + self.eps)

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return x * (self.std + self.eps) + self.mean


class _Identity(ObservationScaler):
    def __init__(self) -> None:
        super().__init__()

    @staticmethod
    def get_type() -> str:
        return "identity"

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x


@register("observation_scaler")
class TupleObservationScaler(ObservationScaler):
    """One scaler per element of a tuple observation (``None`` leaves an
    element as it is)."""

    def __init__(self, observation_scalers: Sequence[Optional[ObservationScaler]]) -> None:
        super().__init__()
        scalers = [from_json_value(s) if isinstance(s, dict) else s for s in observation_scalers]
        for s in scalers:
            if s is not None and not isinstance(s, ObservationScaler):
                raise TypeError(f"TupleObservationScaler takes observation scalers or None, got {type(s).__name__}")
        self.observation_scalers = nn.ModuleList([s if s is not None else _Identity() for s in scalers])
        self._given = [s is not None for s in scalers]

    @staticmethod
    def get_type() -> str:
        return "tuple"

    @property
    def built(self) -> bool:
        return all(s.built for s in self.observation_scalers)

    def _elements(self, dataset: Any):
        observations = dataset.to_arrays()["observations"]
        if not isinstance(observations, list) or len(observations) != len(self.observation_scalers):
            raise ValueError(f"TupleObservationScaler has {len(self.observation_scalers)} scalers; the dataset's observations do not have that many elements")
        return observations

    def fit(self, dataset: Any) -> "TupleObservationScaler":
        observations = self._elements(dataset)

        class _View:
            def __init__(self, x):
                self._x = x

            def to_arrays(self):
                return {"observations": self._x}

        for scaler, x in zip(self.observation_scalers, observations):
            scaler.fit(_View(x))
        return self

    def transform(self, x: List[torch.Tensor]) -> List[torch.Tensor]:  # type: ignore[override]
        return [s.transform(v) for s, v in zip(self.observation_scalers, x)]

    def reverse_transform(self, x: List[torch.Tensor]) -> List[torch.Tensor]:  # type: ignore[override]
        return [s.reverse_transform(v) for s, v in zip(self.observation_scalers, x)]

    def check_observation_shape(self, shape) -> None:
        for s, sh in zip(self.observation_scalers, shape):
            s.check_observation_shape(sh)

    def _params(self):
        return {"observation_scalers": [s if g else None for s, g in zip(self.observation_scalers, self._given)]}

    def to_dict(self):
        return {"kind": self._kind, "type": self.get_type(), "params": {"observation_scalers": to_json_value(self._params()["observation_scalers"])}}

    def stats_numpy(self):
        return {}

    def __deepcopy__(self, memo):
        return TupleObservationScaler([None if not g else s.__deepcopy__(memo) for s, g in zip(self.observation_scalers, self._given)])
