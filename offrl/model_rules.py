"""Every rule about what a valid offrl model file holds, in one place.

A model file (``algo.save``, a ``fit`` checkpoint) is read in three steps,
each checking before anything is built from what it read:

1. the bytes: :mod:`offrl._model_file` (the safetensors container, header
   and tensor ranges);
2. the payload: :func:`check_payload` (entries, types, finite tensors,
   optimizer and scheduler states) and :func:`check_model_sizes` (the
   recorded config built on torch's meta device; every declared shape and
   dtype against the stored tensors, so nothing is allocated for sizes the
   tensors do not back);
3. the state against the built algorithm: :func:`check_state` (exactly the
   algorithm's modules and optimizers, each state of the right keys, shapes
   and dtypes, scaler statistics finite and of the data's shapes), after
   which ``load_state`` only loads.

:mod:`offrl.serialization` reads and writes files and rebuilds configs from
the registry; it holds no rule of its own.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from torch import nn

from ._safety import load_json

__all__ = [
    "PAYLOAD_KEYS",
    "SCALER_NAMES",
    "MAX_CONFIG_LIST",
    "CheckedState",
    "check_payload",
    "check_state_entries",
    "check_config_lists",
    "declared_shapes",
    "check_model_sizes",
    "check_memory",
    "planned_state",
    "check_against_file",
    "saved_observation_keys",
    "check_state",
    "check_module_state",
    "check_optimizer_state",
    "checked_scalers",
]

#: the top-level entries of a model file (a checkpoint adds ``resume``, JSON text, and ``random_tensors``)
PAYLOAD_KEYS = ("format", "format_version", "offrl_version", "params", "grad_step", "modules", "optimizers", "scalers",
                 "resume", "random_tensors")
SCALER_NAMES = ("observation_scaler", "action_scaler", "reward_scaler")
#: no config list is longer (a longer one, e.g. a million hidden layers, is a size bomb)
MAX_CONFIG_LIST = 4096
#: config parameters that set network sizes, named in size errors
SIZE_FIELDS = ("n_critics", "hidden_units", "feature_size", "n_quantiles", "n_greedy_quantiles", "embed_size",
                "n_action_samples", "latent_size", "num_heads", "context_size", "max_timestep")



def check_payload(payload: Dict[str, Any], name: str) -> None:
    """The entries of a model file's payload (read by ``offrl._model_file``):
    the required ones present, no unknown ones, their types, the config
    record parsed (in place) from its JSON text, and every state tensor
    (:func:`check_state_entries`). A ``ValueError`` names ``name`` and the entry."""
    missing = [k for k in ("params", "grad_step", "modules", "optimizers", "scalers") if k not in payload]
    if missing:
        raise ValueError(f"{name} is an incomplete offrl model file: it is missing {missing}")
    extra = sorted(str(k) for k in payload if k not in PAYLOAD_KEYS)
    if extra:
        raise ValueError(f"{name} has unknown entries {extra}; an offrl model file holds only {list(PAYLOAD_KEYS)}")
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
    check_state_entries(payload, name)


def check_state_entries(payload: Dict[str, Any], name: str) -> None:
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
            if entry == "scalers" and key not in SCALER_NAMES:
                raise ValueError(f"{name}: {where} is not a scaler of an algorithm; expected one of {list(SCALER_NAMES)}")
            for tensor_key, value in state.items():
                check_tensor(value, f"{where}[{tensor_key!r}]", name, floating=entry == "scalers")
    optimizers = payload["optimizers"]
    if not isinstance(optimizers, dict):
        raise ValueError(f"{name}: 'optimizers' is a {type(optimizers).__name__}; expected a dict of optimizer states")
    for key, state in optimizers.items():
        where = f"optimizers[{key!r}]"
        if isinstance(key, str) and isinstance(state, dict) and set(state) == {"optimizer", "lr_scheduler"}:
            # an optimizer with a learning-rate scheduler (AdamWFactory(lr_scheduler_factory=...))
            check_scheduler_state(state["lr_scheduler"], f"{where}['lr_scheduler']", name)
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
                    check_tensor(value, f"{where}['state'][{index!r}][{field!r}]", name, floating=False)


def check_scheduler_state(state: Any, where: str, name: str) -> None:
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


def check_tensor(value: Any, where: str, name: str, floating: bool) -> None:
    """``value`` is a tensor of finite real numbers (floating point when
    ``floating``: scaler statistics)."""
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


def check_config_lists(value: Any, where: str, name: str, depth: int = 0) -> None:
    if depth > 32:
        raise ValueError(f"{name}: the config record is nested too deeply at {where}")
    if isinstance(value, list):
        if len(value) > MAX_CONFIG_LIST:
            raise ValueError(f"{name}: {where} declares {len(value)} items; at most {MAX_CONFIG_LIST} are accepted")
        for i, item in enumerate(value):
            check_config_lists(item, f"{where}[{i}]", name, depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            check_config_lists(item, f"{where}.{key}", name, depth + 1)


def declared_shapes(params: Dict[str, Any], name: str) -> Any:
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


def size_fields(params: Dict[str, Any]) -> str:
    """``observation_shape=..., action_size=...`` and the config's size parameters, for error messages."""
    found = [f"observation_shape={params.get('observation_shape')}", f"action_size={params.get('action_size')}"]

    def walk(value: Any, where: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                path = f"{where}.{key}" if where else str(key)
                if key in SIZE_FIELDS:
                    found.append(f"{path.replace('params.', '')}={item!r}"[:120])
                else:
                    walk(item, path)

    walk(params.get("config"), "")
    return ", ".join(found)


def planned_state(config: Any, shape: Any, action_size: int, name: str, params: Dict[str, Any],
                   evaluated: Any = None) -> Dict[str, Any]:
    """What building ``config`` for these shapes would allocate, found by
    building it on torch's meta device (nothing allocated): module state
    shapes and dtypes by module, and optimizer names. ``evaluated``: the
    algorithm an FQE-like config evaluates."""
    try:
        # scalers hold numpy statistics that cannot live on the meta device; they size no network
        bare = dataclasses.replace(config, **{k: None for k in SCALER_NAMES if hasattr(config, k)})
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
        raise ValueError(f"{name}: the recorded config cannot be built ({size_fields(params)}): {e}") from None
    except Exception as e:  # any failure to build a file's config on the meta device is the file's fault
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"{name}: the recorded config cannot be built ({size_fields(params)}): {first}") from None


