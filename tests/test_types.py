"""offrl.types: d3rlpy's type aliases exist and mean the same things."""

from __future__ import annotations

import typing

import numpy as np
import numpy.typing as npt
import torch

import offrl.types as T
from offrl.models import AdamFactory


def test_aliases():
    # numpy's own typed-array aliases (numpy 2.5 made NDArray a type alias, whose arguments read differently)
    assert T.Float32NDArray == npt.NDArray[np.float32] and T.Float32NDArray != npt.NDArray[np.float64]
    assert T.UInt8NDArray == npt.NDArray[np.uint8]
    assert T.Int32NDArray == npt.NDArray[np.int32]
    assert torch.Tensor in typing.get_args(T.TorchObservation)
    assert len(typing.get_args(T.Shape)) == 2 and len(typing.get_args(T.Observation)) == 2
    assert set(T.__all__) <= set(dir(T))


def test_optimizer_wrapper_protocol():
    wrapper = AdamFactory().create(list(torch.nn.Linear(2, 1).named_parameters()), 1e-3)
    assert isinstance(wrapper, T.OptimizerWrapperProto)
    assert not isinstance(object(), T.OptimizerWrapperProto)
