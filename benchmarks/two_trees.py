"""fit() updates per CPU-second of offrl at two source trees, in interleaved
rounds: does a change (a refactor) cost anything?

    python benchmarks/two_trees.py BEFORE_TREE AFTER_TREE [--rounds 5] [--steps 2000] [--only BC,DQN]

Each round runs, for each algorithm, one process per tree (order alternating
between rounds) that imports offrl from that tree (``PYTHONPATH``), builds the
algorithm on the same synthetic dataset with one torch thread, warms up, then
times ``fit(n_steps=--steps)`` by the process's CPU time (steadier than wall
time on a shared machine). Prints, per algorithm, the median over rounds of
after/before updates per CPU-second, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from _harness import log, print_load

ALGOS = ("BC", "DQN", "SAC", "CQL", "IQL", "TD3PlusBC")

CHILD = r'''
import json, sys, time
import numpy as np
import torch
torch.set_num_threads(1)
import offrl
from offrl import algos
name, steps = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
n = 5000
discrete = name in ("DQN",)
obs = rng.normal(size=(n, 17)).astype(np.float32)
act = rng.integers(4, size=n) if discrete else rng.uniform(-1, 1, size=(n, 6)).astype(np.float32)
data = offrl.dataset.MDPDataset(obs, act, rng.normal(size=n).astype(np.float32), (np.arange(n) % 500 == 499).astype(np.float32))
algo = getattr(algos, name + "Config")(batch_size=256).create(device="cpu")
kw = dict(show_progress=False, save_interval=10**9, logger_adapter=offrl.logging.NoopAdapterFactory())
algo.fit(data, n_steps=50, n_steps_per_epoch=50, **kw)
start = time.process_time()
algo.fit(data, n_steps=steps, n_steps_per_epoch=steps, **kw)
print("RESULT " + json.dumps({"updates_per_cpu_s": steps / (time.process_time() - start), "offrl": offrl.__file__}))
'''


def run(tree: str, name: str, steps: int) -> float:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CHILD, name, str(steps)], env=env, capture_output=True, text=True,
                         timeout=3600, cwd=os.path.abspath(tree))
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode != 0 or not lines:
        raise SystemExit(f"{name} at {tree} failed:\n{out.stderr[-2000:]}")
    result = json.loads(lines[0][len("RESULT "):])
    if not result["offrl"].startswith(os.path.abspath(tree)):
        raise SystemExit(f"{name}: offrl was imported from {result['offrl']}, not from {tree}")
    return float(result["updates_per_cpu_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--only", default=",".join(ALGOS))
    args = parser.parse_args()
    names = args.only.split(",")
    ratios = {name: [] for name in names}
    speeds = {name: {"before": [], "after": []} for name in names}
    print_load("start")
    for r in range(args.rounds):
        for name in names:
            order = [("before", args.before), ("after", args.after)]
            got = {}
            for label, tree in (order if r % 2 == 0 else order[::-1]):
                got[label] = run(tree, name, args.steps)
                speeds[name][label].append(got[label])
            ratios[name].append(got["after"] / got["before"])
        log(f"round {r + 1}/{args.rounds} done")
    print_load("end")
    print(f"fit() updates per CPU-second, {args.rounds} interleaved rounds of {args.steps} updates, one thread")
    print(f"{'algorithm':<12} {'before':>10} {'after':>10} {'after/before (median of rounds)':>34}")
    for name in names:
        before, after = statistics.median(speeds[name]["before"]), statistics.median(speeds[name]["after"])
        print(f"{name:<12} {before:>10.1f} {after:>10.1f} {statistics.median(ratios[name]):>34.3f}")


if __name__ == "__main__":
    main()
