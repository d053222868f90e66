#!/usr/bin/env python
"""Benchmark of the marginal estimators' DualDICE ratio model against FQE.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/ope_marginal.py              # both cases (about a minute)
    python benchmarks/ope_marginal.py --quick      # short rounds, a smoke run
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/ope_marginal.py

Issue 19's target: the ratio model of ``offrl.ope.density_ratio`` trains at
>= 1.5x the updates per second of an FQE of the same size in d3rlpy 2.8.1.
"The same size": both sides use the default encoder (a 256-256 ReLU MLP per
network) and d3rlpy's default FQE batch of 100. The cases are those of
``benchmarks/ope.py`` (the seeded synthetic 20,000-step datasets of
``_data.make_data``):

* ``FQE``: d3rlpy's ``FQE`` evaluating an ``IQL`` policy (Pendulum-like
  data), against a DualDICE ratio model of the same policy (one update =
  ``nu`` and ``zeta`` forward on the batch, ``nu`` on the next and initial
  states with one action drawn per row from the target's actions sampled
  beforehand, the backward pass through both networks, two Adam steps;
  with these default MLPs the backward is written out, not autograd's);
* ``DiscreteFQE``: d3rlpy's ``DiscreteFQE`` evaluating a ``DQN`` (CartPole-
  like data), against a DualDICE model of the same policy
  (epsilon-greedy-smoothed probabilities computed beforehand).

Measured: updates per second of d3rlpy's ``fqe.update(
dataset.sample_transition_batch(100))`` and of the ratio model's training
loop (the loop of ``fit_density_ratio`` without the one-off setup: the
target's probabilities or actions at every logged step and the transfer of
the data to the device, reported separately). d3rlpy runs in a worker
process started with the interpreter of ``--d3rlpy-python`` or
``$D3RLPY_PYTHON``; rounds of the two interleave and the ratio is the median
of per-round ratios (``_harness.run_rounds`` / ``paired_ratio``), of wall
time and, beside it, of each process's CPU time per update (one torch
thread each: on a shared machine another job taking the core stretches
wall time, not CPU time).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from _data import SEED, make_data
from _harness import (FULL, QUICK, Worker, add_common_args, check_threads, d3rlpy_interpreter, fmt, format_table,
                      log, paired_ratio, parse_only, print_load, quiet_d3rlpy, run_rounds, set_threads)
from _harness import serve as serve_requests

#: name -> (data kind, evaluated algorithm's config)
CASES: Dict[str, tuple] = {"FQE": ("pendulum", "IQLConfig"), "DiscreteFQE": ("cartpole", "DQNConfig")}
TARGET_RATIO = 1.5
BATCH_SIZE = 100  # d3rlpy's FQEConfig default


class RatioCase:
    """offrl's DualDICE ratio model of the case's policy: ``run(k)`` runs
    ``k`` training updates."""

    def __init__(self, name: str) -> None:
        import torch

        import offrl
        from offrl.dataset import MDPDataset
        from offrl.ope import density_ratio
        from offrl.ope._logged import logged_data

        kind, algo_config = CASES[name]
        data = make_data(kind)
        offrl.seed(SEED)
        dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"])
        algo = getattr(offrl.algos, algo_config)().create(device="cpu")
        algo.build_with_dataset(dataset)
        # averaging from the second update on: every timed update pays for it (a real run averages half of them)
        config = density_ratio.DensityRatioConfig(batch_size=BATCH_SIZE, n_steps=10**9, log_interval=1000,
                                                  average_fraction=1 - 1e-9)
        t0 = time.perf_counter()
        logged = logged_data(dataset)
        # internal helpers: the setup of fit_density_ratio once, then its update loop in k-step slices
        self.model, self.batches = density_ratio._prepare_training(
            algo, logged, 0.99, config, SEED, torch.device("cpu"), False, 0.05, 0.1, 4096)
        self.setup_s = time.perf_counter() - t0
        self.step = 1
        self._train = density_ratio._train
        self.episodes = len(dataset.episodes)

    def run(self, k: int) -> None:
        self._train(self.model, self.batches, self.step, k)
        self.step += k


class D3rlpyFQE:
    """d3rlpy's FQE of the case's policy: ``run(k)`` runs ``k`` updates."""

    def __init__(self, name: str) -> None:
        import d3rlpy

        kind, algo_config = CASES[name]
        data = make_data(kind)
        d3rlpy.seed(SEED)
        self.dataset = d3rlpy.dataset.MDPDataset(
            data["observations"], data["actions"], data["rewards"], data["terminals"], timeouts=data["timeouts"])
        algo = getattr(d3rlpy.algos, algo_config)().create(device="cpu:0")
        config = d3rlpy.ope.FQEConfig(batch_size=BATCH_SIZE)
        self.fqe = getattr(d3rlpy.ope, name)(algo=algo, config=config, device="cpu:0")
        algo.build_with_dataset(self.dataset)
        self.fqe.build_with_dataset(self.dataset)

    def run(self, k: int) -> None:
        for _ in range(k):
            self.fqe.update(self.dataset.sample_transition_batch(BATCH_SIZE))


def serve(names: List[str], threads: Optional[int]) -> int:
    """d3rlpy side: build the cases, then run ``[name, k]`` requests."""
    with contextlib.redirect_stdout(sys.stderr):
        set_threads(threads)
        quiet_d3rlpy()
        import d3rlpy
        import torch

        cases: Dict[str, Any] = {}
        for name in names:
            try:
                cases[name] = D3rlpyFQE(name)
            except Exception as e:  # reported, not fatal
                cases[name] = f"{type(e).__name__}: {e}"
    info = {"version": d3rlpy.__version__, "threads": torch.get_num_threads(),
            "cases": {n: ({} if isinstance(c, D3rlpyFQE) else {"error": c}) for n, c in cases.items()}}

    def handle(request: List[Any]) -> dict:
        name, k = request
        cpu_start = time.process_time()
        cases[name].run(int(k))
        return {"cpu_s": time.process_time() - cpu_start}

    return serve_requests(info, handle, pause_gc=True)


def d3rlpy_runner(worker: Worker, name: str, cpu: List[float]) -> Callable[[int], None]:
    """``run(k)``: ``k`` d3rlpy updates in the worker; its process CPU time per update appended to ``cpu``."""
    def run(k: int) -> None:
        cpu.append(worker.call([name, k])["cpu_s"] / k)
    return run


def cpu_timed(run: Callable[[int], None], cpu: List[float]) -> Callable[[int], None]:
    """``run`` with this process's CPU time per step appended to ``cpu``."""
    def timed(k: int) -> None:
        start = time.process_time()
        run(k)
        cpu.append((time.process_time() - start) / k)
    return timed


