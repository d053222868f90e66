"""Configs as JSON data.

Every config, factory and scaler serialises to ``{"kind", "type", "params"}``
and is rebuilt through a registry keyed by kind and type name, so a model
file holds JSON and tensors only: loading one never runs code from it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Callable, Dict, Optional, TypeVar

import numpy as np

from ._model_file import read_payload, write_payload
from ._safety import load_json

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


#: the top-level entries of a model file (a checkpoint adds ``resume``, JSON text, and ``random_tensors``)
_PAYLOAD_KEYS = ("format", "format_version", "offrl_version", "params", "grad_step", "modules", "optimizers", "scalers",
                 "resume", "random_tensors")
_SCALER_NAMES = ("observation_scaler", "action_scaler", "reward_scaler")
#: no config list is longer (a longer one, e.g. a million hidden layers, is a size bomb)
MAX_CONFIG_LIST = 4096
#: config parameters that set network sizes, named in size errors
_SIZE_FIELDS = ("n_critics", "hidden_units", "feature_size", "n_quantiles", "n_greedy_quantiles", "embed_size",
                "n_action_samples", "latent_size", "num_heads", "context_size", "max_timestep")


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
    missing = [k for k in ("params", "grad_step", "modules", "optimizers", "scalers") if k not in payload]
    if missing:
        raise ValueError(f"{name} is an incomplete offrl model file: it is missing {missing}")
    extra = sorted(str(k) for k in payload if k not in _PAYLOAD_KEYS)
    if extra:
        raise ValueError(f"{name} has unknown entries {extra}; an offrl model file holds only {list(_PAYLOAD_KEYS)}")
    for key in ("offrl_version", "resume"):
        if key in payload and not isinstance(payload[key], str):
            raise ValueError(f"{name}: {key!r} is a {type(payload[key]).__name__}; expected text")
    if "random_tensors" in payload and not isinstance(payload["random_tensors"], dict):
        raise ValueError(f"{name}: 'random_tensors' is a {type(payload['random_tensors']).__name__}; expected a dict")
    if not isinstance(payload["params"], str):
        raise ValueError(f"{name} has an unreadable config record: 'params' is a {type(payload['params']).__name__}, not JSON text")
    try:
        payload["params"] = load_json(payload["params"], f"{name}: its config record")
    except ValueError as e:  # the parser's own errors (an int of more digits than Python converts) name no file
        raise ValueError(str(e) if str(e).startswith(name) else f"{name}: its config record: {e}") from None
    if not isinstance(payload["params"], dict):
        raise ValueError(f"{name} has a malformed config record: expected a JSON object")
    _check_state_entries(payload, name)
    return payload


def _check_state_entries(payload: Dict[str, Any], name: str) -> None:
    """Types and values of a model file's state (not yet its shapes)."""
    grad_step = payload["grad_step"]
    if isinstance(grad_step, bool) or not isinstance(grad_step, int) or grad_step < 0:
        raise ValueError(f"{name}: grad_step is {grad_step!r}; expected a non-negative int")
    for entry in ("modules", "scalers"):
        table = payload[entry]
        if not isinstance(table, dict):
            raise ValueError(f"{name}: {entry!r} is a {type(table).__name__}; expected a dict of state dicts")
        for key, state in table.items():
            where = f"{entry}[{key!r}]"
            if not isinstance(key, str) or not isinstance(state, dict):
                raise ValueError(f"{name}: {where} is not a named state dict")
            if entry == "scalers" and key not in _SCALER_NAMES:
                raise ValueError(f"{name}: {where} is not a scaler of an algorithm; expected one of {list(_SCALER_NAMES)}")
            for tensor_key, value in state.items():
                _check_tensor(value, f"{where}[{tensor_key!r}]", name, floating=entry == "scalers")
    optimizers = payload["optimizers"]
    if not isinstance(optimizers, dict):
        raise ValueError(f"{name}: 'optimizers' is a {type(optimizers).__name__}; expected a dict of optimizer states")
    for key, state in optimizers.items():
        where = f"optimizers[{key!r}]"
        if isinstance(key, str) and isinstance(state, dict) and set(state) == {"optimizer", "lr_scheduler"}:
            # an optimizer with a learning-rate scheduler (AdamWFactory(lr_scheduler_factory=...))
            _check_scheduler_state(state["lr_scheduler"], f"{where}['lr_scheduler']", name)
            where, state = f"{where}['optimizer']", state["optimizer"]
        if not isinstance(key, str) or not isinstance(state, dict) or set(state) != {"state", "param_groups"}:
            raise ValueError(f"{name}: {where} is not an optimizer state (a dict of 'state' and 'param_groups')")
        if not isinstance(state["state"], dict) or not isinstance(state["param_groups"], list):
            raise ValueError(f"{name}: {where} is not an optimizer state (a dict of 'state' and 'param_groups')")
        for index, per_param in state["state"].items():
            if not isinstance(per_param, dict):
                raise ValueError(f"{name}: {where}['state'][{index!r}] is not a dict")
            for field, value in per_param.items():
                if hasattr(value, "dtype"):
                    _check_tensor(value, f"{where}['state'][{index!r}][{field!r}]", name, floating=False)


