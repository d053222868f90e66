#!/usr/bin/env python
"""Benchmark of offrl's algorithms (training throughput, fit overhead,
predict latency) against the issue's targets, with d3rlpy 2.x side by side
and a bare-torch reference of the same maths.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/algos.py                  # all algorithms (a few minutes)
    python benchmarks/algos.py --quick          # short rounds, for a smoke run
    python benchmarks/algos.py --only SAC,CQL   # some algorithms
    python benchmarks/algos.py --threads 2      # torch.set_num_threads(2) in both libraries (default 1)
    python benchmarks/algos.py --no-d3rlpy      # offrl and the reference only
    python benchmarks/algos.py --profile        # + torch.profiler / cProfile of offrl's training_step
    python benchmarks/algos.py --precision bf16-mixed [--batch-size 1024]   # float32 vs bf16-mixed vs d3rlpy only
    python benchmarks/algos.py --precision bf16-mixed --device cuda:0       # the same on a GPU, both libraries
    python benchmarks/algos.py --precision bf16-mixed --device cuda:0 --hidden-units 4096,4096 --batch-size 1024 \
        [--matmul-precision high]   # larger networks; TF32 products in both (d3rlpy's own setting on a GPU machine)
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/algos.py   # with d3rlpy

Every algorithm runs at its documented default config (only ``device`` is
set, to the CPU). Datasets are synthetic and seeded, 20,000 steps:

* Pendulum-like (BC, TD3PlusBC, IQL, SAC, CQL): 3-dim float32 observations,
  1-dim float32 actions uniform in [-2, 2], episodes of 200 steps ending in
  a timeout;
* CartPole-like (DQN, DiscreteCQL): 4-dim float32 observations, 2 discrete
  actions, episodes of 10-199 steps ending in a terminal state.

Measured for offrl (in this interpreter):

1. updates per second of ``dataset.sample_transition_batch(batch_size)``
   followed by ``algo.update(batch)`` (the public API, which returns floats),
   and of the fast path ``fit`` uses (``algo.training_step(batch)``,
   losses left as tensors);
2. the fast path against ``benchmarks/_reference.py``: the same maths
   written in plain torch (``nn.Sequential`` MLPs, Adam, numpy gathers from
   preallocated arrays), with the critic ensemble as separate networks and
   as one batched-weight module; offrl is compared with the faster one;
3. ``algo.fit(..., logger_adapter=NoopAdapterFactory(), n_steps_per_epoch
   >= n_steps)`` with and without the progress bar (tqdm output is sent to
   ``os.devnull``) against a plain loop of sample + ``algo.update`` and of
   the fast path, for the same number of steps;
4. ``algo.predict`` on one observation (batch of 1);
5. updates per second with ``--threads`` (default 1) threads against torch's
   default thread count (or against 1 when ``--threads`` is not 1).

d3rlpy (``update`` after ``build_with_dataset``, sampling with its own
``sample_transition_batch``; ``predict``; both thread settings) runs in the
interpreter given by ``--d3rlpy-python`` or ``$D3RLPY_PYTHON`` (skipped
with a note when neither is given), a worker process that runs this same
file with ``--backend d3rlpy --json``. The d3rlpy side never imports offrl.

With ``--precision bf16-mixed`` (issue 32) only updates/s are measured:
offrl in float32 and in bf16-mixed (two algorithms with the same weights,
interleaved rounds) and d3rlpy, at the default batch size or
``--batch-size``; the CPU's bf16 flags are reported beside the figures.
``--device cuda:0`` runs that comparison on a GPU in both libraries (the
public ``update`` returns floats, so every timed step ends with the GPU's
work done); the issue's targets are for CPUs and are not applied there.

Timing: after a warm-up (20 updates, 5 with ``--quick``) the number of steps
per round is calibrated to a round length; variants that are compared with
each other (offrl / reference, fit / loop, 1 / N threads) run in interleaved
rounds so that a change in machine load hits them alike, and ratios are
medians of per-round ratios. Reported times are medians over rounds, with
the garbage collector paused during a round. Algorithm files that do not
exist yet are skipped with a note.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import json
import os
import platform
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

import _reference as ref_lib
from _data import N_STEPS, PENDULUM_EPISODE, SEED, make_data, reference_arrays
from _harness import (FULL, QUICK, Settings, StepRunner, Worker, add_common_args, check_threads,
                      d3rlpy_interpreter, format_table, fmt as _f, log, ok as _ok, loop, paired_ratio, parse_only,
                      print_load, quiet_d3rlpy, run_json, run_rounds, serve, warm_up, worker_main)

from _specs import ALGOS, PAST_WARMUP, SPECS, AlgoSpec, offrl_config_class, prepare_d3rlpy, prepare_offrl  # noqa: F401,E402

FIT_EPOCH = 10**9  # n_steps_per_epoch for the fit runs: one epoch


# the targets
TARGETS = {
    "reference_ratio": 1.10,  # offrl fast path / bare torch
    "fit_ratio": 1.10,  # fit / plain loop
    "predict_us": 100.0,  # predict on one observation
}
D3RLPY_PREDICT_EARLIER_US = 271.0


def with_threads(n: int, run: StepRunner, restore: int) -> StepRunner:
    import torch

    def wrapped(k: int) -> None:
        torch.set_num_threads(n)
        try:
            run(k)
        finally:
            torch.set_num_threads(restore)
    return wrapped


def thread_settings(initial: int, requested: Optional[int]) -> Tuple[int, Optional[int]]:
    """(main, alternative) thread counts: main is ``--threads`` (default 1)
    or torch's default; the alternative is 1, or torch's default when main
    is 1."""
    main = requested or initial
    alt = 1 if main != 1 else (initial if initial != 1 else None)
    return main, alt


def measure_offrl_algo(spec: AlgoSpec, settings: Settings, threads: Tuple[int, Optional[int]],
                       log: Callable[[str], None]) -> dict:
    import torch

    import offrl
    from offrl.dataset import MDPDataset
    from offrl.logging import NoopAdapterFactory

    config_class, why = offrl_config_class(spec)
    if config_class is None:
        return {"skipped": why}
    main_threads, alt_threads = threads
    torch.set_num_threads(main_threads)
    offrl.seed(SEED)
    data = make_data(spec.data)
    dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"])
    config = config_class()
    algo = config.create(device="cpu")
    algo.build_with_dataset(dataset)
    prepare_offrl(spec.name, algo, dataset)
    device = algo.device
    batch_size = algo.batch_size
    out: dict = {"batch_size": batch_size, "config": type(config).__name__,
                 "transition_count": int(dataset.transition_count), "n_critics": getattr(config, "n_critics", None)}

    def public_step() -> None:
        algo.update(dataset.sample_transition_batch(batch_size))

    def fast_step() -> None:  # what fit runs per step: losses stay tensors
        algo.training_step(dataset.sample_transition_batch(batch_size))

    log(f"[offrl] {spec.name}: warm-up, updates/s (sample + update)")
    out["warmup_steps"] = warm_up(loop(public_step), settings.warmup)
    out["update"] = run_rounds({"update": loop(public_step)}, settings.main_round_s, settings.main_rounds,
                               warmup=0, min_steps=2)["update"]

    # -- 2: bare torch reference
    if spec.name not in ref_lib.REFERENCES:  # none written (yet) for this algorithm
        out["cmp_offrl"] = out["reference"] = None
    else:
        log(f"[offrl] {spec.name}: against the bare-torch reference")
        arrays = reference_arrays(data)
        sampler = ref_lib.NumpySampler(**arrays, seed=SEED + 1)
        action_dim = int(algo.action_size)
        batched = (out["n_critics"] or 1) > 1
        kinds = [("list", False, "torch")]
        if batched:
            kinds.append(("batched", False, "torch"))
        kinds.append(("list", True, "torch"))  # fused Adam: offrl's optimizer kernel, shown apart
        # like for like: offrl's products (oneDNN), its Adam kernel (fused), its critic layout (batched)
        kinds.append(("batched" if batched else "list", True, "onednn"))
        variants: Dict[str, StepRunner] = {"offrl": loop(fast_step)}
        for kind, fused, products in kinds:
            torch.manual_seed(SEED)
            reference = ref_lib.make_reference(spec.name, arrays["observations"].shape[1], action_dim, kind,
                                               fused_adam=fused, products=products)
            if reference.batch_size != batch_size:
                out["reference_note"] = f"reference batch {reference.batch_size} != offrl's {batch_size}; using offrl's"

            def ref_run(k: int, reference=reference, state={"step": 0}) -> None:
                for _ in range(k):
                    reference.update(*sampler.sample(batch_size, getattr(reference, "extras", ())), state["step"])
                    state["step"] += 1

            warm_up(ref_run, settings.warmup)
            variants["ref_like" if products == "onednn" else "ref_fused" if fused else f"ref_{kind}"] = ref_run
        res = run_rounds(variants, settings.cmp_round_s, settings.cmp_rounds, warmup=0)
        out["cmp_offrl"] = res.pop("offrl")
        out["reference_fused"] = res.pop("ref_fused")
        out["reference_like"] = res.pop("ref_like")
        out["reference_like_ratio"] = paired_ratio(out["cmp_offrl"], out["reference_like"])
        out["reference"] = res
        best = min(res, key=lambda n: res[n]["ms"])
        out["reference_best"] = best
        out["reference_ratio"] = paired_ratio(out["cmp_offrl"], res[best])
        samples = run_rounds({
            "offrl": loop(lambda: algo.preprocess_batch(dataset.sample_transition_batch(batch_size).to_torch(device))),
            "numpy": loop(lambda: sampler.sample(batch_size)),
        }, settings.call_round_s, settings.call_rounds)
        out["sample_offrl"], out["sample_numpy"] = samples["offrl"], samples["numpy"]

    # -- 3: fit overhead
    log(f"[offrl] {spec.name}: fit against a plain loop")
    devnull = open(os.devnull, "w")

    def fit_run(show_progress: bool) -> StepRunner:
        def run(k: int) -> None:
            with contextlib.redirect_stderr(devnull):
                algo.fit(dataset, n_steps=k, n_steps_per_epoch=max(k, FIT_EPOCH), logger_adapter=NoopAdapterFactory(),
                         show_progress=show_progress, experiment_name="benchmark", with_timestamp=False)
        return run

    try:
        out["fit"] = run_rounds({
            "loop_update": loop(public_step),
            "loop_fast": loop(fast_step),
            "fit": fit_run(False),
            "fit_progress": fit_run(True),
        }, settings.cmp_round_s, settings.cmp_rounds, warmup=1)
    finally:
        devnull.close()

    # -- 5: threads
    if alt_threads is not None:
        log(f"[offrl] {spec.name}: {main_threads} vs {alt_threads} threads")
        res = run_rounds({
            "main": with_threads(main_threads, loop(public_step), main_threads),
            "alt": with_threads(alt_threads, loop(public_step), main_threads),
        }, settings.cmp_round_s, settings.cmp_rounds, warmup=2)
        out["threads_main"], out["threads_alt"] = res["main"], res["alt"]

    # -- 4: predict on one observation
    log(f"[offrl] {spec.name}: predict latency")
    x1 = np.ascontiguousarray(data["observations"][:1])
    algo.predict(x1)
    out["predict"] = run_rounds({"predict": loop(lambda: algo.predict(x1))},
                                settings.call_round_s, settings.call_rounds)["predict"]
    out["predict_shape"] = list(np.shape(algo.predict(x1)))
    return out


def _data_and_dataset(spec: AlgoSpec, library: Any) -> Tuple[dict, Any]:
    """The synthetic data of ``spec`` and its ``MDPDataset`` in ``library`` (offrl or d3rlpy)."""
    data = make_data(spec.data)
    if library.__name__ == "offrl":
        dataset = library.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                             data["timeouts"])
    else:
        dataset = library.dataset.MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"],
                                             timeouts=data["timeouts"])
    return data, dataset


def measure_offrl_precision(spec: AlgoSpec, settings: Settings, threads: Tuple[int, Optional[int]],
                            log: Callable[[str], None], precision: str, batch_size: Optional[int],
                            device: str = "cpu", remote: Optional[Worker] = None,
                            hidden_units: Optional[List[int]] = None) -> dict:
    """updates/s (sample + update) in float32 and at ``precision``: two
    algorithms with the same weights, interleaved rounds; with ``remote``
    (a :func:`d3rlpy_step_worker`) d3rlpy's steps are a third variant of
    the same rounds."""
    import torch

    import offrl

    config_class, why = offrl_config_class(spec)
    if config_class is None:
        return {"skipped": why}
    torch.set_num_threads(threads[0])
    offrl.seed(SEED)
    _, dataset = _data_and_dataset(spec, offrl)
    sizes = sized_kwargs(config_class, offrl, batch_size, hidden_units)
    algos = {}
    for name in ("float32", precision):
        algos[name] = config_class(precision=name, **sizes).create(device=device)
        algos[name].build_with_dataset(dataset)
        prepare_offrl(spec.name, algos[name], dataset)
    algos[precision].modules.load_state_dict(algos["float32"].modules.state_dict())
    bs = algos["float32"].batch_size
    out: dict = {"batch_size": bs, "precision_in_effect": algos[precision].precision}
    variants = {}
    for name, algo in algos.items():
        variants[name] = loop(lambda algo=algo: algo.update(dataset.sample_transition_batch(bs)))
        log(f"[offrl] {spec.name}: warm-up {name}")
        warm_up(variants[name], settings.warmup)
    if remote is not None:
        request = {"name": spec.name, "batch_size": batch_size, "hidden_units": hidden_units}
        reply = remote.call({**request, "steps": 0})  # builds it (not timed)
        if "skipped" in reply:
            out["d3rlpy_skipped"] = reply["skipped"]
        else:
            variants["d3rlpy"] = lambda k: remote.call({**request, "steps": k})
            log(f"[d3rlpy] {spec.name}: warm-up")
            warm_up(variants["d3rlpy"], settings.warmup)
    log(f"[offrl] {spec.name}: float32 vs {precision}" + (" vs d3rlpy" if "d3rlpy" in variants else "") + ", interleaved")
    res = run_rounds(variants, settings.main_round_s, settings.main_rounds, warmup=0, min_steps=2)
    out["update"], out["update_mixed"] = res["float32"], res[precision]
    out["mixed_ratio"] = paired_ratio(res["float32"], res[precision])  # ms float32 / ms mixed: the speed-up
    if "d3rlpy" in res:  # ms d3rlpy / ms offrl: offrl's speed-up, paired round by round
        out["d3rlpy_update"] = res["d3rlpy"]
        out["d3rlpy_ratio"] = paired_ratio(res["d3rlpy"], res["float32"])
        out["d3rlpy_ratio_mixed"] = paired_ratio(res["d3rlpy"], res[precision])
    return out


def sized_kwargs(config_class: type, library: Any, batch_size: Optional[int], hidden_units: Optional[List[int]]) -> dict:
    """Config keyword arguments for ``--batch-size`` / ``--hidden-units``
    (every ``*encoder_factory`` field of the config, in either library)."""
    kwargs: dict = {} if batch_size is None else {"batch_size": batch_size}
    if hidden_units:
        kwargs.update({f.name: library.models.VectorEncoderFactory(hidden_units=list(hidden_units))
                       for f in dataclasses.fields(config_class) if f.name.endswith("encoder_factory")})
    return kwargs


def set_matmul_precision(value: Optional[str]) -> None:
    """``torch.set_float32_matmul_precision(value)`` unless ``value`` is
    None (each library's own: torch's ``highest`` for offrl; d3rlpy sets
    ``high``, TF32 on a GPU, when it is imported on a machine with CUDA)."""
    if value is not None:
        import torch

        torch.set_float32_matmul_precision(value)


def d3rlpy_step_worker(threads: int, device: str, matmul_precision: Optional[str] = None) -> int:
    """The d3rlpy side of the interleaved ``--precision`` comparison, run
    in d3rlpy's interpreter: builds each requested algorithm once (at the
    request with ``steps`` 0, which also collects garbage) and answers each
    request by running ``steps`` sampled updates; the garbage collector
    stays off otherwise, so no collection lands inside a timed request.
    Never imports offrl."""
    import d3rlpy
    import torch

    quiet_d3rlpy()
    torch.set_num_threads(threads)
    set_matmul_precision(matmul_precision)
    built: Dict[Tuple[str, Optional[int], Optional[Tuple[int, ...]]], Callable[[], Any]] = {}

    def handle(request: dict) -> dict:
        hidden = request.get("hidden_units")
        key = (str(request["name"]), request.get("batch_size"), None if hidden is None else tuple(hidden))
        if key not in built:
            spec = SPECS[key[0]]
            config_class = getattr(d3rlpy.algos, spec.config, None)
            if config_class is None:
                return {"skipped": f"d3rlpy.algos has no {spec.config}"}
            d3rlpy.seed(SEED)
            data, dataset = _data_and_dataset(spec, d3rlpy)
            algo = config_class(**sized_kwargs(config_class, d3rlpy, key[1], hidden)).create(
                device="cpu:0" if device == "cpu" else device)
            algo.build_with_dataset(dataset)
            prepare_d3rlpy(spec.name, algo, data)
            bs = algo.config.batch_size
            built[key] = lambda: algo.update(dataset.sample_transition_batch(bs))
        steps = int(request["steps"])
        if steps == 0:
            gc.collect()
        for _ in range(steps):
            built[key]()
        return {}

    return serve({"backend": "d3rlpy", "version": d3rlpy.__version__, "torch": torch.__version__,
                  "matmul_precision": torch.get_float32_matmul_precision()}, handle, pause_gc=True)


#: the issue's target with bf16-mixed on a CPU with bf16 units for the MLP
#: algorithms (all those here) at batch 256, against d3rlpy's updates/s
MIXED_TARGET_MLP = 3.0
#: issue 32's target for every algorithm at any other batch size
MIXED_TARGET_ANY = 2.0


def precision_report(o: dict, d: Optional[dict], d_source: str, names: Sequence[str], precision: str,
                     load: Tuple[Tuple[float, ...], Tuple[float, ...]]) -> str:
    """The ``--precision`` table; ``d``: the d3rlpy worker's versions."""
    from offrl.training.precision import cpu_bf16_flags

    A = o["algos"]
    flags = ", ".join(cpu_bf16_flags()) or "none"
    on_cpu = o.get("device", "cpu") == "cpu"
    lines = [
        f"updates/s, sample_transition_batch + update, float32 vs {precision} (same weights, interleaved rounds) "
        f"vs d3rlpy; {o['threads'][0]} torch threads; synthetic Pendulum-/CartPole-like data as above; "
        f"device {o.get('device', 'cpu')}",
        f"offrl {o['version']} (torch {o['torch']}); CPU {platform.processor() or platform.machine()}, bf16 flags: "
        f"{flags}; {os.cpu_count()} CPUs; load average {load[0][0]:.1f} at start, {load[1][0]:.1f} at end; float32 matmul "
        f"precision {o.get('matmul_precision', 'highest')}",
        f"d3rlpy {d['version']} (torch {d['torch']}, float32 matmul precision {d.get('matmul_precision', '?')}), {d_source}"
        if d is not None else f"d3rlpy: {d_source}",
        "",
    ]
    rows = []
    for n in names:
        a = A[n]
        if "update" not in a:
            rows.append([n, "-", a.get("skipped") or a.get("error"), "", "", "", "", "", "", ""])
            continue
        f32, mixed, d_ups = _ups(a["update"]), _ups(a["update_mixed"]), _ups(a.get("d3rlpy_update"))
        target = MIXED_TARGET_MLP if a["batch_size"] == 256 else MIXED_TARGET_ANY
        ratio = a.get("d3rlpy_ratio_mixed")
        rows.append([n, a["batch_size"], _f(f32), _f(mixed), _f(a["mixed_ratio"], "{:.2f}x"),
                     _f(d_ups) if d_ups is not None else a.get("d3rlpy_skipped", "-"),
                     _f(a.get("d3rlpy_ratio"), "{:.2f}x"), _f(ratio, "{:.2f}x"),
                     f">= {target:g}x" if on_cpu else "-",
                     _ok(None if ratio is None or not on_cpu else ratio >= target)])
    lines += _table(("algorithm", "batch", "offrl float32", f"offrl {precision}", f"{precision}/float32 (paired)",
                     "d3rlpy", "float32/d3rlpy", f"{precision}/d3rlpy", "target", "result"), rows)
    notes = [f"{n}: {precision} fell back to {A[n]['precision_in_effect']} here" for n in names
             if A[n].get("precision_in_effect") not in (None, precision)]
    notes.append("medians over rounds; every ratio is the median of per-round ratios: offrl's two precisions and "
                 "d3rlpy (in its own worker process, timed from this one) run in the same interleaved rounds")
    lines += [f"* {n}" for n in notes]
    return "\n".join(lines)


