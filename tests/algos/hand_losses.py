"""Reference pieces for hand-computed losses of the discrete algorithms
(DQN, DoubleDQN, DiscreteCQL, prioritized replay): one 4-transition batch
and the losses written as plain loops."""

from __future__ import annotations

from typing import Optional

import numpy as np

from offrl.dataset import TransitionMiniBatch


def discrete_batch(last_reward: float = 0.5, weights: Optional[np.ndarray] = None) -> TransitionMiniBatch:
    """4 transitions of 2-dim observations and 3 actions: one terminal, one
    two-step interval; ``weights`` (B, 1) makes it a prioritized batch."""
    obs = np.array([[0.1, 0.2], [0.3, -0.1], [-0.5, 0.4], [0.0, 1.0]], dtype=np.float32)
    nxt = np.array([[0.2, 0.1], [0.0, 0.0], [0.6, -0.3], [1.0, 1.0]], dtype=np.float32)
    return TransitionMiniBatch(
        observations=obs,
        actions=np.array([[0], [1], [2], [1]], dtype=np.int64),
        rewards=np.array([[1.0], [0.0], [-1.0], [last_reward]], dtype=np.float32),
        next_observations=nxt,
        next_actions=np.zeros((4, 1), dtype=np.int64),
        terminals=np.array([[0.0], [1.0], [0.0], [0.0]], dtype=np.float32),
        intervals=np.array([[1.0], [1.0], [2.0], [1.0]], dtype=np.float32),
        weights=weights,
        indices=None if weights is None else np.arange(4, dtype=np.int64),
    )


def huber(x: np.ndarray) -> np.ndarray:
    """Huber loss with threshold 1, elementwise."""
    a = np.abs(x)
    return np.where(a < 1.0, 0.5 * x**2, a - 0.5)


def quantile_huber_per_sample(target: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """Quantile Huber loss of each sample, ``(B,)``, from ``(B, N)`` target
    and predicted quantiles at the midpoints ``(i + 0.5) / N``, as loops."""
    batch, n = pred.shape
    taus = (np.arange(n) + 0.5) / n
    out = np.zeros(batch)
    for b in range(batch):
        for i in range(n):
            for j in range(n):
                u = target[b, j] - pred[b, i]
                out[b] += abs(taus[i] - (u < 0)) * huber(np.array(u)) / n
    return out
