"""Scaler base: a torch module whose statistics are numpy values in public
and tensors inside.

A scaler is configured with explicit statistics or none, and fitted with
``fit(dataset)`` (every stored step), ``fit_with_transition_picker(episodes,
picker)`` / ``fit_with_trajectory_slicer(episodes, slicer)`` (d3rlpy's two
ways) or ``fit_with_env(env)`` where the environment's spaces say enough.
Algorithms fit a *copy* of the scaler in their config, so the user's config
is never mutated, and save the fitted statistics with the model.

As in d3rlpy, a statistic reads as a numpy array (observation and action
scalers) or a float (reward scalers); ``transform`` / ``reverse_transform``
work on tensors with a float32 copy kept on the module's device, and
``transform_numpy`` / ``reverse_transform_numpy`` on numpy arrays in
float64. The statistics are float64 buffers in ``state_dict`` (model files
written before kept float32 ones, which load as they are). Because scalers
are modules, exported policies carry them.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from typing import Any, Dict, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from .._d3rlpy_json import to_d3rlpy_json
from .._safety import load_json
from ..serialization import Serializable, from_json_value, to_json_value
from ._fitting import FitData

__all__ = [
    "Scaler", "MinMaxScaling", "as_stat", "min_max_span", "NotFittableFromEnvError", "add_leading_dims",
    "add_leading_dims_numpy",
]

Stat = Union[np.ndarray, np.float64]


class NotFittableFromEnvError(ValueError, NotImplementedError):
    """The scaler's statistics cannot be read from an environment (a
    ``ValueError``, and a ``NotImplementedError`` as d3rlpy raises)."""


def as_stat(value: Any, name: str) -> Optional[np.ndarray]:
    """``value`` as a finite float64 array (None stays None)."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor):
        array = value.detach().cpu().to(torch.float64).numpy()
    else:
        try:
            array = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError(f"{name} must be an array of numbers, got {type(value).__name__}") from None
    if not np.isfinite(array).all():
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(array))[0])
        raise ValueError(f"{name} holds nan or inf (at index {index}); expected finite numbers")
    return array


def _compute_name(name: str) -> str:
    return f"{name}_float32"


def _dataclass_fields(cls: type) -> Sequence[str]:
    """Fields of a scaler written as a d3rlpy-style ``@dataclass`` subclass."""
    if dataclasses.is_dataclass(cls):
        return [f.name for f in dataclasses.fields(cls) if f.init]
    return ()


def _is_numeric(value: Any) -> bool:
    if value is None or isinstance(value, (bool, np.bool_, str)):
        return False
    if isinstance(value, (int, float, np.integer, np.floating)):
        return True
    return isinstance(value, np.ndarray) and np.issubdtype(value.dtype, np.number)


def _plain(value: torch.Tensor) -> Any:
    """A tensor from a model file as a float (0-d) or a float64 array."""
    array = value.detach().cpu().to(torch.float64).numpy()
    return float(array) if array.ndim == 0 else array


