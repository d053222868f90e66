#!/usr/bin/env python
"""Benchmark of offrl's off-policy evaluation against d3rlpy 2.x.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/ope.py               # FQE and DiscreteFQE (about a minute)
    python benchmarks/ope.py --quick       # short rounds, for a smoke run
    python benchmarks/ope.py --threads 2   # torch.set_num_threads(2) in both libraries (default 1)
    python benchmarks/ope.py --no-d3rlpy   # offrl only
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/ope.py --quick

FQE section. At the documented default ``FQEConfig`` (only ``device`` is set,
to the CPU), on the seeded synthetic 20,000-step datasets of
``benchmarks/algos.py`` (``_data.make_data``):

* ``FQE`` evaluating an ``IQL`` policy (default ``IQLConfig``, built on the
  data; throughput does not depend on its weights) on the Pendulum-like data
  (100 episodes of 200 steps);
* ``DiscreteFQE`` evaluating a ``DQN`` policy on the CartPole-like data.

Torch runs one intra-op thread in both processes by default: on a shared
2-core machine two threads can be many times slower than one, and erratically
so. Measured in each library: updates per second of
``dataset.sample_transition_batch(batch_size)`` followed by
``fqe.update(batch)`` (each update runs the evaluated policy on the batch's
next observations); for offrl also the fast path that ``fit`` runs
(``fqe.training_step(batch)``, losses left as tensors); and the time to estimate the policy value at the initial states of
all the dataset's episodes: ``fqe.estimate_policy_value(dataset)`` (with a
1,000-resample bootstrap interval) against d3rlpy's
``InitialStateValueEstimationEvaluator()(fqe, dataset)``.

d3rlpy runs in the interpreter given by ``--d3rlpy-python`` or
``$D3RLPY_PYTHON`` (skipped with a note when neither is given): a worker
process that runs this same file with ``--backend d3rlpy --serve``, builds the same cases and then
runs ``k`` steps on request, so the rounds of the two libraries interleave
(a change in machine load hits both sides of a ratio) and ratios are
medians of per-round ratios. The d3rlpy side never imports offrl. Timing
helpers (calibrated rounds, medians over rounds, the garbage collector
paused during a round) are those of ``benchmarks/_harness.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import platform
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from _data import SEED, make_data
from _harness import (FULL, QUICK, Worker, add_common_args, check_threads, d3rlpy_interpreter, fmt, format_table,
                      log, paired_ratio, parse_only, print_load, quiet_d3rlpy, run_rounds, set_threads, warm_up)
from _harness import serve as serve_requests

#: name -> (data kind, evaluated algorithm's config, d3rlpy updates/s measured earlier on the 2-core machine)
CASES: Dict[str, Tuple[str, str, Optional[float]]] = {
    "FQE": ("pendulum", "IQLConfig", 151.0),
    "DiscreteFQE": ("cartpole", "DQNConfig", None),
}
TARGET_RATIO = 2.0  # offrl / d3rlpy updates per second (FQE)
N_BOOTSTRAP = 1000


# --------------------------------------------------------------- the cases
class Case:
    """One library's FQE on one dataset: ``run(what, k)`` runs ``k``
    updates (``"update"``, ``"fast"``) or value estimates (``"estimate"``)."""

    def __init__(self, backend: str, name: str) -> None:
        kind, algo_config, _ = CASES[name]
        data = make_data(kind)
        if backend == "offrl":
            import offrl
            from offrl.dataset import MDPDataset

            offrl.seed(SEED)
            dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"])
            algo = getattr(offrl.algos, algo_config)().create(device="cpu")
            config = offrl.ope.FQEConfig() if name == "FQE" else offrl.ope.DiscreteFQEConfig()
            fqe = getattr(offrl.ope, name)(algo=algo, config=config, device="cpu")
            self.estimate = lambda: fqe.estimate_policy_value(dataset, n_bootstrap=N_BOOTSTRAP, seed=0)
        else:
            import d3rlpy

            d3rlpy.seed(SEED)
            dataset = d3rlpy.dataset.MDPDataset(
                data["observations"], data["actions"], data["rewards"], data["terminals"], timeouts=data["timeouts"]
            )
            algo = getattr(d3rlpy.algos, algo_config)().create(device="cpu:0")
            fqe = getattr(d3rlpy.ope, name)(algo=algo, config=d3rlpy.ope.FQEConfig(), device="cpu:0")
            evaluator = d3rlpy.metrics.InitialStateValueEstimationEvaluator()
            self.estimate = lambda: evaluator(fqe, dataset)
        algo.build_with_dataset(dataset)
        fqe.build_with_dataset(dataset)
        self.backend, self.fqe, self.dataset = backend, fqe, dataset
        self.batch_size = int(fqe.config.batch_size)
        self.episodes = len(dataset.episodes)

    def run(self, what: str, k: int) -> None:
        fqe, dataset, batch_size = self.fqe, self.dataset, self.batch_size
        if what == "update":
            for _ in range(k):
                fqe.update(dataset.sample_transition_batch(batch_size))
        elif what == "fast":
            for _ in range(k):
                fqe.training_step(dataset.sample_transition_batch(batch_size))
        elif what == "estimate":
            for _ in range(k):
                self.estimate()
        else:
            raise ValueError(what)


class BareFQE:
    """The same maths in plain torch: ``nn.Sequential`` 256-256 ReLU MLPs for
    the evaluated policy and the Q-functions, fused Adam, a hard target copy
    every 100 steps; batches from offrl's sampler as numpy arrays. The floor
    that offrl's fast path is compared with."""

    def __init__(self, case: Case, discrete: bool) -> None:
        import torch
        from torch import nn

        obs_dim = int(case.fqe.observation_shape[0])
        action_size = int(case.fqe.action_size)

        def mlp(inputs: int, outputs: int) -> nn.Module:
            return nn.Sequential(nn.Linear(inputs, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, outputs))

        torch.manual_seed(SEED)
        self.discrete = discrete
        self.policy = mlp(obs_dim, action_size).requires_grad_(False)
        self.q = mlp(obs_dim if discrete else obs_dim + action_size, action_size if discrete else 1)
        self.targ = mlp(obs_dim if discrete else obs_dim + action_size, action_size if discrete else 1).requires_grad_(False)
        self.targ.load_state_dict(self.q.state_dict())
        self.optim = torch.optim.Adam(self.q.parameters(), lr=1e-4, fused=True)
        self.case, self.step = case, 0

    def run(self, k: int) -> None:
        import torch
        import torch.nn.functional as F

        dataset, batch_size = self.case.dataset, self.case.batch_size
        for _ in range(k):
            b = dataset.sample_transition_batch(batch_size)
            obs, nobs = torch.from_numpy(b.observations), torch.from_numpy(b.next_observations)
            rewards, terminals = torch.from_numpy(b.rewards), torch.from_numpy(b.terminals)
            actions = torch.from_numpy(b.actions)
            with torch.no_grad():
                if self.discrete:
                    next_actions = self.policy(nobs).argmax(dim=1, keepdim=True)
                    next_q = self.targ(nobs).gather(1, next_actions)
                else:
                    next_q = self.targ(torch.cat([nobs, torch.tanh(self.policy(nobs))], dim=1))
                y = rewards + 0.99 ** torch.from_numpy(b.intervals) * (1.0 - terminals) * next_q
            pred = self.q(obs).gather(1, actions) if self.discrete else self.q(torch.cat([obs, actions], dim=1))
            loss = F.mse_loss(pred, y)
            self.optim.zero_grad(set_to_none=True)
            loss.backward()
            self.optim.step()
            self.step += 1
            if self.step % 100 == 0:
                self.targ.load_state_dict(self.q.state_dict())


