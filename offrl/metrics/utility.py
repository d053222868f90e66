"""Rolling a policy out in a gymnasium environment."""

from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from .._vector_env import is_vector_env
from .vector_rollout import vector_rollout_returns

__all__ = [
    "check_rollout_args",
    "evaluate_qlearning_with_environment",
    "evaluate_transformer_with_environment",
    "rollout_returns",
]


def _batched(observation: Any) -> Any:
    """One observation with a batch axis of 1 (tuple observations: a list;
    dict observations: a dict, which ``predict`` takes by key)."""
    if isinstance(observation, dict):
        return {k: np.asarray(v)[None] for k, v in observation.items()}
    if isinstance(observation, (list, tuple)):
        return [np.asarray(o)[None] for o in observation]
    return np.asarray(observation)[None]


def _check_finite(observation: Any, episode: int, step: int) -> None:
    parts = observation if isinstance(observation, list) else [observation]
    parts = list(observation.values()) if isinstance(observation, dict) else parts
    for part in parts:
        if np.issubdtype(part.dtype, np.floating) and not np.isfinite(part).all():
            raise ValueError(f"the environment returned a non-finite observation at episode {episode}, step {step}")


def check_rollout_args(n_trials: Any, epsilon: Any) -> None:
    """Raise ``ValueError`` unless ``n_trials`` is a positive int and
    ``epsilon`` a probability."""
    if isinstance(n_trials, bool) or not isinstance(n_trials, (int, np.integer)) or n_trials <= 0:
        raise ValueError(f"n_trials must be a positive int, got {n_trials!r}")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float, np.integer, np.floating)) \
            or not 0.0 <= float(epsilon) <= 1.0:
        raise ValueError(f"epsilon must be a number in [0, 1], got {epsilon!r}")


def rollout_returns(
    algo: Any,
    env: Any,
    n_trials: int = 10,
    epsilon: float = 0.0,
    seed: Optional[int] = None,
    gamma: float = 1.0,
    target_return: Optional[float] = None,
) -> List[float]:
    """Returns of ``n_trials`` episodes of ``algo``'s greedy policy in
    ``env`` (gymnasium 1.x API), discounted by ``gamma`` (1: undiscounted;
    ``gamma < 1`` gives the figure off-policy estimates such as FQE
    estimate). With probability ``epsilon`` an action is drawn from
    ``env.action_space`` instead. ``seed`` seeds the first reset (later
    resets continue the environment's generator). A sequence model
    (``predicts_from_sequences``: the Decision Transformer family, or an
    ``offrl.ope.SequencePolicy``) acts through its stateful wrapper at
    ``target_return`` (required for a bare model; ``epsilon`` must be 0).
    ``env`` may be vectorised (a ``gymnasium.vector`` env or a list of
    envs): the trials are split across its environments, see
    :func:`~offrl.metrics.vector_rollout.vector_rollout_returns`."""
    check_rollout_args(n_trials, epsilon)
    actor = algo.as_stateful_wrapper(target_return) if getattr(algo, "predicts_from_sequences", False) else None
    if actor is not None and epsilon:
        raise ValueError(f"epsilon={epsilon!r}: a sequence model's context holds its own actions; use epsilon=0")
    if actor is None and target_return is not None:
        raise ValueError(f"target_return is only for sequence models; {type(algo).__name__} acts from observations")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.integer, np.floating)) or not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    if actor is None and not callable(getattr(algo, "predict", None)):
        raise TypeError(f"algo must have predict(observations) -> actions, got {type(algo).__name__}")
    if not getattr(algo, "is_built", True):  # any object with predict works, as in d3rlpy
        raise ValueError(f"{type(algo).__name__} is not built: fit it or build it before evaluating it in an environment")
    if is_vector_env(env):  # a gymnasium.vector env or a list of envs: see vector_rollout_returns
        if actor is not None:
            raise ValueError("a sequence model is evaluated in one environment at a time; give a single env")
        return vector_rollout_returns(algo, env, int(n_trials), float(epsilon), seed, float(gamma))
    rng = np.random.default_rng(seed)
    returns: List[float] = []
    for trial in range(int(n_trials)):
        observation, _ = env.reset(seed=seed if trial == 0 else None)
        total = 0.0
        discount = 1.0
        step = 0
        reward = 0.0
        if actor is not None:
            actor.reset()
        while True:
            if epsilon > 0.0 and rng.random() < epsilon:
                action = env.action_space.sample()
            elif actor is not None:
                action = actor.predict(observation, float(reward))
            else:
                batch = _batched(observation)
                _check_finite(batch, trial, step)
                action = algo.predict(batch)[0]
            observation, reward, terminated, truncated, _ = env.step(action)
            total += discount * float(reward)
            discount *= gamma
            step += 1
            if terminated or truncated:
                break
        returns.append(total)
    return returns


def evaluate_qlearning_with_environment(algo: Any, env: Any, n_trials: int = 10, epsilon: float = 0.0) -> float:
    """Mean undiscounted return of ``n_trials`` episodes (d3rlpy's name).
    ``algo`` is anything with ``predict(observations) -> actions``."""
    return float(np.mean(rollout_returns(algo, env, n_trials, epsilon)))


def evaluate_transformer_with_environment(algo: Any, env: Any, n_trials: int = 10) -> float:
    """Mean undiscounted return of ``n_trials`` episodes of a stateful
    sequence policy (d3rlpy's name): ``algo.reset()`` starts each episode and
    ``algo.predict(observation, reward)`` takes one unbatched observation and
    the last reward (0 at the start) and returns one action."""
    if isinstance(n_trials, bool) or not isinstance(n_trials, (int, np.integer)) or n_trials <= 0:
        raise ValueError(f"n_trials must be a positive int, got {n_trials!r}")
    for method in ("reset", "predict"):
        if not callable(getattr(algo, method, None)):
            raise TypeError(f"algo must have reset() and predict(observation, reward), got {type(algo).__name__}")
    if is_vector_env(env):
        raise ValueError("a sequence model is evaluated in one environment at a time; give a single env")
    returns = []
    for _ in range(int(n_trials)):
        algo.reset()
        observation, _ = env.reset()
        reward, total = 0.0, 0.0
        while True:
            action = algo.predict(observation, reward)
            observation, step_reward, terminated, truncated, _ = env.step(action)
            reward = float(step_reward)
            total += reward
            if terminated or truncated:
                break
        returns.append(total)
    return float(np.mean(returns))
