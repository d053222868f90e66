"""A module holding one learnable tensor (``d3rlpy.models.torch.parameters``),
as d3rlpy's algorithms hold SAC's log-temperature or CQL's log-alpha: the
module gives the tensor a place in a ``Modules`` holder, its optimizer and
its state dict (key ``_parameter``)."""

from __future__ import annotations

from typing import NoReturn

import torch
from torch import nn

__all__ = ["Parameter", "get_parameter"]


class Parameter(nn.Module):
    """One learnable tensor, read with :func:`get_parameter` (the module is
    not callable, as d3rlpy's)."""

    def __init__(self, data: torch.Tensor) -> None:
        super().__init__()
        if not isinstance(data, torch.Tensor):
            raise TypeError(f"Parameter takes a tensor, got {type(data).__name__}")
        if not data.is_floating_point():
            raise TypeError(f"Parameter needs a floating-point tensor to learn, got dtype {data.dtype}")
        self._parameter = nn.Parameter(data)

    def forward(self) -> NoReturn:
        raise NotImplementedError("a Parameter is not called: read it with get_parameter(parameter)")

    def __call__(self) -> NoReturn:  # type: ignore[override]
        raise NotImplementedError("a Parameter is not called: read it with get_parameter(parameter)")


def get_parameter(parameter: Parameter) -> nn.Parameter:
    """The tensor a :class:`Parameter` holds (the first parameter of any
    module, as d3rlpy reads it through a DDP wrapper too)."""
    if not isinstance(parameter, nn.Module):
        raise TypeError(f"get_parameter takes a Parameter module, got {type(parameter).__name__}")
    found = next(iter(parameter.parameters()), None)
    if found is None:
        raise ValueError(f"get_parameter: {type(parameter).__name__} holds no parameter")
    return found
