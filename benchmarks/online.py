#!/usr/bin/env python
"""Benchmark of ``fit_online``: environment steps per second of DQN on
CartPole-v1 and SAC on Pendulum-v1, offrl next to d3rlpy 2.x, and (with
``--learning``) a learning check.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/online.py                 # throughput, both cases, 1/4/8 environments (about 4-8 minutes)
    python benchmarks/online.py --envs 1,8 --vector sync,async   # offrl with SyncVectorEnv and AsyncVectorEnv
    python benchmarks/online.py --quick         # shorter rounds
    python benchmarks/online.py --only DQN      # one case
    python benchmarks/online.py --threads 2     # torch.set_num_threads(2) in both libraries (default 1)
    python benchmarks/online.py --no-d3rlpy     # offrl only
    python benchmarks/online.py --learning      # DQN >= 475 on CartPole-v1, SAC >= -200 on Pendulum-v1
    python benchmarks/online.py --learning --with-d3rlpy   # then the same runs in d3rlpy
    python benchmarks/online.py --learning --only DQN --envs 1,8  # DQN with 1 then 8 CartPole environments
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

Vectorised environments (``--envs``, default ``1,4,8``; ``--vector sync``
and/or ``async``): offrl's ``fit_online`` also runs on
``gymnasium.vector.SyncVectorEnv`` / ``AsyncVectorEnv`` of N copies of the
environment, one batched inference and one update per vector step (the
defaults ``update_interval=1, n_updates=1``), and steps/s counts the steps
of all environments. d3rlpy has no vectorised loop: its single-environment
run is the reference for every N (target for DQN at 8 environments: >= 4x).
``--learning --envs 1,8`` runs the DQN check with 1 then 8 environments
(``--learning-updates`` gradient steps per vector step, by default N, so
both runs make one update per environment step) and compares the
environment steps each needed to reach the target.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from _harness import (Worker, add_common_args, check_threads, d3rlpy_interpreter, log, median_ratio, parse_only, print_load,
                      print_table, quiet_d3rlpy)
from _harness import serve as serve_requests

CASES = {
    "DQN": {"env": "CartPole-v1", "config": "DQNConfig"},
    "SAC": {"env": "Pendulum-v1", "config": "SACConfig"},
}
TARGET_RATIO = 1.5  # one environment, offrl vs d3rlpy
TARGET_RATIO_VECTOR = {("DQN", 8): 4.0}  # (case, environments): offrl with N environments vs d3rlpy's single one
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

    def _setup(self, key: Tuple[str, int, str]) -> Any:
        if key in self.state:
            return self.state[key]
        case, n_envs, vector = key
        spec = CASES[case]
        self.lib.seed(0)
        single = self.gymnasium.make(spec["env"])
        if vector == "single":
            env = single
            env.reset(seed=0)
        else:
            fns = [lambda: self.gymnasium.make(spec["env"]) for _ in range(n_envs)]
            env = (self.gymnasium.vector.AsyncVectorEnv(fns) if vector == "async"
                   else self.gymnasium.vector.SyncVectorEnv(fns))
        config = getattr(self.lib.algos, spec["config"])()
        algo = config.create(device="cpu:0" if self.backend == "d3rlpy" else "cpu")
        buffer = self.lib.dataset.create_fifo_replay_buffer(limit=1000000, env=single)
        state = (algo, env, buffer)
        self.state[key] = state
        self._fit(key, WARMUP_STEPS)
        return state

    def _fit(self, key: Tuple[str, int, str], steps: int) -> Dict[str, float]:
        algo, env, buffer = self.state[key]
        factory = _CaptureFactory()
        algo.fit_online(env, buffer, n_steps=steps, n_steps_per_epoch=steps, logger_adapter=factory,
                        show_progress=False, with_timestamp=False)
        return factory.adapter.metrics

    def run(self, case: str, steps: int, n_envs: int = 1, vector: str = "single") -> Dict[str, Any]:
        key = (case, n_envs, vector)
        self._setup(key)
        t0 = time.perf_counter()
        metrics = self._fit(key, steps)
        elapsed = time.perf_counter() - t0
        return {"steps": steps, "seconds": elapsed, "metrics": {k: metrics[k] for k in BREAKDOWN if k in metrics}}


def serve(backend: str, threads: int) -> int:
    """Answer ``{"case": ..., "steps": ...}`` requests, one per stdin line."""
    with contextlib.redirect_stdout(sys.stderr):  # library chatter stays off the protocol
        runner = Runner(backend, threads)
    return serve_requests(runner.versions, lambda request: runner.run(
        request["case"], int(request["steps"]), int(request.get("n_envs", 1)), request.get("vector", "single")))


class Client(Worker):
    """A worker process of one backend."""

    def __init__(self, python: str, backend: str, threads: int) -> None:
        super().__init__(python, __file__, ["--backend", backend, "--serve", "--threads", str(threads)], name=backend)
        self.backend = backend

    def run(self, case: str, steps: int, n_envs: int = 1, vector: str = "single") -> Dict[str, Any]:
        return self.call({"case": case, "steps": steps, "n_envs": n_envs, "vector": vector})


def variants(clients: Sequence[Client], envs: Sequence[int], vectors: Sequence[str]) -> List[Tuple[Client, int, str]]:
    """(client, environments, vector kind) to measure: offrl with each count
    (1: a plain env; more: each vector kind), d3rlpy with one plain env."""
    out: List[Tuple[Client, int, str]] = []
    for client in clients:
        if client.backend != "offrl":
            out.append((client, 1, "single"))
            continue
        for n in envs:
            if n == 1:
                out.append((client, 1, "single"))
            else:
                out.extend((client, n, v) for v in vectors)
    return out


def label(backend: str, n_envs: int, vector: str) -> str:
    return backend if vector == "single" else f"{backend} {vector} x{n_envs}"


# --------------------------------------------------------------- throughput
def measure_case(clients: Sequence[Client], case: str, round_s: float, rounds: int, log,
                 envs: Sequence[int] = (1,), vectors: Sequence[str] = ("sync",)) -> Dict[str, Any]:
    todo = variants(clients, envs, vectors)
    steps: Dict[str, int] = {}
    for client, n, vector in todo:  # warm-up (fills the buffer) and calibration
        name = label(client.backend, n, vector)
        log(f"[{name}] {case}: warm-up and calibration")
        probe = client.run(case, max(100, 10 * n), n, vector)
        steps[name] = max(50, 10 * n, int(round_s * probe["steps"] / probe["seconds"]))
    per_round: Dict[str, List[Dict[str, Any]]] = {label(c.backend, n, v): [] for c, n, v in todo}
    for r in range(rounds):
        order = list(todo) if r % 2 == 0 else list(reversed(todo))
        for client, n, vector in order:
            name = label(client.backend, n, vector)
            per_round[name].append(client.run(case, steps[name], n, vector))
        log(f"{case} round {r + 1}/{rounds}: " + ", ".join(
            f"{b} {rs[-1]['steps'] / rs[-1]['seconds']:.0f} steps/s" for b, rs in per_round.items()))
    out: Dict[str, Any] = {}
    for name, results in per_round.items():
        rates = [x["steps"] / x["seconds"] for x in results]
        breakdown = {k: statistics.median(x["metrics"][k] for x in results) for k in BREAKDOWN
                     if all(k in x["metrics"] for x in results)}
        out[name] = {"steps_per_s": statistics.median(rates), "rates": rates, "steps": steps[name],
                     "breakdown_ms": {k: v * 1e3 for k, v in breakdown.items()}}
    if "d3rlpy" in out:
        for name in out:
            if name.startswith("offrl"):
                out[name]["ratio"] = median_ratio(out[name]["rates"], out["d3rlpy"]["rates"])
    return out


def _target(case: str, name: str) -> Optional[float]:
    if name == "offrl":
        return TARGET_RATIO
    n = int(name.rsplit("x", 1)[1]) if " x" in name else 1
    return TARGET_RATIO_VECTOR.get((case, n))


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
            results[case] = measure_case(clients, case, round_s, rounds, log, args.envs, args.vectors)
    finally:
        for client in clients:
            client.close()
    load_end = print_load("end")

    info = ", ".join(f"{c.backend}: " + " ".join(f"{k} {v}" for k, v in c.info.items()) for c in clients)
    print(f"fit_online throughput, default configs on the CPU, {rounds} alternating rounds of ~{round_s} s per library")
    print(f"{info}; d3rlpy {d3_note}")
    print(f"{os.cpu_count()} CPUs; load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end")
    print()
    header = ["case", "env", "library", "env steps/s", "vs d3rlpy", "target", "result"]
    rows = []
    for case in names:
        for name, r in results[case].items():
            ratio = r.get("ratio")
            target = _target(case, name) if name != "d3rlpy" else None
            rows.append([case, CASES[case]["env"], name, f"{r['steps_per_s']:.0f}",
                         f"{ratio:.2f}x" if ratio is not None else "-", f">= {target}x" if target else "-",
                         "-" if ratio is None or target is None else ("ok" if ratio >= target else "MISS")])
    print_table(header, rows, left=3)
    print()
    print("per environment step, ms (medians over rounds, from each library's epoch metrics)")
    header = ["case", "library", "inference", "env step", "sample batch", "update", "other", "total"]
    rows = []
    for case in names:
        for name, r in results[case].items():
            b = r["breakdown_ms"]
            total = 1e3 / r["steps_per_s"]
            known = sum(b.get(k, 0.0) for k in BREAKDOWN)
            rows.append([case, name] + [f"{b[k]:.3f}" if k in b else "-" for k in BREAKDOWN]
                        + [f"{total - known:.3f}", f"{total:.3f}"])
    print_table(header, rows, left=2)
    print()
    print("* rounds run fit_online(env, buffer, n_steps=R, n_steps_per_epoch=R) on a warm algorithm and a buffer "
          f"pre-filled by a {WARMUP_STEPS}-step call; the ratio is the median of per-round ratios")
    print("* 'other': buffer writes, episode resets, loss bookkeeping, logging and the call's fixed costs")
    print("* 'offrl sync xN' / 'async xN': gymnasium.vector.SyncVectorEnv / AsyncVectorEnv of N environments, one "
          "batched inference and one update per vector step; steps/s counts all environments' steps")
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


def learning_case(backend: str, case: str, seed: int, threads: int, full_budget: bool, n_envs: int = 1,
                  updates: Optional[int] = None) -> Optional[int]:
    """One learning run with the d3rlpy tutorial's settings, in ``backend``
    (the same code drives both libraries: their APIs agree here); offrl
    with ``n_envs > 1`` runs on a SyncVectorEnv with ``updates`` gradient
    steps per vector step (default ``n_envs``). Returns the environment step
    at which the target was first reached (None: not reached)."""
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
    vector_args: Dict[str, Any] = {}
    if n_envs > 1:
        env = gymnasium.vector.SyncVectorEnv([lambda: gymnasium.make(CASES[case]["env"]) for _ in range(n_envs)])
        vector_args = dict(n_updates=updates or n_envs, seed=seed)
    if case == "DQN":
        algo = lib.algos.DQNConfig(batch_size=32, learning_rate=2.5e-4, target_update_interval=100).create(device="cpu:0")
        extra = dict(explorer=lib.algos.ConstantEpsilonGreedy(0.3), update_start_step=1000)
    else:
        algo = lib.algos.SACConfig(action_scaler=lib.preprocessing.MinMaxActionScaler()).create(device="cpu:0")
        extra = dict(update_start_step=1000)
    curve: List[float] = []
    curve_steps: List[int] = []
    started = time.perf_counter()
    where_envs = f", {n_envs} environments, {updates or n_envs} updates per vector step" if n_envs > 1 else ""
    print(f"[{backend}] {case} on {CASES[case]['env']}: target evaluation >= {target} within {n_steps} steps "
          f"(seed {seed}, {threads} torch thread(s){where_envs})", flush=True)

    def on_evaluation(epoch: int, step: int, value: float) -> None:
        curve.append(value)
        curve_steps.append(step)
        print(f"  epoch {len(curve):3d}  step {step:6d}  evaluation {value:9.2f}  ({time.perf_counter() - started:.0f} s)",
              flush=True)

    def stop_at_target(algo: Any, epoch: int, step: int) -> None:
        # called every step; the evaluation of an epoch is logged after its last step's callback
        if curve and curve[-1] >= target and not full_budget:
            raise _TargetReached

    with contextlib.suppress(_TargetReached):
        fit = algo.fit_online if not vector_args else functools.partial(lib.training.online.fit_online, algo)
        fit(env, n_steps=n_steps, n_steps_per_epoch=1000, eval_env=eval_env,
            logger_adapter=_EvaluationRecorder(on_evaluation), show_progress=False,
            with_timestamp=False, callback=stop_at_target, **extra, **vector_args)
    reached = [i + 1 for i, v in enumerate(curve) if v >= target]
    where = f"first at epoch {reached[0]} (step {curve_steps[reached[0] - 1]})" if reached else "not reached"
    best = max(curve) if curve else float("nan")
    print(f"[{backend}] {case}: best evaluation {best:.2f}, target {target}: {'ok' if reached else 'MISS'} ({where}); "
          f"{time.perf_counter() - started:.0f} s", flush=True)
    return curve_steps[reached[0] - 1] if reached else None


def learning(args: argparse.Namespace, names: Sequence[str]) -> int:
    failed = 0
    if args.backend in (None, "offrl"):
        for case in names:
            reached: Dict[int, Optional[int]] = {}
            for n in args.envs:
                reached[n] = learning_case("offrl", case, args.seed, args.threads, args.full_budget, n,
                                           args.learning_updates)
                failed += reached[n] is None
            if len(reached) > 1 and reached.get(1) is not None:
                for n, step in reached.items():
                    if n > 1:
                        ok = step is not None and step <= reached[1]
                        print(f"[offrl] {case}: {n} environments reached the target at step {step}, one environment "
                              f"at step {reached[1]}: {'ok' if ok else 'MISS'} (target: no more environment steps)")
                        failed += not ok
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
    parser.add_argument("--envs", default=None,
                        help="environment counts for offrl, e.g. 1,4,8 (default: 1,4,8; --learning: 1)")
    parser.add_argument("--vector", default="sync", help="vector env kinds for counts > 1: sync, async or sync,async")
    parser.add_argument("--learning-updates", type=int, default=None,
                        help="--learning with N > 1 environments: gradient steps per vector step (default N)")
    parser.add_argument("--backend", choices=("offrl", "d3rlpy"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    if args.serve:
        return serve(args.backend or "offrl", args.threads)
    names = parse_only(args.only, list(CASES), parser)
    try:
        args.envs = sorted({int(v) for v in (args.envs or ("1" if args.learning else "1,4,8")).split(",")})
        if min(args.envs) < 1:
            raise ValueError
    except ValueError:
        parser.error(f"--envs must be positive ints separated by commas, got {args.envs!r}")
    args.vectors = [v.strip() for v in args.vector.split(",") if v.strip()]
    if not args.vectors or set(args.vectors) - {"sync", "async"}:
        parser.error(f"--vector must be sync, async or sync,async, got {args.vector!r}")
    if args.learning:
        return learning(args, names)
    return throughput(args, names)


if __name__ == "__main__":
    sys.exit(main())
