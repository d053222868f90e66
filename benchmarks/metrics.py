#!/usr/bin/env python
"""Benchmark of offrl's metric evaluators against d3rlpy 2.x, side by side.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/metrics.py               # every evaluator (a few minutes)
    python benchmarks/metrics.py --quick       # fewer repeats
    python benchmarks/metrics.py --no-d3rlpy   # offrl only
    python benchmarks/metrics.py --only TDErrorEvaluator,InitialStateValueEstimationEvaluator
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/metrics.py --quick

Data and models are those of ``benchmarks/algos.py`` (``_data.make_data``): the seeded synthetic
20,000-step Pendulum-like dataset (3-dim observations, 1-dim actions,
200-step episodes ending in a timeout: 19,900 transitions) scored with an
IQL model at its default config, and the CartPole-like dataset (4-dim
observations, 2 discrete actions) with a DQN at its default config. Models
are built, not trained: an evaluator's cost does not depend on the weights.
Every evaluator runs with ``episodes=None`` (all of the dataset's
episodes); the compare evaluators compare with a second model of the same
kind; ``SoftOPCEvaluator`` uses the median episode return as threshold;
``EnvironmentEvaluator`` runs 10 episodes of gymnasium's ``Pendulum-v1``
(200 steps each) with the IQL model.

Each evaluator is called once on each side to warm up, then timed in
``--repeats`` interleaved rounds of one offrl call and one d3rlpy call, so
that a change in the machine's load hits both sides of a ratio; times are
medians, the ratio is the median of the per-round ratios. The d3rlpy side
is a worker process in the interpreter given by ``--d3rlpy-python`` or
``$D3RLPY_PYTHON`` (skipped with a note when neither is given): this file
run with ``--serve``, which reads evaluator names on stdin and answers with
timings. Both sides use ``--threads`` torch threads (default 1). It uses the same evaluator names and arguments and never imports
offrl. The values differ between the libraries (different random weights);
they are printed as a sanity check that each call did the work.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from _data import SEED, make_data
from _harness import Worker, add_common_args, check_threads, d3rlpy_interpreter, format_table, log, parse_only
from _harness import print_load, serve as serve_requests

#: (evaluator, dataset, d3rlpy seconds measured earlier on the 2-core development machine)
EVALUATORS: Tuple[Tuple[str, str, Optional[float]], ...] = (
    ("TDErrorEvaluator", "pendulum", 0.94),
    ("DiscountedSumOfAdvantageEvaluator", "pendulum", None),
    ("AverageValueEstimationEvaluator", "pendulum", 0.56),
    ("InitialStateValueEstimationEvaluator", "pendulum", 0.40),
    ("SoftOPCEvaluator", "pendulum", None),
    ("ContinuousActionDiffEvaluator", "pendulum", None),
    ("CompareContinuousActionDiffEvaluator", "pendulum", None),
    ("TDErrorEvaluator", "cartpole", None),
    ("DiscreteActionMatchEvaluator", "cartpole", None),
    ("CompareDiscreteActionMatchEvaluator", "cartpole", None),
    ("EnvironmentEvaluator", "pendulum", None),
)
MODELS = {"pendulum": "IQLConfig", "cartpole": "DQNConfig"}
#: forward passes over all transitions an evaluator needs: (Q(s, a) passes, policy passes)
PASSES = {
    "TDErrorEvaluator": (2, 1),
    "DiscountedSumOfAdvantageEvaluator": (2, 1),
    "AverageValueEstimationEvaluator": (1, 1),
    "SoftOPCEvaluator": (1, 0),
    "ContinuousActionDiffEvaluator": (0, 1),
    "CompareContinuousActionDiffEvaluator": (0, 2),
    "DiscreteActionMatchEvaluator": (0, 1),
    "CompareDiscreteActionMatchEvaluator": (0, 2),
}
TARGET_RATIO = 10.0  # d3rlpy seconds / offrl seconds


def _key(name: str, data: str) -> str:
    return f"{name} [{data}]"


def _dataset(lib: Any, backend: str, data: Dict[str, np.ndarray]) -> Any:
    kwargs = {"action_size": 2} if data["actions"].ndim == 1 else {}
    if backend == "d3rlpy" and kwargs:
        kwargs["action_space"] = lib.ActionSpace.DISCRETE
    return lib.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                            timeouts=data["timeouts"], **kwargs)


def _median_return(data: Dict[str, np.ndarray]) -> float:
    ends = np.flatnonzero((data["terminals"] > 0) | (data["timeouts"] > 0)) + 1
    return float(np.median(np.add.reduceat(data["rewards"].astype(np.float64), np.r_[0, ends[:-1]])))


Entry = Tuple[Any, Any, Any]  # (evaluator, algo, dataset)


def build(backend: str, threads: Optional[int]) -> Tuple[Dict[str, Entry], dict, Dict[str, dict]]:
    """Every evaluator of EVALUATORS with its model and dataset, by key; the
    library's info; the models and data by dataset kind."""
    import gymnasium
    import torch

    if threads:
        torch.set_num_threads(threads)
    if backend == "offrl":
        import offrl as lib
    else:  # the worker's stderr (d3rlpy's logs) goes to /dev/null
        import d3rlpy as lib
    lib.seed(SEED)
    info: dict = {"backend": backend, "version": lib.__version__, "torch": torch.__version__,
                  "threads": torch.get_num_threads()}
    contexts: Dict[str, dict] = {}
    for kind, config in MODELS.items():
        data = make_data(kind)
        dataset = _dataset(lib, backend, data)
        algo, base = (getattr(lib.algos, config)().create(device="cpu:0") for _ in range(2))
        algo.build_with_dataset(dataset)
        base.build_with_dataset(dataset)
        contexts[kind] = {"dataset": dataset, "algo": algo, "base": base, "threshold": _median_return(data),
                          "data": data}
        info[f"{kind}_transitions"] = int(dataset.transition_count)
    env = gymnasium.make("Pendulum-v1")
    env.reset(seed=SEED)
    entries: Dict[str, Entry] = {}
    for name, kind, _ in EVALUATORS:
        ctx = contexts[kind]
        cls = getattr(lib.metrics, name)
        if name.startswith("Compare"):
            evaluator = cls(ctx["base"])
        elif name == "SoftOPCEvaluator":
            evaluator = cls(ctx["threshold"])
        elif name == "EnvironmentEvaluator":
            evaluator = cls(env, n_trials=10)
        else:
            evaluator = cls()
        entries[_key(name, kind)] = (evaluator, ctx["algo"], ctx["dataset"])
    return entries, info, contexts


