"""The random state offrl draws from, reseeded by :func:`offrl.seed`."""

from __future__ import annotations

import contextlib
import random
from typing import Iterator

import numpy as np

__all__ = ["get_rng", "seed", "seeded"]

_rng = np.random.default_rng()


def get_rng() -> np.random.Generator:
    """The numpy generator used by replay buffers and samplers."""
    return _rng


@contextlib.contextmanager
def using_rng(rng: np.random.Generator) -> Iterator[None]:
    """Make ``rng`` the generator :func:`get_rng` returns inside the block
    (a data-parallel rank's own stream), the previous one after it."""
    global _rng
    saved = _rng
    _rng = rng
    try:
        yield
    finally:
        _rng = saved


def seed(n: int) -> None:
    """Seed every random source offrl uses (numpy, Python, torch).

    After ``offrl.seed(n)`` the same program gives the same samples and, on
    the same device, the same trained networks.
    """
    global _rng
    if not isinstance(n, (int, np.integer)) or isinstance(n, bool):
        raise TypeError(f"seed must be an int, got {type(n).__name__}")
    n = int(n)
    _rng = np.random.default_rng(n)
    random.seed(n)
    np.random.seed(n % (2**32))
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return
    torch.manual_seed(n)


@contextlib.contextmanager
def seeded(n: int) -> Iterator[None]:
    """Run a block under :func:`seed` ``(n)`` and restore every random
    state afterwards (offrl's generator, Python's, numpy's global one,
    torch's CPU one), so library code can be deterministic without changing
    the caller's random streams."""
    global _rng
    import torch

    saved = (_rng, random.getstate(), np.random.get_state(), torch.random.get_rng_state())
    try:
        seed(n)
        yield
    finally:
        _rng = saved[0]
        random.setstate(saved[1])
        np.random.set_state(saved[2])
        torch.random.set_rng_state(saved[3])
