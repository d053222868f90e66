"""The ``ddp`` and ``compile`` subcommands of ``benchmarks/scale.py`` (issue 21):

* ``ddp``: data-parallel training under torchrun on this machine, 1 process
  against ``--nproc`` (default 2): updates/s, peak resident memory per rank,
  the measured all-reduce time of the gradients and the sampling time, and
  an on-paper model of the cost with N ranks on M machines built from them.
  ``--disk`` writes the dataset once as a disk dataset (``--layout``,
  default ``rows``) that every rank opens with ``in_memory=False``: its
  shard is a view of the same files, read with the store's default
  ``read_mode`` (``"pread"``: positional reads into private batch
  buffers, no column pages mapped). Each rank's resident memory is split
  into private (anonymous) and file pages, and the dataset's files' pages
  in the page cache (shared by all ranks, in no process's RSS under
  ``pread``) are counted with ``fincore`` at the end.
* ``compile``: ``compile_graph=True`` against eager, updates/s per
  algorithm on this machine's CPU, with the warm-up (compile) time.

Run from the repository root::

    python benchmarks/scale.py ddp [--nproc 2] [--steps 300] [--disk [--layout rows|columns]]
    python benchmarks/scale.py compile [--only iql,sac] [--steps 100] [--device cuda:0]

The machine's load average is printed with every table: on a shared
machine the figures are indicative only.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

import _harness
from _harness import log, print_load, print_table

OBS, ACT = 17, 6  # a locomotion-sized problem
BATCH = 256


def _dataset(n_episodes: int, length: int, seed: int = 0) -> Any:
    import numpy as np

    import offrl

    rng = np.random.default_rng(seed)
    n = n_episodes * length
    terminals = np.zeros(n, np.float32)
    terminals[length - 1::length] = 1.0
    return offrl.dataset.MDPDataset(rng.normal(size=(n, OBS)).astype(np.float32),
                                    rng.uniform(-1, 1, size=(n, ACT)).astype(np.float32),
                                    rng.normal(size=n).astype(np.float32), terminals)


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _rss_parts_mib() -> Dict[str, float]:
    """Current resident memory split as the kernel reports it: private
    (anonymous) pages, which a rank holds alone, and file pages (mapped
    files: torch's libraries, and a disk dataset's rows only under
    ``read_mode="mmap"``; shared with the page cache and the other ranks)."""
    parts = {"RssAnon": 0.0, "RssFile": 0.0}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key = line.split(":")[0]
                if key in parts:
                    parts[key] = float(line.split()[1]) / 1024.0
    except OSError:  # not Linux: reported as 0
        pass
    return parts


def _page_cache_mib(directory: str) -> Any:
    """MiB of the files under ``directory`` held in the page cache (util-linux
    ``fincore``); ``None`` where it is not available."""
    import shutil

    if shutil.which("fincore") is None:
        return None
    files = [os.path.join(directory, n) for n in sorted(os.listdir(directory))]
    try:
        out = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *files],
                             capture_output=True, text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sum(int(v) for v in out.split()) / 2**20


# ------------------------------------------------------------------ ddp
def ddp_worker(argv: List[str]) -> None:
    """One rank (or the single process): train IQL, time the pieces, write JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=500)
    parser.add_argument("--disk", default=None, help="a disk dataset directory every rank opens in place")
    args = parser.parse_args(argv)
    import torch

    import offrl
    from offrl.algos import IQLConfig
    from offrl.logging import NoopAdapterFactory

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    offrl.seed(0)
    if args.disk:  # each rank opens the same files; its shard is a view of them
        data = offrl.dataset.ReplayBuffer.load(args.disk, in_memory=False)
        with open(os.path.join(args.disk, "manifest.json")) as f:
            layout = json.load(f).get("layout", "columns")
    else:
        data = _dataset(args.episodes, 100)
    rss_data = _peak_rss_mib()
    algo = IQLConfig(batch_size=BATCH).create(enable_ddp=world > 1)
    # warm-up (build, first steps), then the timed run
    algo.fit(data, 20, 20, logger_adapter=NoopAdapterFactory(), show_progress=False)
    start = time.perf_counter()
    results = algo.fit(data, args.steps, args.steps, logger_adapter=NoopAdapterFactory(), show_progress=False)
    elapsed = time.perf_counter() - start
    metrics = results[-1][1]
    out: Dict[str, Any] = {"rank": rank, "world": world, "updates_per_s": args.steps / elapsed,
                           "sample_s": metrics["time_sample_batch"], "update_s": metrics["time_algorithm_update"],
                           "rss_after_data_mib": rss_data, "peak_rss_mib": _peak_rss_mib(), **_rss_parts_mib(),
                           "n_params": sum(p.numel() for p in algo.modules.parameters() if p.requires_grad)}
    if args.disk:
        out.update(read_mode=data.buffer.read_mode, layout=layout, cached_mib=_page_cache_mib(args.disk))
    if world > 1:
        import torch.distributed as dist

        flat = torch.zeros(out["n_params"])
        for _ in range(5):
            dist.all_reduce(flat)
        t0 = time.perf_counter()
        for _ in range(50):
            dist.all_reduce(flat)
        out["allreduce_s"] = (time.perf_counter() - t0) / 50
    with open(os.path.join(args.out, f"rank{rank}_of{world}.json"), "w") as f:
        json.dump(out, f)


