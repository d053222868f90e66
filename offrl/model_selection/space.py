"""Search spaces: the config fields an :class:`~offrl.model_selection.OfflineSearch`
varies, and the values it tries.

A space maps field names to values::

    {"alpha": [0.1, 1.0, 4.0],                                   # a grid
     "learning_rate": FloatDistribution(1e-5, 1e-3, log=True),   # sampled by Optuna
     "encoder_factory.hidden_units": [[64, 64], [256, 256]],     # a field of a factory
     "observation_scaler": ["standard", None]}                   # a registered type by name

* A list (or tuple) is a set of values. When every entry is a list the
  search is a grid (every combination, times every seed); otherwise lists
  are sampled as categorical choices.
* An Optuna distribution (``FloatDistribution``, ``IntDistribution``,
  ``CategoricalDistribution``) is sampled by the search's Optuna sampler.
* A dotted key reaches a field of a factory field (``encoder_factory``,
  ``optim_factory``, ``q_func_factory``, ...).
* A string given to a factory or scaler field names a registered type,
  created with its defaults (``"standard"`` for ``StandardObservationScaler``,
  ``"vector"`` for ``VectorEncoderFactory``), as in ``offrl fit``'s overrides.

The same in JSON (``offrl search --space SPACE.json``, :func:`space_from_json`):
a list is a set of values; ``{"low": a, "high": b}`` with optional ``"log"``,
``"step"`` and ``"type"`` (``"float"`` or ``"int"``; int when both ends are
JSON integers and no type is given) is a range; ``{"choices": [...]}`` is a
categorical distribution.

Every value is checked against the config before anything trains: a field
the config does not have, or a value its constraint refuses (both ends of a
range, every choice), is a ``ValueError`` / ``TypeError`` that names the
field. Optuna stores parameters as numbers, strings, booleans or None:
other values (lists, factory objects) appear in the study under a label
(their JSON text, else their ``repr``) and are decoded back here.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import typing
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..serialization import Serializable, lookup

__all__ = ["SearchSpace", "space_from_json", "with_params", "SEED"]

#: the parameter name of the training seed in the study
SEED = "seed"


def _is_distribution(value: Any) -> bool:
    try:
        from optuna.distributions import BaseDistribution
    except ImportError:
        return False
    return isinstance(value, BaseDistribution)


def _primitive(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _plain(value: Any) -> Any:
    """numpy scalars as Python ones (Optuna and JSON take those)."""
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _label(value: Any) -> str:
    if isinstance(value, Serializable):
        return json.dumps(value.to_dict(), sort_keys=True)
    try:
        return json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)


def _field_class(owner: Any, name: str) -> Optional[type]:
    """The class a field of ``owner`` holds (``Optional[X]`` -> ``X``), if a class."""
    try:
        hints = typing.get_type_hints(type(owner))
    except Exception:  # forward references a config cannot resolve: no hint
        return None
    hint = hints.get(name)
    if typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else None
    return hint if isinstance(hint, type) else None


def _resolve_named_type(owner: Any, name: str, value: Any, key: str) -> Any:
    """A string given to a factory or scaler field: an instance of that registered type."""
    if not isinstance(value, str):
        return value
    current = getattr(owner, name)
    cls = type(current) if isinstance(current, Serializable) else _field_class(owner, name)
    kind = getattr(cls, "_kind", "") if cls is not None else ""
    if not kind or kind == "algorithm":
        return value
    try:
        return lookup(kind, value)()
    except ValueError as e:
        raise ValueError(f"search space {key!r}: {e}") from None


def _fields(obj: Any) -> List[str]:
    return [f.name for f in dataclasses.fields(obj) if f.init] if dataclasses.is_dataclass(obj) else []


def check_key(config: Any, key: str) -> None:
    """Raise ``ValueError`` unless the dotted ``key`` names a field of ``config``."""
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise ValueError(f"search space keys must be field names (dotted for a factory's field), got {key!r}")
    if key == SEED:
        raise ValueError("'seed' is not a config field: the training seeds are the search's seeds= argument")
    owner, where = config, type(config).__name__
    parts = key.split(".")
    for depth, part in enumerate(parts):
        names = _fields(owner)
        if part not in names:
            if not names:
                raise ValueError(f"search space names {key!r}, but {'.'.join(parts[:depth])} is a "
                                 f"{type(owner).__name__}, which has no fields to set")
            raise ValueError(f"search space names {key!r}, but {where} has no field {part!r}; "
                             f"its fields: {', '.join(sorted(names))}")
        if depth < len(parts) - 1:
            owner, where = getattr(owner, part), f"{where}.{part} ({type(getattr(owner, part)).__name__})"


def _replace(owner: Any, parts: Sequence[str], value: Any, key: str) -> Any:
    head = parts[0]
    if len(parts) == 1:
        return dataclasses.replace(owner, **{head: _resolve_named_type(owner, head, value, key)})
    return dataclasses.replace(owner, **{head: _replace(getattr(owner, head), parts[1:], value, key)})


def with_params(config: Any, params: Mapping[str, Any]) -> Any:
    """A copy of ``config`` with ``params`` (dotted keys, decoded values)
    set; the config's constraints check every value (``ValueError`` /
    ``TypeError`` naming the field)."""
    out = config
    for key in sorted((k for k in params if k != SEED), key=lambda k: k.count(".")):  # a factory before its fields
        check_key(out, key)
        out = _replace(out, key.split("."), params[key], key)
    return out


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One field of the space: ``values`` (grid or categorical) or a numeric ``distribution``."""

    key: str
    values: Optional[Tuple[Any, ...]] = None
    distribution: Any = None
    labels: Tuple[Any, ...] = ()  # what Optuna stores for each value (primitives as themselves)

    @property
    def is_grid(self) -> bool:
        return self.distribution is None


