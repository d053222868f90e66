#!/usr/bin/env python
"""``predict`` latency on one observation, offrl beside d3rlpy 2.8.1.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/predict_latency.py           # about 20 s
    python benchmarks/predict_latency.py --quick   # a smoke run
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/predict_latency.py

Cases: DQN (4-dim observations, 2 actions) and SAC (17-dim observations, 6
actions) at their default configs on the CPU, ``predict`` on one float32
observation of shape ``(1, D)``, plus ``predict_value`` and
``sample_action`` for scale. Torch runs one intra-op thread in both
libraries (``--threads N`` to change). Target (issue 15 item 7): offrl's
``predict`` <= 60 us per call on one observation, input validation (shape,
dtype kind, one vectorised finiteness check) included. d3rlpy runs the same
script in its own interpreter (``--d3rlpy-python`` or ``$D3RLPY_PYTHON``) and
never imports offrl. Per-call figures are medians of rounds; the machine's
load average is printed at the start and the end because a shared machine
moves them.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional

import numpy as np

from _harness import (FULL, QUICK, add_common_args, check_threads, d3rlpy_interpreter, fmt, ok, parse_only,
                      print_load, print_table, quiet_d3rlpy, run_json, set_threads, time_per_call, worker_main)

CASES = {"DQN": ((4,), 2), "SAC": ((17,), 6)}
CALLS = ("predict", "predict_value", "sample_action")
TARGET_US = 60.0


def build(backend: str, name: str) -> Any:
    """A default-config algorithm of ``backend`` built for ``CASES[name]``."""
    shape, size = CASES[name]
    if backend == "d3rlpy":
        import d3rlpy

        quiet_d3rlpy()
        config = d3rlpy.algos.DQNConfig() if name == "DQN" else d3rlpy.algos.SACConfig()
        algo = config.create(device="cpu:0")
    else:
        import offrl

        config = offrl.algos.DQNConfig() if name == "DQN" else offrl.algos.SACConfig()
        algo = config.create(device="cpu")
    algo.create_impl(shape, size)
    return algo


def measure(backend: str, names: List[str], quick: bool, threads: Optional[int]) -> Dict[str, Dict[str, float]]:
    """Microseconds per call, by case and call."""
    set_threads(threads)
    settings = QUICK if quick else FULL
    out: Dict[str, Dict[str, float]] = {}
    for name in names:
        shape, size = CASES[name]
        algo = build(backend, name)
        x = np.random.default_rng(0).standard_normal((1,) + shape).astype(np.float32)
        action = np.zeros(1, dtype=np.int64) if name == "DQN" else np.zeros((1, size), dtype=np.float32)
        fns = {"predict": lambda: algo.predict(x), "predict_value": lambda: algo.predict_value(x, action),
               "sample_action": lambda: algo.sample_action(x)}
        out[name] = {}
        for call in CALLS:
            timing = time_per_call(fns[call], settings.call_round_s, settings.call_rounds * 2, warmup=50)
            out[name][call] = timing["ms"] * 1e3
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=list(CASES))
    parser.add_argument("--backend", choices=("offrl", "d3rlpy"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    names = parse_only(args.only, list(CASES), parser)
    if args.backend is not None:  # a worker: print one JSON answer
        return worker_main(lambda: measure(args.backend, names, args.quick, args.threads))

    print_load("start")
    mine = measure("offrl", names, args.quick, args.threads)
    python, note = d3rlpy_interpreter(args)
    theirs: Optional[dict] = None
    if python is not None:
        worker_argv = ["--backend", "d3rlpy", "--threads", str(args.threads), "--only", ",".join(names)]
        if args.quick:
            worker_argv.append("--quick")
        theirs, note = run_json(python, __file__, worker_argv, timeout=600)
        if theirs is None:
            print(f"d3rlpy side failed: {note}", file=sys.stderr)
    rows = []
    for name in names:
        for call in CALLS:
            o = mine[name][call]
            d = theirs[name][call] if theirs else None
            target = ok(o <= TARGET_US) if call == "predict" else "-"
            rows.append((name, call, fmt(o), fmt(d), fmt(d / o if d else None, "{:.1f}x"), target))
    print_table(["algo", "call (1 observation)", "offrl us", "d3rlpy us", "d3rlpy/offrl", f"<= {TARGET_US:g} us"],
                rows, title=f"threads={args.threads}; d3rlpy: {note}", left=2)
    print_load("end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
