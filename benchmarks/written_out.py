#!/usr/bin/env python
"""The written-out backward passes and the one-column ensemble heads (issue
32): what each saves, and where bf16-mixed stops paying against them.

    python benchmarks/written_out.py [--quick] [--only DQN,BC] [--threads 1]

Three tables, all offrl only (one process, interleaved rounds, ratios are
medians of per-round ratios):

1. **Written out against autograd**: sample + ``update`` of each algorithm
   whose step can be written out (``offrl.models.plain_mlp``; DiscreteBCQ with
   its imitator on the shared encoder; DDPG, TD3, TD3PlusBC, PRDC, and PLAS
   and PLASWithPerturbation past their warm-up; AWAC and CRR, and IQL's policy; SAC, and
   CQL's actor and temperature; IQL's critics and value function), at its default
   config on ``algos.py``'s data, with the written-out step and with
   ``plain_backward_enabled(False)`` (autograd's step, the same maths);
   FQE and DiscreteFQE evaluate an IQL / DQN policy as in ``ope.py``.
2. **bf16-mixed against the written-out float32 step** at 32, 64, 128 and
   256 rows (DQN, DiscreteCQL, DiscreteBCQ, DiscreteSAC, BC, TD3PlusBC, CRR,
   AWAC, SAC, IQL, PLAS, PLASWithPerturbation): the measurement behind
   ``offrl.training.precision.WRITTEN_OUT_FASTER_BELOW`` and the
   algorithms' own thresholds; bf16-mixed as it runs from its threshold on
   (autocast, and the written-out passes with bf16 products), and autocast
   with autograd alone (the written-out passes off).
   Skipped where the CPU has no bf16 units.
3. **One-column value heads**: sample + ``update`` of SAC, TD3PlusBC, IQL
   and CQL with the critic ensembles' one-column heads as per-member 2-D
   products (``offrl.models.layers._OneColumnEnsembleLinear``) against the
   batched ``baddbmm`` they replaced.

The CPU's bf16 flags and the load are printed beside the figures.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable, Dict, List, Optional

from _data import make_data
from _harness import (FULL, QUICK, add_common_args, check_threads, loop, paired_ratio, parse_only, print_load,
                      print_table, run_rounds, set_threads)
from _specs import SPECS, prepare_offrl

WRITTEN_OUT = ["DQN", "DoubleDQN", "NFQ", "DiscreteCQL", "DiscreteBCQ", "DiscreteSAC", "BC", "DiscreteBC", "FQE", "DiscreteFQE",
               "DDPG", "TD3", "TD3PlusBC", "PRDC", "PLAS", "PLASWithPerturbation", "AWAC", "CRR", "IQL", "SAC", "CQL"]
BF16_ROWS = [32, 64, 128, 256]
BF16_ALGOS = ["DQN", "DiscreteCQL", "DiscreteBCQ", "DiscreteSAC", "BC", "TD3PlusBC", "CRR", "AWAC", "SAC", "IQL", "PLAS",
              "PLASWithPerturbation"]
ONE_COLUMN = ["SAC", "TD3PlusBC", "IQL", "CQL"]
#: algos.py's data for each algorithm (FQE: the evaluated policy's)
DATA = {"DoubleDQN": "DQN", "DiscreteBC": "DQN", "FQE": "IQL", "DiscreteFQE": "DQN"}


def make(name: str, bf16_from: Optional[int] = None, **config: Any) -> Callable[[], None]:
    """One sample + update of ``name`` at its defaults (``config`` changed;
    ``bf16_from``: the rows from which bf16-mixed runs bf16, in place of the
    algorithm's measured threshold)."""
    import offrl
    from offrl.dataset import MDPDataset

    data = make_data(SPECS[DATA.get(name, name)].data)
    dataset = MDPDataset(data["observations"], data["actions"], data["rewards"], data["terminals"], data["timeouts"])
    offrl.seed(0)
    if name in ("FQE", "DiscreteFQE"):
        policy = (offrl.algos.IQLConfig() if name == "FQE" else offrl.algos.DQNConfig()).create(device="cpu")
        policy.build_with_dataset(dataset)
        config_class = offrl.ope.FQEConfig if name == "FQE" else offrl.ope.DiscreteFQEConfig
        algo = getattr(offrl.ope, name)(algo=policy, config=config_class(**config), device="cpu")
    else:
        algo = getattr(offrl.algos, f"{name}Config")(**config).create(device="cpu")
    if bf16_from is not None:
        algo._written_out_faster_below = bf16_from
    algo.build_with_dataset(dataset)
    if name not in ("FQE", "DiscreteFQE"):
        prepare_offrl(name, algo, dataset)  # PRDC's neighbour index; the PLAS family past its VAE warm-up
    batch_size = algo.batch_size

    def step() -> None:
        algo.update(dataset.sample_transition_batch(batch_size))

    return step


def switched(step: Callable[[], None], flag: Callable[[bool], Any], value: bool) -> Callable[[int], None]:
    """``loop(step)`` with ``flag(value)`` set around each run of steps."""
    run = loop(step)

    def runner(k: int) -> None:
        flag(value)
        try:
            run(k)
        finally:
            flag(True)

    return runner


def one_column(enabled: bool) -> None:
    """The one-column heads on (the default) or replaced by ``baddbmm``."""
    import torch

    from offrl.models import layers

    if "apply" not in _SAVED:
        _SAVED["apply"] = layers._OneColumnEnsembleLinear.apply
    layers._OneColumnEnsembleLinear.apply = (
        _SAVED["apply"] if enabled else staticmethod(lambda x, weight, bias: torch.baddbmm(bias, x, weight)))


_SAVED: Dict[str, Any] = {}


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, only=WRITTEN_OUT + ONE_COLUMN, d3rlpy=False)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    names = parse_only(args.only, WRITTEN_OUT + ONE_COLUMN, parser)
    set_threads(args.threads)
    from offrl.models.plain_mlp import plain_backward_enabled
    from offrl.training import precision

    settings = QUICK if args.quick else FULL
    round_s, rounds = settings.cmp_round_s * 2, settings.cmp_rounds * 2
    load = print_load("start")
    rows = []
    for name in [n for n in names if n in WRITTEN_OUT]:
        step = make(name)
        res = run_rounds({"written": switched(step, plain_backward_enabled, True),
                          "autograd": switched(step, plain_backward_enabled, False)}, round_s, rounds)
        rows.append([name, f"{res['written']['ms']:.3f}", f"{res['autograd']['ms']:.3f}",
                     f"{paired_ratio(res['autograd'], res['written']):.2f}x"])
    if rows:
        print_table(["algorithm", "written out ms/update", "autograd ms/update", "speed-up"], rows,
                    title="1. written-out step against autograd's (sample + update, float32)")
    bf16 = precision.bf16_available("cpu")
    rows = []
    for name in [n for n in names if n in BF16_ALGOS] if bf16 else []:
        for batch_size in BF16_ROWS:
            written = make(name, batch_size=batch_size)
            # bf16 at every size: the measurement the thresholds come from
            mixed = make(name, bf16_from=0, batch_size=batch_size, precision="bf16-mixed")
            autocast_only = make(name, bf16_from=0, batch_size=batch_size, precision="bf16-mixed")
            res = run_rounds({"float32": switched(written, plain_backward_enabled, True),
                              "bf16": switched(mixed, plain_backward_enabled, True),
                              "autocast": switched(autocast_only, plain_backward_enabled, False)}, round_s, rounds)
            rows.append([name, batch_size, f"{res['float32']['ms']:.3f}", f"{res['bf16']['ms']:.3f}",
                         f"{paired_ratio(res['float32'], res['bf16']):.2f}x", f"{res['autocast']['ms']:.3f}",
                         f"{paired_ratio(res['autocast'], res['bf16']):.2f}x"])
    if rows:
        print_table(["algorithm", "rows", "written-out float32 ms", "bf16-mixed ms", "bf16 speed over float32",
                     "autocast-only bf16 ms", "bf16-mixed over autocast-only"], rows,
                    title=f"2. bf16-mixed (written-out passes with bf16 products) against the written-out float32 step and "
                          f"against autocast with autograd; WRITTEN_OUT_FASTER_BELOW = {precision.WRITTEN_OUT_FASTER_BELOW}")
    elif not bf16:
        print("2. skipped: this CPU has no bf16 units")
    rows = []
    for name in [n for n in names if n in ONE_COLUMN]:
        step = make(name)
        res = run_rounds({"one-column": switched(step, one_column, True),
                          "baddbmm": switched(step, one_column, False)}, round_s, max(2, rounds // 2))
        rows.append([name, f"{res['one-column']['ms']:.2f}", f"{res['baddbmm']['ms']:.2f}",
                     f"{paired_ratio(res['baddbmm'], res['one-column']):.2f}x"])
    if rows:
        print_table(["algorithm", "one-column heads ms/update", "baddbmm ms/update", "speed-up"], rows,
                    title="3. critic ensembles' one-column value heads against baddbmm (sample + update)")
    end = print_load("end")
    print(f"{args.threads} thread(s); CPU bf16 flags: {', '.join(precision.cpu_bf16_flags()) or 'none'}; "
          f"load {load[0]:.1f} -> {end[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
