"""offrl.types: d3rlpy's type aliases exist and mean the same things."""

from __future__ import annotations

import typing

import numpy as np
import torch

import offrl.types as T
from offrl.models import AdamFactory


def test_aliases():
    assert typing.get_args(T.Float32NDArray)[1] == np.dtype[np.float32]
    assert typing.get_args(T.UInt8NDArray)[1] == np.dtype[np.uint8]
    assert typing.get_args(T.Int32NDArray)[1] == np.dtype[np.int32]
    assert torch.Tensor in typing.get_args(T.TorchObservation)
    assert len(typing.get_args(T.Shape)) == 2 and len(typing.get_args(T.Observation)) == 2
    assert set(T.__all__) <= set(dir(T))


def test_optimizer_wrapper_protocol():
    wrapper = AdamFactory().create(list(torch.nn.Linear(2, 1).named_parameters()), 1e-3)
    assert isinstance(wrapper, T.OptimizerWrapperProto)
    assert not isinstance(object(), T.OptimizerWrapperProto)
