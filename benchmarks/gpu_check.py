#!/usr/bin/env python
"""Check every algorithm on a CUDA device and measure its update rate.

Run from the repository root on a machine with a GPU (offrl installed):

    python benchmarks/gpu_check.py [--steps N] [--only SACConfig,DQNConfig] [--quick]

For each algorithm (default configs) it fits on a Pendulum-like
(continuous) or CartPole-like (discrete) dataset on ``--device``
(``cuda:0``), runs ``training_step`` (what ``fit`` calls) under
``torch.cuda.set_sync_debug_mode("error")`` to prove the hot loop never
waits for the GPU, checks predict / predict_value / save / load on the
device, and prints updates per second. Exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Tuple

import numpy as np
import torch

import offrl
from offrl import algos
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory

from _harness import add_common_args, check_threads, parse_only, print_load, print_table, set_threads

CONTINUOUS = ["BCConfig", "DDPGConfig", "TD3Config", "TD3PlusBCConfig", "IQLConfig", "SACConfig", "CQLConfig"]
DISCRETE = ["DQNConfig", "DoubleDQNConfig", "NFQConfig", "DiscreteCQLConfig", "DiscreteBCConfig", "DiscreteSACConfig"]


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
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=CONTINUOUS + DISCRETE, quick_help="50 timed updates per algorithm", d3rlpy=False)
    parser.add_argument("--steps", type=int, default=500, help="timed updates per algorithm")
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args()
    check_threads(args, parser)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    chosen = set(parse_only(args.only, CONTINUOUS + DISCRETE, parser))
    steps = 50 if args.quick else args.steps
    device = args.device
    print_load("start")
    set_threads(args.threads)
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name(device)}")
    datasets = {False: pendulum_like(), True: cartpole_like()}
    failures = 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for names, discrete in ((CONTINUOUS, False), (DISCRETE, True)):
            dataset = datasets[discrete]
            for name in names:
                if name not in chosen:
                    continue
                rate, sync_free, same, value_ok = check(name, dataset, discrete, device, steps, tmp)
                passed = same and value_ok and sync_free
                failures += not passed
                rows.append((name, f"{rate:.1f}", sync_free, same, value_ok, "ok" if passed else "FAILED"))
    print_table(["algorithm", "updates/s (fit, incl. sampling)", "sync-free", "save/load", "predict_value", "result"],
                rows, title=f"{steps} timed updates per algorithm on {device}")
    print_load("end")
    sys.exit(1 if failures else 0)


def check(name: str, dataset: MDPDataset, discrete: bool, device: str, steps: int, tmp: str
          ) -> Tuple[float, bool, bool, bool]:
    """(updates per second, no host sync in training_step, save/load gives
    the same actions, predict_value finite with shape (7,)) for one algorithm."""
    offrl.seed(0)
    algo = getattr(algos, name)().create(device=device)
    algo.fit(dataset, n_steps=20, n_steps_per_epoch=20, logger_adapter=NoopAdapterFactory(), show_progress=False)
    batch = dataset.sample_transition_batch(algo.batch_size).to_torch(algo.device)
    torch.cuda.synchronize()
    sync_free = True
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            algo.training_step(batch)
    except RuntimeError as e:
        sync_free = False
        print(f"  {name}: host sync inside training_step: {str(e).splitlines()[0]}")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    start = time.perf_counter()
    algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, logger_adapter=NoopAdapterFactory(), show_progress=False)
    torch.cuda.synchronize()
    rate = steps / (time.perf_counter() - start)
    arrays = dataset.to_arrays()
    x = arrays["observations"][:7]
    actions = algo.predict(x)
    path = os.path.join(tmp, f"{name}.d3")
    algo.save(path)
    loaded = offrl.load_learnable(path, device=device)
    same = bool(np.array_equal(loaded.predict(x), actions))
    value_ok = True
    if algo.has_q_function:
        a = arrays["actions"][:7]
        values = algo.predict_value(x, a[:, 0] if discrete else a)
        value_ok = bool(values.shape == (7,) and np.isfinite(values).all())
    return rate, sync_free, same, value_ok

if __name__ == "__main__":
    main()
