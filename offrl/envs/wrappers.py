"""gymnasium wrappers for image and goal-conditioned environments
(d3rlpy's ``d3rlpy.envs``).

The Atari wrappers need the optional ``atari`` extra
(``pip install offrl[atari]``: ale-py and OpenCV); they import it only when
constructed, so this module imports without it.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Optional

import gymnasium
import numpy as np
from gymnasium.spaces import Box, Dict as DictSpace, Tuple as TupleSpace

__all__ = ["ChannelFirst", "FrameStack", "AtariPreprocessing", "Atari", "GoalConcatWrapper"]


def _channel_first(observation: np.ndarray) -> np.ndarray:
    observation = np.asarray(observation)
    if observation.ndim == 3:
        return np.ascontiguousarray(np.transpose(observation, (2, 0, 1)))
    return observation.reshape((1,) + observation.shape)


class ChannelFirst(gymnasium.Wrapper):
    """Images as ``(channels, height, width)``, as offrl's convolutional
    encoders expect: ``(H, W, C)`` observations are transposed and
    ``(H, W)`` ones get a leading channel axis."""

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, Box) or len(space.shape) not in (2, 3):
            raise ValueError(
                f"ChannelFirst needs an image observation space (a 2-D or 3-D Box), got {space}"
            )
        self.observation_space = Box(
            low=_channel_first(space.low), high=_channel_first(space.high), dtype=space.dtype
        )

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return _channel_first(observation), reward, terminated, truncated, info

    def reset(self, **kwargs: Any):
        observation, info = self.env.reset(**kwargs)
        return _channel_first(observation), info


class FrameStack(gymnasium.Wrapper):
    """Observations of the ``num_stack`` latest frames stacked on a new first
    axis, oldest first, as one numpy array; before the episode has that many
    frames the missing ones are zeros."""

    def __init__(self, env: gymnasium.Env, num_stack: int) -> None:
        super().__init__(env)
        if isinstance(num_stack, bool) or not isinstance(num_stack, int) or num_stack < 1:
            raise ValueError(f"num_stack must be an int >= 1, got {num_stack!r}")
        space = env.observation_space
        if not isinstance(space, Box):
            raise ValueError(f"FrameStack needs a Box observation space, got {space}")
        self._num_stack = num_stack
        self._frames: deque = deque(maxlen=num_stack)
        self.observation_space = Box(
            low=np.repeat(space.low[None], num_stack, axis=0),
            high=np.repeat(space.high[None], num_stack, axis=0),
            dtype=space.dtype,
        )

    def _observation(self) -> np.ndarray:
        return np.stack(self._frames)

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self._frames.append(np.asarray(observation))
        return self._observation(), reward, terminated, truncated, info

    def reset(self, **kwargs: Any):
        observation, info = self.env.reset(**kwargs)
        observation = np.asarray(observation)
        for _ in range(self._num_stack - 1):
            self._frames.append(np.zeros_like(observation))
        self._frames.append(observation)
        return self._observation(), info


def _require_atari() -> None:
    try:
        import ale_py  # noqa: F401
        import cv2  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"the Atari wrappers need the optional 'atari' extra: pip install 'offrl[atari]' ({e})"
        ) from None


class AtariPreprocessing(gymnasium.Wrapper):
    """The standard Atari 2600 preprocessing (Machado et al., 2018): no-op
    starts, frame skipping with max-pooling of the last two frames, resizing
    to ``screen_size`` squares, optional grayscale, scaling and
    end-of-episode on life loss. Built on gymnasium's
    ``AtariPreprocessing``; create the environment with ``frameskip=1``.
    Needs the ``atari`` extra."""

    def __init__(
        self,
        env: gymnasium.Env,
        noop_max: int = 30,
        frame_skip: int = 4,
        screen_size: int = 84,
        terminal_on_life_loss: bool = False,
        grayscale_obs: bool = True,
        grayscale_newaxis: bool = False,
        scale_obs: bool = False,
    ) -> None:
        _require_atari()
        from gymnasium.wrappers import AtariPreprocessing as _GymnasiumAtariPreprocessing

        inner = _GymnasiumAtariPreprocessing(
            env,
            noop_max=noop_max,
            frame_skip=frame_skip,
            screen_size=screen_size,
            terminal_on_life_loss=terminal_on_life_loss,
            grayscale_obs=grayscale_obs,
            grayscale_newaxis=grayscale_newaxis,
            scale_obs=scale_obs,
        )
        super().__init__(inner)


class Atari(gymnasium.Wrapper):
    """Atari set-up for experiments: :class:`AtariPreprocessing` (episodes
    end on a life loss in training), rewards clipped to ``[-1, 1]`` in
    training, then :class:`FrameStack` of ``num_stack`` frames or, without
    ``num_stack``, :class:`ChannelFirst`. Needs the ``atari`` extra."""

    def __init__(self, env: gymnasium.Env, num_stack: Optional[int] = None, is_eval: bool = False) -> None:
        _require_atari()
        from gymnasium.wrappers import TransformReward

        env = AtariPreprocessing(env, terminal_on_life_loss=not is_eval)
        if not is_eval:
            env = TransformReward(env, lambda r: float(np.clip(r, -1.0, 1.0)))
        env = FrameStack(env, num_stack) if num_stack else ChannelFirst(env)
        super().__init__(env)


def _flat_box(space: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` of a Box, or of a Dict of Boxes concatenated in key order."""
    if isinstance(space, Box):
        return space.low.reshape(-1), space.high.reshape(-1)
    if isinstance(space, DictSpace):
        parts = [_flat_box(s, f"{name}[{k!r}]") for k, s in space.spaces.items()]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
    raise ValueError(f"{name} must be a Box or a Dict of Boxes, got {space}")