def check_against_file(planned: Dict[str, Any], payload: Dict[str, Any], name: str, params: Dict[str, Any]) -> None:
    """The sizes the config declares equal the tensors the file holds (so a
    config declaring 10**7 critics or 10**12 inputs is refused before
    anything is allocated), and the file has exactly the config's modules
    and optimizers."""
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
                             f"config declares ({size_fields(params)})")
        for tensor_key in sorted(set(expected_state) - set(state)):
            raise ValueError(f"{name}: modules[{key!r}] is missing {tensor_key!r}, which the config declares "
                             f"({size_fields(params)})")
        for tensor_key, (shape, dtype) in expected_state.items():
            value = state[tensor_key]
            if tuple(value.shape) != shape:
                raise ValueError(
                    f"{name}: modules[{key!r}][{tensor_key!r}] has shape {tuple(value.shape)}, the config declares "
                    f"{shape} ({size_fields(params)})"
                )
            if value.dtype != dtype:
                raise ValueError(f"{name}: modules[{key!r}][{tensor_key!r}] has dtype {value.dtype}; expected {dtype}")
    declared_total = sum(math.prod(s) for m in planned["modules"].values() for s, _ in m.values())
    stored_total = sum(int(t.numel()) for m in stored.values() for t in m.values())
    if declared_total != stored_total:
        raise ValueError(
            f"{name}: the config declares networks of {declared_total} numbers ({size_fields(params)}), "
            f"but the file holds {stored_total}: refused before allocating"
        )


