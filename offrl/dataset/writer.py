"""Writer preprocessors: what is stored for each step written online."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np

from .signature import Observation, Signature, observation_from_dict

__all__ = ["WriterPreprocessProtocol", "BasicWriterPreprocess", "LastFrameWriterPreprocess", "ExperienceWriter"]


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


class ExperienceWriter:
    """Writes steps from an environment into a Buffer (d3rlpy's
    ``ExperienceWriter``): ``write(observation, action, reward)`` per step,
    ``clip_episode(terminated)`` at the end of each episode.

    With offrl's :class:`~offrl.dataset.InfiniteBuffer` /
    :class:`~offrl.dataset.FIFOBuffer` each step goes straight into the
    columnar store (so it can be sampled at once, like d3rlpy's default
    ``write_at_termination=False``); with ``write_at_termination=True`` or a
    user ``BufferProtocol``, the episode is handed to the buffer when clipped.

    Args:
        buffer: where the steps go.
        preprocessor: applied to each observation, action and reward.
        observation_signature, action_signature, reward_signature: the
            signatures of the data *before* preprocessing.
        cache_size: accepted for d3rlpy compatibility (offrl's stores grow
            as needed); must be positive.
        write_at_termination: store each episode only when it is clipped.
    """

    def __init__(
        self,
        buffer: Any,
        preprocessor: WriterPreprocessProtocol,
        observation_signature: Signature,
        action_signature: Signature,
        reward_signature: Signature,
        cache_size: int = 10000,
        write_at_termination: bool = False,
    ) -> None:
        from .storage import BufferProtocol, ColumnStore

        if not isinstance(buffer, BufferProtocol):
            raise TypeError(f"buffer must implement BufferProtocol, got {type(buffer).__name__}")
        if isinstance(cache_size, bool) or not isinstance(cache_size, (int, np.integer)) or cache_size <= 0:
            raise ValueError(f"cache_size must be a positive int, got {cache_size!r}")
        for name, sig in (
            ("observation_signature", observation_signature),
            ("action_signature", action_signature),
            ("reward_signature", reward_signature),
        ):
            if not isinstance(sig, Signature):
                raise TypeError(f"{name} must be a Signature, got {type(sig).__name__}")
        self._buffer = buffer
        self._preprocessor = preprocessor
        self._cache_size = int(cache_size)
        self._write_at_termination = bool(write_at_termination)
        self._store = buffer if isinstance(buffer, ColumnStore) and not write_at_termination else None
        # the stored signatures are those of preprocessed samples (d3rlpy's rule)
        sample = observation_signature.sample()
        processed = preprocessor.process_observation(sample[0] if len(sample) == 1 else sample)
        processed = [np.asarray(p) for p in processed] if isinstance(processed, (list, tuple)) else [np.asarray(processed)]
        keys = observation_signature.keys
        self._observation_signature = Signature(
            dtype=[p.dtype for p in processed], shape=[p.shape for p in processed],
            keys=keys if keys is not None and len(keys) == len(processed) else None,
        )
        action = np.asarray(preprocessor.process_action(action_signature.sample()[0]))
        self._action_signature = Signature(dtype=[action.dtype], shape=[action.shape if action.ndim else (1,)])
        reward = np.asarray(preprocessor.process_reward(reward_signature.sample()[0]))
        self._reward_signature = Signature(dtype=[reward.dtype], shape=[reward.shape if reward.ndim else (1,)])
        if self._store is not None:
            self._store.initialize(self._observation_signature, self._action_signature, self._reward_signature)
        self._steps: list[tuple[list[np.ndarray], np.ndarray, np.ndarray]] = []

    def _columns(self, value: Any, signature: Signature, name: str) -> list[np.ndarray]:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
        if len(items) != len(signature.shape):
            raise ValueError(f"{name} has {len(items)} elements, expected {len(signature.shape)}")
        out = []
        for k, (item, dtype, shape) in enumerate(zip(items, signature.dtype, signature.shape)):
            array = np.asarray(item, dtype=dtype).reshape(shape) if np.size(item) == int(np.prod(shape)) else None
            if array is None:
                raise ValueError(f"{name}[{k}] has shape {np.shape(item)}, expected {tuple(shape)}")
            out.append(array)
        return out

    def write(self, observation: Observation, action: Any, reward: Any) -> None:
        """Write one step of the current episode (a dict observation must
        have the signature's keys)."""
        if isinstance(observation, dict):
            keys = self._observation_signature.keys
            if keys is None:
                raise TypeError("observation is a dict, but the writer's signature has no keys")
            observation = observation_from_dict(observation, keys, "observation")
            observation = observation[0] if len(observation) == 1 else observation
        observation = self._preprocessor.process_observation(observation)
        action = self._preprocessor.process_action(action)
        reward = self._preprocessor.process_reward(reward)
        obs = self._columns(observation, self._observation_signature, "observation")
        act = self._columns(action, self._action_signature, "action")[0]
        rew = self._columns(reward, self._reward_signature, "reward")[0]
        if self._store is not None:
            self._store.append_step(obs, act, rew)
        else:
            self._steps.append((obs, act, rew))

    def clip_episode(self, terminated: bool) -> None:
        """End the current episode (``terminated``: it reached a terminal
        state); a no-op when no step was written since the last clip."""
        if self._store is not None:
            self._store.close_episode(bool(terminated))
            return
        steps, self._steps = self._steps, []
        if not steps:
            return
        from .episode import Episode

        n_columns = len(steps[0][0])
        columns = [np.stack([s[0][k] for s in steps]) for k in range(n_columns)]
        episode = Episode(
            observations=columns[0] if n_columns == 1 else columns,
            actions=np.stack([s[1] for s in steps]),
            rewards=np.stack([s[2] for s in steps]),
            terminated=bool(terminated),
            observation_keys=self._observation_signature.keys,
        )
        for index in range(episode.transition_count):
            self._buffer.append(episode, index)

    def __repr__(self) -> str:
        return f"ExperienceWriter(buffer={self._buffer!r}, write_at_termination={self._write_at_termination})"
