#!/usr/bin/env python
"""bf16 by autocast or by an explicit cast in the layers (issue 32): which
is faster on a representative step.

    python benchmarks/precision_cast.py [--batch-size 256] [--threads 1] [--quick]

The step: a 2-critic ensemble (offrl's ``EnsembleLinear``), 5 -> 256 -> 256 -> 1,
ReLU, mean squared error against random targets, Adam (foreach), at
``--batch-size``; three variants in interleaved rounds:

* ``float32``: offrl's float32 path (oneDNN products where they pay);
* ``autocast``: the same modules under ``torch.autocast("cpu", bfloat16)``
  (what ``precision="bf16-mixed"`` runs), the output layer in float32
  (``offrl.models.layers.float32_head``);
* ``explicit``: each hidden layer casts its input, weight and bias to bf16
  itself (``baddbmm`` in bf16), the output layer float32.

The CPU's bf16 flags and the load are printed beside the figures.
"""

from __future__ import annotations

import argparse
import sys

from _harness import FULL, QUICK, add_common_args, check_threads, loop, paired_ratio, print_load, run_rounds, set_threads


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, d3rlpy=False)
    parser.add_argument("--batch-size", type=int, default=256)
    args = parser.parse_args(argv)
    check_threads(args, parser)
    import torch

    from offrl.models.layers import EnsembleLinear, float32_head
    from offrl.training.precision import autocast, cpu_bf16_flags

    set_threads(args.threads)
    torch.manual_seed(0)
    bf16 = torch.bfloat16
    layers = torch.nn.ModuleList([EnsembleLinear(2, 5, 256), EnsembleLinear(2, 256, 256), EnsembleLinear(2, 256, 1)])
    optim = torch.optim.Adam(layers.parameters(), 3e-4, foreach=True)
    x, y = torch.randn(args.batch_size, 5), torch.randn(args.batch_size, 1)

    def forward(explicit: bool) -> torch.Tensor:
        h = x
        for layer in layers[:-1]:
            if explicit:
                inputs = h.to(bf16)
                if inputs.dim() == 2:
                    inputs = inputs.unsqueeze(0).expand(2, *inputs.shape)
                h = torch.relu(torch.baddbmm(layer.bias.to(bf16), inputs, layer.weight.to(bf16)))
            else:
                h = torch.relu(layer(h))
        return float32_head(layers[-1], h) if not explicit else layers[-1](h.float())

    def step(mode: str) -> None:
        if mode == "autocast":
            with autocast(torch.device("cpu")):
                loss = ((forward(False) - y) ** 2).mean()
        else:
            loss = ((forward(mode == "explicit") - y) ** 2).mean()
        optim.zero_grad()
        loss.backward()
        optim.step()

    settings = QUICK if args.quick else FULL
    load = print_load("start")
    variants = {mode: loop(lambda mode=mode: step(mode)) for mode in ("float32", "autocast", "explicit")}
    res = run_rounds(variants, settings.cmp_round_s * 2, settings.cmp_rounds * 3, warmup=10)
    end = print_load("end")
    print(f"batch {args.batch_size}, {args.threads} thread(s); CPU bf16 flags: {', '.join(cpu_bf16_flags()) or 'none'}; "
          f"load {load[0]:.1f} -> {end[0]:.1f} on 2 CPUs")
    for mode, r in res.items():
        print(f"{mode:9s} {r['ms']:.3f} ms/step  speed-up over float32 {paired_ratio(res['float32'], r):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
