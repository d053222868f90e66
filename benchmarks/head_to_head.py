#!/usr/bin/env python
"""Updates per second and ``predict`` latency, offrl against d3rlpy 2.8.1
in truly interleaved rounds.

Run from the repository root:

    python benchmarks/head_to_head.py --only CQL,CalQL --d3rlpy-python /path/to/venv/bin/python
    python benchmarks/head_to_head.py --only BCQ --rounds 9 --round-s 2 --predict
    python benchmarks/head_to_head.py --only SAC,DDPG --precision bf16-mixed   # offrl in bf16-mixed

``benchmarks/algos.py`` measures offrl first and d3rlpy afterwards in one
worker run, so a change of machine load between the two moves the ratio.
Here each library lives in its own long-lived worker process (offrl in this
interpreter, d3rlpy in ``--d3rlpy-python``), both built at the documented
defaults on the same synthetic data as ``benchmarks/algos.py`` (its
``SPECS``), and the parent alternates short rounds between them (offrl,
d3rlpy, offrl, ...; the first library of each pair alternates too). The
ratio is the median of the per-round ratios; the per-round figures and the
load average are printed so the noise can be judged, and the process CPU
time per call beside the wall-clock figures (one torch thread: a job that
takes the core away stretches wall time, not CPU time). Each round runs
``dataset.sample_transition_batch(batch_size)`` + ``algo.update(batch)``
(the public API, sampling included) for ``--round-s`` seconds; with
``--predict`` it also times ``predict`` on one observation the same way.
``--precision bf16-mixed`` builds offrl's algorithms with that precision
(issue 32; the precision in effect is printed: float32 where it is the
faster, see ``offrl.training.precision``); the sequence models stay float32.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any, Dict, List, Optional

import numpy as np

from _harness import (Worker, add_common_args, check_threads, d3rlpy_interpreter, gc_paused, load_average, parse_only, print_load, serve, set_threads)


#: the Decision Transformer family, built as in ``benchmarks/transformers.py``
SEQUENCE = ("DecisionTransformer", "DiscreteDecisionTransformer", "TACR")


def _names() -> List[str]:
    from _specs import ALGOS

    return [s.name for s in ALGOS] + list(SEQUENCE)


def _build_sequence(backend: str, name: str) -> Dict[str, Any]:
    from _specs import CONTEXT_SIZE, build as build_sequence

    algo, dataset = build_sequence(backend, name)
    batch_size = int(algo.config.batch_size)
    return {"step": lambda: algo.update(dataset.sample_trajectory_batch(batch_size, CONTEXT_SIZE)),
            "predict": None}


def build(backend: str, name: str, precision: str = "float32") -> Dict[str, Any]:
    """The algorithm of ``backend`` at its default config, built on the
    same synthetic dataset as ``benchmarks/algos.py``, with its step and
    predict functions."""
    if backend in ("offrl-mkl", "offrl-onednn"):  # offrl with EnsembleLinear / Linear on one product path
        from offrl.models.layers import onednn_linear_enabled

        onednn_linear_enabled(backend == "offrl-onednn")
        backend = "offrl"
    if name in SEQUENCE:
        return _build_sequence(backend, name)
    import _specs as algos
    from _data import SEED, make_data

    spec = algos.SPECS[name]
    data = make_data(spec.data)
    if backend == "d3rlpy":
        import d3rlpy

        from _harness import quiet_d3rlpy

        quiet_d3rlpy()
        d3rlpy.seed(SEED)
        dataset = d3rlpy.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                            timeouts=data["timeouts"])
        algo = getattr(d3rlpy.algos, spec.config)().create(device="cpu:0")
        algo.build_with_dataset(dataset)
        algos.prepare_d3rlpy(name, algo, data)
        batch_size = algo.config.batch_size
    else:
        import warnings

        import offrl
        from offrl.dataset import MDPDataset

        offrl.seed(SEED)
        dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                             data["timeouts"])
        config_class, why = algos.offrl_config_class(spec)
        if config_class is None:
            raise RuntimeError(why)
        algo = config_class(**({} if precision == "float32" else {"precision": precision})).create(device="cpu")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            algo.build_with_dataset(dataset)
            in_effect = algo.precision
        algos.prepare_offrl(name, algo, dataset)
        batch_size = algo.batch_size
        return {"step": lambda: algo.update(dataset.sample_transition_batch(batch_size)),
                "predict": lambda: algo.predict(np.ascontiguousarray(data["observations"][:1])), "precision": in_effect}
    x1 = np.ascontiguousarray(data["observations"][:1])
    return {
        "step": lambda: algo.update(dataset.sample_transition_batch(batch_size)),
        "predict": lambda: algo.predict(x1),
    }


def _timed(fn: Any, seconds: float, min_calls: int) -> Dict[str, float]:
    """Call ``fn`` for about ``seconds`` (at least ``min_calls`` times)."""
    with gc_paused():
        calls, start, cpu_start = 0, time.perf_counter(), time.process_time()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if calls >= min_calls and elapsed >= seconds:
                return {"calls": calls, "s": elapsed, "cpu_s": time.process_time() - cpu_start}


def worker(backend: str, threads: int, precision: str = "float32") -> int:
    set_threads(threads)
    built: Dict[str, Dict[str, Any]] = {}

    def handle(request: Dict[str, Any]) -> Dict[str, Any]:
        name = request["name"]
        if name not in built:
            built[name] = build(backend, name, precision) if backend != "d3rlpy" else build(backend, name)
            for _ in range(int(request.get("warmup", 10))):
                built[name]["step"]()
            if built[name]["predict"] is not None:
                built[name]["predict"]()
        what = request["what"]
        if built[name][what] is None:
            return {"calls": 1, "s": float("nan"), "cpu_s": float("nan")}
        return {**_timed(built[name][what], float(request["seconds"]), 2 if what == "step" else 20),
                "precision": built[name].get("precision", "float32")}

    return serve({"backend": backend}, handle)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=_names())
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per library (default 7)")
    parser.add_argument("--round-s", type=float, default=1.5, help="seconds per round (default 1.5)")
    parser.add_argument("--predict", action="store_true", help="also time predict on one observation")
    parser.add_argument("--against-mkl", action="store_true",
                        help="compare offrl on oneDNN products (forced on, whatever this CPU's default) with "
                             "offrl on torch's own (MKL) products instead of d3rlpy (the 'd3rlpy' columns then "
                             "show offrl-mkl)")
    parser.add_argument("--precision", choices=("float32", "bf16-mixed"), default="float32",
                        help="offrl's precision (default float32, d3rlpy's only one)")
    parser.add_argument("--worker", choices=("offrl", "d3rlpy", "offrl-mkl", "offrl-onednn"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    threads = args.threads or 1
    if args.worker:
        return worker(args.worker, threads, args.precision)
    names = parse_only(args.only, _names(), parser) or _names()
    python, note = (sys.executable, "") if args.against_mkl else d3rlpy_interpreter(args)
    if python is None:
        print(f"d3rlpy skipped: {note}")
        return 1
    print_load("at start")
    workers = {
        "offrl": Worker(sys.executable, __file__, ["--worker", "offrl-onednn" if args.against_mkl else "offrl",
                                                   "--threads", str(threads), "--precision",
                                                   args.precision], name="offrl"),
        "d3rlpy": Worker(python, __file__, ["--worker", "offrl-mkl" if args.against_mkl else "d3rlpy", "--threads",
                                            str(threads)], name="d3rlpy"),
    }
    if args.against_mkl:
        print("offrl columns: onednn_linear_enabled(True); baseline: onednn_linear_enabled(False), shown in the "
              "d3rlpy columns")
    try:
        whats = ["step"] + (["predict"] if args.predict else [])
        for name in names:
            for what in whats if name not in SEQUENCE else ["step"]:
                seconds = args.round_s if what == "step" else min(args.round_s, 0.5)
                per: Dict[str, List[float]] = {"offrl": [], "d3rlpy": []}  # seconds per call
                in_effect = "float32"
                cpu: Dict[str, List[float]] = {"offrl": [], "d3rlpy": []}  # process CPU seconds per call
                for r in range(args.rounds):
                    order = ("offrl", "d3rlpy") if r % 2 == 0 else ("d3rlpy", "offrl")
                    for backend in order:
                        res = workers[backend].call({"name": name, "what": what, "seconds": seconds})
                        in_effect = res.get("precision", "float32") if backend == "offrl" else in_effect
                        per[backend].append(res["s"] / res["calls"])
                        cpu[backend].append(res["cpu_s"] / res["calls"])
                ratios = [d / o for o, d in zip(per["offrl"], per["d3rlpy"])]
                cpu_ratios = [d / o for o, d in zip(cpu["offrl"], cpu["d3rlpy"])]
                if what == "step":
                    fo = [f"{1 / t:.1f}" for t in per["offrl"]]
                    fd = [f"{1 / t:.1f}" for t in per["d3rlpy"]]
                    print(f"{name} updates/s  offrl ({in_effect}) {1 / statistics.median(per['offrl']):.2f}  d3rlpy "
                          f"{1 / statistics.median(per['d3rlpy']):.2f}  offrl/d3rlpy median of per-round ratios "
                          f"{statistics.median(ratios):.2f}x (min {min(ratios):.2f}, max {max(ratios):.2f})")
                    print(f"    rounds offrl {' '.join(fo)} | d3rlpy {' '.join(fd)}")
                    print(f"    process CPU time: offrl {statistics.median(cpu['offrl']) * 1e3:.1f} ms/update, d3rlpy "
                          f"{statistics.median(cpu['d3rlpy']) * 1e3:.1f}, ratio {statistics.median(cpu_ratios):.2f}x "
                          "(less sensitive to other jobs taking the cores)")
                else:
                    print(f"{name} predict(1 obs)  offrl {statistics.median(per['offrl']) * 1e6:.1f} us  d3rlpy "
                          f"{statistics.median(per['d3rlpy']) * 1e6:.1f} us  d3rlpy/offrl {statistics.median(ratios):.2f}x"
                          f"  (CPU time: offrl {statistics.median(cpu['offrl']) * 1e6:.1f} us, d3rlpy "
                          f"{statistics.median(cpu['d3rlpy']) * 1e6:.1f} us)")
                print(f"    load average now {load_average()[0]:.2f}", flush=True)
    finally:
        for w in workers.values():
            w.close()
    print_load("at end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