def serve(names: List[str], threads: Optional[int]) -> int:
    """d3rlpy side: build the cases, then run ``[name, what, k]`` requests
    read from stdin, answering ``"ok"`` (or the error)."""
    with contextlib.redirect_stdout(sys.stderr):  # library chatter stays off the protocol
        set_threads(threads)
        quiet_d3rlpy()
        import d3rlpy
        import torch

        cases: Dict[str, Any] = {}
        for name in names:
            try:
                cases[name] = Case("d3rlpy", name)
            except Exception as e:
                cases[name] = f"{type(e).__name__}: {e}"
    info = {"version": d3rlpy.__version__, "threads": torch.get_num_threads(),
            "cases": {n: ({"episodes": c.episodes, "batch_size": c.batch_size} if isinstance(c, Case) else {"error": c})
                      for n, c in cases.items()}}

    def handle(request: List[Any]) -> str:
        name, what, k = request
        cases[name].run(what, int(k))
        return "ok"

    # no collection inside a timed request (offrl's rounds run with the collector paused too)
    return serve_requests(info, handle, pause_gc=True)


def d3rlpy_runner(worker: Worker, name: str, what: str) -> Callable[[int], None]:
    """A step runner that runs ``k`` steps of ``name`` in the d3rlpy worker."""
    def run(k: int) -> None:
        worker.call([name, what, k])
    return run


