#!/usr/bin/env python
"""Offline search (``offrl.model_selection.OfflineSearch``): how good is its choice, what does it cost?

Run from the repository root (offrl installed with the search extra):

    python benchmarks/model_selection.py                       # all three parts (hours on a busy 2-core machine)
    python benchmarks/model_selection.py --only regret --datasets cartpole-replay --repetitions 1
    python benchmarks/model_selection.py --only overhead,workers
    python benchmarks/model_selection.py --quick               # a smoke run of every part
    python benchmarks/model_selection.py --report              # tables from the saved results only

Parts:

* ``regret``: on ``cartpole-replay`` (DiscreteCQL, ``alpha`` in 0.3 / 1.0 /
  4.0) and ``pendulum-replay`` (TD3PlusBC, ``alpha`` in 1.0 / 2.5 / 10.0;
  the middle values are d3rlpy's defaults; every config with a 64 x 64
  network, as the 2-core machine is small), 3 configs x 2 seeds x 3
  checkpoints (6,000 updates, one every 2,000) = 18 candidates per
  repetition, scored on 20 % held-out episodes by FQE (the search's own
  default: ``recommended()``, a 3 x 256 layer-normed network, up to 10,000
  updates with early stopping), WPDIS and the TD error. ``--fqe-config
  small --fqe-steps 3000`` is the cheaper FQE of the first measurement (3 x
  64, 3,000 updates: about a sixth of the OPE time), which missed the goal
  (results in ``results/model_selection/fqe-small-3000/``; each FQE
  setting's results go to ``results/model_selection/fqe-CONFIG-STEPS/``). Each candidate's true return is measured in the
  environment (20 episodes, the same seeded initial states for every
  candidate) and recorded, never used to choose. Printed per dataset and
  repetition: the best candidate's true return, the chosen one's by each
  rule (FQE estimate, FQE lower bound, WPDIS, minus the TD error), the last
  checkpoint of the default config (mean over its seeds) and a random
  candidate (the mean over all); regret = best - chosen, and relative to
  |best|. Goal: chosen within 10 % of the best, never below the default's.
  Repetitions differ in the split and the seeds (``2r``, ``2r + 1``).
  One JSON file per (dataset, repetition) under ``--out``: reruns skip
  finished ones.
* ``overhead``: the same candidates (CartPole, 3 configs x 2 seeds, 4
  checkpoints) trained by the search with a scorer that costs nothing,
  against a plain loop (``offrl.seed``, ``create``, ``fit``), in-memory and
  SQLite storage, interleaved rounds. Goal: under 10 %. OPE's share is
  reported from the regret part (``score_time`` against ``train_time``).
* ``workers``: one SQLite study of a 12-trial grid, run by one ``offrl
  search`` process and, separately, by two started together on a fresh
  study: every grid point completes exactly once (failed or unused trials
  counted), and trials per minute.

The load average is printed at the start and end of each part: on the
shared 2-core machine figures move with it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from typing import Any, Dict, List, Tuple

import numpy as np

import _harness

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
#: regret results go to ``<DEFAULT_OUT>/fqe-<config>-<steps>/`` unless ``--out`` is given
DEFAULT_OUT = os.path.join(HERE, "results", "model_selection")
DATASETS = {
    "cartpole-replay": ("discrete_cql", [0.3, 1.0, 4.0], 1.0),
    "pendulum-replay": ("td3_plus_bc", [1.0, 2.5, 10.0], 2.5),
}
PARTS = ("regret", "truth", "overhead", "workers")


def _config(algorithm: str) -> Any:
    """d3rlpy's defaults but a 64 x 64 network for every config (the machine is small)."""
    from offrl.algos.registry import resolve_algorithm
    from offrl.models import VectorEncoderFactory

    config = resolve_algorithm(algorithm)()
    names = [f for f in ("encoder_factory", "actor_encoder_factory", "critic_encoder_factory") if hasattr(config, f)]
    return dataclasses.replace(config, **{f: VectorEncoderFactory([64, 64]) for f in names})


