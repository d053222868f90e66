"""Shared fixtures for algorithm tests: tiny datasets of every observation kind."""

from __future__ import annotations

import numpy as np
import pytest

from offrl.dataset import MDPDataset


def make_dataset(kind: str, discrete: bool, n: int = 64, seed: int = 0, action_size: int = 2) -> MDPDataset:
    """A small random dataset. kind: 'vector' (3,), 'image' (1, 36, 36) uint8,
    or 'tuple' ((3,), (1, 36, 36) uint8)."""
    rng = np.random.default_rng(seed)
    vector = rng.normal(size=(n, 3)).astype(np.float32) * 2.0 + 1.0
    image = rng.integers(0, 256, size=(n, 1, 36, 36), dtype=np.uint8)
    observations = {"vector": vector, "image": image, "tuple": [vector, image]}[kind]
    if discrete:
        actions = rng.integers(0, action_size, size=n)
    else:
        actions = rng.uniform(-2.0, 3.0, size=(n, action_size)).astype(np.float32)
    rewards = rng.normal(size=n).astype(np.float32) * 3.0 + 1.0
    terminals = np.zeros(n, dtype=np.float32)
    terminals[np.arange(7, n, 8)] = 1.0
    return MDPDataset(observations, actions, rewards, terminals, action_size=action_size if discrete else None)


@pytest.fixture
def dataset_factory():
    return make_dataset