def ddp_build(argv: List[str]) -> None:
    """Write the synthetic dataset (``argv``: path, episodes, layout) as a disk dataset."""
    import offrl

    path, episodes, layout = argv
    offrl.dataset.dump_disk_dataset(_dataset(int(episodes), 100), path, layout=layout)


def run_ddp(argv: List[str]) -> None:
    """``scale.py ddp``: 1 process, then ``--nproc`` under torchrun."""
    parser = argparse.ArgumentParser(prog="scale.py ddp")
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--episodes", type=int, default=500, help="episodes of 100 steps in the synthetic dataset")
    parser.add_argument("--disk", action="store_true",
                        help="write the dataset once as a disk dataset; every rank opens it with in_memory=False")
    parser.add_argument("--layout", default="rows", choices=("rows", "columns"),
                        help="the disk dataset's layout with --disk (DiskDatasetWriter's layout)")
    args = parser.parse_args(argv)
    print_load("before")
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scale.py")
    with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as data_dir:
        common = ["_ddp-worker", "--out", out, "--steps", str(args.steps), "--episodes", str(args.episodes)]
        if args.disk:
            path = os.path.join(data_dir, "data")
            # built in a child: a process started from this one would inherit its peak RSS
            # (Linux carries ru_maxrss over fork and exec), so this one never holds the data
            subprocess.run([sys.executable, here, "_ddp-build", path, str(args.episodes), args.layout], check=True)
            size = sum(os.path.getsize(os.path.join(path, n)) for n in os.listdir(path))
            print(f"disk dataset: layout {args.layout!r}, {size / 2**20:.0f} MiB of files", flush=True)
            common += ["--disk", path]
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        log("1 process ...")
        subprocess.run([sys.executable, here, *common], check=True, env=env)
        log(f"{args.nproc} processes under torchrun ...")
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                        str(args.nproc), here, *common], check=True, env=env)
        runs = {}
        for name in sorted(os.listdir(out)):
            with open(os.path.join(out, name)) as f:
                runs[name] = json.load(f)
    print_load("after")
    rows = []
    for name, r in runs.items():
        rows.append([f"{r['world']} proc, rank {r['rank']}", f"{r['updates_per_s']:.1f}",
                     f"{r['updates_per_s'] * BATCH * r['world']:.0f}", f"{r['sample_s'] * 1e3:.2f}",
                     f"{r['update_s'] * 1e3:.2f}", f"{r.get('allreduce_s', 0) * 1e3:.3f}",
                     f"{r['rss_after_data_mib']:.0f}", f"{r['peak_rss_mib']:.0f}", f"{r['RssAnon']:.0f}",
                     f"{r['RssFile']:.0f}", "-" if r.get("cached_mib") is None else f"{r['cached_mib']:.0f}"])
    where = "in memory on every rank"
    if args.disk:
        r = runs["rank0_of1.json"]
        where = (f"a disk dataset, layout {r['layout']!r}, opened in place by every rank, "
                 f"read_mode {r['read_mode']!r}")
    print_table(["run", "updates/s", "transitions/s (all ranks)", "sample ms", "update ms", "all-reduce ms",
                 "RSS after data MiB", "peak RSS MiB", "anon RSS MiB (end)", "file RSS MiB (end)",
                 "dataset in page cache MiB (end)"], rows,
                title=f"IQL, batch {BATCH} per rank, {args.episodes * 100} transitions ({where}), "
                      "1 torch thread per process")
    one = runs["rank0_of1.json"]
    multi = runs[f"rank0_of{args.nproc}.json"]
    _print_model(one, multi, args.nproc)


