"""Saving factories that users write without ``@dataclass``.

d3rlpy's documentation writes a custom factory as a plain class::

    class CustomEncoderFactory(EncoderFactory):
        def __init__(self, feature_size):
            self.feature_size = feature_size
        def create(self, observation_shape): ...
        @staticmethod
        def get_type(): return "custom"

Such a class inherits the (field-less) dataclass base, so its own
parameters are not dataclass fields. :class:`InitParamsSerializable` takes
them from its ``__init__`` signature instead: each parameter is read from
the attribute of the same name when saving, and passed back by name when
loading. (d3rlpy saves such a factory with no parameters and cannot load it
back; here it round-trips when the attributes are named like the
arguments, and otherwise says which one is missing.)
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Dict, List, Set, Tuple

from .._d3rlpy_json import D3rlpySerializable
from ..serialization import Serializable, from_json_value

__all__ = ["InitParamsSerializable", "declares_own_fields"]

#: classes already warned about (a parameter not stored as an attribute)
_WARNED: Set[Tuple[type, str]] = set()


def declares_own_fields(cls: type) -> bool:
    """``cls`` is itself a dataclass (not only the subclass of one)."""
    return "__dataclass_fields__" in cls.__dict__


def _init_parameters(cls: type) -> List[inspect.Parameter]:
    """The named parameters of ``cls.__init__`` (no ``self``, ``*args``, ``**kwargs``)."""
    if cls.__init__ is object.__init__:
        return []
    signature = inspect.signature(cls.__init__)
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in list(signature.parameters.values())[1:] if p.kind in kinds]


class InitParamsSerializable(D3rlpySerializable, Serializable):
    """:class:`Serializable` for dataclass subclasses (their fields) and for
    plain subclasses (their ``__init__`` parameters), with d3rlpy's
    ``serialize`` / ``deserialize``."""

    def _params(self) -> Dict[str, Any]:
        cls = type(self)
        if declares_own_fields(cls):
            return super()._params()
        params: Dict[str, Any] = {}
        for p in _init_parameters(cls):
            if hasattr(self, p.name):
                params[p.name] = getattr(self, p.name)
            elif (cls, p.name) not in _WARNED:
                _WARNED.add((cls, p.name))
                warnings.warn(
                    f"{cls.__name__}.__init__ takes {p.name!r} but the instance has no attribute {p.name!r}: "
                    f"it is not saved (store it as self.{p.name} so that a saved model can be loaded)",
                    UserWarning, stacklevel=3,
                )
        return params

    @classmethod
    def _from_record(cls, data: Dict[str, Any]):
        if declares_own_fields(cls):
            return super()._from_record(data)
        if data.get("type") != cls.get_type():
            raise ValueError(f"{cls.__name__} cannot load a {data.get('type')!r} record")
        if not isinstance(data.get("params"), dict):
            raise ValueError(f"{cls.__name__} record: params must be an object, got {type(data.get('params')).__name__}")
        params = {k: from_json_value(v) for k, v in data["params"].items()}
        parameters = _init_parameters(cls)
        names = {p.name for p in parameters}
        unknown = sorted(set(params) - names)
        if unknown:
            raise ValueError(f"{cls.__name__} has no parameters {unknown} (its __init__ takes {sorted(names)})")
        missing = sorted(p.name for p in parameters if p.default is inspect.Parameter.empty and p.name not in params)
        if missing:
            raise ValueError(
                f"cannot rebuild {cls.__name__}: the saved record has no value for {missing} (the factory did not "
                "store them as attributes of the same name when it was saved)"
            )
        return cls(**params)

