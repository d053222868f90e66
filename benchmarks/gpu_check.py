"""Check every algorithm on a CUDA device and measure its update rate.

Run on a machine with a GPU: ``python benchmarks/gpu_check.py [--steps N]``.
For each algorithm (default configs) it fits on a Pendulum-like
(continuous) or CartPole-like (discrete) dataset on ``cuda:0``, runs
``_update`` under ``torch.cuda.set_sync_debug_mode("error")`` to prove the
hot loop never waits for the GPU, checks predict / predict_value /
save / load on the device, and prints updates per second.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import offrl  # noqa: E402
from offrl import algos  # noqa: E402
from offrl.dataset import MDPDataset  # noqa: E402
from offrl.logging import NoopAdapterFactory  # noqa: E402

CONTINUOUS = ["BCConfig", "TD3PlusBCConfig", "IQLConfig", "SACConfig", "CQLConfig"]
DISCRETE = ["DQNConfig", "DoubleDQNConfig", "DiscreteCQLConfig", "DiscreteBCConfig"]


def pendulum_like(n: int = 20_000, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    timeouts = np.zeros(n)
    timeouts[199::200] = 1
    return MDPDataset(
        rng.normal(size=(n, 3)).astype(np.float32), rng.uniform(-2, 2, size=(n, 1)).astype(np.float32),
        rng.normal(size=n).astype(np.float32), np.zeros(n), timeouts,
    )


def cartpole_like(n: int = 20_000, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    terminals = (rng.random(n) < 0.02).astype(np.float32)
    return MDPDataset(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, n), np.ones(n, np.float32), terminals, action_size=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    device = args.device
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name(device)}")
    datasets = {False: pendulum_like(), True: cartpole_like()}
    tmp = tempfile.mkdtemp()
    failures = 0
    for names, discrete in ((CONTINUOUS, False), (DISCRETE, True)):
        dataset = datasets[discrete]
        for name in names:
            offrl.seed(0)
            algo = getattr(algos, name)().create(device=device)
            algo.fit(dataset, n_steps=20, n_steps_per_epoch=20, logger_adapter=NoopAdapterFactory(), show_progress=False)
            batch = algo._preprocess(dataset.sample_transition_batch(algo.batch_size).to_torch(algo.device))
            torch.cuda.synchronize()
            sync_free = True
            torch.cuda.set_sync_debug_mode("error")
            try:
                for _ in range(5):
                    algo._update(batch, algo.grad_step)
            except RuntimeError as e:
                sync_free = False
                print(f"  {name}: host sync inside _update: {str(e).splitlines()[0]}")
            finally:
                torch.cuda.set_sync_debug_mode("default")
            torch.cuda.synchronize()
            start = time.perf_counter()
            algo.fit(dataset, n_steps=args.steps, n_steps_per_epoch=args.steps, logger_adapter=NoopAdapterFactory(), show_progress=False)
            torch.cuda.synchronize()
            rate = args.steps / (time.perf_counter() - start)
            x = dataset.to_arrays()["observations"][:7]
            actions = algo.predict(x)
            path = os.path.join(tmp, f"{name}.d3")
            algo.save(path)
            loaded = offrl.load_learnable(path, device=device)
            same = np.array_equal(loaded.predict(x), actions)
            try:
                a = dataset.to_arrays()["actions"][:7]
                values = algo.predict_value(x, a[:, 0] if discrete else a)
                value_ok = values.shape == (7,) and np.isfinite(values).all()
            except NotImplementedError:
                value_ok = True
            ok = same and value_ok and sync_free
            failures += not ok
            print(f"{name:<22} {rate:8.1f} updates/s (fit, incl. sampling)  sync-free={sync_free}  save/load={same}  {'ok' if ok else 'FAILED'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
