"""Tiny gymnasium environments for the online-training tests."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import gymnasium
import numpy as np
from gymnasium import spaces


class Corridor(gymnasium.Env):
    """Positions ``0 .. length-1``, start at 0; action 1 moves right, 0 left
    (a wall at 0). Reaching the last position gives reward 1 and terminates;
    every other step gives 0; ``max_steps`` steps truncate. Observations are
    one-hot positions. The optimal policy always moves right."""

    def __init__(self, length: int = 5, max_steps: int = 20) -> None:
        self.length = length
        self.max_steps = max_steps
        self.observation_space = spaces.Box(0.0, 1.0, (length,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.position = 0
        self.t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length, dtype=np.float32)
        obs[self.position] = 1.0
        return obs

    def reset(self, *, seed: Optional[int] = None, options: Any = None):
        super().reset(seed=seed)
        self.position, self.t = 0, 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        self.position = max(0, self.position + (1 if int(action) == 1 else -1))
        terminated = self.position == self.length - 1
        return self._obs(), float(terminated), terminated, self.t >= self.max_steps and not terminated, {}


class ContinuousCorridor(gymnasium.Env):
    """A 1-D position in ``[0, 1]``, start at 0; action ``a`` in ``[-1, 1]``
    moves it by ``0.25 a``. Reward is the distance moved, plus 1 on reaching
    1 (which terminates); ``max_steps`` steps truncate. The optimal action is
    +1 everywhere."""

    def __init__(self, max_steps: int = 20) -> None:
        self.max_steps = max_steps
        self.observation_space = spaces.Box(0.0, 1.0, (1,), np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.position = 0.0
        self.t = 0

    def reset(self, *, seed: Optional[int] = None, options: Any = None):
        super().reset(seed=seed)
        self.position, self.t = 0.0, 0
        return np.array([self.position], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        old = self.position
        self.position = float(np.clip(old + 0.25 * float(np.clip(action[0], -1.0, 1.0)), 0.0, 1.0))
        terminated = self.position >= 1.0
        reward = self.position - old + float(terminated)
        truncated = self.t >= self.max_steps and not terminated
        return np.array([self.position], dtype=np.float32), reward, terminated, truncated, {}


class ScriptedEnv(gymnasium.Env):
    """Episodes of scripted lengths and endings, actions ignored.

    Episode ``e`` (0-based, cycling through ``script``, a list of
    ``(length, "terminated" | "truncated")``) shows observation ``[e, t]``
    at its step ``t`` (``t = 0`` after reset; the observation returned with
    the ending is ``[e, length]``) and gives reward ``10 e + t + 1`` for
    step ``t``. With ``tuple_obs`` observations are ``([e, t], [t])``
    (a Tuple space). ``nan_at`` (a global step number, 1-based) makes that
    step return a NaN observation; ``raise_at`` makes it raise RuntimeError.
    With ``dict_obs`` observations are ``{"time": [t], "position": [e, t]}``
    (a Dict space, whose keys gymnasium sorts: "position", "time").
    """

    def __init__(self, script: Sequence[Tuple[int, str]] = ((3, "terminated"), (4, "truncated")),
                 tuple_obs: bool = False, nan_at: Optional[int] = None, raise_at: Optional[int] = None,
                 continuous: bool = False, dict_obs: bool = False) -> None:
        self.script = list(script)
        self.tuple_obs = tuple_obs
        self.dict_obs = dict_obs
        self.nan_at = nan_at
        self.raise_at = raise_at
        box = spaces.Box(-np.inf, np.inf, (2,), np.float32)
        aux = spaces.Box(-np.inf, np.inf, (1,), np.float32)
        if dict_obs:
            self.observation_space = spaces.Dict({"time": aux, "position": box})
        else:
            self.observation_space = spaces.Tuple((box, aux)) if tuple_obs else box
        self.action_space = spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else spaces.Discrete(2)
        self.episode = -1
        self.t = 0
        self.global_step = 0
        self.resets = 0

    def _obs(self) -> Any:
        main = np.array([self.episode, self.t], dtype=np.float32)
        if self.dict_obs:
            return {"time": np.array([self.t], dtype=np.float32), "position": main}
        if self.tuple_obs:
            return (main, np.array([self.t], dtype=np.float32))
        return main

    def reset(self, *, seed: Optional[int] = None, options: Any = None):
        super().reset(seed=seed)
        self.resets += 1
        self.episode += 1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.global_step += 1
        if self.raise_at is not None and self.global_step == self.raise_at:
            raise RuntimeError(f"scripted failure at step {self.global_step}")
        length, ending = self.script[self.episode % len(self.script)]
        reward = 10.0 * self.episode + self.t + 1.0
        self.t += 1
        done = self.t >= length
        obs = self._obs()
        if self.nan_at is not None and self.global_step == self.nan_at:
            obs = (np.array([np.nan, 0.0], dtype=np.float32), obs[1]) if self.tuple_obs else np.array([self.episode, np.nan], dtype=np.float32)
        return obs, reward, done and ending == "terminated", done and ending == "truncated", {}


def scripted_episodes(script: Sequence[Tuple[int, str]], n_steps: int) -> List[dict]:
    """What :class:`ScriptedEnv` episodes ``n_steps`` steps produce, written
    out plainly: per episode its observations, rewards, whether it
    terminated, and its final observation (truncated episodes, including the
    one cut by the end of the run)."""
    episodes = []
    e, done_steps = 0, 0
    while done_steps < n_steps:
        length, ending = script[e % len(script)]
        steps = min(length, n_steps - done_steps)
        cut = steps < length
        terminated = ending == "terminated" and not cut
        episodes.append({
            "observations": np.array([[e, t] for t in range(steps)], dtype=np.float32),
            "rewards": np.array([10.0 * e + t + 1.0 for t in range(steps)], dtype=np.float32),
            "terminated": terminated,
            "final_observation": None if terminated else np.array([e, steps], dtype=np.float32),
        })
        done_steps += steps
        e += 1
    return episodes
