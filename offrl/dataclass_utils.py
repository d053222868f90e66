"""d3rlpy's ``d3rlpy.dataclass_utils``: a dataclass's fields as a dict."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict

import torch

__all__ = ["asdict_as_float", "asdict_without_copy"]


def asdict_without_copy(obj: Any) -> Dict[str, Any]:
    """The fields of a dataclass instance, by name, the values themselves
    (``dataclasses.asdict`` deep-copies them and recurses into dataclasses)."""
    if not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"expected a dataclass instance, got {type(obj).__name__}")
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def asdict_as_float(obj: Any) -> Dict[str, float]:
    """The fields of a dataclass of scalars (numbers or one-element tensors,
    e.g. a loss record) as floats."""
    out: Dict[str, float] = {}
    for name, value in asdict_without_copy(obj).items():
        out[name] = float(value.detach().cpu().item()) if isinstance(value, torch.Tensor) else float(value)
    return out
