"""Scaler base: a torch module whose statistics are buffers.

A scaler is configured with explicit statistics or none; ``fit(dataset)``
(vectorised numpy over the whole dataset) or ``fit_with_env(env)`` fills
them in. Algorithms fit a *copy* of the scaler in their config, so the
user's config is never mutated, and save the fitted statistics with the
model. Because scalers are modules, exported policies carry them.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

import numpy as np
import torch
from torch import nn

from ..serialization import Serializable, to_json_value

__all__ = ["Scaler", "as_stat"]


def as_stat(value: Any, name: str) -> Optional[np.ndarray]:
    if value is None:
        return None
    array = np.asarray(value, dtype=np.float64)
    if not np.isfinite(array).all():
        raise ValueError(f"{name} holds nan or inf")
    return array


class Scaler(nn.Module, Serializable):
    """Base of all scalers. Subclasses declare ``_stats`` (names of array
    statistics) and ``_options`` (names of plain float/bool parameters)."""

    _stats: Sequence[str] = ()
    _options: Sequence[str] = ()

    def __init__(self, **params: Any) -> None:
        nn.Module.__init__(self)
        for name in self._options:
            setattr(self, name, params[name])
        for name in self._stats:
            stat = as_stat(params.get(name), name)
            self.register_buffer(name, None if stat is None else torch.as_tensor(stat, dtype=torch.float32))

    # --------------------------------------------------------------- state
    @property
    def built(self) -> bool:
        """Whether every statistic is known (given or fitted)."""
        return all(getattr(self, name) is not None for name in self._stats)

    def _set_stats(self, **stats: np.ndarray) -> None:
        for name, value in stats.items():
            stat = as_stat(value, name)
            device = self._device()
            setattr(self, name, torch.as_tensor(stat, dtype=torch.float32, device=device))

    def _device(self) -> torch.device:
        for name in self._stats:
            value = getattr(self, name)
            if value is not None:
                return value.device
        return torch.device("cpu")

    def stats_numpy(self) -> Dict[str, Optional[np.ndarray]]:
        return {n: None if getattr(self, n) is None else getattr(self, n).detach().cpu().numpy() for n in self._stats}

    def load_stats(self, stats: Dict[str, Optional[torch.Tensor]]) -> None:
        for name in self._stats:
            value = stats.get(name)
            setattr(self, name, None if value is None else value.detach().to(torch.float32))

    def _require_built(self) -> None:
        if not self.built:
            missing = [n for n in self._stats if getattr(self, n) is None]
            raise RuntimeError(f"{type(self).__name__} is not fitted: {missing} unknown; fit it or give them")

    # ---------------------------------------------------------- fitting
    def fit(self, dataset: Any) -> "Scaler":
        raise NotImplementedError

    def fit_with_env(self, env: Any) -> "Scaler":
        raise ValueError(f"{type(self).__name__} cannot be fitted from an environment; fit it on a dataset")

    # ------------------------------------------------------ (de)serialise
    def _params(self) -> Dict[str, Any]:
        params = {name: getattr(self, name) for name in self._options}
        for name, value in self.stats_numpy().items():
            params[name] = value
        return params

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self._kind, "type": self.get_type(), "params": {k: to_json_value(v) for k, v in self._params().items()}}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]):
        if data.get("type") != cls.get_type():
            raise ValueError(f"{cls.__name__} cannot load a {data.get('type')!r} record")
        return cls(**data["params"])

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_dict() == other.to_dict()  # type: ignore[union-attr]

    __hash__ = nn.Module.__hash__

    def extra_repr(self) -> str:
        parts = [f"{n}={getattr(self, n)!r}" for n in self._options]
        parts += [f"{n}={'fitted' if getattr(self, n) is not None else None}" for n in self._stats]
        return ", ".join(parts)

    def __deepcopy__(self, memo):
        new = type(self).from_dict(self.to_dict())
        new.to(self._device())
        return new