def check_model_sizes(payload: Dict[str, Any], name: str, config: Any, evaluated: Any = None) -> Any:
    """Check a model file's declared sizes against its tensors (see
    :func:`read_model_file`) before building ``config``; returns the
    declared ``(observation_shape, action_size)``. ``evaluated``: the
    algorithm an FQE-like config evaluates."""
    params = payload["params"]
    shape, action_size = declared_shapes(params, name)
    planned = planned_state(config, shape, action_size, name, params, evaluated)
    check_against_file(planned, payload, name, params)
    return shape, action_size


def available_memory() -> Optional[int]:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_AVPHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(planned: Dict[str, Any], name: str, params: Dict[str, Any]) -> None:
    """A config with no tensors beside it (``params.json``) must fit in the
    memory this machine has free: weights plus optimizer moments and
    gradients, about four copies."""
    numbers = sum(math.prod(s) for m in planned["modules"].values() for s, _ in m.values())
    need, free = numbers * 4 * 4, available_memory()
    if free is not None and need > free:
        raise ValueError(
            f"{name}: the config declares networks of {numbers} numbers ({size_fields(params)}), about "
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


def check_module_state(module: nn.Module, state: Any, where: str) -> None:
    """``state`` has exactly ``module``'s state keys with their shapes and dtypes."""
    if not isinstance(state, dict):
        raise ValueError(f"{where} is not a state dict")
    own = module.state_dict()
    for key in sorted(map(str, set(state) - set(own))):
        raise ValueError(f"{where}[{key!r}] is not a state entry of the network")
    for key in sorted(set(own) - set(state)):
        raise ValueError(f"{where} is missing {key!r}")
    for key, mine in own.items():
        value = state[key]
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"{where}[{key!r}] is a {type(value).__name__}; expected a tensor")
        if tuple(value.shape) != tuple(mine.shape):
            raise ValueError(f"{where}[{key!r}] has shape {tuple(value.shape)}; the network has {tuple(mine.shape)}")
        if value.dtype != mine.dtype:
            raise ValueError(f"{where}[{key!r}] has dtype {value.dtype}; the network has {mine.dtype}")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise ValueError(f"{where}[{key!r}] holds nan or inf; expected finite weights")


