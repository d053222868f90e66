#!/usr/bin/env python
"""Benchmark of ``offrl.datasets`` importers against the issue's targets, with
d3rlpy 2.x side by side where it has an equivalent.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/importers.py                  # 1,000,000-step D4RL file, 1,000 Minari episodes
    python benchmarks/importers.py --quick          # 100,000 steps, 1,000 episodes of 100 steps
    python benchmarks/importers.py --no-d3rlpy
    D3RLPY_PYTHON=/path/to/venv/bin/python python benchmarks/importers.py --quick

Targets: a 1,000,000-step D4RL-format file imports in <= 2 s; a Minari dataset
of 1,000 episodes imports in <= 3 s.

Data (synthetic, seeded): 17-dim float32 observations, 6-dim float32 actions,
episodes of ``--episode-length`` steps (1,000 by default) ending in a timeout.

* D4RL-format HDF5 (``observations``, ``actions``, ``rewards``, ``terminals``,
  ``timeouts``, ``next_observations``): ``offrl.datasets.load_d4rl_hdf5``
  against what a d3rlpy user writes for such a file (d3rlpy's own
  ``get_d4rl`` needs the ``d4rl`` package): read the arrays with h5py and
  build ``d3rlpy.dataset.MDPDataset`` (which drops ``next_observations``).
* Minari, HDF5 backend, 1,000 episodes: ``offrl.datasets.get_minari`` against
  the d3rlpy-user equivalent (d3rlpy's ``get_minari`` needs the ``minari``
  package): an h5py loop over the episode groups, then ``MDPDataset`` of the
  stacked ``N`` first observations of each episode (the final observation is
  dropped, as d3rlpy's ``get_minari`` does).
* Minari, Arrow backend: offrl only (pyarrow is not in the d3rlpy venv).
* ``get_minari(..., to=DIR)``, both backends: the dataset streamed to a disk
  dataset one episode at a time; its time, and the peak memory traced by
  ``tracemalloc`` against the in-memory read (run once, untimed).
* ``to_minari`` write time, both backends.
* ``from_dataframe`` on a 1,000,000-row shuffled table (offrl only), with
  pandas' own ``sort_values`` of the table by (episode, step) as a floor.

Each timing is the median of ``--repeats`` runs (3 by default) of one call.
d3rlpy runs in the interpreter given by ``--d3rlpy-python`` or
``$D3RLPY_PYTHON`` (skipped with a note when neither is given), a worker
process that runs this file with ``--backend d3rlpy --json`` on the same
files; that process never imports offrl.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Callable, Optional

import numpy as np

from _data import ACTION_DIM, OBS_DIM, SEED
from _harness import add_common_args, d3rlpy_interpreter, emit_json, format_table, print_load, run_json, worker_main


def median_time(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


# ------------------------------------------------------------------ files
def synthetic(steps: int, episode_length: int) -> dict:
    rng = np.random.default_rng(SEED)
    observations = rng.standard_normal((steps, OBS_DIM)).astype(np.float32)
    timeouts = np.zeros(steps, dtype=bool)
    timeouts[episode_length - 1 :: episode_length] = True
    return {
        "observations": observations,
        "actions": rng.uniform(-1, 1, (steps, ACTION_DIM)).astype(np.float32),
        "rewards": rng.standard_normal(steps).astype(np.float32),
        "terminals": np.zeros(steps, dtype=bool),
        "timeouts": timeouts,
        "next_observations": np.roll(observations, -1, axis=0),
    }


def write_d4rl(path: str, data: dict) -> None:
    import h5py

    with h5py.File(path, "w") as f:
        for key, value in data.items():
            f.create_dataset(key, data=value)


def write_minari_hdf5(folder: str, data: dict, episode_length: int) -> int:
    """A Minari 0.5 HDF5 dataset written with h5py (not with offrl)."""
    import h5py

    os.makedirs(os.path.join(folder, "data"))
    steps = data["actions"].shape[0]
    episodes = steps // episode_length
    with h5py.File(os.path.join(folder, "data", "main_data.hdf5"), "w") as f:
        for i in range(episodes):
            a, b = i * episode_length, (i + 1) * episode_length
            g = f.create_group(f"episode_{i}")
            g.attrs["id"] = i
            g.attrs["total_steps"] = episode_length
            g["observations"] = np.concatenate([data["observations"][a:b], data["next_observations"][b - 1 : b]])
            g["actions"] = data["actions"][a:b]
            g["rewards"] = data["rewards"][a:b]
            g["terminations"] = data["terminals"][a:b]
            g["truncations"] = data["timeouts"][a:b]
    box = {"type": "Box", "dtype": "float32", "shape": [OBS_DIM], "low": [-1e9] * OBS_DIM, "high": [1e9] * OBS_DIM}
    act = {"type": "Box", "dtype": "float32", "shape": [ACTION_DIM], "low": [-1.0] * ACTION_DIM, "high": [1.0] * ACTION_DIM}
    with open(os.path.join(folder, "data", "metadata.json"), "w") as f:
        json.dump({
            "dataset_id": "bench-v0", "total_episodes": episodes, "total_steps": episodes * episode_length,
            "data_format": "hdf5", "observation_space": json.dumps(box), "action_space": json.dumps(act),
            "minari_version": "0.5.4",
        }, f)
    return episodes


# -------------------------------------------------------------- d3rlpy side
def d3rlpy_measure(d4rl_path: str, minari_folder: str, repeats: int) -> dict:
    import h5py
    import d3rlpy

    def load_d4rl():
        with h5py.File(d4rl_path, "r") as f:
            arrays = {k: f[k][()] for k in ("observations", "actions", "rewards", "terminals", "timeouts")}
        return d3rlpy.dataset.MDPDataset(**arrays)

    def load_minari():
        observations, actions, rewards, terminals, timeouts = [], [], [], [], []
        with h5py.File(os.path.join(minari_folder, "data", "main_data.hdf5"), "r") as f:
            for key in sorted(f.keys(), key=lambda k: int(k.split("_")[1])):
                g = f[key]
                observations.append(g["observations"][()][:-1])
                actions.append(g["actions"][()])
                rewards.append(g["rewards"][()])
                terminals.append(g["terminations"][()])
                timeouts.append(g["truncations"][()])
        return d3rlpy.dataset.MDPDataset(
            np.concatenate(observations), np.concatenate(actions), np.concatenate(rewards),
            np.concatenate(terminals), np.concatenate(timeouts),
        )

    out = {"backend": "d3rlpy", "version": d3rlpy.__version__}
    out["d4rl"], ds = median_time(load_d4rl, repeats)
    out["d4rl_transitions"] = int(ds.transition_count)
    out["minari_hdf5"], ds = median_time(load_minari, repeats)
    out["minari_transitions"] = int(ds.transition_count)
    return out


def run_d3rlpy(args: argparse.Namespace, d4rl_path: str, minari_folder: str) -> tuple[Optional[dict], str]:
    python, note = d3rlpy_interpreter(args)
    if python is None:
        return None, note
    argv = ["--backend", "d3rlpy", "--json", "--d4rl-file", d4rl_path, "--minari-folder", minari_folder,
            "--repeats", str(args.repeats)]
    return run_json(python, __file__, argv, timeout=900)


# --------------------------------------------------------------- offrl side
def offrl_measure(args: argparse.Namespace, data: dict, d4rl_path: str, minari_folder: str, tmp: str) -> dict:
    import offrl
    from offrl.datasets import from_dataframe, get_minari, load_d4rl_hdf5, to_minari

    r = args.repeats
    out: dict = {"backend": "offrl", "version": offrl.__version__}
    out["d4rl"], ds = median_time(lambda: load_d4rl_hdf5(d4rl_path), r)
    out["d4rl_transitions"] = ds.transition_count
    out["minari_hdf5"], minari_ds = median_time(lambda: get_minari(minari_folder)[0], r)
    out["minari_transitions"] = minari_ds.transition_count

    hdf5_out, arrow_out = os.path.join(tmp, "w-hdf5"), os.path.join(tmp, "w-arrow")
    out["to_minari_hdf5"], _ = median_time(lambda: to_minari(minari_ds, hdf5_out, overwrite=True), r)
    try:
        import pyarrow  # noqa: F401

        out["to_minari_arrow"], _ = median_time(
            lambda: to_minari(minari_ds, arrow_out, data_format="arrow", overwrite=True), r
        )
        out["minari_arrow"], ds = median_time(lambda: get_minari(arrow_out)[0], r)
    except ImportError:
        print("pyarrow not installed: Arrow backend skipped")

    streamed = iter(range(10**6))

    def fresh(name: str) -> str:
        return os.path.join(tmp, f"{name}-{next(streamed)}")

    out["minari_hdf5_to"], _ = median_time(lambda: get_minari(minari_folder, to=fresh("to-hdf5"))[0], r)
    sources = [("hdf5", minari_folder)] + ([("arrow", arrow_out)] if "minari_arrow" in out else [])
    if "minari_arrow" in out:
        out["minari_arrow_to"], _ = median_time(lambda: get_minari(arrow_out, to=fresh("to-arrow"))[0], r)
    out["memory"] = minari_memory(sources, fresh)

    try:
        import pandas as pd
    except ImportError:
        print("pandas not installed: from_dataframe skipped")
        return out
    steps = data["actions"].shape[0]
    rng = np.random.default_rng(SEED)
    episode = np.arange(steps) // args.episode_length
    table = pd.DataFrame({"episode": episode, "step": np.arange(steps) % args.episode_length})
    for k in range(OBS_DIM):
        table[f"o{k}"] = data["observations"][:, k]
    for k in range(ACTION_DIM):
        table[f"a{k}"] = data["actions"][:, k]
    table["reward"] = data["rewards"]
    table["p"] = rng.uniform(0.1, 2.0, steps)
    table = table.iloc[rng.permutation(steps)].reset_index(drop=True)
    obs_cols = [f"o{k}" for k in range(OBS_DIM)]
    act_cols = [f"a{k}" for k in range(ACTION_DIM)]
    out["dataframe_rows"] = steps
    out["from_dataframe"], _ = median_time(
        lambda: from_dataframe(table, "episode", obs_cols, act_cols, "reward", step_column="step",
                               behaviour_probability_column="p"), r,
    )
    out["pandas_sort_floor"], _ = median_time(lambda: table.sort_values(["episode", "step"]), r)
    return out


def minari_memory(sources: list, fresh: Callable[[str], str]) -> dict:
    """Peak memory traced by ``tracemalloc`` (numpy and Python allocations,
    HDF5 reads into numpy included; pyarrow's own memory pool is not traced)
    while ``get_minari`` reads each source into memory and with ``to=``,
    and the bytes the disk dataset takes."""
    import gc
    import tracemalloc

    from offrl.datasets import get_minari

    out: dict = {}
    for backend, folder in sources:
        for mode in ("memory", "to"):
            target = fresh(f"mem-{backend}") if mode == "to" else None
            gc.collect()
            tracemalloc.start()
            dataset, _ = get_minari(folder, to=target)
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            out[f"{backend}_{mode}"] = peak
            if target is not None:
                out[f"{backend}_disk_bytes"] = sum(
                    os.path.getsize(os.path.join(target, name)) for name in os.listdir(target)
                )
            del dataset
    return out


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="D4RL file steps (default 1,000,000)")
    parser.add_argument("--episode-length", type=int, default=None, help="Minari episode length (default 1,000)")
    parser.add_argument("--episodes", type=int, default=1000, help="Minari episodes")
    parser.add_argument("--repeats", type=int, default=3, help="runs per timing (median)")
    add_common_args(parser, quick_help="100,000 steps, 1,000 episodes of 100 steps", threads=False)  # no torch here
    parser.add_argument("--backend", choices=("offrl", "d3rlpy"), default=None, help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--d4rl-file", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--minari-folder", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.repeats < 1:
        parser.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.backend == "d3rlpy":
        return worker_main(lambda: d3rlpy_measure(args.d4rl_file, args.minari_folder, args.repeats))

    steps = args.steps or (100_000 if args.quick else 1_000_000)
    args.episode_length = args.episode_length or (100 if args.quick else 1000)
    minari_steps = args.episodes * args.episode_length
    print(f"python {platform.python_version()}, numpy {np.__version__}, {os.cpu_count()} CPUs")
    print_load("start")
    tmp = tempfile.mkdtemp(prefix="offrl-importers-")
    try:
        d4rl_data = synthetic(steps, 1000)
        d4rl_path = os.path.join(tmp, "d4rl.hdf5")
        write_d4rl(d4rl_path, d4rl_data)
        minari_data = d4rl_data if minari_steps == steps else synthetic(minari_steps, args.episode_length)
        minari_folder = os.path.join(tmp, "minari")
        episodes = write_minari_hdf5(minari_folder, minari_data, args.episode_length)
        print(f"D4RL-format file: {steps:,} steps; Minari dataset: {episodes:,} episodes of {args.episode_length} steps")

        ours = offrl_measure(args, minari_data, d4rl_path, minari_folder, tmp)
        theirs, d3_note = run_d3rlpy(args, d4rl_path, minari_folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_load("end")
    print(f"d3rlpy: {d3_note}")
    rows: list = []

    def row(name: str, key: str, target: Optional[float] = None) -> None:
        mine = ours.get(key)
        if mine is None:
            return
        d = theirs.get(key) if theirs else None
        rows.append([name, f"{mine:.3f}", "-" if d is None else f"{d:.3f}", "-" if d is None else f"{d / mine:.2f}x",
                     "-" if target is None else f"<= {target:g} s",
                     "-" if target is None else ("ok" if mine <= target else "MISS")])

    print()
    row(f"load_d4rl_hdf5 ({steps:,} steps)", "d4rl", 2.0 if steps >= 1_000_000 else None)
    row(f"get_minari HDF5 ({episodes:,} episodes)", "minari_hdf5", 3.0 if episodes >= 1000 else None)
    row(f"get_minari Arrow ({episodes:,} episodes)", "minari_arrow", 3.0 if episodes >= 1000 else None)
    row("get_minari HDF5, to=DIR (streamed to disk)", "minari_hdf5_to")
    row("get_minari Arrow, to=DIR (streamed to disk)", "minari_arrow_to")
    row("to_minari HDF5", "to_minari_hdf5")
    row("to_minari Arrow", "to_minari_arrow")
    row(f"from_dataframe ({ours.get('dataframe_rows', 0):,} shuffled rows)", "from_dataframe")
    row("  floor: pandas sort_values(episode, step)", "pandas_sort_floor")
    print(format_table(["operation", "offrl s", "d3rlpy-style s", "d3rlpy-style/offrl", "target", "result"], rows))
    memory = ours.get("memory", {})
    if memory:
        mb = 1 << 20
        print(f"\nget_minari peak traced memory (tracemalloc), {episodes:,} episodes:")
        mem_rows = []
        for backend in ("hdf5", "arrow"):
            if f"{backend}_to" in memory:
                mem_rows.append([backend, f"{memory[f'{backend}_memory'] / mb:.1f}", f"{memory[f'{backend}_to'] / mb:.1f}",
                                 f"{memory[f'{backend}_disk_bytes'] / mb:.1f}"])
        print(format_table(["backend", "in memory MB", "to=DIR MB", "disk dataset MB"], mem_rows))
    print(f"\ntransitions: offrl D4RL {ours['d4rl_transitions']:,}, Minari {ours['minari_transitions']:,}", end="")
    if theirs:
        print(f"; d3rlpy-style D4RL {theirs['d4rl_transitions']:,}, Minari {theirs['minari_transitions']:,}"
              f" (d3rlpy {theirs['version']})")
    else:
        print()
    if args.json:
        emit_json({"offrl": ours, "d3rlpy": theirs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
