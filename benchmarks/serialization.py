#!/usr/bin/env python
"""Model-file save and load time: format version 2 (a safetensors file with
offrl's JSON, read without an unpickler) against version 1 (a ``torch.save``
archive read with ``torch.load(weights_only=True)``, offrl's format before).

Run from the repository root (offrl installed, e.g. ``pip install -e .``):

    python benchmarks/serialization.py            # about 1 min
    python benchmarks/serialization.py --quick    # a smoke run
    python benchmarks/serialization.py --only SAC,DecisionTransformer

Cases: DQN, SAC, CQL and DecisionTransformer at their default configs
(17-dim observations; 6 continuous actions, DQN 4 discrete), and SAC with
three hidden layers of 1,024 units ("SAC-large", about 10x the numbers),
each fitted 2 steps so their files hold Adam's moments too. Four variants
per case in interleaved rounds (``_harness.run_rounds``; ms per call,
medians of rounds, ratios medians of per-round ratios):

* ``save``: ``algo.save`` (version 2) against ``torch.save`` of the same
  payload (version 1), both through ``offrl._atomic.atomic_write`` (a
  temporary, fsync, rename), as offrl's writers use it;
* ``read``: ``offrl.serialization.read_model_file``: the file read and its
  entries checked (types, finite values), nothing built: the format's own
  cost;
* ``load``: ``offrl.load_learnable`` of each file: reading, every check on
  the content and the declared sizes, building the algorithm and loading
  its state (version 1 goes through ``torch.load``, allowed on torch >=
  2.10).

The files go to ``--dir`` (default: a temporary folder in ``/dev/shm``
where there is one, so the disk's fsync latency does not drown the format's
cost; pass ``--dir /tmp`` to include it). torch runs one thread.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from typing import Any, Dict, List

import numpy as np

from _harness import (FULL, QUICK, add_common_args, check_threads, fmt, loop, paired_ratio, parse_only, print_load,
                      print_table, run_rounds, set_threads)

CASES = ("DQN", "SAC", "CQL", "DecisionTransformer", "SAC-large")
OBSERVATION_DIM, ACTION_DIM, N_DISCRETE = 17, 6, 4


def _dataset(discrete: bool) -> Any:
    import offrl

    rng = np.random.default_rng(0)
    n = 2000
    actions = rng.integers(N_DISCRETE, size=n) if discrete else rng.uniform(-1, 1, (n, ACTION_DIM)).astype(np.float32)
    return offrl.dataset.MDPDataset(rng.normal(size=(n, OBSERVATION_DIM)).astype(np.float32), actions,
                                    rng.normal(size=n).astype(np.float32), (np.arange(n) % 200 == 199).astype(np.float32),
                                    action_size=N_DISCRETE if discrete else None)


def build(name: str) -> Any:
    """A default-config algorithm (``SAC-large``: 3 x 1,024 hidden units)
    fitted 2 steps, so its optimizers hold state."""
    import offrl
    from offrl import algos
    from offrl.models import VectorEncoderFactory

    offrl.seed(0)
    if name == "SAC-large":
        wide = VectorEncoderFactory(hidden_units=[1024, 1024, 1024])
        config: Any = algos.SACConfig(actor_encoder_factory=wide, critic_encoder_factory=wide)
    else:
        config = getattr(algos, f"{name}Config")()
    algo = config.create(device="cpu")
    algo.fit(_dataset(name == "DQN"), n_steps=2, n_steps_per_epoch=2, show_progress=False,
             logger_adapter=offrl.logging.NoopAdapterFactory())
    return algo


def measure(names: List[str], quick: bool, directory: str) -> List[Dict[str, Any]]:
    import torch

    import offrl
    from offrl._atomic import atomic_write
    from offrl.serialization import dumps, model_payload, read_model_file

    settings = QUICK if quick else FULL
    rows = []
    for name in names:
        algo = build(name)
        v1, v2 = os.path.join(directory, f"{name}.v1.d3"), os.path.join(directory, f"{name}.v2.d3")

        def save_v1(algo: Any = algo, path: str = v1) -> None:
            payload = {**model_payload(algo), "format_version": 1, "params": dumps(algo.to_params())}
            atomic_write(path, lambda tmp: torch.save(payload, tmp))

        def save_v2(algo: Any = algo, path: str = v2) -> None:
            algo.save(path)

        save_v1()
        save_v2()
        x = np.random.default_rng(1).normal(size=(4, OBSERVATION_DIM)).astype(np.float32)
        if name != "DecisionTransformer":  # both files give the saved algorithm's predictions
            for path in (v1, v2):
                np.testing.assert_array_equal(offrl.load_learnable(path).predict(x), algo.predict(x))
        timed = run_rounds({
            "save v1": loop(save_v1), "save v2": loop(save_v2),
            "read v1": loop(lambda path=v1: read_model_file(path)),
            "read v2": loop(lambda path=v2: read_model_file(path)),
            "load v1": loop(lambda path=v1: offrl.load_learnable(path)),
            "load v2": loop(lambda path=v2: offrl.load_learnable(path)),
        }, settings.cmp_round_s, settings.main_rounds, warmup=2)
        rows.append({"case": name, "numbers": sum(p.numel() for p in algo.modules.parameters()),
                     "size_v1": os.path.getsize(v1), "size_v2": os.path.getsize(v2), "timed": timed,
                     "save_ratio": paired_ratio(timed["save v2"], timed["save v1"]),
                     "read_ratio": paired_ratio(timed["read v2"], timed["read v1"]),
                     "load_ratio": paired_ratio(timed["load v2"], timed["load v1"])})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=CASES, d3rlpy=False)
    parser.add_argument("--dir", default=None, help="where the files are written (default: a folder in /dev/shm)")
    args = parser.parse_args()
    check_threads(args, parser)
    names = parse_only(args.only, CASES, parser)
    set_threads(args.threads)
    import torch

    base = args.dir if args.dir else ("/dev/shm" if os.path.isdir("/dev/shm") else None)
    directory = tempfile.mkdtemp(prefix="offrl-serialization-", dir=base)
    print(f"torch {torch.__version__}, files in {directory}")
    print_load("start")
    try:
        rows = measure(names, args.quick, directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    print_table(
        ["case", "parameters", "v1 kB", "v2 kB", "save v1 ms", "save v2 ms", "v2/v1", "read v1 ms", "read v2 ms",
         "v2/v1", "load v1 ms", "load v2 ms", "v2/v1"],
        [[r["case"], r["numbers"], fmt(r["size_v1"] / 1e3, "{:.0f}"), fmt(r["size_v2"] / 1e3, "{:.0f}"),
          fmt(r["timed"]["save v1"]["ms"], "{:.2f}"), fmt(r["timed"]["save v2"]["ms"], "{:.2f}"),
          fmt(r["save_ratio"], "{:.2f}"), fmt(r["timed"]["read v1"]["ms"], "{:.2f}"),
          fmt(r["timed"]["read v2"]["ms"], "{:.2f}"), fmt(r["read_ratio"], "{:.2f}"), fmt(r["timed"]["load v1"]["ms"], "{:.2f}"),
          fmt(r["timed"]["load v2"]["ms"], "{:.2f}"), fmt(r["load_ratio"], "{:.2f}")] for r in rows],
        title="model files, format version 2 (safetensors + JSON) against version 1 (torch.save archive)")
    print_load("end")


if __name__ == "__main__":
    main()