def profile_offrl_algo(spec: AlgoSpec, steps: int, threads: int) -> str:
    """torch.profiler's top ops and cProfile's top functions for ``steps``
    fast-path updates (sampling included)."""
    import cProfile
    import io
    import pstats

    import torch

    import offrl
    from offrl.dataset import MDPDataset

    config_class, why = offrl_config_class(spec)
    if config_class is None:
        return f"{spec.name}: skipped ({why})"
    torch.set_num_threads(threads)
    offrl.seed(SEED)
    data = make_data(spec.data)
    dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"])
    algo = config_class().create(device="cpu")
    algo.build_with_dataset(dataset)
    bs = algo.batch_size

    def run(k: int) -> None:
        for _ in range(k):
            algo.training_step(dataset.sample_transition_batch(bs))

    run(10)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(steps)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=40)
    pr = cProfile.Profile()
    pr.enable()
    run(steps)
    pr.disable()
    buf = io.StringIO()
    pstats.Stats(pr, stream=buf).sort_stats("tottime").print_stats(15)
    lines = [line for line in buf.getvalue().splitlines() if line.strip()]
    return f"== {spec.name}: torch.profiler, {steps} steps (self CPU)\n{table}\n== {spec.name}: cProfile (tottime)\n" + "\n".join(lines[-17:])


