"""Device arguments as d3rlpy accepts them, parsed once into a ``torch.device``."""

from __future__ import annotations

from typing import Union

import numpy as np
import torch

__all__ = ["DeviceArg", "parse_device"]

DeviceArg = Union[bool, int, str, torch.device, None]


def parse_device(device: DeviceArg) -> torch.device:
    """``False``/``None``/``"cpu"``/``"cpu:0"`` -> CPU; ``True`` -> ``cuda:0``;
    an int ``n`` -> ``cuda:n``; ``"cuda"``/``"cuda:N"`` as given (checked
    against the CUDA devices this machine has)."""
    if device is None or device is False:
        return torch.device("cpu")
    if device is True:
        target = torch.device("cuda:0")
    elif isinstance(device, (int, np.integer)):
        if device < 0:
            raise ValueError(f"device index must be >= 0, got {device}")
        target = torch.device(f"cuda:{int(device)}")
    elif isinstance(device, torch.device):
        target = device
    elif isinstance(device, str):
        try:
            target = torch.device(device)
        except RuntimeError:
            raise ValueError(
                f"unknown device {device!r}: expected 'cpu', 'cpu:0', 'cuda', 'cuda:N', True, False or an int"
            ) from None
        if target.type not in ("cpu", "cuda", "mps"):
            raise ValueError(f"unsupported device type {target.type!r} in {device!r}")
    else:
        raise TypeError(f"device must be a bool, an int or a string, got {type(device).__name__}")
    if target.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r} asks for CUDA, which is not available on this machine")
        index = 0 if target.index is None else target.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"device {device!r}: there are only {torch.cuda.device_count()} CUDA devices")
        return torch.device(f"cuda:{index}")
    return target
