"""Readable summaries of datasets: episodes, transitions, signatures, returns."""

from __future__ import annotations

import numpy as np

__all__ = ["summary_dict", "format_summary"]


def summary_dict(info, returns, lengths, terminated, transitions) -> dict:
    def stats(x: np.ndarray) -> dict:
        if x.size == 0:
            return {"mean": float("nan"), "std": float("nan"), "min": float("nan"), "max": float("nan")}
        return {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()), "max": float(x.max())}

    return {
        "episodes": int(lengths.shape[0]),
        "terminated_episodes": terminated,
        "transitions": int(transitions),
        "steps": int(lengths.sum()),
        "observation_signature": info.observation_signature,
        "action_signature": info.action_signature,
        "reward_signature": info.reward_signature,
        "action_space": info.action_space,
        "action_size": info.action_size,
        "episode_return": stats(returns),
        "episode_length": stats(lengths.astype(np.float64)),
    }


def format_summary(name: str, s: dict) -> str:
    r, ln = s["episode_return"], s["episode_length"]
    ended = ""
    if s["terminated_episodes"] is not None:
        ended = f" ({s['terminated_episodes']} terminated, {s['episodes'] - s['terminated_episodes']} truncated)"
    space = s["action_space"].name.lower()
    return (
        f"{name}: {s['episodes']} episodes{ended}, {s['transitions']} transitions, {s['steps']} steps\n"
        f"  observations: {s['observation_signature']!r}\n"
        f"  actions: {space}, {s['action_signature']!r}, action_size={s['action_size']}\n"
        f"  rewards: {s['reward_signature']!r}\n"
        f"  episode return: mean {r['mean']:.4g}, std {r['std']:.4g}, min {r['min']:.4g}, max {r['max']:.4g}\n"
        f"  episode length: mean {ln['mean']:.4g}, min {ln['min']:.0f}, max {ln['max']:.0f}"
    )
