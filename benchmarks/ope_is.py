#!/usr/bin/env python
"""Benchmark of offrl's importance-sampling family (``offrl.ope``).

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/ope_is.py            # speed and accuracy (about 1-2 minutes on 2 cores)
    python benchmarks/ope_is.py --quick    # smaller sizes, a smoke run
    python benchmarks/ope_is.py --blas-threads 1
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/ope_is.py --quick

d3rlpy 2.x has no importance-sampling estimators (its ``d3rlpy.ope`` holds
FQE and DiscreteFQE only; the script lists it from the d3rlpy interpreter
given by ``--d3rlpy-python`` or ``$D3RLPY_PYTHON``, when one is given), so
there is nothing to time side by side. Instead:

1. Speed: every estimator end to end (target probabilities from a
   vectorised callable, logged behaviour probabilities, point estimate and a
   1,000-resample bootstrap interval) on a seeded synthetic dataset of
   10,000 episodes of 100 steps (1,000,000 steps, 8-dim observations, 4
   discrete actions), against a plain reference written the obvious way: a
   Python loop over episodes (numpy within an episode) for the estimate,
   and the bootstrap as that estimate recomputed on each resampled list of
   episodes. The reference is timed on ``--reference-resamples`` resamples
   (default 10) and its time per resample scaled to 1,000.
2. Intervals and return distributions (issue 19's target: each estimator
   with 1,000 bootstrap resamples on 1,000,000 logged steps in <= 5 s): on
   the same dataset, every estimator with each ``ci`` method (bootstrap,
   Hoeffding, empirical Bernstein, Student's t; the concentration bounds
   with a range wide enough to hold every term, for timing only), and
   ``estimate_return_distribution`` (IS and WIS) with 1,000 resamples for
   its four statistics' intervals; end to end, median of 3 runs.
3. Accuracy: on the tabular MDP of ``tests/ope/tabular_mdp.py`` (3 states,
   3 actions, horizon 4, exact values by dynamic programming), over
   repeated datasets of 200 episodes: bias, RMSE, the coverage of the 90 %
   interval and the mean effective sample size of each estimator, with
   logged behaviour probabilities, with an estimated behaviour policy (the
   default: multinomial logistic regression), and with the same model
   calibrated post hoc (sigmoid, 3 folds), which is why that is not the
   default. DR/WDR use the exact ``Q_t(s, a)`` and, as "DR (Q + 0.5)", a
   model off by 0.5 everywhere.

The tabular MDP is the test suite's own fixture, loaded by file path
(``_harness.load_module``), so that tests and benchmark share one definition.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List

import numpy as np
from offrl.dataset import MDPDataset
from offrl.ope.behaviour import estimate_behaviour_policy
from offrl.ope.bounds import CI_METHODS
from offrl.ope.distributional import estimate_return_distribution
from offrl.ope.importance import ESTIMATORS, estimate_policy_value

from _harness import add_common_args, d3rlpy_interpreter, format_table, load_module, print_load

_tabular = load_module("_offrl_tabular_mdp", os.path.join("tests", "ope", "tabular_mdp.py"))
action_values, make_mdp, sample_dataset = _tabular.action_values, _tabular.make_mdp, _tabular.sample_dataset
table_policy, table_q = _tabular.table_policy, _tabular.table_q
KINDS = tuple(k for k in ESTIMATORS if k not in ("mis", "wmis", "mdr"))  # marginal ones: ope_marginal.py


# ------------------------------------------------------------------ speed
def synthetic(n_episodes: int, horizon: int, seed: int = 0):
    """Observations (E*H, 8), actions in 4, rewards, behaviour probabilities;
    behaviour = softmax(obs @ Wb), target = softmax(obs @ Wt)."""
    rng = np.random.default_rng(seed)
    n = n_episodes * horizon
    obs = rng.normal(size=(n, 8)).astype(np.float32)
    wb, wt = rng.normal(size=(8, 4)) * 0.3, rng.normal(size=(8, 4)) * 0.3

    def softmax(z):
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    mu_all = softmax(obs @ wb)
    actions = (rng.random((n, 1)) > np.cumsum(mu_all, axis=1)).sum(axis=1).clip(max=3)
    rewards = rng.normal(size=n).astype(np.float32) + (actions == 0)
    terminals = np.zeros(n, dtype=np.float32)
    terminals[horizon - 1::horizon] = 1.0
    dataset = MDPDataset(obs, actions, rewards, terminals, action_size=4)
    mu = mu_all[np.arange(n), actions]
    target = lambda x: softmax(np.asarray(x, dtype=np.float64) @ wt)  # noqa: E731
    q = lambda x, a: np.zeros(len(x))  # noqa: E731 - the model's cost is not what is measured
    return dataset, mu, target, q


def reference_estimate(kind: str, episodes: List[dict], gamma: float) -> float:
    """The estimators the obvious way: a loop over episodes."""
    h = max(len(ep["rho"]) for ep in episodes)
    d = gamma ** np.arange(h)
    if kind in ("is", "wis"):
        num = den = 0.0
        for ep in episodes:
            w = np.prod(ep["rho"])
            num += w * float(np.sum(d[: len(ep["r"])] * ep["r"]))
            den += w
        return num / (len(episodes) if kind == "is" else den)
    if kind in ("pdis", "dr"):
        total = 0.0
        for ep in episodes:
            w = np.cumprod(ep["rho"])
            t = len(w)
            value = w * ep["r"]
            if kind == "dr":
                prev = np.concatenate(([1.0], w[:-1]))
                value = value - w * ep["q"] + prev * ep["v"]
            total += float(np.sum(d[:t] * value))
        return total / len(episodes)
    sums = {k: np.zeros(h) for k in ("wr", "w", "wq", "pv", "p")}
    for ep in episodes:
        w = np.cumprod(ep["rho"])
        t = len(w)
        padded = np.concatenate((w, np.full(h - t, w[-1])))
        prev = np.concatenate(([1.0], padded[:-1]))
        sums["w"] += padded
        sums["p"] += prev
        sums["wr"][:t] += w * ep["r"]
        sums["wq"][:t] += w * ep["q"]
        sums["pv"][:t] += prev[:t] * ep["v"]
    if kind == "wpdis":
        return float(np.sum(d * sums["wr"] / sums["w"]))
    return float(np.sum(d * ((sums["wr"] - sums["wq"]) / sums["w"] + sums["pv"] / sums["p"])))


def reference_run(kind, dataset, mu, target, gamma, n_resamples, seed=0):
    arrays = dataset.to_arrays()
    pi = target(arrays["observations"])[np.arange(len(mu)), arrays["actions"].reshape(-1)]
    rho = pi / mu
    rewards = arrays["rewards"].reshape(-1).astype(np.float64)
    episodes = [
        {"rho": rho[s:e], "r": rewards[s:e], "q": np.zeros(e - s), "v": np.zeros(e - s)}
        for s, e in zip(arrays["episode_starts"], arrays["episode_ends"])
    ]
    value = reference_estimate(kind, episodes, gamma)
    rng = np.random.default_rng(seed)
    n = len(episodes)
    replicates = [reference_estimate(kind, [episodes[i] for i in rng.integers(0, n, n)], gamma)
                  for _ in range(n_resamples)]
    return value, replicates


def timed(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def speed(quick: bool, reference_resamples: int) -> None:
    n_episodes, horizon = (2_000, 50) if quick else (10_000, 100)
    dataset, mu, target, q = synthetic(n_episodes, horizon)
    gamma, n_bootstrap = 0.99, 1000
    print(f"\n1. Speed: {n_episodes:,} episodes x {horizon} steps = {n_episodes * horizon:,} steps, "
          f"{n_bootstrap} bootstrap resamples (median of 3 runs; reference: {reference_resamples} resamples, scaled)")
    rows: List[List[str]] = []
    for kind in KINDS:
        model = q if ESTIMATORS[kind][1] else None
        run = lambda: estimate_policy_value(target, dataset, kind, model, gamma=gamma,  # noqa: E731
                                            behaviour_probabilities=mu, n_bootstrap=n_bootstrap)
        point = lambda: estimate_policy_value(target, dataset, kind, model, gamma=gamma,  # noqa: E731
                                              behaviour_probabilities=mu, n_bootstrap=1)
        full = timed(run, 3)
        bootstrap = full - timed(point, 3)
        t0 = time.perf_counter()
        ref_value, _ = reference_run(kind, dataset, mu, target, gamma, reference_resamples)
        ref_elapsed = time.perf_counter() - t0
        t0 = time.perf_counter()
        reference_run(kind, dataset, mu, target, gamma, 0)
        ref_point = time.perf_counter() - t0
        ref_full = ref_point + (ref_elapsed - ref_point) / max(reference_resamples, 1) * n_bootstrap
        ours = run().value
        if not np.isclose(ours, ref_value, rtol=1e-6):
            raise SystemExit(f"{kind}: offrl {ours} differs from the reference {ref_value}")
        rows.append([kind.upper(), f"{full:.3f}", f"{bootstrap:.3f}", f"{ref_full:.1f}", f"{ref_full / full:.0f}x"])
    print(format_table(["estimator", "offrl s", "of which bootstrap s", "reference s", "ref / offrl"], rows))


def interval_speed(quick: bool) -> None:
    n_episodes, horizon = (2_000, 50) if quick else (10_000, 100)
    dataset, mu, target, q = synthetic(n_episodes, horizon)
    gamma, n_bootstrap = 0.99, 1000
    print(f"\n2. Intervals and return distributions: {n_episodes:,} episodes x {horizon} steps = "
          f"{n_episodes * horizon:,} steps, {n_bootstrap} bootstrap resamples, seconds end to end (median of 3)")
    wide = (-1e300, 1e300)  # holds every term: for timing the bounds only
    rows: List[List[str]] = []
    for kind in KINDS:
        model = q if ESTIMATORS[kind][1] else None
        row = [kind.upper()]
        for ci in CI_METHODS:
            run = lambda: estimate_policy_value(target, dataset, kind, model, gamma=gamma,  # noqa: E731
                                                behaviour_probabilities=mu, n_bootstrap=n_bootstrap, ci=ci,
                                                value_range=None if ci in ("bootstrap", "ttest") else wide)
            row.append(f"{timed(run, 3):.2f}")
        rows.append(row)
    print(format_table(["estimator", *CI_METHODS], rows))
    rows = []
    for kind in ("is", "wis"):
        run = lambda: estimate_return_distribution(target, dataset, kind, gamma=gamma,  # noqa: E731
                                                   behaviour_probabilities=mu, n_bootstrap=n_bootstrap, alpha=0.1)
        elapsed = timed(run, 3)
        d = run()
        rows.append([kind.upper(), f"{elapsed:.2f}", f"{d.mean:.3f}", f"{d.std:.3f}", f"{d.cvar():.3f}",
                     f"{d.lower_quartile:.3f}", f"{d.total_weight:.3f}", f"{d.effective_sample_size:.1f}"])
    print(format_table(["return distribution", "s", "mean", "std", "CVaR@0.1", "lower quartile", "mean weight", "ESS"],
                       rows))


# ------------------------------------------------------------------ accuracy
MDP = make_mdp()
BEHAVIOUR = np.array([[0.5, 0.3, 0.2], [0.2, 0.4, 0.4], [0.3, 0.3, 0.4]])
TARGET = np.array([[0.2, 0.3, 0.5], [0.6, 0.2, 0.2], [0.1, 0.7, 0.2]])
GAMMA = 0.9


def accuracy(repeats: int, estimated_repeats: int, n_episodes: int) -> None:
    q_true, truth = action_values(MDP, TARGET, GAMMA)
    _, behaviour_value = action_values(MDP, BEHAVIOUR, GAMMA)
    rows = [(k, k, q_true) for k in KINDS] + [("dr", "DR (Q + 0.5)", q_true + 0.5)]
    print(f"\n3. Accuracy on the tabular MDP: true value {truth:.4f} (behaviour policy's {behaviour_value:.4f}), "
          f"{n_episodes} episodes per dataset, 90% intervals")
    modes = (
        ("logged behaviour probabilities", repeats, None),
        ("estimated behaviour policy (default: logistic regression)", estimated_repeats, "auto"),
        ("estimated, the same model with post-hoc sigmoid calibration", estimated_repeats, "sigmoid"),
    )
    for label, n_repeats, calibration in modes:
        if n_repeats == 0:
            continue
        errors: Dict[str, list] = {name: [] for _, name, _ in rows}
        covered: Dict[str, int] = {name: 0 for _, name, _ in rows}
        ess: Dict[str, list] = {name: [] for _, name, _ in rows}
        t0 = time.perf_counter()
        for r in range(n_repeats):
            data = sample_dataset(MDP, BEHAVIOUR, n_episodes, seed=100_000 + r)
            if calibration is None:
                behaviour = dict(behaviour_probabilities=data.behaviour_probabilities)
            else:
                model = estimate_behaviour_policy(data.dataset, calibration=calibration)
                behaviour = dict(behaviour_policy=model)
            for kind, name, q in rows:
                result = estimate_policy_value(table_policy(MDP, TARGET), data.dataset, kind, table_q(MDP, q),
                                               gamma=GAMMA, confidence=0.9, n_bootstrap=400, seed=[r, 7], **behaviour)
                errors[name].append(result.value - truth)
                covered[name] += result.lower <= truth <= result.upper
                ess[name].append(result.effective_sample_size)
        print(f"\n   {label}: {n_repeats} datasets ({time.perf_counter() - t0:.1f} s)")
        table = []
        for _, name, _ in rows:
            e = np.asarray(errors[name])
            table.append([name.upper() if name in KINDS else name, f"{e.mean():.4f}", f"{np.sqrt(np.mean(e**2)):.4f}",
                          f"{covered[name] / n_repeats:.1%}", f"{np.mean(ess[name]):.1f}"])
        print(format_table(["estimator", "bias", "RMSE", "coverage", "mean ESS"], table, left=1))


def d3rlpy_ope_members(python: str) -> str:
    code = "import d3rlpy, d3rlpy.ope as o; print(d3rlpy.__version__, sorted(n for n in dir(o) if not n.startswith('_') and n[0].isupper()))"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"not available ({e})"
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 and out.stdout.strip() else "not available"


SECTIONS = ("speed", "intervals", "accuracy")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, quick_help="smaller sizes, a smoke run", threads=False,  # numpy only: see --blas-threads
                    only=SECTIONS)
    parser.add_argument("--repeats", type=int, default=None, help="datasets for the accuracy table (default 300; quick 60)")
    parser.add_argument("--reference-resamples", type=int, default=10)
    parser.add_argument("--blas-threads", type=int, default=None, help="limit numpy's BLAS threads (threadpoolctl)")
    args = parser.parse_args(argv)
    repeats = args.repeats if args.repeats is not None else (60 if args.quick else 300)
    print(f"offrl importance-sampling benchmark; python {platform.python_version()}, numpy {np.__version__}, "
          f"{os.cpu_count()} CPUs")
    print_load("start")
    python, note = d3rlpy_interpreter(args)
    if python is None:
        print(f"d3rlpy: {note}")
    else:
        print(f"d3rlpy (from {python}): version and d3rlpy.ope classes: {d3rlpy_ope_members(python)}"
              " -- no importance-sampling estimators to compare with")
    limit = None
    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits

        limit = threadpool_limits(args.blas_threads, user_api="blas")
    try:
        sections = SECTIONS if args.only is None else tuple(args.only.split(","))
        unknown = sorted(set(sections) - set(SECTIONS))
        if unknown:
            raise SystemExit(f"--only: unknown sections {unknown}, expected some of {list(SECTIONS)}")
        if "speed" in sections:
            speed(args.quick, args.reference_resamples)
        if "intervals" in sections:
            interval_speed(args.quick)
        if "accuracy" in sections:
            accuracy(repeats, max(repeats // 5, 10), 200)
    finally:
        if limit is not None:
            limit.restore_original_limits()
    print()
    print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
