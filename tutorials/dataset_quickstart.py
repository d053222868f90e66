"""Build an offline dataset from logged arrays, sample from it, save and reload it.

Run: python tutorials/dataset_quickstart.py [--steps N] [--out DIR]

This is the whole data side of offrl in one script: step-aligned arrays
become episodes, mini-batches are drawn for training, the dataset is split
episode-wise and round-trips through an HDF5 file.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import offrl
from offrl.dataset import MDPDataset, MultiStepTransitionPicker, ReplayBuffer, train_test_split


def make_logged_data(n_steps: int, seed: int = 0) -> dict:
    """A logged controller on a noisy 1-D reach task: 8-dim observations,
    2-dim actions, episodes of 50-200 steps that end on reaching the goal
    (terminal) or on a time limit (timeout)."""
    rng = np.random.default_rng(seed)
    observations = rng.normal(size=(n_steps, 8)).astype(np.float32)
    actions = np.tanh(observations[:, :2] + 0.1 * rng.normal(size=(n_steps, 2))).astype(np.float32)
    rewards = -np.abs(observations[:, 0]).astype(np.float32)
    terminals = np.zeros(n_steps, dtype=np.float32)
    timeouts = np.zeros(n_steps, dtype=np.float32)
    t = 0
    while t < n_steps:
        length = int(rng.integers(50, 200))
        end = min(t + length, n_steps) - 1
        if rng.random() < 0.5:
            terminals[end] = 1.0
        else:
            timeouts[end] = 1.0
        t = end + 1
    return dict(observations=observations, actions=actions, rewards=rewards, terminals=terminals, timeouts=timeouts)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--out", default=None, help="directory for the HDF5 file (a temporary one by default)")
    args = parser.parse_args(argv)

    offrl.seed(0)
    data = make_logged_data(args.steps)

    start = time.perf_counter()
    dataset = MDPDataset(**data)
    built = time.perf_counter() - start
    print(dataset)
    print(f"built in {built * 1000:.1f} ms")

    batch = dataset.sample_transition_batch(256)
    print(
        f"transition batch: observations {batch.observations.shape}, actions {batch.actions.shape}, "
        f"rewards {batch.rewards.shape}, terminals {int(batch.terminals.sum())} of {len(batch)}"
    )
    trajectories = dataset.sample_trajectory_batch(16, 20)
    print(f"trajectory batch: observations {trajectories.observations.shape}, masks {trajectories.masks.shape}")

    n_step = MDPDataset(**data, transition_picker=MultiStepTransitionPicker(n_steps=3, gamma=0.99))
    print(f"3-step batch intervals: {np.unique(n_step.sample_transition_batch(256).intervals).tolist()}")

    train, test = train_test_split(dataset, test_size=0.2, random_state=0)
    print(f"episode-wise split: {train.size()} train episodes, {test.size()} test episodes")

    out_dir = args.out or tempfile.mkdtemp(prefix="offrl-tutorial-")
    path = os.path.join(out_dir, "dataset.h5")
    dataset.dump(path)
    reloaded = ReplayBuffer.load(path)
    same = all(
        np.array_equal(a.observations, b.observations) and np.array_equal(a.rewards, b.rewards)
        for a, b in zip(dataset.episodes, reloaded.episodes)
    )
    print(f"dumped to {path} ({os.path.getsize(path) / 1e6:.1f} MB); reloaded identical: {same}")
    if not same:
        raise SystemExit("reloaded dataset differs from the original")
    return {"dataset": dataset, "reloaded": reloaded, "path": path}


if __name__ == "__main__":
    main()