def floor_calls(contexts: Dict[str, dict]) -> Dict[str, Callable[[], None]]:
    """Per evaluator key in PASSES: its unavoidable compute, as bare public
    ``predict_value(s, a)`` / ``predict(s)`` calls on contiguous slices of
    as many rows as the dataset has transitions, chunked like the evaluators."""
    from offrl.metrics import transitions

    calls: Dict[str, Callable[[], None]] = {}
    for name, kind, _ in EVALUATORS:
        if name not in PASSES:
            continue
        ctx = contexts[kind]
        q_passes, pi_passes = PASSES[name]
        n = int(ctx["dataset"].transition_count)
        algo, obs, actions = ctx["algo"], ctx["data"]["observations"][:n], ctx["data"]["actions"][:n]

        def run(algo=algo, obs=obs, actions=actions, q_passes=q_passes, pi_passes=pi_passes) -> None:
            chunk = transitions.CHUNK_ROWS
            for lo in range(0, obs.shape[0], chunk):
                for _ in range(q_passes):
                    algo.predict_value(obs[lo:lo + chunk], actions[lo:lo + chunk])
                for _ in range(pi_passes):
                    algo.predict(obs[lo:lo + chunk])

        calls[_key(name, kind)] = run
    return calls


def call_once(entry: Entry) -> dict:
    """One timed call (garbage collector paused), or the error it raised."""
    evaluator, algo, dataset = entry
    gc.collect()
    gc.disable()
    try:
        t0 = time.perf_counter()
        value = evaluator(algo, dataset) if dataset is not None else evaluator()
        return {"s": time.perf_counter() - t0, "value": float(value or 0.0)}
    except Exception as e:  # one failing evaluator does not stop the others
        return {"error": f"{type(e).__name__}: {e}"}
    finally:
        gc.enable()


def serve(threads: Optional[int]) -> int:
    """The d3rlpy side: build, then time one call per evaluator key read from stdin."""
    with contextlib.redirect_stdout(sys.stderr):  # library chatter stays off the protocol
        entries, info, _ = build("d3rlpy", threads)

    def handle(key: str) -> dict:
        return call_once(entries[key]) if key in entries else {"error": f"unknown evaluator {key!r}"}

    return serve_requests(info, handle)


def start_worker(args: argparse.Namespace) -> Tuple[Optional[Worker], str]:
    python, note = d3rlpy_interpreter(args)
    if python is None:
        return None, note
    try:
        return Worker(python, __file__, ["--serve", "--threads", str(args.threads)]), note
    except (OSError, RuntimeError) as e:
        return None, f"failed to start {python}: {e}"