class _ScalerMeta(type):
    """Lets a custom scaler be written as in d3rlpy (a ``@dataclass``
    subclass whose generated ``__init__`` never calls the base one): the
    module is set up before ``__init__`` runs, and the hash that
    ``@dataclass`` removes (torch keeps modules in sets) is restored."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls.__dict__.get("__hash__", 0) is None:
            cls.__hash__ = nn.Module.__hash__  # type: ignore[assignment]
        if dataclasses.is_dataclass(cls) and "_plain_stats" not in cls.__dict__:
            # its statistics: the fields that default to None or a number
            # (set when fitted; saved in model files as float64 tensors)
            cls._plain_stats = True  # type: ignore[attr-defined]
            cls._stats = tuple(f.name for f in dataclasses.fields(cls)  # type: ignore[attr-defined]
                               if f.init and (f.default is None or _is_numeric(f.default)))
        obj = cls.__new__(cls)  # type: ignore[call-overload]
        nn.Module.__init__(obj)
        obj.__init__(*args, **kwargs)
        return obj


class Scaler(nn.Module, Serializable, metaclass=_ScalerMeta):
    """Base of all scalers. Subclasses declare ``_stats`` (names of the
    statistics), ``_options`` (names of plain float/bool parameters) and
    ``_scalar_stats`` (statistics are single floats, as for reward scalers)."""

    _stats: Sequence[str] = ()
    _options: Sequence[str] = ()
    _scalar_stats: bool = False
    #: statistics are plain attributes (a d3rlpy-style ``@dataclass`` scaler)
    _plain_stats: bool = False

    def __init__(self, **params: Any) -> None:
        nn.Module.__init__(self)
        for name in self._options:
            setattr(self, name, params[name])
        for name in self._stats:
            self.register_buffer(name, None)
            self.register_buffer(_compute_name(name), None, persistent=False)
            self._assign_stat(name, params.get(name))

    # --------------------------------------------------------------- state
    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._stats and "_buffers" in self.__dict__:
            if not type(self)._plain_stats:
                self._assign_stat(name, value)
                return
            if isinstance(value, torch.Tensor):
                value = _plain(value)  # a custom scaler's statistic read back from a model file
                default = {f.name: f.default for f in dataclasses.fields(self)}.get(name)  # type: ignore[arg-type]
                if isinstance(default, (int, np.integer)) and isinstance(value, float) and value.is_integer():
                    value = int(value)  # an int field stays an int
        super().__setattr__(name, value)

    def _save_to_state_dict(self, destination, prefix, keep_vars) -> None:  # torch hook
        """Besides the buffers, the numeric statistics of a d3rlpy-style
        ``@dataclass`` scaler, as float64 tensors."""
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if type(self)._plain_stats:
            for name in self._stats:
                value = getattr(self, name)
                if _is_numeric(value):
                    destination[prefix + name] = torch.as_tensor(np.asarray(value, dtype=np.float64))

    def _assign_stat(self, name: str, value: Any) -> None:
        """Set statistic ``name`` from an array, a number, a tensor or None:
        the public numpy value, the float64 state buffer and the float32
        copy ``transform`` uses, on the module's device."""
        label = f"{type(self).__name__}.{name}"
        stat = as_stat(value, label)
        if stat is None:
            self.__dict__[name] = None
            self._buffers[name] = None
            self._buffers[_compute_name(name)] = None
            return
        public: Stat
        if self._scalar_stats:
            if stat.size != 1:
                raise ValueError(f"{label} must be a single number, got an array of shape {stat.shape}")
            stat = stat.reshape(())
            public = np.float64(stat)
        else:
            stat = np.array(stat)  # an owned copy
            public = stat
        device = self._device()
        self.__dict__[name] = public
        self._buffers[name] = torch.as_tensor(stat, dtype=torch.float64).to(device)
        self._buffers[_compute_name(name)] = torch.as_tensor(stat, dtype=torch.float32).to(device)

    def _t(self, name: str) -> torch.Tensor:
        """The float32 tensor of statistic ``name`` (checked built first)."""
        return self._buffers[_compute_name(name)]  # type: ignore[return-value]

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs) -> None:  # noqa: D401 (torch hook)
        for name in self._stats:
            key = prefix + name
            if key in state_dict:
                setattr(self, name, state_dict[key])
            elif strict and getattr(self, name) is not None:
                missing_keys.append(key)

    @property
    def built(self) -> bool:
        """Whether every statistic is known (given or fitted)."""
        return all(getattr(self, name) is not None for name in self._stats)

    def _set_stats(self, **stats: Any) -> None:
        for name, value in stats.items():
            self._assign_stat(name, value)

    def _device(self) -> torch.device:
        for name in self._stats:
            value = self._buffers.get(name)
            if value is not None:
                return value.device
        return getattr(self, "_home_device", torch.device("cpu"))

    def _apply(self, fn, recurse: bool = True):  # remember the device of a scaler with no statistics yet
        result = super()._apply(fn, recurse)
        try:
            probe = fn(torch.zeros(()))
        except Exception:  # a function that only suits real buffers: nothing to remember
            return result
        if isinstance(probe, torch.Tensor):
            self.__dict__["_home_device"] = probe.device
        return result

    def stats_numpy(self) -> Dict[str, Optional[np.ndarray]]:
        """Each statistic as a float64 numpy array (None when unknown)."""
        return {n: None if getattr(self, n) is None else np.asarray(getattr(self, n), dtype=np.float64)
                for n in self._stats}

    def load_stats(self, stats: Dict[str, Any]) -> None:
        """Set the statistics from arrays or tensors by name (None: unknown)."""
        for name in self._stats:
            self._assign_stat(name, stats.get(name))

    def _require_built(self) -> None:
        if not self.built:
            missing = [n for n in self._stats if getattr(self, n) is None]
            raise RuntimeError(f"{type(self).__name__} is not fitted: {missing} unknown; fit it or give them")

    # ---------------------------------------------------------- fitting
    def _fit(self, data: FitData) -> None:
        """Compute the statistics from ``data`` (nothing to do by default)."""

    def fit(self, dataset: Any) -> "Scaler":
        """Fit on every stored step of ``dataset``; returns ``self``. A
        custom scaler that only defines d3rlpy's
        ``fit_with_transition_picker`` is fitted with it, as d3rlpy's
        algorithms do (``dataset.episodes``, ``dataset.transition_picker``)."""
        cls = type(self)
        if cls._fit is Scaler._fit and cls.fit_with_transition_picker is not Scaler.fit_with_transition_picker:
            self.fit_with_transition_picker(dataset.episodes, dataset.transition_picker)
            return self
        self._fit(FitData.from_dataset(dataset))
        return self

    def fit_with_transition_picker(self, episodes: Sequence[Any], transition_picker: Any) -> "Scaler":
        """Fit on the transitions ``transition_picker`` returns for every
        transition of ``episodes`` (how d3rlpy's Q-learning algorithms fit
        scalers: ``dataset.episodes, dataset.transition_picker``); returns
        ``self``."""
        self._fit(FitData.from_transition_picker(episodes, transition_picker))
        return self

    def fit_with_trajectory_slicer(self, episodes: Sequence[Any], trajectory_slicer: Any) -> "Scaler":
        """Fit on the whole-episode trajectories ``trajectory_slicer``
        returns (how d3rlpy's Decision Transformer fits scalers); returns
        ``self``."""
        self._fit(FitData.from_trajectory_slicer(episodes, trajectory_slicer))
        return self

    def fit_with_env(self, env: Any) -> "Scaler":
        raise NotFittableFromEnvError(
            f"{type(self).__name__} cannot be fitted from an environment; fit it on a dataset"
        )

    # ---------------------------------------------------------- numpy side
    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _np(self, name: str) -> np.ndarray:
        return np.asarray(getattr(self, name), dtype=np.float64)

    # ------------------------------------------------------ (de)serialise
    def _params(self) -> Dict[str, Any]:
        if type(self)._plain_stats:
            return {name: getattr(self, name) for name in _dataclass_fields(type(self))}
        params = {name: getattr(self, name) for name in self._options}
        for name, value in self.stats_numpy().items():
            params[name] = value
        return params

    def to_dict(self) -> Dict[str, Any]:
        return {"kind": self._kind, "type": self.get_type(), "params": {k: to_json_value(v) for k, v in self._params().items()}}

    @classmethod
    def from_dict(cls, data: Dict[str, Any]):
        if not isinstance(data, dict):
            raise TypeError(f"{cls.__name__}.from_dict takes a dict, got {type(data).__name__}")
        if "params" not in data or "type" not in data:  # d3rlpy's form: the parameters alone
            return cls._from_plain_params(data)
        if data.get("type") != cls.get_type():
            raise ValueError(f"{cls.__name__} cannot load a {data.get('type')!r} record")
        return cls._from_plain_params(data["params"])

    @classmethod
    def _from_plain_params(cls, params: Dict[str, Any]):
        if not isinstance(params, dict):
            raise TypeError(f"{cls.__name__} parameters must be a dict, got {type(params).__name__}")
        allowed = set(cls._stats) | set(cls._options) | set(_dataclass_fields(cls))
        unknown = sorted(set(params) - allowed)
        if unknown:
            raise ValueError(f"{cls.__name__} has no parameters {unknown}; expected some of {sorted(allowed)}")
        if cls._plain_stats:  # lists in JSON are numpy arrays again, as d3rlpy's numpy fields
            params = {k: np.asarray(v, dtype=np.float64) if k in cls._stats and isinstance(v, list) else v
                      for k, v in params.items()}
        return cls(**params)

    def serialize_to_dict(self) -> Dict[str, Any]:
        """The parameters as a JSON-compatible dict, as d3rlpy's
        ``serialize_to_dict`` (``{"mean": [...], "std": [...], "eps": ...}``;
        nested scalers as ``{"type", "params"}``)."""
        return {name: to_d3rlpy_json(value) for name, value in self.to_dict()["params"].items()}

    def serialize(self) -> str:
        """The parameters as a JSON string (d3rlpy's ``serialize``)."""
        return json.dumps(self.serialize_to_dict())

    @classmethod
    def deserialize_from_dict(cls, dict_config: Dict[str, Any]):
        """Rebuild from :meth:`serialize_to_dict`'s dict (or ``to_dict``'s)."""
        return cls.from_dict(dict_config)

    @classmethod
    def deserialize(cls, serialized_config: str):
        """Rebuild from :meth:`serialize`'s JSON string (or ``to_json``'s)."""
        if not isinstance(serialized_config, (str, bytes, bytearray)):
            raise TypeError(f"serialized_config must be a JSON string, got {type(serialized_config).__name__}")
        return cls.from_dict(load_json(serialized_config, "serialized_config"))

    from_json = deserialize

    @classmethod
    def deserialize_from_file(cls, path: str):
        """Rebuild from a file holding :meth:`serialize`'s JSON."""
        with open(path, "rb") as f:
            return cls.from_dict(load_json(f.read(), str(path)))

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
        if type(self)._plain_stats:  # fields of any type: copy them as they are
            plain = type(self).__new__(type(self))
            memo[id(self)] = plain
            for key, value in self.__dict__.items():
                plain.__dict__[key] = copy.deepcopy(value, memo)
            return plain
        new = type(self).from_dict(self.to_dict())
        new.to(self._device())
        return new


