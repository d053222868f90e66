"""d3rlpy's ``serialize()`` / ``deserialize()`` for configs and factories.

d3rlpy writes a config or factory as a flat JSON object of its parameters,
each nested factory or scaler as ``{"type": name, "params": {...}}`` and an
unset scaler or learning-rate scheduler as ``{"type": "none", "params":
{}}``. offrl's own records (``to_dict``: ``{"kind", "type", "params"}``) stay
the model-file format; this module converts between the two. Reading never
imports anything named in the data: each nested record's registry kind
follows from the field it fills, and its class comes from that registry.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Optional, Set, Tuple

from ._safety import load_json
from .serialization import lookup, to_json_value

__all__ = ["D3rlpySerializable", "to_d3rlpy_json", "from_d3rlpy_json"]

#: d3rlpy writes an unset scaler (or learning-rate scheduler) as this record
NONE_RECORD = {"type": "none", "params": {}}
_NONE_FIELDS = ("observation_scaler", "action_scaler", "reward_scaler")
#: registry kind of a factory field, by the end of its name (d3rlpy's names)
_KIND_BY_SUFFIX = (("lr_scheduler_factory", "lr_scheduler"), ("optim_factory", "optimizer"),
                   ("encoder_factory", "encoder"), ("q_func_factory", "q_function"))


def _kind_by_name(name: str) -> Optional[str]:
    if name in _NONE_FIELDS:
        return name
    for suffix, kind in _KIND_BY_SUFFIX:
        if name.endswith(suffix):
            return kind
    return None


def to_d3rlpy_json(value: Any, name: str = "") -> Any:
    """A :func:`~offrl.serialization.to_json_value` result in d3rlpy's form:
    ``{"kind", "type", "params"}`` records become ``{"type", "params"}``, an
    unset scaler or scheduler field ``{"type": "none", "params": {}}``."""
    if value is None and _kind_by_name(name) is not None:
        return dict(NONE_RECORD, params={})
    if isinstance(value, dict):
        if set(value) == {"kind", "type", "params"}:
            return {"type": value["type"], "params": {k: to_d3rlpy_json(v, k) for k, v in value["params"].items()}}
        return {k: to_d3rlpy_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_d3rlpy_json(v) for v in value]
    return value


def _own_field_names(cls: type) -> Optional[Set[str]]:
    if "__dataclass_fields__" in cls.__dict__:
        return {f.name for f in dataclasses.fields(cls) if f.init}
    return None


def _field_kind(cls: type, name: str) -> Optional[str]:
    """The registry kind of the field ``name`` of ``cls`` when it holds a
    factory or scaler (None for plain values), from its name or default."""
    kind = _kind_by_name(name)
    if kind is not None or _own_field_names(cls) is None:
        return kind
    for f in dataclasses.fields(cls):
        if f.name == name:
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]
            return getattr(default, "_kind", "") or None
    return None


def from_d3rlpy_json(cls: type, data: Dict[str, Any], where: str = "") -> Dict[str, Any]:
    """The parameters of ``cls`` (objects rebuilt) from d3rlpy's form. An
    unset (``none``) record for a field ``cls`` does not have (d3rlpy's
    optimizers' ``lr_scheduler_factory``) is dropped: it means the default."""
    if not isinstance(data, dict):
        raise TypeError(f"{where or cls.__name__}: expected a JSON object, got {type(data).__name__}")
    names = _own_field_names(cls)
    out: Dict[str, Any] = {}
    for name, value in data.items():
        here = f"{where}{name}"
        if not (isinstance(value, dict) and set(value) == {"type", "params"}):
            out[name] = value
            continue
        kind = _field_kind(cls, name)
        if kind is None:
            raise ValueError(f"{here}: a {{'type', 'params'}} record where {cls.__name__} expects a plain value")
        if value["type"] == "none":
            if names is None or name in names:
                out[name] = None
            continue
        if not isinstance(value["params"], dict):
            raise ValueError(f"{here}.params must be an object, got {type(value['params']).__name__}")
        nested = lookup(kind, value["type"])
        params = from_d3rlpy_json(nested, value["params"], here + ".")
        out[name] = nested.from_dict({"kind": kind, "type": value["type"],
                                      "params": {k: to_json_value(v) for k, v in params.items()}})
    return out


class D3rlpySerializable:
    """d3rlpy's serializable interface on top of offrl's ``Serializable``
    (``_params``, ``_kind``, ``get_type``, ``from_dict``)."""

    #: offrl's additions that d3rlpy's classes lack: left out at their
    #: default, so that the output is d3rlpy's own
    _offrl_only_fields: Tuple[str, ...] = ()

    def serialize_to_dict(self) -> Dict[str, Any]:
        """The parameters as d3rlpy's JSON-ready dict."""
        defaults = {f.name: f.default for f in dataclasses.fields(self) if f.name in self._offrl_only_fields} \
            if dataclasses.is_dataclass(self) else {}
        return {name: to_d3rlpy_json(to_json_value(value), name) for name, value in self._params().items()  # type: ignore[attr-defined]
                if not (name in defaults and value == defaults[name])}

    def serialize(self) -> str:
        """d3rlpy's ``serialize()``: the parameters as a JSON string."""
        return json.dumps(self.serialize_to_dict())

    @classmethod
    def deserialize_from_dict(cls, dict_config: Dict[str, Any]) -> Any:
        """The object a :meth:`serialize_to_dict` dict describes."""
        if not isinstance(dict_config, dict):
            raise TypeError(f"{cls.__name__}.deserialize_from_dict expects a dict, got {type(dict_config).__name__}")
        params = from_d3rlpy_json(cls, dict_config)
        record = {"kind": cls._kind, "type": cls.get_type(),  # type: ignore[attr-defined]
                  "params": {k: to_json_value(v) for k, v in params.items()}}
        return cls._from_record(record)

    @classmethod
    def from_dict(cls, kvs: Dict[str, Any], *, infer_missing: bool = False) -> Any:
        """The object of offrl's ``{"kind", "type", "params"}`` record (what
        ``to_dict`` gives) or of d3rlpy's plain parameters (what d3rlpy's
        ``to_dict()`` and ``serialize_to_dict()`` give; a field left out
        keeps its default). ``infer_missing`` is dataclasses-json's keyword,
        accepted for d3rlpy's callers: every field here has a default."""
        if not isinstance(kvs, dict):
            raise TypeError(f"{cls.__name__}.from_dict takes a dict, got {type(kvs).__name__}")
        if "type" in kvs and "params" in kvs and set(kvs) <= {"kind", "type", "params"}:
            return cls._from_record(kvs)
        return cls.deserialize_from_dict(kvs)

    @classmethod
    def _from_record(cls, record: Dict[str, Any]) -> Any:
        """The object of offrl's record: the next class's ``from_dict``."""
        return super().from_dict(record)  # type: ignore[misc]

    @classmethod
    def from_json(cls, s: Any, *, infer_missing: bool = False) -> Any:
        """dataclasses-json's ``from_json`` as d3rlpy's configs and factories
        have it: :meth:`from_dict` on JSON text (offrl's ``to_json`` or
        d3rlpy's ``to_json`` / ``serialize``)."""
        return cls.from_dict(load_json(s, f"{cls.__name__}.from_json"), infer_missing=infer_missing)

    @classmethod
    def deserialize(cls, serialized_config: str) -> Any:
        """Inverse of :meth:`serialize`."""
        if not isinstance(serialized_config, (str, bytes, bytearray)):
            raise TypeError(f"{cls.__name__}.deserialize expects a JSON string, got {type(serialized_config).__name__}")
        return cls.deserialize_from_dict(load_json(serialized_config, f"{cls.__name__}.deserialize"))

    @classmethod
    def deserialize_from_file(cls, path: str) -> Any:
        """:meth:`deserialize` on the text of the file at ``path``."""
        with open(path, "rb") as f:
            return cls.deserialize_from_dict(load_json(f.read(), os.fspath(path)))