def _check_scheduler_state(state: Any, where: str, name: str) -> None:
    """A torch learning-rate scheduler's state: named plain values (numbers,
    strings, booleans, None and lists of them), finite."""
    if not isinstance(state, dict) or not all(isinstance(k, str) for k in state):
        raise ValueError(f"{name}: {where} is not a learning-rate scheduler state (a dict of named values)")

    def plain(value: Any) -> bool:
        if value is None or isinstance(value, (bool, str, int)):
            return True
        if isinstance(value, float):
            return math.isfinite(value)
        if isinstance(value, (list, tuple)):
            return all(plain(v) for v in value)
        if isinstance(value, dict):
            return all(isinstance(k, (str, int)) and plain(v) for k, v in value.items())
        return False

    for field, value in state.items():
        if not plain(value):
            raise ValueError(f"{name}: {where}[{field!r}] is {type(value).__name__} {value!r:.60}; "
                             "expected finite numbers, strings or lists of them")


def _check_tensor(value: Any, where: str, name: str, floating: bool) -> None:
    """``value`` is a tensor of finite real numbers (floating point when
    ``floating``: scaler statistics)."""
    import torch

    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{name}: {where} is a {type(value).__name__}; expected a tensor")
    if value.is_complex():
        raise ValueError(f"{name}: {where} holds complex numbers ({value.dtype}); expected real numbers")
    if value.is_floating_point():
        finite = torch.isfinite(value)
        if not bool(finite.all()):
            index = tuple(int(i) for i in torch.nonzero(~finite)[0])
            raise ValueError(f"{name}: {where} holds {float(value[index])} at index {index}; expected finite numbers")
    elif floating:
        raise ValueError(f"{name}: {where} has dtype {value.dtype}; expected floating-point statistics")
    elif value.dtype not in (torch.int64, torch.int32, torch.bool):
        raise ValueError(f"{name}: {where} has dtype {value.dtype}; expected real numbers")


def config_from_params(params: Dict[str, Any], name: str) -> Any:
    record = params.get("config")
    _check_config_lists(record, "config", name)
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