def min_max_span(minimum: Any, maximum: Any) -> Any:
    """``maximum - minimum``, 1 where it is not > 0 (a constant dimension), for tensors, numpy values or floats."""
    span = maximum - minimum
    if isinstance(span, torch.Tensor):
        return torch.where(span > 0, span, torch.ones_like(span))
    if isinstance(span, (np.ndarray, np.generic)):
        return np.where(span > 0, span, 1.0)
    return span if span > 0 else 1.0


class MinMaxScaling(Scaler):
    """Base of the min-max observation and action scalers: maps ``[minimum, maximum]``
    to ``[-1, 1]`` per dimension (a constant dimension maps to ``-1``), on tensors
    (float32 statistics) and on numpy arrays (float64)."""

    _stats = ("minimum", "maximum")

    def __init__(self, minimum: Any = None, maximum: Any = None) -> None:
        super().__init__(minimum=minimum, maximum=maximum)

    @staticmethod
    def get_type() -> str:
        return "min_max"

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        minimum = self._t("minimum")
        return (x - minimum) / min_max_span(minimum, self._t("maximum")) * 2.0 - 1.0

    def reverse_transform(self, x: torch.Tensor) -> torch.Tensor:
        self._require_built()
        minimum = self._t("minimum")
        return (x + 1.0) / 2.0 * min_max_span(minimum, self._t("maximum")) + minimum

    def transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        minimum = self._np("minimum")
        return (np.asarray(x) - minimum) / min_max_span(minimum, self._np("maximum")) * 2.0 - 1.0

    def reverse_transform_numpy(self, x: np.ndarray) -> np.ndarray:
        self._require_built()
        minimum = self._np("minimum")
        return (np.asarray(x) + 1.0) / 2.0 * min_max_span(minimum, self._np("maximum")) + minimum


def decode_scaler_list(values: Sequence[Any]) -> list:
    """Scalers given as objects or as ``to_dict`` records (JSON)."""
    return [from_json_value(v) if isinstance(v, dict) else v for v in values]


def _leading_shape(stat_shape: Sequence[int], target_shape: Sequence[int]) -> list:
    extra = len(target_shape) - len(stat_shape)
    if extra < 0 or tuple(target_shape[extra:]) != tuple(stat_shape):
        raise ValueError(f"a statistic of shape {tuple(stat_shape)} does not match the trailing axes of "
                         f"an input of shape {tuple(target_shape)}")
    return [1] * extra + list(stat_shape)


def add_leading_dims(x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``x`` reshaped with leading axes of size 1 to broadcast against
    ``target`` (d3rlpy's helper); ValueError unless ``x``'s shape is the
    trailing part of ``target``'s."""
    return torch.reshape(x, _leading_shape(x.shape, target.shape))


def add_leading_dims_numpy(x: np.ndarray, target: np.ndarray) -> np.ndarray:
    """numpy version of :func:`add_leading_dims`."""
    return np.reshape(x, _leading_shape(np.shape(x), np.shape(target)))