def measure(entries: Dict[str, Entry], floors: Dict[str, Callable[[], None]], worker: Optional[Worker],
            repeats: int) -> Dict[str, dict]:
    """Per evaluator: a warm-up call on each side, then ``repeats`` rounds of
    one offrl call, its forward-pass floor and one d3rlpy call (interleaved,
    so that a change in the machine's load hits all of them); medians, and
    ratios as medians of per-round ratios."""
    out: Dict[str, dict] = {}
    for key, entry in entries.items():
        log(f"[offrl{' + d3rlpy' if worker else ''}] {key}")
        runs = max(1, repeats // 2) if key.startswith("EnvironmentEvaluator") else repeats
        sides: Dict[str, List[dict]] = {"offrl": [], "floor": [], "d3rlpy": []}
        for round_ in range(runs + 1):  # round 0 warms up
            calls = {"offrl": lambda: call_once(entry)}
            if key in floors:
                calls["floor"] = lambda: call_once((floors[key], None, None))
            if worker:
                calls["d3rlpy"] = lambda: worker.call(key)
            for side, call in calls.items():
                result = call()
                if round_:
                    sides[side].append(result)
        result: dict = {}
        for side, calls_ in sides.items():
            errors = [c["error"] for c in calls_ if "error" in c]
            if errors:
                result[side] = {"error": errors[0]}
            elif calls_:
                result[side] = {"s": statistics.median(c["s"] for c in calls_), "value": calls_[-1]["value"]}
        for name, (num, den) in (("ratio", ("d3rlpy", "offrl")), ("overhead", ("offrl", "floor"))):
            if "s" in result.get(num, {}) and "s" in result.get(den, {}):
                result[name] = statistics.median(a["s"] / b["s"] for a, b in zip(sides[num], sides[den]))
        out[key] = result
    return out


def report(results: Dict[str, dict], o_info: dict, d_info: Optional[dict], d_source: str,
           load: Tuple[Tuple[float, ...], Tuple[float, ...]]) -> str:
    def fmt(v: Optional[float], spec: str = "{:.4f}") -> str:
        return "-" if v is None else spec.format(v)

    rows: List[List[str]] = []
    notes: List[str] = []
    for name, kind, earlier in EVALUATORS:
        key = _key(name, kind)
        if key not in results:
            continue
        r = results[key]
        mine, theirs = r.get("offrl", {}), r.get("d3rlpy", {})
        for side, res in (("offrl", mine), ("d3rlpy", theirs)):
            if "error" in res:
                notes.append(f"{key} {side}: {res['error']}")
        ratio, o_s = r.get("ratio"), mine.get("s")
        is_env = name == "EnvironmentEvaluator"
        status = "-" if ratio is None else ("(rollouts)" if is_env else ("ok" if ratio >= TARGET_RATIO else "MISS"))
        rows.append([
            key, fmt(o_s), fmt(r.get("floor", {}).get("s")), fmt(r.get("overhead"), "{:.2f}"), fmt(theirs.get("s")),
            fmt(earlier, "{:.2f}"), fmt(ratio, "{:.1f}x"),
            fmt(earlier / o_s if earlier and o_s else None, "{:.1f}x"),
            fmt(mine.get("value"), "{:.4g}"), fmt(theirs.get("value"), "{:.4g}"), status,
        ])
    lines = [
        f"offrl {o_info['version']} (torch {o_info['torch']}, {o_info['threads']} threads) vs d3rlpy: {d_source}"
        + ("" if d_info is None else f" {d_info['version']} (torch {d_info['torch']}, {d_info['threads']} threads)"),
        f"transitions: pendulum {o_info['pendulum_transitions']}, cartpole {o_info['cartpole_transitions']}; "
        f"load average {load[0][0]:.2f} at start, {load[1][0]:.2f} at end",
        "",
    ]
    lines += format_table(["evaluator [data]", "offrl s", "floor s", "offrl/floor", "d3rlpy s", "d3rlpy earlier s", "d3rlpy/offrl",
                     "earlier/offrl", "offrl value", "d3rlpy value", f"target >= {TARGET_RATIO:g}x"], rows).splitlines()
    lines += ["", "floor s: bare predict_value / predict calls on as many contiguous rows as the metric has "
              "transitions, as many passes as it needs (PASSES): the compute no evaluator can avoid."]
    return "\n".join(lines + notes)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = list(dict.fromkeys(name for name, _, _ in EVALUATORS))
    add_common_args(parser, only=names, quick_help="3 timed rounds per evaluator instead of 7")
    parser.add_argument("--repeats", type=int, default=None, help="timed rounds per evaluator")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the d3rlpy worker
    args = parser.parse_args(argv)
    check_threads(args, parser)
    if args.repeats is None:
        args.repeats = 3 if args.quick else 7
    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.serve:
        return serve(args.threads)
    wanted = set(parse_only(args.only, names, parser))

    load_start = print_load("start")
    entries, o_info, contexts = build("offrl", args.threads)
    entries = {k: v for k, v in entries.items() if k.split(" [")[0] in wanted}
    worker, d_source = start_worker(args)
    try:
        results = measure(entries, floor_calls(contexts), worker, args.repeats)
    finally:
        if worker is not None:
            worker.close()
    load_end = print_load("end")
    print(report(results, o_info, None if worker is None else worker.info, d_source, (load_start, load_end)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