def _labels(key: str, values: Sequence[Any]) -> Tuple[Any, ...]:
    primitives = {v for v in values if isinstance(v, str)}
    labels: List[Any] = []
    for value in values:
        if _primitive(value):
            labels.append(value)
            continue
        label = _label(value)
        base, n = label, 2
        while label in primitives or label in labels:
            label, n = f"{base} #{n}", n + 1
        labels.append(label)
    return tuple(labels)


def _entry(key: str, value: Any) -> _Entry:
    if isinstance(value, (list, tuple)):
        if len(value) == 0:
            raise ValueError(f"search space {key!r} has no values: give at least one")
        values = tuple(_plain(v) for v in value)
        return _Entry(key, values=values, labels=_labels(key, values))
    if _is_distribution(value):
        from optuna.distributions import CategoricalDistribution

        if isinstance(value, CategoricalDistribution):
            values = tuple(_plain(v) for v in value.choices)
            return _Entry(key, values=values, labels=_labels(key, values), distribution="categorical")
        return _Entry(key, distribution=value)
    if isinstance(value, np.ndarray):
        return _entry(key, value.tolist())
    raise TypeError(f"search space {key!r} must be a list of values or an Optuna distribution "
                    f"(FloatDistribution, IntDistribution, CategoricalDistribution), got {type(value).__name__}")


def _check_value(config: Any, key: str, value: Any, parents: Sequence[Dict[str, Any]] = ({},)) -> None:
    """``value`` of ``key`` is accepted, with each combination of the
    values searched for the factories above it."""
    try:
        for parent in parents:
            with_params(config, {**parent, key: value})
    except (ValueError, TypeError) as e:
        message = str(e)
        if not message.startswith("search space"):
            message = f"search space {key!r}: {message}"
        raise type(e)(message) from None


def _parent_values(key: str, entries: Mapping[str, _Entry]) -> List[Dict[str, Any]]:
    """Every combination of the values searched for the fields above a
    dotted ``key`` (``[{}]`` when none is searched)."""
    parts = key.split(".")
    above = [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in entries]
    options = [[(p, v) for v in (entries[p].values or ())] for p in above]
    return [dict(combo) for combo in itertools.product(*options)] or [{}]


def _range_ends(distribution: Any) -> List[Any]:
    from optuna.distributions import FloatDistribution, IntDistribution

    if isinstance(distribution, FloatDistribution):
        return [float(distribution.low), float(distribution.high)]
    if isinstance(distribution, IntDistribution):
        return [int(distribution.low), int(distribution.high)]
    raise TypeError(f"unsupported Optuna distribution {type(distribution).__name__}: use FloatDistribution, "
                    "IntDistribution or CategoricalDistribution")


