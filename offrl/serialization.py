"""Configs as JSON data.

Every config, factory and scaler serialises to ``{"kind", "type", "params"}``
and is rebuilt through a registry keyed by kind and type name, so a model
file holds JSON and tensors only: loading one never runs code from it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Dict, TypeVar

import numpy as np

__all__ = [
    "register",
    "registered",
    "lookup",
    "to_json_value",
    "from_json_value",
    "Serializable",
    "dumps",
]

_REGISTRY: Dict[str, Dict[str, type]] = {}

T = TypeVar("T", bound=type)


def register(kind: str) -> Callable[[T], T]:
    """Class decorator: make ``cls`` rebuildable from JSON under ``kind``."""

    def decorator(cls: T) -> T:
        _REGISTRY.setdefault(kind, {})[cls.get_type()] = cls
        return cls

    return decorator


def registered(kind: str) -> Dict[str, type]:
    """Registered classes of a kind, by type name."""
    return dict(_REGISTRY.get(kind, {}))


def lookup(kind: str, type_name: str) -> type:
    try:
        return _REGISTRY[kind][type_name]
    except KeyError:
        known = sorted(_REGISTRY.get(kind, {}))
        raise ValueError(
            f"unknown {kind} type {type_name!r}; known: {known}. A custom {kind} must be "
            "registered before loading (e.g. register_encoder_factory(MyFactory))"
        ) from None


def to_json_value(value: Any) -> Any:
    """A JSON-compatible form of a config field value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "detach") and hasattr(value, "tolist"):  # torch tensor
        return value.detach().cpu().tolist()
    if isinstance(value, Serializable):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [to_json_value(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json_value(v) for k, v in value.items()}
    raise TypeError(f"cannot serialise {type(value).__name__} value {value!r} to JSON")


def from_json_value(value: Any) -> Any:
    """Inverse of :func:`to_json_value` for nested registered objects."""
    if isinstance(value, dict):
        if set(value) == {"kind", "type", "params"}:
            cls = lookup(value["kind"], value["type"])
            return cls.from_dict(value)
        return {k: from_json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_json_value(v) for v in value]
    return value


class Serializable:
    """Mixin for dataclass configs and factories.

    Subclasses set ``_kind`` and define ``get_type()``; their dataclass fields
    are the parameters.
    """

    _kind: str = ""

    @staticmethod
    def get_type() -> str:
        raise NotImplementedError

    def _params(self) -> Dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.init}  # type: ignore[arg-type]

    def to_dict(self) -> Dict[str, Any]:
        return {
            "kind": self._kind,
            "type": self.get_type(),
            "params": {k: to_json_value(v) for k, v in self._params().items()},
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]):
        if data.get("type") != cls.get_type():
            raise ValueError(f"{cls.__name__} cannot load a {data.get('type')!r} record")
        params = {k: from_json_value(v) for k, v in data["params"].items()}
        names = {f.name for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
        unknown = set(params) - names
        if unknown:
            raise ValueError(f"{cls.__name__} has no parameters {sorted(unknown)}")
        return cls._from_params(params)

    @classmethod
    def _from_params(cls, params: Dict[str, Any]):
        return cls(**params)

    def to_json(self) -> str:
        return dumps(self.to_dict())


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=False, allow_nan=True)


# ---------------------------------------------------------------------------
# Model files: one torch zip archive holding only JSON text, tensors and plain
# numbers (read back with ``torch.load(weights_only=True)``, which refuses
# anything else), so loading a file never runs code from it.

MODEL_FORMAT = "offrl.model"
MODEL_FORMAT_VERSION = 1


