"""Several gymnasium environments stepped as one: a ``gymnasium.vector``
environment in any autoreset mode (NEXT_STEP, SAME_STEP, DISABLED; those of
gymnasium 1.0 always autoreset NEXT_STEP) or a plain list of environments,
with observations in offrl's batched form (an array ``(N, *shape)``, or a
list of such arrays for tuple / dict observations). Used by online training
(``fit_online`` / ``collect``) and by evaluation in an environment
(``rollout_returns``)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

__all__ = ["is_vector_env", "vector_spaces", "VectorEnv", "SpaceView", "check_env", "as_observation", "row", "rows",
           "copy_observation", "stack_observations"]


def check_env(env: Any, name: str = "env") -> None:
    """Raise ``TypeError`` unless ``env`` looks like a gymnasium environment."""
    missing = [a for a in ("reset", "step", "observation_space", "action_space") if not hasattr(env, a)]
    if missing:
        raise TypeError(f"{name} must be a gymnasium environment; {type(env).__name__} has no {', '.join(missing)}")


def as_observation(raw: Any, keys: Optional[List[Any]] = None) -> Any:
    """An environment observation as offrl takes it: an array, or a list of
    arrays for tuple / dict observations (dict values in ``keys`` order: the
    callers pass the stored, sorted key order)."""
    if type(raw) is np.ndarray:
        return raw
    if isinstance(raw, dict):
        return [np.asarray(raw[k]) for k in (keys if keys is not None else raw)]
    if isinstance(raw, (list, tuple)):
        return [np.asarray(v) for v in raw]
    return np.asarray(raw)


def is_vector_env(env: Any) -> bool:
    """Whether ``env`` is several environments: a ``gymnasium.vector``
    environment (``num_envs`` and ``single_*_space``) or a list/tuple of
    environments."""
    if isinstance(env, (list, tuple)):
        return True
    return hasattr(env, "num_envs") and hasattr(env, "single_observation_space") and hasattr(env, "single_action_space")


class SpaceView:
    """The spaces of one sub-environment of a vectorised environment, for the
    code that builds algorithms, scalers and buffers from an environment."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never stepped
        raise RuntimeError("a sub-environment's spaces cannot be reset")

    def step(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - never stepped
        raise RuntimeError("a sub-environment's spaces cannot be stepped")


def _spaces_equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # pragma: no cover - a space whose == fails
        return a is b


def vector_spaces(env: Any, name: str = "env") -> SpaceView:
    """One sub-environment's spaces of a vectorised ``env``; a list of
    environments must share them (``ValueError`` naming the first index that
    differs)."""
    if isinstance(env, (list, tuple)):
        if len(env) == 0:
            raise ValueError(f"{name} is an empty list; give at least one environment")
        for i, sub in enumerate(env):
            check_env(sub, f"{name}[{i}]")
        first = env[0]
        for i, sub in enumerate(env[1:], start=1):
            for attr in ("observation_space", "action_space"):
                if not _spaces_equal(getattr(sub, attr), getattr(first, attr)):
                    raise ValueError(f"{name}[{i}].{attr} is {getattr(sub, attr)}, but {name}[0].{attr} is "
                                     f"{getattr(first, attr)}: every environment of a vector must have the same spaces")
        return SpaceView(first.observation_space, first.action_space)
    return SpaceView(env.single_observation_space, env.single_action_space)


def row(batch: Any, i: int) -> Any:
    if isinstance(batch, list):
        return [part[i] for part in batch]
    return batch[i]


def rows(batch: Any, index: np.ndarray) -> Any:
    if isinstance(batch, list):
        return [part[index] for part in batch]
    return batch[index]


def stack_observations(observations: List[Any]) -> Any:
    if isinstance(observations[0], list):
        return [np.stack([o[k] for o in observations]) for k in range(len(observations[0]))]
    return np.stack(observations)


def copy_observation(observation: Any) -> Any:
    if isinstance(observation, list):
        return [np.array(part) for part in observation]
    return np.array(observation)


# gymnasium's AutoresetMode values (gymnasium.vector.AutoresetMode, 1.1 on)
_AUTORESET_MODES = {"NextStep": "next", "SameStep": "same", "Disabled": "disabled"}


def autoreset_mode(env: Any) -> str:
    """How a ``gymnasium.vector`` env resets its ended sub-environments:
    ``"next"``, ``"same"`` or ``"disabled"``, from ``metadata["autoreset_mode"]``
    (an ``AutoresetMode`` or its string value). gymnasium 1.0 has no such
    key and always resets on the step after the episode ended (NEXT_STEP),
    so a missing key means ``"next"``; read by value, so that no version of
    gymnasium needs the enum to exist."""
    metadata = getattr(env, "metadata", None)
    mode = metadata.get("autoreset_mode") if isinstance(metadata, dict) else None
    if mode is None:
        return "next"
    value = getattr(mode, "value", mode)
    if not isinstance(value, str) or value not in _AUTORESET_MODES:
        raise ValueError(f"env.metadata['autoreset_mode'] is {mode!r}; offrl steps the vector env autoreset modes "
                         f"{', '.join(_AUTORESET_MODES)}")
    return _AUTORESET_MODES[value]


class VectorEnv:
    """Steps several environments as one, whatever their form: a
    ``gymnasium.vector`` environment in any autoreset mode, or a list of
    environments (reset here as soon as an episode ends).

    :meth:`step` returns the batched next observations, rewards,
    terminated / truncated flags, the final observation of each episode that
    ended, and two masks: ``skipped`` (the step only reset that environment:
    NEXT_STEP autoreset, its action was ignored and it wrote no transition)
    and ``started`` (the returned observation starts a new episode)."""

    def __init__(self, env: Any, keys: Optional[List[Any]]) -> None:
        self.env = env
        self.keys = keys
        if isinstance(env, (list, tuple)):
            self.mode = "list"
            self.n = len(env)
        else:
            self.mode = autoreset_mode(env)
            self.n = int(env.num_envs)
        self.pending_reset = np.zeros(self.n, dtype=bool)

    def reset(self, seed: Optional[int]) -> Any:
        """Reset every environment (environment ``i`` with ``seed + i``)."""
        self.pending_reset[:] = False
        if self.mode == "list":
            return stack_observations([as_observation(sub.reset(seed=None if seed is None else seed + i)[0], self.keys)
                           for i, sub in enumerate(self.env)])
        raw, _ = self.env.reset(seed=seed)
        return as_observation(raw, self.keys)

    def step(self, actions: Any) -> Tuple[Any, np.ndarray, np.ndarray, np.ndarray, Dict[int, Any], np.ndarray, np.ndarray]:
        finals: Dict[int, Any] = {}
        if self.mode == "list":
            observations, rewards, terminated, truncated = [], [], [], []
            for i, sub in enumerate(self.env):
                raw, reward, term, trunc, _ = sub.step(actions[i])
                obs = as_observation(raw, self.keys)
                if term or trunc:
                    finals[i] = obs
                    obs = as_observation(sub.reset()[0], self.keys)
                observations.append(obs)
                rewards.append(reward)
                terminated.append(bool(term))
                truncated.append(bool(trunc))
            ended = np.array(terminated) | np.array(truncated)
            return (stack_observations(observations), np.array(rewards, dtype=object), np.array(terminated), np.array(truncated),
                    finals, np.zeros(self.n, dtype=bool), ended)
        skipped = self.pending_reset.copy()
        raw, rewards, terminated, truncated, info = self.env.step(actions)
        batch = as_observation(raw, self.keys)
        terminated = np.asarray(terminated, dtype=bool) & ~skipped
        truncated = np.asarray(truncated, dtype=bool) & ~skipped
        ended = terminated | truncated
        if self.mode == "same":
            final_obs = info.get("final_obs") if isinstance(info, dict) else None
            for i in np.flatnonzero(ended):
                if final_obs is None or final_obs[i] is None:
                    raise ValueError(f"environment {i}'s episode ended but the vector env's info has no final_obs[{i}] "
                                     "(SAME_STEP autoreset must return it)")
                finals[int(i)] = as_observation(final_obs[i], self.keys)
            return batch, np.asarray(rewards, dtype=object), terminated, truncated, finals, skipped, ended
        for i in np.flatnonzero(ended):
            finals[int(i)] = copy_observation(row(batch, int(i)))
        if self.mode == "next":
            self.pending_reset = ended.copy()
            return batch, np.asarray(rewards, dtype=object), terminated, truncated, finals, skipped, skipped
        if ended.any():  # DISABLED: reset the ended environments ourselves
            raw_reset, _ = self.env.reset(options={"reset_mask": ended})
            reset = as_observation(raw_reset, self.keys)
            if isinstance(batch, list):
                for part, new in zip(batch, reset):
                    part[ended] = new[ended]
            else:
                batch = np.array(batch)
                batch[ended] = reset[ended]
        return batch, np.asarray(rewards, dtype=object), terminated, truncated, finals, skipped, ended
