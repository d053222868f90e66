"""Shared fixtures for algorithm tests: tiny datasets of every observation
kind, the hand-built continuous 4-transition batch, a one-step problem,
built algorithms and a quiet ``fit``.

The fixtures hand out builder functions (not built objects) so a test can
make several fresh copies or pass arguments. The discrete hand-built batch
and the reference losses of the discrete algorithms are in hand_losses.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import pytest
import torch

import offrl
from offrl.dataset import MDPDataset, TransitionMiniBatch
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory


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


# ------------------------------------------------------------- continuous
def continuous_hand_batch() -> TransitionMiniBatch:
    """Four transitions: 3-dim observations, 2-dim actions in [-1, 1], one
    terminal and one two-step interval (so gamma^k and (1 - d) both show)."""
    obs = np.array([[0.1, 0.2, -0.3], [0.3, -0.1, 0.0], [-0.5, 0.4, 0.2], [0.0, 1.0, -1.0]], dtype=np.float32)
    nxt = np.array([[0.2, 0.1, 0.0], [0.0, 0.0, 0.5], [0.6, -0.3, 0.1], [1.0, 1.0, 1.0]], dtype=np.float32)
    return TransitionMiniBatch(
        observations=obs,
        actions=np.array([[0.5, -0.2], [-0.9, 0.1], [0.0, 0.7], [0.3, 0.3]], dtype=np.float32),
        rewards=np.array([[1.0], [0.0], [-1.0], [0.5]], dtype=np.float32),
        next_observations=nxt,
        next_actions=np.zeros((4, 2), dtype=np.float32),
        terminals=np.array([[0.0], [1.0], [0.0], [0.0]], dtype=np.float32),
        intervals=np.array([[1.0], [1.0], [2.0], [1.0]], dtype=np.float32),
    )


@pytest.fixture
def hand_batch() -> Callable[[], TransitionMiniBatch]:
    """Builder of the hand-built continuous batch (a fresh copy per call)."""
    return continuous_hand_batch


def _batch_tensors(batch: TransitionMiniBatch):
    """``obs, act, next_obs`` as tensors and ``rewards, terminals, intervals`` as ``(B,)`` tensors."""
    obs, act = torch.from_numpy(batch.observations), torch.from_numpy(batch.actions)
    nxt = torch.from_numpy(batch.next_observations)
    r, d, k = (torch.from_numpy(a)[:, 0] for a in (batch.rewards, batch.terminals, batch.intervals))
    return obs, act, nxt, r, d, k


@pytest.fixture
def batch_tensors():
    return _batch_tensors


def _fixed_sample(mean: torch.Tensor, logstd: torch.Tensor, n: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic stand-in for ``squashed_sample``: ``u = mean + 0.5 std``
    (with ``n``: ``n`` samples at offsets spread over [-1, 1] std) and an
    arbitrary differentiable log-density ``-|u|^2``."""
    if n > 0:
        offsets = torch.linspace(-1.0, 1.0, n).view(1, n, 1)
        u = mean.unsqueeze(1) + offsets * logstd.exp().unsqueeze(1)
    else:
        u = mean + 0.5 * logstd.exp()
    return torch.tanh(u), -(u**2).sum(dim=-1)


@pytest.fixture
def fixed_sample():
    """Deterministic replacement for ``squashed_sample`` (monkeypatch it in)."""
    return _fixed_sample


def _one_step_dataset(n: int = 512, seed: int = 0, constant: bool = True) -> tuple[MDPDataset, np.ndarray]:
    """One-step episodes: reward -(a - 0.5)^2, logged actions uniform in
    [-1, 1]; observations all zero (``constant``) or standard normal.
    Returns the dataset and its observations."""
    rng = np.random.default_rng(seed)
    obs = (np.zeros((n, 3)) if constant else rng.normal(size=(n, 3))).astype(np.float32)
    actions = rng.uniform(-1.0, 1.0, size=(n, 1)).astype(np.float32)
    rewards = -((actions[:, 0] - 0.5) ** 2)
    return MDPDataset(obs, actions, rewards, np.ones(n, dtype=np.float32)), obs


@pytest.fixture
def one_step_dataset():
    return _one_step_dataset


def _fit_quietly(algo, dataset, n_steps: int):
    """``n_steps`` of ``fit`` in one epoch, no logs, no progress bar."""
    return algo.fit(dataset, n_steps=n_steps, n_steps_per_epoch=n_steps, logger_adapter=NoopAdapterFactory(), show_progress=False)


@pytest.fixture
def fit_quietly():
    return _fit_quietly


@pytest.fixture
def fit_one_step_problem():
    """Builder: ``(make_config, seed, n_steps) -> greedy actions (100,)``.

    Seeds everything, fits ``make_config(encoder_factory)`` (64x64 encoders)
    on the 1,000-transition one-step problem with random observations, and
    predicts on 100 fresh states; the best logged action is 0.5."""

    def fit(make_config: Callable[[VectorEncoderFactory], object], seed: int, n_steps: int) -> np.ndarray:
        offrl.seed(seed)
        dataset, _ = _one_step_dataset(n=1000, seed=seed, constant=False)
        algo = make_config(VectorEncoderFactory(hidden_units=[64, 64])).create()
        _fit_quietly(algo, dataset, n_steps)
        x = np.random.default_rng(seed + 100).normal(size=(100, 3)).astype(np.float32)
        return algo.predict(x)[:, 0]

    return fit


@pytest.fixture
def small_encoder() -> VectorEncoderFactory:
    """A one-layer, 8-unit encoder: enough for hand-computed losses."""
    return VectorEncoderFactory(hidden_units=[8])


@pytest.fixture
def build_algo():
    """Builder: ``(config, action_size=2, observation_shape=(3,), perturb=(), scale=0.1)``.

    Creates the algorithm and its networks; then adds ``scale * N(0, 1)``
    noise to every network named in ``perturb`` (target networks, so that
    using an online network where a target belongs shows in the losses)."""

    def build(config, action_size: int = 2, observation_shape: tuple = (3,), perturb: Iterable[str] = (), scale: float = 0.1):
        algo = config.create()
        algo.create_impl(observation_shape, action_size)
        with torch.no_grad():
            for name in perturb:
                for p in algo.modules[name].parameters():
                    p.add_(scale * torch.randn_like(p))
        return algo

    return build
