"""Type aliases of d3rlpy's ``d3rlpy.types``, for annotating user code
(pickers, slicers, encoders) the same way under ``import offrl``."""

from __future__ import annotations

from typing import Any, Mapping, Protocol, Sequence, Union, runtime_checkable

import numpy as np
import numpy.typing as npt
import torch

__all__ = [
    "NDArray",
    "Float32NDArray",
    "Int32NDArray",
    "UInt8NDArray",
    "DType",
    "Observation",
    "ObservationSequence",
    "Shape",
    "TorchObservation",
    "GymEnv",
    "OptimizerWrapperProto",
]

NDArray = npt.NDArray[Any]
Float32NDArray = npt.NDArray[np.float32]
Int32NDArray = npt.NDArray[np.int32]
UInt8NDArray = npt.NDArray[np.uint8]
DType = npt.DTypeLike

#: One observation: an array, or a sequence of arrays (tuple observations).
Observation = Union[NDArray, Sequence[NDArray]]
#: Observations with time (or batch) on the first axis, in the same two forms.
ObservationSequence = Union[NDArray, Sequence[NDArray]]
#: A shape, or one shape per element of a tuple observation.
Shape = Union[Sequence[int], Sequence[Sequence[int]]]
TorchObservation = Union[torch.Tensor, Sequence[torch.Tensor]]

try:  # gymnasium is a dependency of the online parts; keep this importable without it
    import gymnasium

    #: A gymnasium environment (offrl does not support the unmaintained ``gym``).
    GymEnv = gymnasium.Env
except ImportError:  # pragma: no cover - depends on the installation
    GymEnv = Any  # type: ignore[misc,assignment]


@runtime_checkable
class OptimizerWrapperProto(Protocol):
    """What an optimizer wrapper offers: its torch optimizer and state."""

    @property
    def optim(self) -> torch.optim.Optimizer: ...

    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None: ...