def check_optimizer_state(optim: Any, state: Any, where: str) -> None:
    """``state`` is a torch optimizer state for ``optim``'s parameters: the
    same groups and parameter counts, per-parameter tensors of the
    parameter's shape (or scalars such as step counts), finite. An
    optimizer with a learning-rate scheduler saves ``{"optimizer": ...,
    "lr_scheduler": ...}``."""
    scheduler = getattr(optim, "lr_scheduler", None)
    if scheduler is not None and isinstance(state, dict) and set(state) == {"optimizer", "lr_scheduler"}:
        saved, own = state["lr_scheduler"], scheduler.state_dict()
        if not isinstance(saved, dict) or set(saved) != set(own):
            raise ValueError(f"{where}['lr_scheduler'] holds {sorted(saved) if isinstance(saved, dict) else saved!r}; "
                             f"expected the fields {sorted(own)}")
        where, state = f"{where}['optimizer']", state["optimizer"]
    if not isinstance(state, dict) or set(state) != {"state", "param_groups"}:
        raise ValueError(f"{where} is not an optimizer state (a dict of 'state' and 'param_groups')")
    own_groups = (optim.optim if hasattr(optim, "optim") else optim).state_dict()["param_groups"]
    groups = state["param_groups"]
    if not isinstance(groups, list) or len(groups) != len(own_groups):
        raise ValueError(f"{where} has {len(groups) if isinstance(groups, list) else groups!r} parameter groups; "
                         f"expected {len(own_groups)}")
    shapes: Dict[Any, Tuple[int, ...]] = {}
    params = [p for group in optim.optim.param_groups for p in group["params"]] if hasattr(optim, "optim") else None
    for g, (group, own) in enumerate(zip(groups, own_groups)):
        if not isinstance(group, dict) or not isinstance(group.get("params"), list) or len(group["params"]) != len(own["params"]):
            raise ValueError(f"{where}['param_groups'][{g}] does not list {len(own['params'])} parameters")
        for saved_id, own_id in zip(group["params"], own["params"]):
            if isinstance(saved_id, bool) or not isinstance(saved_id, int) or saved_id in shapes:
                raise ValueError(f"{where}['param_groups'][{g}] lists {saved_id!r}; expected distinct parameter indices")
            if params is not None:
                shapes[saved_id] = tuple(params[own_id].shape) if isinstance(own_id, int) and own_id < len(params) else None
    per_param = state["state"]
    if not isinstance(per_param, dict):
        raise ValueError(f"{where}['state'] is not a dict")
    for index, fields in per_param.items():
        if index not in shapes and params is not None:
            raise ValueError(f"{where}['state'][{index!r}] is not one of the optimizer's parameters")
        if not isinstance(fields, dict):
            raise ValueError(f"{where}['state'][{index!r}] is not a dict")
        expected = shapes.get(index)
        for field, value in fields.items():
            if not isinstance(value, torch.Tensor):
                continue
            if value.is_complex() or (value.is_floating_point() and not bool(torch.isfinite(value).all())):
                raise ValueError(f"{where}['state'][{index!r}][{field!r}] holds complex, nan or inf values")
            if value.ndim and expected is not None and tuple(value.shape) != expected:
                raise ValueError(f"{where}['state'][{index!r}][{field!r}] has shape {tuple(value.shape)}; "
                                 f"the parameter has {expected}")


def scaler_stat_names(scaler: nn.Module) -> set:
    """State-dict names of a scaler's statistics (its own and its parts')."""
    names = set()
    for prefix, module in scaler.named_modules():
        for stat in getattr(type(module), "_stats", ()):
            names.add(f"{prefix}.{stat}" if prefix else stat)
    return names


def stat_value(scaler: nn.Module, name: str) -> Any:
    owner_path, _, attr = name.rpartition(".")
    owner = scaler.get_submodule(owner_path) if owner_path else scaler
    return getattr(owner, attr, None)


@dataclasses.dataclass(frozen=True)
class CheckedState:
    """What :func:`check_state` found valid, ready to load."""

    modules: Dict[str, Any]
    optimizers: Dict[str, Any]
    #: copies of the algorithm's scalers holding the file's statistics
    scalers: Dict[str, Any]
    observation_keys: Optional[Tuple[str, ...]]
    grad_step: int