class SearchSpace:
    """A checked search space over ``config`` and the training ``seeds``
    (see the module docstring).

    Attributes:
        keys: the searched fields, in the order given.
        is_grid: every field is a list of values (so the candidates are
            their product times the seeds).
        seeds: the training seeds.
    """

    def __init__(self, config: Any, space: Mapping[str, Any], seeds: Sequence[int]) -> None:
        if not isinstance(space, Mapping):
            raise TypeError(f"search_space must be a mapping of field name -> values, got {type(space).__name__}")
        self.config = config
        self.seeds = tuple(int(s) for s in seeds)
        raw = {key: _entry(key, value) for key, value in space.items()}
        entries = []
        for key, entry in raw.items():
            parents = _parent_values(key, raw)
            if not parents[0]:
                check_key(config, key)
            for v in entry.values if entry.values is not None else _range_ends(entry.distribution):
                _check_value(config, key, v, parents)
            entries.append(entry)
        self._entries: Tuple[_Entry, ...] = tuple(entries)
        self.keys: Tuple[str, ...] = tuple(e.key for e in entries)
        self.is_grid = all(e.is_grid for e in entries)

    def __len__(self) -> int:
        """Trials of the grid: the product of the value counts times the seeds."""
        return int(np.prod([len(e.values) for e in self._entries if e.values is not None], dtype=np.int64)) * len(self.seeds)

    # ------------------------------------------------------------ Optuna
    def distributions(self) -> Dict[str, Any]:
        """Parameter name -> Optuna distribution (values by their labels), seed included."""
        from optuna.distributions import CategoricalDistribution

        out: Dict[str, Any] = {}
        for e in self._entries:
            out[e.key] = CategoricalDistribution(list(e.labels)) if e.values is not None else e.distribution
        out[SEED] = CategoricalDistribution(list(self.seeds))
        return out

    def grid(self) -> List[Dict[str, Any]]:
        """Every grid point as Optuna parameters (labels), seed last and slowest."""
        if not self.is_grid:
            raise ValueError("the space has distributions: it is not a grid")
        combos = itertools.product(*[e.labels for e in self._entries])
        points = [dict(zip(self.keys, combo)) for combo in combos]
        return [{**p, SEED: s} for s in self.seeds for p in points]

    def suggest(self, trial: Any) -> Dict[str, Any]:
        """Ask ``trial`` for every parameter; returns Optuna's values (labels)."""
        out: Dict[str, Any] = {}
        for name, distribution in self.distributions().items():
            out[name] = _suggest(trial, name, distribution)
        return out

    def decode(self, params: Mapping[str, Any]) -> Dict[str, Any]:
        """Optuna's parameters (labels) -> field values (and ``seed``)."""
        out: Dict[str, Any] = {}
        for e in self._entries:
            value = params[e.key]
            if e.values is not None:
                value = e.values[e.labels.index(value)] if value in e.labels else value
            out[e.key] = value
        out[SEED] = int(params[SEED])
        return out

    def config_for(self, params: Mapping[str, Any]) -> Any:
        """The config of decoded ``params``."""
        return with_params(self.config, {k: v for k, v in params.items() if k != SEED})

    def describe(self) -> Dict[str, Any]:
        """JSON description (to tell whether a stored study was set up for this space)."""
        out: Dict[str, Any] = {}
        for e in self._entries:
            if e.values is not None:
                out[e.key] = {"values": [v if _primitive(v) else _label(v) for v in e.values],
                              "sampled": e.distribution is not None}
            else:
                out[e.key] = {"distribution": repr(e.distribution)}
        out[SEED] = list(self.seeds)
        return out


def _suggest(trial: Any, name: str, distribution: Any) -> Any:
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)
    if isinstance(distribution, FloatDistribution):
        return trial.suggest_float(name, distribution.low, distribution.high, step=distribution.step,
                                   log=distribution.log)
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high, step=distribution.step,
                                 log=distribution.log)
    raise TypeError(f"unsupported Optuna distribution {type(distribution).__name__}")


_RANGE_KEYS = {"low", "high", "log", "step", "type"}


def space_from_json(data: Any, source: str = "the search space") -> Dict[str, Any]:
    """A search space from its JSON form (module docstring): lists stay
    lists, ``{"low", "high", ...}`` becomes a ``FloatDistribution`` /
    ``IntDistribution``, ``{"choices": [...]}`` a ``CategoricalDistribution``."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected a JSON object of field name -> values, got {type(data).__name__}")
    out: Dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, list):
            out[key] = value
        elif isinstance(value, dict) and set(value) == {"choices"}:
            from optuna.distributions import CategoricalDistribution

            choices = value["choices"]
            if not isinstance(choices, list) or not choices:
                raise ValueError(f"{source}: {key!r} choices must be a non-empty list")
            if not all(_primitive(v) for v in choices):
                raise ValueError(f"{source}: {key!r} choices must be numbers, strings, booleans or null; "
                                 "give other values (lists, objects) as a list of values")
            out[key] = CategoricalDistribution(choices)
        elif isinstance(value, dict) and {"low", "high"} <= set(value) <= _RANGE_KEYS:
            out[key] = _range(key, value, source)
        else:
            raise ValueError(
                f"{source}: {key!r} must be a list of values, {{\"low\": a, \"high\": b}} (optional \"log\", "
                f"\"step\", \"type\": \"float\" or \"int\") or {{\"choices\": [...]}}; got {json.dumps(value)}"
            )
    return out


def _range(key: str, spec: Dict[str, Any], source: str) -> Any:
    from optuna.distributions import FloatDistribution, IntDistribution

    low, high = spec["low"], spec["high"]
    kind = spec.get("type")
    if kind is None:
        kind = "int" if all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high)) else "float"
    if kind not in ("float", "int"):
        raise ValueError(f"{source}: {key!r} type must be \"float\" or \"int\", got {kind!r}")
    for name, v in (("low", low), ("high", high)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ValueError(f"{source}: {key!r} {name} must be a finite number, got {v!r}")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise ValueError(f"{source}: {key!r} log must be true or false, got {log!r}")
    step = spec.get("step")
    try:
        if kind == "int":
            return IntDistribution(int(low), int(high), log=log, step=1 if step is None else int(step))
        return FloatDistribution(float(low), float(high), log=log, step=None if step is None else float(step))
    except ValueError as e:
        raise ValueError(f"{source}: {key!r}: {e}") from None
