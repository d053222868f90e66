"""Learning quality: evaluation returns after the same number of updates on
the same data, offrl beside d3rlpy 2.8.1 (several seeds).

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/quality.py [--quick] [--seeds 3] [--only DQN,IQL] [--no-d3rlpy] [--threads 1]
    python benchmarks/quality.py --precision bf16-mixed --data replay --quick   # offrl float32 vs bf16-mixed
    python benchmarks/quality.py --precision bf16-mixed --device cuda:0        # the same on a GPU
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/quality.py --quick --only DQN

Data (made here with gymnasium, deterministic): CartPole-v1 logged by a
noisy balancing heuristic (30 % random actions) and Pendulum-v1 logged by a
noisy energy-pumping swing-up controller. Each algorithm trains with its
documented default config (PLAS's and BEAR's warm-up shortened to half
the updates: ``CONFIG_CHANGES``; continuous actions scaled from the
environment's bounds [-2, 2] to [-1, 1] by ``MinMaxActionScaler`` unless
``--no-action-scaler``) for the same number of updates in both libraries, then its greedy policy is rolled out on the environment
(10 episodes, fixed seeds). Every (library, algorithm, seed) job runs in
its own worker process on the same saved arrays, with ``--threads`` torch
threads (default 1); d3rlpy's in the interpreter given by ``--d3rlpy-python``
or ``$D3RLPY_PYTHON`` (skipped with a note when neither is given). With
``--precision bf16-mixed`` the second column is offrl again, the same seeds
with ``precision="bf16-mixed"`` (issue 32), instead of d3rlpy. This is a
benchmark, not a test: read the table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Optional

import numpy as np

from _data import builtin_arrays
from _harness import (add_common_args, check_threads, d3rlpy_interpreter, log, parse_only, print_load, print_table,
                      quiet_d3rlpy, run_json, set_threads, worker_main)

ALGOS = {
    # name: (environment, updates, quick updates)
    "DQN": ("cartpole", 10_000, 2_000),
    "DiscreteCQL": ("cartpole", 10_000, 2_000),
    "DiscreteBC": ("cartpole", 5_000, 1_000),
    "BC": ("pendulum", 5_000, 1_000),
    "TD3PlusBC": ("pendulum", 5_000, 1_000),
    "IQL": ("pendulum", 5_000, 1_000),
    "SAC": ("pendulum", 5_000, 1_000),
    "CQL": ("pendulum", 2_000, 300),
    "NFQ": ("cartpole", 10_000, 2_000),
    "DiscreteSAC": ("cartpole", 10_000, 2_000),
    "DDPG": ("pendulum", 5_000, 1_000),
    "TD3": ("pendulum", 5_000, 1_000),
    "CalQL": ("pendulum", 2_000, 300),
    "ReBRAC": ("pendulum", 5_000, 1_000),
    "AWAC": ("pendulum", 5_000, 1_000),
    "CRR": ("pendulum", 5_000, 1_000),
    "PRDC": ("pendulum", 5_000, 1_000),
    "PLAS": ("pendulum", 5_000, 1_000),
    "PLASWithPerturbation": ("pendulum", 5_000, 1_000),
    "BCQ": ("pendulum", 5_000, 1_000),
    "DiscreteBCQ": ("cartpole", 10_000, 2_000),
    "BEAR": ("pendulum", 5_000, 1_000),
}
#: config changes from the defaults, by the number of updates: the PLAS family's
#: default warm-up (500,000 VAE-only steps) would leave no policy training here
CONFIG_CHANGES = {
    "PLAS": lambda updates: {"warmup_steps": updates // 2},
    "PLASWithPerturbation": lambda updates: {"warmup_steps": updates // 2},
    "BEAR": lambda updates: {"warmup_steps": updates // 2},  # default 40,000 MMD-only steps
}
ENV_IDS = {"cartpole": "CartPole-v1", "pendulum": "Pendulum-v1"}
#: Pendulum-v1's torque bounds: the logged actions fill them, so without a
#: scaler most lie outside the [-1, 1] of a tanh policy
PENDULUM_BOUNDS = (np.array([-2.0], np.float32), np.array([2.0], np.float32))
#: set from --no-action-scaler (passed on to the worker processes in the job)
ACTION_SCALER = {"on": True}
N_EVAL_EPISODES = 10


# ------------------------------------------------------------------ data
def make_cartpole(n_steps: int, seed: int = 0) -> dict:
    import gymnasium

    env = gymnasium.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    obs_list, act, rew, term, tout = [], [], [], [], []
    obs, _ = env.reset(seed=seed)
    while len(act) < n_steps:
        action = int(obs[2] + 0.5 * obs[3] > 0)
        if rng.random() < 0.3:
            action = int(rng.integers(2))
        nxt, r, terminated, truncated, _ = env.step(action)
        obs_list.append(obs)
        act.append(action)
        rew.append(r)
        term.append(float(terminated))
        tout.append(float(truncated and not terminated))
        obs = nxt
        if terminated or truncated:
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
    tout[-1] = 0.0 if term[-1] else 1.0
    return {"observations": np.array(obs_list, np.float32), "actions": np.array(act), "rewards": np.array(rew, np.float32),
            "terminals": np.array(term, np.float32), "timeouts": np.array(tout, np.float32)}


def make_pendulum(n_steps: int, seed: int = 0) -> dict:
    import gymnasium

    env = gymnasium.make("Pendulum-v1")
    rng = np.random.default_rng(seed)
    obs_list, act, rew, term, tout = [], [], [], [], []
    obs, _ = env.reset(seed=seed)
    while len(act) < n_steps:
        cos, sin, thdot = obs
        theta = np.arctan2(sin, cos)
        if cos > 0.85:
            u = -(10.0 * theta + 2.0 * thdot)
        else:
            energy = 0.5 * thdot**2 + 10.0 * (cos - 1.0)
            u = 2.0 * np.sign(thdot * -energy) if thdot != 0 else 2.0
        u = float(np.clip(u + rng.normal(0.0, 0.6), -2.0, 2.0))
        if rng.random() < 0.2:
            u = float(rng.uniform(-2.0, 2.0))
        nxt, r, terminated, truncated, _ = env.step(np.array([u], np.float32))
        obs_list.append(obs)
        act.append([u])
        rew.append(r)
        term.append(float(terminated))
        tout.append(float(truncated and not terminated))
        obs = nxt
        if terminated or truncated:
            obs, _ = env.reset(seed=int(rng.integers(1 << 30)))
    tout[-1] = 0.0 if term[-1] else 1.0
    return {"observations": np.array(obs_list, np.float32), "actions": np.array(act, np.float32), "rewards": np.array(rew, np.float32),
            "terminals": np.array(term, np.float32), "timeouts": np.array(tout, np.float32)}


#: --data choices: "heldout" is the data made above; the others are offrl's
#: built-in datasets of the same name (offrl.datasets.get_dataset)
DATA_KINDS = ("heldout", "medium", "replay", "expert")


def evaluate(predict, env_id: str) -> float:
    import gymnasium

    env = gymnasium.make(env_id)
    returns = []
    for episode in range(N_EVAL_EPISODES):
        obs, _ = env.reset(seed=10_000 + episode)
        total, done = 0.0, False
        while not done:
            action = predict(np.asarray(obs, np.float32)[None])[0]
            obs, r, terminated, truncated, _ = env.step(action)
            total += float(r)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


# --------------------------------------------------------------- backends
def run_offrl(name: str, data: dict, env_id: str, updates: int, seed: int, precision: str = "float32",
              device: str = "cpu") -> dict:
    import offrl
    from offrl.dataset import MDPDataset
    from offrl.logging import NoopAdapterFactory

    offrl.seed(seed)
    discrete = np.issubdtype(data["actions"].dtype, np.integer)
    dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"],
                         action_size=2 if discrete else None)
    changes = CONFIG_CHANGES[name](updates) if name in CONFIG_CHANGES else {}
    if not discrete and ACTION_SCALER["on"]:
        changes["action_scaler"] = offrl.preprocessing.MinMaxActionScaler(minimum=PENDULUM_BOUNDS[0], maximum=PENDULUM_BOUNDS[1])
    if precision != "float32":  # offrl's addition: leave the field out otherwise (configs older than it)
        changes["precision"] = precision
        # bf16's arithmetic is what this measures: below 256 rows on the CPU the written-out float32 step would run
        from offrl.models.plain_mlp import plain_backward_enabled

        plain_backward_enabled(False)
    algo = getattr(offrl.algos, f"{name}Config")(**changes).create(device=device)
    start = time.perf_counter()
    algo.fit(dataset, n_steps=updates, n_steps_per_epoch=updates, logger_adapter=NoopAdapterFactory(), show_progress=False)
    seconds = time.perf_counter() - start
    return {"return": evaluate(algo.predict, env_id), "seconds": seconds, "precision": getattr(algo, "precision", "float32")}


def run_d3rlpy(name: str, data: dict, env_id: str, updates: int, seed: int, device: str = "cpu") -> dict:
    import d3rlpy

    quiet_d3rlpy()
    d3rlpy.seed(seed)
    discrete = np.issubdtype(data["actions"].dtype, np.integer)
    dataset = d3rlpy.dataset.MDPDataset(
        data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"],
        action_space=d3rlpy.ActionSpace.DISCRETE if discrete else d3rlpy.ActionSpace.CONTINUOUS,
        action_size=2 if discrete else 1,
    )
    changes = CONFIG_CHANGES[name](updates) if name in CONFIG_CHANGES else {}
    if not discrete and ACTION_SCALER["on"]:
        changes["action_scaler"] = d3rlpy.preprocessing.MinMaxActionScaler(minimum=PENDULUM_BOUNDS[0], maximum=PENDULUM_BOUNDS[1])
    algo = getattr(d3rlpy.algos, f"{name}Config")(**changes).create(device="cpu:0" if device == "cpu" else device)
    start = time.perf_counter()
    algo.fit(dataset, n_steps=updates, n_steps_per_epoch=updates, show_progress=False,
             logger_adapter=d3rlpy.logging.NoopAdapterFactory())
    seconds = time.perf_counter() - start
    return {"return": evaluate(algo.predict, env_id), "seconds": seconds}


def main(argv: Optional[list] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, only=list(ALGOS), quick_help="fewer updates and data (a smoke run)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per algorithm and library")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="seeds run are first-seed .. first-seed + seeds - 1 (to add seeds to an earlier run)")
    parser.add_argument("--no-action-scaler", action="store_true",
                        help="train continuous algorithms on the raw [-2, 2] torques (the figures recorded before 2026-11-25)")
    parser.add_argument("--data", default="heldout",
                        help="comma-separated data sets: heldout (made here; default) and/or the built-in "
                             "medium, replay, expert datasets (offrl.datasets.get_dataset)")
    parser.add_argument("--job-timeout", type=float, default=1800.0,
                        help="seconds one (library, algorithm, seed) job may run (default 1800; CalQL's 2,000 "
                             "updates take longer on a loaded machine)")
    parser.add_argument("--precision", choices=["bf16-mixed"], default=None,
                        help="compare offrl float32 with offrl at this precision (same seeds) instead of d3rlpy")
    parser.add_argument("--device", default="cpu", help="the device both libraries train on (default cpu)")
    parser.add_argument("--backend", choices=["offrl", "d3rlpy"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--job", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, got {args.seeds}")
    if args.first_seed < 0:
        parser.error(f"--first-seed must be >= 0, got {args.first_seed}")

    if args.backend is not None:  # worker process: one (algorithm, seed) job on saved data
        job = json.loads(args.job)
        set_threads(job["threads"])
        ACTION_SCALER["on"] = job.get("action_scaler", True)
        with np.load(job["data"]) as saved:  # plain arrays (allow_pickle stays off)
            data = dict(saved)
        if args.backend == "offrl":
            return worker_main(lambda: run_offrl(job["name"], data, job["env_id"], job["updates"], job["seed"],
                                                 job.get("precision", "float32"), job.get("device", "cpu")))
        return worker_main(lambda: run_d3rlpy(job["name"], data, job["env_id"], job["updates"], job["seed"],
                                              job.get("device", "cpu")))

    names = parse_only(args.only, list(ALGOS), parser)
    kinds = [k.strip() for k in args.data.split(",") if k.strip()]
    for kind in kinds:
        if kind not in DATA_KINDS:
            parser.error(f"--data: unknown data set {kind!r}; choose from {', '.join(DATA_KINDS)}")
    n_steps = 10_000 if args.quick else 30_000
    print_load("start")
    tmp = tempfile.mkdtemp(prefix="offrl-quality-")
    try:
        files = {}
        for env, kind in itertools.product(sorted({ALGOS[n][0] for n in names}), kinds):
            if kind == "heldout":
                data = make_cartpole(n_steps) if env == "cartpole" else make_pendulum(n_steps)
            else:
                data = builtin_arrays(f"{env}-{kind}")
            files[env, kind] = os.path.join(tmp, f"{env}-{kind}.npz")
            np.savez(files[env, kind], **data)
            ends = np.flatnonzero(data["terminals"] + data["timeouts"]) + 1
            starts = np.r_[0, ends[:-1]]
            returns = [data["rewards"][s:e].sum() for s, e in zip(starts, ends)]
            print(f"{ENV_IDS[env]} {kind}: {len(data['rewards'])} logged steps, {len(returns)} episodes, "
                  f"behaviour return {np.mean(returns):.1f} ± {np.std(returns):.1f}")
        d3_python, d3_note = (None, f"not run (offrl float32 vs {args.precision})") if args.precision \
            else d3rlpy_interpreter(args)
        print(f"d3rlpy: {d3_note}; {args.seeds} seeds; {N_EVAL_EPISODES} evaluation episodes each; "
              f"torch threads {args.threads}\n")

        def job(backend: str, python: str, name: str, kind: str, seed: int, precision: str = "float32") -> dict:
            env, updates, quick = ALGOS[name]
            spec = {"name": name, "data": files[env, kind], "env_id": ENV_IDS[env], "updates": quick if args.quick else updates,
                    "seed": seed, "threads": args.threads, "action_scaler": not args.no_action_scaler,
                    "precision": precision, "device": args.device}
            result, note = run_json(python, __file__, ["--backend", backend, "--job", json.dumps(spec)],
                                    timeout=args.job_timeout)
            result = result if result is not None else {"error": note.strip().splitlines()[-1]}
            # each job as it ends (its seed shown), so a long run that is stopped still leaves its figures
            outcome = f"return {result['return']:.1f} in {result['seconds']:.0f} s" if "error" not in result else result["error"]
            log(f"{name} {kind} {backend}{'' if precision == 'float32' else ' ' + precision} seed {seed}: {outcome}")
            return result

        def cell(results: list) -> tuple:
            ok = [r for r in results if "error" not in r]
            if not results:
                return "n/a", "n/a"
            if not ok:
                return "error: " + results[0]["error"][:40], "-"
            values = np.array([r["return"] for r in ok])
            return f"{values.mean():.1f} ± {values.std():.1f}", f"{np.mean([r['seconds'] for r in ok]):.1f}"

        table = []
        for name, kind in itertools.product(names, kinds):
            env, updates, quick = ALGOS[name]
            rows: dict = {"offrl": [], "d3rlpy": []}
            for seed in range(args.first_seed, args.first_seed + args.seeds):
                rows["offrl"].append(job("offrl", sys.executable, name, kind, seed))
                if args.precision:  # the second column: offrl at that precision
                    rows["d3rlpy"].append(job("offrl", sys.executable, name, kind, seed, args.precision))
                elif d3_python:
                    rows["d3rlpy"].append(job("d3rlpy", d3_python, name, kind, seed))
            (o_ret, o_s), (d_ret, d_s) = cell(rows["offrl"]), cell(rows["d3rlpy"])
            log(f"{name} {kind}: offrl {o_ret}, {args.precision or 'd3rlpy'} {d_ret}")
            table.append([name, ENV_IDS[env], kind, quick if args.quick else updates, o_ret, d_ret, o_s, d_s])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    other = f"offrl {args.precision}" if args.precision else "d3rlpy"
    first = "offrl float32" if args.precision else "offrl"
    print_table(["algorithm", "env", "data", "updates", f"{first} return", f"{other} return", f"{first} s", f"{other} s"],
                table, left=3)
    print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
