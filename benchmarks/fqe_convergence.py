#!/usr/bin/env python
"""Does FQE converge, and does it say so? Estimate against the environment.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/fqe_convergence.py                 # all four cases (long on a busy 2-core machine)
    python benchmarks/fqe_convergence.py --quick         # cartpole BC only, smaller caps
    python benchmarks/fqe_convergence.py --only cartpole-bc,pendulum-iql
    python benchmarks/fqe_convergence.py --figure docs/tutorials/fqe_convergence.png

Cases: the built-in ``replay`` datasets (``offrl.datasets.get_cartpole`` /
``get_pendulum``), each with a behaviour-cloning policy and a conservative
one (DiscreteBC / DiscreteCQL on CartPole-v1, BC / IQL on Pendulum-v1),
trained here with fixed seeds. The truth is the environment's discounted
return of the policy's greedy actions (``rollout_returns(algo, env,
n_trials, gamma=0.99)``). FQE bootstraps through time-limit truncations (a
timeout is not a terminal), so it estimates the value of the untruncated
task: the truth is therefore measured with the time limit lifted to 1,000
steps (``0.99^1000 < 1e-4``); the return under the dataset's own time limit
is printed beside it (CartPole's 500 steps leave under 1 % of the value
out; Pendulum's 200 leave 13 % of the discount mass).

For each case, FQE with

* ``default``: d3rlpy's ``FQEConfig`` defaults, run to the cap (the estimate
  after 4,000 updates is printed too: the issue's figure);
* ``recommended``: ``FQEConfig.recommended()`` with
  ``fit(..., early_stopping=True)``, the cap being ``--steps``;

both with 1,000-step epochs (the diagnostic's granularity). Printed: the
estimate, the truth, the relative error, the updates used and whether the
diagnostic said converged. Torch runs one thread (``--threads``).
"""

from __future__ import annotations

import argparse
import json
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
}


def _policy(case: str, dataset: Any) -> Any:
    import offrl
    from offrl.logging import NoopAdapterFactory
    from offrl.preprocessing import StandardObservationScaler

    _, config_name, steps = CASES[case]
    kwargs = {"observation_scaler": StandardObservationScaler()} if config_name == "DiscreteCQLConfig" else {}
    offrl.seed(SEED)
    algo = getattr(offrl.algos, config_name)(**kwargs).create(device="cpu")
    algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, logger_adapter=NoopAdapterFactory(), show_progress=False)
    return algo


def _truth(algo: Any, env: Any, n_trials: int) -> Tuple[float, float]:
    """(discounted return with the time limit lifted to 1,000 steps, with the dataset's own limit)."""
    import gymnasium

    from offrl.metrics.utility import rollout_returns

    long_env = gymnasium.make(env.spec.id, max_episode_steps=1000)
    untruncated = float(np.mean(rollout_returns(algo, long_env, n_trials, seed=1, gamma=GAMMA)))
    truncated = float(np.mean(rollout_returns(algo, env, n_trials, seed=1, gamma=GAMMA)))
    return untruncated, truncated


def _fqe(algo: Any, dataset: Any, discrete: bool, recommended: bool, cap: int) -> Dict[str, Any]:
    import offrl
    from offrl.logging import NoopAdapterFactory

    config_cls = offrl.ope.DiscreteFQEConfig if discrete else offrl.ope.FQEConfig
    fqe_cls = offrl.ope.DiscreteFQE if discrete else offrl.ope.FQE
    config = config_cls.recommended(gamma=GAMMA) if recommended else config_cls(gamma=GAMMA)
    offrl.seed(SEED)
    fqe = fqe_cls(algo=algo, config=config, device="cpu")
    start = time.perf_counter()
    results = fqe.fit(dataset, n_steps=cap, n_steps_per_epoch=1000, logger_adapter=NoopAdapterFactory(),
                      show_progress=False, early_stopping=recommended)
    seconds = time.perf_counter() - start
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimate = fqe.estimate_policy_value(dataset, n_bootstrap=200, seed=0)
    return {
        "value": estimate.value, "converged": estimate.converged, "steps": int(fqe.grad_step),
        "value_change": estimate.value_change, "heldout_residual": estimate.heldout_residual,
        "curve": [(int(epoch) * 1000, float(m["fqe_initial_value"])) for epoch, m in results],
        "warned": bool(caught), "seconds": seconds,
    }


def run_case(case: str, cap: int, n_trials: int) -> Dict[str, Any]:
    import offrl

    env_name = CASES[case][0]
    dataset, env = (offrl.datasets.get_cartpole if env_name == "cartpole" else offrl.datasets.get_pendulum)("replay")
    algo = _policy(case, dataset)
    truth, truncated = _truth(algo, env, n_trials)
    discrete = env_name == "cartpole"
    out = {"case": case, "truth": truth, "truth_time_limit": truncated}
    for name, recommended in (("default", False), ("recommended", True)):
        out[name] = _fqe(algo, dataset, discrete, recommended, cap)
    return out


def _at(curve: List[Tuple[int, float]], step: int) -> float:
    return next((v for s, v in curve if s == step), float("nan"))


def report(rows: List[Dict[str, Any]]) -> None:
    print(f"{'case':<14} {'config':<12} {'estimate':>9} {'truth':>9} {'rel.err':>8} {'updates':>8} "
          f"{'converged':>9} {'@4000':>8}  (truth under the data's time limit)")
    for row in rows:
        for name in ("default", "recommended"):
            r = row[name]
            err = (r["value"] - row["truth"]) / abs(row["truth"])
            print(f"{row['case']:<14} {name:<12} {r['value']:9.2f} {row['truth']:9.2f} {100 * err:+7.1f}% "
                  f"{r['steps']:8d} {str(r['converged']):>9} {_at(r['curve'], 4000):8.2f}  ({row['truth_time_limit']:.2f})")


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
    for name, style in (("default", "o-"), ("recommended", "s-")):
        steps, values = zip(*row[name]["curve"])
        label = "d3rlpy defaults" if name == "default" else "recommended() + early stopping"
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
    args = parser.parse_args(argv)
    check_threads(args, parser)
    set_threads(args.threads)
    cases = parse_only(args.only, list(CASES), parser)
    cap, trials = args.steps, args.trials
    if args.quick:
        cases, cap, trials = ["cartpole-bc"], min(cap, 10000), min(trials, 10)
    print_load("start")
    rows = []
    for case in cases:
        rows.append(run_case(case, cap, trials))
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