# --------------------------------------------------------------- d3rlpy side
def measure_d3rlpy_algo(spec: AlgoSpec, settings: Settings, threads: Tuple[int, Optional[int]],
                        log: Callable[[str], None]) -> dict:
    import d3rlpy
    import torch

    config_class = getattr(d3rlpy.algos, spec.config, None)
    if config_class is None:
        return {"skipped": f"d3rlpy.algos has no {spec.config}"}
    main_threads, alt_threads = threads
    torch.set_num_threads(main_threads)
    d3rlpy.seed(SEED)
    data = make_data(spec.data)
    dataset = d3rlpy.dataset.MDPDataset(
        data["observations"], data["actions"], data["rewards"], data["terminals"], timeouts=data["timeouts"]
    )
    algo = config_class().create(device="cpu:0")
    algo.build_with_dataset(dataset)
    prepare_d3rlpy(spec.name, algo, data)
    batch_size = algo.config.batch_size
    out: dict = {"batch_size": batch_size, "transition_count": int(dataset.transition_count)}

    def step() -> None:
        algo.update(dataset.sample_transition_batch(batch_size))

    log(f"[d3rlpy] {spec.name}: warm-up, updates/s (sample + update)")
    out["warmup_steps"] = warm_up(loop(step), settings.warmup)
    out["update"] = run_rounds({"update": loop(step)}, settings.main_round_s, settings.main_rounds, warmup=0,
                               min_steps=2)["update"]
    if alt_threads is not None:
        log(f"[d3rlpy] {spec.name}: {main_threads} vs {alt_threads} threads")
        res = run_rounds({
            "main": with_threads(main_threads, loop(step), main_threads),
            "alt": with_threads(alt_threads, loop(step), main_threads),
        }, settings.cmp_round_s, settings.cmp_rounds, warmup=2)
        out["threads_main"], out["threads_alt"] = res["main"], res["alt"]
    log(f"[d3rlpy] {spec.name}: predict latency")
    x1 = np.ascontiguousarray(data["observations"][:1])
    algo.predict(x1)
    out["predict"] = run_rounds({"predict": loop(lambda: algo.predict(x1))},
                                settings.call_round_s, settings.call_rounds)["predict"]
    out["predict_shape"] = list(np.shape(algo.predict(x1)))
    return out


