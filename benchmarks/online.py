#!/usr/bin/env python
"""Benchmark of ``fit_online``: environment steps per second of DQN on
CartPole-v1 and SAC on Pendulum-v1, offrl next to d3rlpy 2.x, and (with
``--learning``) a learning check.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/online.py                 # throughput, both cases (about 2-4 minutes)
    python benchmarks/online.py --quick         # shorter rounds
    python benchmarks/online.py --only DQN      # one case
    python benchmarks/online.py --threads 2     # torch.set_num_threads(2) in both libraries (default 1)
    python benchmarks/online.py --no-d3rlpy     # offrl only
    python benchmarks/online.py --learning      # DQN >= 475 on CartPole-v1, SAC >= -200 on Pendulum-v1
    python benchmarks/online.py --learning --with-d3rlpy   # then the same runs in d3rlpy
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/online.py --quick

Throughput: both libraries run ``algo.fit_online(env, buffer, n_steps=R,
n_steps_per_epoch=R, show_progress=False)`` with the algorithm's default
config (``device="cpu"``), the default ``fit_online`` settings (no
explorer: ``sample_action``; an update after every step) and a logger that
only keeps the epoch's metrics. Each library runs in its own worker process
(d3rlpy in ``--d3rlpy-python`` or ``$D3RLPY_PYTHON``, skipped with a note
when neither is given, running this file as ``--backend d3rlpy --serve``; it
never imports offrl) that keeps its algorithm, environment and
a FIFO buffer warm between rounds; the buffer is first filled by a warm-up
call. Rounds alternate between the two workers, so a change in machine load
hits both; the ratio is the median of per-round ratios. Each library's own
epoch timings (inference, environment step, batch sampling, update) are
printed as a per-step breakdown.

Learning (``--learning``, offrl in this process; with ``--with-d3rlpy``
the same code then runs in the d3rlpy interpreter): the settings of
d3rlpy's online tutorials, seeded:

* DQN on CartPole-v1 (the "Online RL" tutorial): ``batch_size=32,
  learning_rate=2.5e-4, target_update_interval=100``,
  ``ConstantEpsilonGreedy(0.3)``, ``update_start_step=1000``, up to 100,000
  steps in epochs of 1,000; target: an epoch's evaluation (mean of 10
  greedy episodes) >= 475.
* SAC on Pendulum-v1: default config with a ``MinMaxActionScaler`` (fitted
  to the action space, so actions span [-2, 2]), ``update_start_step=1000``,
  up to 100,000 steps in epochs of 1,000; target: an epoch's evaluation >= -200.

Each case prints its per-epoch evaluation returns and stops once the target
is reached (``--full-budget`` runs the whole budget).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

from _harness import (Worker, add_common_args, check_threads, d3rlpy_interpreter, log, median_ratio, parse_only, print_load,
                      print_table, quiet_d3rlpy)
from _harness import serve as serve_requests

CASES = {
    "DQN": {"env": "CartPole-v1", "config": "DQNConfig"},
    "SAC": {"env": "Pendulum-v1", "config": "SACConfig"},
}
TARGET_RATIO = 1.5
WARMUP_STEPS = 1000
BREAKDOWN = ("time_inference", "time_environment_step", "time_sample_batch", "time_algorithm_update")


# ------------------------------------------------------------------ worker
class _Capture:
    """A logger adapter (both libraries' protocol) that keeps the last metrics."""

    def __init__(self) -> None:
        self.metrics: Dict[str, float] = {}

    def write_params(self, params: Any) -> None:
        pass

    def before_write_metric(self, epoch: int, step: int) -> None:
        pass

    def write_metric(self, epoch: int, step: int, name: str, value: float) -> None:
        self.metrics[name] = float(value)

    def after_write_metric(self, epoch: int, step: int) -> None:
        pass

    def save_model(self, epoch: int, algo: Any) -> None:
        pass

    def close(self) -> None:
        pass

    def watch_model(self, epoch: int, step: int) -> None:
        pass


class _CaptureFactory:
    def __init__(self) -> None:
        self.adapter = _Capture()

    def create(self, *args: Any, **kwargs: Any) -> _Capture:
        self.adapter = _Capture()
        return self.adapter


class Runner:
    """Keeps one algorithm, environment and buffer per case; runs rounds
    (inside a worker process)."""

    def __init__(self, backend: str, threads: int) -> None:
        import gymnasium
        import torch

        torch.set_num_threads(threads)
        self.backend = backend
        self.gymnasium = gymnasium
        if backend == "offrl":
            import offrl

            self.lib = offrl
            self.versions = {"offrl": offrl.__version__}
        else:
            import d3rlpy

            self.lib = d3rlpy
            self.versions = {"d3rlpy": d3rlpy.__version__}
        self.versions.update(python=platform.python_version(), torch=torch.__version__, threads=torch.get_num_threads())
        self.state: Dict[str, Any] = {}

    def _setup(self, case: str) -> Any:
        if case in self.state:
            return self.state[case]
        spec = CASES[case]
        self.lib.seed(0)
        env = self.gymnasium.make(spec["env"])
        env.reset(seed=0)
        config = getattr(self.lib.algos, spec["config"])()
        algo = config.create(device="cpu:0" if self.backend == "d3rlpy" else "cpu")
        buffer = self.lib.dataset.create_fifo_replay_buffer(limit=1000000, env=env)
        state = (algo, env, buffer)
        self.state[case] = state
        self._fit(case, WARMUP_STEPS)
        return state

    def _fit(self, case: str, steps: int) -> Dict[str, float]:
        algo, env, buffer = self.state[case]
        factory = _CaptureFactory()
        algo.fit_online(env, buffer, n_steps=steps, n_steps_per_epoch=steps, logger_adapter=factory,
                        show_progress=False, with_timestamp=False)
        return factory.adapter.metrics

    def run(self, case: str, steps: int) -> Dict[str, Any]:
        self._setup(case)
        t0 = time.perf_counter()
        metrics = self._fit(case, steps)
        elapsed = time.perf_counter() - t0
        return {"steps": steps, "seconds": elapsed, "metrics": {k: metrics[k] for k in BREAKDOWN if k in metrics}}


def serve(backend: str, threads: int) -> int:
    """Answer ``{"case": ..., "steps": ...}`` requests, one per stdin line."""
    with contextlib.redirect_stdout(sys.stderr):  # library chatter stays off the protocol
        runner = Runner(backend, threads)
    return serve_requests(runner.versions, lambda request: runner.run(request["case"], int(request["steps"])))


class Client(Worker):
    """A worker process of one backend."""

    def __init__(self, python: str, backend: str, threads: int) -> None:
        super().__init__(python, __file__, ["--backend", backend, "--serve", "--threads", str(threads)], name=backend)
        self.backend = backend

    def run(self, case: str, steps: int) -> Dict[str, Any]:
        return self.call({"case": case, "steps": steps})


# --------------------------------------------------------------- throughput
def measure_case(clients: Sequence[Client], case: str, round_s: float, rounds: int, log) -> Dict[str, Any]:
    steps: Dict[str, int] = {}
    for client in clients:  # warm-up (fills the buffer) and calibration
        log(f"[{client.backend}] {case}: warm-up and calibration")
        probe = client.run(case, 100)
        steps[client.backend] = max(50, int(round_s * probe["steps"] / probe["seconds"]))
    per_round: Dict[str, List[Dict[str, Any]]] = {c.backend: [] for c in clients}
    for r in range(rounds):
        order = list(clients) if r % 2 == 0 else list(reversed(clients))
        for client in order:
            per_round[client.backend].append(client.run(case, steps[client.backend]))
        log(f"{case} round {r + 1}/{rounds}: " + ", ".join(
            f"{b} {rs[-1]['steps'] / rs[-1]['seconds']:.0f} steps/s" for b, rs in per_round.items()))
    out: Dict[str, Any] = {}
    for backend, results in per_round.items():
        rates = [x["steps"] / x["seconds"] for x in results]
        breakdown = {k: statistics.median(x["metrics"][k] for x in results) for k in BREAKDOWN
                     if all(k in x["metrics"] for x in results)}
        out[backend] = {"steps_per_s": statistics.median(rates), "rates": rates, "steps": steps[backend],
                        "breakdown_ms": {k: v * 1e3 for k, v in breakdown.items()}}
    if len(per_round) == 2:
        a, b = out["offrl"]["rates"], out["d3rlpy"]["rates"]
        out["ratio"] = median_ratio(a, b)
    return out


def throughput(args: argparse.Namespace, names: Sequence[str]) -> int:
    clients = [Client(sys.executable, "offrl", args.threads)]
    python, d3_note = d3rlpy_interpreter(args)
    if python is not None:
        try:
            clients.append(Client(python, "d3rlpy", args.threads))
        except (OSError, RuntimeError) as e:
            d3_note = f"failed to start {python}: {e}"
    round_s, rounds = (1.0, 3) if args.quick else (2.5, 5)
    load_start = print_load("start")
    started = time.perf_counter()
    results = {}
    try:
        for case in names:
            results[case] = measure_case(clients, case, round_s, rounds, log)
    finally:
        for client in clients:
            client.close()
    load_end = print_load("end")

    info = ", ".join(f"{c.backend}: " + " ".join(f"{k} {v}" for k, v in c.info.items()) for c in clients)
    print(f"fit_online throughput, default configs on the CPU, {rounds} alternating rounds of ~{round_s} s per library")
    print(f"{info}; d3rlpy {d3_note}")
    print(f"{os.cpu_count()} CPUs; load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end")
    print()
    header = ["case", "env", "offrl steps/s", "d3rlpy steps/s", "offrl/d3rlpy", "target", "result"]
    rows = []
    for case in names:
        r = results[case]
        ratio = r.get("ratio")
        rows.append([case, CASES[case]["env"], f"{r['offrl']['steps_per_s']:.0f}",
                     f"{r['d3rlpy']['steps_per_s']:.0f}" if "d3rlpy" in r else "-",
                     f"{ratio:.2f}x" if ratio is not None else "-", f">= {TARGET_RATIO}x",
                     "-" if ratio is None else ("ok" if ratio >= TARGET_RATIO else "MISS")])
    print_table(header, rows)
    print()
    print("per environment step, ms (medians over rounds, from each library's epoch metrics)")
    header = ["case", "library", "inference", "env step", "sample batch", "update", "other", "total"]
    rows = []
    for case in names:
        for backend, r in results[case].items():
            if backend == "ratio":
                continue
            b = r["breakdown_ms"]
            total = 1e3 / r["steps_per_s"]
            known = sum(b.get(k, 0.0) for k in BREAKDOWN)
            rows.append([case, backend] + [f"{b[k]:.3f}" if k in b else "-" for k in BREAKDOWN]
                        + [f"{total - known:.3f}", f"{total:.3f}"])
    print_table(header, rows, left=2)
    print()
    print("* rounds run fit_online(env, buffer, n_steps=R, n_steps_per_epoch=R) on a warm algorithm and a buffer "
          f"pre-filled by a {WARMUP_STEPS}-step call; the ratio is the median of per-round ratios")
    print("* 'other': buffer writes, episode resets, loss bookkeeping, logging and the call's fixed costs")
    print(f"* total time {time.perf_counter() - started:.0f} s")
    return 0


# ----------------------------------------------------------------- learning
class _TargetReached(Exception):
    pass


LEARNING_TARGETS = {"DQN": (100000, 475.0), "SAC": (100000, -200.0)}


class _EvaluationRecorder(_CaptureFactory):
    """Logger factory (both libraries) that calls ``on_evaluation(epoch, step, value)``."""

    def __init__(self, on_evaluation) -> None:
        super().__init__()
        self.on_evaluation = on_evaluation

    def create(self, *args: Any, **kwargs: Any) -> _Capture:
        adapter = super().create()
        on_evaluation = self.on_evaluation

        def write_metric(epoch: int, step: int, name: str, value: float) -> None:
            adapter.metrics[name] = float(value)
            if name == "evaluation":
                on_evaluation(epoch, step, float(value))

        adapter.write_metric = write_metric  # type: ignore[method-assign]
        return adapter


def learning_case(backend: str, case: str, seed: int, threads: int, full_budget: bool) -> bool:
    """One learning run with the d3rlpy tutorial's settings, in ``backend``
    (the same code drives both libraries: their APIs agree here)."""
    import gymnasium
    import torch

    lib = __import__(backend)
    if backend == "d3rlpy":  # keep d3rlpy's per-epoch log lines out of the curve
        quiet_d3rlpy()
    torch.set_num_threads(threads)
    lib.seed(seed)
    n_steps, target = LEARNING_TARGETS[case]
    env, eval_env = gymnasium.make(CASES[case]["env"]), gymnasium.make(CASES[case]["env"])
    env.reset(seed=seed)
    eval_env.reset(seed=seed + 1)
    if case == "DQN":
        algo = lib.algos.DQNConfig(batch_size=32, learning_rate=2.5e-4, target_update_interval=100).create(device="cpu:0")
        extra = dict(explorer=lib.algos.ConstantEpsilonGreedy(0.3), update_start_step=1000)
    else:
        algo = lib.algos.SACConfig(action_scaler=lib.preprocessing.MinMaxActionScaler()).create(device="cpu:0")
        extra = dict(update_start_step=1000)
    curve: List[float] = []
    started = time.perf_counter()
    print(f"[{backend}] {case} on {CASES[case]['env']}: target evaluation >= {target} within {n_steps} steps "
          f"(seed {seed}, {threads} torch thread(s))", flush=True)

    def on_evaluation(epoch: int, step: int, value: float) -> None:
        curve.append(value)
        print(f"  epoch {len(curve):3d}  step {step:6d}  evaluation {value:9.2f}  ({time.perf_counter() - started:.0f} s)",
              flush=True)

    def stop_at_target(algo: Any, epoch: int, step: int) -> None:
        # called every step; the evaluation of an epoch is logged after its last step's callback
        if curve and curve[-1] >= target and not full_budget:
            raise _TargetReached

    with contextlib.suppress(_TargetReached):
        algo.fit_online(env, n_steps=n_steps, n_steps_per_epoch=1000, eval_env=eval_env,
                        logger_adapter=_EvaluationRecorder(on_evaluation), show_progress=False,
                        with_timestamp=False, callback=stop_at_target, **extra)
    reached = [i + 1 for i, v in enumerate(curve) if v >= target]
    where = f"first at epoch {reached[0]} (step {reached[0] * 1000})" if reached else "not reached"
    best = max(curve) if curve else float("nan")
    print(f"[{backend}] {case}: best evaluation {best:.2f}, target {target}: {'ok' if reached else 'MISS'} ({where}); "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return bool(reached)


def learning(args: argparse.Namespace, names: Sequence[str]) -> int:
    failed = 0
    if args.backend in (None, "offrl"):
        for case in names:
            failed += not learning_case("offrl", case, args.seed, args.threads, args.full_budget)
    if args.backend == "d3rlpy":
        for case in names:
            learning_case("d3rlpy", case, args.seed, args.threads, args.full_budget)
    elif args.with_d3rlpy:
        python, note = d3rlpy_interpreter(args)
        if python is None:
            print(f"d3rlpy: {note}")
        else:
            cmd = [python, os.path.abspath(__file__), "--learning", "--backend", "d3rlpy", "--seed", str(args.seed),
                   "--threads", str(args.threads), "--only", ",".join(names)] + (["--full-budget"] if args.full_budget else [])
            proc = subprocess.run(cmd, check=False, stderr=subprocess.PIPE, text=True)
            if proc.returncode not in (0, 1):
                print(f"d3rlpy run failed ({proc.returncode}):\n" + "\n".join(proc.stderr.strip().splitlines()[-10:]))
    return 1 if failed else 0


# --------------------------------------------------------------------- main
def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=list(CASES), quick_help="shorter rounds")
    parser.add_argument("--learning", action="store_true", help="run the learning check instead of the throughput one")
    parser.add_argument("--full-budget", action="store_true", help="--learning: run the whole step budget")
    parser.add_argument("--seed", type=int, default=0, help="--learning: the libraries' seed")
    parser.add_argument("--with-d3rlpy", action="store_true", help="--learning: then run the same in d3rlpy")
    parser.add_argument("--backend", choices=("offrl", "d3rlpy"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    if args.serve:
        return serve(args.backend or "offrl", args.threads)
    names = parse_only(args.only, list(CASES), parser)
    if args.learning:
        return learning(args, names)
    return throughput(args, names)


if __name__ == "__main__":
    sys.exit(main())
