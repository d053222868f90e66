"""The two ways ``fit_online`` and ``collect`` act in an environment: one
gymnasium environment (:class:`Rollout`) or a vector of them in lockstep
(:class:`VectorRollout`), each writing finished transitions to the buffer and
counting episodes, returns and lengths; and the checks of what an
environment gives back (real rewards, finite observations)."""

from __future__ import annotations

import copy
import math
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .._random import get_rng
from .._vector_env import VectorEnv as _VectorEnv
from .._vector_env import as_observation as _observation
from .._vector_env import SpaceView as _SpaceView
from .._vector_env import copy_observation as _copy
from .._vector_env import row as _row
from .._vector_env import rows as _rows
from .._vector_env import stack_observations as _stack
from ..constants import ActionSpace
from ..dataset.episode import Episode
from ..dataset.replay_buffer import ReplayBuffer
from ..dataset.writer import BasicWriterPreprocess

__all__ = ["Rollout", "VectorRollout", "batched", "non_finite", "real_reward", "real_reward_or_none"]


def batched(observation: Any) -> Any:
    if isinstance(observation, list):
        return [o[None] for o in observation]
    return observation[None]


def non_finite(observation: Any) -> Optional[str]:
    parts = observation if isinstance(observation, list) else [observation]
    for k, part in enumerate(parts):
        if part.dtype.kind == "f" and not np.isfinite(part).all():
            where = tuple(int(i) for i in np.argwhere(~np.isfinite(part))[0])
            prefix = f"observation[{k}]" if len(parts) > 1 else "observation"
            index = f"[{', '.join(map(str, where))}]" if where else ""
            return f"{prefix}{index} is {part[where]}"
    return None


class Rollout:
    """Steps one environment with a behaviour policy and writes the steps
    into a buffer, with gymnasium's terminated / truncated semantics."""

    def __init__(self, algo: Any, env: Any, buffer: Any, explorer: Any, deterministic: bool, random_steps: int,
                 seed: Optional[int] = None) -> None:
        self.algo = algo
        self.env = env
        self.buffer = buffer
        self.explorer = explorer
        self.reset_explorer = getattr(explorer, "reset", None) if explorer is not None else None
        self.random_steps = random_steps
        spaces = getattr(env.observation_space, "spaces", None)
        self.keys = sorted(spaces) if isinstance(spaces, dict) else None  # the stored (sorted) key order
        self.act = algo.predict if deterministic else algo.sample_action
        self.episode = 0
        self.episode_step = 0
        self.episode_return = 0.0
        self.open_episode = False
        self.finished: List[Tuple[float, int]] = []  # (return, length) of episodes ended since last read
        self.time_inference = 0.0
        self.time_environment = 0.0
        if seed is None:
            seed = int(get_rng().integers(2**31 - 1))
        if hasattr(env.action_space, "seed"):
            env.action_space.seed(seed)
        self.observation = self._reset(seed)

    def _reset(self, seed: Optional[int] = None) -> Any:
        raw, _ = self.env.reset(seed=seed) if seed is not None else self.env.reset()
        observation = _observation(raw, self.keys)
        problem = non_finite(observation)
        if problem is not None:
            raise ValueError(f"the environment returned a non-finite observation on reset (episode {self.episode}): {problem}")
        if self.reset_explorer is not None:
            self.reset_explorer()
        return observation

    def step(self, total_step: int) -> None:
        t0 = time.perf_counter()
        if total_step <= self.random_steps:
            action = self.env.action_space.sample()
        elif self.explorer is not None:
            action = self.explorer.sample(self.algo, batched(self.observation), total_step)[0]
        else:
            action = self.act(batched(self.observation))[0]
        t1 = time.perf_counter()
        raw, reward, terminated, truncated, _ = self.env.step(action)
        t2 = time.perf_counter()
        self.time_inference += t1 - t0
        self.time_environment += t2 - t1
        next_observation = _observation(raw, self.keys)
        problem = non_finite(next_observation)
        if problem is not None:
            raise ValueError(
                f"the environment returned a non-finite observation at step {total_step} "
                f"(episode {self.episode}, step {self.episode_step + 1} of the episode): {problem}"
            )
        try:
            if isinstance(reward, (str, bytes)):
                raise TypeError
            reward = float(reward)
        except (TypeError, ValueError):
            raise ValueError(
                f"the environment returned reward {reward!r} ({type(reward).__name__}) at step {total_step} "
                f"(episode {self.episode}, step {self.episode_step + 1} of the episode); expected a real number"
            ) from None
        if not math.isfinite(reward):
            raise ValueError(
                f"the environment returned reward {reward} at step {total_step} "
                f"(episode {self.episode}, step {self.episode_step + 1} of the episode)"
            )
        self.buffer.append(self.observation, action, reward)
        self.open_episode = True
        self.episode_return += reward
        self.episode_step += 1
        if terminated or truncated:
            self.buffer.clip_episode(bool(terminated), None if terminated else next_observation)
            self.open_episode = False
            self.finished.append((self.episode_return, self.episode_step))
            self.episode += 1
            self.episode_step = 0
            self.episode_return = 0.0
            self.observation = self._reset()
        else:
            self.observation = next_observation

    def close(self) -> None:
        """Close the episode being written as truncated at the current observation."""
        if self.open_episode:
            self.buffer.clip_episode(False, self.observation)
            self.open_episode = False


