#!/usr/bin/env python
"""Exported policy latency: ONNX (onnxruntime, one thread) and TorchScript
beside offrl's own ``predict``, on one observation and on 256.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/export.py            # about 30 s
    python benchmarks/export.py --quick    # a smoke run
    python benchmarks/export.py --only DQN

Cases: SAC (17-dim observations, 6 actions, standard observation scaler and
min-max action scaler) and DQN (4-dim observations, 2 actions, standard
observation scaler) at their default configs, built (not trained: latency
does not depend on the weights) and exported with ``save_policy``. Figures
are microseconds per call, medians of rounds (``_harness.time_per_call``);
torch runs ``--threads`` intra-op threads (default 1), onnxruntime one.

Targets (from the export issue): ONNX answers one observation in <= 50 us;
TorchScript within 2x of that. d3rlpy is not run here: measured earlier on
the 2-core machine, its ``predict`` took 271 us (one observation) and
1.19 ms (256), and its ONNX export fails on torch 2.13.

Sequence policy (issue 18): the default DecisionTransformer of
``benchmarks/transformers.py`` (``_specs.build``, context 20) exported to
ONNX and run one environment step at a time by
``export/run_sequence_policy.py``'s ``SequencePolicy`` (numpy +
onnxruntime, one thread), beside offrl's ``StatefulTransformerWrapper``,
both with a full context of 20 steps (``--only DecisionTransformer``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from _harness import (FULL, QUICK, add_common_args, check_threads, fmt, gc_paused, ok, parse_only, print_load,
                      print_table, set_threads, time_per_call)

CASES = {"SAC": ((17,), 6), "DQN": ((4,), 2)}
SEQUENCE_CASES = ("DecisionTransformer",)
BATCHES = (1, 256)
ONNX_TARGET_US = 50.0


def build(name: str) -> Any:
    """A default-config algorithm with scalers, built for ``CASES[name]``."""
    from offrl import algos
    from offrl.preprocessing import MinMaxActionScaler, StandardObservationScaler

    (dim,), size = CASES[name]
    observation_scaler = StandardObservationScaler(mean=np.zeros(dim), std=np.ones(dim))
    if name == "SAC":
        config = algos.SACConfig(observation_scaler=observation_scaler,
                                 action_scaler=MinMaxActionScaler(minimum=-np.ones(size), maximum=np.ones(size)))
    else:
        config = algos.DQNConfig(observation_scaler=observation_scaler)
    algo = config.create(device="cpu")
    algo.create_impl((dim,), size)
    return algo


def measure(names: List[str], quick: bool, directory: str) -> List[Tuple[str, int, float, float, float]]:
    """(case, batch, ONNX us, TorchScript us, predict us) per case and batch."""
    from offrl.export import load_onnx_policy, load_torchscript_policy

    settings = QUICK if quick else FULL
    rows = []
    for name in names:
        algo = build(name)
        onnx_path, script_path = os.path.join(directory, f"{name}.onnx"), os.path.join(directory, f"{name}.pt")
        algo.save_policy(onnx_path)
        algo.save_policy(script_path)
        onnx_policy, script_policy = load_onnx_policy(onnx_path, threads=1), load_torchscript_policy(script_path)
        for batch in BATCHES:
            x = np.random.default_rng(0).standard_normal((batch,) + CASES[name][0]).astype(np.float32)
            us = [time_per_call(lambda f=f: f(x), settings.call_round_s, settings.call_rounds * 2, warmup=50)["ms"] * 1e3
                  for f in (onnx_policy, script_policy, algo.predict)]
            rows.append((name, batch, us[0], us[1], us[2]))
    return rows


def _sequence_runner_class() -> Any:
    """``SequencePolicy`` from ``export/run_sequence_policy.py`` (loaded by
    path: the ``export`` folder is not a package, and ``offrl.export`` is
    another thing)."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "export", "run_sequence_policy.py")
    spec = importlib.util.spec_from_file_location("run_sequence_policy", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.SequencePolicy


def measure_sequence(name: str, quick: bool, directory: str) -> Tuple[float, float, float, float, float]:
    """Per environment step with a full context, for the default ``name``:
    (ONNX runner us, offrl wrapper us) wall-clock, the same in process CPU
    time (one thread each: less sensitive to other jobs), and the largest
    action difference between the two over the first steps."""
    from _specs import CONTEXT_SIZE, build as build_sequence, make_arrays

    settings = QUICK if quick else FULL
    algo, _ = build_sequence("offrl", name)
    path = os.path.join(directory, f"{name}.onnx")
    algo.save_policy(path)
    runner = _sequence_runner_class()(path, target_return=10.0, threads=1)
    wrapper = algo.as_stateful_wrapper(target_return=10.0)
    observations = make_arrays(False)["observations"][:500]
    worst = 0.0
    for t in range(CONTEXT_SIZE + 5):  # the two agree step by step on a full context
        a, b = runner.act(observations[t], 0.1), wrapper.predict(observations[t], 0.1)
        worst = max(worst, float(np.abs(np.asarray(a) - np.asarray(b)).max()))
    steps = {"runner": (runner, runner.act), "wrapper": (wrapper, wrapper.predict)}
    position = {"runner": CONTEXT_SIZE + 5, "wrapper": CONTEXT_SIZE + 5}
    wall: Dict[str, List[float]] = {"runner": [], "wrapper": []}
    cpu: Dict[str, List[float]] = {"runner": [], "wrapper": []}
    calls = 20 if quick else 100
    for r in range(settings.call_rounds * 2):  # interleaved rounds, the first of each pair alternating
        for key in (("runner", "wrapper") if r % 2 == 0 else ("wrapper", "runner")):
            actor, act = steps[key]
            with gc_paused():
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(calls):
                    t = position[key]
                    if t == len(observations):
                        actor.reset()
                        t = 0
                    act(observations[t], 0.1)
                    position[key] = t + 1
                wall[key].append((time.perf_counter() - t0) / calls * 1e6)
                cpu[key].append((time.process_time() - c0) / calls * 1e6)
    med = statistics.median
    return med(wall["runner"]), med(wall["wrapper"]), med(cpu["runner"]), med(cpu["wrapper"]), worst


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=list(CASES) + list(SEQUENCE_CASES), d3rlpy=False)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    names = parse_only(args.only, list(CASES) + list(SEQUENCE_CASES), parser) or list(CASES) + list(SEQUENCE_CASES)
    sequence_names = [n for n in names if n in SEQUENCE_CASES]
    names = [n for n in names if n in CASES]
    print_load("start")
    threads = set_threads(args.threads)
    with tempfile.TemporaryDirectory() as directory:
        rows = measure(names, args.quick, directory)
        sequence_rows = [(n,) + measure_sequence(n, args.quick, directory) for n in sequence_names]
    table = []
    for name, batch, onnx_us, script_us, predict_us in rows:
        onnx_ok = ok(onnx_us <= ONNX_TARGET_US) if batch == 1 else "-"
        script_ok = ok(script_us <= 2 * max(onnx_us, ONNX_TARGET_US)) if batch == 1 else "-"
        table.append((name, batch, fmt(onnx_us), fmt(script_us), fmt(predict_us), onnx_ok, script_ok))
    if table:
        print_table(["algo", "batch", "ONNX us", "TorchScript us", "offrl predict us", f"ONNX <= {ONNX_TARGET_US:g} us",
                     "TorchScript <= 2x ONNX"], table,
                    title=f"onnxruntime: 1 intra-op thread; torch: {threads} thread(s)")
    if sequence_rows:
        print_table(["algo", "ONNX runner us/step", "offrl wrapper us/step", "CPU: runner", "CPU: wrapper",
                     "max |action difference|"],
                    [(n, fmt(o), fmt(w), fmt(oc), fmt(wc), f"{d:.1e}") for n, o, w, oc, wc, d in sequence_rows],
                    title="sequence policy, one environment step with a full context of 20 "
                          "(export/run_sequence_policy.py vs StatefulTransformerWrapper)")
    print_load("end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
