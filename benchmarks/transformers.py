"""Decision Transformer family: update throughput and stateful-policy latency,
offrl beside d3rlpy 2.x.

    python benchmarks/transformers.py --quick --d3rlpy-python /path/to/venv/bin/python
    python benchmarks/transformers.py --only DecisionTransformer --no-d3rlpy

For each algorithm at its documented defaults (``context_size=20``; batch
size, heads and layers as the config's defaults) on the same synthetic
dataset (50 episodes of 200 steps, 17-dim observations, 6-dim continuous
or 4 discrete actions, built from the same seed on both sides):

* **updates/s**: ``dataset.sample_trajectory_batch(batch_size, 20)`` then
  ``algo.update(batch)``, the public d3rlpy-style step (trajectory sampling
  included); offrl's ``training_step`` (what ``fit`` runs: losses stay
  tensors) is reported beside it;
* **wrapper predict latency**: one ``as_stateful_wrapper(...).predict(
  observation, reward)`` call per environment step with a full context of
  20 steps (the wrapper is reset every 500 steps).

With ``--quality``: learning quality instead. Each algorithm trains for the
same number of updates in both libraries (Pendulum-v1 for the continuous
algorithms, CartPole-v1 for the discrete one) on ``--data``: ``heldout``
(quality.py's logged data; target return the 90th percentile of its episode
returns), ``medium`` / ``expert`` (the built-in ``pendulum-medium`` ...
datasets, turned into the same plain arrays for both libraries; target
return the dataset's best episode return: -158.2 / -0.0 on Pendulum, 500 on
CartPole). It is then rolled out through its stateful wrapper at that
target (``--episodes``, 5 by default, fixed seeds), several seeds, every (library, algorithm,
data, seed) in its own process (``--jobs`` at a time). The networks are
reduced on both sides alike (1 transformer layer, 64-wide encoder; 2 heads
for the discrete model) so that the run fits a shared 2-core CPU, and
Pendulum's [-2, 2] actions are mapped to the tanh head's [-1, 1] by a
``MinMaxActionScaler`` on both sides (``--no-action-scaler``); everything
else is the documented default.

The d3rlpy side runs in its own interpreter (this file with ``--backend
d3rlpy --json``) and never imports offrl; its figures are measured right
after offrl's, not interleaved, so the load average printed with the
report matters (the machines are shared).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from _harness import (FULL, QUICK, add_common_args, check_threads, d3rlpy_interpreter, fmt, log, parse_only,
                      print_load, print_table, quiet_d3rlpy, run_json, run_rounds, set_threads, time_per_call,
                      worker_main)

from _data import builtin_arrays  # noqa: E402
from _specs import CONTEXT_SIZE, build, make_arrays  # noqa: F401,E402

ALGOS = ("DecisionTransformer", "DiscreteDecisionTransformer", "TACR")
#: issue 18's targets: offrl / d3rlpy updates per second, d3rlpy / offrl latency
UPDATE_TARGET = 1.5
LATENCY_TARGET = 2.0
def measure_one(backend: str, name: str, quick: bool) -> dict:
    settings = QUICK if quick else FULL
    algo, dataset = build(backend, name)
    batch_size = int(algo.config.batch_size)

    def public(k: int) -> None:
        for _ in range(k):
            algo.update(dataset.sample_trajectory_batch(batch_size, CONTEXT_SIZE))

    variants = {"update": public}
    if backend == "offrl":
        def fast(k: int) -> None:
            for _ in range(k):
                algo.training_step(dataset.sample_trajectory_batch(batch_size, CONTEXT_SIZE))

        variants["training_step"] = fast
    log(f"[{backend}] {name}: updates/s")
    rounds = run_rounds(variants, settings.main_round_s, settings.main_rounds, warmup=2)
    out: Dict[str, Any] = {k: {"ups": 1e3 / v["ms"], "per_round": v["per_round"]} for k, v in rounds.items()}

    log(f"[{backend}] {name}: stateful predict latency")
    discrete = name == "DiscreteDecisionTransformer"
    actor = algo.as_stateful_wrapper(target_return=10.0)
    observations = make_arrays(discrete)["observations"][:500]
    state = {"t": 0}

    def step() -> None:
        t = state["t"]
        if t == 500:
            actor.reset()
            t = 0
        actor.predict(observations[t], 0.1)
        state["t"] = t + 1

    for _ in range(CONTEXT_SIZE + 5):  # a full context before timing
        step()
    latency = time_per_call(step, settings.call_round_s, settings.call_rounds)
    out["predict_us"] = latency["ms"] * 1e3
    return out


def measure(backend: str, names: Sequence[str], quick: bool, threads: int) -> dict:
    set_threads(threads)
    import torch

    out: Dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__, "results": {}}
    if backend == "d3rlpy":
        import d3rlpy

        quiet_d3rlpy()
        out["version"] = d3rlpy.__version__
    else:
        import offrl

        out["version"] = offrl.__version__
    for name in names:
        try:
            out["results"][name] = measure_one(backend, name, quick)
        except Exception as e:  # one failing algorithm should not hide the others' figures
            out["results"][name] = {"error": f"{type(e).__name__}: {e}"}
    return out


# ------------------------------------------------------------------ quality
QUALITY_ENVS = {"DecisionTransformer": "pendulum", "DiscreteDecisionTransformer": "cartpole", "TACR": "pendulum"}
QUALITY_ENV_IDS = {"pendulum": "Pendulum-v1", "cartpole": "CartPole-v1"}
QUALITY_DATA = ("heldout", "medium", "expert")
QUALITY_UPDATES = (2_000, 300)  # full, --quick
N_QUALITY_EPISODES = 5
PENDULUM_BOUNDS = (-2.0, 2.0)  # Pendulum-v1's action space, mapped to [-1, 1] on both sides


def episode_returns(data: Dict[str, np.ndarray]) -> np.ndarray:
    """Undiscounted return of every episode of the arrays."""
    ends = np.flatnonzero((data["terminals"] > 0) | (data["timeouts"] > 0)) + 1
    if len(ends) == 0 or ends[-1] != len(data["rewards"]):
        ends = np.r_[ends, len(data["rewards"])]
    return np.add.reduceat(data["rewards"].astype(np.float64), np.r_[0, ends[:-1]])


def quality_target(kind: str, returns: np.ndarray) -> float:
    """The return both libraries condition on: the best logged episode's
    return for the built-in datasets, the 90th percentile for the held-out
    data (whose best episode is a lucky outlier of a noisy behaviour)."""
    return float(np.percentile(returns, 90)) if kind == "heldout" else float(np.max(returns))


def quality_job(backend: str, name: str, data_path: str, env_id: str, updates: int, seed: int, target: float,
                action_scaler: bool = True, episodes: int = N_QUALITY_EPISODES) -> dict:
    """Train on the saved arrays, roll out at ``target``; ``{"return", "seconds"}``."""
    import time

    import gymnasium

    with np.load(data_path) as saved:  # plain arrays (allow_pickle stays off)
        data = dict(saved)
    discrete = name == "DiscreteDecisionTransformer"
    if backend == "offrl":
        import offrl as lib

        dataset = lib.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                         data["timeouts"], action_size=2 if discrete else None)
    else:
        import d3rlpy as lib

        quiet_d3rlpy()
        dataset = lib.dataset.MDPDataset(
            data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"],
            action_space=lib.ActionSpace.DISCRETE if discrete else lib.ActionSpace.CONTINUOUS,
            action_size=2 if discrete else 1)
    noop = lib.logging.NoopAdapterFactory()
    lib.seed(seed)
    encoder = lib.models.VectorEncoderFactory(hidden_units=[64])
    sizes: Dict[str, Any] = {"actor_encoder_factory" if name == "TACR" else "encoder_factory": encoder, "num_layers": 1}
    if discrete:
        sizes["num_heads"] = 2
    elif action_scaler:  # the tanh head reaches [-1, 1]; Pendulum's actions span [-2, 2]
        sizes["action_scaler"] = lib.preprocessing.MinMaxActionScaler(minimum=PENDULUM_BOUNDS[0],
                                                                      maximum=PENDULUM_BOUNDS[1])
    algo = getattr(lib.algos, f"{name}Config")(**sizes).create(device="cpu:0")
    start = time.perf_counter()
    algo.fit(dataset, n_steps=updates, n_steps_per_epoch=updates, show_progress=False, logger_adapter=noop)
    seconds = time.perf_counter() - start
    env = gymnasium.make(env_id)
    returns = []
    for episode in range(episodes):
        actor = algo.as_stateful_wrapper(target_return=target)
        observation, _ = env.reset(seed=10_000 + episode)
        reward, total, done = 0.0, 0.0, False
        while not done:
            action = actor.predict(np.asarray(observation, np.float32), reward)
            observation, reward, terminated, truncated, _ = env.step(int(action) if discrete else action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return {"return": float(np.mean(returns)), "returns": returns, "seconds": seconds}


def quality_arrays(env: str, kind: str, quick: bool) -> Dict[str, np.ndarray]:
    """The arrays of one (environment, data kind): the built-in dataset, or
    quality.py's held-out logged data (generated by that script's code)."""
    if kind != "heldout":
        return builtin_arrays(f"{env}-{kind}")
    import os

    from _harness import load_module

    quality = load_module("offrl_quality_data", os.path.join(os.path.dirname(os.path.abspath(__file__)), "quality.py"))
    n_steps = 10_000 if quick else 30_000
    return quality.make_cartpole(n_steps) if env == "cartpole" else quality.make_pendulum(n_steps)


def run_quality(args: argparse.Namespace, names: Sequence[str], kinds: Sequence[str]) -> None:
    import itertools
    import os
    import shutil
    import tempfile
    from concurrent.futures import ThreadPoolExecutor

    updates = args.updates or (QUALITY_UPDATES[1] if args.quick else QUALITY_UPDATES[0])
    tmp = tempfile.mkdtemp(prefix="offrl-dt-quality-")
    python, note = d3rlpy_interpreter(args)
    rows = []
    try:
        files, targets = {}, {}
        for env, kind in itertools.product(sorted({QUALITY_ENVS[n] for n in names}), kinds):
            data = quality_arrays(env, kind, args.quick)
            files[env, kind] = os.path.join(tmp, f"{env}-{kind}.npz")
            np.savez(files[env, kind], **data)
            returns = episode_returns(data)
            targets[env, kind] = quality_target(kind, returns)
            print(f"{QUALITY_ENV_IDS[env]} {kind}: {len(data['rewards'])} logged steps, {len(returns)} episodes, "
                  f"behaviour return {returns.mean():.1f} ± {returns.std():.1f} (best {returns.max():.1f}), "
                  f"target {targets[env, kind]:.1f}", flush=True)
        seeds = range(args.seed_offset, args.seed_offset + args.seeds)
        print(f"d3rlpy: {note}; seeds {seeds.start}..{seeds.stop - 1}; {updates} updates; {args.episodes} evaluation episodes; "
              f"Pendulum action scaler {'MinMax [-2, 2]' if args.action_scaler else 'none'}; {args.jobs} job(s) at "
              f"a time\n", flush=True)

        def job(backend: str, interpreter: str, name: str, kind: str, seed: int) -> dict:
            env = QUALITY_ENVS[name]
            spec = [backend, name, files[env, kind], QUALITY_ENV_IDS[env], updates, seed, targets[env, kind],
                    args.threads, args.action_scaler, args.episodes]
            result, why = run_json(interpreter, __file__, ["--quality-job", json.dumps(spec)])
            result = result if result is not None else {"error": why.strip().splitlines()[-1]}
            # each job's figures as it ends, so a stopped run keeps what it finished
            log(f"job done: {name} {kind} {backend} seed {seed}: " + (
                f"return {result['return']:.1f} ({result['seconds']:.1f} s training)" if "error" not in result
                else "error: " + result["error"][:60]))
            return result

        sides = [("offrl", sys.executable)] + ([("d3rlpy", python)] if python is not None else [])
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for name, kind in itertools.product(names, kinds):
                futures = {(backend, seed): pool.submit(job, backend, interpreter, name, kind, seed)
                           for seed in seeds for backend, interpreter in sides}
                cells = []
                for backend in ("offrl", "d3rlpy"):
                    results = [futures[backend, s].result() for s in seeds if (backend, s) in futures]
                    ok = [r for r in results if "error" not in r]
                    if not results:
                        cells += ["-", "-"]
                    elif not ok:
                        cells += ["error: " + results[0]["error"][:40], "-"]
                    else:
                        values = np.array([r["return"] for r in ok])
                        cells += [f"{values.mean():.1f} ± {values.std():.1f}",
                                  f"{np.mean([r['seconds'] for r in ok]):.1f}"]
                    log(f"{name} {kind} {backend}: " + ", ".join(
                        f"{r['return']:.1f}" if "error" not in r else r["error"][:60] for r in results))
                rows.append([name, f"{QUALITY_ENV_IDS[QUALITY_ENVS[name]]} {kind}",
                             f"{targets[QUALITY_ENVS[name], kind]:.1f}", *cells])
                print(" | ".join(rows[-1]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(("algorithm", "data", "target", "offrl return", "offrl s", "d3rlpy return", "d3rlpy s"), rows,
                title=f"\nreturn at the target return (mean ± std over seeds of the {args.episodes}-episode mean)")


def report(o: dict, d: Optional[dict], note: str, names: Sequence[str]) -> None:
    print(f"offrl {o['version']} (python {o['python']}, torch {o['torch']})")
    print(f"d3rlpy {d['version']} (python {d['python']}, torch {d['torch']})" if d else f"d3rlpy: {note}")
    rows: List[List[str]] = []
    for n in names:
        r = o["results"][n]
        dr = (d or {}).get("results", {}).get(n, {})
        if "error" in r:
            rows.append([n, "error", "-", "-", "-", "-", r["error"]])
            continue
        ups, fast = r["update"]["ups"], r["training_step"]["ups"]
        d_ups = dr.get("update", {}).get("ups")
        ratio = ups / d_ups if d_ups else None
        rows.append([n, fmt(ups), fmt(fast), fmt(d_ups), fmt(ratio, "{:.2f}x"), f">= {UPDATE_TARGET}x",
                     "-" if ratio is None else ("ok" if ratio >= UPDATE_TARGET else "MISS")])
    print_table(("algorithm", "offrl update/s", "offrl training_step/s", "d3rlpy update/s", "offrl/d3rlpy", "target",
                 "result"), rows, title=f"\nupdates per second (context_size={CONTEXT_SIZE}, trajectory sampling included)")
    rows = []
    for n in names:
        r = o["results"][n]
        if "error" in r:
            continue
        dr = (d or {}).get("results", {}).get(n, {})
        d_us = dr.get("predict_us")
        ratio = d_us / r["predict_us"] if d_us else None
        rows.append([n, fmt(r["predict_us"]), fmt(d_us), fmt(ratio, "{:.2f}x"), f">= {LATENCY_TARGET}x",
                     "-" if ratio is None else ("ok" if ratio >= LATENCY_TARGET else "MISS")])
    print_table(("algorithm", "offrl us", "d3rlpy us", "d3rlpy/offrl", "target", "result"), rows,
                title="\nstateful wrapper predict latency per environment step (full context of 20)")
    for n in names:
        dr = (d or {}).get("results", {}).get(n, {})
        if "error" in dr:
            print(f"{n}: d3rlpy failed: {dr['error']}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, only=ALGOS)
    parser.add_argument("--backend", choices=("offrl", "d3rlpy"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quality", action="store_true", help="learning quality instead of speed")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per algorithm and library (--quality)")
    parser.add_argument("--seed-offset", type=int, default=0,
                        help="--quality: run seeds K..K+seeds-1 (to add seeds to an earlier run)")
    parser.add_argument("--data", default="heldout",
                        help="--quality: comma-separated subset of heldout (quality.py's logged data), medium, expert "
                             "(the built-in datasets)")
    parser.add_argument("--updates", type=int, default=None,
                        help=f"--quality: updates per run (default {QUALITY_UPDATES[0]}, --quick {QUALITY_UPDATES[1]})")
    parser.add_argument("--episodes", type=int, default=N_QUALITY_EPISODES,
                        help="--quality: evaluation episodes per run (fixed start states 10000, 10001, ...)")
    parser.add_argument("--jobs", type=int, default=1, help="--quality: runs at a time (each its own process)")
    parser.add_argument("--no-action-scaler", dest="action_scaler", action="store_false",
                        help="--quality: no MinMaxActionScaler for Pendulum's [-2, 2] actions (on both sides)")
    parser.add_argument("--quality-job", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    if args.quality_job is not None:  # a worker: one (library, algorithm, seed) of --quality
        backend, name, data, env_id, updates, seed, target, threads, scaler, episodes = json.loads(args.quality_job)
        set_threads(threads)
        return worker_main(lambda: quality_job(backend, name, data, env_id, updates, seed, target, scaler,
                                                      episodes))
    names = parse_only(args.only, ALGOS, parser)
    if args.quality:
        if args.seeds < 1:
            parser.error(f"--seeds must be >= 1, got {args.seeds}")
        if args.seed_offset < 0:
            parser.error(f"--seed-offset must be >= 0, got {args.seed_offset}")
        if args.jobs < 1:
            parser.error(f"--jobs must be >= 1, got {args.jobs}")
        if args.updates is not None and args.updates < 1:
            parser.error(f"--updates must be >= 1, got {args.updates}")
        kinds = [k.strip() for k in args.data.split(",") if k.strip()]
        unknown = [k for k in kinds if k not in QUALITY_DATA]
        if not kinds or unknown:
            parser.error(f"--data must be a comma-separated subset of {','.join(QUALITY_DATA)}, got {args.data!r}")
        print_load("start")
        run_quality(args, names, kinds)
        print_load("end")
        return 0
    if args.backend is not None:  # a worker: measure one side, print JSON
        return worker_main(lambda: measure(args.backend, names, args.quick, args.threads))
    print_load("start")
    offrl_side = measure("offrl", names, args.quick, args.threads)
    python, note = d3rlpy_interpreter(args)
    d3rlpy_side = None
    if python is not None:
        argv_d = ["--backend", "d3rlpy", "--json", "--only", ",".join(names), "--threads", str(args.threads)]
        if args.quick:
            argv_d.append("--quick")
        d3rlpy_side, note = run_json(python, __file__, argv_d)
    report(offrl_side, d3rlpy_side, note, names)
    print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
