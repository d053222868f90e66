"""Seeded synthetic data shared by several benchmarks (not a benchmark).

Plain numpy only: the same arrays come out in the offrl interpreter and in
the d3rlpy worker, so both libraries are timed on identical data.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

SEED = 0

# algos.py / ope.py / metrics.py: Pendulum-like and CartPole-like sets
N_STEPS = 20_000
PENDULUM_EPISODE = 200
CARTPOLE_EPISODES = (10, 200)  # episode lengths drawn from [10, 200)

# dataset.py / prioritized.py: a locomotion-sized set
OBS_DIM = 17
ACTION_DIM = 6
EPISODE_LENGTH = 1000


def make_data(kind: str, steps: int = N_STEPS, seed: int = SEED) -> Dict[str, np.ndarray]:
    """Arrays of a ``"pendulum"``-like set (3-dim observations, 1-dim actions
    in [-2, 2], 200-step episodes ending in a timeout) or a ``"cartpole"``-like
    set (4-dim observations, 2 discrete actions, terminal episodes of 10-199
    steps)."""
    rng = np.random.default_rng(seed)
    terminals = np.zeros(steps, dtype=np.float32)
    timeouts = np.zeros(steps, dtype=np.float32)
    if kind == "pendulum":
        observations = rng.standard_normal((steps, 3), dtype=np.float32)
        actions = rng.uniform(-2.0, 2.0, size=(steps, 1)).astype(np.float32)
        rewards = rng.standard_normal(steps, dtype=np.float32)
        timeouts[PENDULUM_EPISODE - 1 :: PENDULUM_EPISODE] = 1.0
        timeouts[-1] = 1.0
    elif kind == "cartpole":
        observations = rng.standard_normal((steps, 4), dtype=np.float32)
        actions = rng.integers(0, 2, size=steps).astype(np.int64)
        rewards = np.ones(steps, dtype=np.float32)
        ends, t = [], 0
        while True:
            t += int(rng.integers(*CARTPOLE_EPISODES))
            if t >= steps:
                break
            ends.append(t - 1)
        terminals[ends] = 1.0
        terminals[-1] = 1.0
    else:
        raise ValueError(f"kind must be 'pendulum' or 'cartpole', got {kind!r}")
    return {"observations": observations, "actions": actions, "rewards": rewards,
            "terminals": terminals, "timeouts": timeouts}


def reference_arrays(data: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Transitions as flat arrays for the bare-numpy sampler: every step
    with a successor in its episode, and every terminal step (next
    observation zeros); a timeout's last step has no successor and is left
    out."""
    obs = data["observations"]
    end = (data["terminals"] > 0) | (data["timeouts"] > 0)
    keep = ~(data["timeouts"] > 0)
    next_obs = np.zeros_like(obs)
    next_obs[:-1] = obs[1:]
    next_obs[end] = 0.0
    actions = data["actions"]
    if actions.ndim == 1:
        actions = actions.reshape(-1, 1)
    next_actions = np.zeros_like(actions)  # the action logged at s' (ReBRAC's critic penalty)
    next_actions[:-1] = actions[1:]
    next_actions[end] = 0
    returns = np.zeros(len(obs), dtype=np.float64)  # discounted (0.99) returns-to-go (CalQL), once
    running = 0.0
    for t in range(len(obs) - 1, -1, -1):
        running = float(data["rewards"][t]) + (0.0 if end[t] else 0.99 * running)
        returns[t] = running
    return {
        "observations": obs[keep], "actions": actions[keep], "rewards": data["rewards"][keep],
        "next_observations": next_obs[keep], "terminals": data["terminals"][keep],
        "next_actions": next_actions[keep], "returns_to_go": returns[keep].astype(np.float32),
    }


def make_locomotion_data(steps: int, seed: int = SEED) -> Dict[str, np.ndarray]:
    """17-dim float32 observations, 6-dim float32 actions in [-1, 1], float32
    rewards; every 1,000-step episode's last step is terminal (a shorter last
    episode when ``steps`` is not a multiple of 1,000)."""
    rng = np.random.default_rng(seed)
    observations = rng.standard_normal((steps, OBS_DIM), dtype=np.float32)
    actions = rng.uniform(-1.0, 1.0, size=(steps, ACTION_DIM)).astype(np.float32)
    rewards = rng.standard_normal(steps, dtype=np.float32)
    terminals = np.zeros(steps, dtype=np.float32)
    terminals[EPISODE_LENGTH - 1 :: EPISODE_LENGTH] = 1.0
    terminals[-1] = 1.0
    return {"observations": observations, "actions": actions, "rewards": rewards, "terminals": terminals}


def input_bytes(data: Dict[str, np.ndarray]) -> int:
    """Bytes of the input arrays (the memory baseline)."""
    return int(sum(a.nbytes for a in data.values()))


def builtin_arrays(name: str) -> dict:
    """The built-in dataset ``name`` (``"pendulum-medium"``, ...) as plain
    arrays, episodes end to end, ``terminals`` / ``timeouts`` marking their
    ends: both libraries build their dataset from these same arrays."""
    from offrl.datasets import get_dataset

    dataset, _ = get_dataset(name)
    columns: dict = {"observations": [], "actions": [], "rewards": [], "terminals": [], "timeouts": []}
    for episode in dataset.episodes:
        n = int(episode.size())
        last = np.zeros(n, np.float32)
        last[-1] = 1.0
        columns["observations"].append(np.asarray(episode.observations, np.float32))
        columns["actions"].append(np.asarray(episode.actions))
        columns["rewards"].append(np.asarray(episode.rewards, np.float32).reshape(n))
        columns["terminals"].append(last if episode.terminated else np.zeros(n, np.float32))
        columns["timeouts"].append(np.zeros(n, np.float32) if episode.terminated else last)
    data = {k: np.concatenate(v) for k, v in columns.items()}
    if name.startswith("cartpole"):
        data["actions"] = data["actions"].reshape(-1).astype(np.int64)
    return data