def _atomic_torch_save(payload: Dict[str, Any], fname: str) -> None:
    import os
    import tempfile

    import torch

    path = os.fspath(fname)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".offrl-", suffix=".d3.tmp", dir=directory)
    os.close(fd)
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def save_learnable(algo: Any, fname: str) -> None:
    """Write ``algo`` (config, networks, optimizer states, fitted scalers,
    grad_step: ``algo.get_state()``) to ``fname``."""
    from ._version import __version__

    state = algo.get_state()
    payload = {
        "format": MODEL_FORMAT,
        "format_version": MODEL_FORMAT_VERSION,
        "offrl_version": __version__,
        "params": dumps(algo.to_params()),
        **state,
    }
    _atomic_torch_save(payload, fname)


def read_model_file(fname: str) -> Dict[str, Any]:
    """The checked content of an offrl model file (tensors on the CPU)."""
    import os

    import torch

    name = os.fspath(fname)
    if not os.path.exists(name):
        raise FileNotFoundError(f"no model file at {name}")
    try:
        payload = torch.load(name, map_location="cpu", weights_only=True)
    except Exception as e:  # torch raises many types here (unpickling refused, bad zip, EOF ...)
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(
            f"{name} is not a readable offrl model file (corrupt, truncated, or saved by another program "
            f"with objects that are not plain tensors): {first}"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != MODEL_FORMAT:
        raise ValueError(f"{name} is not an offrl model file: it has no {MODEL_FORMAT!r} format mark")
    version = payload.get("format_version")
    if version != MODEL_FORMAT_VERSION:
        raise ValueError(f"{name} has model format version {version}; this offrl reads version {MODEL_FORMAT_VERSION}")
    missing = [k for k in ("params", "grad_step", "modules", "optimizers", "scalers") if k not in payload]
    if missing:
        raise ValueError(f"{name} is an incomplete offrl model file: it is missing {missing}")
    try:
        payload["params"] = json.loads(payload["params"])
    except (TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"{name} has an unreadable config record: {e}") from None
    return payload


def config_from_params(params: Dict[str, Any], name: str) -> Any:
    try:
        return from_json_value(params["config"])
    except (KeyError, TypeError) as e:
        raise ValueError(f"{name} has a malformed config record: missing {e}") from None
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def _build_from_params(params: Dict[str, Any], device: Any, name: str) -> Any:
    config = config_from_params(params, name)
    cls = config.algorithm_class()
    if cls.evaluates_algorithm:
        raise TypeError(f"{name} holds a {cls.__name__}, which needs the algorithm it evaluates: "
                        f"{cls.__name__}.load({name!r}, algo=trained)")
    algo = config.create(device=device if device is not None else False)
    shape = params.get("observation_shape")
    action_size = params.get("action_size")
    if shape is None or action_size is None:
        raise ValueError(f"{name} does not record the observation shape and action size")
    algo.create_impl(shape, action_size)
    return algo


def load_learnable(fname: str, device: Any = None) -> Any:
    """Rebuild an algorithm saved with ``algo.save(fname)``: config,
    networks, optimizer states, fitted scalers and grad_step.

    Raises ``ValueError`` naming the file for corrupt, truncated or foreign
    files and for unknown algorithm or encoder types."""
    import os

    name = os.fspath(fname)
    payload = read_model_file(name)
    algo = _build_from_params(payload["params"], device, name)
    algo.load_state(payload, name)
    return algo


def load_state_into(algo: Any, fname: str) -> None:
    """Load a model file's state into an algorithm of the same type and shapes."""
    import os

    name = os.fspath(fname)
    payload = read_model_file(name)
    params = payload["params"]
    if params.get("algorithm") != algo.config.get_type():
        raise ValueError(f"{name} holds a {params.get('algorithm')!r} model, not {algo.config.get_type()!r}")
    if not algo.is_built:
        algo.create_impl(params["observation_shape"], params["action_size"])
    algo.load_state(payload, name)


def algo_from_params_json(fname: str, device: Any = False) -> Any:
    import os

    name = os.fspath(fname)
    try:
        with open(name) as f:
            params = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(f"{name} is not valid JSON: {e}") from None
    return _build_from_params(params, device, name)
