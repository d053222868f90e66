"""Writer preprocessors: what is stored for each step written online."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .signature import Observation

__all__ = ["WriterPreprocessProtocol", "BasicWriterPreprocess", "LastFrameWriterPreprocess"]


@runtime_checkable
class WriterPreprocessProtocol(Protocol):
    """Transforms each observation, action and reward before it is stored."""

    def process_observation(self, observation: Observation) -> Observation: ...

    def process_action(self, action: np.ndarray) -> np.ndarray: ...

    def process_reward(self, reward: np.ndarray) -> np.ndarray: ...


class BasicWriterPreprocess:
    """Stores steps as they are."""

    def process_observation(self, observation: Observation) -> Observation:
        return observation

    def process_action(self, action: np.ndarray) -> np.ndarray:
        return action

    def process_reward(self, reward: np.ndarray) -> np.ndarray:
        return reward

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class LastFrameWriterPreprocess(BasicWriterPreprocess):
    """Stores only the newest frame (the last channel) of a frame-stacked
    observation, so that a frame-stacking picker rebuilds the stack at
    sampling time and each frame is stored once."""

    def process_observation(self, observation: Observation) -> Observation:
        if isinstance(observation, (list, tuple)):
            return [np.asarray(o)[-1:] for o in observation]
        return np.asarray(observation)[-1:]
