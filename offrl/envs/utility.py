"""Environment helpers."""

from __future__ import annotations

from typing import Any

__all__ = ["seed_env"]


def seed_env(env: Any, seed: int) -> None:
    """Seed a gymnasium environment (its next episode starts from ``seed``)
    and its action space, so that ``env.action_space.sample()`` repeats too."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    env.reset(seed=seed)
    space = getattr(env, "action_space", None)
    if space is not None and hasattr(space, "seed"):
        space.seed(seed)