def _check_config_lists(value: Any, where: str, name: str, depth: int = 0) -> None:
    if depth > 32:
        raise ValueError(f"{name}: the config record is nested too deeply at {where}")
    if isinstance(value, list):
        if len(value) > MAX_CONFIG_LIST:
            raise ValueError(f"{name}: {where} declares {len(value)} items; at most {MAX_CONFIG_LIST} are accepted")
        for i, item in enumerate(value):
            _check_config_lists(item, f"{where}[{i}]", name, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_config_lists(item, f"{where}.{key}", name, depth + 1)


def _declared_shapes(params: Dict[str, Any], name: str) -> Any:
    """The recorded observation shape and action size, checked to be positive ints."""
    shape, action_size = params.get("observation_shape"), params.get("action_size")
    if shape is None or action_size is None:
        raise ValueError(f"{name} does not record the observation shape and action size")

    def dims(value: Any, where: str) -> tuple:
        if not isinstance(value, list) or not value:
            raise ValueError(f"{name}: {where} is {value!r}; expected a non-empty list of positive ints")
        for d in value:
            if isinstance(d, bool) or not isinstance(d, int) or d < 1:
                raise ValueError(f"{name}: {where} is {value!r}; expected a non-empty list of positive ints")
        return tuple(value)

    if isinstance(shape, list) and shape and all(isinstance(s, list) for s in shape):
        if len(shape) > MAX_CONFIG_LIST:
            raise ValueError(f"{name}: observation_shape declares {len(shape)} parts; at most {MAX_CONFIG_LIST}")
        normalised: Any = [dims(s, f"observation_shape[{i}]") for i, s in enumerate(shape)]
    else:
        normalised = dims(shape, "observation_shape")
    if isinstance(action_size, bool) or not isinstance(action_size, int) or action_size < 1:
        raise ValueError(f"{name}: action_size is {action_size!r}; expected a positive int")
    return normalised, action_size


def _size_fields(params: Dict[str, Any]) -> str:
    """``observation_shape=..., action_size=...`` and the config's size parameters, for error messages."""
    found = [f"observation_shape={params.get('observation_shape')}", f"action_size={params.get('action_size')}"]

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{key}" if where else str(key)
                if key in _SIZE_FIELDS:
                    found.append(f"{path.replace('params.', '')}={item!r}"[:120])
                else:
                    walk(item, path)

    walk(params.get("config"), "")
    return ", ".join(found)


def _planned_state(config: Any, shape: Any, action_size: int, name: str, params: Dict[str, Any],
                   evaluated: Any = None) -> Dict[str, Any]:
    """What building ``config`` for these shapes would allocate, found by
    building it on torch's meta device (nothing allocated): module state
    shapes and dtypes by module, and optimizer names. ``evaluated``: the
    algorithm an FQE-like config evaluates."""
    import torch

    try:
        # scalers hold numpy statistics that cannot live on the meta device; they size no network
        bare = dataclasses.replace(config, **{k: None for k in _SCALER_NAMES if hasattr(config, k)})
        with torch.device("meta"):
            if evaluated is not None:
                probe = bare.algorithm_class()(algo=evaluated, config=bare, device=torch.device("meta"))
            else:
                probe = bare.create(device=torch.device("meta"))
            probe.create_impl(shape, action_size)
        modules = {
            key: {k: (tuple(v.shape), v.dtype) for k, v in module.state_dict().items()}
            for key, module in probe.modules.items()
        }
        return {"modules": modules, "optimizers": sorted(probe.optimizers)}
    except (ValueError, TypeError) as e:
        raise ValueError(f"{name}: the recorded config cannot be built ({_size_fields(params)}): {e}") from None
    except Exception as e:  # any failure to build a file's config on the meta device is the file's fault
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{name}: the recorded config cannot be built ({_size_fields(params)}): {first}") from None


def _check_against_file(planned: Dict[str, Any], payload: Dict[str, Any], name: str, params: Dict[str, Any]) -> None:
    """The sizes the config declares equal the tensors the file holds (so a
    config declaring 10**7 critics or 10**12 inputs is refused before
    anything is allocated), and the file has exactly the config's modules
    and optimizers."""
    import math

    stored = payload["modules"]
    for entry, expected, found in (("modules", set(planned["modules"]), set(stored)),
                                   ("optimizers", set(planned["optimizers"]), set(payload["optimizers"]))):
        if found - expected:
            raise ValueError(f"{name}: {entry} {sorted(found - expected)} are not part of the recorded algorithm "
                             f"(expected {sorted(expected)})")
        if expected - found:
            what = "weights" if entry == "modules" else "optimizer state"
            raise ValueError(f"{name} has no {what} for {sorted(expected - found)}")
    for key, expected_state in planned["modules"].items():
        state = stored[key]
        for tensor_key in sorted(set(state) - set(expected_state)):
            raise ValueError(f"{name}: modules[{key!r}][{tensor_key!r}] is not a state entry of the network the "
                             f"config declares ({_size_fields(params)})")
        for tensor_key in sorted(set(expected_state) - set(state)):
            raise ValueError(f"{name}: modules[{key!r}] is missing {tensor_key!r}, which the config declares "
                             f"({_size_fields(params)})")
        for tensor_key, (shape, dtype) in expected_state.items():
            value = state[tensor_key]
            if tuple(value.shape) != shape:
                raise ValueError(
                    f"{name}: modules[{key!r}][{tensor_key!r}] has shape {tuple(value.shape)}, the config declares "
                    f"{shape} ({_size_fields(params)})"
                )
            if value.dtype != dtype:
                raise ValueError(f"{name}: modules[{key!r}][{tensor_key!r}] has dtype {value.dtype}; expected {dtype}")
    declared_total = sum(math.prod(s) for m in planned["modules"].values() for s, _ in m.values())
    stored_total = sum(int(t.numel()) for m in stored.values() for t in m.values())
    if declared_total != stored_total:
        raise ValueError(
            f"{name}: the config declares networks of {declared_total} numbers ({_size_fields(params)}), "
            f"but the file holds {stored_total}: refused before allocating"
        )


def check_model_sizes(payload: Dict[str, Any], name: str, config: Any, evaluated: Any = None) -> Any:
    """Check a model file's declared sizes against its tensors (see
    :func:`read_model_file`) before building ``config``; returns the
    declared ``(observation_shape, action_size)``. ``evaluated``: the
    algorithm an FQE-like config evaluates."""
    params = payload["params"]
    shape, action_size = _declared_shapes(params, name)
    planned = _planned_state(config, shape, action_size, name, params, evaluated)
    _check_against_file(planned, payload, name, params)
    return shape, action_size


def _available_memory() -> Optional[int]:
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_AVPHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def _check_memory(planned: Dict[str, Any], name: str, params: Dict[str, Any]) -> None:
    """A config with no tensors beside it (``params.json``) must fit in the
    memory this machine has free: weights plus optimizer moments and
    gradients, about four copies."""
    import math

    numbers = sum(math.prod(s) for m in planned["modules"].values() for s, _ in m.values())
    need, free = numbers * 4 * 4, _available_memory()
    if free is not None and need > free:
        raise ValueError(
            f"{name}: the config declares networks of {numbers} numbers ({_size_fields(params)}), about "
            f"{need / 2**30:.3g} GiB with optimizer state; this machine has {free / 2**30:.3g} GiB free"
        )


def saved_observation_keys(params: Any, shape: Any, source: str) -> Optional[tuple]:
    """The dict observation keys a params record holds, checked against the
    observation ``shape`` (one distinct string per part); None when it
    records none (models saved before dict observations, array and tuple
    observations)."""
    keys = params.get("observation_keys") if isinstance(params, dict) else None
    if keys is None:
        return None
    n = len(shape) if isinstance(shape, list) else 1
    if not isinstance(keys, list) or len(keys) != n or not all(isinstance(k, str) for k in keys) or len(set(keys)) != n:
        shown = repr(keys)
        raise ValueError(f"{source}: observation_keys is {shown[:200]}; expected {n} distinct key names")
    return tuple(keys)


def _build_from_params(params: Dict[str, Any], device: Any, name: str, payload: Optional[Dict[str, Any]] = None) -> Any:
    config = config_from_params(params, name)
    cls = config.algorithm_class()
    if cls.evaluates_algorithm:
        raise TypeError(f"{name} holds a {cls.__name__}, which needs the algorithm it evaluates: "
                        f"{cls.__name__}.load({name!r}, algo=trained)")
    shape, action_size = _declared_shapes(params, name)
    keys = saved_observation_keys(params, shape, name)
    planned = _planned_state(config, shape, action_size, name, params)
    if payload is not None:
        _check_against_file(planned, payload, name, params)
    else:
        _check_memory(planned, name, params)
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