# ------------------------------------------------------------------ main run
def measure(names: List[str], quick: bool, server: Optional[Worker]) -> Dict[str, dict]:
    settings = QUICK if quick else FULL
    results: Dict[str, dict] = {}
    for name in names:
        case = Case("offrl", name)
        r: dict = {"batch_size": case.batch_size, "episodes": case.episodes}
        d_ok = server is not None and "error" not in server.info["cases"].get(name, {"error": "not built"})
        if server is not None and not d_ok:
            r["d3rlpy_error"] = server.info["cases"].get(name, {}).get("error")
        log(f"{name}: warm-up")
        warm_up(lambda k: case.run("update", k), settings.warmup)
        bare = BareFQE(case, discrete=name == "DiscreteFQE")
        bare.run(settings.warmup)
        variants = {"offrl": lambda k: case.run("update", k), "fast": lambda k: case.run("fast", k), "bare": bare.run}
        if d_ok:
            d_run = d3rlpy_runner(server, name, "update")
            d_run(settings.warmup)
            variants["d3rlpy"] = d_run
        log(f"{name}: updates/s, {'offrl and d3rlpy' if d_ok else 'offrl'} in interleaved rounds")
        r["update"] = run_rounds(variants, settings.main_round_s, settings.main_rounds, warmup=0)
        log(f"{name}: policy value at the initial states")
        variants = {"offrl": lambda k: case.run("estimate", k)}
        if d_ok:
            variants["d3rlpy"] = d3rlpy_runner(server, name, "estimate")
        r["estimate"] = run_rounds(variants, settings.call_round_s * 2, settings.call_rounds, warmup=1, min_steps=1)
        results[name] = r
        gc.collect()
    return results


def report(results: Dict[str, dict], d_info: Optional[dict], d_source: str, load: Tuple[Any, Any], threads: int) -> str:
    import torch

    import offrl

    lines = [
        f"offrl {offrl.__version__} vs d3rlpy {d_info['version'] if d_info else '-'} ({d_source}); "
        f"torch {torch.__version__}, {threads} threads; python {platform.python_version()}; "
        f"load average {load[0][0]:.2f} -> {load[1][0]:.2f}",
        "",
        "Updates per second (sample_transition_batch + update), default config, CPU; ratio (offrl/d3rlpy updates/s) "
        "and fast/bare (time per step) are medians of per-round ratios",
    ]
    rows: List[List[str]] = []
    errors: List[str] = []
    for name, r in results.items():
        u = r["update"]
        ups, fast = 1e3 / u["offrl"]["ms"], 1e3 / u["fast"]["ms"]
        d_ups = 1e3 / u["d3rlpy"]["ms"] if "d3rlpy" in u else None
        ratio = paired_ratio(u["d3rlpy"], u["offrl"]) if "d3rlpy" in u else None
        earlier = CASES[name][2]
        target = f">= {TARGET_RATIO:g}x" if earlier is not None else "-"
        verdict = "-" if ratio is None or earlier is None else ("ok" if ratio >= TARGET_RATIO else "MISS")
        bare = 1e3 / u["bare"]["ms"]
        bare_ratio = paired_ratio(u["fast"], u["bare"])  # time per step: > 1 is slower than bare torch
        rows.append([name, r["batch_size"], f"{ups:.1f}", f"{fast:.1f}", f"{bare:.1f}", f"{bare_ratio:.2f}x",
                     fmt(d_ups), fmt(ratio, "{:.2f}x"), fmt(earlier), target, verdict])
        if r.get("d3rlpy_error"):
            errors.append(f"{name} d3rlpy: {r['d3rlpy_error']}")
    lines += format_table(["case", "batch", "offrl", "fast path", "bare torch", "fast/bare", "d3rlpy", "ratio",
                           "d3rlpy earlier", "target", "result"], rows).splitlines() + errors
    lines += ["", "Policy value at the initial states of all episodes (ms per call)"]
    rows = []
    for name, r in results.items():
        e = r["estimate"]
        d_ms = e["d3rlpy"]["ms"] if "d3rlpy" in e else None
        ratio = paired_ratio(e["d3rlpy"], e["offrl"]) if "d3rlpy" in e else None
        rows.append([name, r["episodes"], f"{e['offrl']['ms']:.2f}", fmt(d_ms, "{:.2f}"), fmt(ratio, "{:.1f}x")])
    lines += format_table(["case", "episodes", "offrl", "d3rlpy", "d3rlpy/offrl"], rows).splitlines()
    lines.append(f"(offrl's figure includes a {N_BOOTSTRAP:,}-resample bootstrap interval; d3rlpy's evaluator gives the mean only)")
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