def measure(backend: str, names: Sequence[str], quick: bool, requested_threads: Optional[int],
            log: Callable[[str], None], precision: Optional[str] = None, batch_size: Optional[int] = None,
            device: str = "cpu", remote: Optional[Worker] = None, hidden_units: Optional[List[int]] = None) -> dict:
    import torch

    initial_threads = torch.get_num_threads()
    threads = thread_settings(initial_threads, requested_threads)
    settings = QUICK if quick else FULL
    out: dict = {
        "backend": backend, "python": platform.python_version(), "numpy": np.__version__,
        "torch": torch.__version__, "initial_threads": initial_threads, "threads": list(threads), "algos": {},
        "device": device if torch.device(device).type == "cpu" else f"{device} ({torch.cuda.get_device_name(device)})",
    }
    if backend == "offrl":
        import offrl

        out["version"] = offrl.__version__
        measure_algo = measure_offrl_algo
    else:
        import d3rlpy

        quiet_d3rlpy()
        out["version"] = d3rlpy.__version__
        measure_algo = measure_d3rlpy_algo
    if precision is not None:  # updates/s only: float32 vs precision (offrl), d3rlpy's through ``remote``
        measure_algo = functools.partial(measure_offrl_precision, precision=precision, batch_size=batch_size,
                                         device=device, remote=remote, hidden_units=hidden_units)
        out["matmul_precision"] = torch.get_float32_matmul_precision()
    for name in names:
        t0 = time.perf_counter()
        try:
            result = measure_algo(SPECS[name], settings, threads, log)
        except Exception as e:  # one failing algorithm does not stop the others
            result = {"error": f"{type(e).__name__}: {e}"}
            log(f"[{backend}] {name}: {result['error']}")
        result["elapsed_s"] = time.perf_counter() - t0
        out["algos"][name] = result
        gc.collect()
    return out


