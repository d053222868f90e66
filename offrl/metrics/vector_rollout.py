"""Evaluating a policy in several environments at once (``rollout_returns``
with a ``gymnasium.vector`` environment or a list of environments)."""

from __future__ import annotations

import copy
from typing import Any, List, Optional

import numpy as np

from .._vector_env import VectorEnv, rows, vector_spaces

__all__ = ["vector_rollout_returns"]


def _check_finite_rows(batch: Any, envs: np.ndarray, episodes: List[int], steps: np.ndarray) -> None:
    for part in (batch if isinstance(batch, list) else [batch]):
        if np.issubdtype(part.dtype, np.floating):
            bad = ~np.isfinite(part.reshape(len(envs), -1)).all(axis=1)
            if bad.any():
                i = int(envs[np.flatnonzero(bad)[0]])
                raise ValueError(f"environment {i} returned a non-finite observation at its episode "
                                 f"{episodes[i]}, step {int(steps[i])}")


def vector_rollout_returns(algo: Any, env: Any, n_trials: int, epsilon: float = 0.0, seed: Optional[int] = None,
                           gamma: float = 1.0) -> List[float]:
    """Returns of ``n_trials`` greedy episodes of ``algo`` run on the
    sub-environments of a vectorised ``env``, in trial order.

    Sub-environment ``i`` of ``N`` runs trials ``i, i + N, ...`` (its first
    ``ceil`` or ``floor`` of ``n_trials / N`` episodes): a fixed split rather
    than the first episodes to finish, which would favour short episodes.
    Each vector step makes one ``predict`` call for the environments still
    counted; with probability ``epsilon`` an environment's action is drawn
    from a copy of the single action space instead (seeded ``seed``).
    ``seed`` seeds the first reset, sub-environment ``i`` with ``seed + i``.
    Arguments are checked by :func:`~offrl.metrics.utility.rollout_returns`."""
    spaces = vector_spaces(env)
    sub_spaces = getattr(spaces.observation_space, "spaces", None)
    envs = VectorEnv(env, sorted(sub_spaces) if isinstance(sub_spaces, dict) else None)  # the stored key order
    n = envs.n
    quota = np.array([n_trials // n + (1 if i < n_trials % n else 0) for i in range(n)])
    rng = np.random.default_rng(seed)
    action_space = copy.deepcopy(spaces.action_space)
    if hasattr(action_space, "seed"):
        action_space.seed(seed)
    filler = np.asarray(action_space.sample())  # the action of environments no longer counted
    returns: List[List[float]] = [[] for _ in range(n)]
    totals = np.zeros(n)
    discounts = np.ones(n)
    steps = np.zeros(n, dtype=np.int64)
    observations = envs.reset(seed)
    while True:
        done = np.array([len(r) for r in returns])
        if (done >= quota).all():
            break
        active = np.flatnonzero((done < quota) & ~envs.pending_reset)
        actions = np.empty((n,) + filler.shape, dtype=filler.dtype)
        actions[:] = filler
        explore = rng.random(len(active)) < epsilon if epsilon > 0.0 else np.zeros(len(active), dtype=bool)
        greedy = active[~explore]
        if len(greedy):
            batch = rows(observations, greedy)
            _check_finite_rows(batch, greedy, [len(r) for r in returns], steps)
            predicted = np.asarray(algo.predict(batch))
            if len(predicted) != len(greedy):
                raise ValueError(f"predict returned {len(predicted)} actions for the {len(greedy)} observations of "
                                 f"environments {greedy.tolist()}")
            actions[greedy] = predicted
        for i in active[explore]:
            actions[i] = action_space.sample()
        observations, rewards, terminated, truncated, _, _, _ = envs.step(actions)
        for i in active:
            totals[i] += discounts[i] * float(rewards[i])
            discounts[i] *= gamma
            steps[i] += 1
            if terminated[i] or truncated[i]:
                returns[i].append(float(totals[i]))
                totals[i], discounts[i], steps[i] = 0.0, 1.0, 0
    return [returns[k % n][k // n] for k in range(n_trials)]
