#!/usr/bin/env python
"""Benchmark of prioritized replay (``offrl.dataset.PrioritizedReplayBuffer``)
against uniform sampling, with d3rlpy 2.x's uniform sampling side by side
(d3rlpy has no prioritized buffer).

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/prioritized.py              # 1,000,000 transitions
    python benchmarks/prioritized.py --quick      # 100,000, fewer repeats
    python benchmarks/prioritized.py --no-d3rlpy
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/prioritized.py --quick

Data: ``_data.make_locomotion_data``, as in ``benchmarks/dataset.py`` (17-dim
float32 observations, 6-dim actions, terminal episodes of 1,000 steps). The
prioritized buffer wraps the built ``MDPDataset`` (``from_dataset``) and its
priorities are first set from random TD errors, so sampling walks a
non-uniform tree. Measured, per call (``_harness.time_per_call``: median of
rounds):

* uniform ``sample_transition_batch(256)`` (offrl, and d3rlpy in its own
  interpreter via ``--backend d3rlpy --json``);
* prioritized ``sample_transition_batch(256)``, ``update_priorities`` of
  256 ids, and both together (the per-step cost ``fit`` pays);
* the sum tree alone: ``find`` of 256 prefix sums and ``set`` of 256
  leaves, and the same descent written as a per-sample Python loop (the
  usual reference implementation) as a yardstick;
* ``from_dataset`` (building the tree over every transition);
* online writing: one ``append`` into a full ``FIFOBuffer`` of 100,000
  transitions (an episode clipped every 1,000 steps), plain and prioritized;
* a DQN training step at its defaults (batch 32, CPU, ``--threads`` torch
  threads, default 1): sample, ``algo.training_step`` (+
  ``update_priorities`` with its TD errors under prioritized replay), as steps/s.

The sum-tree rows read the buffer's tree through its private ``_tree``
(``_nodes``, ``_size``): there is no public accessor, and the Python-loop
yardstick needs the raw node array. d3rlpy (uniform sampling only) runs in
a worker process: ``--d3rlpy-python`` or ``$D3RLPY_PYTHON``, else skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Optional

import numpy as np

from _data import make_locomotion_data as make_data
from _harness import (add_common_args, check_threads, d3rlpy_interpreter, format_table, log, print_load,
                      quiet_d3rlpy, run_json, set_threads, time_per_call, worker_main)

BATCH_SIZE = 256
FIFO_LIMIT = 100_000


def python_loop_find(nodes: np.ndarray, size: int, prefix: np.ndarray) -> np.ndarray:
    """Per-sample sum-tree descent in plain Python (reference yardstick)."""
    out = np.empty(prefix.shape[0], dtype=np.int64)
    for k, u in enumerate(prefix.tolist()):
        i = 1
        while i < size:
            left = nodes[2 * i]
            if u < left:
                i = 2 * i
            else:
                u -= left
                i = 2 * i + 1
        out[k] = i - size
    return out


def measure_offrl(steps: int, quick: bool, threads: int) -> dict:
    import offrl

    from offrl.dataset import FIFOBuffer, MDPDataset, PrioritizedReplayBuffer, ReplayBuffer

    round_s, rounds = (0.1, 3) if quick else (0.3, 5)
    offrl.seed(0)
    data = make_data(steps)
    dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"])
    n = dataset.transition_count
    out: dict = {"version": offrl.__version__, "transitions": n}

    log("[offrl] uniform sample_transition_batch(256)")
    out["uniform"] = time_per_call(lambda: dataset.sample_transition_batch(BATCH_SIZE), round_s, rounds)

    log("[offrl] PrioritizedReplayBuffer.from_dataset")
    t = time_per_call(lambda: PrioritizedReplayBuffer.from_dataset(dataset), round_s, 3, warmup=1)
    out["from_dataset"] = t
    per = PrioritizedReplayBuffer.from_dataset(dataset)
    rng = np.random.default_rng(1)
    per.update_priorities(np.arange(n), rng.exponential(size=n))

    log("[offrl] prioritized sample / update_priorities")
    out["per_sample"] = time_per_call(lambda: per.sample_transition_batch(BATCH_SIZE), round_s, rounds)
    ids = per.sample_transition_batch(BATCH_SIZE).indices
    errors = rng.exponential(size=BATCH_SIZE)
    out["per_update"] = time_per_call(lambda: per.update_priorities(ids, errors), round_s, rounds)

    def sample_and_update() -> None:
        batch = per.sample_transition_batch(BATCH_SIZE)
        per.update_priorities(batch.indices, errors)

    out["per_sample_update"] = time_per_call(sample_and_update, round_s, rounds)

    log("[offrl] sum tree alone")
    tree = per._tree
    prefix = (np.arange(BATCH_SIZE) + rng.random(BATCH_SIZE)) * (tree.total / BATCH_SIZE)
    leaves = tree.find(prefix)
    values = tree.get(leaves)
    out["tree_find"] = time_per_call(lambda: tree.find(prefix), round_s, rounds)
    out["tree_set"] = time_per_call(lambda: tree.set(leaves, values), round_s, rounds)
    out["tree_find_python"] = time_per_call(
        lambda: python_loop_find(tree._nodes, tree._size, prefix), round_s, rounds
    )
    if not np.array_equal(python_loop_find(tree._nodes, tree._size, prefix), leaves):
        out["warning"] = "vectorised and Python-loop descents disagree"

    log(f"[offrl] online append into a full FIFOBuffer({FIFO_LIMIT:,})")
    first = dataset.episodes[: FIFO_LIMIT // 1000 + 1]
    obs = data["observations"]
    act = data["actions"]

    def appender(buffer) -> Callable[[], None]:
        state = {"t": 0}

        def step() -> None:
            t = state["t"] % steps
            buffer.append(obs[t], act[t], 0.5)
            state["t"] += 1
            if state["t"] % 1000 == 0:
                buffer.clip_episode(True)

        return step

    plain = ReplayBuffer(FIFOBuffer(FIFO_LIMIT), episodes=first)
    prioritized = PrioritizedReplayBuffer(FIFOBuffer(FIFO_LIMIT), episodes=first)
    out["append_plain"] = time_per_call(appender(plain), round_s, rounds)
    out["append_per"] = time_per_call(appender(prioritized), round_s, rounds)

    log("[offrl] DQN training step, uniform vs prioritized")
    from offrl.algos import DQNConfig

    discrete = MDPDataset(
        data["observations"], (data["actions"][:, 0] > 0).astype(np.int64), data["rewards"], data["terminals"],
        action_size=2,
    )
    per_discrete = PrioritizedReplayBuffer.from_dataset(discrete)
    set_threads(threads)

    def trainer(buffer, prioritized_step: bool) -> Callable[[], None]:
        algo = DQNConfig().create(device="cpu")
        algo.build_with_dataset(buffer)

        def step() -> None:  # what fit does per step
            batch = buffer.sample_transition_batch(algo.batch_size)
            result = algo.training_step(batch)
            if prioritized_step:
                buffer.update_priorities(batch.indices, result.td_errors)

        return step

    out["dqn_uniform"] = time_per_call(trainer(discrete, False), round_s, rounds)
    out["dqn_per"] = time_per_call(trainer(per_discrete, True), round_s, rounds)
    return out


def measure_d3rlpy(steps: int, quick: bool) -> dict:
    import d3rlpy

    quiet_d3rlpy()
    round_s, rounds = (0.1, 3) if quick else (0.3, 5)
    data = make_data(steps)
    dataset = d3rlpy.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"])
    return {
        "version": d3rlpy.__version__,
        "transitions": int(dataset.transition_count),
        "uniform": time_per_call(lambda: dataset.sample_transition_batch(BATCH_SIZE), round_s, rounds),
    }


def run_d3rlpy(args: argparse.Namespace) -> tuple[Optional[dict], str]:
    python, note = d3rlpy_interpreter(args)
    if python is None:
        return None, note
    argv = ["--backend", "d3rlpy", "--json", "--steps", str(args.steps)] + (["--quick"] if args.quick else [])
    return run_json(python, __file__, argv, timeout=900)


def report(o: dict, d: Optional[dict], source: str) -> str:
    uniform = o["uniform"]["ms"]

    def ms(r: dict) -> str:
        return f"{r['ms']:.3f} ms"

    rows = [
        ("uniform sample_transition_batch(256)", ms(o["uniform"]), "1.00x"),
        ("prioritized sample_transition_batch(256)", ms(o["per_sample"]), f"{o['per_sample']['ms'] / uniform:.2f}x"),
        ("update_priorities(256)", ms(o["per_update"]), f"{o['per_update']['ms'] / uniform:.2f}x"),
        ("prioritized sample + update (per step)", ms(o["per_sample_update"]),
         f"{o['per_sample_update']['ms'] / uniform:.2f}x"),
        ("SumTree.find(256), vectorised", ms(o["tree_find"]), ""),
        ("SumTree.find(256), per-sample Python loop", ms(o["tree_find_python"]),
         f"vectorised {o['tree_find_python']['ms'] / o['tree_find']['ms']:.1f}x faster"),
        ("SumTree.set(256)", ms(o["tree_set"]), ""),
        ("PrioritizedReplayBuffer.from_dataset", ms(o["from_dataset"]), ""),
        (f"append, plain FIFOBuffer({FIFO_LIMIT:,})", f"{o['append_plain']['ms'] * 1e3:.1f} us", ""),
        (f"append, prioritized FIFOBuffer({FIFO_LIMIT:,})", f"{o['append_per']['ms'] * 1e3:.1f} us",
         f"{o['append_per']['ms'] / o['append_plain']['ms']:.2f}x plain"),
        ("DQN step (batch 32), uniform", f"{1e3 / o['dqn_uniform']['ms']:.0f} steps/s", ""),
        ("DQN step (batch 32), prioritized", f"{1e3 / o['dqn_per']['ms']:.0f} steps/s",
         f"{o['dqn_uniform']['ms'] / o['dqn_per']['ms']:.2f}x uniform's rate"),
    ]
    if d is not None:
        du = d["uniform"]["ms"]
        rows.insert(1, ("d3rlpy uniform sample_transition_batch(256)", ms(d["uniform"]), f"{du / uniform:.2f}x"))
        rows.insert(5, ("  prioritized sample + update vs d3rlpy uniform", "",
                        f"{o['per_sample_update']['ms'] / du:.2f}x d3rlpy's time"))
    lines = [
        f"{o['transitions']:,} transitions; offrl {o['version']}"
        + (f"; d3rlpy {d['version']} ({source})" if d else f"; d3rlpy: {source}"),
        "",
        format_table(("operation", "time", "vs uniform (offrl)"), rows),
    ]
    if "warning" in o:
        lines.append("WARNING: " + o["warning"])
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, quick_help="100,000 steps and fewer repeats")
    parser.add_argument("--steps", type=int, default=None, help="dataset size (default 1,000,000)")
    parser.add_argument("--backend", choices=("offrl", "d3rlpy"), default=None, help="measure one backend only")
    parser.add_argument("--json", action="store_true", help="print the results of --backend as JSON")
    args = parser.parse_args(argv)
    check_threads(args, parser)
    if args.steps is None:
        args.steps = 100_000 if args.quick else 1_000_000
    if args.backend is not None:
        def measure() -> Any:
            if args.backend == "d3rlpy":
                return measure_d3rlpy(args.steps, args.quick)
            return measure_offrl(args.steps, args.quick, args.threads)
        if args.json:
            return worker_main(measure)
        print(json.dumps(measure(), indent=2))
        return 0
    print_load("start")
    o = measure_offrl(args.steps, args.quick, args.threads)
    d, source = run_d3rlpy(args)
    print_load("end")
    print()
    print(report(o, d, source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
