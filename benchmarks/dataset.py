#!/usr/bin/env python
"""Benchmark of ``offrl.dataset`` against the issue's targets, with d3rlpy
2.x side by side when it is available.

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/dataset.py                 # 1,000,000 steps
    python benchmarks/dataset.py --quick         # 100,000 steps, fewer repeats
    python benchmarks/dataset.py --steps 300000
    python benchmarks/dataset.py --d3rlpy-python /path/to/venv/bin/python
    python benchmarks/dataset.py --no-d3rlpy     # offrl only
    python benchmarks/dataset.py --dict-observations [--quick]   # dict vs tuple

The dataset is synthetic and seeded: 17-dim float32 observations, 6-dim
float32 actions, float32 rewards, episodes of 1,000 steps whose last step is
terminal. Measured per backend:

* ``MDPDataset`` build time (from the arrays above);
* ``sample_transition_batch(256)`` with the basic, the multi-step
  (``n_steps=3, gamma=0.99``) and the frame-stack (``n_frames=4``) picker.
  Frame stacking uses the same observations shaped ``(N, 1, 17)``, so a
  stacked observation is ``(4, 17)`` (stacked along axis 0) in both libraries;
* ``sample_trajectory_batch(64, 20)``;
* a bare numpy gather of 256 random rows (``obs[idx]``, ``actions[idx]``,
  ``rewards[idx]``, ``obs[idx + 1]``, index drawing included) as a floor;
* HDF5 ``dump`` and ``ReplayBuffer.load`` time (temporary file, removed);
* stored bytes of the built dataset against the bytes of the input arrays.

Per-call timings: warm-up, then the number of calls per round is calibrated
so a round lasts about 0.3 s (0.1 s with ``--quick``); the median over 5
rounds (3 with ``--quick``) of the mean time per call is reported, with the
garbage collector paused during a round.

``--dict-observations`` measures instead (offrl only; d3rlpy has no dict
observations) dict observations against the equivalent tuple observations,
side by side in interleaved rounds: the locomotion data split into a
``"joints"`` (11,) and a ``"velocity"`` (6,) key, and a small ``"camera"``
(3, 8, 8) uint8 key; ``sample_transition_batch(256)``, one SAC ``update``
on a sampled batch and ``predict`` on 256 rows (the same networks for both:
``DictEncoderFactory`` with a vector encoder per element), torch on one
thread; each figure is the median over interleaved rounds, and the ratio the
median of the per-round ratios.

d3rlpy is measured in a worker process: the interpreter given by
``--d3rlpy-python`` or ``$D3RLPY_PYTHON`` (skipped with a note when neither
is given) runs this same file with ``--backend d3rlpy --json``. The offrl backend never imports
d3rlpy and the d3rlpy backend never imports offrl.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from typing import Any, Callable, Optional

import numpy as np

from _data import ACTION_DIM, EPISODE_LENGTH, OBS_DIM, SEED, input_bytes
from _data import make_locomotion_data as make_data
from _harness import (add_common_args, d3rlpy_interpreter, format_table, log, print_load, quiet_d3rlpy, run_json,
                      time_once, time_per_call, worker_main)

BATCH_SIZE = 256
TRAJ_BATCH, TRAJ_LENGTH = 64, 20
N_STEPS, GAMMA = 3, 0.99
N_FRAMES = 4

# the targets (for 1,000,000 steps)
TARGETS = {
    "sample_basic_ms": 0.3,
    "picker_ratio": 3.0,
    "trajectory_ms": 1.0,
    "build_s": 0.3,
    "dump_load_s": 1.5,
    "memory_ratio": 1.2,
}


# ---------------------------------------------------------------- backends
class OffrlBackend:
    name = "offrl"

    def __init__(self) -> None:
        import offrl
        import offrl.dataset as D

        self.D = D
        self.version = offrl.__version__

    def build(self, data: dict, observations: Optional[np.ndarray] = None, picker: Any = None):
        obs = data["observations"] if observations is None else observations
        return self.D.MDPDataset(
            obs, data["actions"], data["rewards"], data["terminals"], transition_picker=picker
        )

    def with_picker(self, dataset: Any, data: dict, picker: Any, observations: Optional[np.ndarray] = None):
        return self.build(data, observations, picker)

    def multistep_picker(self):
        return self.D.MultiStepTransitionPicker(n_steps=N_STEPS, gamma=GAMMA)

    def framestack_picker(self):
        return self.D.FrameStackTransitionPicker(n_frames=N_FRAMES)

    def dump(self, dataset: Any, path: str) -> None:
        dataset.dump(path)

    def load(self, path: str):
        return self.D.ReplayBuffer.load(path, self.D.InfiniteBuffer())

    def memory(self, dataset: Any, data: dict) -> dict:
        store = dataset.buffer
        arrays = list(store._observations) + [
            store._actions, store._rewards,
            store._ep_start, store._ep_end, store._ep_terminated, store._ep_has_final,
        ]
        stored = int(sum(a.nbytes for a in arrays))
        shares = bool(np.shares_memory(store._observations[0], data["observations"]))
        return {"stored_bytes": stored, "estimate": False, "shares_input_observations": shares}


class D3rlpyBackend:
    name = "d3rlpy"

    def __init__(self) -> None:
        import d3rlpy
        import d3rlpy.dataset as D

        quiet_d3rlpy()
        self.D = D
        self.version = d3rlpy.__version__

    def build(self, data: dict, observations: Optional[np.ndarray] = None, picker: Any = None):
        obs = data["observations"] if observations is None else observations
        return self.D.MDPDataset(
            obs, data["actions"], data["rewards"], data["terminals"], transition_picker=picker
        )

    def with_picker(self, dataset: Any, data: dict, picker: Any, observations: Optional[np.ndarray] = None):
        if observations is not None:  # a different observation shape needs a new dataset
            return self.build(data, observations, picker)
        # share the already built buffer (a second 1M-step build takes seconds)
        info = dataset.dataset_info
        return self.D.ReplayBuffer(
            dataset.buffer,
            transition_picker=picker,
            observation_signature=info.observation_signature,
            action_signature=info.action_signature,
            reward_signature=info.reward_signature,
            action_space=info.action_space,
            action_size=info.action_size,
        )

    def multistep_picker(self):
        return self.D.MultiStepTransitionPicker(n_steps=N_STEPS, gamma=GAMMA)

    def framestack_picker(self):
        return self.D.FrameStackTransitionPicker(n_frames=N_FRAMES)

    def dump(self, dataset: Any, path: str) -> None:
        with open(path, "w+b") as f:
            dataset.dump(f)

    def load(self, path: str):
        with open(path, "rb") as f:
            return self.D.ReplayBuffer.load(f, self.D.InfiniteBuffer())

    def memory(self, dataset: Any, data: dict) -> dict:
        """Estimate: bytes of the episodes' arrays (views of the input) plus
        the transition index (a list of ``(episode, index)`` tuples)."""
        buffer = dataset.buffer
        arrays = 0
        for episode in buffer.episodes:
            obs = episode.observations
            arrays += sum(o.nbytes for o in obs) if isinstance(obs, (list, tuple)) else obs.nbytes
            arrays += episode.actions.nbytes + episode.rewards.nbytes
        transitions = getattr(buffer, "_transitions", None)
        if transitions is None:
            return {"stored_bytes": None, "estimate": True, "shares_input_observations": None}
        overhead = sys.getsizeof(transitions) + sys.getsizeof(buffer.episodes)
        if transitions:
            overhead += len(transitions) * sys.getsizeof(transitions[0])
            big = sum(1 for _, i in transitions if i > 256)  # ints outside CPython's small-int cache
            overhead += big * sys.getsizeof(10**6)
        overhead += len(buffer.episodes) * 1000  # Episode objects and array headers, roughly
        first = buffer.episodes[0].observations
        shares = bool(np.shares_memory(first, data["observations"])) if isinstance(first, np.ndarray) else None
        return {"stored_bytes": int(arrays + overhead), "estimate": True, "shares_input_observations": shares}


# ------------------------------------------------------------- measurement
def measure(backend_name: str, steps: int, quick: bool, log: Callable[[str], None]) -> dict:
    backend = OffrlBackend() if backend_name == "offrl" else D3rlpyBackend()
    round_s, rounds = (0.1, 3) if quick else (0.3, 5)
    data = make_data(steps)
    out: dict = {
        "backend": backend.name,
        "version": backend.version,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "steps": steps,
        "input_bytes": input_bytes(data),
    }

    log(f"[{backend.name}] building MDPDataset ({steps:,} steps)")
    out["build"], dataset = time_once(lambda: backend.build(data))
    out["transition_count"] = int(dataset.transition_count)
    out["memory"] = backend.memory(dataset, data)

    def sampler(ds: Any) -> Callable[[], Any]:
        return lambda: ds.sample_transition_batch(BATCH_SIZE)

    log(f"[{backend.name}] sample_transition_batch({BATCH_SIZE}), basic picker")
    out["sample_basic"] = time_per_call(sampler(dataset), round_s, rounds)
    out["shape_basic"] = list(np.shape(dataset.sample_transition_batch(BATCH_SIZE).observations))

    log(f"[{backend.name}] sample_transition_batch({BATCH_SIZE}), MultiStepTransitionPicker({N_STEPS}, {GAMMA})")
    multi = backend.with_picker(dataset, data, backend.multistep_picker())
    out["sample_multistep"] = time_per_call(sampler(multi), round_s, rounds)
    del multi

    log(f"[{backend.name}] sample_transition_batch({BATCH_SIZE}), FrameStackTransitionPicker({N_FRAMES})")
    framed = data["observations"].reshape(steps, 1, OBS_DIM)
    frames = backend.with_picker(dataset, data, backend.framestack_picker(), observations=framed)
    out["sample_framestack"] = time_per_call(sampler(frames), round_s, rounds)
    out["shape_framestack"] = list(np.shape(frames.sample_transition_batch(BATCH_SIZE).observations))
    del frames

    log(f"[{backend.name}] sample_trajectory_batch({TRAJ_BATCH}, {TRAJ_LENGTH})")
    out["trajectory"] = time_per_call(
        lambda: dataset.sample_trajectory_batch(TRAJ_BATCH, TRAJ_LENGTH), round_s, rounds
    )
    out["shape_trajectory"] = list(
        np.shape(dataset.sample_trajectory_batch(TRAJ_BATCH, TRAJ_LENGTH).observations)
    )

    log(f"[{backend.name}] numpy gather floor")
    obs, act, rew = data["observations"], data["actions"], data["rewards"]
    rng = np.random.default_rng(1)

    def gather() -> tuple:
        idx = rng.integers(0, steps - 1, size=BATCH_SIZE)
        return obs[idx], act[idx], rew[idx], obs[idx + 1]

    out["floor"] = time_per_call(gather, round_s, rounds)

    log(f"[{backend.name}] HDF5 dump / load")
    with tempfile.TemporaryDirectory(prefix="offrl-bench-") as tmp:
        path = os.path.join(tmp, "dataset.h5")

        def dump() -> None:
            if os.path.exists(path):
                os.remove(path)
            backend.dump(dataset, path)

        out["dump"], _ = time_once(dump)
        out["file_bytes"] = os.path.getsize(path)
        out["load"], loaded = time_once(lambda: backend.load(path))
        out["loaded_transition_count"] = int(loaded.transition_count)
        del loaded
        os.remove(path)
    return out


# -------------------------------------------------------------- d3rlpy run
def run_d3rlpy(args: argparse.Namespace) -> tuple[Optional[dict], str]:
    """d3rlpy results from its worker process and where they came from (or why there are none)."""
    python, note = d3rlpy_interpreter(args)
    if python is None:
        return None, note
    argv = ["--backend", "d3rlpy", "--json", "--steps", str(args.steps)] + (["--quick"] if args.quick else [])
    return run_json(python, __file__, argv, timeout=900)


# ----------------------------------------------------------------- report
def _fmt_ms(r: Optional[dict]) -> str:
    return "-" if r is None else f"{r['ms']:.3f} ms"


def _fmt_s(r: Optional[dict]) -> str:
    return "-" if r is None else f"{r['s']:.3f} s"


def _mb(n: Optional[int]) -> str:
    return "n/a" if n is None else f"{n / 1e6:.1f} MB"


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    if a is None or b is None or a <= 0:
        return "-"
    r = b / a
    return f"{r:.1f}x" if r < 100 else f"{r:.0f}x"


def _check(value: float, limit: float, extra: str = "") -> str:
    return ("ok" if value <= limit else "MISS") + extra


def report(o: dict, d: Optional[dict], d_source: str, quick: bool) -> str:
    def get(res: Optional[dict], *keys: str) -> Optional[float]:
        for k in keys:
            if res is None:
                return None
            res = res.get(k)
        return res

    rows = []

    def row(label, o_val, d_val, o_num, d_num, target, status):
        rows.append((label, o_val, d_val if d is not None else "-", _ratio(o_num, d_num), target, status))

    t = TARGETS
    ob, db = get(o, "build", "s"), get(d, "build", "s")
    row("MDPDataset build", _fmt_s(o["build"]), _fmt_s(d and d["build"]), ob, db,
        f"<= {t['build_s']} s", _check(ob, t["build_s"]))

    basic = get(o, "sample_basic", "ms")
    row(f"sample_transition_batch({BATCH_SIZE})", _fmt_ms(o["sample_basic"]), _fmt_ms(d and d["sample_basic"]),
        basic, get(d, "sample_basic", "ms"), f"<= {t['sample_basic_ms']} ms", _check(basic, t["sample_basic_ms"]))
    for key, label in (
        ("sample_multistep", f"  + MultiStep({N_STEPS}, {GAMMA})"),
        ("sample_framestack", f"  + FrameStack({N_FRAMES}), obs (1,{OBS_DIM})"),
    ):
        v = get(o, key, "ms")
        row(label, _fmt_ms(o[key]), _fmt_ms(d and d[key]), v, get(d, key, "ms"),
            f"<= {t['picker_ratio']:g}x basic", _check(v / basic, t["picker_ratio"], f" ({v / basic:.2f}x)"))
    v = get(o, "trajectory", "ms")
    row(f"sample_trajectory_batch({TRAJ_BATCH}, {TRAJ_LENGTH})", _fmt_ms(o["trajectory"]),
        _fmt_ms(d and d["trajectory"]), v, get(d, "trajectory", "ms"),
        f"<= {t['trajectory_ms']} ms", _check(v, t["trajectory_ms"]))
    v = get(o, "floor", "ms")
    row(f"numpy gather floor ({BATCH_SIZE} rows)", _fmt_ms(o["floor"]), _fmt_ms(d and d["floor"]),
        v, get(d, "floor", "ms"), "-", f"basic = {basic / v:.1f}x floor")
    for key, label in (("dump", "HDF5 dump"), ("load", "HDF5 load")):
        row(label, _fmt_s(o[key]), _fmt_s(d and d[key]), get(o, key, "s"), get(d, key, "s"), "", "")
    odl = o["dump"]["s"] + o["load"]["s"]
    ddl = d["dump"]["s"] + d["load"]["s"] if d else None
    row("HDF5 dump + load", f"{odl:.3f} s", "-" if ddl is None else f"{ddl:.3f} s", odl, ddl,
        f"<= {t['dump_load_s']} s", _check(odl, t["dump_load_s"]))
    row("HDF5 file size", _mb(o["file_bytes"]), _mb(d and d["file_bytes"]),
        o["file_bytes"], d and d["file_bytes"], "-", "")
    om = o["memory"]["stored_bytes"]
    dm = get(d, "memory", "stored_bytes")
    d_est = "~" if get(d, "memory", "estimate") else ""
    row("stored bytes", _mb(om), (d_est + _mb(dm)) if dm is not None else "n/a", om, dm, "-", "")
    o_ratio = om / o["input_bytes"]
    d_ratio = None if dm is None else dm / d["input_bytes"]
    row(f"stored / input ({o['input_bytes'] / 1e6:.1f} MB)", f"{o_ratio:.2f}x",
        "n/a" if d_ratio is None else f"{d_est}{d_ratio:.2f}x", o_ratio, d_ratio,
        f"<= {t['memory_ratio']}x", _check(o_ratio, t["memory_ratio"]))

    header = ("operation", "offrl", "d3rlpy", "d3rlpy/offrl", "target", "offrl vs target")
    lines = []
    episodes = -(-o["steps"] // EPISODE_LENGTH)
    lines.append(
        f"Dataset: {o['steps']:,} steps ({episodes:,} episodes of <= {EPISODE_LENGTH:,}, last step terminal), "
        f"obs ({OBS_DIM},) float32, actions ({ACTION_DIM},) float32, seed {SEED}"
    )
    lines.append(f"offrl {o['version']} (python {o['python']}, numpy {o['numpy']})")
    if d is not None:
        lines.append(f"d3rlpy {d['version']} (python {d['python']}, numpy {d['numpy']}), {d_source}")
    else:
        lines.append(f"d3rlpy: {d_source}")
    lines.append("")
    lines.extend(format_table(header, rows).splitlines())
    lines.append("")
    notes = [
        f"per-call times: median of {o['sample_basic']['rounds']} rounds "
        f"(offrl basic: {o['sample_basic']['calls_per_round']} calls/round); build/dump/load: median of up to 3 runs "
        "(1 run when the first takes >= 1 s)",
        "numpy floor = obs[idx], actions[idx], rewards[idx], obs[idx+1] for 256 random rows, index drawing included",
        "offrl dumps to a path, d3rlpy to a binary file object (its only form); both load the whole file",
        f"offrl stored bytes = store observation/action/reward columns + episode table; observations "
        f"{'shared with' if o['memory']['shares_input_observations'] else 'copied from'} the input array",
    ]
    if d is not None:
        notes.append(
            "d3rlpy multi-step sampling reuses the built buffer through ReplayBuffer(buffer, picker, signatures); "
            "frame-stack builds a second MDPDataset from the (N, 1, 17) view"
        )
        if get(d, "memory", "estimate"):
            notes.append(
                "d3rlpy stored bytes is an estimate: episode arrays (views of the input) + its list of "
                "(episode, index) tuples and index ints"
            )
        for key in ("shape_basic", "shape_framestack", "shape_trajectory"):
            if o[key] != d[key]:
                notes.append(f"WARNING: {key} differs: offrl {o[key]} vs d3rlpy {d[key]}")
        if o["transition_count"] != d["transition_count"]:
            notes.append(
                f"transition counts differ: offrl {o['transition_count']:,}, d3rlpy {d['transition_count']:,}"
            )
    if o["loaded_transition_count"] != o["transition_count"]:
        notes.append("WARNING: offrl's loaded dataset has a different transition count")
    if quick or o["steps"] != 1_000_000:
        notes.append("targets are stated for 1,000,000 steps; this run used fewer/more")
    lines.extend(f"* {n}" for n in notes)
    return "\n".join(lines)


def measure_dict(steps: int, quick: bool) -> str:
    """Dict vs equivalent tuple observations (see the module docstring)."""
    import torch

    import offrl
    from _harness import FULL, QUICK, loop, paired_ratio, run_rounds

    torch.set_num_threads(1)  # one thread: stable figures on a shared machine
    settings = QUICK if quick else FULL
    data = make_data(steps)
    rng = np.random.default_rng(SEED)
    obs = data["observations"]
    by_key = {
        "joints": np.ascontiguousarray(obs[:, :11]),
        "velocity": np.ascontiguousarray(obs[:, 11:]),
        "camera": rng.integers(0, 256, size=(steps, 3, 8, 8), dtype=np.uint8),
    }
    as_tuple = [by_key[k] for k in sorted(by_key)]
    flags = (data["actions"], data["rewards"], data["terminals"])
    datasets = {
        "dict": offrl.dataset.MDPDataset(by_key, *flags),
        "tuple": offrl.dataset.MDPDataset(as_tuple, *flags),
    }
    # the same networks for both (one vector encoder per element; the camera
    # is too small for the pixel encoder): only the observation form differs
    vector = offrl.models.VectorEncoderFactory(hidden_units=[64, 64])
    factory = offrl.models.DictEncoderFactory({"camera": vector, "joints": vector, "velocity": vector})
    algos = {}
    for name, dataset in datasets.items():
        offrl.seed(0)
        algo = offrl.algos.SACConfig(batch_size=BATCH_SIZE, actor_encoder_factory=factory,
                                     critic_encoder_factory=factory).create()
        algo.build_with_dataset(dataset)
        algos[name] = algo
    batches = {n: d.sample_transition_batch(BATCH_SIZE) for n, d in datasets.items()}
    x_dict = {k: v[:BATCH_SIZE] for k, v in by_key.items()}
    inputs = {"dict": x_dict, "tuple": [x_dict[k] for k in sorted(x_dict)]}

    results = {}
    for label, make in (
        ("sample_transition_batch(256)", lambda n: loop(lambda: datasets[n].sample_transition_batch(BATCH_SIZE))),
        ("SAC update (sampled batch)", lambda n: loop(lambda: algos[n].update(batches[n]))),
        ("SAC predict (256 rows)", lambda n: loop(lambda: algos[n].predict(inputs[n]))),
    ):
        timed = run_rounds({n: make(n) for n in ("dict", "tuple")}, settings.call_round_s * 4, settings.call_rounds,
                           warmup=settings.warmup)
        results[label] = (timed["dict"]["ms"], timed["tuple"]["ms"], paired_ratio(timed["dict"], timed["tuple"]))
    rows = [[label, f"{d:.3f}", f"{t:.3f}", f"{r:.2f}x"] for label, (d, t, r) in results.items()]
    return format_table(["dict vs tuple observations", "dict ms", "tuple ms", "dict/tuple"], rows)


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, quick_help="100,000 steps and fewer repeats", threads=False)  # no torch here
    parser.add_argument("--steps", type=int, default=None, help="dataset size (default 1,000,000)")
    parser.add_argument("--backend", choices=("offrl", "d3rlpy"), default=None,
                        help="measure one backend only")
    parser.add_argument("--json", action="store_true", help="print the results of --backend as JSON")
    parser.add_argument("--dict-observations", action="store_true",
                        help="dict vs equivalent tuple observations: sampling, one SAC update, predict (offrl only)")
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 100_000 if args.quick else 1_000_000
    if args.steps < 2 * EPISODE_LENGTH:
        parser.error(f"--steps must be at least {2 * EPISODE_LENGTH}, got {args.steps}")
    if args.dict_observations:
        print_load("start")
        print(measure_dict(args.steps, args.quick))
        print_load("end")
        return 0

    started = time.perf_counter()
    if args.backend is not None:
        if args.json:
            return worker_main(lambda: measure(args.backend, args.steps, args.quick, log))
        print(json.dumps(measure(args.backend, args.steps, args.quick, log), indent=2))
        return 0

    print_load("start")
    offrl_results = measure("offrl", args.steps, args.quick, log)
    gc.collect()
    d3_results, d3_source = run_d3rlpy(args)
    print_load("end")
    print(report(offrl_results, d3_results, d3_source, args.quick))
    print(f"* total benchmark time {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
