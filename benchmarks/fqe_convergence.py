#!/usr/bin/env python
"""Does FQE converge, and does it say so? Estimate against the environment.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/fqe_convergence.py                 # all five cases (long on a busy 2-core machine)
    python benchmarks/fqe_convergence.py --quick         # cartpole BC only, smaller caps
    python benchmarks/fqe_convergence.py --only cartpole-bc,pendulum-iql
    python benchmarks/fqe_convergence.py --only pendulum-cql --configs recommended
    python benchmarks/fqe_convergence.py --figure docs/tutorials/fqe_convergence.png
    python benchmarks/fqe_convergence.py --configs recommended-cap --json run.json
    python benchmarks/fqe_convergence.py --replay run.json [--window 5 --tolerance 0.03]
    python benchmarks/fqe_convergence.py --only pendulum-bc --configs recommended-cap --set target_update_interval=50 --policy-cache fqe-policies --json tu50.json
    python benchmarks/fqe_convergence.py --configs recommended --policy-cache fqe-policies --fqe-seed 1

Cases: the built-in ``replay`` datasets (``offrl.datasets.get_cartpole`` /
``get_pendulum``), each with a behaviour-cloning policy and a conservative
one (DiscreteBC / DiscreteCQL on CartPole-v1, BC / IQL / CQL on Pendulum-v1),
trained here with fixed seeds.

The truth is the policy's discounted return (gamma 0.99) in the
environment, measured from the same initial states FQE's ``V(s0)``
averages over: each of the dataset's first observations is set as the
environment's state (both environments are deterministic) and the policy
runs from it. Random resets would add the spread of returns across
initial states to the comparison (on Pendulum a standard deviation near
180 over 30 episodes: about 9 % of the value, the whole error budget).
FQE bootstraps through time-limit truncations (a timeout is not a
terminal), so it estimates the value of the untruncated task: the truth is
measured with the time limit lifted to 1,000 steps (``0.99^1000 < 1e-4``).
``rollout_returns(algo, env, n_trials, gamma=0.99)`` under the
environment's own resets and time limit is printed beside it (CartPole's
500 steps leave under 1 % of the discount mass out; Pendulum's 200 leave
13 %).

For each case, FQE with

* ``default``: d3rlpy's ``FQEConfig`` defaults, run to the cap (the estimate
  after 4,000 updates is printed too: the issue's figure);
* ``recommended``: ``FQEConfig.recommended()`` with
  ``fit(..., early_stopping=True)``, the cap being ``--steps``;

both with 1,000-step epochs (the diagnostic's granularity). Printed: the
estimate, the truth, the relative error, the updates used and whether the
diagnostic said converged, and the off-support share of the policy's
actions on held-out states (``off_support``; NaN for discrete actions).
Torch runs one thread (``--threads``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from typing import Any, Dict, List, Tuple

import numpy as np

from _harness import add_common_args, check_threads, parse_only, print_load, set_threads

GAMMA = 0.99
SEED = 0
#: case -> (environment, policy config name, policy training steps)
CASES: Dict[str, Tuple[str, str, int]] = {
    "cartpole-bc": ("cartpole", "DiscreteBCConfig", 3000),
    "cartpole-cql": ("cartpole", "DiscreteCQLConfig", 5000),
    "pendulum-bc": ("pendulum", "BCConfig", 3000),
    "pendulum-iql": ("pendulum", "IQLConfig", 4000),
    "pendulum-cql": ("pendulum", "CQLConfig", 4000),
}
#: ``recommended-cap``: ``recommended()`` run to the cap without early stopping (does the curve keep moving?)
CONFIGS = ("default", "recommended", "recommended-cap")


def _policy(case: str, dataset: Any) -> Any:
    import offrl
    from offrl.logging import NoopAdapterFactory
    from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler

    _, config_name, steps = CASES[case]
    kwargs: dict = {}
    if config_name == "DiscreteCQLConfig":
        kwargs["observation_scaler"] = StandardObservationScaler()
    if config_name in ("IQLConfig", "CQLConfig"):  # Pendulum's torques lie in [-2, 2]; a tanh policy acts in [-1, 1]
        kwargs["action_scaler"] = MinMaxActionScaler(minimum=np.array([-2.0]), maximum=np.array([2.0]))
    offrl.seed(SEED)
    algo = getattr(offrl.algos, config_name)(**kwargs).create(device="cpu")
    algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, logger_adapter=NoopAdapterFactory(), show_progress=False)
    return algo


def _matched_truth(algo: Any, env_id: str, starts: np.ndarray, horizon: int) -> float:
    """Mean discounted return of ``algo`` started from each of ``starts``
    (the dataset's first observations; the environments are deterministic),
    all episodes stepped together, the time limit lifted to ``horizon``."""
    import gymnasium

    envs = [gymnasium.make(env_id, max_episode_steps=horizon) for _ in range(starts.shape[0])]
    observations = np.empty_like(starts, dtype=np.float32)
    for i, (env, start) in enumerate(zip(envs, starts)):
        env.reset(seed=i)
        inner = env.unwrapped
        if env_id.startswith("Pendulum"):  # observation (cos, sin, angular velocity) -> state (angle, velocity)
            inner.state = np.array([np.arctan2(start[1], start[0]), start[2]], dtype=np.float64)
        else:  # CartPole's observation is its state
            inner.state = np.array(start, dtype=np.float64)
        observations[i] = start
    returns = np.zeros(len(envs))
    alive = np.ones(len(envs), dtype=bool)
    discount = 1.0
    for _ in range(horizon):
        actions = algo.predict(observations)
        for i in np.flatnonzero(alive):
            observation, reward, terminated, truncated, _ = envs[i].step(actions[i])
            returns[i] += discount * float(reward)
            observations[i] = observation
            alive[i] = not (terminated or truncated)
        discount *= GAMMA
        if not alive.any():
            break
    return float(returns.mean())


def _truth(algo: Any, env: Any, dataset: Any, n_trials: int) -> Tuple[float, float]:
    """(discounted return from the dataset's initial states with the time
    limit lifted to 1,000 steps, ``rollout_returns`` from the environment's
    own resets under its time limit)."""
    import offrl
    from offrl.metrics.utility import rollout_returns

    starts = np.asarray(offrl.ope.initial_observations(dataset), dtype=np.float32)
    matched = _matched_truth(algo, env.spec.id, starts, 1000)
    truncated = float(np.mean(rollout_returns(algo, env, n_trials, seed=1, gamma=GAMMA)))
    return matched, truncated


def _fqe(algo: Any, dataset: Any, discrete: bool, recommended: bool, cap: int,
         early_stopping: Any = None, changes: Any = None, fqe_seed: int = SEED) -> Dict[str, Any]:
    import offrl
    from offrl.logging import NoopAdapterFactory

    config_cls = offrl.ope.DiscreteFQEConfig if discrete else offrl.ope.FQEConfig
    fqe_cls = offrl.ope.DiscreteFQE if discrete else offrl.ope.FQE
    config = config_cls.recommended(gamma=GAMMA, **(changes or {})) if recommended else config_cls(gamma=GAMMA)
    offrl.seed(fqe_seed)
    fqe = fqe_cls(algo=algo, config=config, device="cpu")
    start = time.perf_counter()
    results = fqe.fit(dataset, n_steps=cap, n_steps_per_epoch=1000, logger_adapter=NoopAdapterFactory(),
                      show_progress=False, early_stopping=recommended if early_stopping is None else early_stopping)
    seconds = time.perf_counter() - start
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimate = fqe.estimate_policy_value(dataset, n_bootstrap=200, seed=0)
    return {
        "value": estimate.value, "converged": estimate.converged, "steps": int(fqe.grad_step),
        "value_change": estimate.value_change, "heldout_residual": estimate.heldout_residual,
        "off_support": estimate.off_support,
        "curve": [(int(epoch) * 1000, float(m["fqe_initial_value"])) for epoch, m in results],
        "residuals": [float(m.get("fqe_heldout_residual", float("nan"))) for _, m in results],
        "value_changes": [float(m.get("fqe_value_change", float("nan"))) for _, m in results],
        "value_drifts": [float(m.get("fqe_value_drift", float("nan"))) for _, m in results],
        "initial_values": [float(v) for v in fqe.convergence.initial_values],  # [0]: before the first update
        "warned": bool(caught), "seconds": seconds,
    }


def _cached_policy(case: str, dataset: Any, env: Any, n_trials: int, cache: Any) -> Tuple[Any, float, float]:
    """``(policy, truth, truth under the time limit)``, trained and measured
    here, or read from ``cache`` (a folder: ``CASE.d3`` holds the policy
    saved by ``algo.save``, ``CASE.json`` its truths and how they were
    measured) and written there after training. Policies are trained with
    fixed seeds, so a cached one is the one this script would train (on the
    same machine and library version: delete the folder after changing
    either)."""
    import offrl

    if cache is None:
        algo = _policy(case, dataset)
        return (algo, *_truth(algo, env, dataset, n_trials))
    os.makedirs(cache, exist_ok=True)
    model, record = os.path.join(cache, f"{case}.d3"), os.path.join(cache, f"{case}.json")
    if os.path.exists(model) and os.path.exists(record):
        with open(record) as f:
            saved = json.load(f)
        if saved.get("trials") == n_trials and saved.get("policy_steps") == CASES[case][2]:
            return offrl.load_learnable(model, device="cpu"), float(saved["truth"]), float(saved["truth_time_limit"])
    algo = _policy(case, dataset)
    truth, truncated = _truth(algo, env, dataset, n_trials)
    algo.save(model)
    with open(record, "w") as f:
        json.dump({"case": case, "truth": truth, "truth_time_limit": truncated, "trials": n_trials,
                   "policy_steps": CASES[case][2]}, f, indent=1)
    return algo, truth, truncated


def run_case(case: str, cap: int, n_trials: int, configs: Tuple[str, ...] = CONFIGS,
             policy_cache: Any = None, changes: Any = None, fqe_seed: int = SEED) -> Dict[str, Any]:
    import offrl

    env_name = CASES[case][0]
    dataset, env = (offrl.datasets.get_cartpole if env_name == "cartpole" else offrl.datasets.get_pendulum)("replay")
    algo, truth, truncated = _cached_policy(case, dataset, env, n_trials, policy_cache)
    discrete = env_name == "cartpole"
    recorded = {k: v.to_dict() if hasattr(v, "to_dict") else v for k, v in (changes or {}).items()}
    out = {"case": case, "truth": truth, "truth_time_limit": truncated, "recommended_changes": recorded,
           "fqe_seed": fqe_seed}
    for name in configs:
        out[name] = _fqe(algo, dataset, discrete, name != "default", cap, early_stopping=name == "recommended",
                         changes=changes, fqe_seed=fqe_seed)
    return out


def replay(paths: List[str], window: int, tolerance: float) -> None:
    """Apply the settling rule (``offrl.algos.fqe.replay_convergence``) to
    the per-epoch curves of earlier ``--json`` files, without retraining:
    where would ``early_stopping=True`` have stopped, on what estimate?
    Files written before ``initial_values`` was recorded lack ``V(s0)``
    before training; it is taken as 0 (an untrained network's ``V(s0)`` is
    near 0, so a window holding it is far from settled either way)."""
    from offrl.algos.fqe import replay_convergence

    print(f"replay: window {window} epochs, tolerance {100 * tolerance:.1f}%")
    print(f"{'file':<28} {'case':<14} {'config':<15} {'settles at':>14} {'estimate':>9} {'truth':>9} {'rel.err':>8}")
    for path in paths:
        with open(path) as f:
            rows = json.load(f)
        for row in rows:
            for name in (n for n in CONFIGS if n in row):
                r = row[name]
                values = r.get("initial_values") or [0.0] + [v for _, v in r["curve"]]
                residuals = r.get("residuals")
                settled = replay_convergence(values, residuals, window, tolerance)
                hits = np.flatnonzero(settled)
                at = int(hits[0]) + 1 if hits.size else len(settled)
                value = values[at]
                err = (value - row["truth"]) / abs(row["truth"])
                label = f"{at * 1000}" if hits.size else f"never ({at * 1000})"
                note = "" if residuals is not None else "  (no residuals recorded: that check skipped)"
                print(f"{os.path.basename(path):<28} {row['case']:<14} {name:<15} {label:>14} {value:9.2f} "
                      f"{row['truth']:9.2f} {100 * err:+7.1f}%{note}")


def _at(curve: List[Tuple[int, float]], step: int) -> float:
    return next((v for s, v in curve if s == step), float("nan"))


def report(rows: List[Dict[str, Any]]) -> None:
    print(f"{'case':<14} {'config':<15} {'estimate':>9} {'truth':>9} {'rel.err':>8} {'updates':>8} "
          f"{'converged':>9} {'@4000':>8} {'off-supp':>8}  (rollout_returns, own resets and time limit)")
    for row in rows:
        for name in (n for n in CONFIGS if n in row):
            r = row[name]
            err = (r["value"] - row["truth"]) / abs(row["truth"])
            print(f"{row['case']:<14} {name:<15} {r['value']:9.2f} {row['truth']:9.2f} {100 * err:+7.1f}% "
                  f"{r['steps']:8d} {str(r['converged']):>9} {_at(r['curve'], 4000):8.2f} {r['off_support']:8.3f}  "
                  f"({row['truth_time_limit']:.2f})")


def figure(row: Dict[str, Any], path: str) -> None:
    """V(s0) over updates for both configs against the true value."""
    try:
        import matplotlib
    except ImportError:
        print(f"matplotlib is not installed: {path} not written")
        return
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for name, style in ((n, s) for n, s in (("default", "o-"), ("recommended", "s-"), ("recommended-cap", "^-"))
                        if n in row):
        steps, values = zip(*row[name]["curve"])
        label = {"default": "d3rlpy defaults", "recommended": "recommended() + early stopping",
                 "recommended-cap": "recommended(), to the cap"}[name]
        ax.plot(steps, values, style, markersize=3, label=label)
    ax.axhline(row["truth"], color="black", linestyle="--", label="environment's discounted return")
    ax.set_xlabel("FQE updates")
    ax.set_ylabel("estimated V(s0)")
    ax.set_title(f"FQE on {row['case']} (gamma {GAMMA})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv: Any = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, only=list(CASES), quick_help="cartpole-bc only, a 10,000-update cap, 10 trials",
                    d3rlpy=False)
    parser.add_argument("--steps", type=int, default=20000, help="the cap on FQE updates (default 20,000)")
    parser.add_argument("--trials", type=int, default=30, help="environment episodes for the truth")
    parser.add_argument("--figure", default=None, help="write the first case's curves to this PNG")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    parser.add_argument("--configs", default="default,recommended",
                        help="FQE configs to run, comma-separated, of default, recommended, recommended-cap "
                             "(default: default,recommended)")
    parser.add_argument("--policy-cache", default=None, metavar="DIR",
                        help="read the trained policies and their true values from DIR, training and writing "
                             "those missing (CQL's training is the slow part of a run)")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                        help="change a field of recommended() (repeatable; VALUE is JSON: a number, a string, or "
                             "a factory as offrl's to_dict writes it), e.g. --set target_update_interval=50 --set "
                             "'encoder_factory={\"kind\": \"encoder\", \"type\": \"vector\", \"params\": "
                             "{\"hidden_units\": [256, 256, 256]}}'")
    parser.add_argument("--fqe-seed", type=int, default=SEED,
                        help="the seed FQE trains with (the policies keep seed 0; default 0)")
    parser.add_argument("--replay", nargs="+", default=None, metavar="JSON",
                        help="no training: replay the settling rule on the curves of earlier --json files")
    parser.add_argument("--window", type=int, default=None,
                        help="with --replay: the rule's window in epochs (default: fit's)")
    parser.add_argument("--tolerance", type=float, default=None,
                        help="with --replay: the rule's tolerance (default: fit's)")
    args = parser.parse_args(argv)
    if args.replay:
        from offrl.algos.fqe import CONVERGENCE_TOLERANCE, CONVERGENCE_WINDOW

        replay(args.replay, CONVERGENCE_WINDOW if args.window is None else args.window,
               CONVERGENCE_TOLERANCE if args.tolerance is None else args.tolerance)
        return
    check_threads(args, parser)
    set_threads(args.threads)
    cases = parse_only(args.only, list(CASES), parser)
    cap, trials = args.steps, args.trials
    configs = tuple(c.strip() for c in args.configs.split(",") if c.strip())
    if not configs or any(c not in CONFIGS for c in configs):
        parser.error(f"--configs takes a comma-separated subset of {','.join(CONFIGS)}, got {args.configs!r}")
    changes = {}
    for item in args.set:
        field, sep, value = item.partition("=")
        if not sep or not field:
            parser.error(f"--set takes FIELD=VALUE, got {item!r}")
        import dataclasses

        from offrl.ope import FQEConfig

        known = sorted(f.name for f in dataclasses.fields(FQEConfig))
        if field not in known:
            parser.error(f"--set {field}: FQEConfig has no such field (fields: {', '.join(known)})")
        try:
            changes[field] = json.loads(value)
        except json.JSONDecodeError:
            changes[field] = value
        if isinstance(changes[field], dict):  # a factory or scaler as offrl writes it, e.g. {"kind": "encoder", ...}
            from offrl.serialization import from_json_value

            changes[field] = from_json_value(changes[field])
    if args.quick:
        cases, cap, trials = ["cartpole-bc"], min(cap, 10000), min(trials, 10)
    print_load("start")
    rows = []
    for case in cases:
        rows.append(run_case(case, cap, trials, configs, args.policy_cache, changes, args.fqe_seed))
        print(f"{case} done", file=sys.stderr, flush=True)
    report(rows)
    print_load("end")
    if args.figure:
        figure(rows[0], args.figure)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
