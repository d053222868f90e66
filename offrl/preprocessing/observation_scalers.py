"""Observation scalers (applied inside the networks and exported with them)."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import nn

from ..serialization import from_json_value, lookup, register, to_json_value
from ._fitting import FitData, Summary
from .base import MinMaxScaling, NotFittableFromEnvError, Scaler

__all__ = [
    "ObservationScaler",
    "PixelObservationScaler",
    "MinMaxObservationScaler",
    "StandardObservationScaler",
    "TupleObservationScaler",
    "DictObservationScaler",
]


def _single(observations: Any, who: str) -> Summary:
    if isinstance(observations, list):
        raise ValueError(
            f"the data has tuple observations: use TupleObservationScaler([scaler per element]) "
            f"instead of a single {who}"
        )
    return observations


def _box_bounds(space: Any, who: str) -> Tuple[np.ndarray, np.ndarray]:
    low, high = getattr(space, "low", None), getattr(space, "high", None)
    if low is None or high is None:
        raise ValueError(f"{who}.fit_with_env needs a Box observation space, got {type(space).__name__}")
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(f"the observation space is unbounded; fit {who} on a dataset instead")
    return low, high


def _check_shape(scaler: Scaler, shape: Sequence[int]) -> None:
    for name in scaler._stats:
        value = getattr(scaler, name)
        if value is not None and np.shape(value) not in (tuple(shape), ()):
            raise ValueError(
                f"{type(scaler).__name__}.{name} has shape {np.shape(value)}, "
                f"observations have shape {tuple(shape)}"
            )


class ObservationScaler(Scaler):
    """Base of observation scalers: ``transform`` runs inside the networks
    (and exported policies), ``transform_numpy`` on numpy arrays."""

    _kind = "observation_scaler"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.transform(x)

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def check_observation_shape(self, shape: Sequence[int]) -> None:
        _check_shape(self, shape)


@register("observation_scaler")
class PixelObservationScaler(ObservationScaler):
    """``x / 255`` for uint8 images (nothing to fit)."""

    def __init__(self) -> None:
        super().__init__()

    @staticmethod
    def get_type() -> str:
        return "pixel"

    def fit_with_env(self, env: Any) -> "PixelObservationScaler":
        return self

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float32) / 255.0

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        """Back to integer pixel values (int64, rounded; d3rlpy truncates)."""
        return torch.round(x * 255.0).long()

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) / 255.0

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x) * 255.0


@register("observation_scaler")
class MinMaxObservationScaler(MinMaxScaling, ObservationScaler):
    """Maps ``[minimum, maximum]`` to ``[-1, 1]`` per dimension (a constant
    dimension maps to ``-1``, where d3rlpy divides by zero).

    ``minimum`` / ``maximum`` are numpy arrays (float64); fitted from the data
    or, with ``fit_with_env``, from a bounded Box observation space."""

    def _fit(self, data: FitData) -> None:
        x = _single(data.observations, "MinMaxObservationScaler")
        self._set_stats(minimum=x.minimum, maximum=x.maximum)

    def fit_with_env(self, env: Any) -> "MinMaxObservationScaler":
        low, high = _box_bounds(env.observation_space, "MinMaxObservationScaler")
        self._set_stats(minimum=low, maximum=high)
        return self

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return super().transform(x.to(torch.float32))  # integer observations (e.g. uint8) become float32


@register("observation_scaler")
class StandardObservationScaler(ObservationScaler):
    """``(x - mean) / (std + eps)`` per dimension; ``mean`` / ``std`` are
    numpy arrays (float64, population standard deviation)."""

    _stats = ("mean", "std")
    _options = ("eps",)

    def __init__(self, mean: Any = None, std: Any = None, eps: float = 1e-3) -> None:
        super().__init__(mean=mean, std=std, eps=float(eps))
        if (self.mean is None) != (self.std is None):
            raise ValueError("give both mean and std, or neither")

    @staticmethod
    def get_type() -> str:
        return "standard"

    def _fit(self, data: FitData) -> None:
        x = _single(data.observations, "StandardObservationScaler")
        self._set_stats(mean=x.mean, std=x.std)

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return (x.to(torch.float32) - self._t("mean")) / (self._t("std") + self.eps)

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        return x * (self._t("std") + self.eps) + self._t("mean")

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        return (np.asarray(x) - self._np("mean")) / (self._np("std") + self.eps)

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        return np.asarray(x) * (self._np("std") + self.eps) + self._np("mean")


class _Identity(ObservationScaler):
    def __init__(self) -> None:
        super().__init__()

    @staticmethod
    def get_type() -> str:
        return "identity"

    def fit_with_env(self, env: Any) -> "_Identity":
        return self

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return x

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        return x


def _scaler_from_record(record: dict) -> Any:
    """A scaler from offrl's ``to_dict`` record or d3rlpy's ``{"type", "params"}``."""
    if "kind" not in record and set(record) == {"type", "params"}:
        return lookup("observation_scaler", record["type"]).from_dict(record)
    return from_json_value(record)


class _SpaceView:
    def __init__(self, observation_space: Any) -> None:
        self.observation_space = observation_space


@register("observation_scaler")
class TupleObservationScaler(ObservationScaler):
    """One scaler per element of a tuple observation (``None`` leaves an
    element as it is)."""

    def __init__(self, observation_scalers: Sequence[Optional[ObservationScaler]] = ()) -> None:
        super().__init__()
        if isinstance(observation_scalers, (str, bytes, dict)) or not hasattr(observation_scalers, "__iter__"):
            raise TypeError(f"observation_scalers must be a list of observation scalers, got {type(observation_scalers).__name__}")
        scalers = [_scaler_from_record(s) if isinstance(s, dict) else s for s in observation_scalers]
        for i, s in enumerate(scalers):
            if s is not None and not isinstance(s, ObservationScaler):
                raise TypeError(f"observation_scalers[{i}] must be an observation scaler or None, got {type(s).__name__}")
        self.observation_scalers = nn.ModuleList([s if s is not None else _Identity() for s in scalers])
        self._given = [s is not None for s in scalers]

    @staticmethod
    def get_type() -> str:
        return "tuple"

    @property
    def built(self) -> bool:
        return all(s.built for s in self.observation_scalers)

    def _fit(self, data: FitData) -> None:
        observations = data.observations
        if not isinstance(observations, list) or len(observations) != len(self.observation_scalers):
            raise ValueError(
                f"TupleObservationScaler has {len(self.observation_scalers)} scalers; the data's observations "
                f"have {len(observations) if isinstance(observations, list) else 'not a tuple of'} elements"
            )
        for scaler, x in zip(self.observation_scalers, observations):
            scaler._fit(FitData.from_summary(x, data.source))

    def fit_with_env(self, env: Any) -> "TupleObservationScaler":
        """Fit each element's scaler from the matching part of a Tuple
        observation space (d3rlpy has no such path)."""
        spaces = getattr(env.observation_space, "spaces", None)
        if not isinstance(spaces, (list, tuple)) or len(spaces) != len(self.observation_scalers):
            raise NotFittableFromEnvError(
                f"TupleObservationScaler needs a Tuple observation space of {len(self.observation_scalers)} "
                f"spaces, got {type(env.observation_space).__name__}"
            )
        for scaler, space in zip(self.observation_scalers, spaces):
            if not scaler.built:
                scaler.fit_with_env(_SpaceView(space))
        return self

    def transform(self, x: List[torch.Tensor]) -> List[torch.Tensor]:  # type: ignore[override]
        return [s.transform(v) for s, v in zip(self.observation_scalers, x)]

    def reverse_transform(self, x: List[torch.Tensor]) -> List[torch.Tensor]:  # type: ignore[override]
        return [s.reverse_transform(v) for s, v in zip(self.observation_scalers, x)]

    def transform_numpy(self, x: List[np.ndarray]) -> List[np.ndarray]:  # type: ignore[override]
        return [s.transform_numpy(v) for s, v in zip(self.observation_scalers, x)]

    def reverse_transform_numpy(self, x: List[np.ndarray]) -> List[np.ndarray]:  # type: ignore[override]
        return [s.reverse_transform_numpy(v) for s, v in zip(self.observation_scalers, x)]

    def check_observation_shape(self, shape) -> None:
        for s, sh in zip(self.observation_scalers, shape):
            s.check_observation_shape(sh)

    def _params(self):
        return {"observation_scalers": [s if g else None for s, g in zip(self.observation_scalers, self._given)]}

    def to_dict(self):
        return {"kind": self._kind, "type": self.get_type(), "params": {"observation_scalers": to_json_value(self._params()["observation_scalers"])}}

    @classmethod
    def _from_plain_params(cls, params):
        if not isinstance(params, dict) or set(params) - {"observation_scalers"}:
            raise ValueError("TupleObservationScaler takes only observation_scalers")
        return cls(params.get("observation_scalers", ()))

    def stats_numpy(self):
        return {}

    def __deepcopy__(self, memo):
        return TupleObservationScaler([None if not g else s.__deepcopy__(memo) for s, g in zip(self.observation_scalers, self._given)])


@register("observation_scaler")
class DictObservationScaler(TupleObservationScaler):
    """One scaler per key of a dict observation (``None`` leaves a key as
    it is), e.g. ``{"image": PixelObservationScaler(), "state":
    StandardObservationScaler()}``; each is fitted on its key's values.

    Dict observations reach the networks as the list of their values in
    sorted key order, so this is the tuple scaler over ``sorted(keys)``;
    it saves as JSON by key. A config given a plain dict as
    ``observation_scaler`` wraps it in this class."""

    def __init__(self, observation_scalers: Optional[dict] = None) -> None:
        if not isinstance(observation_scalers, dict) or not observation_scalers:
            raise TypeError(
                "observation_scalers must be a non-empty dict of key -> observation scaler, "
                f"got {type(observation_scalers).__name__}"
            )
        for key in observation_scalers:
            if not isinstance(key, str):
                raise TypeError(f"observation_scalers has key {key!r}: keys must be strings")
        self.keys = tuple(sorted(observation_scalers))
        scalers = []
        for key in self.keys:
            s = observation_scalers[key]
            s = _scaler_from_record(s) if isinstance(s, dict) else s
            if s is not None and not isinstance(s, ObservationScaler):
                raise TypeError(
                    f"observation_scalers[{key!r}] must be an observation scaler or None, got {type(s).__name__}"
                )
            scalers.append(s)
        super().__init__(scalers)

    @staticmethod
    def get_type() -> str:
        return "dict"

    def _single(self, x: Any) -> bool:
        """A one-key dict observation is stored as a plain array."""
        return len(self.keys) == 1 and not isinstance(x, list)

    def _fit(self, data: FitData) -> None:
        observations = data.observations
        if self._single(observations):
            self.observation_scalers[0]._fit(data)
            return
        if not isinstance(observations, list) or len(observations) != len(self.observation_scalers):
            raise ValueError(
                f"DictObservationScaler has scalers for keys {list(self.keys)}; the data's observations have "
                f"{len(observations) if isinstance(observations, list) else 'not several'} elements"
            )
        super()._fit(data)

    def transform(self, x: Any) -> Any:
        return self.observation_scalers[0].transform(x) if self._single(x) else super().transform(x)

    def reverse_transform(self, x: Any) -> Any:
        return self.observation_scalers[0].reverse_transform(x) if self._single(x) else super().reverse_transform(x)

    def transform_numpy(self, x: Any) -> Any:
        return self.observation_scalers[0].transform_numpy(x) if self._single(x) else super().transform_numpy(x)

    def reverse_transform_numpy(self, x: Any) -> Any:
        if self._single(x):
            return self.observation_scalers[0].reverse_transform_numpy(x)
        return super().reverse_transform_numpy(x)

    def check_observation_shape(self, shape) -> None:
        if len(self.keys) == 1 and (len(shape) == 0 or not isinstance(shape[0], (list, tuple))):
            self.observation_scalers[0].check_observation_shape(shape)
            return
        super().check_observation_shape(shape)

    def fit_with_env(self, env: Any) -> "DictObservationScaler":
        """Fit each key's scaler from the matching part of a Dict observation space."""
        spaces = getattr(env.observation_space, "spaces", None)
        if not isinstance(spaces, dict) or sorted(spaces) != list(self.keys):
            raise NotFittableFromEnvError(
                f"DictObservationScaler needs a Dict observation space with keys {list(self.keys)}, "
                f"got {env.observation_space}"
            )
        for scaler, key in zip(self.observation_scalers, self.keys):
            if not scaler.built:
                scaler.fit_with_env(_SpaceView(spaces[key]))
        return self

    def _params(self):
        return {"observation_scalers": {k: (s if g else None) for k, s, g in zip(self.keys, self.observation_scalers, self._given)}}

    def to_dict(self):
        return {"kind": self._kind, "type": self.get_type(), "params": {"observation_scalers": to_json_value(self._params()["observation_scalers"])}}

    @classmethod
    def _from_plain_params(cls, params):
        if not isinstance(params, dict) or set(params) != {"observation_scalers"}:
            raise ValueError("DictObservationScaler takes only observation_scalers")
        return cls(params["observation_scalers"])

    def __deepcopy__(self, memo):
        return DictObservationScaler(
            {k: (s.__deepcopy__(memo) if g else None) for k, s, g in zip(self.keys, self.observation_scalers, self._given)}
        )
