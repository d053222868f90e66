#!/usr/bin/env python
"""Check every algorithm on a CUDA device and measure its update rate.

Run from the repository root on a machine with a GPU (offrl installed):

    python benchmarks/gpu_check.py [--steps N] [--only SACConfig,DQNConfig] [--quick] [--precision float32]
                                   [--hidden-units 4096,4096 --batch-size 1024] [--matmul-precision high]

For each algorithm (default configs) and each ``--precision`` (default:
float32 and bf16-mixed) it fits on a Pendulum-like (continuous) or
CartPole-like (discrete) dataset on ``--device`` (``cuda:0``), runs
``training_step`` (what ``fit`` calls) under
``torch.cuda.set_sync_debug_mode("error")`` to prove the hot loop never
waits for the GPU, checks predict / predict_value / save / load on the
device, and prints updates per second (``fit``, sampling included: one
epoch per fit, so the epoch's end, its weight check and rollback copy,
is in the figure) and ms per ``training_step`` on one fixed batch. Exits 1
if any check fails.

bf16-mixed (issue 32) also gets: the precision in effect (a device with bf16
units, CUDA capability 8.0 or newer, must run it; on one without, float32
is the documented fallback and no failure), its speed against float32, and
one update from the same weights and batch in both precisions, whose
losses must agree within ``tests/test_precision.py``'s bound for networks
with two hidden layers (12 u relative, u = 2**-8 bf16's unit roundoff).
On a GPU, bf16-mixed trains in float32 where the step's largest product is
under ``offrl.training.precision.CUDA_BF16_PAYS_FROM`` (d3rlpy's default
networks; no failure): ``--hidden-units`` (every encoder factory's hidden
layers) and ``--batch-size`` check bf16 itself on networks large enough.
``--device cpu`` runs the same checks on the CPU (a smoke run; there the
algorithms with a written-out float32 step run it under bf16-mixed below
256 rows, see ``offrl.training.precision``, which is no failure either).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from typing import Tuple

import numpy as np
import torch

import offrl
from offrl import algos
from offrl.dataset import MDPDataset
from offrl.logging import NoopAdapterFactory
from offrl.models import VectorEncoderFactory

from offrl.training.precision import CUDA_BF16_PAYS_FROM, PRECISIONS, WRITTEN_OUT_FASTER_BELOW, bf16_available

from _harness import add_common_args, check_threads, parse_only, print_load, print_table, set_threads

U = 2.0 ** -8  # bf16's unit roundoff (8 significant bits)
#: the algorithms whose float32 step is written out on the CPU (offrl.models.plain_mlp), at their default networks
WRITTEN_OUT = {"DQNConfig", "DoubleDQNConfig", "NFQConfig", "DiscreteCQLConfig", "DiscreteBCQConfig", "DiscreteSACConfig",
               "BCConfig", "DiscreteBCConfig", "DDPGConfig", "TD3Config", "TD3PlusBCConfig", "PRDCConfig", "AWACConfig", "CRRConfig"}
TOLERANCE = 12 * U  # tests/test_precision.py's bound for two hidden layers, relative to |loss| + 1
CONTINUOUS = ["BCConfig", "DDPGConfig", "TD3Config", "TD3PlusBCConfig", "IQLConfig", "SACConfig", "CQLConfig"]
DISCRETE = ["DQNConfig", "DoubleDQNConfig", "NFQConfig", "DiscreteCQLConfig", "DiscreteBCConfig", "DiscreteSACConfig"]


def pendulum_like(n: int = 20_000, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    timeouts = np.zeros(n)
    timeouts[199::200] = 1
    return MDPDataset(
        rng.normal(size=(n, 3)).astype(np.float32), rng.uniform(-2, 2, size=(n, 1)).astype(np.float32),
        rng.normal(size=n).astype(np.float32), np.zeros(n), timeouts,
    )


def cartpole_like(n: int = 20_000, seed: int = 0) -> MDPDataset:
    rng = np.random.default_rng(seed)
    terminals = (rng.random(n) < 0.02).astype(np.float32)
    return MDPDataset(rng.normal(size=(n, 4)).astype(np.float32), rng.integers(0, 2, n), np.ones(n, np.float32), terminals, action_size=2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(parser, only=CONTINUOUS + DISCRETE, quick_help="50 timed updates per algorithm", d3rlpy=False)
    parser.add_argument("--steps", type=int, default=500, help="timed updates per algorithm")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--precision", default="float32,bf16-mixed",
                        help="comma-separated precisions to check (default float32,bf16-mixed)")
    parser.add_argument("--hidden-units", default=None, help="every encoder's hidden layers, e.g. 4096,4096")
    parser.add_argument("--batch-size", type=int, default=None, help="every algorithm's batch size")
    parser.add_argument("--matmul-precision", choices=("highest", "high", "medium"), default="highest",
                        help="torch.set_float32_matmul_precision for the run (default highest: float32 products; "
                             "d3rlpy sets high, TF32 on a GPU, when it is imported on a machine with CUDA)")
    args = parser.parse_args()
    try:
        hidden = [int(h) for h in args.hidden_units.split(",")] if args.hidden_units else None
    except ValueError:
        parser.error(f"--hidden-units: expected comma-separated integers, got {args.hidden_units!r}")
    if (hidden is not None and min(hidden) < 1) or (args.batch_size is not None and args.batch_size < 1):
        parser.error("--hidden-units and --batch-size must be positive")
    SIZES.update({} if args.batch_size is None else {"batch_size": args.batch_size})
    SIZES.update({} if hidden is None else {"hidden_units": hidden})
    check_threads(args, parser)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    chosen = set(parse_only(args.only, CONTINUOUS + DISCRETE, parser))
    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    unknown = [p for p in precisions if p not in PRECISIONS]
    if unknown or not precisions:
        parser.error(f"--precision: unknown {unknown or '(none given)'}; expected some of {list(PRECISIONS)}")
    steps = 50 if args.quick else args.steps
    device = args.device
    print_load("start")
    set_threads(args.threads)
    torch.set_float32_matmul_precision(args.matmul_precision)
    cuda = torch.device(device).type == "cuda"
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name(device) if cuda else device}, "
          f"bf16 units: {bf16_available(torch.device(device))}, float32 matmul precision {args.matmul_precision}")
    datasets = {False: pendulum_like(), True: cartpole_like()}
    failures = 0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for names, discrete in ((CONTINUOUS, False), (DISCRETE, True)):
            dataset = datasets[discrete]
            for name in names:
                if name not in chosen:
                    continue
                rates = {}
                for precision in precisions:
                    rate, step_ms, sync_free, same, value_ok, in_effect = check(name, dataset, discrete, device, steps, tmp,
                                                                                 precision)
                    rates[precision] = rate
                    # a device with bf16 units must run bf16-mixed; without them float32 is the fallback, and so it
                    # is on the CPU for an algorithm whose written-out float32 step is the faster one at its batch size
                    effect_ok = (in_effect == precision or not bf16_available(torch.device(device))
                                 or (in_effect == "float32" and (written_out_cpu(name, device)
                                                                 or products_too_small(name, dataset, device))))
                    agreement, agree_ok = "-", True
                    if precision != "float32":
                        worst = one_update_agreement(name, dataset, discrete, device, precision)
                        agreement, agree_ok = f"{worst / U:.3f} u", worst <= TOLERANCE
                    speed = f"{rate / rates['float32']:.2f}x" if precision != "float32" and "float32" in rates else "-"
                    passed = same and value_ok and sync_free and effect_ok and agree_ok
                    failures += not passed
                    rows.append((name, precision, in_effect, f"{rate:.1f}", f"{step_ms:.3f}", speed, sync_free, same, value_ok,
                                 agreement, "ok" if passed else "FAILED"))
    print_table(["algorithm", "precision", "in effect", "updates/s (fit, incl. sampling)", "training_step ms", "vs float32",
                 "sync-free",
                 "save/load", "predict_value", "one update vs float32", "result"],
                rows, title=f"{steps} timed updates per algorithm on {device}" + (f", sizes {SIZES}" if SIZES else ""))
    print_load("end")
    sys.exit(1 if failures else 0)


#: ``--batch-size`` / ``--hidden-units`` given: the sizes every config is made with
SIZES: dict = {}


def make_config(name: str, precision: str) -> object:
    """``name``'s config at ``precision`` with ``SIZES``'s batch size and
    hidden layers (every ``*encoder_factory`` field)."""
    config_class = getattr(algos, name)
    kwargs = {} if precision == "float32" else {"precision": precision}
    if "batch_size" in SIZES:
        kwargs["batch_size"] = SIZES["batch_size"]
    if "hidden_units" in SIZES:
        kwargs.update({f.name: VectorEncoderFactory(hidden_units=SIZES["hidden_units"])
                       for f in dataclasses.fields(config_class) if f.name.endswith("encoder_factory")})
    return config_class(**kwargs)


def products_too_small(name: str, dataset: MDPDataset, device: str) -> bool:
    """Whether bf16-mixed trains ``name`` in float32 on this GPU because its
    step's largest product is under ``CUDA_BF16_PAYS_FROM``."""
    algo = make_config(name, "bf16-mixed").create(device=device)
    algo.build_with_dataset(dataset)
    product = algo._largest_product()
    return torch.device(device).type == "cuda" and product is not None and product < CUDA_BF16_PAYS_FROM