def _print_model(one: Dict[str, Any], multi: Dict[str, Any], nproc: int) -> None:
    """The on-paper cost with N ranks on M machines from the measured pieces."""
    grad_bytes = 4 * one["n_params"]
    t_compute = one["update_s"]
    t_sample = one["sample_s"]
    t_ar_local = multi.get("allreduce_s", 0.0)
    print()
    print("On-paper model (per step, each rank; batch B per rank):")
    print("  t_step(N, M) = t_sample + t_compute + t_allreduce(N, M)      (sampling and compute do not grow with N)")
    print("  ring all-reduce of G gradient bytes: t_allreduce = 2 (N-1)/N * G / bw + 2 (N-1) * lat")
    print(f"  measured: t_sample = {t_sample * 1e3:.2f} ms, t_compute = {t_compute * 1e3:.2f} ms (1 process), "
          f"G = {grad_bytes / 1e6:.2f} MB, t_allreduce(N={nproc}, M=1) = {t_ar_local * 1e3:.3f} ms (gloo, loopback)")
    print(f"  updates/s with {nproc} processes on this machine: {multi['updates_per_s']:.1f} per rank vs "
          f"{one['updates_per_s']:.1f} alone; each process has 1 thread and this machine {os.cpu_count()} cores")
    # across machines: assume a 10 Gbit/s network and 50 us latency (stated, not measured)
    bw, lat = 10e9 / 8, 50e-6
    rows = []
    for m in (1, 2, 4):
        for n in (2, 4, 8, 16):
            if n < m:
                continue
            if m == 1:
                t_ar = t_ar_local * (2 * (n - 1) / n) / (2 * (nproc - 1) / nproc) if nproc > 1 else 0.0
            else:
                t_ar = 2 * (n - 1) / n * grad_bytes / bw + 2 * (n - 1) * lat
            t_step = t_sample + t_compute + t_ar
            rows.append([n, m, f"{t_ar * 1e3:.3f}", f"{t_step * 1e3:.2f}", f"{n * BATCH / t_step:.0f}",
                         f"{n * BATCH / t_step / (BATCH / (t_sample + t_compute)):.2f}"])
    print_table(["N ranks", "M machines", "t_allreduce ms", "t_step ms", "transitions/s", "speed-up vs 1"], rows,
                title="model (M=1: measured loopback all-reduce scaled by 2(N-1)/N, one core per rank assumed; "
                      "M>1: assumed 10 Gbit/s, 50 us)")


