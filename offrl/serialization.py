"""Configs as JSON data.

Every config, factory and scaler serialises to ``{"kind", "type", "params"}``
and is rebuilt through a registry keyed by kind and type name, so a model
file holds JSON and tensors only: loading one never runs code from it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Dict, Optional, TypeVar

import numpy as np

from ._model_file import read_payload, write_payload
from .model_rules import (
    check_against_file,
    check_config_lists,
    check_memory,
    check_model_sizes,
    check_payload,
    declared_shapes,
    planned_state,
    saved_observation_keys,
)

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


def register(kind: str, type_name: Optional[str] = None) -> Callable[[T], T]:
    """Class decorator: make ``cls`` rebuildable from JSON under ``kind``, by
    the name its ``get_type()`` gives. With ``type_name`` (``@register(
    "algorithm", "sac")``) that name is given here and becomes the class's
    ``get_type()``, so the class does not write one."""

    def decorator(cls: T) -> T:
        if type_name is not None:
            if "get_type" in vars(cls):
                raise TypeError(f"{cls.__name__} defines get_type and is registered with a type name: give one")

            def get_type() -> str:
                return type_name

            cls.get_type = staticmethod(get_type)  # type: ignore[attr-defined]
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
# Model files: offrl's JSON and tensors in one safetensors file (the bytes:
# :mod:`offrl._model_file`), read without any unpickler, so loading a file
# never runs code from it; then every entry is checked here before anything
# is built from it.

MODEL_FORMAT = "offrl.model"
MODEL_FORMAT_VERSION = 2


def model_payload(algo: Any) -> Dict[str, Any]:
    """What a model file holds: the format marks, offrl's version, the
    config record (``params``, JSON text) and ``algo.get_state()``."""
    from ._version import __version__

    return {
        "format": MODEL_FORMAT,
        "format_version": MODEL_FORMAT_VERSION,
        "offrl_version": __version__,
        "params": json.dumps(algo.to_params(), allow_nan=True, separators=(",", ":")),
        **algo.get_state(),
    }


def save_learnable(algo: Any, fname: str) -> None:
    """Write ``algo`` (config, networks, optimizer states, fitted scalers,
    grad_step: ``algo.get_state()``) to ``fname`` atomically."""
    write_payload(model_payload(algo), fname)


def read_model_file(fname: str) -> Dict[str, Any]:
    """The checked content of an offrl model file (tensors on the CPU).

    Everything is checked before anything is built from it: the entries,
    their types, and every tensor (real numbers, finite, floating point
    where a float is expected); a ``ValueError`` names the file and the
    entry (``modules['q_funcs']['head.weight']``)."""
    import os

    name = os.fspath(fname)
    if not os.path.exists(name):
        raise FileNotFoundError(f"no model file at {name}")
    if not os.path.isfile(name):
        raise ValueError(f"{name} is not a regular file")
    payload = read_payload(name)
    check_payload(payload, name)
    return payload


def config_from_params(params: Dict[str, Any], name: str) -> Any:
    record = params.get("config")
    check_config_lists(record, "config", name)
    if not isinstance(record, dict) or record.get("kind") != "algorithm":
        raise ValueError(f"{name} has a malformed config record: 'config' is not an algorithm record")
    try:
        config = from_json_value(record)
    except KeyError as e:
        raise ValueError(f"{name} has a malformed config record: missing {e}") from None
    except (TypeError, AttributeError, IndexError, OverflowError) as e:
        raise ValueError(f"{name} has a malformed config record: {e}") from None
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    except RecursionError:
        raise ValueError(f"{name} has a malformed config record: nested too deeply") from None
    if not callable(getattr(config, "algorithm_class", None)):
        raise ValueError(f"{name} has a malformed config record: 'config' is not an algorithm config")
    return config


def _build_from_params(params: Dict[str, Any], device: Any, name: str, payload: Optional[Dict[str, Any]] = None) -> Any:
    config = config_from_params(params, name)
    cls = config.algorithm_class()
    if cls.evaluates_algorithm:
        raise TypeError(f"{name} holds a {cls.__name__}, which needs the algorithm it evaluates: "
                        f"{cls.__name__}.load({name!r}, algo=trained)")
    shape, action_size = declared_shapes(params, name)
    keys = saved_observation_keys(params, shape, name)
    planned = planned_state(config, shape, action_size, name, params)
    if payload is not None:
        check_against_file(planned, payload, name, params)
    else:
        check_memory(planned, name, params)
    algo = config.create(device=device if device is not None else False)
    try:
        algo.create_impl(shape, action_size)
    except (ValueError, TypeError) as e:  # e.g. a scaler's recorded statistics of another shape
        raise ValueError(f"{name}: {e}") from None
    if keys is not None:
        algo.observation_keys = keys
    return algo


def load_learnable(fname: str, device: Any = None) -> Any:
    """Rebuild an algorithm saved with ``algo.save(fname)``: config,
    networks, optimizer states, fitted scalers and grad_step.

    Raises ``ValueError`` naming the file for corrupt, truncated or foreign
    files, for unknown algorithm or encoder types, for declared sizes that
    disagree with the stored tensors, and for state that does not fit; no
    network is allocated before the sizes are checked."""
    import os

    name = os.fspath(fname)
    payload = read_model_file(name)
    algo = _build_from_params(payload["params"], device, name, payload)
    algo.load_state(payload, name)
    return algo


def load_state_into(algo: Any, fname: str) -> None:
    """Load a model file's state into an algorithm of the same type and
    shapes; on any error the algorithm is left as it was."""
    import os

    name = os.fspath(fname)
    payload = read_model_file(name)
    params = payload["params"]
    if params.get("algorithm") != algo.config.get_type():
        raise ValueError(f"{name} holds a {params.get('algorithm')!r} model, not {algo.config.get_type()!r}")
    if not algo.is_built:
        evaluated = algo.algo if algo.evaluates_algorithm else None
        shape, action_size = check_model_sizes(payload, name, algo.config, evaluated)
        algo.create_impl(shape, action_size)
    algo.load_state(payload, name)


def algo_from_params_json(fname: str, device: Any = False) -> Any:
    import os

    name = os.fspath(fname)
    try:
        with open(name) as f:
            params = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise ValueError(f"{name} is not valid JSON: {e}") from None
    if not isinstance(params, dict):
        raise ValueError(f"{name} is not a params record: expected a JSON object")
    return _build_from_params(params, device, name)