def written_out_cpu(name: str, device: str) -> bool:
    """Whether ``name`` at its default batch size on ``device`` runs its
    written-out float32 step under bf16-mixed (the CPU, fewer rows than the
    algorithm's ``_written_out_faster_below``, an algorithm with such a step)."""
    config = make_config(name, "float32")
    below = getattr(getattr(algos, name[: -len("Config")]), "_written_out_faster_below", WRITTEN_OUT_FASTER_BELOW)
    return torch.device(device).type == "cpu" and name in WRITTEN_OUT and int(config.batch_size) < below


def _synchronize(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def check(name: str, dataset: MDPDataset, discrete: bool, device: str, steps: int, tmp: str, precision: str = "float32"
          ) -> Tuple[float, float, bool, bool, bool, str]:
    """(``fit``'s updates per second, ms per ``training_step`` on one fixed
    batch, no host sync in training_step, save/load gives the same actions,
    predict_value finite with shape (7,), the precision in effect) for one
    algorithm."""
    offrl.seed(0)
    algo = make_config(name, precision).create(device=device)
    algo.fit(dataset, n_steps=20, n_steps_per_epoch=20, logger_adapter=NoopAdapterFactory(), show_progress=False)
    batch = dataset.sample_transition_batch(algo.batch_size).to_torch(algo.device)
    _synchronize(device)
    sync_free = True
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(5):
            algo.training_step(batch)
    except RuntimeError as e:
        sync_free = False
        print(f"  {name} {precision}: host sync inside training_step: {str(e).splitlines()[0]}")
    finally:
        if cuda:
            torch.cuda.set_sync_debug_mode("default")
    _synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        algo.training_step(batch)
    _synchronize(device)
    step_ms = (time.perf_counter() - start) / steps * 1e3
    start = time.perf_counter()
    algo.fit(dataset, n_steps=steps, n_steps_per_epoch=steps, logger_adapter=NoopAdapterFactory(), show_progress=False)
    _synchronize(device)
    rate = steps / (time.perf_counter() - start)
    arrays = dataset.to_arrays()
    x = arrays["observations"][:7]
    actions = algo.predict(x)
    path = os.path.join(tmp, f"{name}.d3")
    algo.save(path)
    loaded = offrl.load_learnable(path, device=device)
    same = bool(np.array_equal(loaded.predict(x), actions))
    value_ok = True
    if algo.has_q_function:
        a = arrays["actions"][:7]
        values = algo.predict_value(x, a[:, 0] if discrete else a)
        value_ok = bool(values.shape == (7,) and np.isfinite(values).all())
    return rate, step_ms, sync_free, same, value_ok, algo.precision


def one_update_agreement(name: str, dataset: MDPDataset, discrete: bool, device: str, precision: str) -> float:
    """The worst relative difference ``|loss - loss_f32| / (|loss_f32| + 1)``
    over the losses of one update at ``precision`` and one in float32, from
    the same weights, batch and random draws."""
    twins = {}
    for p in ("float32", precision):
        offrl.seed(0)
        algo = make_config(name, p).create(device=device)
        algo.build_with_dataset(dataset)
        twins[p] = algo
    twins[precision].modules.load_state_dict(twins["float32"].modules.state_dict())
    offrl.seed(1)
    batch = dataset.sample_transition_batch(twins["float32"].batch_size)
    losses = {}
    for p, algo in twins.items():
        torch.manual_seed(2)  # the same noise (SAC's samples, CQL's random actions) in both
        losses[p] = algo.update(batch)
    return max(abs(losses[precision][k] - v) / (abs(v) + 1.0) for k, v in losses["float32"].items())

if __name__ == "__main__":
    main()