def run_d3rlpy(args: argparse.Namespace, names: Sequence[str]) -> Tuple[Optional[dict], str]:
    """The d3rlpy side: this file run with ``--backend d3rlpy --json`` in
    the d3rlpy interpreter (its own process; it never imports offrl)."""
    python, note = d3rlpy_interpreter(args)
    if python is None:
        return None, note
    argv = ["--backend", "d3rlpy", "--json", "--only", ",".join(names), "--threads", str(args.threads)]
    if args.quick:
        argv.append("--quick")
    return run_json(python, __file__, argv, timeout=1800, show_stderr=args.verbose)


def _table(header: Sequence[str], rows: List[Sequence[Any]]) -> List[str]:
    return format_table(header, rows).splitlines()


# ----------------------------------------------------------------- report
def _ups(r: Optional[dict]) -> Optional[float]:
    return None if r is None else 1e3 / r["ms"]


def report(o: dict, d: Optional[dict], d_source: str, names: Sequence[str], quick: bool,
           load: Tuple[Tuple[float, ...], Tuple[float, ...]]) -> str:
    main_threads, alt_threads = o["threads"]
    lines = [
        f"Algorithms at their default configs on the CPU; synthetic {N_STEPS:,}-step datasets, seed {SEED}: "
        f"Pendulum-like (obs 3, action 1 in [-2, 2], {PENDULUM_EPISODE}-step episodes ending in a timeout) "
        "for BC/TD3PlusBC/IQL/SAC/CQL, CartPole-like (obs 4, 2 discrete actions, terminal episodes of 10-199 "
        "steps) for DQN/DiscreteCQL",
        f"offrl {o['version']} (python {o['python']}, torch {o['torch']}, numpy {o['numpy']}); "
        f"torch threads: {main_threads} (torch default here {o['initial_threads']}); {os.cpu_count()} CPUs; "
        f"load average {load[0][0]:.1f} at start, {load[1][0]:.1f} at end",
    ]
    if d is not None:
        lines.append(f"d3rlpy {d['version']} (python {d['python']}, torch {d['torch']}), {d_source}")
    else:
        lines.append(f"d3rlpy: {d_source}")
    lines.append("")

    A = o["algos"]
    D = (d or {}).get("algos", {})
    skipped = [(n, A[n].get("skipped") or A[n].get("error")) for n in names if "update" not in A[n]]
    done = [n for n in names if "update" in A[n]]

    def dget(n: str, key: str) -> Optional[dict]:
        return D.get(n, {}).get(key)

    # 1. updates per second
    def ups_best(r: Optional[dict]) -> str:
        return "-" if r is None else f"{1e3 / r['ms']:.1f} ({1e3 / r['min_ms']:.1f})"

    rows = []
    for n in done:
        spec, a = SPECS[n], A[n]
        ups = _ups(a["update"])
        d_ups = _ups(dget(n, "update"))
        base = d_ups if d_ups is not None else spec.d3rlpy_earlier
        ratio = ups / base
        rows.append([n, a["batch_size"], ups_best(a["update"]), _f(_ups(a["cmp_offrl"])), ups_best(dget(n, "update")),
                     _f(spec.d3rlpy_earlier), f"{ratio:.2f}x" + ("" if d_ups is not None else "*"),
                     f">= {spec.target_ratio:g}x", _ok(ratio >= spec.target_ratio)])
    lines.append(f"1. Updates per second, sample_transition_batch(batch_size) + update(batch), {main_threads} threads; "
                 "median (best round)")
    lines += _table(("algorithm", "batch", "offrl", "offrl fast path", "d3rlpy", "d3rlpy earlier", "offrl/d3rlpy",
                     "target", "result"), rows)
    lines.append("")

    # 2. reference
    rows = []
    for n in done:
        a = A[n]
        ref = a["reference"]
        if ref is None:
            continue
        r = a["reference_ratio"]
        like = a.get("reference_like")  # absent from results saved before it existed
        r_like = a.get("reference_like_ratio")
        o_ms, b_ms = a["cmp_offrl"]["ms"], ref[a["reference_best"]]["ms"]
        excl = (o_ms - a["sample_offrl"]["ms"]) / (b_ms - a["sample_numpy"]["ms"])
        rows.append([n, _f(o_ms, "{:.2f}"), _f(ref.get("ref_list", {}).get("ms"), "{:.2f}"),
                     _f(ref.get("ref_batched", {}).get("ms"), "{:.2f}"), a["reference_best"].replace("ref_", ""),
                     _f(r, "{:.2f}x"), _f(a["sample_offrl"]["ms"], "{:.3f}"), _f(a["sample_numpy"]["ms"], "{:.3f}"),
                     f"{excl:.2f}x", _f(a["reference_fused"]["ms"], "{:.2f}"),
                     _f(paired_ratio(a["cmp_offrl"], a["reference_fused"]), "{:.2f}x"),
                     _f(None if like is None else like["ms"], "{:.2f}"), _f(r_like, "{:.2f}x"),
                     f"<= {TARGETS['reference_ratio']:.2f}x",
                     _ok(None if r_like is None else r_like <= TARGETS["reference_ratio"])])
    lines.append("2. offrl fast path (sample + training_step) vs the bare-torch reference (numpy gather + "
                 "update), ms per step, interleaved rounds; target on offrl/like, the like-for-like reference "
                 "(oneDNN products, fused Adam, batched critics: what offrl runs)")
    lines += _table(("algorithm", "offrl", "ref list", "ref batched", "best ref", "offrl/ref",
                     "offrl sample", "numpy sample", "excl. sampling", "ref fused-Adam", "offrl/fused",
                     "ref like", "offrl/like", "target", "result"), rows)
    lines.append("")

    # 3. fit
    rows = []
    for n in done:
        f = A[n]["fit"]
        r_fit = paired_ratio(f["fit"], f["loop_update"])
        r_prog = paired_ratio(f["fit_progress"], f["loop_update"])
        r_fit_fast = paired_ratio(f["fit"], f["loop_fast"])
        r_prog_fast = paired_ratio(f["fit_progress"], f["loop_fast"])
        worst = max(r_fit, r_prog)
        rows.append([n, _f(f["loop_update"]["ms"], "{:.2f}"), _f(f["loop_fast"]["ms"], "{:.2f}"),
                     _f(f["fit"]["ms"], "{:.2f}"), _f(f["fit_progress"]["ms"], "{:.2f}"), f["fit"]["steps"],
                     f"{r_fit:.2f}x / {r_prog:.2f}x", f"{r_fit_fast:.2f}x / {r_prog_fast:.2f}x",
                     f"<= {TARGETS['fit_ratio']:.2f}x", _ok(worst <= TARGETS["fit_ratio"])])
    lines.append("3. fit(logger_adapter=NoopAdapterFactory(), n_steps_per_epoch >= n_steps) vs a plain loop, "
                 "ms per step (sampling included everywhere)")
    lines += _table(("algorithm", "loop update", "loop training_step", "fit", "fit+progress", "fit steps",
                     "fit/loop (plain/progress)", "fit/training_step loop", "target", "result"), rows)
    lines.append("")

    # 4. predict
    rows = []
    for n in done:
        us = A[n]["predict"]["ms"] * 1e3
        d_pred = dget(n, "predict")
        d_us = None if d_pred is None else d_pred["ms"] * 1e3
        rows.append([n, _f(us), _f(d_us), _f(D3RLPY_PREDICT_EARLIER_US), _f(None if d_us is None else d_us / us, "{:.1f}x"),
                     f"<= {TARGETS['predict_us']:g} us", _ok(us <= TARGETS["predict_us"])])
    lines.append(f"4. predict on one observation (batch of 1), microseconds per call, {main_threads} threads")
    lines += _table(("algorithm", "offrl us", "d3rlpy us", "d3rlpy earlier", "d3rlpy/offrl", "target", "result"), rows)
    lines.append("")

    # 5. threads
    if alt_threads is not None:
        rows = []
        for n in done:
            a = A[n]
            if "threads_main" not in a:
                continue
            om, oa = _ups(a["threads_main"]), _ups(a["threads_alt"])
            dm, da = _ups(dget(n, "threads_main")), _ups(dget(n, "threads_alt"))
            spec = SPECS[n]
            best_o, best_d = max(om, oa), (None if dm is None else max(dm, da))
            ratio = None if best_d is None else best_o / best_d
            rows.append([n, _f(om), _f(oa), _f(paired_ratio(a["threads_main"], a["threads_alt"]), "{:.2f}x"),
                         _f(dm), _f(da), _f(None if dm is None else paired_ratio(dget(n, "threads_main"), dget(n, "threads_alt")), "{:.2f}x"),
                         _f(ratio, "{:.2f}x"), f">= {spec.target_ratio:g}x", _ok(None if ratio is None else ratio >= spec.target_ratio)])
        lines.append(f"5. Updates per second with {main_threads} vs {alt_threads} torch threads (sample + update, interleaved rounds)")
        lines += _table(("algorithm", f"offrl {main_threads}t", f"offrl {alt_threads}t", f"offrl {alt_threads}t/{main_threads}t",
                         f"d3rlpy {main_threads}t", f"d3rlpy {alt_threads}t", f"d3rlpy {alt_threads}t/{main_threads}t",
                         "best/best", "target", "result"), rows)
        lines.append("")

    notes = []
    for n, why in skipped:
        notes.append(f"{n}: skipped ({why})")
    for n in done:
        if n in D and ("skipped" in D[n] or "error" in D[n]):
            notes.append(f"{n}: d3rlpy not measured ({D[n].get('skipped') or D[n].get('error')})")
        if n in D and "predict_shape" in D[n] and D[n]["predict_shape"] != A[n]["predict_shape"]:
            notes.append(f"{n}: predict shapes differ: offrl {A[n]['predict_shape']}, d3rlpy {D[n]['predict_shape']}")
        if n in D and "transition_count" in D[n] and D[n]["transition_count"] != A[n]["transition_count"]:
            notes.append(f"{n}: transition counts differ: offrl {A[n]['transition_count']:,}, "
                         f"d3rlpy {D[n]['transition_count']:,}")
        if A[n].get("reference_note"):
            notes.append(f"{n}: {A[n]['reference_note']}")
    s = QUICK if quick else FULL
    notes += [
        "updates/s: median of %d rounds of ~%.2g s after %d warm-up updates (fewer when they take > 5 s; the public update returns floats: "
        "one host read per loss); 'fast path' is what fit runs per step" % (s.main_rounds, s.main_round_s, s.warmup),
        "offrl/d3rlpy uses this run's d3rlpy figure; * = no d3rlpy run, the earlier figure is used",
        "tables 2, 3, 5: %d interleaved rounds of ~%.2g s per variant; ratios are medians of per-round ratios"
        % (s.cmp_rounds, s.cmp_round_s),
        "reference (benchmarks/_reference.py): nn.Sequential 256-256 ReLU MLPs, Adam(foreach=True), same losses, "
        "batch sizes and critic counts; 'list' = separate critics, 'batched' = one (E, in, out)-weight ensemble; "
        "offrl is compared with the faster; 'excl. sampling' = (offrl - offrl sample) / (ref - numpy sample); "
        "'ref fused-Adam' = the list reference with Adam(fused=True), the kernel offrl uses by default; "
        "'ref like' = the reference with offrl.models.layers' oneDNN products, Adam(fused=True) and batched "
        "critics (list with one critic), what offrl's networks run: the target is judged on it",
        "fit: tqdm output goes to os.devnull; the plain loops sample with the same dataset object",
        "the machine was shared with other jobs (see the load averages): absolute figures are noisy, paired ratios "
        "less so",
    ]
    if quick:
        notes.append("--quick: short rounds, figures are rough")
    lines.extend(f"* {n}" for n in notes)
    return "\n".join(lines)