def _flat(observation: Any) -> np.ndarray:
    if isinstance(observation, dict):
        return np.concatenate([_flat(v) for v in observation.values()])
    return np.asarray(observation).reshape(-1)


class GoalConcatWrapper(gymnasium.Wrapper):
    """A goal-conditioned environment's dict observation as one vector
    ``[observation, goal]`` (or the pair ``(observation, goal)`` with
    ``tuple_observation=True``); a dict goal is flattened in key order."""

    def __init__(
        self,
        env: gymnasium.Env,
        observation_key: str = "observation",
        goal_key: str = "desired_goal",
        tuple_observation: bool = False,
    ) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, DictSpace):
            raise ValueError(f"GoalConcatWrapper needs a Dict observation space, got {space}")
        for key, name in ((observation_key, "observation_key"), (goal_key, "goal_key")):
            if key not in space.spaces:
                raise ValueError(f"{name} {key!r} is not in the observation space keys {list(space.spaces)}")
        self._observation_key = observation_key
        self._goal_key = goal_key
        self._tuple_observation = bool(tuple_observation)
        observation_space = space.spaces[observation_key]
        if not isinstance(observation_space, Box):
            raise ValueError(f"observation space {observation_key!r} must be a Box, got {observation_space}")
        goal_low, goal_high = _flat_box(space.spaces[goal_key], f"observation space {goal_key!r}")
        if self._tuple_observation:
            goal_space = Box(low=goal_low, high=goal_high, dtype=observation_space.dtype)
            self.observation_space = TupleSpace([observation_space, goal_space])
        else:
            self.observation_space = Box(
                low=np.concatenate([observation_space.low.reshape(-1), goal_low]),
                high=np.concatenate([observation_space.high.reshape(-1), goal_high]),
                dtype=observation_space.dtype,
            )

    def _convert(self, observation: dict) -> Any:
        goal = _flat(observation[self._goal_key])
        if self._tuple_observation:
            return (observation[self._observation_key], goal)
        return np.concatenate([np.asarray(observation[self._observation_key]).reshape(-1), goal])

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._convert(observation), reward, terminated, truncated, info

    def reset(self, **kwargs: Any):
        observation, info = self.env.reset(**kwargs)
        return self._convert(observation), info