def measure(names: List[str], quick: bool, server: Optional[Worker]) -> Dict[str, dict]:
    settings = QUICK if quick else FULL
    results: Dict[str, dict] = {}
    for name in names:
        case = RatioCase(name)
        r: dict = {"setup_s": case.setup_s, "episodes": case.episodes}
        cpu: Dict[str, List[float]] = {"offrl DualDICE": [], "d3rlpy FQE": []}
        variants: Dict[str, Callable[[int], None]] = {"offrl DualDICE": cpu_timed(case.run, cpu["offrl DualDICE"])}
        if server is not None and "error" not in server.info["cases"].get(name, {"error": "not built"}):
            variants["d3rlpy FQE"] = d3rlpy_runner(server, name, cpu["d3rlpy FQE"])
        elif server is not None:
            r["d3rlpy_error"] = server.info["cases"].get(name, {}).get("error")
        log(f"{name}: updates/s in interleaved rounds")
        r["update"] = run_rounds(variants, settings.main_round_s, settings.main_rounds, warmup=settings.warmup)
        # the timed rounds are each variant's last calls (warm-up and calibration come first)
        r["cpu_ms"] = {v: [1e3 * c for c in cpu[v][-settings.main_rounds:]] for v in variants}
        results[name] = r
    return results


def report(results: Dict[str, dict], d_info: Optional[dict], d_source: str, load: tuple, threads: int) -> str:
    import torch

    import offrl

    lines = [
        f"offrl {offrl.__version__} vs d3rlpy {d_info['version'] if d_info else '-'} ({d_source}); "
        f"torch {torch.__version__}, {threads} threads; load average {load[0][0]:.2f} -> {load[1][0]:.2f}",
        "",
        f"Updates per second, batch {BATCH_SIZE}, 256-256 MLPs, CPU; ratio = median of per-round ratios "
        "(wall time; CPU time: process CPU ms per update, which another job taking the core does not stretch)",
    ]
    rows = []
    for name, r in results.items():
        u = r["update"]
        ours = 1e3 / u["offrl DualDICE"]["ms"]
        theirs = 1e3 / u["d3rlpy FQE"]["ms"] if "d3rlpy FQE" in u else None
        ratio = paired_ratio(u["d3rlpy FQE"], u["offrl DualDICE"]) if "d3rlpy FQE" in u else None
        verdict = "-" if ratio is None else ("ok" if ratio >= TARGET_RATIO else "MISS")
        cpu = r["cpu_ms"]
        cpu_ours = statistics.median(cpu["offrl DualDICE"])
        cpu_theirs = statistics.median(cpu["d3rlpy FQE"]) if "d3rlpy FQE" in cpu else None
        cpu_ratio = (statistics.median([d / o for o, d in zip(cpu["offrl DualDICE"], cpu["d3rlpy FQE"])])
                     if "d3rlpy FQE" in cpu else None)
        cpu_verdict = "-" if cpu_ratio is None else ("ok" if cpu_ratio >= TARGET_RATIO else "MISS")
        rows.append([name, f"{ours:.1f}", fmt(theirs), fmt(ratio, "{:.2f}x"), verdict, f"{cpu_ours:.2f}",
                     fmt(cpu_theirs, "{:.2f}"), fmt(cpu_ratio, "{:.2f}x"), cpu_verdict, f"{r['setup_s']:.2f}"])
        if r.get("d3rlpy_error"):
            lines.append(f"{name} d3rlpy: {r['d3rlpy_error']}")
    lines += format_table(["case", "DualDICE updates/s", "d3rlpy FQE updates/s", "ratio", "result",
                           "DualDICE CPU ms", "d3rlpy CPU ms", "CPU ratio", "result", "DualDICE setup s"],
                          rows).splitlines()
    lines.append(f"target: ratio >= {TARGET_RATIO:g}x")
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=list(CASES))
    parser.add_argument("--backend", choices=("d3rlpy",), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    names = parse_only(args.only, list(CASES), parser)
    check_threads(args, parser)
    if args.backend == "d3rlpy":
        return serve(names, args.threads)
    threads = set_threads(args.threads)
    server: Optional[Worker] = None
    python, d_source = d3rlpy_interpreter(args)
    if python is not None:
        try:
            server = Worker(python, __file__, ["--backend", "d3rlpy", "--serve", "--only", ",".join(names),
                                               "--threads", str(args.threads)])
        except (OSError, RuntimeError, ValueError) as e:
            d_source = f"failed: {e}"
    load_start = print_load("start")
    try:
        results = measure(names, args.quick, server)
    finally:
        if server is not None:
            server.close()
    load_end = print_load("end")
    print(report(results, server.info if server else None, d_source, (load_start, load_end), threads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
