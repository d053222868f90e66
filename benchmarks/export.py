"""Exported policy latency: ONNX (onnxruntime, one thread) and TorchScript
beside offrl's own ``predict``, on one observation and on 256.

    python benchmarks/export.py

Targets (from the export issue): ONNX answers one observation in <= 50 us;
TorchScript within 2x of that. d3rlpy 2.8.1 measured earlier on this machine:
predict 271 us (one observation), 1.19 ms (256); its ONNX export fails on
torch 2.13.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from offrl import algos  # noqa: E402
from offrl.export import load_onnx_policy, load_torchscript_policy  # noqa: E402
from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler  # noqa: E402


def timed(fn, x, n: int) -> float:
    for _ in range(50):
        fn(x)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn(x)
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def main() -> None:
    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp()
    rows = []
    cases = [
        ("SAC", algos.SACConfig(observation_scaler=StandardObservationScaler(mean=np.zeros(17), std=np.ones(17)),
                                action_scaler=MinMaxActionScaler(minimum=-np.ones(6), maximum=np.ones(6))), (17,), 6),
        ("DQN", algos.DQNConfig(observation_scaler=StandardObservationScaler(mean=np.zeros(4), std=np.ones(4))), (4,), 2),
    ]
    for name, config, shape, size in cases:
        algo = config.create()
        algo.create_impl(shape, size)
        onnx_path, pt_path = os.path.join(tmp, f"{name}.onnx"), os.path.join(tmp, f"{name}.pt")
        algo.save_policy(onnx_path)
        algo.save_policy(pt_path)
        onnx_policy, ts_policy = load_onnx_policy(onnx_path, threads=1), load_torchscript_policy(pt_path)
        for batch in (1, 256):
            x = np.random.default_rng(0).normal(size=(batch,) + shape).astype(np.float32)
            n = 2000 if batch == 1 else 300
            rows.append((name, batch, timed(onnx_policy, x, n), timed(ts_policy, x, n), timed(algo.predict, x, n)))
    print("onnxruntime: 1 intra-op thread; torch: 1 thread")
    print(f"{'algorithm':<10} {'batch':>5} {'ONNX us':>9} {'TorchScript us':>15} {'offrl predict us':>17}  targets (batch 1): ONNX <= 50 us, TorchScript <= 2x ONNX")
    for name, batch, o, t, p in rows:
        verdict = ""
        if batch == 1:
            verdict = f"ONNX {'ok' if o <= 50 else 'MISS'}, TorchScript {'ok' if t <= 2 * max(o, 50) else 'MISS'}"
        print(f"{name:<10} {batch:>5} {o:>9.1f} {t:>15.1f} {p:>17.1f}  {verdict}")


if __name__ == "__main__":
    main()