def _fqe_config(discrete: bool, n_steps: int, kind: str = "small", members: int = 1) -> Any:
    """``default``: the search's own FQE (``recommended()``, 3 x 256);
    ``small``: the same with a 3 x 64 network (cheap). ``members``: how many
    (``n_critics``; above 1 independent, ``independent_critics=True``: their
    mean is the estimate and the interval includes their spread; the
    search's default is 3)."""
    from offrl.model_selection.scorers import default_fqe_config
    from offrl.models import VectorEncoderFactory

    config = default_fqe_config(discrete, n_steps)
    if kind == "small":
        config = dataclasses.replace(config, encoder_factory=VectorEncoderFactory([64, 64, 64], use_layer_norm=True))
    return dataclasses.replace(config, n_critics=members, independent_critics=members > 1)


# ---------------------------------------------------------------- regret
def run_regret(args: argparse.Namespace) -> None:
    import offrl
    from offrl.model_selection import OfflineSearch

    os.makedirs(args.out, exist_ok=True)
    for name in args.datasets:
        algorithm, alphas, _ = DATASETS[name]
        dataset, env = offrl.datasets.get_dataset(name)
        for rep in range(args.first_repetition, args.repetitions):
            path = os.path.join(args.out, f"regret-{name}-r{rep}{'-quick' if args.quick else ''}.json")
            if os.path.exists(path):
                _harness.log(f"{path} exists: skipped")
                continue
            # the study in an SQLite file beside the results while it runs: a killed run, rerun, continues it
            # (finished candidates kept, the one cut short retried); removed once the result file is written
            studies = os.path.join(args.out, "studies")
            os.makedirs(studies, exist_ok=True)
            study = os.path.join(studies, f"regret-{name}-r{rep}{'-quick' if args.quick else ''}")
            resumed = os.path.exists(study + ".db")
            _harness.log(f"regret: {name}, repetition {rep}{' (continuing its study)' if resumed else ''}")
            load_before = _harness.load_average()
            discrete = dataset.dataset_info.action_space == offrl.ActionSpace.DISCRETE
            search = OfflineSearch(
                _config(algorithm), {"alpha": alphas}, scorer=["fqe", "wpdis", "neg_td_error"],
                seeds=[2 * rep, 2 * rep + 1], n_steps=args.steps, n_steps_per_epoch=args.steps // args.checkpoints,
                random_state=rep, fqe_config=_fqe_config(discrete, args.fqe_steps, args.fqe_config, args.fqe_members),
                fqe_steps=args.fqe_steps,
                fqe_steps_per_epoch=max(1, args.fqe_steps // 10), n_eval_episodes=args.eval_episodes,
                ope_options={"n_bootstrap": 200}, show_progress=False,
                storage=f"sqlite:///{study}.db", output_dir=study + "-models",
            )
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                search.fit(dataset, env=env)
            table = search.results_
            record = {
                "dataset": name, "repetition": rep, "algorithm": algorithm, "alphas": alphas,
                "steps": args.steps, "checkpoints": args.checkpoints, "fqe_steps": args.fqe_steps,
                "fqe_config": args.fqe_config, "fqe_members": args.fqe_members, "eval_episodes": args.eval_episodes,
                "wall_s": time.perf_counter() - start, "resumed": resumed, "load_before": load_before,
                "load_after": _harness.load_average(),
                "rows": json.loads(table.drop(columns=[c for c in table.columns if c.endswith("_warnings")])
                                   .to_json(orient="records")),
            }
            with open(path + ".tmp", "w") as f:
                json.dump(record, f)
            os.replace(path + ".tmp", path)
            os.remove(study + ".db")
            shutil.rmtree(study + "-models", ignore_errors=True)


def _truth_column(n: int) -> str:
    return f"true_return_{n}"


def _copy_truth(record: Dict[str, Any], other_path: str, n_long: int) -> bool:
    """Take ``n_long``-episode truths from another FQE setting's result for
    the same repetition, where every candidate is there and is the same
    policy (the candidates do not depend on the scorer: the same config,
    seed and checkpoint, and the same saved return over the first episodes,
    exactly); False, changing nothing, otherwise."""
    if not os.path.exists(other_path):
        return False
    with open(other_path) as f:
        other = json.load(f)
    column = _truth_column(n_long)
    keys = ("dataset", "repetition", "algorithm", "steps", "checkpoints")
    if any(other.get(k) != record.get(k) for k in keys) or \
            other.get("eval_episodes", 20) != record.get("eval_episodes", 20):  # early files: 20, unrecorded
        return False
    found = {(float(r["param_alpha"]), int(r["seed"]), int(r["epoch"])): r for r in other["rows"]}
    matched = []
    for row in record["rows"]:
        again = found.get((float(row["param_alpha"]), int(row["seed"]), int(row["epoch"])))
        if again is None or column not in again or again["true_return"] != row["true_return"]:
            return False
        matched.append((row, again))
    for row, again in matched:
        row[column] = again[column]
        row[f"true_value_{n_long}"] = again[f"true_value_{n_long}"]
    return True


def run_truth(args: argparse.Namespace) -> None:
    """Re-measure every saved candidate's true return over ``--truth-episodes``
    episodes, keeping its saved OPE scores: the candidates are trained again
    (training is deterministic: the same seeds, split and code path), and
    each is checked to be the same policy by its return over the first
    ``--eval-episodes`` of those episodes, which must equal the saved
    ``true_return`` exactly (the same seeded initial states)."""
    import gymnasium

    import offrl
    from offrl.metrics import rollout_returns
    from offrl.model_selection import OfflineSearch
    from offrl.model_selection.search import SCORING_SEED

    n_long = args.truth_episodes
    column = _truth_column(n_long)
    paths = sorted(p for p in os.listdir(args.out) if p.startswith("regret-") and p.endswith(".json")
                   and "quick" not in p) if os.path.isdir(args.out) else []
    for path in paths:
        full = os.path.join(args.out, path)
        with open(full) as f:
            record = json.load(f)
        if record["dataset"] not in args.datasets:
            continue
        rows = record["rows"]
        if all(column in r for r in rows):
            _harness.log(f"{path}: {column} already measured: skipped")
            continue
        name, rep = record["dataset"], record["repetition"]
        if args.truth_from and _copy_truth(record, os.path.join(args.truth_from, path), n_long):
            with open(full + ".tmp", "w") as f:
                json.dump(record, f)
            os.replace(full + ".tmp", full)
            _harness.log(f"{path}: {column} of {len(rows)} candidates taken from {args.truth_from} "
                         f"(the same candidates: their saved returns equal)")
            continue
        _harness.log(f"truth: {name}, repetition {rep}, {n_long} episodes per candidate")
        dataset, env = offrl.datasets.get_dataset(name)
        check_env = gymnasium.make(env.spec.id) if env.spec is not None else env
        n_short = int(record.get("eval_episodes", args.eval_episodes))  # the saved truth's own episode count

        def short_return(algo: Any, _dataset: Any) -> float:  # the saved truth's episodes: the same policy?
            return float(np.mean(rollout_returns(algo, check_env, n_trials=n_short, seed=SCORING_SEED)))

        steps, checkpoints = record["steps"], record["checkpoints"]
        search = OfflineSearch(
            _config(record["algorithm"]), {"alpha": record["alphas"]}, scorer=short_return,
            seeds=[2 * rep, 2 * rep + 1], n_steps=steps, n_steps_per_epoch=steps // checkpoints, random_state=rep,
            n_eval_episodes=n_long, show_progress=False,
        )
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            search.fit(dataset, env=env)
        found = {(float(r["param_alpha"]), int(r["seed"]), int(r["epoch"])): r
                 for r in json.loads(search.results_.to_json(orient="records"))}
        for row in rows:
            again = found.get((float(row["param_alpha"]), int(row["seed"]), int(row["epoch"])))
            if again is None:
                raise RuntimeError(f"{path}: candidate alpha={row['param_alpha']} seed={row['seed']} "
                                   f"epoch={row['epoch']} was not trained again")
            if not np.isclose(again["short_return"], row["true_return"], rtol=0.0, atol=1e-6):
                raise RuntimeError(f"{path}: candidate alpha={row['param_alpha']} seed={row['seed']} "
                                   f"epoch={row['epoch']} is not the saved policy: its return over the first "
                                   f"{n_short} episodes is {again['short_return']!r}, saved {row['true_return']!r}")
            row[column] = again["true_return"]
            row[f"true_value_{n_long}"] = again["true_value"]
        record[f"truth_{n_long}_wall_s"] = time.perf_counter() - start
        with open(full + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(full + ".tmp", full)
        _harness.log(f"{path}: {len(rows)} candidates re-measured, each the saved policy")


def _choice(rows: List[Dict[str, Any]], column: str) -> Dict[str, Any]:
    """The candidate the search's rule picks with ``column`` as the score: reliable first, then highest."""
    reliable = column[: -len("_lower")] + "_reliable" if column.endswith("_lower") else column + "_reliable"

    def key(row: Dict[str, Any]) -> tuple:
        value = row[column]
        return bool(row.get(reliable, True)), value if value is not None and np.isfinite(value) else -np.inf

    return max(rows, key=key)


def _regret_table(records: List[Tuple[str, Dict[str, Any]]], truth: str, value: str, title: str) -> None:
    """The regret table with ``truth`` as each candidate's true return and
    ``value`` as its true discounted value (what FQE estimates)."""
    from scipy.stats import spearmanr

    rules = [("FQE estimate", "fqe"), ("FQE lower bound", "fqe_lower"), ("WPDIS", "wpdis"),
             ("-TD error", "neg_td_error")]
    header = (["dataset / rep", "n", "FQE", "best", "default last", "random"] + [r for r, _ in rules]
              + ["FQE rank corr.", "FQE error", "load"])
    table, relative = [], {rule: [] for rule, _ in rules}
    beats_default = {rule: [] for rule, _ in rules}
    for path, record in records:
        rows = record["rows"]
        _, _, default_alpha = DATASETS[record["dataset"]]
        truths = np.array([r[truth] for r in rows])
        best = truths.max()
        last = max(r["epoch"] for r in rows)
        default = float(np.mean([r[truth] for r in rows
                                 if r["param_alpha"] == default_alpha and r["epoch"] == last]))
        cells = [f"{record['dataset']} r{record['repetition']}{' quick' if 'quick' in path else ''}", str(len(rows)),
                 f"{record.get('fqe_config', 'small')} {record['fqe_steps']:,}"
                 + (f" x{record['fqe_members']}" if record.get("fqe_members", 1) > 1 else ""),
                 f"{best:.1f}", f"{default:.1f} ({(best - default) / abs(best):+.0%})",
                 f"{truths.mean():.1f} ({(best - truths.mean()) / abs(best):+.0%})"]
        for rule, column in rules:
            chosen = _choice(rows, column)[truth]
            rel = (best - chosen) / abs(best)
            relative[rule].append(rel)
            beats_default[rule].append(chosen >= default)
            cells.append(f"{chosen:.1f} ({rel:+.0%})")
        # how well FQE orders and sizes the candidates' discounted values (what it estimates)
        values = np.array([r[value] for r in rows])
        estimates = np.array([r["fqe"] for r in rows])
        cells.append(f"{spearmanr(estimates, values).statistic:.2f}")
        cells.append(f"{np.mean(np.abs(estimates - values) / np.abs(values)):.1%}")
        cells.append(f"{record['load_before'][0]:.1f}-{record['load_after'][0]:.1f}")
        table.append(cells)
    _harness.print_table(header, table, title=f"true return of the chosen candidate (regret relative to the best); "
                                              f"{title}")
    for rule, _ in rules:
        within = sum(r <= 0.10 for r in relative[rule])
        print(f"  {rule}: within 10 % of the best in {within}/{len(relative[rule])}, "
              f"at or above the default's last checkpoint in {sum(beats_default[rule])}/{len(relative[rule])}, "
              f"median relative regret {statistics.median(relative[rule]):.1%}")


def report_regret(args: argparse.Namespace) -> None:
    paths = sorted(p for p in os.listdir(args.out) if p.startswith("regret-") and p.endswith(".json")) \
        if os.path.isdir(args.out) else []
    if not paths:
        print("regret: no results yet")
        return
    records = []
    for path in paths:
        with open(os.path.join(args.out, path)) as f:
            records.append((path, json.load(f)))
    _regret_table(records, "true_return", "true_value", "the saved truth: 20 episodes per candidate")
    longer = sorted({int(k[len("true_return_"):]) for _, record in records for k in record["rows"][0]
                     if k.startswith("true_return_")})
    for n in longer:
        measured = [(p, r) for p, r in records if all(_truth_column(n) in row for row in r["rows"])]
        _regret_table(measured, _truth_column(n), f"true_value_{n}",
                      f"the truth re-measured over {n} episodes per candidate (`--only truth`), "
                      f"{len(measured)} of {len(records)} repetitions")
    ope, truth, train, wall = 0.0, 0.0, 0.0, 0.0
    for path, record in records:
        rows = record["rows"]
        ope += sum(r["score_time"] for r in rows)
        truth += sum(r.get("truth_time") or 0.0 for r in rows)
        last = {r["trial"]: r for r in sorted(rows, key=lambda r: r["epoch"])}
        train += sum(r["train_time"] for r in last.values())
        wall += record["wall_s"]
    print(f"  time: training {train:.0f} s, OPE (FQE, WPDIS, TD error at every checkpoint) {ope:.0f} s "
          f"({ope / train:.1f}x training), environment rollouts for the truth {truth:.0f} s; wall {wall:.0f} s")


# -------------------------------------------------------------- overhead
def _free_score(algo: Any, dataset: Any) -> float:
    return 0.0


def run_overhead(args: argparse.Namespace) -> None:
    import offrl
    from offrl.logging import NoopAdapterFactory
    from offrl.model_selection import OfflineSearch

    dataset, _ = offrl.datasets.get_dataset("cartpole-replay")
    steps = 400 if args.quick else args.overhead_steps
    per_epoch = steps // 4
    alphas, seeds = [0.3, 1.0, 4.0], [0, 1]
    rounds = 1 if args.quick else args.rounds

    def search(sqlite: bool) -> Tuple[float, float, Any]:
        directory = tempfile.mkdtemp(prefix="offrl-overhead-")
        try:
            storage = f"sqlite:///{directory}/study.db" if sqlite else None
            s = OfflineSearch(_config("discrete_cql"), {"alpha": alphas}, scorer=_free_score, seeds=seeds,
                              n_steps=steps, n_steps_per_epoch=per_epoch, storage=storage, show_progress=False)
            wall, cpu = time.perf_counter(), time.process_time()
            s.fit(dataset)
            return time.perf_counter() - wall, time.process_time() - cpu, s.train_dataset_
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    search(True)  # warm-up of both paths (imports, the SQLite engine)
    train = search(False)[2]  # the same training episodes for the plain loop

    def plain() -> Tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        for seed in seeds:
            for alpha in alphas:
                offrl.seed(seed)
                algo = dataclasses.replace(_config("discrete_cql"), alpha=alpha).create(device="cpu")
                algo.fit(train, n_steps=steps, n_steps_per_epoch=per_epoch, logger_adapter=NoopAdapterFactory(),
                         show_progress=False)
        return time.perf_counter() - wall, time.process_time() - cpu

    _harness.print_load("overhead start")
    times: Dict[str, List[Tuple[float, float]]] = {"plain loop": [], "search, in memory": [], "search, SQLite": []}
    for _ in range(rounds):
        times["plain loop"].append(plain())
        times["search, in memory"].append(search(False)[:2])
        times["search, SQLite"].append(search(True)[:2])
    _harness.print_load("overhead end")
    rows = []
    for name, values in times.items():
        wall = [v[0] / p[0] for v, p in zip(values, times["plain loop"])]
        cpu = [v[1] / p[1] for v, p in zip(values, times["plain loop"])]
        rows.append([name, f"{statistics.median(v[0] for v in values):.1f}", f"{statistics.median(v[1] for v in values):.1f}",
                     f"{statistics.median(wall):.3f}", f"{statistics.median(cpu):.3f}",
                     " ".join(f"{r:.3f}" for r in cpu)])
    _harness.print_table(["variant", "wall s", "CPU s", "wall ratio", "CPU ratio", "per-round CPU ratios"], rows,
                         title=f"search machinery against a plain loop ({len(alphas) * len(seeds)} trials x "
                               f"{steps} steps, 4 checkpoints, a scorer that costs nothing; medians of {rounds} "
                               "interleaved rounds; CPU: this process's CPU time, steadier than wall time on a "
                               "loaded machine)")


# --------------------------------------------------------------- workers
def _cli(out: str, storage: str, steps: int, data: str, space: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "offrl.cli", "search", data, "discrete_cql", "--space", space,
               "--scorer", "neg_td_error", "--seeds", "3", "--steps", str(steps), "--steps-per-epoch", str(steps // 2),
               "--storage", storage, "--output-dir", out, "--no-progress"]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)


def run_workers(args: argparse.Namespace) -> None:
    import optuna
    from optuna.trial import TrialState

    steps = 200 if args.quick else 1000
    directory = tempfile.mkdtemp(prefix="offrl-workers-")
    try:
        space = os.path.join(directory, "space.json")
        with open(space, "w") as f:
            json.dump({"alpha": [0.3, 1.0, 2.0, 4.0]}, f)
        rows = []
        _harness.print_load("workers start")
        for n in (1, 2):
            storage = f"sqlite:///{directory}/study{n}.db"
            start = time.perf_counter()
            procs = [_cli(os.path.join(directory, f"out{n}-{k}"), storage, steps, "cartpole-replay", space)
                     for k in range(n)]
            outputs = [p.communicate()[0] for p in procs]
            wall = time.perf_counter() - start
            for p, output in zip(procs, outputs):
                if p.returncode != 0:
                    raise RuntimeError(f"offrl search failed:\n{output[-3000:]}")
            study = optuna.load_study(study_name="offrl_search", storage=storage)
            trials = study.get_trials()
            complete = [json.dumps(t.params, sort_keys=True) for t in trials if t.state == TrialState.COMPLETE]
            unused = sum("offrl_unused" in t.user_attrs for t in trials)
            failed = sum(t.state == TrialState.FAIL and "offrl_unused" not in t.user_attrs for t in trials)
            once = len(complete) == len(set(complete)) == 12
            rows.append([f"{n} process{'es' if n > 1 else ''}", str(len(complete)), str(len(set(complete))),
                         str(failed), str(unused), _harness.ok(once), f"{wall:.0f}", f"{60 * len(complete) / wall:.2f}"])
        _harness.print_load("workers end")
        _harness.print_table(["workers", "complete", "distinct", "failed", "unused", "each once", "wall s",
                              "trials/min"], rows,
                             title=f"one SQLite study, 12-trial grid (4 alphas x 3 seeds, {steps} steps), "
                                   "offrl search processes started together (imports included)")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    _harness.add_common_args(parser, only=PARTS, d3rlpy=False)
    parser.add_argument("--datasets", default=",".join(DATASETS), help="regret: comma-separated datasets")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="overhead: interleaved rounds")
    parser.add_argument("--overhead-steps", type=int, default=2000,
                        help="overhead: updates per trial (the search's fixed costs weigh less on longer trials)")
    parser.add_argument("--steps", type=int, default=6000, help="regret: updates per trial")
    parser.add_argument("--checkpoints", type=int, default=3, help="regret: checkpoints per trial")
    parser.add_argument("--fqe-steps", type=int, default=10000, help="regret: FQE updates per checkpoint (cap)")
    parser.add_argument("--fqe-config", choices=["small", "default"], default="default",
                        help="regret: FQE's config: default (the search's own default, recommended() with 3 x 256) "
                             "or small (the same with 3 x 64)")
    parser.add_argument("--fqe-members", type=int, default=3,
                        help="regret: FQE's independent members (n_critics with independent_critics=True; "
                             "default 3, the search's default; 1: one FQE, the earlier measurement)")
    parser.add_argument("--first-repetition", type=int, default=0, help="regret: the first repetition to run")
    parser.add_argument("--eval-episodes", type=int, default=20, help="regret: episodes per true return")
    parser.add_argument("--truth-episodes", type=int, default=200,
                        help="truth: episodes per re-measured true return (the saved candidates trained again)")
    parser.add_argument("--truth-from", default=None,
                        help="truth: take the re-measured truths from this other results folder where its "
                             "candidates are the same policies (same config, seed, checkpoint and saved return)")
    parser.add_argument("--out", default=None, help=f"regret results (default: {DEFAULT_OUT}/fqe-CONFIG-STEPS)")
    parser.add_argument("--report", action="store_true", help="print the regret tables from saved results only")
    args = parser.parse_args()
    _harness.check_threads(args, parser)
    _harness.set_threads(args.threads)
    args.datasets = _harness.parse_only(args.datasets, list(DATASETS), parser)
    parts = _harness.parse_only(args.only, PARTS, parser)
    if args.quick:
        args.repetitions, args.steps, args.checkpoints, args.fqe_steps, args.eval_episodes = 1, 400, 2, 100, 3
    if args.out is None:
        members = f"-m{args.fqe_members}" if args.fqe_members > 1 else ""
        truth = f"-truth{args.eval_episodes}" if args.eval_episodes != 20 else ""
        args.out = os.path.join(DEFAULT_OUT, f"fqe-{args.fqe_config}-{args.fqe_steps}{members}{truth}")
    if args.report:
        report_regret(args)
        return 0
    _harness.print_load("start")
    if "regret" in parts:
        run_regret(args)
    if "truth" in parts:
        run_truth(args)
    if "regret" in parts or "truth" in parts:
        report_regret(args)
    if "overhead" in parts:
        run_overhead(args)
    if "workers" in parts:
        run_workers(args)
    _harness.print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