# ------------------------------------------------------- vectorised envs
def real_reward_or_none(reward: Any) -> Optional[float]:
    """``reward`` as a finite float, or None when it is not one."""
    try:
        value = float(reward)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and not isinstance(reward, (str, bytes)) else None


def real_reward(reward: Any, where: str) -> float:
    try:
        if isinstance(reward, (str, bytes)):
            raise TypeError
        value = float(reward)
    except (TypeError, ValueError):
        raise ValueError(f"the environment returned reward {reward!r} ({type(reward).__name__}) {where}; "
                         "expected a real number") from None
    if not math.isfinite(value):
        raise ValueError(f"the environment returned reward {value} {where}")
    return value


class VectorRollout:
    """Steps ``N`` environments at once with one batched policy call and
    writes each environment's episodes into the buffer.

    Each environment's open episode is kept here and written when it ends
    (or when the run stops), so the buffer only ever holds whole episodes
    and the episodes of different environments never interleave (an offrl
    ReplayBuffer takes it with one ``append_episode``).
    Environment ``i`` is reset first with ``seed + i``, its random-step
    action space is a copy of the single action space seeded ``seed + i``
    and an explorer with ``sample_envs`` draws its randomness from
    ``numpy.random.default_rng(seed + i)``: environment ``i`` of a run with
    ``seed=s`` repeats a one-environment run with ``seed=s + i``."""

    def __init__(self, algo: Any, env: Any, spaces: _SpaceView, buffer: Any, explorer: Any, deterministic: bool,
                 random_steps: int, seed: Optional[int]) -> None:
        self.algo = algo
        self.buffer = buffer
        self.explorer = explorer
        self.random_steps = random_steps
        sub_spaces = getattr(spaces.observation_space, "spaces", None)
        self.keys = sorted(sub_spaces) if isinstance(sub_spaces, dict) else None  # the stored (sorted) key order
        self.envs = _VectorEnv(env, self.keys)
        self.n = self.envs.n
        self.act = algo.predict if deterministic else algo.sample_action
        if seed is None:
            seed = int(get_rng().integers(2**31 - 1))
        self.action_spaces = []
        for i in range(self.n):
            space = copy.deepcopy(spaces.action_space)
            if hasattr(space, "seed"):
                space.seed(seed + i)
            self.action_spaces.append(space)
        filler = copy.deepcopy(spaces.action_space)
        if hasattr(filler, "seed"):
            filler.seed(0)
        self.filler = np.asarray(filler.sample())  # the ignored action of an environment being reset
        self.generators = [np.random.default_rng(seed + i) for i in range(self.n)]
        self.per_env = callable(getattr(explorer, "sample_envs", None))
        self.reset_env = getattr(explorer, "reset_env", None) if explorer is not None else None
        self.reset_all = getattr(explorer, "reset", None) if explorer is not None else None
        self.episodes = np.zeros(self.n, dtype=np.int64)
        self.whole: Optional[bool] = None  # episodes written with append_episode (decided at the first one)
        self.discrete = False
        self.action_size = 0
        self.open: List[Dict[str, list]] = [self._new_episode() for _ in range(self.n)]
        self.finished: List[Tuple[float, int, int]] = []  # (return, length, environment) since last read
        self.time_inference = 0.0
        self.time_environment = 0.0
        self.observations = self.envs.reset(seed)
        for i in range(self.n):
            self._start(i, "on reset")

    @staticmethod
    def _new_episode() -> Dict[str, list]:
        return {"observations": [], "actions": [], "rewards": []}

    def _start(self, i: int, when: str) -> None:
        problem = non_finite(_row(self.observations, i))
        if problem is not None:
            raise ValueError(f"environment {i} returned a non-finite observation {when} "
                             f"(its episode {self.episodes[i]}): {problem}")
        if callable(self.reset_env):
            self.reset_env(i)
        elif callable(self.reset_all):
            self.reset_all()

    def _actions(self, active: np.ndarray, total_step: int) -> np.ndarray:
        x = _rows(self.observations, active)
        step = total_step + 1
        if total_step < self.random_steps:
            actions = [self.action_spaces[i].sample() for i in active]
        elif self.explorer is not None:
            if self.per_env:
                actions = self.explorer.sample_envs(self.algo, x, step, [int(i) for i in active],
                                                    [self.generators[i] for i in active])
            else:
                actions = self.explorer.sample(self.algo, x, step)
        else:
            actions = self.act(x)
        if len(actions) != len(active):
            source = "the explorer" if self.explorer is not None else "the policy"
            missing = int(active[min(len(actions), len(active) - 1)])
            raise ValueError(f"{source} returned {len(actions)} actions for the {len(active)} environments stepped "
                             f"(environments {active.tolist()}); environment {missing} has "
                             f"{'none' if len(actions) < len(active) else 'more than one'}")
        full = np.empty((self.n,) + self.filler.shape, dtype=self.filler.dtype)
        full[:] = self.filler
        for row, i in enumerate(active):
            action = np.asarray(actions[row])
            if action.shape != self.filler.shape:
                raise ValueError(f"the action for environment {int(i)} has shape {action.shape}, "
                                 f"expected {self.filler.shape}")
            full[i] = action
        return full

    def step(self, total_step: int, limit: int) -> int:
        """One step of every environment; writes at most ``limit``
        transitions (the first environments by index; the others' episodes
        are closed, truncated before this step). Returns how many it wrote."""
        active = np.flatnonzero(~self.envs.pending_reset)
        t0 = time.perf_counter()
        actions = self._actions(active, total_step) if len(active) else \
            np.broadcast_to(self.filler, (self.n,) + self.filler.shape).copy()
        t1 = time.perf_counter()
        batch, rewards, terminated, truncated, finals, skipped, started = self.envs.step(actions)
        t2 = time.perf_counter()
        self.time_inference += t1 - t0
        self.time_environment += t2 - t1
        kept = [int(i) for i in active[:limit]]
        values = []
        for row, i in enumerate(kept):  # check everything before writing anything
            reward = real_reward_or_none(rewards[i])
            next_observation = finals[i] if i in finals else _row(batch, i)
            problem = non_finite(next_observation)
            if reward is None or problem is not None:
                where = (f"at step {total_step + row + 1} (environment {i}, episode {self.episodes[i]}, "
                         f"step {len(self.open[i]['rewards']) + 1} of the episode)")
                if problem is not None:
                    raise ValueError(f"environment {i} returned a non-finite observation {where}: {problem}")
                real_reward(rewards[i], where)  # raises with the reason
            values.append(reward)
        for i in active[limit:]:  # the run ends inside this vector step
            self._close(int(i))
        for i, reward in zip(kept, values):
            episode = self.open[i]
            episode["observations"].append(_copy(_row(self.observations, i)))
            episode["actions"].append(np.array(actions[i]))
            episode["rewards"].append(reward)
            if terminated[i] or truncated[i]:
                self._write(i, bool(terminated[i]), None if terminated[i] else finals[i])
        written = len(kept)
        self.observations = batch
        for i in np.flatnonzero(started):
            self._start(int(i), "on reset")
        return written

    def _write(self, i: int, terminated: bool, final_observation: Any) -> None:
        episode = self.open[i]
        self.open[i] = self._new_episode()
        if not episode["rewards"]:
            return
        self._append(episode, terminated, final_observation)
        self.finished.append((float(sum(episode["rewards"])), len(episode["rewards"]), i))
        self.episodes[i] += 1

    def _close(self, i: int) -> None:
        """Write environment ``i``'s open episode, truncated at its current observation."""
        episode = self.open[i]
        if not episode["rewards"]:
            return
        self.open[i] = self._new_episode()
        self._append(episode, False, _copy(_row(self.observations, i)))

    def _whole_episodes(self) -> bool:
        """Whether the buffer can take an episode whole (``append_episode``):
        an offrl ReplayBuffer that already has signatures and writes
        observations as they come (a frame-stacking writer needs ``append``)."""
        if not isinstance(self.buffer, ReplayBuffer) or type(self.buffer.writer_preprocessor) is not BasicWriterPreprocess:
            return False
        try:
            info = self.buffer.dataset_info
        except ValueError:
            return False
        self.discrete = info.action_space == ActionSpace.DISCRETE
        self.action_size = int(info.action_size)
        return True

    def _append(self, episode: Dict[str, list], terminated: bool, final_observation: Any) -> None:
        """Write one environment's finished (or cut) episode into the buffer."""
        if self.whole is None:
            self.whole = self._whole_episodes()
        if self.whole:
            actions = np.stack(episode["actions"])
            if self.discrete:
                if not (np.issubdtype(actions.dtype, np.integer) or (actions == np.round(actions)).all()) \
                        or actions.min() < 0 or actions.max() >= self.action_size:
                    self.whole = False  # let append name the bad action
            elif not np.isfinite(actions).all():
                self.whole = False
        if not self.whole:
            for observation, action, reward in zip(episode["observations"], episode["actions"], episode["rewards"]):
                self.buffer.append(observation, action, reward)
            self.buffer.clip_episode(terminated, final_observation)
            return
        observations = _stack(episode["observations"])
        self.buffer.append_episode(Episode(
            observations=observations,
            actions=actions.reshape(len(actions), -1).astype(np.int64 if self.discrete else np.float32),
            rewards=np.asarray(episode["rewards"], dtype=np.float32).reshape(-1, 1),
            terminated=bool(terminated),
            final_observation=None if terminated else final_observation,
        ))

    def close(self) -> None:
        """Write every open episode, truncated at its current observation."""
        for i in range(self.n):
            self._close(i)