# -------------------------------------------------------------- compile
def run_compile(argv: List[str]) -> None:
    """``scale.py compile``: compiled against eager updates/s per algorithm."""
    parser = argparse.ArgumentParser(prog="scale.py compile")
    parser.add_argument("--only", default=None, help="comma-separated algorithm names")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu, or cuda:0 (compiled with CUDA graphs there)")
    args = parser.parse_args(argv)
    import importlib
    import pkgutil
    import warnings

    import torch

    import offrl
    import offrl.algos
    from offrl.training import graph
    from offrl.constants import ActionSpace
    from offrl.serialization import registered

    torch.set_num_threads(args.threads or 1)
    device = args.device

    def sync() -> None:  # training_step never waits for the GPU: the timings must
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize(device)

    for module in pkgutil.iter_modules(offrl.algos.__path__):
        importlib.import_module(f"offrl.algos.{module.name}")
    configs = {n: c for n, c in sorted(registered("algorithm").items()) if c.algorithm_class().is_trainable}
    names = _harness.parse_only(args.only, list(configs)) if args.only else list(configs)
    load = print_load("before")
    rows: List[List[Any]] = []
    for name in names:
        cls = configs[name]
        discrete = cls.algorithm_class()._action_type == ActionSpace.DISCRETE
        data = _dataset(20, 50) if not discrete else _discrete_dataset()
        timings = {}
        compiled = None
        compile_s = None
        reason = ""
        for flag in (False, True):
            offrl.seed(0)
            config = cls(batch_size=BATCH, compile_graph=flag)
            if cls.algorithm_class().evaluates_algorithm:
                base = (offrl.algos.DiscreteBCConfig if discrete else offrl.algos.BCConfig)(batch_size=BATCH).create(
                    device=device)
                base.build_with_dataset(data)
                algo = cls.algorithm_class()(algo=base, config=config)
            else:
                algo = config.create(device=device)
            algo.build_with_dataset(data)
            if hasattr(algo, "fit_neighbor_index"):  # PRDC: fit builds it; training_step alone does not
                algo.fit_neighbor_index(data)
            sample = (lambda: data.sample_trajectory_batch(BATCH // 8, algo.context_size)) \
                if algo.predicts_from_sequences else (lambda: data.sample_transition_batch(BATCH))
            batches = [sample() for _ in range(8)]
            graph._WARNED = False  # the fallback warning is once per process: re-armed per algorithm
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                t0 = time.perf_counter()
                for i in range(5):  # warm-up: compiling happens here
                    algo.training_step(batches[i % 8])
                sync()
                first = time.perf_counter() - t0
                t0 = time.perf_counter()
                for i in range(args.steps):
                    algo.training_step(batches[i % 8])
                sync()
                timings[flag] = args.steps / (time.perf_counter() - t0)
            if flag:
                compiled, compile_s = algo.compiled, first
                reason = next((str(w.message) for w in caught if "compile_graph=True" in str(w.message)), "")
        rows.append([name, f"{timings[False]:.1f}", f"{timings[True]:.1f}", f"{timings[True] / timings[False]:.2f}",
                     "yes" if compiled else "no (fell back)", f"{compile_s:.1f}"])
        if reason:
            print(f"{name} fell back: {reason}", flush=True)
        log(f"{name}: {rows[-1]}")
    load_after = print_load("after")
    print_table(["algorithm", "eager updates/s", "compiled updates/s", "ratio", "compiled", "warm-up s (5 steps)"],
                rows, title=f"compile_graph on {device}, batch {BATCH}, {args.threads or 1} thread(s); load "
                            f"{load[0]:.1f} -> {load_after[0]:.1f} on {os.cpu_count()} cores")


def _discrete_dataset() -> Any:
    import numpy as np

    import offrl

    rng = np.random.default_rng(0)
    n = 1000
    terminals = np.zeros(n, np.float32)
    terminals[49::50] = 1.0
    return offrl.dataset.MDPDataset(rng.normal(size=(n, OBS)).astype(np.float32), rng.integers(0, 4, n),
                                    rng.normal(size=n).astype(np.float32), terminals, action_size=4)


SUBCOMMANDS = {"ddp": run_ddp, "compile": run_compile}
PHASES = {"_ddp-worker": ddp_worker, "_ddp-build": ddp_build}