def check_state(algo: Any, state: Dict[str, Any], source: str = "the state") -> CheckedState:
    """Check ``state`` (``algo.get_state()``'s shape, as a model file holds
    it) against the built ``algo`` without changing it: the entries, exactly
    the algorithm's modules and optimizers, each module and optimizer state
    (:func:`check_module_state`, :func:`check_optimizer_state`), the
    scalers (:func:`checked_scalers`), the recorded observation keys and
    ``grad_step``. Raises ``ValueError`` naming ``source`` and the entry."""
    for entry in ("modules", "optimizers", "scalers", "grad_step"):
        if entry not in state:
            raise ValueError(f"{source} has no {entry!r} entry")
    modules, optimizers, scalers = state["modules"], state["optimizers"], state["scalers"]
    for entry, table in (("modules", modules), ("optimizers", optimizers), ("scalers", scalers)):
        if not isinstance(table, dict):
            raise ValueError(f"{source}: {entry!r} is a {type(table).__name__}; expected a dict")
    grad_step = state["grad_step"]
    if isinstance(grad_step, bool) or not isinstance(grad_step, (int, np.integer)) or grad_step < 0:
        raise ValueError(f"{source}: grad_step is {grad_step!r}; expected a non-negative int")
    own_modules, own_optimizers = algo.modules, algo.optimizers
    name = type(algo).__name__
    for entry, expected, found in (("modules", set(own_modules.keys()), set(modules)),
                                   ("optimizers", set(own_optimizers), set(optimizers))):
        if found - expected:
            raise ValueError(f"{source}: {entry} {sorted(map(str, found - expected))} are not part of "
                             f"{name} (expected {sorted(expected)})")
        if expected - found:
            what = "weights" if entry == "modules" else "optimizer state"
            raise ValueError(f"{source} has no {what} for {sorted(expected - found)} of {name}")
    for key, module in own_modules.items():
        check_module_state(module, modules[key], f"{source}: modules[{key!r}]")
    for key, optim in own_optimizers.items():
        check_optimizer_state(optim, optimizers[key], f"{source}: optimizers[{key!r}]")
    new_scalers = checked_scalers(algo, scalers, source)
    keys = saved_observation_keys(state.get("params"), algo.observation_shape, source)
    return CheckedState(modules, optimizers, new_scalers, keys, int(grad_step))


def checked_scalers(algo: Any, scalers: Dict[str, Any], source: str) -> Dict[str, Any]:
    """Copies of ``algo``'s scalers with the file's statistics, checked: the
    known statistics only, floating point, finite, of the observation /
    action shape, non-negative standard deviations."""
    unknown = sorted(str(k) for k in scalers if k not in SCALER_NAMES)
    if unknown:
        raise ValueError(f"{source}: scalers {unknown} are not scalers of an algorithm; expected {list(SCALER_NAMES)}")
    out: Dict[str, Any] = {}
    for key in SCALER_NAMES:
        scaler = getattr(algo, key)
        scaler_state = scalers.get(key)
        if scaler_state is None:
            continue
        if scaler is None:
            raise ValueError(f"{source} holds a fitted {key}, but the algorithm's config has none")
        if not isinstance(scaler_state, dict):
            raise ValueError(f"{source}: scalers[{key!r}] is not a state dict")
        expected = scaler_stat_names(scaler)
        for stat in sorted(map(str, set(scaler_state) - expected)):
            raise ValueError(f"{source}: scalers[{key!r}][{stat!r}] is not a statistic of "
                             f"{type(scaler).__name__} (expected {sorted(expected)})")
        missing = sorted(n for n in expected - set(scaler_state) if stat_value(scaler, n) is not None)
        if missing:
            raise ValueError(f"{source}: scalers[{key!r}] is missing {missing}")
        for stat, value in scaler_state.items():
            where = f"{source}: scalers[{key!r}][{stat!r}]"
            if not isinstance(value, torch.Tensor) or value.is_complex() or not value.is_floating_point():
                what = value.dtype if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"{where} is {what}; expected a floating-point tensor")
            if not bool(torch.isfinite(value).all()):
                raise ValueError(f"{where} holds nan or inf; expected finite numbers")
            if stat.rpartition(".")[2] == "std" and bool((value < 0).any()):
                raise ValueError(f"{where} holds a negative standard deviation")
        candidate = copy.deepcopy(scaler)
        try:
            candidate.load_state_dict(scaler_state, strict=False)
            candidate.to(algo.device)
            if key == "observation_scaler":
                candidate.check_observation_shape(algo.observation_shape)
            elif key == "action_scaler":
                for stat in scaler_state:
                    shape = tuple(scaler_state[stat].shape)
                    if shape not in ((algo.action_size,), ()):
                        raise ValueError(f"scalers[{key!r}][{stat!r}] has shape {shape}; actions have shape "
                                         f"({algo.action_size},)")
        except (ValueError, TypeError, RuntimeError, KeyError) as e:
            raise ValueError(f"{source}: the {key} does not fit: {e}") from None
        out[key] = candidate
    return out