def precision_main(args: argparse.Namespace, names: Sequence[str], started: float,
                   load_start: Tuple[float, ...]) -> int:
    """``--precision``: offrl's two precisions and d3rlpy (a long-lived
    worker in d3rlpy's interpreter) in the same interleaved rounds."""
    python, d3_source = d3rlpy_interpreter(args)
    remote = None
    if python is not None:
        extra = [] if args.matmul_precision is None else ["--matmul-precision", args.matmul_precision]
        remote = Worker(python, __file__, ["--d3rlpy-step-worker", "--threads", str(args.threads or 1), "--device",
                                           args.device] + extra, name="d3rlpy")
    set_matmul_precision(args.matmul_precision)
    try:
        results = measure("offrl", names, args.quick, args.threads, log, args.precision, args.batch_size, args.device,
                          remote, args.hidden_units)
    finally:
        if remote is not None:
            remote.close()
    load_end = print_load("end")
    print(precision_report(results, None if remote is None else remote.info, d3_source, names, args.precision,
                           (load_start, load_end)))
    print(f"* total benchmark time {time.perf_counter() - started:.0f} s")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=list(SPECS))
    parser.add_argument("--backend", choices=("offrl", "d3rlpy"), default=None, help="measure one backend only")
    parser.add_argument("--json", action="store_true", help="print the results of --backend as JSON")
    parser.add_argument("--profile", action="store_true",
                        help="also print torch.profiler / cProfile tables of offrl's training_step per algorithm")
    parser.add_argument("--verbose", action="store_true", help="show the d3rlpy worker's progress")
    parser.add_argument("--precision", choices=("bf16-mixed",), default=None,
                        help="updates/s only: offrl float32 vs this precision (and d3rlpy)")
    parser.add_argument("--batch-size", type=int, default=None, help="with --precision: this batch size in both libraries")
    parser.add_argument("--device", default="cpu", help="with --precision: run both libraries on this device (cuda:0)")
    parser.add_argument("--hidden-units", default=None,
                        help="with --precision: every encoder's hidden layers in both libraries, e.g. 4096,4096")
    parser.add_argument("--matmul-precision", choices=("highest", "high", "medium"), default=None,
                        help="with --precision: torch.set_float32_matmul_precision in both processes (default: each "
                             "library's own; d3rlpy sets high, TF32 on a GPU, when imported on a machine with CUDA)")
    parser.add_argument("--d3rlpy-step-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.d3rlpy_step_worker:
        return d3rlpy_step_worker(args.threads or 1, args.device, args.matmul_precision)
    try:
        args.hidden_units = [int(h) for h in args.hidden_units.split(",")] if args.hidden_units else None
    except ValueError:
        parser.error(f"--hidden-units: expected comma-separated integers, got {args.hidden_units!r}")
    if args.hidden_units is not None and (min(args.hidden_units) < 1 or not args.precision):
        parser.error("--hidden-units needs --precision and positive sizes")
    if args.matmul_precision is not None and not args.precision:
        parser.error("--matmul-precision needs --precision")
    if args.device != "cpu" and not args.precision:
        parser.error("--device needs --precision (the other measurements are CPU-only)")
    if args.batch_size is not None and (args.batch_size < 1 or not args.precision):
        parser.error("--batch-size needs --precision and a positive size")
    names = parse_only(args.only, list(SPECS), parser)
    check_threads(args, parser)

    started = time.perf_counter()
    if args.backend is not None:
        run = functools.partial(measure, args.backend, names, args.quick, args.threads, log, args.precision, args.batch_size,
                                args.device)
        if args.json:
            return worker_main(run)
        print(json.dumps(run(), indent=2))
        return 0

    load_start = print_load("start")
    if args.precision:
        return precision_main(args, names, started, load_start)
    offrl_results = measure("offrl", names, args.quick, args.threads, log, args.precision, args.batch_size, args.device)
    gc.collect()
    measured = [n for n in names if "update" in offrl_results["algos"][n]]  # no d3rlpy run for skipped ones
    d3_results, d3_source = run_d3rlpy(args, measured) if measured else (None, "nothing to compare")
    load_end = print_load("end")
    print(report(offrl_results, d3_results, d3_source, names, args.quick, (load_start, load_end)))
    if args.profile:
        import torch

        main_threads = thread_settings(torch.get_num_threads(), args.threads)[0]
        for name in names:
            steps = 10 if name == "CQL" else 50
            print()
            print(profile_offrl_algo(SPECS[name], steps, main_threads))
    print(f"* total benchmark time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
